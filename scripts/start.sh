#!/usr/bin/env bash
# Start PandaStack on this host (single node): prepares the host (packages, guest kernel, reflink
# data dir), builds the binaries and the `minimal` template image, then runs `pandastack server`
# in the foreground (SQLite and the data dir as embedded defaults). On first start the server
# creates a workspace and prints its API key (also written to $PANDASTACK_DATA_DIR/admin.key)
# and a curl example. Other templates are built and baked on their first use.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
export PANDASTACK_DATA_DIR=${PANDASTACK_DATA_DIR:-/var/lib/pandastack}
step() { printf '\n==> %s\n' "$*" >&2; }

step "host setup"
scripts/setup-host.sh
export PANDASTACK_KERNEL
PANDASTACK_KERNEL=$(scripts/build-kernel.sh)

step "build"
# The guest agent is linked statically: it is PID 1 in images of any libc (or none). The flag
# is given here because there is no stable place where it sticks to one package: rustflags in
# .cargo/config.toml ([build] or [target.x86_64-unknown-linux-gnu]) also reach proc-macro crates
# when no --target is given, and crt-static refuses those. `cargo rustc` flags are not remembered
# either: a later `cargo build --release` of the workspace (or of this package) relinks
# target/release/pandastack-guest dynamically, so check, and run this line again after one.
cargo rustc --release --locked -p pandastack-guest --bin pandastack-guest -- -C target-feature=+crt-static
ldd target/release/pandastack-guest 2>&1 | grep -Eq 'statically linked|not a dynamic executable' ||
    { echo "target/release/pandastack-guest is not statically linked" >&2; exit 1; }
cargo build --release --locked -p pandastack
bin=target/release/pandastack

step "data directory ($PANDASTACK_DATA_DIR)"
"$bin" host init --data-dir "$PANDASTACK_DATA_DIR"

step "template image: minimal"
image=$("$bin" template build minimal --agent target/release/pandastack-guest)

step "doctor"
"$bin" doctor || true

step "server on ${PANDASTACK_LISTEN:-127.0.0.1:8080} (Ctrl-C stops it; sandboxes keep running)"
echo "web console: http://${PANDASTACK_LISTEN:-127.0.0.1:8080}/ (sign in with the API key)" >&2
exec "$bin" server --data-dir "$PANDASTACK_DATA_DIR" --key-file "$PANDASTACK_DATA_DIR/admin.key" \
    --listen "${PANDASTACK_LISTEN:-127.0.0.1:8080}"
