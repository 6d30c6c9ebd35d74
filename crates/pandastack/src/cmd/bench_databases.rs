//! `pandastack bench databases`: managed PostgreSQL with real guests and real clients — the
//! template bake, database creates (the first and later ones), `psql` connects through the TLS
//! front (direct and pooled, against a local PostgreSQL with TLS as the baseline), wake on
//! connect after a hibernate, branches, the HTTP query broker, pgbench through PostgreSQL and
//! PgBouncer, and the VM's QEMU killed after acknowledged commits (commits lost, time to the
//! first answer). It starts its own server on a temporary data directory with `--pool-size 0`
//! (a database's VM binds its volume, which the warm pool never serves) and `--network off`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use super::bench::{host_info, metric, ms, Metric};
use super::bench_volumes::{accel, start_server};

#[derive(Debug, clap::Args)]
pub(crate) struct DatabasesArgs {
    /// Parent of the data directory of the server this command starts (default:
    /// /var/lib/pandastack; a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Template catalog with `postgres.toml` (default: ./templates, then the installation's).
    #[arg(long)]
    templates_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Samples of creates, branches and wakes; connects take at least 20, HTTP queries at
    /// least 50.
    #[arg(long, default_value_t = 5)]
    iterations: usize,
    /// Length of each pgbench run, seconds.
    #[arg(long, default_value_t = 20)]
    pgbench_seconds: u64,
    /// Rows inserted, each its own acknowledged commit, before the VM is killed.
    #[arg(long, default_value_t = 200)]
    rpo_rows: usize,
    /// Directory of the PostgreSQL client tools (psql, pgbench; initdb and pg_ctl for the
    /// local baseline) (default: the newest /usr/lib/postgresql/*/bin with psql).
    #[arg(long)]
    pg_bin: Option<PathBuf>,
}

/// Samples per metric.
type Samples = BTreeMap<&'static str, Vec<f64>>;

/// A minimal client for what the benchmark calls.
struct Api {
    http: super::bench_volumes::Http,
}

impl Api {
    /// Creates a database that never hibernates by itself; answers when it is ready.
    async fn create_db(&self, name: &str) -> anyhow::Result<(Db, Duration)> {
        let (v, took) = self
            .http
            .expect(
                Method::POST,
                "/v1/databases",
                Some(json!({"name": name, "idle_seconds": 0})),
                StatusCode::CREATED,
            )
            .await?;
        Ok((Db::from_wire(&v)?, took))
    }

    async fn delete_db(&self, id: &str) -> anyhow::Result<Duration> {
        let (_, took) = self
            .http
            .expect(
                Method::DELETE,
                &format!("/v1/databases/{id}"),
                None,
                StatusCode::NO_CONTENT,
            )
            .await?;
        Ok(took)
    }

    async fn get_db(&self, id: &str) -> anyhow::Result<Value> {
        let path = format!("/v1/databases/{id}");
        Ok(self
            .http
            .expect(Method::GET, &path, None, StatusCode::OK)
            .await?
            .0)
    }

    /// The sandbox (VM) serving database `id` now.
    async fn sandbox_of(&self, id: &str) -> anyhow::Result<String> {
        let v = self.get_db(id).await?;
        Ok(v["sandbox_id"]
            .as_str()
            .with_context(|| format!("database {id} has no VM: {v}"))?
            .to_owned())
    }

    async fn query(&self, id: &str, sql: &str) -> anyhow::Result<(StatusCode, Value)> {
        self.http
            .call(
                Method::POST,
                &format!("/v1/databases/{id}/query"),
                Some(json!({"sql": sql, "params": []})),
            )
            .await
    }
}

/// A database as the benchmark connects to it: libpq URIs that reach the front on 127.0.0.1
/// (`*.db.localhost` does not resolve through libc; the host name still goes out as SNI).
struct Db {
    id: String,
    direct: String,
    pooled: String,
}

impl Db {
    fn from_wire(v: &Value) -> anyhow::Result<Self> {
        if v["state"] != "ready" {
            bail!("database not ready after its create: {v}");
        }
        let uri = |k: &str| {
            v[k].as_str()
                .map(|u| format!("{u}&hostaddr=127.0.0.1"))
                .with_context(|| format!("no {k}: {v}"))
        };
        Ok(Db {
            id: v["id"].as_str().context("no id")?.to_owned(),
            direct: uri("connection_uri")?,
            pooled: uri("pooled_uri")?,
        })
    }
}

/// The newest `/usr/lib/postgresql/<major>/bin` with `psql` (Debian's `/usr/bin/psql` is a
/// Perl wrapper: tens of milliseconds more per process).
fn pg_bin() -> anyhow::Result<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("/usr/lib/postgresql (pass --pg-bin)")?
        .flatten()
        .filter_map(|e| {
            let major = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("psql").is_file().then_some((major, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, b)| b)
        .context("no /usr/lib/postgresql/*/bin/psql (pass --pg-bin)")
}

/// `psql -XAtq -c sql` against `uri`: its wall time (process start, TLS, SCRAM, the
/// statement, exit) and output; an error unless it exits 0.
async fn psql(pg: &Path, uri: &str, sql: &str) -> anyhow::Result<(Duration, String)> {
    let t = Instant::now();
    let out = tokio::process::Command::new(pg.join("psql"))
        .arg(uri)
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "120")
        .stdin(Stdio::null())
        .output()
        .await
        .context("run psql")?;
    let took = t.elapsed();
    if !out.status.success() {
        bail!(
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok((took, String::from_utf8_lossy(&out.stdout).trim().to_owned()))
}

/// `n` timed `psql … -c 'select 1'` after one off the clock.
async fn connects(pg: &Path, uri: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    psql(pg, uri, "select 1").await?;
    let mut out = Vec::new();
    for _ in 0..n {
        let (took, v) = psql(pg, uri, "select 1").await?;
        anyhow::ensure!(v == "1", "select 1 answered {v:?}");
        out.push(ms(took));
    }
    Ok(out)
}

/// Runs pgbench with `args` against `uri`; its output.
async fn pgbench(pg: &Path, uri: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(pg.join("pgbench"))
        .args(args)
        .arg(uri)
        .env("PGCONNECT_TIMEOUT", "120")
        .stdin(Stdio::null())
        .output()
        .await
        .context("run pgbench")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "pgbench {args:?}: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(stdout.into_owned())
}

/// pgbench's `tps = X (without initial connection time)`.
fn tps(stdout: &str) -> anyhow::Result<f64> {
    stdout
        .lines()
        .filter(|l| l.contains("without initial connection time"))
        .find_map(|l| {
            l.strip_prefix("tps = ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("no tps in pgbench's output:\n{stdout}"))
}

/// A throwaway local PostgreSQL (the client tools' version) with TLS on (an ECDSA P-256
/// self-signed certificate, like the front's) and SCRAM on 127.0.0.1: the baseline of a psql
/// connect without the front and the VM. Stopped on drop.
struct LocalPg {
    dir: tempfile::TempDir,
    pg: PathBuf,
    uri: String,
}

impl Drop for LocalPg {
    fn drop(&mut self) {
        let _ = as_postgres(&self.pg.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn as_postgres(program: &Path) -> std::process::Command {
    let mut c = std::process::Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(program);
    c
}

fn checked(c: &mut std::process::Command) -> anyhow::Result<()> {
    let out = c.stdout(Stdio::null()).output()?;
    if !out.status.success() {
        bail!("{c:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn local_pg(pg: &Path) -> anyhow::Result<LocalPg> {
    anyhow::ensure!(nix::unistd::geteuid().is_root(), "needs root (runuser)");
    let user = nix::unistd::User::from_name("postgres")?.context("no postgres user")?;
    let dir = tempfile::Builder::new().prefix("ps-bench-pg-").tempdir()?;
    let d = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let pw = d.join("pw");
    std::fs::write(&pw, "bench\n")?;
    for p in [d, pw.as_path()] {
        nix::unistd::chown(p, Some(user.uid), Some(user.gid))?;
    }
    let data = d.join("data");
    checked(
        as_postgres(&pg.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "scram-sha-256",
                "--auth-local=trust",
            ])
            .args(["-E", "UTF8", "--locale=C.UTF-8", "-N", "--no-instructions"])
            .arg(format!("--pwfile={}", pw.display())),
    )?;
    checked(
        as_postgres(Path::new("openssl"))
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost", "-keyout"])
            .arg(data.join("server.key"))
            .arg("-out")
            .arg(data.join("server.crt")),
    )?;
    std::fs::set_permissions(
        data.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )?;
    let local = LocalPg {
        uri: format!("postgres://postgres:bench@127.0.0.1:{port}/postgres?sslmode=require"),
        pg: pg.to_owned(),
        dir,
    };
    checked(
        as_postgres(&pg.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["-w", "-l"])
            .arg(local.dir.path().join("log"))
            .arg("-o")
            .arg(format!(
                "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c ssl=on",
                local.dir.path().display()
            ))
            .arg("start"),
    )?;
    Ok(local)
}

pub(crate) async fn run(a: DatabasesArgs) -> anyhow::Result<ExitCode> {
    let pg = match &a.pg_bin {
        Some(p) => p.clone(),
        None => pg_bin()?,
    };
    let templates = match &a.templates_dir {
        Some(d) => d.clone(),
        None => super::template::template_dirs()
            .into_iter()
            .find(|d| d.join("postgres.toml").is_file())
            .context("no templates directory with postgres.toml (pass --templates-dir)")?,
    };
    anyhow::ensure!(
        templates.join("postgres.toml").is_file(),
        "no postgres.toml in {}",
        templates.display()
    );
    let templates = std::fs::canonicalize(&templates)?;
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let (accel, accel_reason) = accel().await;
    eprintln!(
        "accelerator: {accel} ({accel_reason}); client tools: {}",
        pg.display()
    );

    let templates_arg = templates.to_str().context("templates dir: not UTF-8")?;
    let server = start_server(
        &parent,
        0,
        &["--network", "off", "--templates-dir", templates_arg],
    )
    .await?;
    let api = Api {
        http: super::bench_volumes::Http::new(&server.url, &server.key),
    };
    let mut s = Samples::new();
    // The server goes (its VMs and data directory with it) when this returns.
    measure(&api, &a, &pg, server.dir.path(), &mut s).await?;
    drop(server);

    let mut metrics: BTreeMap<&str, Metric> = BTreeMap::new();
    for (k, v) in s {
        let unit = match k {
            "template_bake_s" => "s",
            k if k.starts_with("pgbench_tps") => "tps",
            "rpo_vm_kill_lost_commits" | "rpo_archive_lost_commits" => "commits",
            _ => "ms",
        };
        metrics.insert(k, metric(v, unit));
    }
    println!("accelerator: {accel} ({accel_reason})");
    println!(
        "{:<30} {:>12} {:>12} {:>5} unit",
        "metric", "p50", "p99", "n"
    );
    for (k, m) in &metrics {
        println!(
            "{k:<30} {:>12.1} {:>12.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = &a.json {
        let doc = json!({
            "name": "databases",
            "accel": accel,
            "accel_reason": accel_reason,
            "host": host_info(),
            "iterations": a.iterations,
            "pgbench_seconds": a.pgbench_seconds,
            "rpo_rows": a.rpo_rows,
            "pool_size": 0,
            "network": "off",
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn push(s: &mut Samples, k: &'static str, v: f64) {
    s.entry(k).or_default().push(v);
}

async fn measure(
    api: &Api,
    a: &DatabasesArgs,
    pg: &Path,
    data_dir: &Path,
    s: &mut Samples,
) -> anyhow::Result<()> {
    // The bake (and the image build, if $PANDASTACK_CACHE has no image of this spec).
    eprintln!("baking the postgres template (minutes if its image is not cached)…");
    let t = Instant::now();
    let (st, v) = api
        .http
        .call(Method::POST, "/v1/templates/postgres/bake", None)
        .await?;
    if st != StatusCode::OK {
        // Then the first create bakes it: one off the clock.
        eprintln!("bake: {st} {v}; baking with a throwaway create");
        let (db, _) = api.create_db("bench_warmup").await?;
        api.delete_db(&db.id).await?;
    }
    push(s, "template_bake_s", t.elapsed().as_secs_f64());
    eprintln!("baked in {:.1} s", t.elapsed().as_secs_f64());

    let (db, took) = api.create_db("bench").await?;
    push(s, "db_create_ready_first_ms", ms(took));
    eprintln!("first create: {:.0} ms", ms(took));
    for i in 0..a.iterations {
        let (d, took) = api.create_db(&format!("bench_c{i}")).await?;
        push(s, "db_create_ready_ms", ms(took));
        let took = api.delete_db(&d.id).await?;
        push(s, "db_delete_ms", ms(took));
    }
    eprintln!("creates done");

    let n = a.iterations.max(20);
    s.insert("db_connect_psql_ms", connects(pg, &db.direct, n).await?);
    s.insert(
        "db_connect_psql_pooled_ms",
        connects(pg, &db.pooled, n).await?,
    );
    match local_pg(pg) {
        Ok(local) => {
            s.insert("psql_local_baseline_ms", connects(pg, &local.uri, n).await?);
        }
        Err(e) => eprintln!("no local PostgreSQL baseline: {e:#}"),
    }
    eprintln!("connects done");

    let n = a.iterations.max(50);
    for i in 0..=n {
        let t = Instant::now();
        let (st, v) = api.query(&db.id, "select 1").await?;
        let took = t.elapsed();
        if st != StatusCode::OK || v["rows"] != json!([[1]]) {
            bail!("query: {st} {v}");
        }
        if i > 0 {
            push(s, "query_http_ms", ms(took));
        }
    }
    eprintln!("HTTP queries done");

    let secs = a.pgbench_seconds.to_string();
    pgbench(pg, &db.direct, &["-i", "-s", "1", "-q"]).await?;
    let select_only = ["-c", "4", "-j", "2", "-T", &secs, "-S", "-M", "simple"];
    for (k, uri) in [
        ("pgbench_tps_direct", &db.direct),
        ("pgbench_tps_pooled", &db.pooled),
    ] {
        let tps = tps(&pgbench(pg, uri, &select_only).await?)?;
        eprintln!("{k}: {tps:.0}");
        push(s, k, tps);
    }
    let tpcb = ["-c", "4", "-j", "2", "-T", &secs, "-M", "simple"];
    let tps = tps(&pgbench(pg, &db.direct, &tpcb).await?)?;
    eprintln!("pgbench_tps_tpcb_direct: {tps:.0}");
    push(s, "pgbench_tps_tpcb_direct", tps);

    for i in 0..a.iterations {
        let (v, took) = api
            .http
            .expect(
                Method::POST,
                &format!("/v1/databases/{}/branches", db.id),
                Some(json!({"name": format!("bench_b{i}"), "idle_seconds": 0})),
                StatusCode::CREATED,
            )
            .await?;
        push(s, "db_branch_ms", ms(took));
        let branch = Db::from_wire(&v)?;
        let (_, rows) = psql(pg, &branch.direct, "select count(*) from pgbench_branches").await?;
        anyhow::ensure!(rows == "1", "branch has {rows:?} pgbench_branches rows");
        let took = api.delete_db(&branch.id).await?;
        push(s, "db_delete_ms", ms(took));
    }
    eprintln!("branches done");

    for _ in 0..a.iterations {
        let sandbox = api.sandbox_of(&db.id).await?;
        let (_, took) = api
            .http
            .expect(
                Method::POST,
                &format!("/v1/sandboxes/{sandbox}/hibernate"),
                None,
                StatusCode::OK,
            )
            .await?;
        push(s, "db_hibernate_ms", ms(took));
        let state = api.get_db(&db.id).await?["state"].clone();
        anyhow::ensure!(state == "hibernated", "after hibernate: {state}");
        let (took, v) = psql(pg, &db.direct, "select 1").await?;
        anyhow::ensure!(v == "1", "select 1 answered {v:?}");
        push(s, "db_wake_connect_ms", ms(took));
    }
    eprintln!("wakes done");

    pitr(api, a, pg, &db, s).await?;
    rpo_archive(api, a, pg, data_dir, &db, s).await?;
    rpo(api, a, pg, data_dir, &db, s).await?;
    api.delete_db(&db.id).await?;
    Ok(())
}

/// Now, RFC 3339 (the database's clock is the host's: the guest's is set from it).
fn now_rfc3339() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    pandastack_api::rfc3339(ms)
}

/// Waits until every backup of database `id` has finished uploading.
async fn backups_done(api: &Api, id: &str) -> anyhow::Result<()> {
    let t = Instant::now();
    loop {
        let (v, _) = api
            .http
            .expect(
                Method::GET,
                &format!("/v1/databases/{id}/backups"),
                None,
                StatusCode::OK,
            )
            .await?;
        let all = v["data"].as_array().context("backups: no data")?;
        if all.iter().any(|b| b["state"] == "failed") {
            bail!("a backup failed: {v}");
        }
        if all.iter().all(|b| b["state"] == "done") {
            return Ok(());
        }
        if t.elapsed() > Duration::from_secs(600) {
            bail!("backups not done after 600 s: {v}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Point-in-time restore: a base backup (on demand, waited for), pgbench's tables changed
/// after it, then a restore in place and a branch to a time between two marker rows; each
/// must have the first and not the second. The database is pgbench's scale 1 (~23 MiB), not
/// the 1 GiB: the figure is dominated by VM start and WAL replay, which scale with
/// the WAL since the backup, not with the data.
async fn pitr(
    api: &Api,
    a: &DatabasesArgs,
    pg: &Path,
    db: &Db,
    s: &mut Samples,
) -> anyhow::Result<()> {
    let (_, took) = api
        .http
        .expect(
            Method::POST,
            &format!("/v1/databases/{}/backups", db.id),
            None,
            StatusCode::ACCEPTED,
        )
        .await?;
    push(s, "db_base_backup_start_ms", ms(took));
    backups_done(api, &db.id).await?;
    psql(pg, &db.direct, "create table if not exists marks (i int)").await?;
    let short = ["-c", "2", "-j", "2", "-T", "5", "-M", "simple"];
    for i in 0..a.iterations.min(3) {
        pgbench(pg, &db.direct, &short).await?;
        psql(
            pg,
            &db.direct,
            &format!("insert into marks values ({})", 2 * i),
        )
        .await?;
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let at = now_rfc3339();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        psql(
            pg,
            &db.direct,
            &format!("insert into marks values ({})", 2 * i + 1),
        )
        .await?;
        let want = (0..=2 * i)
            .step_by(2)
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(",");

        let (v, took) = api
            .http
            .expect(
                Method::POST,
                &format!("/v1/databases/{}/branches", db.id),
                Some(json!({"name": format!("bench_p{i}"), "from_time": at, "idle_seconds": 0})),
                StatusCode::CREATED,
            )
            .await?;
        push(s, "db_branch_pitr_ms", ms(took));
        let branch = Db::from_wire(&v)?;
        let (_, got) = psql(
            pg,
            &branch.direct,
            "select string_agg(i::text, ',' order by i) from marks",
        )
        .await?;
        anyhow::ensure!(got == want, "branch at {at}: marks {got:?}, want {want:?}");
        api.delete_db(&branch.id).await?;

        let (_, took) = api
            .http
            .expect(
                Method::POST,
                &format!("/v1/databases/{}/restore", db.id),
                Some(json!({"to_time": at})),
                StatusCode::OK,
            )
            .await?;
        push(s, "db_restore_pitr_ms", ms(took));
        let (_, got) = psql(
            pg,
            &db.direct,
            "select string_agg(i::text, ',' order by i) from marks",
        )
        .await?;
        anyhow::ensure!(got == want, "restore to {at}: marks {got:?}, want {want:?}");
        eprintln!("point in time {i}: branch and restore hold marks {want}");
    }
    Ok(())
}

/// What the object store holds when the host is lost: commits (each acknowledged, stamped
/// with `clock_timestamp()`) go in for a few seconds, the VM is killed at once after the last
/// acknowledgement (so nothing more leaves it), and a branch as of now is made from the
/// archive alone. Lost = acknowledged rows missing from it; the window = the last
/// acknowledged commit's time minus the newest one archived.
async fn rpo_archive(
    api: &Api,
    a: &DatabasesArgs,
    pg: &Path,
    data_dir: &Path,
    db: &Db,
    s: &mut Samples,
) -> anyhow::Result<()> {
    psql(
        pg,
        &db.direct,
        "create table rpo_archive (i int, t timestamptz default clock_timestamp())",
    )
    .await?;
    let script: String = (0..a.rpo_rows)
        .map(|i| format!("insert into rpo_archive (i) values ({i}); select pg_sleep(0.02);\n"))
        .collect();
    psql_script(pg, &db.direct, &script).await?;
    kill_vm(api, data_dir, &db.id).await?;
    let at = now_rfc3339();
    let (v, _) = api
        .http
        .expect(
            Method::POST,
            &format!("/v1/databases/{}/branches", db.id),
            Some(json!({"name": "bench_rpo", "from_time": at, "idle_seconds": 0})),
            StatusCode::CREATED,
        )
        .await?;
    let branch = Db::from_wire(&v)?;
    let epoch = "coalesce(extract(epoch from max(t)) * 1000, 0)::bigint";
    let (_, got) = psql(
        pg,
        &branch.direct,
        &format!("select count(*) || ' ' || {epoch} from rpo_archive"),
    )
    .await?;
    api.delete_db(&branch.id).await?;
    // The source's new VM has every acknowledged commit (the volume keeps them).
    let (_, all) = psql(
        pg,
        &db.direct,
        &format!("select count(*) || ' ' || {epoch} from rpo_archive"),
    )
    .await?;
    let parse = |x: &str| -> anyhow::Result<(f64, f64)> {
        let (c, t) = x.split_once(' ').with_context(|| format!("{x:?}"))?;
        Ok((c.parse()?, t.parse()?))
    };
    let (archived, archived_t) = parse(&got)?;
    let (acked, acked_t) = parse(&all)?;
    push(s, "rpo_archive_lost_commits", acked - archived);
    push(s, "rpo_archive_window_ms", (acked_t - archived_t).max(0.0));
    eprintln!(
        "host-loss RPO: {archived} of {acked} acknowledged commits in the archive, {:.0} ms behind",
        acked_t - archived_t
    );
    Ok(())
}

/// Runs `script` through one psql session (each statement its own acknowledged commit).
async fn psql_script(pg: &Path, uri: &str, script: &str) -> anyhow::Result<()> {
    let mut child = tokio::process::Command::new(pg.join("psql"))
        .arg(uri)
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1"])
        .env("PGCONNECT_TIMEOUT", "120")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("run psql")?;
    let mut stdin = child.stdin.take().context("psql stdin")?;
    stdin.write_all(script.as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "psql inserts: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `kill -9` of the QEMU serving database `id`.
async fn kill_vm(api: &Api, data_dir: &Path, id: &str) -> anyhow::Result<String> {
    let sandbox = api.sandbox_of(id).await?;
    let pid_file = data_dir.join("sandboxes").join(&sandbox).join("qemu.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("{}", pid_file.display()))?
        .trim()
        .parse()?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .with_context(|| format!("kill -9 {pid} ({sandbox}'s QEMU)"))?;
    Ok(sandbox)
}

/// `rpo_rows` inserts, each committed and acknowledged, through one psql session; then the VM's
/// QEMU is killed and the rows are counted through the HTTP query broker (which starts a new VM
/// on the same volume).
async fn rpo(
    api: &Api,
    a: &DatabasesArgs,
    pg: &Path,
    data_dir: &Path,
    db: &Db,
    s: &mut Samples,
) -> anyhow::Result<()> {
    psql(pg, &db.direct, "create table rpo (i int)").await?;
    let script: String = (0..a.rpo_rows)
        .map(|i| format!("insert into rpo values ({i});\n"))
        .collect();
    psql_script(pg, &db.direct, &script).await?;

    let sandbox = kill_vm(api, data_dir, &db.id).await?;
    let t = Instant::now();
    let (mut failures, mut last) = (0, String::new());
    let count = loop {
        let (st, v) = api.query(&db.id, "select count(*) from rpo").await?;
        if st == StatusCode::OK {
            let c = &v["rows"][0][0];
            break c
                .as_u64()
                .or_else(|| c.as_str()?.parse().ok())
                .with_context(|| format!("count: {v}"))?;
        }
        failures += 1;
        last = format!("{st} {v}");
        if t.elapsed() > Duration::from_secs(300) {
            bail!("no answer 300 s after the kill: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = t.elapsed();
    push(s, "db_recover_after_kill_ms", ms(took));
    let lost = a.rpo_rows as f64 - count as f64;
    push(s, "rpo_vm_kill_lost_commits", lost);
    eprintln!(
        "after the kill: {count} of {} rows, first answer in {:.0} ms ({failures} failed queries before{})",
        a.rpo_rows,
        ms(took),
        if last.is_empty() { String::new() } else { format!("; last: {last}") }
    );
    let now = api.sandbox_of(&db.id).await?;
    if now == sandbox {
        eprintln!("warning: the database still names the killed VM {sandbox}");
    }
    Ok(())
}
