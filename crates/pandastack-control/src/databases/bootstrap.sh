# PandaStack managed database: brings the cluster on the data volume up inside a `postgres`
# template VM. Run as root through the guest agent, once per VM (a new database, a branch, a
# new VM for an existing volume) and again to rotate the password; idempotent.
#
# Environment: PS_VOLUME (mount point of the data volume), PS_ROLE (owner role, also the
# database's name), PS_PASSWORD (the role's password), PS_MODE (`start` or `password`).
set -eu
B=/usr/lib/postgresql/17/bin
D="$PS_VOLUME/pg17"
LOG="$PS_VOLUME/log/postgresql.log"
as_pg() { runuser -u postgres -- "$@"; }

if [ "$PS_MODE" = start ]; then
  if [ ! -s "$D/PG_VERSION" ]; then
    # A new cluster, made beside its final place and renamed in: a VM that dies half-way
    # leaves no directory that looks like a cluster.
    rm -rf "$D.new"
    install -d -o postgres -g postgres -m 0700 "$D.new"
    as_pg "$B/initdb" -D "$D.new" -U postgres --locale C.UTF-8 -E UTF8 --data-checksums \
      --auth-local=peer --auth-host=scram-sha-256 >"$PS_VOLUME/initdb.log" 2>&1
    cat >"$D.new/pandastack.conf" <<'CONF'
# PandaStack: settings of a managed database (on its volume: they move with the data).
listen_addresses = 'localhost'
port = 5432
unix_socket_directories = '/var/run/postgresql'
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
  fi
  install -d -o postgres -g postgres -m 2775 /var/run/postgresql
  install -d -o postgres -g postgres -m 0750 "$PS_VOLUME/log"
  if ! as_pg "$B/pg_ctl" -D "$D" status >/dev/null 2>&1; then
    rm -f "$D/postmaster.pid"
    as_pg "$B/pg_ctl" -D "$D" -l "$LOG" -w -t 300 -o "-c config_file=$D/postgresql.conf" start >/dev/null
  fi
fi

# The owner role and its database (a branch has them already: only the password changes). The
# owner is a superuser of its own cluster: the VM is the tenant's isolation boundary (nothing
# else runs in it), and extensions such as pgvector are not trusted ones, so only a superuser
# can create them. `postgres` stays reachable over the local socket only.
as_pg psql -X -q -v ON_ERROR_STOP=1 -v role="$PS_ROLE" -v pw="$PS_PASSWORD" -d postgres <<'SQL'
SELECT format('CREATE ROLE %I LOGIN SUPERUSER', :'role')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
ALTER ROLE :"role" PASSWORD :'pw';
SELECT format('CREATE DATABASE %I OWNER %I', :'role', :'role')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'role') \gexec
SQL
as_pg psql -X -q -v ON_ERROR_STOP=1 -d "$PS_ROLE" -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' >/dev/null

# PgBouncer in transaction mode on 6432, logging in to PostgreSQL with the client's own SCRAM
# keys (the userlist holds the roles' SCRAM secrets, read from the catalog).
install -d -o postgres -g postgres -m 0750 /etc/pgbouncer
as_pg psql -X -At -d postgres \
  -c "SELECT format('\"%s\" \"%s\"', rolname, rolpassword) FROM pg_authid WHERE rolcanlogin AND rolpassword LIKE 'SCRAM-SHA-256%'" \
  >/etc/pgbouncer/userlist.txt.new
chown postgres:postgres /etc/pgbouncer/userlist.txt.new
chmod 0600 /etc/pgbouncer/userlist.txt.new
mv /etc/pgbouncer/userlist.txt.new /etc/pgbouncer/userlist.txt
cat >/etc/pgbouncer/pgbouncer.ini <<'INI'
[databases]
* = host=127.0.0.1 port=5432

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
echo ready
