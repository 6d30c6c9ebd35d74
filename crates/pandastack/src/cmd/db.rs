//! `pandastack db …` (alias `database`): managed PostgreSQL databases on a running server
//! through the `/v1` API — create, ls, get, psql (runs the real `psql` on the connection
//! string), dump (the database's own pg_dump, run in its VM), branch (as of now or `--from-time`), restore (in place, to a past time), password,
//! query (SQL over HTTP), rm, backup (a base backup), backups and extensions.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use pandastack_client::types::{
    BackupState, CreateBranchRequest, CreateDatabaseRequest, Database, QueryRequest, QueryResponse,
    RestoreDatabaseRequest, VolumeBackup,
};
use pandastack_client::Client;

use super::client_util::{client, print_json, print_table, run_reported, ConnArgs, Spinner, Table};

#[derive(Debug, clap::Args)]
pub struct DbArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: DbCmd,
}

#[derive(Debug, clap::Subcommand)]
enum DbCmd {
    /// Create a database, ready when this returns; prints its connection string (the first
    /// create on a server builds the `postgres` template: minutes).
    Create(CreateArgs),
    /// List databases.
    Ls(Json),
    /// Show one database.
    Get(IdJson),
    /// Run `psql` on a database: `pandastack db psql NAME -- -c 'select 1'`.
    Psql(PsqlArgs),
    /// Dump a database with the `pg_dump` of its own version, run in its VM (nothing to
    /// install here, no version mismatch): `pandastack db dump NAME > dump.sql`.
    Dump(DumpArgs),
    /// Branch a database as of now (a copy-on-write copy of its data, its own VM) or as of
    /// `--from-time` (from its archive); prints the branch's connection string.
    Branch(BranchArgs),
    /// Restore a database in place to a past time (same id and connection string, a new
    /// timeline; open connections are closed); prints its connection string.
    Restore(RestoreArgs),
    /// Give the owner role a new password; prints the new connection string.
    Password(IdJson),
    /// Run one SQL statement over HTTP (no driver needed).
    Query(QueryArgs),
    /// Delete databases: their VMs and data (backups stay in the object store).
    Rm(RmArgs),
    /// Take a base backup of a database to the object store (a starting point for restore and
    /// point-in-time branches); prints the backup id (`--wait`: once uploaded).
    Backup(BackupArgs),
    /// List a database's backups.
    Backups(IdJson),
    /// List the extensions databases can load (`CREATE EXTENSION`).
    Extensions(Json),
}

#[derive(Debug, clap::Args)]
struct Json {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdJson {
    /// Database id or name.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// Database name, also its owner role's: 1-40 of [a-z0-9_], starting with a letter.
    name: String,
    /// PostgreSQL major version (default 17, the only one today).
    #[arg(long, value_name = "MAJOR")]
    version: Option<u32>,
    /// Size of its data volume in GiB (default 1).
    #[arg(long, value_name = "GB")]
    size_gb: Option<u32>,
    /// Memory of its VM in MiB: a multiple of 256 from 256 to 16384 (default 1024).
    #[arg(long, value_name = "MB")]
    memory_mb: Option<u32>,
    /// Seconds without connections or queries before it hibernates (default 300; 0: never).
    #[arg(long, value_name = "SECONDS")]
    idle_seconds: Option<u64>,
    /// Print the database as JSON instead of its connection string.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct BranchArgs {
    /// The database to branch (id or name).
    id: String,
    /// The branch's name (default `<name>_<6 hex>`).
    #[arg(long)]
    name: Option<String>,
    /// Branch from the archive as of this time (RFC 3339, e.g. 2026-11-25T17:40:01Z) instead
    /// of now; it must be inside the restore window.
    #[arg(long, value_name = "RFC3339")]
    from_time: Option<String>,
    /// Seconds without connections or queries before the branch hibernates.
    #[arg(long, value_name = "SECONDS")]
    idle_seconds: Option<u64>,
    /// Print the branch as JSON instead of its connection string.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RestoreArgs {
    /// The database to restore (id or name).
    id: String,
    /// The time to restore to (RFC 3339, e.g. 2026-11-25T17:40:01Z), inside the restore
    /// window (from the oldest base backup kept to now).
    #[arg(long, value_name = "RFC3339")]
    to_time: String,
    /// Print the database as JSON instead of its connection string.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DumpArgs {
    /// Database id or name.
    id: String,
    /// `plain` (SQL, for psql) or `custom` (compressed, for pg_restore).
    #[arg(long, value_enum, default_value_t = DumpFormat::Plain)]
    format: DumpFormat,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// More pg_dump options, after `--` (e.g. `-- --schema-only -t notes`); passed as
    /// arguments, never through a shell.
    #[arg(last = true, value_name = "PG_DUMP ARGS")]
    args: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DumpFormat {
    Plain,
    Custom,
}

#[derive(Debug, clap::Args)]
struct PsqlArgs {
    /// Database id or name.
    id: String,
    /// Connect through PgBouncer (`pooled_uri`, transaction pooling).
    #[arg(long)]
    pooled: bool,
    /// IP address psql connects to (libpq `hostaddr`; TLS still names the host of the
    /// connection string). Default: 127.0.0.1 when that host ends in `.localhost` (the
    /// server's default database domain, which does not resolve); `''`: none.
    #[arg(long, env = "PANDASTACK_DB_HOSTADDR", value_name = "IP")]
    hostaddr: Option<String>,
    /// The psql program to run.
    #[arg(
        long,
        env = "PANDASTACK_PSQL",
        default_value = "psql",
        value_name = "PATH"
    )]
    psql: String,
    /// Run the psql of the database's own version in its VM, over a terminal (the sandbox PTY
    /// route), as the owner's superuser on the local socket: nothing to install here, no
    /// version mismatch.
    #[arg(long, conflicts_with_all = ["pooled", "hostaddr"])]
    in_vm: bool,
    /// Arguments for psql, after `--`.
    #[arg(last = true, value_name = "PSQL_ARGS")]
    args: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct QueryArgs {
    /// Database id or name.
    id: String,
    /// One SQL statement; `$1`, `$2`, … are its parameters.
    sql: String,
    /// A parameter, in order ($1, $2, …), sent as text.
    #[arg(short = 'p', long = "param", value_name = "VALUE")]
    params: Vec<String>,
    /// The parameters as a JSON array of strings, numbers, booleans and nulls.
    #[arg(long, value_name = "JSON", conflicts_with = "params")]
    params_json: Option<String>,
    /// Statement timeout in milliseconds (default 30000, at most 300000).
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// Database ids or names.
    #[arg(required = true)]
    ids: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct BackupArgs {
    /// Database id or name.
    id: String,
    /// Wait until the upload has ended; exit 1 if it failed.
    #[arg(long)]
    wait: bool,
    /// With `--wait`: give up after this many seconds (the upload goes on).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout: u64,
    /// Print the backup as JSON instead of its id.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: DbArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

async fn dispatch(c: Client, cmd: DbCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        DbCmd::Create(a) => {
            let req = CreateDatabaseRequest {
                name: a.name,
                version: a.version,
                size_gb: a.size_gb,
                memory_mb: a.memory_mb,
                idle_seconds: a.idle_seconds,
            };
            let d = {
                let _s = Spinner::start("creating database");
                c.create_database(&req).await?
            };
            print_uri(&d, a.json)?;
        }
        DbCmd::Ls(a) => {
            let all = c.list_all_databases().await?;
            DATABASES.print(&all, a.json)?;
        }
        DbCmd::Get(a) => show(&c.get_database(&a.id).await?, a.json)?,
        DbCmd::Psql(a) => return psql(&c, a).await,
        DbCmd::Dump(a) => return dump(&c, a).await,
        DbCmd::Branch(a) => {
            let req = CreateBranchRequest {
                name: a.name,
                from_time: a.from_time,
                idle_seconds: a.idle_seconds,
            };
            let d = {
                let _s = Spinner::start("branching");
                c.branch_database(&a.id, &req).await?
            };
            print_uri(&d, a.json)?;
        }
        DbCmd::Restore(a) => {
            let req = RestoreDatabaseRequest { to_time: a.to_time };
            let d = {
                let _s = Spinner::start("restoring");
                c.restore_database(&a.id, &req).await?
            };
            print_uri(&d, a.json)?;
        }
        DbCmd::Password(a) => print_uri(&c.rotate_database_password(&a.id).await?, a.json)?,
        DbCmd::Query(a) => {
            let params = match &a.params_json {
                Some(j) => parse_params_json(j)?,
                None => a
                    .params
                    .iter()
                    .map(|p| serde_json::Value::String(p.clone()))
                    .collect(),
            };
            let req = QueryRequest {
                sql: a.sql,
                params,
                timeout_ms: a.timeout_ms,
            };
            let r = c.query_database(&a.id, &req).await?;
            if a.json {
                print_json(&r)?;
            } else {
                print_result(&r);
            }
        }
        DbCmd::Rm(a) => return rm(&c, a).await,
        DbCmd::Backup(a) => return backup(&c, a).await,
        DbCmd::Backups(a) => {
            let all = c.list_database_backups(&a.id).await?;
            BACKUPS.print(&all, a.json)?;
        }
        DbCmd::Extensions(a) => {
            let e = c.database_extensions().await?;
            if a.json {
                print_json(&e)?;
            } else {
                let pre = &e.preloaded;
                let rows: Vec<Vec<String>> = e
                    .versions
                    .iter()
                    .flat_map(|(v, exts)| {
                        exts.iter().map(move |x| {
                            let preloaded = pre.contains(&x.name);
                            vec![
                                v.clone(),
                                x.name.clone(),
                                x.default_version.clone(),
                                if preloaded { "yes" } else { "-" }.to_owned(),
                            ]
                        })
                    })
                    .collect();
                print_table(&["POSTGRES", "NAME", "VERSION", "PRELOADED"], &rows);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The connection string (or the whole database as JSON).
fn print_uri(d: &Database, json: bool) -> anyhow::Result<()> {
    if json {
        print_json(d)
    } else {
        println!("{}", d.connection_uri);
        Ok(())
    }
}

/// `--params-json`: a JSON array of scalars.
fn parse_params_json(j: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let v: serde_json::Value =
        serde_json::from_str(j).map_err(|e| anyhow::anyhow!("--params-json: not JSON: {e}"))?;
    match v {
        serde_json::Value::Array(items) => Ok(items),
        _ => anyhow::bail!("--params-json: expected a JSON array, e.g. '[1, \"a\", null]'"),
    }
}

/// A result value as a table cell: text as it is, NULL as `NULL`, the rest as JSON.
fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "NULL".into(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A query result as psql would show it: a table and `(N rows)`, or the command and its count.
fn print_result(r: &QueryResponse) {
    if r.fields.is_empty() {
        match r.row_count {
            Some(n) => println!("{} {n}", r.command),
            None => println!("{}", r.command),
        }
        return;
    }
    let header: Vec<&str> = r.fields.iter().map(|f| f.name.as_str()).collect();
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| row.iter().map(cell).collect())
        .collect();
    print_table(&header, &rows);
    let n = rows.len();
    println!("({n} row{})", if n == 1 { "" } else { "s" });
}

/// Deletes every database named; reports each failure and exits 1 if any failed.
async fn rm(c: &Client, a: RmArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for id in &a.ids {
        match c.delete_database(id).await {
            Ok(()) => println!("{id}"),
            Err(e) => {
                failed = true;
                super::client_util::report(&anyhow::Error::new(e), &c.config().base_url);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn backup(c: &Client, a: BackupArgs) -> anyhow::Result<ExitCode> {
    let mut b = c.create_database_backup(&a.id).await?;
    if a.wait {
        let _s = Spinner::start("uploading");
        b = c
            .wait_database_backup(&a.id, &b.id, Duration::from_secs(a.timeout))
            .await?;
    }
    if a.json {
        print_json(&b)?;
    } else {
        println!("{}", b.id);
    }
    if b.state == BackupState::Failed {
        anyhow::bail!(
            "backup {} of database {} failed: {}",
            b.id,
            a.id,
            b.error.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs psql on the database's connection string (the password in `PGPASSWORD`, not on the
/// command line); replaces this process.
async fn psql(c: &Client, a: PsqlArgs) -> anyhow::Result<ExitCode> {
    let d = c.get_database(&a.id).await?;
    if a.in_vm {
        let Some(vm) = d.sandbox_id.as_deref() else {
            anyhow::bail!("database {} has no VM (state {:?})", d.name, d.state);
        };
        let mut line = format!(
            "exec runuser -u postgres -- /usr/lib/postgresql/{}/bin/psql -h /var/run/postgresql -d {}",
            d.version,
            shell_quote(&d.user)
        );
        for arg in &a.args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        return super::shell::run_command(c, vm, Some(line)).await;
    }
    let uri = if a.pooled {
        &d.pooled_uri
    } else {
        &d.connection_uri
    };
    let conn = psql_conninfo(uri, a.hostaddr.as_deref())?;
    let mut cmd = std::process::Command::new(&a.psql);
    cmd.arg(&conn.uri).args(&a.args);
    if let Some(p) = &conn.password {
        cmd.env("PGPASSWORD", p);
    }
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    if e.kind() == std::io::ErrorKind::NotFound {
        anyhow::bail!(
            "cannot run {}: not found (install the PostgreSQL client, e.g. `apt install \
             postgresql-client`, set --psql, or run the database's own psql in its VM with \
             --in-vm); the connection string is `pandastack db get {}`",
            a.psql,
            a.id
        );
    }
    Err(anyhow::Error::new(e).context(format!("cannot run {}", a.psql)))
}

/// `db dump`: `pg_dump` runs in the database's VM as `postgres` (over the local socket, so no
/// password) into a file on the VM's root disk — not its data volume, which a large dump could
/// fill — that is then streamed here and removed. The dump is of the database's own version;
/// a hibernated database wakes for it.
async fn dump(c: &Client, a: DumpArgs) -> anyhow::Result<ExitCode> {
    use pandastack_client::types::ExecRequest;
    use tokio::io::AsyncWriteExt;

    let d = c.get_database(&a.id).await?;
    let Some(vm) = d.sandbox_id.clone() else {
        anyhow::bail!(
            "database {} has no VM (state {:?}): nothing to dump from",
            d.name,
            d.state
        );
    };
    let (flag, ext) = match a.format {
        DumpFormat::Plain => ("--format=plain", "sql"),
        DumpFormat::Custom => ("--format=custom", "dump"),
    };
    // A name no other dump running now has: this process and the time.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let tmp = format!(
        "/var/tmp/pandastack-dump-{}-{nanos:x}.{ext}",
        std::process::id()
    );
    let mut argv = vec![
        format!("/usr/lib/postgresql/{}/bin/pg_dump", d.version),
        "--host=/var/run/postgresql".to_owned(),
        flag.to_owned(),
        format!("--file={tmp}"),
    ];
    argv.extend(a.args.iter().cloned());
    argv.push(format!("--dbname={}", d.user));
    let req = ExecRequest {
        argv: Some(argv),
        user: Some("postgres".into()),
        timeout_seconds: Some(3600),
        ..Default::default()
    };
    let run = c.exec(&vm, &req).await?;
    let cleanup = || async {
        let rm = ExecRequest {
            argv: Some(vec!["rm".into(), "-f".into(), tmp.clone()]),
            ..Default::default()
        };
        if let Err(e) = c.exec(&vm, &rm).await {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                path = %tmp,
                "remove the dump from the database's VM"
            );
        }
    };
    if run.exit_code != 0 || run.timed_out {
        cleanup().await;
        anyhow::bail!(
            "pg_dump failed in the database's VM (exit {}{}): {}",
            run.exit_code,
            if run.timed_out { ", timed out" } else { "" },
            run.stderr.trim()
        );
    }
    let written = match &a.output {
        Some(path) => c.download(&vm, &tmp, path).await,
        None => {
            let mut out = tokio::io::stdout();
            let n = c
                .download_into(&vm, &tmp, &mut out, "standard output")
                .await;
            out.flush().await.ok();
            n
        }
    };
    cleanup().await;
    let n = written?;
    eprintln!("dumped {} ({n} bytes, pg_dump {})", d.name, d.version);
    Ok(ExitCode::SUCCESS)
}

/// `s` as one word of a POSIX shell command line.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What psql gets: the connection string without its password (plus `hostaddr`), and the
/// password apart.
#[derive(Debug, PartialEq, Eq)]
struct Conninfo {
    uri: String,
    password: Option<String>,
}

/// Splits the password out of a `postgres://user:password@host:port/db?…` string and adds
/// `hostaddr`: the one given (empty: none), else 127.0.0.1 when the host ends in
/// `.localhost`.
fn psql_conninfo(uri: &str, hostaddr: Option<&str>) -> anyhow::Result<Conninfo> {
    let bad = || anyhow::anyhow!("unexpected connection string from the server: {uri:?}");
    let (scheme, rest) = uri.split_once("://").ok_or_else(bad)?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(u) => match u.split_once(':') {
            Some((user, pass)) => (Some(user), Some(percent_decode(pass)?)),
            None => (Some(u), None),
        },
        None => (None, None),
    };
    let host = if let Some(v6) = hostport.strip_prefix('[') {
        v6.split(']').next().unwrap_or(v6)
    } else {
        match hostport.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => hostport,
        }
    };
    let addr = match hostaddr {
        Some("") => None,
        Some(a) => {
            a.parse::<IpAddr>().map_err(|_| {
                anyhow::anyhow!("--hostaddr {a:?}: an IP address (libpq's hostaddr)")
            })?;
            Some(a.to_owned())
        }
        None if host == "localhost" || host.ends_with(".localhost") => Some("127.0.0.1".into()),
        None => None,
    };
    let mut out = format!("{scheme}://");
    if let Some(u) = user {
        out.push_str(u);
        out.push('@');
    }
    out.push_str(hostport);
    out.push_str(tail);
    if let Some(a) = addr {
        out.push(if tail.contains('?') { '&' } else { '?' });
        if !tail.contains('/') && !tail.contains('?') {
            // `postgres://host?x` is fine for libpq, but keep the usual shape.
            out.insert(out.len() - 1, '/');
        }
        out.push_str("hostaddr=");
        out.push_str(&a);
    }
    Ok(Conninfo { uri: out, password })
}

/// `%XX` escapes of a URI component.
fn percent_decode(s: &str) -> anyhow::Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| anyhow::anyhow!("bad %-escape in the connection string"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| anyhow::anyhow!("the password is not UTF-8"))
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

fn state(d: &Database) -> String {
    serde_json::to_value(d.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{:?}", d.state))
}

fn database_row(d: &Database) -> Vec<String> {
    vec![
        d.id.clone(),
        d.name.clone(),
        d.version.to_string(),
        state(d),
        d.size_gb.to_string(),
        d.memory_mb.to_string(),
        opt(&d.parent),
        d.host.clone(),
        d.created_at.clone(),
    ]
}

fn backup_row(b: &VolumeBackup) -> Vec<String> {
    vec![
        b.id.clone(),
        b.size_gb.to_string(),
        b.state.as_str().to_owned(),
        b.bytes_uploaded
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        b.created_at.clone(),
        opt(&b.finished_at),
    ]
}

/// One database, as JSON or as `field: value` lines.
fn show(d: &Database, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(d);
    }
    for (k, val) in [
        ("id", d.id.clone()),
        ("name", d.name.clone()),
        ("version", d.version.to_string()),
        ("state", state(d)),
        ("user", d.user.clone()),
        ("connection_uri", d.connection_uri.clone()),
        ("pooled_uri", d.pooled_uri.clone()),
        ("http_url", d.http_url.clone()),
        ("size_gb", d.size_gb.to_string()),
        ("memory_mb", d.memory_mb.to_string()),
        (
            "idle_seconds",
            if d.idle_seconds == 0 {
                "0 (never hibernates)".into()
            } else {
                d.idle_seconds.to_string()
            },
        ),
        ("parent", opt(&d.parent)),
        ("sandbox_id", opt(&d.sandbox_id)),
        ("volume", d.volume.clone()),
        ("host", d.host.clone()),
        ("created_at", d.created_at.clone()),
    ] {
        println!("{k:<14} {val}");
    }
    Ok(())
}

/// What `db ls` shows (`--json`: the objects).
const DATABASES: Table<Database> = Table {
    header: &[
        "ID",
        "NAME",
        "VERSION",
        "STATE",
        "SIZE_GB",
        "MEMORY_MB",
        "PARENT",
        "HOST",
        "CREATED",
    ],
    row: database_row,
};

/// What `db backups` shows (`--json`: the objects).
const BACKUPS: Table<VolumeBackup> = Table {
    header: &[
        "ID",
        "SIZE_GB",
        "STATE",
        "BYTES_UPLOADED",
        "CREATED",
        "FINISHED",
    ],
    row: backup_row,
};

#[cfg(test)]
mod tests {
    use super::*;

    const URI: &str = "postgres://app:pa%40ss@db-1.db.localhost:15432/app?sslmode=require";

    #[test]
    fn shell_quote_makes_one_word_of_anything() {
        assert_eq!(shell_quote("app"), "'app'");
        assert_eq!(shell_quote("it's; rm -rf /"), "'it'\\''s; rm -rf /'");
        assert_eq!(shell_quote(""), "''");
        // The shell gives back what went in.
        for s in ["a b", "it's", "$(id)", "`x`", "\\n", "*"] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(s)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), s);
        }
    }

    #[test]
    fn conninfo_moves_the_password_out_and_adds_hostaddr_for_localhost() {
        let c = psql_conninfo(URI, None).unwrap();
        assert_eq!(
            c.uri,
            "postgres://app@db-1.db.localhost:15432/app?sslmode=require&hostaddr=127.0.0.1"
        );
        assert_eq!(c.password.as_deref(), Some("pa@ss"));
        let c = psql_conninfo(URI, Some("10.1.2.3")).unwrap();
        assert!(
            c.uri.ends_with("?sslmode=require&hostaddr=10.1.2.3"),
            "{}",
            c.uri
        );
        let c = psql_conninfo(URI, Some("")).unwrap();
        assert_eq!(
            c.uri,
            "postgres://app@db-1.db.localhost:15432/app?sslmode=require"
        );
        assert!(psql_conninfo(URI, Some("not-an-ip")).is_err());
    }

    #[test]
    fn conninfo_leaves_real_domains_alone() {
        let c = psql_conninfo(
            "postgres://u:p@db-1.db.example.com:5432/u?sslmode=require",
            None,
        )
        .unwrap();
        assert_eq!(
            c.uri,
            "postgres://u@db-1.db.example.com:5432/u?sslmode=require"
        );
        assert_eq!(c.password.as_deref(), Some("p"));
        let c = psql_conninfo("postgres://u@x.localhost/u", None).unwrap();
        assert_eq!(c.uri, "postgres://u@x.localhost/u?hostaddr=127.0.0.1");
        assert_eq!(c.password, None);
        let c = psql_conninfo("postgres://u:p@x.localhost", None).unwrap();
        assert_eq!(c.uri, "postgres://u@x.localhost/?hostaddr=127.0.0.1");
        assert!(psql_conninfo("not a uri", None).is_err());
    }

    #[test]
    fn cells_and_params() {
        assert_eq!(cell(&serde_json::json!(null)), "NULL");
        assert_eq!(cell(&serde_json::json!("a b")), "a b");
        assert_eq!(cell(&serde_json::json!(1.5)), "1.5");
        assert_eq!(cell(&serde_json::json!({"k": [1]})), r#"{"k":[1]}"#);
        assert_eq!(
            parse_params_json(r#"[1, "a", null, true]"#).unwrap(),
            vec![
                serde_json::json!(1),
                serde_json::json!("a"),
                serde_json::json!(null),
                serde_json::json!(true)
            ]
        );
        assert!(parse_params_json("{}").is_err());
        assert!(parse_params_json("[").is_err());
    }
}
