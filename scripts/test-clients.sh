#!/usr/bin/env bash
# The client test suites — Python SDK (pytest), the server's Prometheus endpoint read by the
# official Prometheus client's OpenMetrics parser, the MCP server through the official MCP Python
# SDK, TypeScript SDK (node:test), the examples they run as smoke tests and the agent-framework
# recipes (examples/recipes/run.sh, with scripted models) — against a real `pandastack server` with
# real guests. Called by scripts/test.sh after the Rust tests (it expects the guest kernel, the
# `minimal` image, the reflink data dir and target/{debug/pandastack,release/pandastack-guest}
# to exist).
# Python packages come from PyPI into venvs in $PANDASTACK_CACHE; npm packages into
# sdk/typescript/node_modules and examples/recipes/node_modules (git-ignored).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
step() { printf '\n==> %s\n' "$*" >&2; }

step "clients: install test dependencies"
venv=$PANDASTACK_CACHE/venv-sdk
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check './sdk/python[test]'
# The official MCP Python SDK drives tests/mcp (the MCP server over stdio and /mcp); the official
# Prometheus client's OpenMetrics parser reads GET /metrics in tests/operations.
"$venv/bin/pip" install -q --disable-pip-version-check 'mcp>=2.3,<3' 'prometheus-client>=0.20,<1'
(cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run -s gen:check && npm run -s build && npm run -s test:types)

step "clients: server"
# On PostgreSQL when the test script started one (scripts/test.sh does): the whole client suite
# then runs against a server whose state store is PostgreSQL; SQLite is what the Rust suites use.
if [ -n "${PANDASTACK_TEST_POSTGRES:-}" ] && [ "$PANDASTACK_TEST_POSTGRES" != skip ]; then
  db="clients_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
  psql -q "$PANDASTACK_TEST_POSTGRES" -c "CREATE DATABASE $db"
  export PANDASTACK_STATE="${PANDASTACK_TEST_POSTGRES%/*}/$db"
  echo "clients: state store $PANDASTACK_STATE" >&2
fi
export PANDASTACK_BIN=${PANDASTACK_BIN:-$here/target/debug/pandastack}
export PANDASTACK_GUEST_AGENT=${PANDASTACK_GUEST_AGENT:-$here/target/release/pandastack-guest}
# Sandbox networking on: examples/python/agent_deploys_app.py deploys a Vite app, and its build
# VM runs `npm install` against the npm registry. Under names and addresses no other test uses
# (`tscl`, 10.204.80.0/24; the Rust suites' pools take other /24s of 10.201-10.204, and they
# run before this suite, not beside it), with few spare slots on 2 cores. `dev-server.sh stop` (the EXIT trap)
# removes the namespaces, links and nftables table the server leaves behind.
export PANDASTACK_DEV_NETWORK=on
export PANDASTACK_DEV_SERVER_ARGS="${PANDASTACK_DEV_SERVER_ARGS:+$PANDASTACK_DEV_SERVER_ARGS }--net-name tscl --net-base 10.204.80.0/24 --net-spare 2"
# Webhook deliveries to the Python suite's receiver on this one loopback port
# (sdk/python/tests/test_webhook_signature.py): every other loopback address stays refused.
export PANDASTACK_TEST_WEBHOOK_PORT=${PANDASTACK_TEST_WEBHOOK_PORT:-18099}
PANDASTACK_DEV_SERVER_ARGS+=" --allow-internal-fetch 127.0.0.1:$PANDASTACK_TEST_WEBHOOK_PORT"
eval "$(scripts/dev-server.sh start clients-test)"
# On failure the server's warnings and errors and its last lines go to stderr before the stop
# removes its directory: the log is what tells a hang in a guest from one in the server.
on_exit() {
  local rc=$? log=/var/lib/pandastack/clients-test/server.log
  if [[ $rc -ne 0 && -f $log ]]; then
    echo "clients: failed (exit $rc); the server's warnings and errors, then its last 60 lines:" >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ' (WARN|ERROR) ' | tail -n 80 >&2 || true
    echo "clients: ..." >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 60 >&2
  fi
  scripts/dev-server.sh stop clients-test
}
trap on_exit EXIT
export PANDASTACK_TEST_TEMPLATE=minimal PANDASTACK_TEMPLATE=minimal
# An operator's key for the hosts tests (the key the server printed is a workspace key).
PANDASTACK_TEST_ADMIN_KEY=$("$PANDASTACK_BIN" keys create --admin --name sdk-admin \
  --data-dir /var/lib/pandastack/clients-test)
export PANDASTACK_TEST_ADMIN_KEY

step "clients: Python SDK + examples"
"$venv/bin/python" -m pytest -q sdk/python/tests

step "clients: Prometheus scrape (GET /metrics through the official client's OpenMetrics parser)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/operations

step "clients: MCP server (official Python SDK over stdio and streamable HTTP; MCP Inspector CLI over stdio)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/mcp
tests/mcp/inspector.sh

step "clients: TypeScript SDK + examples"
(cd sdk/typescript && npm test)

step "clients: agent-framework recipes (OpenAI Agents SDK, LangGraph, MCP, Vercel AI SDK; scripted models)"
# Always the scripted models: a key in the caller's environment would send them to OpenAI.
env -u OPENAI_API_KEY examples/recipes/run.sh
