//! The membership parts: how long a host whose agent went silent takes to be marked dead, and
//! whether a PostgreSQL restart under attending agents costs any host its lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use pandastack_agent_link::membership::{Capacity, Joined, Renewal};
use pandastack_agent_link::{
    serve_membership, Attendance, HostReport, Members, MembersError, Replica,
};
use pandastack_cluster::Role;
use pandastack_control::membership::{LeaseReaper, StoreMembers, LEASE, REAP_EVERY};
use pandastack_store::{HostState, Store};
use serde_json::json;
use sqlx::Connection;
use tokio::sync::watch;

use super::{round1, Pki, ScratchDb, Task};
use crate::cmd::bench::ms;

/// How often a replica renews the leases of the agents attending it (`cmd/replica.rs`).
const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How long a part waits for something that should take seconds before it gives up.
const PATIENCE: Duration = Duration::from_secs(60);

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
pub(super) async fn dead_host_detection(
    pki: &Pki,
    url: &str,
    runs: usize,
) -> anyhow::Result<Vec<f64>> {
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
pub(super) struct Restarted {
    pub(super) reaped: usize,
    pub(super) first_renewal_ms: Option<f64>,
    pub(super) details: serde_json::Value,
}

/// `store_restart_reaped_hosts`: `agents` agents attend a replica whose reaper is reaping;
/// `cmd` restarts PostgreSQL; two leases after it answers again, how many hosts were reaped
/// (must be 0), and when the first renewal went through.
pub(super) async fn store_restart(
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
