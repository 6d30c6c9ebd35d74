//! Agents attending a replica, end to end: real `Attendance`s dialling a real
//! `serve_membership` over loopback mutual TLS (certificates from a cluster CA in a temporary
//! directory), the replica's `Members` the control plane's `StoreMembers` over a real SQLite
//! store — joins, batched renewals, a heartbeat's changed templates stored, a dropped stream
//! reaped, a reaped host fenced and joining again by itself, a store outage that keeps every
//! stream, and the peers a replica refuses.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pandastack_agent_link::membership::{Capacity, HostUpdate, Joined, Renewal};
use pandastack_agent_link::{
    serve_membership, Attendance, HostReport, Members, MembersError, Replica,
};
use pandastack_cluster::{Identity, Role};
use pandastack_control::membership::{StoreMembers, LEASE};
use pandastack_host::error_chain;
use pandastack_store::{now_ms, HostState, Store};
use pandastack_testkit::cluster::TestCa;
use tokio::sync::watch;

const TICK: Duration = Duration::from_millis(50);
const BEAT: Duration = Duration::from_millis(50);

/// The store's membership behind a switch (`down`: every call fails as an unreachable
/// PostgreSQL would), counting the calls that reached it.
struct Counting {
    inner: StoreMembers,
    down: AtomicBool,
    joins: AtomicUsize,
    renews: AtomicUsize,
    largest: AtomicUsize,
    reports: AtomicUsize,
}

#[derive(Debug, thiserror::Error)]
#[error("state store unreachable")]
struct Down;

#[async_trait::async_trait]
impl Members for Counting {
    async fn join(&self, report: HostReport) -> Result<Joined, MembersError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(MembersError::new(Down));
        }
        self.joins.fetch_add(1, Ordering::SeqCst);
        self.inner.join(report).await
    }

    async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(MembersError::new(Down));
        }
        self.renews.fetch_add(1, Ordering::SeqCst);
        self.largest.fetch_max(hosts.len(), Ordering::SeqCst);
        self.inner.renew(hosts).await
    }

    async fn report(&self, reports: &[HostUpdate]) -> Result<(), MembersError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(MembersError::new(Down));
        }
        self.reports.fetch_add(1, Ordering::SeqCst);
        self.inner.report(reports).await
    }
}

/// Aborts a task when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct World {
    cluster: TestCa,
    store: Store,
    members: Arc<Counting>,
    replica: Replica,
    _replica_task: Task,
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    world_ticking(TICK).await
}

async fn world_ticking(tick: Duration) -> World {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("state.db")).await.unwrap();
    let cluster = TestCa::new();
    let members = Arc::new(Counting {
        inner: StoreMembers::new(store.clone()),
        down: AtomicBool::new(false),
        joins: AtomicUsize::new(0),
        renews: AtomicUsize::new(0),
        largest: AtomicUsize::new(0),
        reports: AtomicUsize::new(0),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let replica = Replica {
        name: "replica-1".into(),
        addr: listener.local_addr().unwrap(),
    };
    let task = serve_replica(
        cluster.identity(Role::Server, "replica-1", &[]),
        listener,
        members.clone(),
        tick,
    );
    World {
        cluster,
        store,
        members,
        replica,
        _replica_task: task,
        _dir: dir,
    }
}

fn serve_replica(
    identity: Identity,
    listener: tokio::net::TcpListener,
    members: Arc<Counting>,
    tick: Duration,
) -> Task {
    Task(tokio::spawn(async move {
        if let Err(e) = serve_membership(&identity, listener, members, tick).await {
            panic!("replica stopped: {}", error_chain(&e));
        }
    }))
}

fn report(host_id: &str) -> HostReport {
    HostReport {
        host_id: host_id.into(),
        name: format!("{host_id}.example"),
        address: format!("{host_id}.example:7443"),
        capacity: Capacity {
            vcpus: 16,
            memory_mib: 65536,
            disk_bytes: 1 << 40,
            free_slots: 200,
            creates_in_flight: 0,
            slots: 256,
        },
        templates: vec!["base".into()],
        compat_key: "qemu-9.2/linux-6.12/x86-64-v3".into(),
    }
}

/// An agent whose certificate names `cert_name` (with `role`) attending `replicas` as
/// `host_id`.
fn attend(
    cluster: &TestCa,
    role: Role,
    cert_name: &str,
    host_id: &str,
    replicas: Vec<Replica>,
) -> (Task, watch::Receiver<Option<i64>>) {
    let host_id = host_id.to_owned();
    let attendance = Attendance::new(
        &cluster.identity(role, cert_name, &[]),
        replicas,
        move || report(&host_id),
    )
    .unwrap()
    .heartbeat_every(BEAT);
    let epoch = attendance.epoch();
    (Task(tokio::spawn(attendance.run())), epoch)
}

/// Waits (at most 10 s) until `f` holds.
async fn until<F: Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn joined(epoch: &mut watch::Receiver<Option<i64>>) -> i64 {
    let e = tokio::time::timeout(Duration::from_secs(10), epoch.wait_for(Option::is_some))
        .await
        .expect("joined in time")
        .unwrap();
    e.unwrap()
}

/// The ids of the hosts a reap reaped.
fn reaped(r: Vec<pandastack_store::Reaped>) -> Vec<String> {
    r.into_iter().map(|r| r.host_id).collect()
}

/// A replica address where nothing listens.
async fn nowhere() -> Replica {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    Replica {
        name: "replica-0".into(),
        addr: l.local_addr().unwrap(),
    }
}

/// An agent attends (past a replica that is down): its host is `ready` with the epoch it was
/// told and a lease in the future, as it reported itself; its heartbeats keep the lease moving.
#[tokio::test]
async fn an_agent_attends_and_its_heartbeats_renew_its_lease() {
    let w = world().await;
    let replicas = vec![nowhere().await, w.replica.clone()];
    let (_agent, mut epoch) = attend(&w.cluster, Role::Agent, "host-a", "host-a", replicas);
    let e = joined(&mut epoch).await;
    let row = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!(row.state, HostState::Ready);
    assert_eq!(row.epoch, e);
    assert!(row.lease_until > now_ms());
    assert_eq!(row.address.as_deref(), Some("host-a.example:7443"));
    assert_eq!(
        row.compat_key.as_deref(),
        Some("qemu-9.2/linux-6.12/x86-64-v3")
    );
    assert_eq!(row.capacity.vcpus, 16);
    assert_eq!((row.capacity.free_slots, row.capacity.slots), (200, 256));
    assert_eq!(row.templates, ["base"]);

    let first = row.lease_until;
    until("the lease renewed", || async {
        w.store.hosts().get("host-a").await.unwrap().lease_until > first
    })
    .await;
    let row = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!((row.epoch, row.state), (e, HostState::Ready));
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 1);
}

/// What an agent's heartbeats say changed (its templates, its memory) reaches the store under
/// the epoch it joined with, once per change — not at every heartbeat, and with no new join.
#[tokio::test]
async fn a_heartbeats_changed_templates_reach_the_store() {
    let w = world().await;
    let now: Arc<Mutex<(Vec<String>, i64)>> = Arc::new(Mutex::new((vec!["base".into()], 65536)));
    let says = now.clone();
    let attendance = Attendance::new(
        &w.cluster.identity(Role::Agent, "host-a", &[]),
        vec![w.replica.clone()],
        move || {
            let (templates, memory_mib) = says.lock().unwrap().clone();
            let mut r = report("host-a");
            r.templates = templates;
            r.capacity.memory_mib = memory_mib;
            r
        },
    )
    .unwrap()
    .heartbeat_every(BEAT);
    let mut epoch = attendance.epoch();
    let _agent = Task(tokio::spawn(attendance.run()));
    let e = joined(&mut epoch).await;
    // Heartbeats that repeat the join report nothing.
    tokio::time::sleep(TICK * 6).await;
    assert_eq!(w.members.reports.load(Ordering::SeqCst), 0);

    *now.lock().unwrap() = (vec!["python".into(), "base".into()], 32768);
    until("the new templates stored", || async {
        let row = w.store.hosts().get("host-a").await.unwrap();
        row.templates == ["base", "python"] && row.capacity.memory_mib == 32768
    })
    .await;
    tokio::time::sleep(TICK * 6).await;
    assert_eq!(
        w.members.reports.load(Ordering::SeqCst),
        1,
        "reported more than once"
    );
    let row = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!((row.epoch, row.state), (e, HostState::Ready));
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 1);
}

/// An agent's stream dropped: no more renewals, and once its lease lapses the reaper marks it
/// dead. The agent attending again gets a new, larger epoch and is `ready`.
#[tokio::test]
async fn a_dropped_stream_is_reaped_and_attending_again_gives_a_new_epoch() {
    let w = world().await;
    let (agent, mut epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-a",
        "host-a",
        vec![w.replica.clone()],
    );
    let e1 = joined(&mut epoch).await;
    drop(agent);
    // The replica notices the stream is gone within a few ticks; no renewal after that.
    tokio::time::sleep(TICK * 6).await;
    let lease = w.store.hosts().get("host-a").await.unwrap().lease_until;
    tokio::time::sleep(TICK * 6).await;
    assert_eq!(
        w.store.hosts().get("host-a").await.unwrap().lease_until,
        lease,
        "renewed after its stream was gone"
    );
    assert!(w.store.hosts().reap(lease).await.unwrap().is_empty());
    assert_eq!(
        reaped(w.store.hosts().reap(lease + 1).await.unwrap()),
        ["host-a"]
    );
    let dead = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!(dead.state, HostState::Dead);

    let (_agent, mut epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-a",
        "host-a",
        vec![w.replica.clone()],
    );
    let e2 = joined(&mut epoch).await;
    assert!(
        e2 > dead.epoch && dead.epoch > e1,
        "{e1} {} {e2}",
        dead.epoch
    );
    let row = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!((row.state, row.epoch), (HostState::Ready, e2));
}

/// A host reaped while its agent still streams (a replica that saw it as late): the agent's
/// next heartbeat is answered `Fenced`, and it joins again by itself with a new epoch.
#[tokio::test]
async fn a_reaped_host_is_fenced_and_joins_again_by_itself() {
    let w = world().await;
    let (_agent, mut epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-a",
        "host-a",
        vec![w.replica.clone()],
    );
    let e1 = joined(&mut epoch).await;
    let later = now_ms() + LEASE.as_millis() as i64 + 5_000;
    assert_eq!(
        reaped(w.store.hosts().reap(later).await.unwrap()),
        ["host-a"]
    );
    let reaped = w.store.hosts().get("host-a").await.unwrap().epoch;
    let e2 = *tokio::time::timeout(
        Duration::from_secs(10),
        epoch.wait_for(|e| e.is_some_and(|e| e > reaped)),
    )
    .await
    .expect("joined again in time")
    .unwrap();
    let e2 = e2.unwrap();
    assert!(e2 > reaped && reaped > e1);
    let row = w.store.hosts().get("host-a").await.unwrap();
    assert_eq!((row.state, row.epoch), (HostState::Ready, e2));
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 2);
}

/// The replica cannot reach the store: it keeps the agents' streams (no one joins again), and
/// renews their leases, with the same epochs, once the store answers.
#[tokio::test]
async fn a_store_outage_keeps_the_streams_open() {
    let w = world().await;
    let (agent, mut epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-a",
        "host-a",
        vec![w.replica.clone()],
    );
    let e = joined(&mut epoch).await;
    w.members.down.store(true, Ordering::SeqCst);
    let renews = w.members.renews.load(Ordering::SeqCst);
    tokio::time::sleep(TICK * 10).await;
    assert_eq!(w.members.renews.load(Ordering::SeqCst), renews);
    let lease = w.store.hosts().get("host-a").await.unwrap().lease_until;
    w.members.down.store(false, Ordering::SeqCst);
    until("the lease renewed after the outage", || async {
        w.store.hosts().get("host-a").await.unwrap().lease_until > lease
    })
    .await;
    assert_eq!(*epoch.borrow(), Some(e));
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 1);
    assert!(!agent.0.is_finished());
}

/// An agent certificate for another host than the one claimed, and a server's certificate
/// claiming a host, are refused: nothing joins, the agents keep trying (and keep running).
#[tokio::test]
async fn a_replica_refuses_peers_that_are_not_the_host_they_claim() {
    let w = world().await;
    let (other, other_epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-b",
        "host-a",
        vec![w.replica.clone()],
    );
    let (server, server_epoch) = attend(
        &w.cluster,
        Role::Server,
        "host-c",
        "host-c",
        vec![w.replica.clone()],
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(*other_epoch.borrow(), None);
    assert_eq!(*server_epoch.borrow(), None);
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 0);
    assert!(w.store.hosts().list().await.unwrap().is_empty());
    assert!(!other.0.is_finished() && !server.0.is_finished());
}

/// No replica reachable: the agent keeps trying (nothing else — it stops no VM), and joins
/// once a replica listens there.
#[tokio::test]
async fn an_agent_keeps_trying_until_a_replica_answers() {
    let w = world().await;
    let gone = nowhere().await;
    let (agent, mut epoch) = attend(
        &w.cluster,
        Role::Agent,
        "host-a",
        "host-a",
        vec![gone.clone()],
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!agent.0.is_finished());
    assert_eq!(*epoch.borrow(), None);
    let listener = tokio::net::TcpListener::bind(gone.addr).await.unwrap();
    let _second = serve_replica(
        w.cluster.identity(Role::Server, "replica-0", &[]),
        listener,
        w.members.clone(),
        TICK,
    );
    let e = joined(&mut epoch).await;
    assert_eq!(w.store.hosts().get("host-a").await.unwrap().epoch, e);
}

/// 200 agents streaming to one replica: their heartbeats are renewed together, one `renew`
/// call per tick (a tick of ten heartbeats, so every agent is due in each).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_agents_are_renewed_in_one_call_per_tick() {
    let tick = BEAT * 10;
    let w = world_ticking(tick).await;
    let mut agents = Vec::new();
    for i in 0..200 {
        let id = format!("h-{i:03}");
        agents.push(attend(
            &w.cluster,
            Role::Agent,
            &id,
            &id,
            vec![w.replica.clone()],
        ));
    }
    for (_, epoch) in &mut agents {
        joined(epoch).await;
    }
    assert_eq!(w.members.joins.load(Ordering::SeqCst), 200);
    let leases: Vec<i64> = w
        .store
        .hosts()
        .list()
        .await
        .unwrap()
        .iter()
        .map(|h| h.lease_until)
        .collect();
    let base = *leases.iter().max().unwrap();
    let renews = w.members.renews.load(Ordering::SeqCst);
    let start = Instant::now();
    until("every lease renewed", || async {
        w.store
            .hosts()
            .list()
            .await
            .unwrap()
            .iter()
            .all(|h| h.lease_until > base)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = w.members.renews.load(Ordering::SeqCst) - renews;
    let ticks = start.elapsed().as_millis() / tick.as_millis() + 2;
    assert!(
        calls as u128 <= ticks,
        "{calls} renew calls in {ticks} ticks"
    );
    // At most one call per tick renewed all 200: the calls were batches (a loaded machine may
    // delay a few heartbeats past a tick, so the largest batch need not hold every host).
    assert!(w.members.largest.load(Ordering::SeqCst) >= 100);
    let hosts = w.store.hosts().list().await.unwrap();
    assert_eq!(hosts.len(), 200);
    assert!(hosts.iter().all(|h| h.state == HostState::Ready));
}

/// An attending agent knows until when its lease certainly runs: from its join, moved on by
/// each renewal, never past what the store granted; while the store cannot renew it, the time
/// stops moving (so the agent's fence will pause its VMs before its host can be reaped).
#[tokio::test]
async fn an_agents_view_of_its_lease_follows_its_renewals() {
    let w = world().await;
    let attendance = Attendance::new(
        &w.cluster.identity(Role::Agent, "host-a", &[]),
        vec![w.replica.clone()],
        || report("host-a"),
    )
    .unwrap()
    .heartbeat_every(BEAT);
    let mut lease = attendance.lease();
    assert_eq!(
        *lease.borrow(),
        Default::default(),
        "no lease before a join"
    );
    let _agent = Task(tokio::spawn(attendance.run()));
    let joined = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            lease.changed().await.unwrap();
            let v = *lease.borrow();
            if v.epoch.is_some() {
                return v;
            }
        }
    })
    .await
    .expect("joined");
    let first = joined.runs_until.expect("a join's lease");
    assert!(first <= Instant::now() + LEASE, "{first:?}");
    until("a renewal moves the lease on", || async {
        lease.borrow().runs_until.is_some_and(|u| u > first)
    })
    .await;
    let renewed = lease.borrow().runs_until.unwrap();
    assert!(renewed <= Instant::now() + LEASE);
    assert_eq!(lease.borrow().epoch, joined.epoch);

    // The store stops renewing: the lease stays where the last renewal left it.
    w.members.down.store(true, Ordering::SeqCst);
    tokio::time::sleep(TICK * 4).await;
    let held = lease.borrow().runs_until.unwrap();
    tokio::time::sleep(TICK * 6).await;
    assert_eq!(lease.borrow().runs_until, Some(held));
    w.members.down.store(false, Ordering::SeqCst);
    until("renewed again", || async {
        lease.borrow().runs_until.is_some_and(|u| u > held)
    })
    .await;
}
