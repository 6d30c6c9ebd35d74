#!/bin/bash
# Local end-to-end test of bootstrap.sh's WAL archiving, base backup and point-in-time recovery
# with this host's PostgreSQL (default 15), playing the host's part: an archiver loop that moves
# wal-outbox/ to an "object store" directory, a copy of the volume taken between backup-start
# and backup-stop, restores into copies of it. Run as root:
#   bash crates/pandastack-control/tests/bootstrap-pitr.sh
# Needs the PostgreSQL server and pg_cron for that version (bootstrap.sh preloads it):
#   apt-get install postgresql-15 postgresql-15-cron
# KEEP=1 keeps the temporary directory (and leaves nothing running).
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
BOOT="$HERE/src/databases/bootstrap.sh"
export PS_PG_BIN=${PS_PG_BIN:-/usr/lib/postgresql/15/bin}
export PS_SKIP_PGBOUNCER=1
[ "$(id -u)" = 0 ] || { echo "FAIL: run as root" >&2; exit 1; }
[ -x "$PS_PG_BIN/postgres" ] || { echo "FAIL: no PostgreSQL in $PS_PG_BIN" >&2; exit 1; }
[ -e "$("$PS_PG_BIN/pg_config" --pkglibdir 2>/dev/null || echo "$PS_PG_BIN/../lib")/pg_cron.so" ] ||
  { echo "FAIL: pg_cron is not installed for $PS_PG_BIN" >&2; exit 1; }

T=$(mktemp -d /tmp/pitr-local.XXXXXX)
chmod 0755 "$T"
STORE="$T/store"
mkdir -p "$STORE"
CLUSTERS=()
ARCHIVER=
cleanup() {
  set +e
  [ -z "$ARCHIVER" ] || kill "$ARCHIVER" 2>/dev/null
  for d in "${CLUSTERS[@]}"; do
    [ -e "$d/postmaster.pid" ] && runuser -u postgres -- "$PS_PG_BIN/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1
  done
  if [ "${KEEP:-}" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  exit 1
}
log() { echo "--- $*"; }

# A TCP port nobody listens on.
next_port=$((20000 + RANDOM % 20000))
free_port() {
  while ss -ltnH "sport = :$next_port" | grep -q .; do next_port=$((next_port + 1)); done
  echo "$next_port"
  next_port=$((next_port + 1))
}

# boot VOLUME PORT MODE [VAR=value...]: bootstrap.sh under dash, as the host's exec would.
boot() {
  local vol=$1 port=$2 mode=$3
  shift 3
  env PS_VOLUME="$vol" PS_ROLE=app PS_PASSWORD=secret-pw PS_MODE="$mode" \
    PS_PG_PORT="$port" PS_PG_SOCKET_DIR="$vol.sock" "$@" /bin/sh "$BOOT"
}
# sql VOLUME PORT SQL: one value, as postgres over the volume's socket, in database app.
sql() {
  runuser -u postgres -- psql -X -q -At -v ON_ERROR_STOP=1 -h "$1.sock" -p "$2" -d app -c "$3"
}

# archive-wal on its own: copy, identical retry, conflicting retry, backpressure.
log "archive-wal"
AV="$T/unit"
mkdir -p "$AV/pg17"
echo "include_if_exists = 'x'" >"$AV/pg17/postgresql.conf"
chown -R postgres:postgres "$AV/pg17"
# Only archive_setup's output is wanted: take the script from a start-less run of the function.
sed -n '/^archive_setup() {/,/^}/p' "$BOOT" >"$T/archive_setup.sh"
(
  PS_VOLUME="$AV" D="$AV/pg17" OUTBOX="$AV/wal-outbox"
  put_conf() { cat >"$1"; }
  include_conf() { :; }
  . "$T/archive_setup.sh"
  archive_setup
)
AW="$AV/bin/archive-wal"
head -c 1000 /dev/urandom >"$T/seg1"
head -c 1000 /dev/urandom >"$T/seg2"
chmod 0644 "$T/seg1" "$T/seg2"
runuser -u postgres -- "$AW" "$T/seg1" 000000010000000000000001 || fail "archive-wal copy"
cmp -s "$T/seg1" "$AV/wal-outbox/000000010000000000000001" || fail "archive-wal content"
runuser -u postgres -- "$AW" "$T/seg1" 000000010000000000000001 || fail "archive-wal identical retry"
runuser -u postgres -- "$AW" "$T/seg2" 000000010000000000000001 2>/dev/null && fail "archive-wal overwrote a different file"
for i in $(seq 2 256); do runuser -u postgres -- touch "$AV/wal-outbox/f$i"; done
runuser -u postgres -- "$AW" "$T/seg2" 000000010000000000000002 2>/dev/null && fail "archive-wal ignored a full outbox"
[ "$(ls -A "$AV/wal-outbox" | wc -l)" = 256 ] || fail "archive-wal left files behind"
grep -q "archive_command = '$AV/bin/archive-wal %p %f'" "$AV/pg17/pandastack-archive.conf" || fail "archive conf"

# a. A new database.
log "start"
V1="$T/vol1"
mkdir -p "$V1"
P1=$(free_port)
CLUSTERS+=("$V1/pg17")
boot "$V1" "$P1" start | tail -n 1 | grep -qx ready || fail "start"
[ "$("$PS_PG_BIN/pg_controldata" "$V1/pg17" | awk -F: '/Bytes per WAL segment/ {gsub(/ /, "", $2); print $2}')" = 1048576 ] ||
  fail "WAL segments are not 1 MiB"
boot "$V1" "$P1" start | tail -n 1 | grep -qx ready || fail "start again (idempotent)"
[ "$(grep -c "pandastack-archive.conf" "$V1/pg17/postgresql.conf")" = 1 ] || fail "include line not once"
sql "$V1" "$P1" "CREATE TABLE t (id serial PRIMARY KEY, batch text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
sql "$V1" "$P1" "INSERT INTO t (batch) SELECT 'base' FROM generate_series(1, 1000)"
[ "$(sql "$V1" "$P1" "SHOW archive_mode")" = on ] || fail "archive_mode"

# b. The host's archiver: finished files (no leading dot) to the store, then out of the outbox.
log "archiver"
(
  while :; do
    for f in "$V1"/wal-outbox/*; do
      [ -f "$f" ] || continue
      n=${f##*/}
      cp "$f" "$STORE/.$n.tmp" && mv "$STORE/.$n.tmp" "$STORE/$n" && rm -f "$f"
    done
    sleep 0.2
  done
) &
ARCHIVER=$!

# c. A base backup: backup-start, a crash-consistent copy of the running volume, backup-stop.
log "backup"
BK="$T/run-backup"
START_LSN=$(boot "$V1" "$P1" backup-start PS_BACKUP_DIR="$BK") || fail "backup-start"
echo "start LSN: $START_LSN"
[[ "$START_LSN" =~ ^[0-9A-F]+/[0-9A-F]+$ ]] || fail "backup-start printed $START_LSN"
[ "$(sql "$V1" "$P1" "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pandastack-backup'")" = 1 ] ||
  fail "no held backup session"
# Writes while the backup runs, some of them after the copy: the copy is crash-consistent only.
sql "$V1" "$P1" "INSERT INTO t (batch) SELECT 'during' FROM generate_series(1, 500)"
# (The real host freezes the file system with fsfreeze for its snapshot; /tmp here is this
# machine's own file system, so a plain copy of the running cluster, which is at least as torn.)
cp -a "$V1" "$T/snapshot"
sql "$V1" "$P1" "INSERT INTO t (batch) SELECT 'during' FROM generate_series(1, 500)"
boot "$V1" "$P1" backup-stop PS_BACKUP_DIR="$BK" >"$T/stop.out" || fail "backup-stop"
STOP_LSN=$(sed -n 1p "$T/stop.out")
STOP_MS=$(sed -n 2p "$T/stop.out")
tail -n +3 "$T/stop.out" >"$T/label"
echo "stop LSN: $STOP_LSN, stop time: $STOP_MS"
cat "$T/label"
[[ "$STOP_LSN" =~ ^[0-9A-F]+/[0-9A-F]+$ ]] || fail "stop LSN $STOP_LSN"
[[ "$STOP_MS" =~ ^[0-9]{13}$ ]] || fail "stop time $STOP_MS"
now_ms=$(date +%s%3N)
[ $((now_ms - STOP_MS)) -lt 60000 ] && [ $((now_ms - STOP_MS)) -ge 0 ] || fail "stop time not now"
head -n 1 "$T/label" | grep -q "^START WAL LOCATION: $START_LSN " || fail "label does not start at $START_LSN"
grep -qx "LABEL: pandastack" "$T/label" || fail "label"
[ "$(tail -c 1 "$T/label" | od -An -c | tr -d ' ')" = '\n' ] || fail "label does not end with a newline"
[ "$(sql "$V1" "$P1" "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pandastack-backup'")" = 0 ] ||
  fail "backup session still there"
boot "$V1" "$P1" backup-stop PS_BACKUP_DIR="$T/no-such-backup" 2>/dev/null && fail "backup-stop without a backup succeeded"

# d. Batch A, the target time T1, batch B.
log "batches"
sleep 1.5
sql "$V1" "$P1" "INSERT INTO t (batch) SELECT 'A' FROM generate_series(1, 100)"
sleep 1.5
T1=$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)
sleep 1.5
sql "$V1" "$P1" "INSERT INTO t (batch) SELECT 'B' FROM generate_series(1, 100)"
LAST=$(boot "$V1" "$P1" flush-archive) || fail "flush-archive"
[ -e "$STORE/$LAST" ] || [ -e "$V1/wal-outbox/$LAST" ] || fail "flush-archive: $LAST is not in the outbox"
echo "T1 = $T1; waiting for $LAST in the store"
for _ in $(seq 100); do [ -e "$STORE/$LAST" ] && break; sleep 0.2; done
[ -e "$STORE/$LAST" ] || fail "$LAST was not archived"
ls "$STORE" | tail -n 3
[ "$(ls "$STORE" | wc -l)" -ge 3 ] || fail "too few archived files"
ls "$STORE" | grep -q '\.backup$' || fail "no backup history file archived"
WANT_ALL=$(sql "$V1" "$P1" "SELECT count(*) FROM t")
[ "$WANT_ALL" = 2200 ] || fail "source has $WANT_ALL rows"

# e. Restores into copies of the snapshot.
# restore NAME TARGET: prints the new volume; checks the recover output.
LABEL="$(cat "$T/label"; echo x)"
LABEL=${LABEL%x} # verbatim, with its final newline
restore() {
  local name=$1 target=$2 vol="$T/$1" port
  port=$(free_port)
  cp -a "$T/snapshot" "$vol"
  mkdir "$vol/wal-restore"
  cp "$STORE"/* "$vol/wal-restore/"
  CLUSTERS+=("$vol/pg17")
  boot "$vol" "$port" recover PS_BACKUP_LABEL="$LABEL" PS_TARGET_TIME="$target" >"$T/$name.out" 2>"$T/$name.err" ||
    { cat "$T/$name.err"; fail "recover $name"; }
  RPORT=$port
  RVOL=$vol
}
check_restored() {
  local name=$1
  cat "$T/$name.out"
  [ "$(tail -n 2 "$T/$name.out" | head -n 1)" = ready ] || fail "$name: no ready"
  read -r word tli ts < <(tail -n 1 "$T/$name.out")
  [ "$word" = recovered ] || fail "$name: last line not recovered"
  [ "$tli" -ge 2 ] || fail "$name: timeline $tli"
  [ -n "${ts:-}" ] || fail "$name: no last replayed commit time"
  [ "$(sql "$RVOL" "$RPORT" "SELECT pg_is_in_recovery()")" = f ] || fail "$name: still in recovery"
  [ ! -e "$RVOL/wal-restore" ] || fail "$name: wal-restore left"
  grep -q restore_command "$RVOL/pg17/pandastack-recovery.conf" && fail "$name: recovery conf left"
  grep -q "archive_command = '$RVOL/bin/archive-wal" "$RVOL/pg17/pandastack-archive.conf" || fail "$name: archive conf"
  # Writable, and archiving its new timeline into its own outbox.
  sql "$RVOL" "$RPORT" "INSERT INTO t (batch) VALUES ('after')"
  for _ in $(seq 50); do [ -e "$RVOL/wal-outbox/$(printf %08X "$tli").history" ] && break; sleep 0.2; done
  [ -e "$RVOL/wal-outbox/$(printf %08X "$tli").history" ] || fail "$name: timeline history not archived"
  sql "$RVOL" "$RPORT" "SELECT pg_is_in_recovery()" >/dev/null
  PGPASSWORD=secret-pw psql -X -At -h 127.0.0.1 -p "$RPORT" -U app -d app -c "SELECT 1" >/dev/null ||
    fail "$name: owner cannot log in with its password"
}
counts() { sql "$RVOL" "$RPORT" "SELECT string_agg(batch || '=' || n, ' ' ORDER BY batch) FROM (SELECT batch, count(*) n FROM t WHERE batch <> 'after' GROUP BY batch) c"; }
stop_restored() { runuser -u postgres -- "$PS_PG_BIN/pg_ctl" -D "$RVOL/pg17" -m fast -w stop >/dev/null; }

log "recover to T1 = $T1"
restore at-t1 "$T1"
check_restored at-t1
got=$(counts)
echo "rows: $got"
[ "$got" = "A=100 base=1000 during=1000" ] || fail "at T1: $got"
grep -q 'recovery ended before configured recovery target' "$RVOL/log/postgresql.log" && fail "at T1: fell back"
stop_restored

log "recover to a time after the last commit (falls back to everything archived)"
restore future "$(date -u -d '+1 day' +%Y-%m-%dT%H:%M:%S.%3NZ)"
check_restored future
got=$(counts)
echo "rows: $got"
[ "$got" = "A=100 B=100 base=1000 during=1000" ] || fail "future: $got"
grep -q 'recovery ended before configured recovery target was reached' "$RVOL/log/postgresql.log" ||
  fail "future: the fallback was not exercised"
stop_restored

log "recover everything archived"
restore all ""
check_restored all
got=$(counts)
echo "rows: $got"
[ "$got" = "A=100 B=100 base=1000 during=1000" ] || fail "all: $got"
stop_restored

# The source kept running throughout, untouched.
[ "$(sql "$V1" "$P1" "SELECT count(*) FROM t")" = "$WANT_ALL" ] || fail "source changed"
[ "$(sql "$V1" "$P1" "SELECT pg_is_in_recovery()")" = f ] || fail "source"

echo PASS
