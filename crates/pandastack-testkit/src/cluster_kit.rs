//! A whole cluster on this machine for the tests of issue #38: the cluster CA and bundles made
//! by the real `pandastack cluster` CLI, a fresh database on the test PostgreSQL (or a
//! PostgreSQL server of the cluster's own, which a test may restart), `pandastack server
//! --cluster` replicas and `pandastack-fake-agent` hosts (the fake driver: each "VM" is the real
//! guest agent as a process here), each with its own data directory, ports and log file.
//!
//! ```text
//!   test ──► Client ──► replica-i (pandastack server --cluster, --state postgres://…/psc_…)
//!                          │  ▲ membership (agents attend: join, heartbeats)
//!                          ▼  │
//!                       host-j (pandastack-fake-agent) ──► fake VMs (guest agent processes)
//! ```
//!
//! Everything is undone when the [`Cluster`] drops, however the test ends: every process is
//! killed (the fake VMs its agents left running included), the database dropped, an own
//! PostgreSQL stopped and removed. A test that fails prints the end of each process's log.
//! `PANDASTACK_CLUSTER_KEEP=1` keeps the directory (logs, data dirs) and the database, and an
//! own PostgreSQL running, and says where (processes and fake VMs are killed all the same).
//!
//! What a test needs from outside: `target/debug/pandastack` (`cargo build -p pandastack`),
//! `PANDASTACK_GUEST_AGENT` (the guest agent the fake VMs run) and `PANDASTACK_TEST_POSTGRES`
//! (`eval "$(scripts/test-postgres.sh start)"`; `skip` skips the cluster tests, as it skips the
//! store's PostgreSQL tests). Unset, the start fails: CI sets both, so these tests never skip
//! there.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pandastack_host::error_chain;
use pandastack_store::{HostRow, HostState, SandboxRow, Store, StoreError};

mod load;
mod postgres;
mod process;

pub use load::{Attempt, CreateLoop};
use postgres::{Database, OwnPostgres};
use process::{
    check_child, end, http_get_ok, kill_fake_vms_under, log_filter, loopback, path_str,
    process_alive, run_cli, sibling_binary, spawn_logged,
};
pub use process::{free_port, http_raw, tail};

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// `pandastack server --cluster` processes.
    pub replicas: usize,
    /// `pandastack-fake-agent` processes (hosts `host-0` …).
    pub agents: usize,
    /// Sandboxes each agent reports it can run (`--slots`).
    pub slots: i64,
    /// Memory each agent reports, MiB (`--memory-mib`).
    pub memory_mib: i64,
    /// Templates every agent bakes at start (`--template`).
    pub templates: Vec<String>,
    /// A PostgreSQL server of this cluster's own instead of a database on the shared test
    /// server, so that [`Cluster::restart_postgres`] restarts nobody else's.
    pub own_postgres: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        Self {
            replicas: 2,
            agents: 3,
            slots: 64,
            memory_mib: 16_384,
            templates: vec!["base".into()],
            own_postgres: false,
        }
    }
}

/// One `pandastack server --cluster` process and where it listens.
#[derive(Debug)]
pub struct ReplicaProc {
    /// Its certificate name (`replica-i`).
    pub name: String,
    /// The HTTP API.
    pub api: SocketAddr,
    /// The preview proxy.
    pub proxy: SocketAddr,
    /// The database front.
    pub db: SocketAddr,
    /// Where agents attend it.
    pub membership: SocketAddr,
    /// Its server bundle (`pandastack cluster cert --role server`).
    pub bundle: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

/// One `pandastack-fake-agent` process: host `host_id`.
#[derive(Debug)]
pub struct AgentProc {
    /// The host's id: its certificate name (`host-j`).
    pub host_id: String,
    /// Its agent service (what replicas dial, with mutual TLS).
    pub listen: SocketAddr,
    /// Its agent bundle (`pandastack cluster cert --role agent`).
    pub bundle: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    /// The replicas it attends, in the order it tries them.
    replicas: Vec<String>,
    child: Option<Child>,
}

/// A running cluster; see the module doc.
pub struct Cluster {
    pub replicas: Vec<ReplicaProc>,
    pub agents: Vec<AgentProc>,
    /// The cluster CA's directory (`ca.pem`, `ca.key`).
    pub ca_dir: PathBuf,
    /// The cluster's database (`postgres://…/psc_…`), as the replicas got it.
    pub db_url: String,
    spec: ClusterSpec,
    key: String,
    admin_key: String,
    store: Option<Store>,
    database: Option<Database>,
    postgres: Option<OwnPostgres>,
    bin: PathBuf,
    fake_agent: PathBuf,
    guest_agent: PathBuf,
    dir: Option<tempfile::TempDir>,
}

/// How long the start may take: processes to answer, every agent `ready`.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl Cluster {
    /// Starts the cluster of `spec` and returns once every replica answers `/v1/health` and
    /// every agent's host is `ready` in the store. `None` (said on stderr) when
    /// `PANDASTACK_TEST_POSTGRES=skip`.
    pub async fn start(spec: ClusterSpec) -> Option<Cluster> {
        let admin = match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
            Ok("skip") => {
                eprintln!("cluster test skipped (PANDASTACK_TEST_POSTGRES=skip)");
                return None;
            }
            Ok(url) => url.to_owned(),
            Err(_) => panic!(
                "PANDASTACK_TEST_POSTGRES is not set: run `eval \"$(scripts/test-postgres.sh \
                 start)\"` first (or set it to `skip` to skip the cluster tests)"
            ),
        };
        let bin = sibling_binary("pandastack", "cargo build -p pandastack");
        let fake_agent = sibling_binary(
            "pandastack-fake-agent",
            "cargo build -p pandastack-testkit --bins",
        );
        let guest_agent = crate::fake::guest_agent();
        let dir = tempfile::Builder::new()
            .prefix("psc-")
            .tempdir_in("/tmp")
            .expect("cluster temp dir");
        let root = dir.path().to_owned();
        std::fs::create_dir_all(root.join("logs")).expect("logs dir");

        let postgres = spec.own_postgres.then(OwnPostgres::start);
        let admin = match &postgres {
            Some(pg) => pg.admin_url(),
            None => admin,
        };
        let database = Database::create(&admin).await;
        let db_url = database.url.clone();
        let store = Store::connect(&db_url)
            .await
            .unwrap_or_else(|e| panic!("migrate the cluster's database {db_url}: {e:?}"));
        // The workspace and key the tests call with, made before any replica starts (a
        // replica's first start then finds a workspace and makes none of its own).
        let (ws, _, key) = store
            .keys()
            .create_workspace_with_key("cluster-test", 10_000, 100_000)
            .await
            .expect("the tests' workspace and key");
        let (_, admin_key) = store
            .keys()
            .create_admin(&ws.id, "cluster-test-admin")
            .await
            .expect("an operator's key");

        let ca_dir = root.join("ca");
        run_cli(&bin, &["cluster", "init", "--dir", path_str(&ca_dir)]);
        let mut c = Cluster {
            replicas: Vec::new(),
            agents: Vec::new(),
            ca_dir,
            db_url,
            spec: spec.clone(),
            key,
            admin_key,
            store: Some(store),
            database: Some(database),
            postgres,
            bin,
            fake_agent,
            guest_agent,
            dir: Some(dir),
        };
        for i in 0..spec.replicas {
            let name = format!("replica-{i}");
            let bundle = c.issue("server", &name);
            let data = root.join(&name);
            std::fs::create_dir_all(&data).expect("replica data dir");
            c.replicas.push(ReplicaProc {
                api: loopback(free_port()),
                proxy: loopback(free_port()),
                db: loopback(free_port()),
                membership: loopback(free_port()),
                log: root.join("logs").join(format!("{name}.log")),
                name,
                bundle,
                data,
                child: None,
            });
        }
        for i in 0..spec.replicas {
            c.spawn_replica(i);
        }
        for j in 0..spec.agents {
            let host_id = format!("host-{j}");
            let bundle = c.issue("agent", &host_id);
            // Short: the fake VMs' unix sockets live below it.
            let data = root.join(format!("h{j}"));
            std::fs::create_dir_all(&data).expect("agent data dir");
            // Agents list the replicas in turn from a different one, so that every replica
            // has agents attending it.
            let n = c.replicas.len();
            let replicas = (0..n)
                .map(|k| {
                    let r = &c.replicas[(j + k) % n];
                    format!("{}={}", r.name, r.membership)
                })
                .collect();
            c.agents.push(AgentProc {
                listen: loopback(free_port()),
                log: root.join("logs").join(format!("{host_id}.log")),
                host_id,
                bundle,
                data,
                replicas,
                child: None,
            });
        }
        for i in 0..spec.replicas {
            c.wait_replica_answers(i).await;
        }
        for j in 0..spec.agents {
            c.spawn_agent(j);
        }
        let ids: Vec<String> = c.agents.iter().map(|a| a.host_id.clone()).collect();
        c.wait_ready(&ids, START_TIMEOUT).await;
        Some(c)
    }

    /// The API key of the tests' workspace (every replica takes it).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// `http://…` of replica `i`'s API.
    pub fn api_url(&self, i: usize) -> String {
        format!("http://{}", self.replicas[i].api)
    }

    /// A client of replica `i` with the tests' key (the client's default retries: 429, 502
    /// and 503 are tried again with backoff).
    pub fn client(&self, i: usize) -> pandastack_client::Client {
        pandastack_client::Client::new(pandastack_client::Config::new(
            self.api_url(i),
            Some(self.key.clone()),
        ))
        .expect("API client")
    }

    /// A client of replica `i` with an operator's (admin) key of the tests' workspace: the
    /// operator routes (`/v1/hosts`) too.
    pub fn admin_client(&self, i: usize) -> pandastack_client::Client {
        pandastack_client::Client::new(pandastack_client::Config::new(
            self.api_url(i),
            Some(self.admin_key.clone()),
        ))
        .expect("API client")
    }

    /// [`Cluster::client`] that answers every call's first result (no retries): for tests of
    /// what a failing call says.
    pub fn client_once(&self, i: usize) -> pandastack_client::Client {
        self.client(i).with_retry(pandastack_client::RetryPolicy {
            attempts: 1,
            ..Default::default()
        })
    }

    /// The cluster's store (another handle on the replicas' database).
    pub fn store(&self) -> &Store {
        self.store.as_ref().expect("the cluster's store")
    }

    /// Every host row.
    pub async fn try_hosts(&self) -> Result<Vec<HostRow>, StoreError> {
        self.store().hosts().list().await
    }

    /// Every host row (panics if the store does not answer).
    pub async fn hosts(&self) -> Vec<HostRow> {
        self.try_hosts().await.expect("list hosts")
    }

    /// Agent `j`'s host row.
    pub async fn host(&self, j: usize) -> HostRow {
        self.store()
            .hosts()
            .get(&self.agents[j].host_id)
            .await
            .unwrap_or_else(|e| panic!("host {}: {e:?}", self.agents[j].host_id))
    }

    /// Sandbox `id`'s row (any workspace).
    pub async fn sandbox(&self, id: &str) -> SandboxRow {
        self.store()
            .sandboxes()
            .by_id(id)
            .await
            .unwrap_or_else(|e| panic!("sandbox {id}: {e:?}"))
    }

    /// The rows of every sandbox on host `host_id`, by id: (id, state).
    pub async fn sandboxes_on(&self, host_id: &str) -> Vec<(String, String)> {
        let mut rows: Vec<(String, String)> = self
            .store()
            .sandboxes()
            .on_host(host_id)
            .await
            .expect("sandboxes on a host")
            .into_iter()
            .map(|(id, s)| (id, s.as_str().to_owned()))
            .collect();
        rows.sort();
        rows
    }

    /// Index of the agent whose host is `host_id`.
    pub fn agent_of(&self, host_id: &str) -> usize {
        self.agents
            .iter()
            .position(|a| a.host_id == host_id)
            .unwrap_or_else(|| panic!("no agent for host {host_id}"))
    }

    /// The sandbox ids agent `j`'s fake driver runs a VM for right now (a live process behind
    /// `<data>/sandboxes/<id>/fake.pid`): what the host runs, seen from outside the agent.
    pub fn live_vms(&self, j: usize) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let Ok(entries) = std::fs::read_dir(self.agents[j].data.join("sandboxes")) else {
            return out;
        };
        for e in entries.flatten() {
            let pid = std::fs::read_to_string(e.path().join("fake.pid"))
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok());
            if pid.is_some_and(process_alive) {
                out.insert(e.file_name().to_string_lossy().into_owned());
            }
        }
        out
    }

    /// `kill -9` agent `j` (its fake VMs keep running, as QEMU would). Returns when it is gone.
    pub fn kill9(&mut self, j: usize) {
        let a = &mut self.agents[j];
        let mut child = a.child.take().expect("agent is running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// `SIGSTOP` agent `j`.
    pub fn stop(&self, j: usize) {
        self.signal_agent(j, Signal::SIGSTOP);
    }

    /// `SIGCONT` agent `j`.
    pub fn cont(&self, j: usize) {
        self.signal_agent(j, Signal::SIGCONT);
    }

    fn signal_agent(&self, j: usize, s: Signal) {
        let child = self.agents[j].child.as_ref().expect("agent is running");
        kill(Pid::from_raw(child.id() as i32), s).expect("signal the agent");
    }

    /// Starts agent `j` again (after [`Cluster::kill9`]) on its data directory, identity and
    /// port; does not wait for it to join.
    pub fn restart_agent(&mut self, j: usize) {
        assert!(self.agents[j].child.is_none(), "agent {j} is running");
        self.spawn_agent(j);
    }

    /// `kill -9` replica `i`. Returns when it is gone.
    pub fn kill_replica(&mut self, i: usize) {
        let mut child = self.replicas[i].child.take().expect("replica is running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts replica `i` again (after [`Cluster::kill_replica`]) on its ports and waits until
    /// it answers.
    pub async fn restart_replica(&mut self, i: usize) {
        assert!(self.replicas[i].child.is_none(), "replica {i} is running");
        self.spawn_replica(i);
        self.wait_replica_answers(i).await;
    }

    /// Stops the cluster's own PostgreSQL (`pg_ctl stop -m fast`: clients are disconnected),
    /// waits `down`, starts it again and returns when it accepts connections (the instant it
    /// is back). Only with [`ClusterSpec::own_postgres`].
    pub async fn restart_postgres(&self, down: Duration) -> Instant {
        let pg = self
            .postgres
            .as_ref()
            .expect("restart_postgres needs ClusterSpec { own_postgres: true, .. }");
        pg.ctl(&["-m", "fast", "-w", "-t", "60", "stop"]).await;
        tokio::time::sleep(down).await;
        pg.ctl_start().await;
        Instant::now()
    }

    /// Waits until every host in `ids` is `ready` (panics after `limit`, naming the rows).
    pub async fn wait_ready(&self, ids: &[String], limit: Duration) {
        let t = Instant::now();
        loop {
            let rows = self.try_hosts().await.unwrap_or_default();
            let ready = ids.iter().all(|id| {
                rows.iter()
                    .any(|h| &h.id == id && h.state == HostState::Ready)
            });
            if ready {
                return;
            }
            self.check_alive();
            if t.elapsed() > limit {
                let seen: Vec<String> = rows
                    .iter()
                    .map(|h| format!("{} {} epoch {}", h.id, h.state, h.epoch))
                    .collect();
                panic!("hosts {ids:?} not all ready within {limit:?}; rows: {seen:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls host `j`'s row every 50 ms until it is in `state`; returns how long after `since`
    /// it was first seen so (panics after `limit` from now).
    pub async fn wait_host_state(
        &self,
        j: usize,
        state: HostState,
        since: Instant,
        limit: Duration,
    ) -> Duration {
        let id = &self.agents[j].host_id;
        let t = Instant::now();
        loop {
            if let Ok(h) = self.store().hosts().get(id).await {
                if h.state == state {
                    return since.elapsed();
                }
            }
            if t.elapsed() > limit {
                panic!("host {id} not {state} within {limit:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Panics (naming it) if a process the cluster started and did not stop has exited.
    pub fn check_alive(&self) {
        for r in &self.replicas {
            check_child(&r.name, &r.child, &r.log);
        }
        for a in &self.agents {
            check_child(&a.host_id, &a.child, &a.log);
        }
    }

    /// The cluster's temporary directory (CA, bundles, data dirs, logs).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("cluster dir").path()
    }

    /// Creates a sandbox of the default template through replica `i`; returns its id and the
    /// host its row names.
    pub async fn create(&self, i: usize) -> (String, String) {
        let sb = crate::within(
            Duration::from_secs(60),
            "create a sandbox",
            self.client(i).create_sandbox(&Default::default()),
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "create through {}: {}",
                self.replicas[i].name,
                error_chain(&e)
            )
        });
        let host = self.sandbox(&sb.id).await.host_id;
        (sb.id, host)
    }

    /// `sh -c cmd` in sandbox `id` through replica `i`; panics unless it exits 0. Its stdout.
    pub async fn exec(&self, i: usize, id: &str, cmd: &str) -> String {
        let req = pandastack_client::types::ExecRequest {
            cmd: Some(cmd.into()),
            ..Default::default()
        };
        let out = crate::within(
            Duration::from_secs(60),
            &format!("exec {cmd:?} in {id}"),
            self.client(i).exec(id, &req),
        )
        .await
        .unwrap_or_else(|e| {
            panic!(
                "exec {cmd:?} in {id} through {}: {}",
                self.replicas[i].name,
                error_chain(&e)
            )
        });
        assert_eq!(
            out.exit_code, 0,
            "exec {cmd:?} in {id} through {}: {out:?}",
            self.replicas[i].name
        );
        out.stdout
    }

    /// Issues a bundle of `role` named `name` with the real CLI; returns its directory.
    fn issue(&self, role: &str, name: &str) -> PathBuf {
        let out = self.dir().join("bundles").join(name);
        std::fs::create_dir_all(out.parent().unwrap()).expect("bundles dir");
        run_cli(
            &self.bin,
            &[
                "cluster",
                "cert",
                "--dir",
                path_str(&self.ca_dir),
                "--role",
                role,
                "--name",
                name,
                "--out",
                path_str(&out),
            ],
        );
        out
    }

    /// The object store the replicas share (a directory of the cluster's).
    pub fn objects_dir(&self) -> PathBuf {
        let dir = self.dir.as_ref().expect("the cluster's dir").path();
        dir.join("objects")
    }

    fn spawn_replica(&mut self, i: usize) {
        let r = &self.replicas[i];
        let templates = r.data.join("no-specs");
        std::fs::create_dir_all(&templates).expect("replica templates dir");
        let mut cmd = Command::new(&self.bin);
        cmd.arg("server")
            .args(["--listen", &r.api.to_string()])
            .args(["--proxy-listen", &r.proxy.to_string()])
            .args([
                "--preview-url",
                &format!("http://localhost:{}", r.proxy.port()),
            ])
            .args(["--db-listen", &r.db.to_string()])
            .args(["--state", &self.db_url])
            .arg("--cluster")
            .arg(&r.bundle)
            .args(["--membership-listen", &r.membership.to_string()])
            .arg("--data-dir")
            .arg(&r.data)
            .arg("--templates-dir")
            .arg(&templates)
            // One object store for every replica (deploy uploads and logs, backups, WAL).
            .args([
                "--objects",
                &format!("file://{}", self.objects_dir().display()),
            ])
            .args(["--network", "off", "--pool-size", "0"])
            .env("PANDASTACK_LOG", log_filter());
        let child = spawn_logged(&mut cmd, &r.log, &r.name);
        self.replicas[i].child = Some(child);
    }

    fn spawn_agent(&mut self, j: usize) {
        let a = &self.agents[j];
        let mut cmd = Command::new(&self.fake_agent);
        cmd.arg("--identity")
            .arg(&a.bundle)
            .args(["--listen", &a.listen.to_string()])
            .args(["--advertise", &a.listen.to_string()])
            .arg("--data-dir")
            .arg(&a.data)
            .arg("--guest-agent")
            .arg(&self.guest_agent)
            .args(["--memory-mib", &self.spec.memory_mib.to_string()])
            .args(["--slots", &self.spec.slots.to_string()]);
        for r in &a.replicas {
            cmd.args(["--server", r]);
        }
        for t in &self.spec.templates {
            cmd.args(["--template", t]);
        }
        cmd.env("PANDASTACK_LOG", log_filter());
        let child = spawn_logged(&mut cmd, &a.log, &a.host_id);
        self.agents[j].child = Some(child);
    }

    async fn wait_replica_answers(&mut self, i: usize) {
        let t = Instant::now();
        loop {
            let r = &mut self.replicas[i];
            if let Some(Ok(Some(status))) = r.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "{} exited before answering ({status}):\n{}",
                    r.name,
                    tail(&r.log, 60)
                );
            }
            if http_get_ok(r.api, "/v1/health").await {
                return;
            }
            if t.elapsed() > START_TIMEOUT {
                panic!(
                    "{} did not answer /v1/health within {START_TIMEOUT:?}:\n{}",
                    r.name,
                    tail(&r.log, 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for r in &mut self.replicas {
            end(&mut r.child);
        }
        for a in &mut self.agents {
            end(&mut a.child);
            kill_fake_vms_under(&a.data);
        }
        let keep = std::env::var_os("PANDASTACK_CLUSTER_KEEP").is_some();
        if std::thread::panicking() {
            let logs = self
                .replicas
                .iter()
                .map(|r| (&r.name, &r.log))
                .chain(self.agents.iter().map(|a| (&a.host_id, &a.log)));
            for (name, log) in logs {
                eprintln!(
                    "----- {name}: the end of {} -----\n{}",
                    log.display(),
                    tail(log, 200)
                );
            }
        }
        // The store's pool first: the database is dropped with its connections forced out
        // anyway, but a pool left connected would try again.
        drop(self.store.take());
        if let Some(db) = self.database.take() {
            if !keep {
                db.drop_blocking();
            }
        }
        if let Some(pg) = self.postgres.take() {
            if !keep {
                pg.stop_blocking();
            } else {
                std::mem::forget(pg);
            }
        }
        if keep {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "PANDASTACK_CLUSTER_KEEP: cluster kept in {} (database {})",
                    dir.keep().display(),
                    self.db_url
                );
            }
        }
    }
}
