#!/usr/bin/env bash
# The PostgreSQL drivers people use, against a real managed database through the TLS front, on
# its direct and its pooled (PgBouncer) endpoint (tests/db-drivers): psycopg 3, asyncpg and
# SQLAlchemy (pytest); postgres.js, node-postgres, Drizzle ORM and @neondatabase/serverless
# over HTTP (node:test); the host's pgbench; then the first connection to a hibernated database
# with each driver's default timeouts. Called by scripts/test.sh as one job of
# scripts/run-tests.py; it expects what that script prepares (the guest kernel, the reflink data
# dir, target/debug/pandastack and target/release/pandastack-guest; the `postgres` template is
# built on first use and cached in $PANDASTACK_CACHE).
#
#   scripts/test-db-drivers.sh
#
# One server of its own (scripts/dev-server.sh, `dbdrivers-test`) and one database for the
# whole run (a create takes 15-40 s under TCG), deleted at the end. Every suite runs even when
# one before it failed; the exit status is the first failure's. Python packages come from PyPI
# into a venv in $PANDASTACK_CACHE, npm packages from tests/db-drivers/package-lock.json into
# tests/db-drivers/node_modules (git-ignored; `npm ci` only when the lock file changed).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
export PANDASTACK_CACHE=${PANDASTACK_CACHE:-/var/cache/pandastack}
step() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*" >&2; }
name=dbdrivers-test
dir=tests/db-drivers

step "dbdrivers: dependencies (pgbench from Debian, PyPI venv, npm ci)"
if ! command -v pgbench >/dev/null 2>&1; then
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-client >/dev/null
fi
venv=$PANDASTACK_CACHE/venv-dbdrivers
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check \
  'psycopg[binary]>=3.2,<4' 'asyncpg>=0.30,<1' 'sqlalchemy>=2.0,<3' 'pytest>=8,<9'
if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.dbdrivers-lock.json"; then
  (cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null)
  cp "$dir/package-lock.json" "$dir/node_modules/.dbdrivers-lock.json"
fi

step "dbdrivers: server"
export PANDASTACK_BIN=${PANDASTACK_BIN:-$here/target/debug/pandastack}
export PANDASTACK_GUEST_AGENT=${PANDASTACK_GUEST_AGENT:-$here/target/release/pandastack-guest}
db_id=""
api() { # METHOD PATH [BODY]
  curl -fsS -X "$1" -H "Authorization: Bearer $PANDASTACK_API_KEY" -H 'Content-Type: application/json' \
    ${3:+--data "$3"} "$PANDASTACK_BASE_URL$2"
}
# On failure the server's warnings and errors and its last lines go to stderr before the stop
# removes its directory.
on_exit() {
  local rc=$? log=/var/lib/pandastack/$name/server.log
  if [[ -n $db_id ]]; then api DELETE "/v1/databases/$db_id" >/dev/null 2>&1 || true; fi
  if [[ $rc -ne 0 && -f $log ]]; then
    echo "dbdrivers: failed (exit $rc); the server's warnings and errors, then its last 40 lines:" >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E ' (WARN|ERROR) ' | tail -n 60 >&2 || true
    echo "dbdrivers: ..." >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 40 >&2
  fi
  scripts/dev-server.sh stop "$name"
}
trap on_exit EXIT
eval "$(scripts/dev-server.sh start "$name")"

step "dbdrivers: one database for the run"
# idle_seconds 0: it hibernates only when the hibernation tests ask.
db_id=$(api POST /v1/databases '{"name":"dbdrivers","idle_seconds":0}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
export PANDASTACK_DBDRIVERS_ID=$db_id
echo "dbdrivers: database $db_id ready after ${SECONDS}s" >&2

rc=0
run() { "$@" || { local r=$?; echo "dbdrivers: FAILED ($r): $*" >&2; [[ $rc -ne 0 ]] || rc=$r; }; }
pytest=("$venv/bin/python" -m pytest -q -rs -p no:cacheprovider)

step "dbdrivers: Python (psycopg 3, asyncpg, SQLAlchemy 2) and pgbench, direct and pooled"
run "${pytest[@]}" "$dir/python" --ignore "$dir/python/test_hibernate.py"

step "dbdrivers: Node (postgres.js, pg, Drizzle ORM, @neondatabase/serverless HTTP), direct and pooled"
run node --test --test-reporter=spec "$dir/node/drivers.test.mjs"

step "dbdrivers: @neondatabase/serverless over WebSocket (Pool, Client, interactive transactions)"
# tests/neon-ws on this run's database (scripts/test-neon-ws.sh runs it alone); its npm packages
# from a cache keyed by its lock file.
modules=$(scripts/npm-cached.sh tests/neon-ws neon-ws-npm)
[ -L tests/neon-ws/node_modules ] || rm -rf tests/neon-ws/node_modules
ln -sfn "$modules" tests/neon-ws/node_modules
run env PANDASTACK_NEON_WS_DATABASE="$db_id" PANDASTACK_DB_CA="/var/lib/pandastack/$name/db-tls/cert.pem" \
  node --test --test-reporter=spec tests/neon-ws/neon-ws.test.mjs

step "dbdrivers: pandastack db dump (the database's own pg_dump) | psql: a round trip"
# A table with 2000 rows dumped as plain SQL by the database's own pg_dump (17, in its VM),
# dropped, loaded again with this host's psql (15), and compared by checksum.
pds=(target/debug/pandastack db)
[[ -x ${PANDASTACK_BIN:-} ]] && pds=("$PANDASTACK_BIN" db)
sum_sql="select count(*) || ':' || md5(string_agg(id || '/' || body, ',' order by id)) from roundtrip"
roundtrip() {
  "${pds[@]}" psql "$db_id" -- -qAt -v ON_ERROR_STOP=1 \
    -c "create table roundtrip (id int primary key, body text not null)" \
    -c "insert into roundtrip select g, md5(g::text) || ' é' from generate_series(1, 2000) g" || return 1
  local before after
  before=$("${pds[@]}" psql "$db_id" -- -qAt -c "$sum_sql") || return 1
  "${pds[@]}" dump "$db_id" -o /tmp/dbdrivers-roundtrip.sql -- --table=roundtrip || return 1
  "${pds[@]}" psql "$db_id" -- -qAt -c "drop table roundtrip" || return 1
  "${pds[@]}" psql "$db_id" -- -qAt -v ON_ERROR_STOP=1 -f /tmp/dbdrivers-roundtrip.sql >/dev/null || return 1
  after=$("${pds[@]}" psql "$db_id" -- -qAt -c "$sum_sql") || return 1
  rm -f /tmp/dbdrivers-roundtrip.sql
  echo "dbdrivers: roundtrip before $before, after $after" >&2
  [[ $before == 2000:* && $before == "$after" ]]
}
run roundtrip

step "dbdrivers: a hibernated database's first connection, default timeouts"
run "${pytest[@]}" "$dir/python/test_hibernate.py"
run node --test --test-reporter=spec "$dir/node/hibernate.mjs"

step "dbdrivers: delete the database"
api DELETE "/v1/databases/$db_id" >/dev/null && db_id=""
step "dbdrivers: done (exit $rc)"
exit "$rc"
