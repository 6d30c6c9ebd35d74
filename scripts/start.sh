#!/usr/bin/env bash
# Start PandaStack on this host (single node). Today: prepares the host (packages, guest kernel,
# reflink data dir), builds the binaries and the `minimal` template, bakes it, then boots a
# sandbox from the snapshot and runs a command in it, printing how to use what is there.
# The REST server (`pandastack server`) is the next milestone; this script will start it.
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
cargo build --release --locked -p pandastack-guest -p pandastack
bin=target/release/pandastack

step "data directory ($PANDASTACK_DATA_DIR)"
"$bin" host init --data-dir "$PANDASTACK_DATA_DIR"

step "template image: minimal"
image=$("$bin" template build minimal --agent target/release/pandastack-guest)

step "doctor"
"$bin" doctor || true

step "sandbox: restore from the baked snapshot and run a command"
"$bin" run --template minimal --image "$image" -- python3 -c 'import platform; print("hello from", platform.node(), platform.release())'

cat <<EOF2

PandaStack runtime is ready.
  $bin run --template minimal -- <command…>     one-shot sandbox (restore, run, destroy)
  $bin doctor                                   host checks
  $bin bench runtime --image $image --json bench/runtime.json
EOF2
