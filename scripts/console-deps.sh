#!/usr/bin/env bash
# Installs the web console's third-party browser code (xterm.js and its fit add-on, pinned in
# console/package.json and console/package-lock.json) from the npm registry into a cache keyed by
# the lock file, and copies the files the console serves into console/vendor/ (not committed;
# `rust-embed` embeds it with the rest of console/ when pandastack-api is built). Idempotent: a
# second run with the same lock file copies from the cache and fetches nothing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
modules=$("$here/scripts/npm-cached.sh" "$here/console" console-npm)

vendor="$here/console/vendor"
mkdir -p "$vendor"
m="$modules/@xterm"
install_if_changed() { cmp -s "$1" "$2" || install -m 0644 "$1" "$2"; }
install_if_changed "$m/xterm/lib/xterm.mjs" "$vendor/xterm.mjs"
install_if_changed "$m/xterm/css/xterm.css" "$vendor/xterm.css"
install_if_changed "$m/xterm/LICENSE" "$vendor/xterm.LICENSE.txt"
install_if_changed "$m/addon-fit/lib/addon-fit.mjs" "$vendor/addon-fit.mjs"
install_if_changed "$m/addon-fit/LICENSE" "$vendor/addon-fit.LICENSE.txt"
