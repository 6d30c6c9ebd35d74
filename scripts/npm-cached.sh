#!/usr/bin/env bash
# Installs the npm packages pinned by DIR/package.json and DIR/package-lock.json into a cache
# keyed by the lock file ($PANDASTACK_CACHE/NAME/<hash>; `npm ci`, no install scripts) and
# prints the path of their node_modules. Idempotent: a second run with the same lock file
# fetches nothing.
#
#   scripts/npm-cached.sh DIR NAME
set -euo pipefail
dir=${1:?usage: npm-cached.sh DIR NAME}
name=${2:?usage: npm-cached.sh DIR NAME}
cache=${PANDASTACK_CACHE:-/var/cache/pandastack}
lock=$dir/package-lock.json
npmdir=$cache/$name/$(sha256sum "$lock" | cut -c1-16)
if [ ! -f "$npmdir/.done" ]; then
  rm -rf "$npmdir.tmp" && mkdir -p "$npmdir.tmp"
  cp "$dir/package.json" "$lock" "$npmdir.tmp/"
  (cd "$npmdir.tmp" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null)
  touch "$npmdir.tmp/.done" && rm -rf "$npmdir" && mv "$npmdir.tmp" "$npmdir"
fi
echo "$npmdir/node_modules"
