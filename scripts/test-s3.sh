#!/usr/bin/env bash
# A throwaway S3 API server for the tests (the object storage suite runs against a local
# directory and this).
#
#   eval "$(scripts/test-s3.sh start NAME)"   # exports PANDASTACK_TEST_S3=s3://… and AWS_*
#   scripts/test-s3.sh stop NAME
#
# Installs moto (`moto[server]` from PyPI) into a venv in $PANDASTACK_CACHE if missing, starts
# `moto_server` on a free loopback port in the background (state in /tmp/pandastack-s3-NAME) and
# creates a bucket. Objects live in the server's memory; `stop` ends it and removes the directory.
set -euo pipefail

cmd=${1:-}
name=${2:-test}
dir=/tmp/pandastack-s3-$name
venv=${PANDASTACK_CACHE:-/var/cache/pandastack}/venv-moto
bucket=pandastack-test
log() { printf 'test-s3: %s\n' "$*" >&2; }

alive() {
  [ -f "$dir/pid" ] && [ -f "$dir/port" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null &&
    curl -fsS -o /dev/null "http://127.0.0.1:$(cat "$dir/port")/moto-api/" 2>/dev/null
}

stop() {
  if [ -f "$dir/pid" ]; then
    # Its own session and process group (setsid below): end the group, then wait for it.
    pid=$(cat "$dir/pid")
    kill -- "-$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 -- "-$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

case "$cmd" in
start)
  if [ ! -x "$venv/bin/moto_server" ]; then
    log "installing moto[server] into $venv"
    mkdir -p "$(dirname "$venv")"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check 'moto[server]>=5,<6' >&2
  fi
  if alive; then
    port=$(cat "$dir/port")
  else
    stop
    mkdir -p "$dir"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "$port" >"$dir/port"
    setsid "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    for _ in $(seq 100); do alive && break; sleep 0.1; done
    alive || { log "moto_server did not start; $dir/server.log:"; cat "$dir/server.log" >&2; exit 1; }
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test "$venv/bin/python" -c '
import sys, boto3
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1")
s3.create_bucket(Bucket=sys.argv[2])' "http://127.0.0.1:$port" "$bucket"
  fi
  log "moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)') S3 on 127.0.0.1:$port, bucket $bucket ($dir)"
  echo "export PANDASTACK_TEST_S3=s3://$bucket/$name"
  echo "export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1"
  echo "export AWS_ENDPOINT_URL=http://127.0.0.1:$port"
  ;;
stop)
  stop
  ;;
*)
  echo "usage: $0 start|stop [NAME]" >&2
  exit 2
  ;;
esac
