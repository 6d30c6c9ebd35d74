#!/usr/bin/env bash
# Build the PandaStack guest kernel from Debian's linux-source-6.12 and our config fragment.
#
# The result (an uncompressed ELF vmlinux with a PVH entry, plus the final .config) is cached in
# "$PANDASTACK_CACHE/kernel/<key>/", where <key> hashes the source package version, the fragment
# and this script. A cached build is reused; a changed input builds a new one.
# Prints the path of the vmlinux on its last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cache=${PANDASTACK_CACHE:-/var/cache/pandastack}
fragment=$here/guest/kernel/pandastack.config
src_pkg=linux-source-6.12

log() { printf '[kernel] %s\n' "$*" >&2; }

version=$(dpkg-query -W -f='${Version}' "$src_pkg" 2>/dev/null || true)
if [ -z "$version" ]; then
  log "package $src_pkg is not installed; run scripts/setup-host.sh first"
  exit 1
fi
key=$( { echo "$src_pkg $version"; cat "$fragment" "$0"; } | sha256sum | cut -c1-16)
out=$cache/kernel/$key
if [ -f "$out/vmlinux" ]; then
  log "cached: $out/vmlinux"
  echo "$out/vmlinux"
  exit 0
fi

work=$cache/kernel/build-$key
rm -rf "$work"
mkdir -p "$work"
log "unpacking $src_pkg $version"
tar -C "$work" -xf /usr/src/$src_pkg.tar.xz
cd "$work"/$src_pkg

log "configuring: tinyconfig + $(basename "$fragment")"
make -s tinyconfig >/dev/null
scripts/kconfig/merge_config.sh -m .config "$fragment" >/dev/null
make -s olddefconfig >/dev/null

# Every option the fragment sets must survive olddefconfig; a silently dropped one is a bug here.
missing=0
while IFS= read -r line; do
  case "$line" in
    CONFIG_*=*)
      if ! grep -qx "$line" .config; then log "fragment option not applied: $line"; missing=1; fi ;;
    "# CONFIG_"*" is not set")
      opt=${line#\# }; opt=${opt%% *}
      if grep -q "^$opt=" .config; then log "fragment option not disabled: $opt"; missing=1; fi ;;
  esac
done <"$fragment"
[ "$missing" = 0 ] || { log "config fragment does not apply cleanly"; exit 1; }

log "building vmlinux with $(nproc) jobs"
start=$(date +%s)
make -s -j"$(nproc)" vmlinux >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; log "build failed; log: $work/build.log"; exit 1; }
log "built in $(( $(date +%s) - start )) s"

mkdir -p "$out.tmp"
cp vmlinux "$out.tmp/vmlinux"
cp .config "$out.tmp/config"
echo "$src_pkg $version" >"$out.tmp/source"
rm -rf "$out"
mv "$out.tmp" "$out"
cd /
rm -rf "$work"
log "cached: $out/vmlinux"
echo "$out/vmlinux"
