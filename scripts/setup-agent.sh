#!/usr/bin/env bash
# Sets up this machine as one agent host of a PandaStack cluster (as root, Debian bookworm):
# host packages and the guest kernel (scripts/setup-host.sh, scripts/build-kernel.sh), the
# binaries and the `minimal` template image, the reflink data dir, the agent's certificate
# bundle, /etc/pandastack/agent.env and the systemd unit (deploy/systemd/pandastack-agent.service),
# then starts the agent. Idempotent: run it again to upgrade.
#
#   scripts/setup-agent.sh --bundle DIR --advertise HOST:PORT --server NAME=ADDR[,NAME=ADDR...] \
#     --objects s3://bucket/prefix
#
# --objects is the object store every replica and agent shares (volume backups go there; S3
# credentials as the AWS_* variables, added to /etc/pandastack/agent.env by hand).
# DIR is this host's bundle from `pandastack cluster cert --role agent --name <host id> --out DIR`
# (made where the cluster CA lives, copied here). The agent holds no database credentials.
set -euo pipefail

bundle= advertise= servers= objects= listen=0.0.0.0:7443
while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) bundle=$2; shift 2 ;;
    --advertise) advertise=$2; shift 2 ;;
    --server) servers=$2; shift 2 ;;
    --objects) objects=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$bundle" ] && [ -n "$advertise" ] && [ -n "$servers" ] && [ -n "$objects" ] || {
  sed -n '2,16p' "$0" >&2; exit 2; }
[ -f "$bundle/cert.pem" ] && [ -f "$bundle/key.pem" ] && [ -f "$bundle/ca.pem" ] ||
  { echo "$bundle is not a certificate bundle (ca.pem, cert.pem, key.pem)" >&2; exit 1; }

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
data=${PANDASTACK_DATA_DIR:-/var/lib/pandastack}
step() { printf '\n==> %s\n' "$*" >&2; }

step "host setup (packages, guest kernel)"
scripts/setup-host.sh
kernel=$(scripts/build-kernel.sh)

step "build"
cargo rustc --release --locked -p pandastack-guest --bin pandastack-guest -- -C target-feature=+crt-static
cargo build --release --locked -p pandastack
install -m 0755 target/release/pandastack /usr/local/bin/pandastack
install -m 0755 target/release/pandastack-guest /usr/local/bin/pandastack-guest
install -d -m 0755 /usr/share/pandastack
rm -rf /usr/share/pandastack/templates && cp -r templates /usr/share/pandastack/templates

step "data directory ($data) and the minimal template image"
pandastack host init --data-dir "$data"
pandastack template build minimal --agent /usr/local/bin/pandastack-guest >/dev/null

step "identity and settings (/etc/pandastack)"
install -d -m 0755 /etc/pandastack
install -d -m 0700 /etc/pandastack/agent
install -m 0644 "$bundle/ca.pem" "$bundle/cert.pem" /etc/pandastack/agent/
install -m 0600 "$bundle/key.pem" /etc/pandastack/agent/
cat > /etc/pandastack/agent.env <<ENV
PANDASTACK_IDENTITY=/etc/pandastack/agent
PANDASTACK_AGENT_LISTEN=$listen
PANDASTACK_ADVERTISE=$advertise
PANDASTACK_SERVERS=$servers
PANDASTACK_OBJECTS=$objects
PANDASTACK_DATA_DIR=$data
PANDASTACK_KERNEL=$kernel
PANDASTACK_GUEST_AGENT=/usr/local/bin/pandastack-guest
PANDASTACK_TEMPLATES_DIR=/usr/share/pandastack/templates
ENV

step "systemd unit"
install -m 0644 deploy/systemd/pandastack-agent.service /etc/systemd/system/
systemctl daemon-reload
systemctl enable --now pandastack-agent.service
systemctl --no-pager --lines=5 status pandastack-agent.service || true
