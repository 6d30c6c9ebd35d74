#!/usr/bin/env bash
# The web console's browser tests (tests/console): Debian's Chromium driven by Playwright (from
# PyPI; no browser download) against a real `pandastack server` with real guests. Called by
# scripts/test.sh as one job of scripts/run-tests.py; it expects what that script prepares (the
# guest kernel, the `minimal` image, the reflink data dir, target/debug/pandastack and
# target/release/pandastack-guest).
#
#   scripts/test-console.sh [--update-screenshots] [PYTEST ARGS…]
#
# Screenshots of every page go to $PANDASTACK_CONSOLE_SHOTS (default a temporary directory);
# --update-screenshots copies them into docs/console/, which the README shows.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
step() { printf '\n==> %s\n' "$*" >&2; }
update=0
if [[ ${1:-} == --update-screenshots ]]; then update=1; shift; fi

step "console: Chromium (Debian) and Playwright (PyPI)"
if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
venv=$PANDASTACK_CACHE/venv-console
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'playwright>=1.50,<2' 'pytest>=8,<9'
export PANDASTACK_CHROMIUM=/usr/bin/chromium
# axe-core (npm), run inside the page by tests/console/test_a11y.py; cached by its lock file.
PANDASTACK_AXE=$(scripts/npm-cached.sh tests/console/npm console-test-npm)/axe-core/axe.min.js
export PANDASTACK_AXE

step "console: server"
export PANDASTACK_BIN=${PANDASTACK_BIN:-$here/target/debug/pandastack}
export PANDASTACK_GUEST_AGENT=${PANDASTACK_GUEST_AGENT:-$here/target/release/pandastack-guest}
shots=${PANDASTACK_CONSOLE_SHOTS:-$(mktemp -d /tmp/console-shots.XXXXXX)}
export PANDASTACK_CONSOLE_SHOTS=$shots
on_exit() {
  local rc=$? log=/var/lib/pandastack/console-test/server.log
  if [[ $rc -ne 0 && -f $log ]]; then
    echo "console: failed (exit $rc); the server's warnings and errors, then its last 40 lines:" >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ' (WARN|ERROR) ' | tail -n 60 >&2 || true
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 40 >&2
  fi
  scripts/dev-server.sh stop console-test
}
trap on_exit EXIT
# tests/console/test_apps.py deploys an app from a `git daemon` on this loopback port; the
# server fetches from loopback only where the operator allows it.
PANDASTACK_CONSOLE_GIT_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export PANDASTACK_CONSOLE_GIT_PORT
export PANDASTACK_DEV_SERVER_ARGS="${PANDASTACK_DEV_SERVER_ARGS:+$PANDASTACK_DEV_SERVER_ARGS }--allow-internal-fetch 127.0.0.1:$PANDASTACK_CONSOLE_GIT_PORT"
eval "$(scripts/dev-server.sh start console-test)"

step "console: browser tests"
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/console "$@"

if [[ $update == 1 ]]; then
  # Every page at a laptop's width, and two at a phone's (the accessibility test takes all
  # of them in both themes).
  mkdir -p docs/console
  for f in "$shots"/*.png; do
    case $(basename "$f") in phone-*) ;; *) cp "$f" docs/console/ ;; esac
  done
  cp "$shots"/phone-dark-sandboxes.png "$shots"/phone-light-databases.png docs/console/
  echo "console: screenshots copied to docs/console/" >&2
fi
