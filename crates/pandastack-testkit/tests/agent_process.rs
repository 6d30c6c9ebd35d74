//! The fake-driver agent as a real process (`pandastack-fake-agent`, the same `run_agent` as
//! `pandastack agent`): it attends a real in-process replica (`serve_membership` over
//! `StoreMembers` on a temporary SQLite store) over loopback mutual TLS, joins with what it
//! was told to report, serves a replica's `RemoteHost` at the address it advertised (a
//! sandbox created from its template runs `echo hi`), and once `kill -9`ed its lease stops
//! moving.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pandastack_agent_link::membership::{Joined, Renewal};
use pandastack_agent_link::{
    serve_membership, HostReport, Members, MembersError, RemoteHost, Replica,
};
use pandastack_cluster::{write_bundle, Role};
use pandastack_control::membership::StoreMembers;
use pandastack_host::{error_chain, ExecSpec, Host};
use pandastack_store::{HostRow, HostState, Store};
use pandastack_testkit::cluster::TestCa;
use pandastack_testkit::fake::{guest_agent, kill_fakes_under};

const HOST: &str = "host-fake-1";
const REPLICA: &str = "replica-1";

/// The store's membership, keeping the last join's report (the store keeps no templates).
struct Recording {
    inner: StoreMembers,
    joined: Mutex<Option<HostReport>>,
}

#[async_trait::async_trait]
impl Members for Recording {
    async fn join(&self, report: HostReport) -> Result<Joined, MembersError> {
        *self.joined.lock().unwrap() = Some(report.clone());
        self.inner.join(report).await
    }

    async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError> {
        self.inner.renew(hosts).await
    }
}

/// The agent process: SIGKILLed when dropped, with the fake VMs it left running.
struct AgentProcess {
    child: Child,
    data: PathBuf,
    log: PathBuf,
}

impl AgentProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_fakes_under(&self.data);
    }
}

/// Aborts a task when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn spawn_agent(dir: &Path, identity: &Path, replica: &Replica) -> AgentProcess {
    let data = dir.join("data");
    let log = dir.join("agent.log");
    let child = Command::new(env!("CARGO_BIN_EXE_pandastack-fake-agent"))
        .arg("--identity")
        .arg(identity)
        .args(["--listen", "127.0.0.1:0"])
        .args(["--server", &format!("{}={}", replica.name, replica.addr)])
        .arg("--data-dir")
        .arg(&data)
        .arg("--guest-agent")
        .arg(guest_agent())
        .args([
            "--memory-mib",
            "3000",
            "--slots",
            "7",
            "--compat-key",
            "fake-k1",
        ])
        .args(["--template", "base", "--heartbeat-ms", "100"])
        .env("PANDASTACK_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start pandastack-fake-agent");
    AgentProcess { child, data, log }
}

async fn host_row(store: &Store) -> Option<HostRow> {
    store.hosts().get(HOST).await.ok()
}

/// Waits (at most `within`) until `f` returns `Some`.
async fn until<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    within: Duration,
    agent: &AgentProcess,
    mut f: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting: {what}; the agent said:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_agent_process_joins_serves_a_replica_and_stops_renewing_when_killed() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = TestCa::new();
    let issued = cluster.ca.issue(Role::Agent, HOST, &[], 1).unwrap();
    let bundle = dir.path().join("agent-bundle");
    write_bundle(&bundle, &issued, &cluster.ca).unwrap();

    let store = Store::open(&dir.path().join("state.db")).await.unwrap();
    let members = Arc::new(Recording {
        inner: StoreMembers::new(store.clone()),
        joined: Mutex::new(None),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let replica = Replica {
        name: REPLICA.into(),
        addr: listener.local_addr().unwrap(),
    };
    let identity = cluster.identity(Role::Server, REPLICA, &[]);
    let m: Arc<dyn Members> = members.clone();
    let _replica = Task(tokio::spawn(async move {
        if let Err(e) = serve_membership(&identity, listener, m, Duration::from_millis(50)).await {
            panic!("replica stopped: {}", error_chain(&e));
        }
    }));

    // It joins with what it was told to report, and the address it listens on.
    let started = Instant::now();
    let agent = spawn_agent(dir.path(), &bundle, &replica);
    let row = until("the agent joins", Duration::from_secs(10), &agent, || {
        host_row(&store)
    })
    .await;
    eprintln!("joined {:?} after start", started.elapsed());
    assert_eq!(row.state, HostState::Ready);
    assert_eq!(row.capacity.memory_mib, 3000);
    assert_eq!(row.capacity.free_slots, 7);
    assert!(row.capacity.vcpus >= 1, "{:?}", row.capacity);
    assert!(row.capacity.disk_bytes > 0, "{:?}", row.capacity);
    assert_eq!(row.compat_key.as_deref(), Some("fake-k1"));
    let report = members.joined.lock().unwrap().clone().unwrap();
    assert_eq!(report.host_id, HOST);
    assert_eq!(report.templates, ["base"]);
    assert_eq!((report.capacity.slots, report.capacity.free_slots), (7, 7));
    let address = row.address.clone().expect("an address");
    assert_eq!(report.address, address);
    let addr: std::net::SocketAddr = address.parse().expect("ip:port");
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{address}");

    // A replica reaches it there: a sandbox from its template runs a command.
    let replica_identity = cluster.identity(Role::Server, REPLICA, &[]);
    let remote = RemoteHost::connect(&replica_identity, addr, HOST)
        .await
        .unwrap_or_else(|e| panic!("connect: {}\n{}", error_chain(&e), agent.log()));
    remote.create("base", "sb-1").await.unwrap();
    let out = remote
        .exec(
            "sb-1",
            ExecSpec {
                shell: "echo hi".into(),
                ..ExecSpec::default()
            },
        )
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.stdout.as_slice()), (0, &b"hi\n"[..]));

    // Its heartbeats move the lease ...
    let lease = host_row(&store).await.unwrap().lease_until;
    until("a renewal", Duration::from_secs(3), &agent, || async {
        let now = host_row(&store).await.unwrap().lease_until;
        (now > lease).then_some(())
    })
    .await;

    // ... and stop with the process.
    let mut agent = agent;
    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = host_row(&store).await.unwrap().lease_until;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let row = host_row(&store).await.unwrap();
    assert_eq!(row.lease_until, last, "renewed after the agent was killed");
    assert_eq!(
        row.state,
        HostState::Ready,
        "reaped by nobody: no reaper runs here"
    );
}
