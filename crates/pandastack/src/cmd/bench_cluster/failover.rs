//! The failover part (#39): an app's first byte after its host is lost, with real processes —
//! a replica (`pandastack server --cluster` on a scratch PostgreSQL database) and two agents
//! (`pandastack agent`, real guests), sharing an object store in a directory.
//!
//! An app is deployed from a tarball (a static page) and checkpointed when it goes live; then,
//! each run, the host holding its VM is lost — its agent and its VMs killed (`kill -9`) — and
//! the time to the first `200` through the replica's proxy is measured: the lease lapsing and
//! the host declared dead, the restorer's pass, the checkpoint fetched and restored on the
//! other host, the proxy's request. The lost host's agent then starts again (its copy of the VM
//! is destroyed when it joins) and the next run loses the other host.
//!
//! Then a managed database, written to by a client committing one row per transaction (`psql`
//! through the replica's database front, about ten a second): each run loses the host holding
//! its volume and measures the time to the first query answered again (failed over from its
//! base backup and archived WAL onto the other host) and how many acknowledged commits are
//! missing then.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use pandastack_cluster::Role;
use serde_json::{json, Value};
use sqlx::Connection;

use super::{ClusterArgs, Pki, ScratchDb};

/// What the failover part measured.
pub(super) struct Failover {
    /// From the loss (agent and VMs killed) to the app's first `200`, each run.
    pub(super) first_byte: Vec<f64>,
    /// From the loss to the host's row saying `dead`, each run.
    pub(super) dead: Vec<f64>,
    /// The deploy, from its request to `live` (the `app` template baked on first use).
    pub(super) deploy_ms: f64,
    /// From the loss of a database's host to its first query answered again, each run.
    pub(super) db_connect: Vec<f64>,
    /// Acknowledged commits missing after each database failover.
    pub(super) db_lost_commits: Vec<f64>,
}

/// A child process killed (and reaped) when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free loopback port.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// An agent of the part: its process, how to start it again, and its data directory.
struct Agent {
    name: String,
    args: Vec<String>,
    data: PathBuf,
    proc: Option<Proc>,
}

impl Agent {
    fn start(&mut self) -> anyhow::Result<()> {
        let child = Command::new(std::env::current_exe()?)
            .args(&self.args)
            .env("PANDASTACK_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .context("start an agent")?;
        self.proc = Some(Proc(child));
        Ok(())
    }

    /// The host lost: its agent and every process working in its data directory (its VMs)
    /// killed.
    fn lose(&mut self) {
        drop(self.proc.take());
        kill_named(&self.data);
    }
}

/// `kill -9` of every process working in `dir` (VMs work in their sandboxes' directories).
fn kill_named(dir: &Path) {
    pandastack_runtime::kill_processes_working_in(dir);
}

/// A gzip tarball holding `index.html` = `page`.
fn site(page: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut h = tar::Header::new_gnu();
    h.set_size(page.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "index.html", page)?;
    Ok(b.into_inner()?.finish()?)
}

/// One value `sql` reads from the part's database (as text).
async fn value(db: &str, sql: &str) -> anyhow::Result<Option<String>> {
    let mut c = sqlx::PgConnection::connect(db).await?;
    let v: Option<(Option<String>,)> = sqlx::query_as(sql).fetch_optional(&mut c).await?;
    let _ = c.close().await;
    Ok(v.and_then(|v| v.0))
}

/// Waits up to `secs` for `f` to give `Some`, checking every 100 ms.
async fn until<T, F, Fut>(secs: u64, what: &str, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        ensure!(
            Instant::now() < deadline,
            "timed out after {secs} s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) async fn app_failover(
    a: &ClusterArgs,
    pki: &Pki,
    db: &ScratchDb,
    runs: usize,
) -> anyhow::Result<Failover> {
    let root = super::scratch_root(a, "pandastack-bench-failover-")?;
    let objects = format!("file://{}", root.path().join("objects").display());
    let exe = std::env::current_exe()?;
    let (api_port, proxy_port, membership) = (free_port()?, free_port()?, free_port()?);
    let db_port = free_port()?;
    let replica_data = root.path().join("replica");
    let templates = replica_data.join("no-specs");
    std::fs::create_dir_all(&templates)?;
    let key_file = replica_data.join("key");
    let replica_bundle = pki.bundle(Role::Server, "cp-1")?;
    let mut replica_args: Vec<String> = vec![
        "server".into(),
        "--state".into(),
        db.url.clone(),
        "--cluster".into(),
        replica_bundle.display().to_string(),
        "--membership-listen".into(),
        format!("127.0.0.1:{membership}"),
        "--listen".into(),
        format!("127.0.0.1:{api_port}"),
        "--proxy-listen".into(),
        format!("127.0.0.1:{proxy_port}"),
        "--preview-url".into(),
        format!("http://localhost:{proxy_port}"),
        "--db-listen".into(),
        format!("127.0.0.1:{db_port}"),
        "--network".into(),
        "off".into(),
        "--pool-size".into(),
        "0".into(),
        "--objects".into(),
        objects.clone(),
        "--data-dir".into(),
        replica_data.display().to_string(),
        "--key-file".into(),
        key_file.display().to_string(),
        "--templates-dir".into(),
        templates.display().to_string(),
    ];
    if let Some(k) = &a.kernel {
        replica_args.extend(["--kernel".into(), k.display().to_string()]);
    }
    let _replica = Proc(
        Command::new(&exe)
            .args(&replica_args)
            .env("PANDASTACK_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .context("start the replica")?,
    );
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{api_port}");
    until(60, "the replica's health", || async {
        let r = http.get(format!("{url}/v1/health")).send().await;
        Ok(r.ok().filter(|r| r.status().is_success()).map(|_| ()))
    })
    .await?;
    let key = std::fs::read_to_string(&key_file)?.trim().to_owned();

    let mut agents = Vec::new();
    for name in ["host-a", "host-b"] {
        let data = root.path().join(name);
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--identity".into(),
            pki.bundle(Role::Agent, name)?.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{}", free_port()?),
            "--server".into(),
            format!("cp-1=127.0.0.1:{membership}"),
            "--network".into(),
            "off".into(),
            "--pool-size".into(),
            "0".into(),
            "--objects".into(),
            objects.clone(),
            "--data-dir".into(),
            data.display().to_string(),
        ];
        if let Some(k) = &a.kernel {
            args.extend(["--kernel".into(), k.display().to_string()]);
        }
        let mut agent = Agent {
            name: name.into(),
            args,
            data,
            proc: None,
        };
        agent.start()?;
        agents.push(agent);
    }
    let ready = |host: String| {
        let db = db.url.clone();
        async move {
            until(120, "an agent's host ready", || async {
                let state =
                    value(&db, &format!("SELECT state FROM hosts WHERE id = '{host}'")).await?;
                Ok((state.as_deref() == Some("ready")).then_some(()))
            })
            .await
        }
    };
    for agent in &agents {
        ready(agent.name.clone()).await?;
    }

    // The app, deployed from a tarball; live, then checkpointed in the background.
    let deployed = Instant::now();
    let r = http
        .post(format!("{url}/v1/apps"))
        .bearer_auth(&key)
        .json(&json!({"name": "site", "git": {"url": "https://example.invalid/site.git"}}))
        .send()
        .await?;
    ensure!(
        r.status().is_success(),
        "create the app: {}",
        r.text().await?
    );
    let r = http
        .post(format!("{url}/v1/apps/site/deploys"))
        .bearer_auth(&key)
        .header("Content-Type", "application/gzip")
        .body(site(b"<h1>failover</h1>\n")?)
        .send()
        .await?;
    ensure!(r.status().is_success(), "deploy: {}", r.text().await?);
    let d: Value = r.json().await?;
    let path = format!(
        "{url}/v1/apps/site/deploys/{}",
        d["id"].as_str().unwrap_or_default()
    );
    until(900, "the deploy live", || async {
        let d: Value = http
            .get(&path)
            .bearer_auth(&key)
            .send()
            .await?
            .json()
            .await?;
        match d["state"].as_str() {
            Some("live") => Ok(Some(())),
            Some("failed") => bail!("the deploy failed: {d}"),
            _ => Ok(None),
        }
    })
    .await?;
    let deploy_ms = deployed.elapsed().as_secs_f64() * 1e3;
    let vm_host = || async {
        value(
            &db.url,
            "SELECT host_id FROM sandboxes WHERE on_host_loss = 'restore' \
             AND checkpoint IS NOT NULL",
        )
        .await
    };
    until(300, "the app's VM checkpointed", || async {
        vm_host().await
    })
    .await?;

    let page = || async {
        let r = http
            .get(format!("http://127.0.0.1:{proxy_port}/"))
            .header("Host", format!("site.localhost:{proxy_port}"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match r {
            Ok(r) if r.status().is_success() => Ok(Some(r.text().await?)),
            _ => Ok(None),
        }
    };
    let first = until(60, "the app answering", page).await?;
    ensure!(first.contains("failover"), "the app's page: {first}");

    let (mut first_byte, mut dead) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let holder = vm_host().await?.context("the app's VM has no host")?;
        let Some(i) = agents.iter().position(|g| g.name == holder) else {
            bail!("the app's VM is on {holder}, not one of this part's hosts");
        };
        agents[i].lose();
        let lost = Instant::now();
        let mut dead_at = None;
        let body = loop {
            if dead_at.is_none() {
                let state = value(
                    &db.url,
                    &format!("SELECT state FROM hosts WHERE id = '{holder}'"),
                )
                .await?;
                if state.as_deref() == Some("dead") {
                    dead_at = Some(lost.elapsed().as_secs_f64() * 1e3);
                }
            }
            if let Some(body) = page().await? {
                break body;
            }
            ensure!(
                lost.elapsed() < Duration::from_secs(180),
                "the app did not answer within 180 s of its host's loss"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let ms = lost.elapsed().as_secs_f64() * 1e3;
        ensure!(body.contains("failover"), "the app's page: {body}");
        let now_on = vm_host().await?.unwrap_or_default();
        ensure!(now_on != holder, "the app's VM is still on {holder}");
        eprintln!(
            "failover {}: {holder} lost, dead after {:.0} ms, the app answered from {now_on} after {ms:.0} ms",
            run + 1,
            dead_at.unwrap_or(f64::NAN)
        );
        first_byte.push(ms);
        if let Some(d) = dead_at {
            dead.push(d);
        }
        // The lost host comes back (its copy of the VM goes when it joins) for the next run.
        agents[i].start()?;
        ready(holder.clone()).await?;
    }
    let (db_connect, db_lost_commits) =
        database_failovers(&http, &url, &key, &db.url, db_port, &mut agents, runs).await?;
    for agent in &mut agents {
        agent.lose();
    }
    Ok(Failover {
        first_byte,
        dead,
        deploy_ms,
        db_connect,
        db_lost_commits,
    })
}

/// `psql -XAt -c sql` as the database's owner through the front on `front_port` (its
/// connection URI with that port and `hostaddr=127.0.0.1`, so TLS names the database).
async fn psql(uri: &str, front_port: u16, sql: &str) -> anyhow::Result<String> {
    let (head, tail) = uri
        .split_once('?')
        .context("a connection URI with options")?;
    let (base, db) = head.rsplit_once('/').context("a connection URI")?;
    let (host, _) = base
        .rsplit_once(':')
        .context("a connection URI with a port")?;
    let uri = format!("{host}:{front_port}/{db}?{tail}&hostaddr=127.0.0.1");
    let out = tokio::process::Command::new("psql")
        .arg(&uri)
        .args(["-XAt", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .await
        .context("run psql")?;
    ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The database part of [`app_failover`]: `runs` losses of the host holding a database's
/// volume, a client committing all along; (time to the first query answered, acknowledged
/// commits missing — the newest ones, not yet archived: the RPO; a gap fails the part).
async fn database_failovers(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    db: &str,
    front_port: u16,
    agents: &mut [Agent],
    runs: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let r = http
        .post(format!("{url}/v1/databases"))
        .bearer_auth(key)
        .json(&json!({"name": "bench"}))
        .timeout(Duration::from_secs(600))
        .send()
        .await?;
    ensure!(
        r.status().is_success(),
        "create a database: {}",
        r.text().await?
    );
    let made: Value = r.json().await?;
    let uri = made["connection_uri"]
        .as_str()
        .context("the database's connection URI")?
        .to_owned();
    psql(
        &uri,
        front_port,
        "create table commits (n bigint primary key)",
    )
    .await?;
    // Its first base backup finished: what a failover restores from.
    until(300, "the database's first base backup", || async {
        let n = value(
            db,
            "SELECT count(*)::text FROM volume_backups WHERE state = 'done'",
        )
        .await?;
        Ok(n.filter(|n| n != "0"))
    })
    .await?;
    let volume_host = || async {
        value(
            db,
            "SELECT v.host_id FROM databases d JOIN volumes v ON v.id = d.volume_id",
        )
        .await
    };
    let (mut connect, mut lost_commits) = (Vec::new(), Vec::new());
    let mut next = 1u64;
    for run in 0..runs {
        // Commits for a few seconds, then the host is lost while they go on.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (uri, stop) = (uri.clone(), stop.clone());
            let first = next;
            tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut n = first;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if psql(
                        &uri,
                        front_port,
                        &format!("insert into commits values ({n})"),
                    )
                    .await
                    .is_ok()
                    {
                        acked.push(n);
                    }
                    n += 1;
                }
                (acked, n)
            })
        };
        tokio::time::sleep(Duration::from_secs(5)).await;
        let holder = volume_host().await?.context("the database's volume host")?;
        let Some(i) = agents.iter().position(|g| g.name == holder) else {
            bail!("the database's volume is on {holder}, not one of this part's hosts");
        };
        agents[i].lose();
        let lost = Instant::now();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (acked, after) = writer.await?;
        next = after;
        let present = loop {
            if let Ok(v) = psql(&uri, front_port, "select count(*) from commits").await {
                break v;
            }
            ensure!(
                lost.elapsed() < Duration::from_secs(300),
                "the database did not answer within 300 s of its host's loss"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let ms = lost.elapsed().as_secs_f64() * 1e3;
        let listed = psql(
            &uri,
            front_port,
            "select string_agg(n::text, ',') from commits",
        )
        .await?;
        let have: std::collections::HashSet<u64> =
            listed.split(',').filter_map(|n| n.parse().ok()).collect();
        let missing = acked.iter().filter(|n| !have.contains(n)).count();
        // Archived commits are a prefix of the acknowledged ones (WAL is archived in order):
        // one missing before one present would be an archived commit lost.
        let newest_present = acked.iter().filter(|n| have.contains(n)).max().copied();
        let gap = acked
            .iter()
            .any(|n| !have.contains(n) && newest_present.is_some_and(|p| *n < p));
        let now_on = volume_host().await?.unwrap_or_default();
        eprintln!(
            "database failover {}: {holder} lost, {} commits acknowledged ({present} rows now), \
             {missing} missing, answering from {now_on} after {ms:.0} ms",
            run + 1,
            acked.len()
        );
        ensure!(
            !gap,
            "an acknowledged commit older than one present is missing"
        );
        connect.push(ms);
        lost_commits.push(missing as f64);
        agents[i].start()?;
        let host = holder.clone();
        until(120, "the lost host back", || async {
            let state = value(db, &format!("SELECT state FROM hosts WHERE id = '{host}'")).await?;
            Ok((state.as_deref() == Some("ready")).then_some(()))
        })
        .await?;
    }
    Ok((connect, lost_commits))
}
