#!/usr/bin/env bash
# The whole PandaStack test suite, from a clean clone on a fresh Debian bookworm host (as root):
# installs what is missing, builds the guest kernel and the `minimal` test image (both cached in
# $PANDASTACK_CACHE), then runs format and lint checks and every test, real guests included.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
# Each step's header says when it started, in seconds since the suite did (the CI budget is 90
# minutes; a slow step shows in the log).
step() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*" >&2; }
# A clean clone gains nothing from incremental compilation, and its caches would double the
# target directory's size.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

step "host setup (packages, guest kernel)"
scripts/setup-host.sh
export PANDASTACK_KERNEL
PANDASTACK_KERNEL=$(scripts/build-kernel.sh)

step "format and lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The sync Python client is generated from the async one; a stale copy fails here.
python3 scripts/gen-sync-client.py --check
python3 scripts/gen-python-wire.py --check  # sdk/python's _wire.py against openapi.json

step "build: guest agent (release) and pandastack"
# The guest agent is linked statically: it is PID 1 in images of any libc (or none). The flag
# is given here because there is no stable place where it sticks to one package: rustflags in
# .cargo/config.toml ([build] or [target.x86_64-unknown-linux-gnu]) also reach proc-macro crates
# when no --target is given, and crt-static refuses those. `cargo rustc` flags are not remembered
# either: a later `cargo build --release` of the workspace (or of this package) relinks
# target/release/pandastack-guest dynamically, so check, and run this line again after one.
cargo rustc --release --locked -p pandastack-guest --bin pandastack-guest -- -C target-feature=+crt-static
ldd target/release/pandastack-guest 2>&1 | grep -Eq 'statically linked|not a dynamic executable' ||
    { echo "target/release/pandastack-guest is not statically linked" >&2; exit 1; }
cargo build --locked -p pandastack

step "data dir: reflink-capable XFS for runtime tests"
target/debug/pandastack host init
export PANDASTACK_TEST_DATA_DIR=/var/lib/pandastack/test
# The data dir's image is sparse: give what earlier runs freed back to the disk (an image mounted
# before `host init` mounted with `discard` keeps every block it ever held), now and at the end.
trim_data_dir() { fstrim /var/lib/pandastack 2>/dev/null || true; }
trim_data_dir

step "test image: minimal template with the agent"
# Servers started by the tests put this agent into the templates they build (POST /v1/templates).
export PANDASTACK_GUEST_AGENT=$PWD/target/release/pandastack-guest
export PANDASTACK_TEST_ROOTFS
PANDASTACK_TEST_ROOTFS=$(target/debug/pandastack template build minimal --agent target/release/pandastack-guest)
echo "kernel: $PANDASTACK_KERNEL" >&2
echo "rootfs: $PANDASTACK_TEST_ROOTFS" >&2

step "test-only packages: pebble (ACME test CA), openssh-server (ssh git sources)"
for p in pebble openssh-server; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
done

step "PostgreSQL for the store's suite and the client suite's server"
eval "$(scripts/test-postgres.sh start ci)"
trap 'scripts/test-postgres.sh stop ci; trim_data_dir' EXIT

step "database bootstrap script: WAL archiving, base backup, point-in-time recovery"
# The script the database VMs run, driven on the host's PostgreSQL with the host's part played
# by shell (crates/pandastack-control/tests/bootstrap-pitr.sh); the e2e suite runs it in VMs.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgmajor=$(basename "$(dirname "$pgbin")")
if [ ! -e "/usr/lib/postgresql/$pgmajor/lib/pg_cron.so" ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "postgresql-$pgmajor-cron" >/dev/null
fi
PS_PG_BIN=$pgbin bash crates/pandastack-control/tests/bootstrap-pitr.sh

step "S3 API server (moto) for the object storage suite"
trap 'scripts/test-postgres.sh stop ci; scripts/test-s3.sh stop ci; trim_data_dir' EXIT
eval "$(scripts/test-s3.sh start ci)"

step "tests, and the client SDKs and examples against a real server"
# Every test in a process of its own, the client suites, the console's browser tests
# (scripts/test-console.sh) and the PostgreSQL driver suite (scripts/test-db-drivers.sh) as
# three more jobs, two at a time across all of them, longest first (scripts/run-tests.py): guests run under TCG on 2 cores, so two is
# the load the tests are written for, and `cargo test`'s one binary at a time left a core idle
# beside every binary with a single long test. The soak's short variant (bench soak: cycles with
# forks and hibernates, then nothing left behind; a kill -9 with running sandboxes, re-attached)
# is one more job; its full run is `pandastack bench soak` (bench/README.md).
python3 scripts/run-tests.py --jobs 2 --also clients=scripts/test-clients.sh --also console=scripts/test-console.sh \
  --also dbdrivers=scripts/test-db-drivers.sh \
  --also "soak=target/debug/pandastack bench soak --cycles 20 --fork-every 5 --hibernate-every 4 --restart-sandboxes 4 --data-dir /var/lib/pandastack/test"

step "API fuzzing (schemathesis) against a real server"
# A throwaway server of its own (limits, a catalog of `minimal` only), so nothing fuzzing does can
# reach the client suites' server; bounded in cases per operation and in time (scripts/fuzz-api.sh).
scripts/fuzz-api.sh --own-server
