#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests (the store's suite runs against SQLite and this).
#
#   eval "$(scripts/test-postgres.sh start NAME)"   # exports PANDASTACK_TEST_POSTGRES=postgres://…
#   scripts/test-postgres.sh stop NAME
#
# Installs Debian's `postgresql` if missing, creates a cluster in /tmp/pandastack-pg-NAME owned by
# the `postgres` user (trust auth, loopback only, a free port) and starts it. `stop` removes it.
set -euo pipefail

cmd=${1:-}
name=${2:-test}
dir=/tmp/pandastack-pg-$name
log() { printf 'test-postgres: %s\n' "$*" >&2; }

bindir() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$b" ] && [ -x "$b/initdb" ] && echo "$b"
}

case "$cmd" in
start)
  [ "$(id -u)" -eq 0 ] || { log "must run as root (installs packages, runs as the postgres user)"; exit 1; }
  if ! bin=$(bindir); then
    log "installing postgresql"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    bin=$(bindir)
  fi
  if [ -f "$dir/port" ] && runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    port=$(cat "$dir/port")
  else
    rm -rf "$dir"
    mkdir -p "$dir"
    chown postgres: "$dir"
    runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >/dev/null
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "$port" >"$dir/port"
    runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-h 127.0.0.1 -p $port -k $dir -c fsync=off -c max_connections=200" start >/dev/null
  fi
  log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port ($dir)"
  echo "export PANDASTACK_TEST_POSTGRES=postgres://postgres@127.0.0.1:$port/postgres"
  ;;
stop)
  if [ -d "$dir" ]; then
    if bin=$(bindir); then
      runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
  fi
  ;;
*)
  echo "usage: $0 start|stop [NAME]" >&2
  exit 2
  ;;
esac
