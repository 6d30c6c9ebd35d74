#!/usr/bin/env bash
# Prepare this Debian (bookworm) host for PandaStack: apt packages (QEMU, kernel source and build
# tools, rootfs tools; acorn and TypeScript for Node.js, which the fast tests' JavaScript and
# TypeScript code-interpreter kernels load on this host), then the guest kernel (cached). Idempotent: installs only what is missing.
# Needs root. Heavy artefacts go to $PANDASTACK_CACHE (default /var/cache/pandastack).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
log() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "must run as root (apt, mounts, network namespaces)"; exit 1
fi
export DEBIAN_FRONTEND=noninteractive

# QEMU >= 10, linux-source-6.12 and gVisor's runsc (for `pandastack bench compare`; bookworm's
# own is from 2022) come from bookworm-backports. Use the same mirror as the
# host's existing Debian sources (never a hard-coded host).
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
  mirror=$(awk '/^URIs:/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [ -z "$mirror" ]; then
    mirror=$(awk '$1=="deb" && $0 !~ /security/ {print ($2 ~ /^\[/ ? $3 : $2); exit}' /etc/apt/sources.list 2>/dev/null || true)
  fi
  [ -n "$mirror" ] || { log "cannot find the host's Debian mirror in /etc/apt"; exit 1; }
  log "adding bookworm-backports from $mirror"
  cat >/etc/apt/sources.list.d/pandastack-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi

want_backports=(qemu-system-x86 linux-source-6.12 runsc)
want=(bc bison flex libelf-dev libssl-dev cpio make gcc
      mmdebstrap e2fsprogs xfsprogs iproute2 iptables nftables
      python3 python3-venv curl jq busybox-static git openssh-client
      node-acorn node-typescript)
missing=()
for p in "${want_backports[@]}" "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  apt-get update -qq || true
  bp=()
  for p in "${missing[@]}"; do
    case " ${want_backports[*]} " in *" $p "*) bp+=("$p") ;; esac
  done
  if [ ${#bp[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends -t bookworm-backports "${bp[@]}" >/dev/null
  fi
  rest=()
  for p in "${missing[@]}"; do
    case " ${want_backports[*]} " in *" $p "*) ;; *) rest+=("$p") ;; esac
  done
  if [ ${#rest[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
  fi
fi
log "qemu: $(qemu-system-x86_64 --version | head -1)"

"$here/scripts/build-kernel.sh" >/dev/null
# The web console's third-party browser code (xterm.js), embedded when pandastack-api builds.
"$here/scripts/console-deps.sh"
log "host ready"
