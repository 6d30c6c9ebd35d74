# PandaStack managed database: brings the cluster on the data volume up inside a `postgres`
# template VM. Run as root through the guest agent, once per VM (a new database, a branch, a
# new VM for an existing volume) and again to rotate the password; idempotent.
#
# Environment: PS_VOLUME (mount point of the data volume), PS_ROLE (owner role, also the
# database's name), PS_PASSWORD (the role's password), PS_MODE:
#   start         initdb if needed, WAL archiving set up, PostgreSQL, owner role, PgBouncer;
#                 prints `ready`. PS_NEW_ARCHIVE=1 (a branch): the outbox copied from the
#                 parent is emptied first.
#   password      the owner role's password (and PgBouncer's userlist); prints `ready`.
#   backup-start  PS_BACKUP_DIR (not on the volume): opens a session held in the background
#                 in `pg_backup_start`; prints the start LSN once it is in backup mode.
#   backup-stop   PS_BACKUP_DIR: ends that session's backup; prints the stop LSN, the stop
#                 time (epoch ms), then the backup label verbatim (one line each, the label's
#                 own lines after).
#   flush-archive switches to a new WAL segment and waits until the finished one is in
#                 wal-outbox/; prints its name.
#   recover       PS_BACKUP_LABEL (backup-stop's label), PS_TARGET_TIME (ISO 8601, or empty
#                 for everything archived): point-in-time recovery of a volume copied from a
#                 snapshot taken during a base backup, with the archived WAL (and every
#                 `*.history`) in `wal-restore/`; then like `start`. Prints `ready`, then
#                 `recovered <timeline> <last replayed commit time, UTC, or empty>`.
#   stop          a fast shutdown (clients told why) before the VM is removed.
# Overridable for tests on another host: PS_PG_BIN, PS_PG_PORT, PS_PG_SOCKET_DIR, and
# PS_SKIP_PGBOUNCER=1 (skips PgBouncer when it is not installed).
set -eu
B=${PS_PG_BIN:-/usr/lib/postgresql/17/bin}
PORT=${PS_PG_PORT:-5432}
SOCK=${PS_PG_SOCKET_DIR:-/var/run/postgresql}
D="$PS_VOLUME/pg17"
LOG="$PS_VOLUME/log/postgresql.log"
OUTBOX="$PS_VOLUME/wal-outbox"
RESTORE="$PS_VOLUME/wal-restore"
export PGHOST="$SOCK" PGPORT="$PORT"
as_pg() { runuser -u postgres -- "$@"; }
die() { echo "bootstrap: $*" >&2; exit 1; }
# Where the script is, on stderr: the host shows stderr only when the script fails, so a
# timeout names the step that hung.
at() { echo "bootstrap: $(date -u +%T) $*" >&2; }

# Whether this cluster's postmaster runs: its pid file names a live process whose working
# directory is the cluster (`pg_ctl status` only asks whether the pid is alive, and a stale pid
# file on a volume can name some other live process in a new VM, or another cluster's on a copy).
running() {
  pid=$(head -n 1 "$D/postmaster.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$(readlink -f "$D")" ]
}

# Installs stdin as a configuration file of the cluster, atomically, owned by postgres.
put_conf() {
  cat >"$1.new"
  chown postgres:postgres "$1.new"
  chmod 0600 "$1.new"
  mv "$1.new" "$1"
}

# Makes postgresql.conf include $1 (once: appended only when missing).
include_conf() {
  grep -qxF "include_if_exists = '$1'" "$D/postgresql.conf" ||
    echo "include_if_exists = '$1'" >>"$D/postgresql.conf"
}

pg_start() {
  rm -f "$D/postmaster.pid"
  as_pg "$B/pg_ctl" -D "$D" -l "$LOG" -w -t "$1" \
    -o "-c config_file=$D/postgresql.conf -c port=$PORT -c unix_socket_directories=$SOCK" start
}

# A new cluster, made beside its final place and renamed in: a VM that dies half-way leaves no
# directory that looks like a cluster. 1 MiB WAL segments: `archive_timeout = 1s` ends a segment
# every second under load, and each one is pulled and uploaded whole.
init_cluster() {
  [ ! -s "$D/PG_VERSION" ] || return 0
  at "initdb"
  rm -rf "$D.new"
  install -d -o postgres -g postgres -m 0700 "$D.new"
  as_pg "$B/initdb" -D "$D.new" -U postgres --locale C.UTF-8 -E UTF8 --data-checksums \
    --wal-segsize=1 --auth-local=peer --auth-host=scram-sha-256 >"$PS_VOLUME/initdb.log" 2>&1
  cat >"$D.new/pandastack.conf" <<CONF
# PandaStack: settings of a managed database (on its volume: they move with the data).
listen_addresses = 'localhost'
port = $PORT
unix_socket_directories = '$SOCK'
password_encryption = 'scram-sha-256'
synchronous_commit = on
fsync = on
full_page_writes = on
wal_level = replica
max_wal_senders = 10
shared_preload_libraries = 'pg_stat_statements,pg_cron'
cron.database_name = 'postgres'
logging_collector = off
CONF
  echo "include_if_exists = 'pandastack.conf'" >>"$D.new/postgresql.conf"
  cat >"$D.new/pg_hba.conf" <<'HBA'
# PandaStack: the superuser only over the local socket (peer); everyone else with SCRAM.
local   all   postgres                  peer
local   all   all                       scram-sha-256
host    all   postgres   0.0.0.0/0      reject
host    all   postgres   ::/0           reject
host    all   all        127.0.0.1/32   scram-sha-256
host    all   all        ::1/128        scram-sha-256
HBA
  chown postgres:postgres "$D.new/pandastack.conf" "$D.new/pg_hba.conf"
  sync
  mv "$D.new" "$D"
  sync
}

# Continuous WAL archiving, (re)written on every start so that clusters made before it get it
# too and the paths always are this volume's. The guest cannot reach the object store: the
# archive_command only puts each finished segment into wal-outbox/, and the host pulls it from
# there, uploads it and removes it.
archive_setup() {
  install -d -o postgres -g postgres -m 0700 "$OUTBOX"
  install -d -m 0755 "$PS_VOLUME/bin"
  cat >"$PS_VOLUME/bin/archive-wal.new" <<'SH'
#!/bin/sh
# PandaStack: PostgreSQL's archive_command (`archive-wal %p %f`, run as postgres in the cluster
# directory). Copies a finished WAL file into wal-outbox/ beside this bin/, durably and
# atomically (the host takes only names without a leading dot); PostgreSQL recycles its own
# copy once this exits 0, and retries later (keeping it) when it does not.
set -eu
out="$(dirname "$(dirname "$0")")/wal-outbox"
p=$1
f=$2
# Backpressure: the host is not pulling. PostgreSQL keeps the WAL until it does.
if [ "$(ls -A "$out" | wc -l)" -ge 256 ]; then
  echo "archive-wal: $out is full" >&2
  exit 1
fi
# Already there: a retry after a crash between this copy and PostgreSQL's bookkeeping.
if [ -e "$out/$f" ]; then
  if cmp -s "$p" "$out/$f"; then exit 0; fi
  echo "archive-wal: $out/$f exists with other content" >&2
  exit 1
fi
t="$out/.$f.tmp"
rm -f "$t"
cp "$p" "$t"
sync "$t"
mv "$t" "$out/$f"
sync "$out"
SH
  chmod 0755 "$PS_VOLUME/bin/archive-wal.new"
  mv "$PS_VOLUME/bin/archive-wal.new" "$PS_VOLUME/bin/archive-wal"
  # WAL must not be what fills the volume: PostgreSQL's default max_wal_size (1 GB) is the
  # whole of a default 1 GiB volume. An eighth of the volume, between 64 MB and 4 GB; the outbox
  # (at most 256 segments) comes on top. A volume full anyway fails the statement with "No space
  # left on device": an ERROR when a data file cannot grow, a PANIC when WAL cannot be written,
  # after which the server restarts itself by crash recovery (seconds), consistent.
  vol_mb=$(df -Pm "$PS_VOLUME" | awk 'NR == 2 {print $2}')
  wal_mb=$((vol_mb / 8))
  [ "$wal_mb" -ge 64 ] || wal_mb=64
  [ "$wal_mb" -le 4096 ] || wal_mb=4096
  put_conf "$D/pandastack-archive.conf" <<CONF
# PandaStack: continuous WAL archiving and WAL sizing (rewritten by the bootstrap script on
# every start).
archive_mode = on
archive_timeout = 1s
archive_command = '$PS_VOLUME/bin/archive-wal %p %f'
max_wal_size = ${wal_mb}MB
min_wal_size = 32MB
CONF
  include_conf pandastack-archive.conf
}

# The recovery settings; $1 the target time, or empty to replay everything archived.
recovery_conf() {
  {
    echo "# PandaStack: point-in-time recovery (emptied once it is over)."
    echo "restore_command = 'cp $RESTORE/%f %p'"
    echo "recovery_target_timeline = 'latest'"
    if [ -n "$1" ]; then
      echo "recovery_target_time = '$1'"
      echo "recovery_target_inclusive = true"
      echo "recovery_target_action = 'promote'"
    fi
  } | put_conf "$D/pandastack-recovery.conf"
  include_conf pandastack-recovery.conf
  as_pg touch "$D/recovery.signal"
}

# Starts PostgreSQL in archive recovery and waits for it to be promoted. Returns 0 once
# promoted, 2 when it stopped because the archived WAL ended before the target time, 1 else.
recover_run() {
  off=0
  [ ! -f "$LOG" ] || off=$(wc -c <"$LOG")
  # -w returns once a consistent state is reached (hot standby) or PostgreSQL gave up.
  pg_start 600 >/dev/null 2>&1 || true
  i=0
  while :; do
    if ! running; then
      tail -c "+$((off + 1))" "$LOG" >"$PS_VOLUME/log/recovery-attempt.log" 2>/dev/null || true
      if grep -q 'recovery ended before configured recovery target was reached' \
        "$PS_VOLUME/log/recovery-attempt.log"; then
        return 2
      fi
      tail -n 40 "$PS_VOLUME/log/recovery-attempt.log" >&2
      echo "bootstrap: PostgreSQL stopped during recovery" >&2
      return 1
    fi
    r=$(as_pg "$B/psql" -X -At -d postgres -c 'SELECT pg_is_in_recovery()' 2>/dev/null || true)
    [ "$r" != f ] || return 0
    if [ "$i" -ge 600 ]; then
      echo "bootstrap: still recovering after 600 s" >&2
      return 1
    fi
    sleep 1
    i=$((i + 1))
  done
}

# Whether the session of backup-start still runs.
session_alive() {
  [ -s "$BK/pid" ] && kill -0 "$(cat "$BK/pid")" 2>/dev/null
}

session_failed() {
  echo "bootstrap: backup session in $BK: $1; its log:" >&2
  cat "$BK/session.log" >&2 2>/dev/null || true
  exit 1
}

case "$PS_MODE" in
start)
  init_cluster
  install -d -o postgres -g postgres -m 2775 "$SOCK"
  install -d -o postgres -g postgres -m 0750 "$PS_VOLUME/log"
  archive_setup
  # A branch's volume is a copy of its parent's: segments still in the outbox are the
  # parent's (archived by the parent), not the branch's.
  if [ "${PS_NEW_ARCHIVE:-}" = 1 ] && ! running; then
    find "$OUTBOX" -mindepth 1 -delete
  fi
  if ! running; then
    # Within the host's 300 s for the whole script, so that a start that does not finish
    # ends here with PostgreSQL's own words instead of the host's timeout.
    at "starting PostgreSQL"
    if ! pg_start 240 >/dev/null; then
      tail -n 30 "$LOG" >&2 2>/dev/null || true
      die "PostgreSQL did not start within 240 s (log above)"
    fi
  fi
  ;;
password) ;;
stop)
  # Before the VM is removed (a restore swapped its volume out, or a delete): a fast shutdown
  # tells every connected client why (57P01, "terminating connection due to administrator
  # command") instead of a dropped socket, and leaves a clean cluster.
  if running; then
    as_pg "$B/pg_ctl" -D "$D" -m fast -w -t 30 stop >/dev/null 2>&1 || true
  fi
  echo stopped
  exit 0
  ;;
backup-start)
  # PostgreSQL's non-exclusive backup API needs one session from pg_backup_start to
  # pg_backup_stop, while the host snapshots the volume between two exec calls: a psql held
  # open in the background, detached from this call, waits (in a `\!` shell escape inside the
  # session) for backup-stop's `go`. Without `go` within 600 s it ends, which aborts the backup.
  BK=${PS_BACKUP_DIR:?PS_BACKUP_DIR is required}
  rm -rf "$BK"
  install -d -o postgres -g postgres -m 0700 "$BK"
  # The label comes back base64-encoded on one line (`-At` would add a newline to it), then
  # decoded into `labelfile` byte for byte. `done` last: the files before it are complete.
  cat >"$BK/session.sql" <<'SQL'
\o started.tmp
SELECT pg_backup_start('pandastack', true);
\o
\! mv started.tmp started
\set go `i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 1; i=$((i+1)); done; [ -e go ] && echo on || echo off`
\if :go
\o stop.tmp
SELECT lsn, (extract(epoch from clock_timestamp()) * 1000)::bigint, translate(encode(convert_to(labelfile, 'UTF8'), 'base64'), E'\n', '') FROM pg_backup_stop(false);
\o
\! IFS='|' read -r lsn ms label <stop.tmp && echo "$lsn" >stop_lsn && echo "$ms" >stop_time_ms && printf '%s' "$label" | base64 -d >labelfile && touch done
\else
\echo no go within 600 s: the backup is abandoned
\endif
SQL
  chown postgres:postgres "$BK/session.sql"
  (
    cd "$BK"
    # shellcheck disable=SC2016 # expanded by the inner shell
    PGAPPNAME=pandastack-backup setsid nohup sh -c 'echo $$ >pid; exec runuser -u postgres -- psql -X -q -At -v ON_ERROR_STOP=1 -d postgres -f session.sql' \
      </dev/null >"$BK/session.log" 2>&1 &
  )
  i=0
  while [ ! -e "$BK/started" ]; do
    [ "$i" -lt 600 ] || { kill "$(cat "$BK/pid")" 2>/dev/null || true; session_failed "not in backup mode after 60 s"; }
    # The pid file is written at once; give the session a moment before looking.
    [ "$i" -lt 5 ] || session_alive || [ -e "$BK/started" ] || session_failed "ended before pg_backup_start returned"
    sleep 0.1
    i=$((i + 1))
  done
  cat "$BK/started"
  exit 0
  ;;
backup-stop)
  BK=${PS_BACKUP_DIR:?PS_BACKUP_DIR is required}
  [ -e "$BK/started" ] || session_failed "no backup in progress"
  touch "$BK/go"
  i=0
  while [ ! -e "$BK/done" ]; do
    [ "$i" -lt 600 ] || session_failed "pg_backup_stop did not return within 60 s"
    session_alive || [ -e "$BK/done" ] || session_failed "ended without pg_backup_stop"
    sleep 0.1
    i=$((i + 1))
  done
  cat "$BK/stop_lsn" "$BK/stop_time_ms" "$BK/labelfile"
  exit 0
  ;;
flush-archive)
  # Ends the current WAL segment and waits until it is in the outbox, so that what the host
  # pulls next holds every commit so far (before a restore from the archive). With nothing but
  # unimportant WAL (standby snapshots) since the last switch PostgreSQL does not switch: the
  # returned position is then in the segment still being written, and nothing is waiting.
  seg=$(as_pg "$B/psql" -X -At -v ON_ERROR_STOP=1 -d postgres -c \
    "SELECT CASE WHEN pg_walfile_name(l) = pg_walfile_name(pg_current_wal_insert_lsn()) THEN '' ELSE pg_walfile_name(l) END FROM pg_switch_wal() AS l")
  if [ -z "$seg" ]; then
    echo none
    exit 0
  fi
  deadline=$(($(date +%s) + 30))
  until [ "$(as_pg "$B/psql" -X -At -d postgres -c "SELECT coalesce(last_archived_wal, '') >= '$seg' FROM pg_stat_archiver")" = t ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$seg not archived after 30 s (outbox full?)"
    sleep 0.1
  done
  echo "$seg"
  exit 0
  ;;
recover)
  # The volume is a copy of a snapshot taken between pg_backup_start and pg_backup_stop, so a
  # crash-consistent cluster without backup_label: with the label PostgreSQL starts from the
  # backup's checkpoint and replays the archived WAL at least to the backup's end record.
  TARGET=${PS_TARGET_TIME:-}
  case "$TARGET" in *"'"* | *\\*) die "bad PS_TARGET_TIME: $TARGET" ;; esac
  # PostgreSQL checks recovery_target_time before its time zone abbreviations are loaded, so
  # it rejects ISO 8601's `Z`: a numeric offset instead.
  case "$TARGET" in *[Zz]) TARGET="${TARGET%?}+00" ;; esac
  [ -n "${PS_BACKUP_LABEL:-}" ] || die "PS_BACKUP_LABEL is required"
  [ -s "$D/PG_VERSION" ] || die "no cluster in $D"
  install -d -o postgres -g postgres -m 2775 "$SOCK"
  install -d -o postgres -g postgres -m 0750 "$PS_VOLUME/log"
  if running; then
    as_pg "$B/pg_ctl" -D "$D" -m fast -w -t 300 stop >/dev/null
  fi
  rm -f "$D/postmaster.pid"
  # restore_command runs as postgres, whatever owner and mode the host gave the files.
  [ ! -d "$RESTORE" ] || chown -R postgres:postgres "$RESTORE"
  # The outbox's segments are the source database's, not this one's to archive.
  rm -rf "$OUTBOX"
  archive_setup
  # The label verbatim: it ends with a newline (added when a caller's round trip dropped it).
  case "$PS_BACKUP_LABEL" in
  *'
') printf '%s' "$PS_BACKUP_LABEL" | put_conf "$D/backup_label" ;;
  *) printf '%s\n' "$PS_BACKUP_LABEL" | put_conf "$D/backup_label" ;;
  esac
  recovery_conf "$TARGET"
  rc=0
  recover_run || rc=$?
  if [ "$rc" = 2 ] && [ -n "$TARGET" ]; then
    # The target is after the last archived commit: everything archived IS the state at that
    # time. Once more without the target (pg_control remembers the backup's start and end).
    recovery_conf ""
    rc=0
    recover_run || rc=$?
  fi
  [ "$rc" = 0 ] || die "recovery failed (see $LOG)"
  # Promoted: the archive is no longer read.
  echo "# PandaStack: recovery is over." | put_conf "$D/pandastack-recovery.conf"
  rm -rf "$RESTORE"
  ;;
*) die "unknown PS_MODE: $PS_MODE" ;;
esac

# The owner role and its database (a branch has them already: only the password changes). The
# owner is a superuser of its own cluster: the VM is the tenant's isolation boundary (nothing
# else runs in it), and extensions such as pgvector are not trusted ones, so only a superuser
# can create them. `postgres` stays reachable over the local socket only.
at "owner role and database"
as_pg "$B/psql" -X -q -v ON_ERROR_STOP=1 -v role="$PS_ROLE" -v pw="$PS_PASSWORD" -d postgres <<'SQL'
SELECT format('CREATE ROLE %I LOGIN SUPERUSER', :'role')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
ALTER ROLE :"role" PASSWORD :'pw';
SELECT format('CREATE DATABASE %I OWNER %I', :'role', :'role')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'role') \gexec
SQL
as_pg "$B/psql" -X -q -v ON_ERROR_STOP=1 -d "$PS_ROLE" -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null

# PgBouncer in transaction mode on 6432, logging in to PostgreSQL with the client's own SCRAM
# keys (the userlist holds the roles' SCRAM secrets, read from the catalog).
if [ "${PS_SKIP_PGBOUNCER:-}" = 1 ] && ! command -v pgbouncer >/dev/null 2>&1; then
  : # a test host without PgBouncer
else
  at "PgBouncer"
  install -d -o postgres -g postgres -m 0750 /etc/pgbouncer
  as_pg "$B/psql" -X -At -d postgres \
    -c "SELECT format('\"%s\" \"%s\"', rolname, rolpassword) FROM pg_authid WHERE rolcanlogin AND rolpassword LIKE 'SCRAM-SHA-256%'" \
    >/etc/pgbouncer/userlist.txt.new
  chown postgres:postgres /etc/pgbouncer/userlist.txt.new
  chmod 0600 /etc/pgbouncer/userlist.txt.new
  mv /etc/pgbouncer/userlist.txt.new /etc/pgbouncer/userlist.txt
  cat >/etc/pgbouncer/pgbouncer.ini <<INI
[databases]
* = host=127.0.0.1 port=$PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 6432
unix_socket_dir =
auth_type = scram-sha-256
auth_file = /etc/pgbouncer/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
max_prepared_statements = 200
ignore_startup_parameters = extra_float_digits,options,search_path
logfile = /var/log/postgresql/pgbouncer.log
pidfile = /var/run/postgresql/pgbouncer.pid
INI
  chown postgres:postgres /etc/pgbouncer/pgbouncer.ini
  if [ -s /var/run/postgresql/pgbouncer.pid ] && kill -0 "$(cat /var/run/postgresql/pgbouncer.pid)" 2>/dev/null; then
    kill -HUP "$(cat /var/run/postgresql/pgbouncer.pid)"
  else
    rm -f /var/run/postgresql/pgbouncer.pid
    install -d -o postgres -g postgres /var/log/postgresql
    as_pg pgbouncer -d -q /etc/pgbouncer/pgbouncer.ini
  fi
fi
echo ready

if [ "$PS_MODE" = recover ]; then
  # The new timeline is in pg_control after a checkpoint.
  as_pg "$B/psql" -X -q -At -v ON_ERROR_STOP=1 -d postgres -c CHECKPOINT >/dev/null
  tl=$(as_pg "$B/psql" -X -At -v ON_ERROR_STOP=1 -d postgres <<'SQL'
SELECT timeline_id || ' ' || coalesce(to_char(pg_last_xact_replay_timestamp() AT TIME ZONE 'UTC',
  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), '') FROM pg_control_checkpoint();
SQL
)
  echo "recovered $tl"
fi
