//! `pandastack bench cluster`: the cluster's control paths on this machine (issue #38) —
//! placement in one PostgreSQL transaction at 3 and at 200 simulated hosts, how long an agent
//! that went silent takes to be marked dead, whether a PostgreSQL restart costs any host its
//! lease, and what an exec costs through the agent link and a replica's fleet over the same
//! exec in-process (real guests).
//!
//! Everything runs in this process, as the binary's own parts: a replica's membership service
//! and lease reaper (as `pandastack server --cluster` runs them), agents' attendance, the agent
//! link — over loopback mutual TLS with certificates from a cluster CA made in a temporary
//! directory. Each part gets a fresh database in the PostgreSQL server `--state` names (a
//! random name, dropped afterwards); nothing else on that server is touched.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use pandastack_agent_link::membership::{Capacity, Joined, Renewal};
use pandastack_agent_link::{
    serve_membership, Attendance, HostReport, Members, MembersError, RemoteHost, Replica,
};
use pandastack_cluster::{ClusterCa, Identity, Role};
use pandastack_control::membership::{LeaseReaper, StoreMembers, LEASE, REAP_EVERY};
use pandastack_host::{ExecSpec, Host};
use pandastack_store::{HostState, Store};
use serde_json::json;
use sqlx::Connection;
use tokio::sync::watch;

use super::bench::{host_info, metric, ms, Metric};

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// A PostgreSQL server (`postgres://…`; the database named in it is used only to make and
    /// drop one scratch database per part).
    #[arg(long, env = "PANDASTACK_TEST_POSTGRES")]
    state: String,
    /// A shell command (`sh -c`) that restarts that PostgreSQL server keeping its data, down a
    /// few seconds; without it `store_restart_reaped_hosts` is not measured (null in the JSON).
    #[arg(long)]
    pg_restart_cmd: Option<String>,
    /// Root filesystem image with the guest agent, for `forward_exec_overhead_ms`; without it
    /// that part is not measured (null in the JSON).
    #[arg(long, env = "PANDASTACK_TEST_ROOTFS")]
    image: Option<PathBuf>,
    /// Guest kernel (default: the cached build).
    #[arg(long, env = "PANDASTACK_KERNEL")]
    kernel: Option<PathBuf>,
    /// Scratch directory of the real host (default: a temporary directory under /var/tmp).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Simulated host counts to measure placement at.
    #[arg(long, value_delimiter = ',', default_value = "3,200")]
    hosts: Vec<usize>,
    /// Creates placed at each host count.
    #[arg(long, default_value_t = 1000)]
    creates: usize,
    /// Runs of the dead-host detection.
    #[arg(long, default_value_t = 5)]
    detect_runs: usize,
    /// Agents attending while PostgreSQL restarts.
    #[arg(long, default_value_t = 20)]
    restart_agents: usize,
    /// Measured execs on each side (in-process, through the agent link, through a fleet): the
    /// overhead is a difference of p50s of guest execs that spread by tens of ms under TCG, so
    /// it takes this many to be stable to about half a millisecond.
    #[arg(long, default_value_t = 1000)]
    execs: usize,
    /// Only these parts (default: all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<Part>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    Placement,
    Detect,
    Restart,
    Forward,
}

/// How often a replica renews the leases of the agents attending it (`cmd/replica.rs`).
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How long a part waits for something that should take seconds before it gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// Targets of issue #38 for this machine.
const PLACEMENT_P50_MS: f64 = 2.0;
const PLACEMENT_P99_MS: f64 = 10.0;
const FORWARD_P50_MS: f64 = 2.0;
const DETECT_MS: f64 = 10_000.0;

pub async fn run(a: ClusterArgs) -> anyhow::Result<ExitCode> {
    ensure!(
        a.state.starts_with("postgres://") || a.state.starts_with("postgresql://"),
        "--state must be a postgres:// URL"
    );
    let wanted = |p: Part| a.only.is_empty() || a.only.contains(&p);
    let pki = Pki::new()?;
    let mut r = Report::default();
    if wanted(Part::Placement) {
        r.placement(&a).await?;
    }
    if wanted(Part::Detect) {
        r.detect(&a, &pki).await?;
    }
    if wanted(Part::Restart) {
        r.restart(&a, &pki).await?;
    }
    if wanted(Part::Forward) {
        r.forward(&a, &pki).await?;
    }
    r.print();
    if let Some(path) = &a.json {
        let mut out = serde_json::Map::new();
        out.insert("name".into(), json!("cluster"));
        let accel = r.accel.unwrap_or_else(|| "none (no guests ran)".into());
        out.insert("accel".into(), json!(accel));
        out.insert("host".into(), host_info());
        out.insert("postgres".into(), json!(server_version(&a.state).await));
        out.insert("metrics".into(), serde_json::to_value(&r.metrics)?);
        out.insert("targets_met".into(), r.met.into());
        out.extend(r.details);
        std::fs::write(path, serde_json::to_vec_pretty(&out)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// What the parts measured: p50/p99 figures (the `metrics` of every bench JSON, which `bench
/// diff` compares), each part's details, and which targets were met.
#[derive(Default)]
struct Report {
    metrics: BTreeMap<String, Metric>,
    details: serde_json::Map<String, serde_json::Value>,
    met: serde_json::Map<String, serde_json::Value>,
    accel: Option<String>,
}

impl Report {
    async fn placement(&mut self, a: &ClusterArgs) -> anyhow::Result<()> {
        let mut parts = serde_json::Map::new();
        for &n in &a.hosts {
            let db = ScratchDb::create(&a.state).await?;
            let r = placement(&db.url, n, a.creates).await;
            db.remove().await;
            let p = r?;
            eprintln!(
                "placement at {n} hosts: p50 {:.1} ms, template-local {:.1}% while room",
                p.metric.p50,
                p.local_share * 100.0
            );
            if n == 200 {
                let met = p.metric.p50 <= PLACEMENT_P50_MS && p.metric.p99 <= PLACEMENT_P99_MS;
                self.met.insert("placement_200hosts".into(), json!(met));
            }
            parts.insert(n.to_string(), p.details);
            self.metrics.insert(
                format!("placement_not_template_local_{n}hosts_pct"),
                metric(vec![(1.0 - p.local_share) * 100.0], "%"),
            );
            self.metrics
                .insert(format!("placement_{n}hosts_ms"), p.metric);
        }
        self.details.insert("placement".into(), parts.into());
        Ok(())
    }

    async fn detect(&mut self, a: &ClusterArgs, pki: &Pki) -> anyhow::Result<()> {
        let db = ScratchDb::create(&a.state).await?;
        let r = dead_host_detection(pki, &db.url, a.detect_runs).await;
        db.remove().await;
        let runs = r?;
        let max = runs.iter().copied().fold(0.0, f64::max);
        self.met
            .insert("dead_host_detect".into(), json!(max <= DETECT_MS));
        let each: Vec<f64> = runs.iter().copied().map(round1).collect();
        self.details.insert(
            "dead_host_detect".into(),
            json!({ "runs_ms": each, "max_ms": round1(max) }),
        );
        self.metrics
            .insert("dead_host_detect_ms".into(), metric(runs, "ms"));
        Ok(())
    }

    async fn restart(&mut self, a: &ClusterArgs, pki: &Pki) -> anyhow::Result<()> {
        let Some(cmd) = &a.pg_restart_cmd else {
            eprintln!("store restart: no --pg-restart-cmd, not measured");
            self.details
                .insert("store_restart_reaped_hosts".into(), serde_json::Value::Null);
            self.details.insert(
                "store_restart".into(),
                json!({ "skipped": "no --pg-restart-cmd" }),
            );
            return Ok(());
        };
        let db = ScratchDb::create(&a.state).await?;
        let r = store_restart(pki, &db, cmd, a.restart_agents).await;
        db.remove().await;
        let r = r?;
        self.met
            .insert("store_restart".into(), json!(r.reaped == 0));
        self.details
            .insert("store_restart_reaped_hosts".into(), json!(r.reaped));
        self.metrics.insert(
            "store_restart_reaped_hosts".into(),
            metric(vec![r.reaped as f64], "count"),
        );
        if let Some(first) = r.first_renewal_ms {
            self.metrics.insert(
                "store_restart_first_renewal_ms".into(),
                metric(vec![first], "ms"),
            );
        }
        self.details.insert("store_restart".into(), r.details);
        Ok(())
    }

    async fn forward(&mut self, a: &ClusterArgs, pki: &Pki) -> anyhow::Result<()> {
        let Some(image) = &a.image else {
            eprintln!("forward exec: no --image, not measured");
            self.details.insert(
                "forward_exec".into(),
                json!({ "skipped": "no --image (a root filesystem with the guest agent)" }),
            );
            return Ok(());
        };
        let db = ScratchDb::create(&a.state).await?;
        let f = forward_exec(a, image, pki, &db.url).await;
        db.remove().await;
        let f = f?;
        let local = metric(f.local, "ms");
        let over = |other: &Metric| Metric {
            p50: round1(other.p50 - local.p50),
            p99: round1(other.p99 - local.p99),
            n: other.n,
            unit: "ms",
        };
        let (remote, fleet) = (metric(f.remote, "ms"), metric(f.fleet, "ms"));
        let (overhead, through_fleet) = (over(&remote), over(&fleet));
        let met = |o: &Metric| json!(o.p50 <= FORWARD_P50_MS);
        self.met.insert("forward_exec".into(), met(&overhead));
        self.met
            .insert("forward_exec_fleet".into(), met(&through_fleet));
        let m = &mut self.metrics;
        m.insert("forward_exec_overhead_ms".into(), overhead);
        m.insert("forward_exec_fleet_overhead_ms".into(), through_fleet);
        m.insert("exec_true_local_ms".into(), local);
        m.insert("exec_true_agent_link_ms".into(), remote);
        m.insert("exec_true_fleet_ms".into(), fleet);
        self.accel = Some(f.accel);
        Ok(())
    }

    fn print(&self) {
        println!(
            "{:<44} {:>10} {:>10} {:>5}  target",
            "metric", "p50", "p99", "n"
        );
        for (k, m) in &self.metrics {
            println!(
                "{k:<44} {:>10.1} {:>10.1} {:>5} {:<5} {}",
                m.p50,
                m.p99,
                m.n,
                m.unit,
                target(k)
            );
        }
    }
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// The target printed beside a metric.
fn target(name: &str) -> String {
    match name {
        "placement_200hosts_ms" => format!("p50 ≤ {PLACEMENT_P50_MS}, p99 ≤ {PLACEMENT_P99_MS}"),
        "forward_exec_overhead_ms" | "forward_exec_fleet_overhead_ms" => {
            format!("p50 ≤ {FORWARD_P50_MS}")
        }
        "dead_host_detect_ms" => format!("≤ {DETECT_MS} every run (p99 of 5 is the max)"),
        "store_restart_reaped_hosts" => "= 0".into(),
        _ => String::new(),
    }
}

/// The server's version, for the record.
async fn server_version(url: &str) -> Option<String> {
    let mut c = sqlx::PgConnection::connect(url).await.ok()?;
    let v: (String,) = sqlx::query_as("SHOW server_version")
        .fetch_one(&mut c)
        .await
        .ok()?;
    let _ = c.close().await;
    Some(v.0)
}

/// A database of its own in the PostgreSQL server, for one part; dropped by [`ScratchDb::remove`].
struct ScratchDb {
    admin: String,
    name: String,
    url: String,
}

impl ScratchDb {
    async fn create(admin: &str) -> anyhow::Result<ScratchDb> {
        // `bench_` and 16 hex digits: a valid identifier, no quoting needed.
        let name = pandastack_store::new_id("bench_");
        let mut url = reqwest::Url::parse(admin).context("--state is not a URL")?;
        url.set_path(&format!("/{name}"));
        let mut c = sqlx::PgConnection::connect(admin)
            .await
            .context("connect to --state")?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut c)
            .await
            .with_context(|| format!("create database {name}"))?;
        let _ = c.close().await;
        Ok(ScratchDb {
            admin: admin.to_owned(),
            name,
            url: url.into(),
        })
    }

    /// Drops the database (closing what is still connected to it); a failure is only logged.
    async fn remove(self) {
        let dropped = async {
            let mut c = sqlx::PgConnection::connect(&self.admin).await?;
            sqlx::query(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut c)
            .await?;
            c.close().await
        };
        if let Err(e) = dropped.await {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                database = self.name,
                "could not drop the bench's database"
            );
        }
    }
}

/// A cluster CA in a temporary directory; identities are written as bundles (as `pandastack
/// cluster cert` does) and loaded from them.
struct Pki {
    dir: tempfile::TempDir,
    ca: ClusterCa,
}

impl Pki {
    fn new() -> anyhow::Result<Pki> {
        let dir = tempfile::tempdir()?;
        let ca = ClusterCa::init(&dir.path().join("ca"))?;
        Ok(Pki { dir, ca })
    }

    fn identity(&self, role: Role, name: &str) -> anyhow::Result<Identity> {
        let bundle = self.dir.path().join(format!("{}-{name}", role.as_str()));
        if !bundle.exists() {
            let issued = self.ca.issue(role, name, &[], 1)?;
            pandastack_cluster::write_bundle(&bundle, &issued, &self.ca)?;
        }
        Ok(Identity::load(&bundle)?)
    }
}

/// Aborts its task when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The store's membership, recording each renewal call.
struct Watched {
    inner: StoreMembers,
    joins: AtomicUsize,
    /// Each renewal call: when it started, when it returned, whether the store took it.
    renewals: Mutex<Vec<(Instant, Instant, bool)>>,
}

#[async_trait::async_trait]
impl Members for Watched {
    async fn join(&self, report: HostReport) -> Result<Joined, MembersError> {
        self.joins.fetch_add(1, Ordering::SeqCst);
        self.inner.join(report).await
    }

    async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError> {
        let started = Instant::now();
        let r = self.inner.renew(hosts).await;
        self.renewals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((started, Instant::now(), r.is_ok()));
        r
    }
}

/// A replica's membership side over `store`: the service agents attend and the lease reaper,
/// as `pandastack server --cluster` runs them (`cmd/replica.rs`).
struct ReplicaSide {
    replica: Replica,
    members: Arc<Watched>,
    started: Instant,
    _serve: Task,
    _reap: Task,
}

async fn start_replica(pki: &Pki, store: &Store) -> anyhow::Result<ReplicaSide> {
    let identity = pki.identity(Role::Server, "replica-1")?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let replica = Replica {
        name: "replica-1".into(),
        addr: listener.local_addr()?,
    };
    let members = Arc::new(Watched {
        inner: StoreMembers::new(store.clone()),
        joins: AtomicUsize::new(0),
        renewals: Mutex::new(Vec::new()),
    });
    let serving: Arc<dyn Members> = members.clone();
    let serve = Task(tokio::spawn(async move {
        if let Err(e) = serve_membership(&identity, listener, serving, RENEW_EVERY).await {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "the bench's replica stopped"
            );
        }
    }));
    let reap = Task(tokio::spawn(
        LeaseReaper::new(store.clone(), LEASE).run(REAP_EVERY, pandastack_store::now_ms),
    ));
    Ok(ReplicaSide {
        replica,
        members,
        started: Instant::now(),
        _serve: serve,
        _reap: reap,
    })
}

impl ReplicaSide {
    /// Waits until the reaper is past the hold it starts with (a whole lease of store answers),
    /// as in a replica that has been up a while.
    async fn reaping(&self) {
        let ready = LEASE + 2 * REAP_EVERY;
        if let Some(left) = ready.checked_sub(self.started.elapsed()) {
            tokio::time::sleep(left).await;
        }
    }
}

fn report(host_id: &str) -> HostReport {
    HostReport {
        host_id: host_id.into(),
        name: format!("{host_id}.bench"),
        address: "127.0.0.1:7443".into(),
        capacity: Capacity {
            vcpus: 16,
            memory_mib: 65536,
            disk_bytes: 1 << 40,
            free_slots: 200,
            ..Default::default()
        },
        templates: vec!["minimal".into()],
        compat_key: "bench".into(),
    }
}

/// An agent (its own certificate) attending `replica` as `host_id` with the real heartbeat.
fn attend(
    pki: &Pki,
    replica: &Replica,
    host_id: &str,
) -> anyhow::Result<(Task, watch::Receiver<Option<i64>>)> {
    let identity = pki.identity(Role::Agent, host_id)?;
    let id = host_id.to_owned();
    let attendance = Attendance::new(&identity, vec![replica.clone()], move || report(&id))?;
    let epoch = attendance.epoch();
    Ok((Task(tokio::spawn(attendance.run())), epoch))
}

async fn joined(host_id: &str, epoch: &mut watch::Receiver<Option<i64>>) -> anyhow::Result<i64> {
    let e = tokio::time::timeout(PATIENCE, epoch.wait_for(Option::is_some))
        .await
        .with_context(|| format!("{host_id} did not join"))?
        .context("attendance ended")?;
    Ok(e.unwrap_or_default())
}

/// `dead_host_detect_ms`: an agent attends, its lease is renewed, then its attendance stops
/// (the stream drops and no heartbeat follows, as when the agent is killed): how long until
/// its host is `dead`. Each run stops at another point of the heartbeat and reaper ticks.
async fn dead_host_detection(pki: &Pki, url: &str, runs: usize) -> anyhow::Result<Vec<f64>> {
    let store = Store::connect(url).await?;
    let side = start_replica(pki, &store).await?;
    let mut out = Vec::new();
    for i in 0..runs {
        let host = format!("host-detect-{i}");
        let (agent, mut epoch) = attend(pki, &side.replica, &host)?;
        joined(&host, &mut epoch).await?;
        let first = store.hosts().get(&host).await?.lease_until;
        let since = Instant::now();
        while store.hosts().get(&host).await?.lease_until <= first {
            ensure!(
                since.elapsed() < PATIENCE,
                "{host}'s lease was never renewed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        side.reaping().await;
        tokio::time::sleep(Duration::from_millis(1000 + 370 * i as u64)).await;
        drop(agent);
        let stopped = Instant::now();
        loop {
            if store.hosts().get(&host).await?.state == HostState::Dead {
                break;
            }
            ensure!(stopped.elapsed() < PATIENCE, "{host} was never reaped");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let took = ms(stopped.elapsed());
        eprintln!("dead host detection {}/{runs}: {took:.0} ms", i + 1);
        out.push(took);
    }
    Ok(out)
}

/// What a PostgreSQL restart under attending agents did: hosts reaped, milliseconds from
/// PostgreSQL answering again to the first renewal it took, and the rest for the JSON.
struct Restarted {
    reaped: usize,
    first_renewal_ms: Option<f64>,
    details: serde_json::Value,
}

/// `store_restart_reaped_hosts`: `agents` agents attend a replica whose reaper is reaping;
/// `cmd` restarts PostgreSQL; two leases after it answers again, how many hosts were reaped
/// (must be 0), and when the first renewal went through.
async fn store_restart(
    pki: &Pki,
    db: &ScratchDb,
    cmd: &str,
    agents: usize,
) -> anyhow::Result<Restarted> {
    let store = Store::connect(&db.url).await?;
    let side = start_replica(pki, &store).await?;
    let mut attending = Vec::new();
    let mut before = HashMap::new();
    for i in 0..agents {
        let host = format!("host-restart-{i:02}");
        let (task, epoch) = attend(pki, &side.replica, &host)?;
        attending.push((host, task, epoch));
    }
    for (host, _, epoch) in &mut attending {
        before.insert(host.clone(), joined(host, epoch).await?);
    }
    side.reaping().await;
    let joins_before = side.members.joins.load(Ordering::SeqCst);
    eprintln!("store restart: {agents} agents attending; restarting PostgreSQL");

    let (down_tx, down_rx) = tokio::sync::oneshot::channel();
    let probe = tokio::spawn(probe_outage(db.admin.clone(), down_tx));
    let t = Instant::now();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .status()
        .await
        .context("run --pg-restart-cmd")?;
    let cmd_ms = ms(t.elapsed());
    ensure!(status.success(), "--pg-restart-cmd: {status}");
    let (down_at, back_at) = match tokio::time::timeout(PATIENCE, down_rx).await {
        Ok(Ok(Some(seen))) => seen,
        Ok(Ok(None)) => bail!("--pg-restart-cmd did not take PostgreSQL down (a probe got in)"),
        _ => bail!("PostgreSQL did not answer again within {PATIENCE:?} of the restart"),
    };
    probe.abort();
    eprintln!(
        "store restart: PostgreSQL down {:.0} ms; watching two leases",
        ms(back_at - down_at)
    );
    tokio::time::sleep_until((back_at + 2 * LEASE).into()).await;

    let mut reaped = 0;
    let mut epochs_changed = 0;
    for (host, epoch) in &before {
        let row = store.hosts().get(host).await?;
        reaped += usize::from(row.state == HostState::Dead);
        epochs_changed += usize::from(row.epoch != *epoch);
    }
    let renewals = side
        .members
        .renewals
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    // Renewals that returned after PostgreSQL went away: the first the store took, as
    // milliseconds after it answered again (negative: before the probe saw it back).
    let since_down: Vec<_> = renewals.iter().filter(|r| r.1 > down_at).collect();
    let first_renewal_ms = since_down.iter().find(|r| r.2).map(|r| {
        let (early, late) = (
            ms(back_at.saturating_duration_since(r.1)),
            ms(r.1.saturating_duration_since(back_at)),
        );
        late - early
    });
    let longest = since_down.iter().map(|r| ms(r.1 - r.0)).fold(0.0, f64::max);
    let details = json!({
        "command": cmd,
        "agents": agents,
        "reaped_hosts": reaped,
        "epochs_changed": epochs_changed,
        "joins_during": side.members.joins.load(Ordering::SeqCst) - joins_before,
        "command_ms": round1(cmd_ms),
        "postgres_down_ms": round1(ms(back_at - down_at)),
        "first_renewal_after_back_ms": first_renewal_ms.map(round1),
        "renewals_failed": since_down.iter().filter(|r| !r.2).count(),
        "longest_renewal_call_ms": round1(longest),
        "watched_after_back_ms": round1(ms(back_at.elapsed())),
    });
    drop(attending);
    drop(side);
    Ok(Restarted {
        reaped,
        first_renewal_ms,
        details,
    })
}

/// Connects to `url` every 25 ms; sends when it first failed and when it answered again after
/// that (`None` if it never failed within [`PATIENCE`]).
async fn probe_outage(url: String, seen: tokio::sync::oneshot::Sender<Option<(Instant, Instant)>>) {
    let started = Instant::now();
    let mut down_at = None;
    loop {
        let answered = async {
            let mut c = sqlx::PgConnection::connect(&url).await?;
            sqlx::query("SELECT 1").execute(&mut c).await?;
            c.close().await
        };
        let ok = tokio::time::timeout(Duration::from_secs(2), answered)
            .await
            .is_ok_and(|r| r.is_ok());
        let now = Instant::now();
        match (ok, down_at) {
            (false, None) => down_at = Some(now),
            (true, Some(d)) => {
                let _ = seen.send(Some((d, now)));
                return;
            }
            (true, None) if started.elapsed() > PATIENCE => {
                let _ = seen.send(None);
                return;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Exec round trips (ms) in-process, through the agent link and through a replica's fleet.
struct Forwarded {
    local: Vec<f64>,
    remote: Vec<f64>,
    fleet: Vec<f64>,
    accel: String,
}

/// Unmeasured execs on each side before the measured ones (the guest's exec path translated by
/// TCG, the link's connection warm).
const EXEC_WARM_UP: usize = 20;

/// The flags of the real host the forward part starts (`pandastack server`'s).
#[derive(clap::Parser)]
struct HostFlags {
    #[command(flatten)]
    host: super::local_host::LocalHostArgs,
}

/// `forward_exec_overhead_ms`: `true` exec'd in one running sandbox of a real host, in-process
/// (`LocalHost`, as the single-node server calls it), through the agent link (`RemoteHost` to
/// that host served on loopback mutual TLS) and through a replica's `Fleet` (the owner from
/// the store at `url`, then that link), in turn in blocks of ten. The host is `pandastack
/// server`'s (`local_host::start_host`, its defaults) on a scratch data directory, with no
/// warm pool and no sandbox networking (neither is on an exec's path; networking would claim
/// the host's network names).
async fn forward_exec(
    a: &ClusterArgs,
    image: &Path,
    pki: &Pki,
    url: &str,
) -> anyhow::Result<Forwarded> {
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    std::fs::create_dir_all(&parent)?;
    let root = tempfile::Builder::new()
        .prefix("ps-bench-cluster-")
        .tempdir_in(&parent)?;
    let templates = root.path().join("templates");
    std::fs::create_dir_all(&templates)?;
    let mut argv = vec![
        "bench".into(),
        "--data-dir".into(),
        root.path().join("data"),
    ];
    argv.extend(["--templates-dir".into(), templates]);
    argv.extend(["--network", "off", "--pool-size", "0"].map(PathBuf::from));
    if let Some(k) = &a.kernel {
        argv.extend(["--kernel".into(), k.clone()]);
    }
    let flags = <HostFlags as clap::Parser>::try_parse_from(argv)?.host;
    let objects = super::local_host::open_objects(&flags).await?;
    let started = super::local_host::start_host(&flags, |_| false, objects).await?;
    eprintln!("accelerator: {}", started.accel);
    let local = started.host;
    let shape = pandastack_host::Shape {
        vcpus: 1,
        memory_mib: 512,
        disk: None,
    };
    let bake_ms = local.bake_image("bench", image, shape).await?;
    eprintln!("forward exec: template baked in {bake_ms} ms");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let agent_identity = pki.identity(Role::Agent, "host-bench")?;
    let serving = Arc::clone(&local);
    let _agent = Task(tokio::spawn(async move {
        if let Err(e) = pandastack_agent_link::serve(&agent_identity, listener, serving).await {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "the bench's agent link stopped"
            );
        }
    }));
    let replica = pki.identity(Role::Server, "replica-1")?;
    let remote: Arc<dyn Host> = Arc::new(RemoteHost::connect(&replica, addr, "host-bench").await?);

    const ID: &str = "sb-bench-forward";
    local.create("bench", ID).await?;
    let fleet = fleet_to(url, &addr.to_string(), ID, replica).await?;
    let sides = [&local, &remote, &fleet];
    let measured = async {
        let mut took = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..EXEC_WARM_UP {
            for side in sides {
                exec_true(side, ID).await?;
            }
        }
        while took[0].len() < a.execs {
            for (side, took) in sides.iter().zip(&mut took) {
                for _ in 0..10 {
                    took.push(exec_true(side, ID).await?);
                }
            }
        }
        anyhow::Ok(took)
    }
    .await;
    if let Err(e) = local.destroy(ID).await {
        tracing::warn!(
            error = &e as &dyn std::error::Error,
            "destroy the bench's sandbox"
        );
    }
    let [local, remote, fleet] = measured?;
    Ok(Forwarded {
        local,
        remote,
        fleet,
        accel: started.accel.to_string(),
    })
}

/// A replica's `Fleet` over the store at `url`, where host `host-bench` joined at `address` and
/// sandbox `id` is on it.
async fn fleet_to(
    url: &str,
    address: &str,
    id: &str,
    replica: Identity,
) -> anyhow::Result<Arc<dyn Host>> {
    use pandastack_store::{HostCapacity, Joining, SandboxRow, SandboxState};
    let store = Store::connect(url).await?;
    let joining = Joining {
        id: "host-bench".into(),
        name: "host-bench".into(),
        address: address.into(),
        capacity: HostCapacity::default(),
        compat_key: "bench".into(),
        templates: vec!["bench".into()],
    };
    let now = pandastack_store::now_ms();
    store.hosts().join(&joining, 86_400_000, now).await?;
    let ws = store
        .keys()
        .create_workspace("bench-cluster", 10, 10)
        .await?;
    let mut row = SandboxRow::service(&ws.id, "host-bench", "bench", BTreeMap::new());
    row.id = id.into();
    row.state = SandboxState::Running;
    store.sandboxes().insert(&row).await?;
    let dial = Arc::new(pandastack_control::AgentDialer::new(replica));
    Ok(Arc::new(pandastack_control::Fleet::new(store, dial)))
}

/// `true` in sandbox `id` through `host`; milliseconds to its answer.
async fn exec_true(host: &Arc<dyn Host>, id: &str) -> anyhow::Result<f64> {
    let spec = ExecSpec {
        argv: vec!["true".into()],
        ..Default::default()
    };
    let t = Instant::now();
    let out = host.exec(id, spec).await?;
    let took = ms(t.elapsed());
    ensure!(out.exit_code == 0, "true exited {}", out.exit_code);
    Ok(took)
}

/// The template every create names; every third simulated host holds it.
const TEMPLATE: &str = "minimal";
/// Each simulated host: 32 GiB and 64 slots; each create 512 MiB, so 64 sandboxes fill one.
const HOST_MEMORY_MIB: i64 = 32_768;
const HOST_SLOTS: i64 = 64;
const CREATE_MEMORY_MIB: i64 = 512;
/// The last this many creates stay `starting` (creates in flight); older ones are `running`.
const IN_FLIGHT: usize = 8;
/// Creates before the measured ones (the connection's statements prepared).
const PLACE_WARM_UP: usize = 10;

/// What placing the creates on the simulated hosts took and where they went.
struct Placed {
    metric: Metric,
    /// Of the creates made while a host holding the template had room, the share placed on one.
    local_share: f64,
    details: serde_json::Value,
}

/// `placement_<n>hosts_ms`: `hosts` agents joined with capacity and a lease for a day (every
/// third holding [`TEMPLATE`]); `creates` creates through `SandboxRepo::insert_placed` (check
/// the workspace's limit, choose the host, insert the row: one transaction), each timed. Live
/// sandboxes are kept at three quarters of the hosts' room at most (the oldest deleted), so
/// hosts fill and empty as in use but never all fill; the last [`IN_FLIGHT`] are `starting`.
/// Fails if a host is ever given more than it holds.
async fn placement(url: &str, hosts: usize, creates: usize) -> anyhow::Result<Placed> {
    use pandastack_store::{Demand, HostCapacity, Joining, PlaceReason, SandboxRow, SandboxState};
    let store = Store::connect(url).await?;
    let ws = store
        .keys()
        .create_workspace("bench-cluster", 1_000_000, 1_000_000)
        .await?;
    let now = pandastack_store::now_ms();
    let mut local_hosts = std::collections::HashSet::new();
    for i in 0..hosts {
        let id = format!("host-{i:03}");
        let templates = if i % 3 == 0 {
            local_hosts.insert(id.clone());
            vec![TEMPLATE.to_owned()]
        } else {
            Vec::new()
        };
        let joining = Joining {
            name: format!("{id}.bench"),
            address: format!("10.9.{}.{}:7443", i / 250, i % 250 + 1),
            capacity: HostCapacity {
                vcpus: 16,
                memory_mib: HOST_MEMORY_MIB,
                disk_bytes: 1 << 40,
                free_slots: HOST_SLOTS,
                slots: HOST_SLOTS,
            },
            compat_key: "bench".into(),
            templates,
            id,
        };
        store.hosts().join(&joining, 86_400_000, now).await?;
    }
    let per_host = (HOST_MEMORY_MIB / CREATE_MEMORY_MIB).min(HOST_SLOTS) as usize;
    let population = creates.min(hosts * per_host * 3 / 4).max(1);
    let mut live: std::collections::VecDeque<(String, String)> = Default::default();
    let mut load: HashMap<String, usize> = HashMap::new();
    let (mut samples, mut most) = (Vec::new(), 0);
    let (mut room_creates, mut local_while_room, mut best_fit) = (0, 0, 0);
    for i in 0..PLACE_WARM_UP + creates {
        let room = local_hosts
            .iter()
            .any(|h| load.get(h).copied().unwrap_or(0) < per_host);
        let mut row = SandboxRow::service(&ws.id, "", TEMPLATE, BTreeMap::new());
        let demand = Demand {
            memory_mib: CREATE_MEMORY_MIB,
            template: Some(TEMPLATE),
            compat_key: None,
            host: None,
            exclude: &[],
            now_ms: pandastack_store::now_ms(),
        };
        let t = Instant::now();
        let (placed, _) = store
            .sandboxes()
            .insert_placed(&mut row, &[], &demand)
            .await
            .with_context(|| format!("create {i} at {hosts} hosts"))?;
        let took = ms(t.elapsed());
        let on = load.entry(placed.host_id.clone()).or_default();
        *on += 1;
        ensure!(
            *on <= per_host,
            "host {} was given {on} sandboxes, room for {per_host}",
            placed.host_id
        );
        most = most.max(*on);
        if i >= PLACE_WARM_UP {
            samples.push(took);
            best_fit += usize::from(placed.reason == PlaceReason::BestFit);
            if room {
                room_creates += 1;
                local_while_room += usize::from(placed.reason == PlaceReason::TemplateLocal);
            }
        }
        live.push_back((row.id, placed.host_id));
        if let Some(i) = live.len().checked_sub(IN_FLIGHT + 1) {
            store
                .sandboxes()
                .set_state(&live[i].0, SandboxState::Running)
                .await?;
        }
        if live.len() > population {
            if let Some((id, host)) = live.pop_front() {
                store.sandboxes().delete(&id).await?;
                *load.entry(host).or_default() -= 1;
            }
        }
    }
    let local_share = local_while_room as f64 / room_creates.max(1) as f64;
    let details = json!({
        "hosts": hosts,
        "hosts_holding_template": local_hosts.len(),
        "host_memory_mib": HOST_MEMORY_MIB,
        "host_slots": HOST_SLOTS,
        "create_memory_mib": CREATE_MEMORY_MIB,
        "creates_measured": samples.len(),
        "warm_up_creates": PLACE_WARM_UP,
        "live_sandboxes_kept": population,
        "in_flight_starting": IN_FLIGHT,
        "creates_while_room_on_template_host": room_creates,
        "template_local_while_room": local_while_room,
        "template_local_share": local_share,
        "placed_best_fit": best_fit,
        "most_on_one_host": most,
    });
    Ok(Placed {
        metric: metric(samples, "ms"),
        local_share,
        details,
    })
}
