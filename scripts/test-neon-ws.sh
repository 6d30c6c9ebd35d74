#!/usr/bin/env bash
# @neondatabase/serverless in its WebSocket mode (Pool, Client, interactive transactions) against
# a throwaway `pandastack server` and a real managed database (tests/neon-ws, node:test). Expects
# what scripts/test.sh prepares (the guest kernel, the reflink data dir, the server binary at
# $PANDASTACK_BIN or target/debug/pandastack, the guest agent); the `postgres` template is baked
# on first use. Prints the `select 1` round trip over the WebSocket (p50 of 20).
#
#   scripts/test-neon-ws.sh [NODE --test ARGS…]
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
step() { printf '\n==> %s\n' "$*" >&2; }
name=neon-ws-test

step "neon-ws: npm packages (tests/neon-ws/package-lock.json)"
modules=$(scripts/npm-cached.sh tests/neon-ws neon-ws-npm)
[ -L tests/neon-ws/node_modules ] || rm -rf tests/neon-ws/node_modules # a local `npm install`'s
ln -sfn "$modules" tests/neon-ws/node_modules

step "neon-ws: server"
export PANDASTACK_BIN=${PANDASTACK_BIN:-$here/target/debug/pandastack}
on_exit() {
  local rc=$? log=/var/lib/pandastack/$name/server.log
  if [[ $rc -ne 0 && -f $log ]]; then
    echo "neon-ws: failed (exit $rc); the server's warnings and errors, then its last 40 lines:" >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ' (WARN|ERROR) ' | tail -n 60 >&2 || true
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 40 >&2
  fi
  scripts/dev-server.sh stop "$name"
}
trap on_exit EXIT
eval "$(scripts/dev-server.sh start "$name")"
# The front's self-signed certificate for *.db.localhost, made when the server started.
export PANDASTACK_DB_CA=/var/lib/pandastack/$name/db-tls/cert.pem

step "neon-ws: node --test tests/neon-ws"
node --test --test-reporter=spec "$@" tests/neon-ws/neon-ws.test.mjs
