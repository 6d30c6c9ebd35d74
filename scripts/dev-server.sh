#!/usr/bin/env bash
# A throwaway `pandastack server` for client tests (SDKs, CLI, examples).
#
#   scripts/dev-server.sh start NAME [PORT]   start one (data dir /var/lib/pandastack/NAME), wait
#                                             until it answers, print `export …` lines for
#                                             PANDASTACK_BASE_URL and PANDASTACK_API_KEY
#   scripts/dev-server.sh stop NAME           stop it, destroy its sandboxes, remove its data dir
#
# Needs what scripts/test.sh prepares first: the guest kernel ($PANDASTACK_KERNEL or the cache),
# target/release/pandastack + pandastack-guest (PANDASTACK_BIN overrides the server binary) and a
# reflink data dir (`pandastack host init`). Templates come from ./templates and are baked on
# first use; tests use `minimal`. Sandbox networking is off unless PANDASTACK_DEV_NETWORK=auto|on
# (servers started side by side would otherwise share one network pool's names).
# PANDASTACK_DEV_SERVER_ARGS adds `pandastack server` flags (split on spaces), e.g. limits; with
# networking on, give each server names and addresses of its own there (`--net-name tscl
# --net-base 10.204.80.0/24`): `stop` then also removes the network objects of that name —
# namespaces `<name>-N`, host links `<name>vN`, nftables table `pandastack_<name>` — which the
# server leaves behind when it stops. The default name (`ps`, a real server's) is never removed.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cmd=${1:?usage: dev-server.sh start|stop NAME [PORT]}
name=${2:?usage: dev-server.sh start|stop NAME [PORT]}
[[ $name =~ ^[A-Za-z0-9_-]+$ ]] || { echo "dev-server: bad name '$name'" >&2; exit 2; }
dir=/var/lib/pandastack/$name
bin=${PANDASTACK_BIN:-$here/target/release/pandastack}

# The --net-name in PANDASTACK_DEV_SERVER_ARGS (`--net-name X` or `--net-name=X`), if any.
net_name_arg() {
    local prev="" w
    for w in ${PANDASTACK_DEV_SERVER_ARGS:-}; do
        [[ $prev == --net-name ]] && { echo "$w"; return; }
        [[ $w == --net-name=* ]] && { echo "${w#--net-name=}"; return; }
        prev=$w
    done
    return 0
}

# Removes the network objects named NAME (what `pandastack server --net-name NAME` makes).
clean_net() {
    local n=$1 x
    [[ $n =~ ^[A-Za-z0-9_]+$ && $n != ps ]] || return 0
    for x in $(ip netns list 2>/dev/null | awk '{print $1}'); do
        if [[ $x == "$n-"* ]]; then ip netns del "$x" 2>/dev/null || true; fi
    done
    for x in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
        if [[ $x == "${n}v"* ]]; then ip link del "$x" 2>/dev/null || true; fi
    done
    nft delete table inet "pandastack_$n" 2>/dev/null || true
}

stop() {
    if [[ -f $dir/server.pid ]]; then
        pid=$(cat "$dir/server.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    # Sandboxes outlive the server by design; a throwaway server's must go with it: processes
    # naming the data dir, and VM processes running in it (a woken VM's command line has only
    # paths relative to its sandbox directory).
    pkill -9 -f -- "$dir/" 2>/dev/null || true
    local p
    for p in $(pgrep -f -- '^qemu-system-' || true); do
        if [[ $(readlink "/proc/$p/cwd" 2>/dev/null) == "$dir/"* ]]; then kill -9 "$p" 2>/dev/null || true; fi
    done
    # Its network objects, once no VM uses them (start wrote the name down).
    if [[ -s $dir/net-name ]]; then clean_net "$(cat "$dir/net-name")"; fi
    rm -rf "$dir"
}

case $cmd in
start)
    # Ports the kernel says are free (a random number could be an ephemeral port in use: CI saw
    # "Address already in use" for the proxy port); a start that still loses a race to another
    # process for one of them is tried again with new ports, unless the caller chose the port.
    free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    for attempt in 1 2 3; do
        port=${3:-$(free_port)}
        proxy_port=$(free_port)
        db_port=$(free_port)
        stop
        mkdir -p "$dir"
        if [[ ${PANDASTACK_DEV_NETWORK:-off} != off ]]; then
            net=$(net_name_arg)
            if [[ -n $net ]]; then
                clean_net "$net" # left by a run that did not stop its server
                echo "$net" >"$dir/net-name"
            fi
        fi
        "$bin" server --data-dir "$dir" --key-file "$dir/admin.key" --listen "127.0.0.1:$port" \
            --proxy-listen "127.0.0.1:$proxy_port" --preview-url "http://localhost:$proxy_port" \
            --db-listen "127.0.0.1:$db_port" \
            --network "${PANDASTACK_DEV_NETWORK:-off}" ${PANDASTACK_DEV_SERVER_ARGS:-} >"$dir/server.log" 2>&1 &
        echo $! >"$dir/server.pid"
        for _ in $(seq 600); do
            if [[ -s $dir/admin.key ]] && curl -fsS "http://127.0.0.1:$port/v1/health" >/dev/null 2>&1; then
                echo "export PANDASTACK_BASE_URL=http://127.0.0.1:$port"
                echo "export PANDASTACK_API_KEY=$(cat "$dir/admin.key")"
                echo "export PANDASTACK_PROXY=127.0.0.1:$proxy_port"
                echo "export PANDASTACK_DB_FRONT=127.0.0.1:$db_port"
                exit 0
            fi
            kill -0 "$(cat "$dir/server.pid")" 2>/dev/null || break
            sleep 0.1
        done
        if [[ -z ${3:-} && $attempt -lt 3 ]] && grep -q "Address already in use" "$dir/server.log"; then
            echo "dev-server: a port was taken meanwhile; trying other ports" >&2
            continue
        fi
        break
    done
    echo "dev-server: server did not come up; log:" >&2
    cat "$dir/server.log" >&2
    stop
    exit 1
    ;;
stop) stop ;;
*) echo "usage: dev-server.sh start|stop NAME [PORT]" >&2; exit 2 ;;
esac
