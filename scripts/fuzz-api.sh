#!/usr/bin/env bash
# API fuzzing: schemathesis generates requests from the server's own OpenAPI document
# (`GET /v1/openapi.json`) — valid ones, boundary values and schema-violating ones — and checks
# every answer: no 5xx, status, content type, headers and body as documented, schema-violating
# input refused with a 4xx, no hang (a per-request timeout). Then the same without a key and with
# a wrong one: everything answers 401 `unauthorized` (405 for a method a path does not serve)
# except `GET /v1/health` and the document.
#
#   scripts/fuzz-api.sh BASE_URL KEY     fuzz a running server, e.g. http://127.0.0.1:8080 "$KEY"
#   scripts/fuzz-api.sh --own-server     start a throwaway server (scripts/dev-server.sh) with the
#                                        limits below, fuzz it, stop it (scripts/test.sh does this)
#
# At the end of each run it prints the cases sent per route group and their answers by class.
#
# Bounds: PANDASTACK_FUZZ_EXAMPLES test cases per operation in the fuzzing phase (default 25;
# the operations that start VMs get fewer, see the config below), one pass of the coverage phase
# (boundary and invalid values), a per-request timeout of 60 s, and a time budget for the whole
# run, PANDASTACK_FUZZ_BUDGET seconds (default 480): past it the run fails. PANDASTACK_FUZZ_SEED
# replays a run (every run prints its seed).
#
# What it creates: sandboxes of PANDASTACK_FUZZ_TEMPLATE (default `minimal`) that the
# `/v1/sandboxes/{id}/…` operations are pointed at, so requests reach the guest rather than 404:
# one for work inside (exec, files, code, ports, logs, snapshot, fork), one for pause, resume,
# hibernate and wake, one for PATCH (a generated short TTL ends it), one for DELETE; a key for
# `DELETE /v1/keys/{id}` (the key fuzzing uses is never the one given), two schedules (one the
# `/v1/schedules/{name}/…` operations are pointed at, one for DELETE; a yearly cron, so they fire
# only when a generated `…/run` or PATCH makes them) — and whatever the
# generated requests create. On exit it deletes every sandbox, snapshot and volume and revokes every key
# that appeared during the run, so run it by hand only against a workspace nobody else is using
# at the time.
#
# Exclusions and restrictions (also in docs/testing.md, "API fuzzing"):
# - POST /v1/templates is not fuzzed with a key (without one it is: 401): a valid request queues
#   a template build that bootstraps Debian (minutes of CPU and network per request). Its edge
#   validation is covered by the template tests (crates/pandastack-testkit/tests/templates_fast.rs).
# - Creates never name a catalog template that is not baked yet (its first use builds it, as
#   above): the hooks put the fixture's template in its place. The throwaway server's catalog
#   holds only the fixture's template.
# - Forks ask for at most 2 children (valid counts above 2 are lowered; invalid ones are sent
#   as generated), and VM-heavy operations (create, fork, snapshot, hibernate, wake, pause,
#   resume, re-bake) get PANDASTACK_FUZZ_VM_EXAMPLES cases (default 3).
# - `?follow=1` log streams and file watches are read for one event (they never end while the
#   sandbox lives); so is `GET /v1/events` as a stream, from cursor 0.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
log() { printf 'fuzz-api: %s\n' "$*" >&2; }
usage() { echo "usage: $0 BASE_URL KEY | --own-server" >&2; exit 2; }

examples=${PANDASTACK_FUZZ_EXAMPLES:-25}
vm_examples=${PANDASTACK_FUZZ_VM_EXAMPLES:-3}
budget=${PANDASTACK_FUZZ_BUDGET:-480}
template=${PANDASTACK_FUZZ_TEMPLATE:-minimal}
seed=${PANDASTACK_FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
start=$SECONDS
work=$(mktemp -d /tmp/pandastack-fuzz.XXXXXX)
own=""

cleanup_server() {
  if [ -n "$own" ]; then scripts/dev-server.sh stop "$own" || true; fi
  rm -rf "$work"
}
trap cleanup_server EXIT

case "${1:-}" in
--own-server)
  [ $# -eq 1 ] || usage
  # A server of its own: the catalog holds only the fixture's template, limits keep a burst of
  # generated creates and forks to a few VMs (the rest are answered 429, which is documented).
  own=fuzz-test
  export PANDASTACK_BIN=${PANDASTACK_BIN:-$here/target/debug/pandastack}
  export PANDASTACK_GUEST_AGENT=${PANDASTACK_GUEST_AGENT:-$here/target/release/pandastack-guest}
  mkdir -p "$work/templates"
  cp "templates/$template.toml" "$work/templates/"
  started=$(PANDASTACK_DEV_SERVER_ARGS="--templates-dir $work/templates --max-sandboxes 10 --creates-per-minute 60" \
    scripts/dev-server.sh start "$own") || { echo "fuzz-api: the server did not start" >&2; exit 1; }
  eval "$started"
  base=$PANDASTACK_BASE_URL
  key=$PANDASTACK_API_KEY
  ;;
http://* | https://*)
  [ $# -eq 2 ] || usage
  base=${1%/}
  base=${base%/v1}
  key=$2
  ;;
*) usage ;;
esac

venv=$PANDASTACK_CACHE/venv-fuzz
if [ ! -x "$venv/bin/schemathesis" ]; then
  log "installing schemathesis into $venv"
  mkdir -p "$(dirname "$venv")"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'schemathesis>=4,<5' >&2
fi
log "$("$venv/bin/schemathesis" --version) against $base (seed $seed)"

# A tiny JSON client for the fixtures and the clean-up (python3: no jq needed).
api() { # METHOD PATH [BODY] -> body on stdout; fails on a non-2xx answer
  "$venv/bin/python" - "$base" "$key" "$@" <<'EOF'
import sys, urllib.request
base, key, method, path = sys.argv[1:5]
body = sys.argv[5].encode() if len(sys.argv) > 5 else None
req = urllib.request.Request(base + path, data=body, method=method,
                             headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=300) as r:
        sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    sys.exit(f"{method} {path}: {e.code} {e.read().decode()[:500]}")
EOF
}
json() { "$venv/bin/python" -c "import json, sys; d = json.load(sys.stdin); print($1)"; }
ids() { api GET "$1" | json '"\n".join(x["id"] for x in d["data"])'; }
names() { api GET "$1" | json '"\n".join(x["name"] for x in d["data"])'; }

ids "/v1/sandboxes?limit=1000" >"$work/sandboxes.before"
ids "/v1/snapshots?limit=1000" >"$work/snapshots.before"
ids /v1/keys >"$work/keys.before"
names "/v1/volumes?limit=1000" >"$work/volumes.before"
names "/v1/schedules?limit=1000" >"$work/schedules.before"
ids "/v1/webhooks?limit=1000" >"$work/webhooks.before"

cleanup() {
  local n=0 id
  key=$admin_key
  # First: a schedule left behind would go on making sandboxes.
  for name in $(names "/v1/schedules?limit=1000" | grep -vxFf "$work/schedules.before" || true); do
    api DELETE "/v1/schedules/$name" >/dev/null || log "could not delete schedule $name"
  done
  # Then webhooks: the deletes below would be sent to whatever public URL a case named.
  for id in $(ids "/v1/webhooks?limit=1000" | grep -vxFf "$work/webhooks.before" || true); do
    api DELETE "/v1/webhooks/$id" >/dev/null || log "could not delete webhook $id"
  done
  for id in $(ids "/v1/sandboxes?limit=1000" | grep -vxFf "$work/sandboxes.before" || true); do
    api DELETE "/v1/sandboxes/$id" >/dev/null || log "could not delete sandbox $id"
    n=$((n + 1))
  done
  for id in $(ids "/v1/snapshots?limit=1000" | grep -vxFf "$work/snapshots.before" || true); do
    api DELETE "/v1/snapshots/$id" >/dev/null || log "could not delete snapshot $id"
  done
  # After the sandboxes: a volume mounted read-write cannot be deleted.
  for name in $(names "/v1/volumes?limit=1000" | grep -vxFf "$work/volumes.before" || true); do
    api DELETE "/v1/volumes/$name" >/dev/null || log "could not delete volume $name"
  done
  for id in $(ids /v1/keys | grep -vxFf "$work/keys.before" || true); do
    api DELETE "/v1/keys/$id" >/dev/null 2>&1 || true # already revoked is fine
  done
  log "clean-up: deleted $n sandboxes and what else the run created"
}
admin_key=$key
trap 'cleanup || true; cleanup_server' EXIT

# Fixtures. Fuzzing runs on a key of its own, so a generated revoke cannot end the caller's.
sandbox() { api POST /v1/sandboxes "{\"template\":\"$template\",\"ttl_seconds\":3600,\"metadata\":{\"fuzz\":\"$1\"}}" | json 'd["id"]'; }
fixture=$(sandbox work)
lifecycle=$(sandbox lifecycle)
patched=$(sandbox patch)
victim=$(sandbox delete)
victim_key=$(api POST /v1/keys '{"name":"fuzz-revoke"}' | json 'd["id"]')
volume=fuzz-$seed victim_volume=fuzz-$seed-delete
for v in "$volume" "$victim_volume"; do
  api POST /v1/volumes "{\"name\":\"$v\",\"size_gb\":1}" >/dev/null
done
schedule=fuzz-$seed victim_schedule=fuzz-$seed-delete
for v in "$schedule" "$victim_schedule"; do
  api POST /v1/schedules "{\"name\":\"$v\",\"cron\":\"0 0 1 1 *\",\"target\":{\"type\":\"sandbox_exec\",\"template\":\"$template\",\"command\":\"true\"}}" >/dev/null
done
key=$(api POST /v1/keys '{"name":"fuzz"}' | json 'd["secret"]')
avoid=$(api GET /v1/templates | json '",".join(t["name"] for t in d["data"] if t["state"] != "ready")')
log "fixtures: sandboxes $fixture (work), $lifecycle (lifecycle), $patched (patch), $victim (delete), key $victim_key (revoke), volumes $volume (work), $victim_volume (delete), schedules $schedule (work), $victim_schedule (delete); not baked: ${avoid:-none}"

cat >"$work/schemathesis.toml" <<EOF
request-timeout = 60
seed = $seed

[cache]
enabled = false  # nothing written to the working directory

[generation]
max-examples = $examples
database = "none"

[[operations]]
include-path-regex = '^/v1/sandboxes/\{id\}'
exclude-operation-id = ["delete_sandbox", "update_sandbox", "fork_sandbox", "create_snapshot", "hibernate_sandbox", "wake_sandbox", "pause_sandbox", "resume_sandbox", "sandbox_logs", "watch_files"]
parameters = { "path.id" = "$fixture" }

[[operations]]
include-operation-id = ["fork_sandbox", "create_snapshot"]
parameters = { "path.id" = "$fixture" }
generation = { max-examples = $vm_examples }

[[operations]]
include-operation-id = ["hibernate_sandbox", "wake_sandbox", "pause_sandbox", "resume_sandbox"]
parameters = { "path.id" = "$lifecycle" }
generation = { max-examples = $vm_examples }

[[operations]]
include-operation-id = "update_sandbox"
parameters = { "path.id" = "$patched" }

[[operations]]
include-operation-id = ["sandbox_logs", "watch_files"]
parameters = { "path.id" = "$fixture" }
max-stream-events = 1

[[operations]]
include-operation-id = "template_build_logs"
max-stream-events = 1

# As a stream it goes on while the server runs; from the oldest event (the fixtures' creates
# wrote some) one is there at once.
[[operations]]
include-operation-id = "list_events"
parameters = { "query.cursor" = "0" }
max-stream-events = 1

[[operations]]
include-operation-id = ["create_sandbox", "bake_template"]
generation = { max-examples = $vm_examples }

[[operations]]
include-operation-id = "delete_sandbox"
parameters = { "path.id" = "$victim" }

[[operations]]
include-path-regex = '^/v1/volumes/\{name\}'
exclude-operation-id = "delete_volume"
parameters = { "path.name" = "$volume" }

[[operations]]
include-operation-id = "delete_volume"
parameters = { "path.name" = "$victim_volume" }

[[operations]]
include-path-regex = '^/v1/schedules/\{name\}'
exclude-operation-id = ["delete_schedule", "run_schedule"]
parameters = { "path.name" = "$schedule" }

# Each run makes a sandbox.
[[operations]]
include-operation-id = "run_schedule"
parameters = { "path.name" = "$schedule" }
generation = { max-examples = $vm_examples }

[[operations]]
include-operation-id = "delete_schedule"
parameters = { "path.name" = "$victim_schedule" }

[[operations]]
include-operation-id = "revoke_key"
parameters = { "path.id" = "$victim_key" }
EOF

export SCHEMATHESIS_HOOKS=$here/scripts/fuzz_api_hooks.py
export PANDASTACK_FUZZ_TEMPLATE=$template PANDASTACK_FUZZ_AVOID_TEMPLATES=$avoid
checks=no_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method,allow_header_conformance
failed=0
# Cases sent per route group (the path's first part after /v1/: sandboxes, volumes, databases,
# apps, functions, schedules, …) and how they were answered, from the run's HAR record.
counts() { # NAME HAR-FILE
  [ -f "$2" ] || { log "$1: no record of the requests sent"; return; }
  "$venv/bin/python" - "$1" "$2" <<'EOF'
import collections, json, sys, urllib.parse
name, path = sys.argv[1:3]
groups = collections.defaultdict(collections.Counter)
try:
    entries = json.load(open(path))["log"]["entries"]
except (OSError, ValueError, KeyError) as e:
    # A record schemathesis could not finish (a run cut off by its budget) says nothing sure.
    print(f"fuzz-api: {name}: the record of its requests could not be read ({e})", file=sys.stderr)
    sys.exit(0)
for e in entries:
    parts = urllib.parse.urlsplit(e["request"]["url"]).path.split("/")
    group = parts[2] if len(parts) > 2 and parts[1] == "v1" else "(other)"
    status = e["response"]["status"]
    groups[group]["cases"] += 1
    # 507 is a documented answer (a full quota or disk), not a server error: counted apart.
    groups[group]["507" if status == 507 else f"{status // 100}xx" if status else "no answer"] += 1
print(f"fuzz-api: {name}: cases per route group", file=sys.stderr)
for g, c in sorted(groups.items()):
    answers = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k != "cases")
    print(f"fuzz-api:   {g:<14} {c['cases']:>6}  ({answers})", file=sys.stderr)
EOF
}
run() { # NAME AUTH-MODE [schemathesis args…]
  local name=$1 mode=$2 left
  shift 2
  left=$((budget - (SECONDS - start)))
  if [ "$left" -le 0 ]; then
    log "$name: no time left of the ${budget}s budget"
    failed=1
    return
  fi
  log "$name (at most ${left}s)"
  local rc=0
  PANDASTACK_FUZZ_AUTH=$mode timeout --kill-after=10 "$left" \
    "$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "$base/v1/openapi.json" \
    --phases examples,coverage,fuzzing --no-color --output-truncate false \
    --report har --report-har-path "$work/$mode.har" "$@" || rc=$?
  counts "$name" "$work/$mode.har"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    log "$name: over the time budget of ${budget}s"
  fi
  [ "$rc" -eq 0 ] || { log "$name: failed (exit $rc)"; failed=1; }
}

run "with a key" key -H "Authorization: Bearer $key" --checks "$checks,ignored_auth" \
  --exclude-operation-id create_template
# Without a valid key nothing reaches a handler: few cases suffice.
run "without a key" none --checks "$checks,auth_is_required" -n 5
run "with a wrong key" wrong --checks "$checks,auth_is_required" -n 5 \
  -H "Authorization: Bearer pds_$(printf '0%.0s' $(seq 64))"

# The server is still usable: the fixture answers an exec.
api POST "/v1/sandboxes/$fixture/exec" '{"cmd":"true"}' >/dev/null ||
  { log "the fixture sandbox no longer execs"; failed=1; }
log "done in $((SECONDS - start))s (budget ${budget}s, $examples cases per operation, seed $seed)"
exit "$failed"
