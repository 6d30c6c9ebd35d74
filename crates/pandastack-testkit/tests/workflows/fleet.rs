//! A control-plane replica over several hosts (`Fleet`, `PlaceMode::AcrossHosts`), in process:
//! three scripted hosts joined in a SQLite store, dialled by id. Creates are placed in the
//! store and land on the chosen host; every call reaches the host the row names; a host that
//! refuses a create sends it to the next; a dead host's sandboxes are `lost` and unreachable;
//! a host that joins again is reconciled; the fleet's cached host rows see a death within about
//! a second and a host that joined since on its first call.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pandastack_api_types::CreateSandboxRequest;
use pandastack_control::{ControlError, ControlPlane, Dial, Fleet, PlaceMode};
use pandastack_host::{ExecSpec, Host, HostError, VmState};
use pandastack_store::{HostCapacity, Joining, SandboxState, Store, StoreError};
use pandastack_testkit::script::{Op, ScriptedHost};

const LEASE_MS: i64 = 60_000;

/// Dials the scripted host of an id; hosts in `down` do not answer.
struct ByName {
    hosts: HashMap<String, Arc<ScriptedHost>>,
    down: Mutex<HashSet<String>>,
}

#[async_trait::async_trait]
impl Dial for ByName {
    async fn dial(
        &self,
        host_id: &str,
        address: &str,
    ) -> Result<Arc<dyn Host>, pandastack_control::fleet::DialError> {
        assert_eq!(
            address,
            format!("{host_id}.test:7443"),
            "dialled the joined address"
        );
        if self.down.lock().unwrap().contains(host_id) {
            return Err(format!("{host_id} does not answer").into());
        }
        let h = self.hosts.get(host_id).ok_or("unknown host")?;
        Ok(Arc::clone(h) as Arc<dyn Host>)
    }
}

/// Three scripted hosts joined in a store, and a replica's control plane over their fleet
/// (also the cluster of [`super::fleet_resources`]).
pub(super) struct Cluster {
    _dir: tempfile::TempDir,
    pub(super) store: Store,
    pub(super) hosts: HashMap<String, Arc<ScriptedHost>>,
    dial: Arc<ByName>,
    fleet: Fleet,
    pub(super) control: ControlPlane,
    pub(super) ws: String,
}

/// Host `id` joined with `memory_mib` (and `templates`), its lease running a minute.
fn joining(id: &str, memory_mib: i64, templates: &[&str]) -> Joining {
    Joining {
        id: id.into(),
        name: id.into(),
        address: format!("{id}.test:7443"),
        capacity: HostCapacity {
            vcpus: 4,
            memory_mib,
            disk_bytes: 1 << 40,
            free_slots: 64,
            creates_in_flight: 0,
            slots: 64,
        },
        compat_key: "k1".into(),
        templates: templates.iter().map(|t| (*t).to_owned()).collect(),
    }
}

impl Cluster {
    /// Hosts h1 (holds `minimal`), h2 and h3, each with `memory_mib` (and h4, which a dial
    /// reaches but has not joined); the workspace may run 50 sandboxes.
    pub(super) async fn start(memory_mib: i64) -> Self {
        Self::start_with_down(memory_mib, &[]).await
    }

    /// [`Self::start`] with hosts `down` never answering a dial. The replica's join watch has
    /// run once (it dials every host it sees: the catalog is theirs from then on).
    async fn start_with_down(memory_mib: i64, down: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        let (ws, _, _) = store
            .keys()
            .create_workspace_with_key("ws", 50, 1000)
            .await
            .unwrap();
        let mut hosts = HashMap::new();
        for (id, templates) in [("h1", &["minimal"][..]), ("h2", &[]), ("h3", &[])] {
            hosts.insert(id.to_owned(), Arc::new(ScriptedHost::new()));
            store
                .hosts()
                .join(
                    &joining(id, memory_mib, templates),
                    LEASE_MS,
                    pandastack_store::now_ms(),
                )
                .await
                .unwrap();
        }
        hosts.insert("h4".to_owned(), Arc::new(ScriptedHost::new()));
        let dial = Arc::new(ByName {
            hosts: hosts.clone(),
            down: Mutex::new(down.iter().map(|d| (*d).to_owned()).collect()),
        });
        let fleet = Fleet::new(store.clone(), Arc::clone(&dial) as Arc<dyn Dial>);
        pandastack_control::JoinWatch::new(store.clone(), fleet.clone())
            .tick()
            .await
            .unwrap();
        let objects = pandastack_objects::Objects::open(&format!(
            "file://{}",
            dir.path().join("objects").display()
        ))
        .unwrap();
        let config = pandastack_control::ControlConfig {
            place: PlaceMode::AcrossHosts,
            ..pandastack_testkit::fake::test_config("replica-1", &dir.path().join("builds"))
        };
        let control = ControlPlane::new(store.clone(), Arc::new(fleet.clone()), objects, config);
        Self {
            _dir: dir,
            store,
            hosts,
            dial,
            fleet,
            control,
            ws: ws.id,
        }
    }

    async fn create(&self) -> Result<pandastack_store::SandboxRow, ControlError> {
        let req: CreateSandboxRequest =
            serde_json::from_value(serde_json::json!({"template": "minimal"})).unwrap();
        self.control.sandboxes.create(&self.ws, &req).await
    }

    fn host(&self, id: &str) -> &ScriptedHost {
        &self.hosts[id]
    }

    /// Host `id`'s lease lapses (a join with a 1 ms lease) and a reaper declares it dead.
    async fn kill(&self, id: &str, templates: &[&str]) {
        let now = pandastack_store::now_ms();
        self.store
            .hosts()
            .join(&joining(id, 1024, templates), 1, now)
            .await
            .unwrap();
        let reaped = self.store.hosts().reap(now + 100).await.unwrap();
        assert_eq!(reaped.len(), 1, "only {id}: {reaped:?}");
    }

    /// Which hosts run a VM of sandbox `id`.
    fn running(&self, id: &str) -> Vec<&str> {
        let mut on: Vec<&str> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.vm_ids().iter().any(|v| v == id))
            .map(|(k, _)| k.as_str())
            .collect();
        on.sort();
        on
    }
}

fn exec(cmd: &str) -> ExecSpec {
    ExecSpec {
        shell: cmd.to_owned(),
        ..Default::default()
    }
}

#[tokio::test]
async fn creates_go_to_the_template_host_first_then_best_fit_and_calls_follow_the_row() {
    // 1024 MiB each; `minimal` asks 256 MiB: four fit on h1, which holds the template.
    let c = Cluster::start(1024).await;
    let mut rows = Vec::new();
    for _ in 0..6 {
        rows.push(c.create().await.expect("create"));
    }
    let on: Vec<&str> = rows.iter().map(|r| r.host_id.as_str()).collect();
    assert_eq!(
        &on[..4],
        &["h1"; 4],
        "template-local while h1 has room: {on:?}"
    );
    assert!(on[4..].iter().all(|h| *h != "h1"), "h1 is full: {on:?}");
    for r in &rows {
        assert_eq!(
            c.running(&r.id),
            vec![r.host_id.as_str()],
            "one VM, on its row's host"
        );
        assert_eq!(r.state, SandboxState::Running);
    }
    // A call on each sandbox reaches only the host its row names.
    for r in &rows {
        c.control
            .host()
            .exec(&r.id, exec(&format!("echo {}", r.id)))
            .await
            .expect("exec");
        for (id, h) in &c.hosts {
            let seen = h.exec_log().iter().any(|(sb, _)| sb == &r.id);
            assert_eq!(seen, *id == r.host_id, "exec of {} on {id}", r.id);
        }
    }
    // Deletes go to the owner too, and forget it.
    let first = &rows[0];
    c.control.sandboxes.delete(first).await.expect("delete");
    assert!(c.running(&first.id).is_empty());
}

#[tokio::test]
async fn no_room_anywhere_refuses_and_leaves_no_row_or_vm() {
    // 256 MiB each: one sandbox per host.
    let c = Cluster::start(256).await;
    for _ in 0..3 {
        c.create().await.expect("create while there is room");
    }
    let before = c.store.sandboxes().count_active(&c.ws).await.unwrap();
    let e = c.create().await.expect_err("no host has room");
    assert!(
        matches!(e, ControlError::Store(StoreError::NoCapacity { .. })),
        "{e:?}"
    );
    assert_eq!(
        c.store.sandboxes().count_active(&c.ws).await.unwrap(),
        before
    );
    let vms: usize = c.hosts.values().map(|h| h.vm_ids().len()).sum();
    assert_eq!(vms, 3);
}

#[tokio::test]
async fn a_host_that_refuses_sends_the_create_to_the_next() {
    let c = Cluster::start(1024).await;
    c.host("h1")
        .fail_next(Op::Create, 1, |_| HostError::failed("create", "disk full"));
    let row = c.create().await.expect("placed on another host");
    assert_ne!(row.host_id, "h1");
    assert_eq!(c.running(&row.id), vec![row.host_id.as_str()]);
    assert!(c.host("h1").vm_ids().is_empty(), "nothing left on h1");
    assert_eq!(c.host("h1").count(Op::Create), 1);

    // A host no link reaches is skipped the same way.
    let c = Cluster::start_with_down(1024, &["h1"]).await;
    let row = c.create().await.expect("placed past the unreachable host");
    assert_ne!(row.host_id, "h1");
    assert_eq!(c.running(&row.id), vec![row.host_id.as_str()]);
    // Refusals of the request itself are not retried elsewhere.
    for h in c.hosts.values() {
        h.fail_next(Op::Create, 1, |_| {
            HostError::TemplateNotFound("minimal".into())
        });
    }
    let before = c.hosts.values().map(|h| h.count(Op::Create)).sum::<usize>();
    let e = c.create().await.expect_err("template refused");
    assert!(
        matches!(e, ControlError::Host(HostError::TemplateNotFound(_))),
        "{e:?}"
    );
    assert_eq!(
        c.hosts.values().map(|h| h.count(Op::Create)).sum::<usize>(),
        before + 1
    );
}

#[tokio::test]
async fn a_dead_hosts_sandboxes_are_lost_and_unreachable_and_come_back_when_it_rejoins() {
    let c = Cluster::start(1024).await;
    let rows = [c.create().await.unwrap(), c.create().await.unwrap()];
    assert!(rows.iter().all(|r| r.host_id == "h1"));
    let other = {
        // Fill h1 so the next goes elsewhere.
        for _ in 0..2 {
            c.create().await.unwrap();
        }
        c.create().await.unwrap()
    };
    assert_ne!(other.host_id, "h1");
    // h1's lease lapses (its last join gave it 1 ms); a reaper declares it dead, and the
    // fleet reads the hosts' rows again (its task does each second).
    let now = pandastack_store::now_ms();
    c.store
        .hosts()
        .join(&joining("h1", 1024, &["minimal"]), 1, now)
        .await
        .unwrap();
    let reaped = c.store.hosts().reap(now + 100).await.unwrap();
    assert_eq!(reaped.len(), 1, "only h1: {reaped:?}");
    let h1 = reaped
        .iter()
        .find(|r| r.host_id == "h1")
        .expect("h1 reaped");
    assert_eq!(h1.lost, 4);
    c.fleet.refresh().await.unwrap();
    for r in &rows {
        let row = c.store.sandboxes().by_id(&r.id).await.unwrap();
        assert_eq!(row.state, SandboxState::Lost);
        let e = c
            .control
            .host()
            .exec(&r.id, exec("true"))
            .await
            .expect_err("dead host");
        assert!(
            matches!(e, HostError::Unreachable { ref host, .. } if host == "h1"),
            "{e:?}"
        );
    }
    // Hosts reaped with it were not touched.
    let row = c.store.sandboxes().by_id(&other.id).await.unwrap();
    assert_eq!(row.state, SandboxState::Running);

    // While h1 was away one of its sandboxes was deleted; then h1 joins again.
    c.store.sandboxes().delete(&rows[1].id).await.unwrap();
    let joined = c
        .store
        .hosts()
        .join(
            &joining("h1", 1024, &["minimal"]),
            LEASE_MS,
            pandastack_store::now_ms(),
        )
        .await
        .unwrap();
    let fleet = Fleet::new(c.store.clone(), Arc::clone(&c.dial) as Arc<dyn Dial>);
    let h1 = fleet.host("h1").await.unwrap();
    let done = pandastack_control::reconcile_host(&c.store, &*h1, "h1", joined.epoch)
        .await
        .unwrap();
    assert!(done.found.contains(&rows[0].id), "{done:?}");
    assert_eq!(done.removed, vec![rows[1].id.clone()]);
    assert_eq!(
        c.store.sandboxes().by_id(&rows[0].id).await.unwrap().state,
        SandboxState::Running
    );
    assert!(
        c.running(&rows[1].id).is_empty(),
        "the deleted one's VM is gone"
    );
    assert_eq!(c.host("h1").vm_state(&rows[0].id), Some(VmState::Running));
    // A reconciliation with the epoch before is fenced: it writes nothing.
    c.store
        .sandboxes()
        .set_state(&rows[0].id, SandboxState::Lost)
        .await
        .unwrap();
    let stale = pandastack_control::reconcile_host(&c.store, &*h1, "h1", joined.epoch - 1)
        .await
        .unwrap();
    assert!(stale.found.is_empty());
    assert_eq!(
        c.store.sandboxes().by_id(&rows[0].id).await.unwrap().state,
        SandboxState::Lost
    );
}

#[tokio::test]
async fn host_rows_are_cached_a_dead_host_is_refused_after_a_refresh_and_a_new_one_read_through() {
    let c = Cluster::start(1024).await;
    let row = c.create().await.unwrap();
    assert_eq!(row.host_id, "h1");
    c.fleet
        .exec(&row.id, exec("true"))
        .await
        .expect("h1 answers");

    let execs = c.host("h1").exec_log().len();

    // The store marks h1 dead; after the fleet reads the rows again, its sandbox is refused.
    c.kill("h1", &["minimal"]).await;
    c.fleet.refresh().await.unwrap();
    let e = c
        .fleet
        .exec(&row.id, exec("true"))
        .await
        .expect_err("dead host");
    assert!(
        matches!(e, HostError::Unreachable { ref host, .. } if host == "h1"),
        "{e:?}"
    );
    assert_eq!(
        c.host("h1").exec_log().len(),
        execs,
        "the refused call did not reach h1"
    );

    // Without a call to refresh: the fleet's own task sees h2's death within about a second.
    c.fleet.host("h2").await.expect("h2 is ready");
    c.kill("h2", &[]).await;
    let t = Instant::now();
    while c.fleet.host("h2").await.is_ok() {
        assert!(
            t.elapsed() < pandastack_control::fleet::REFRESH_EVERY * 3,
            "h2 still reached {} ms after its death",
            t.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("h2 refused {} ms after its death", t.elapsed().as_millis());

    // A host that joined after the last read of the rows is read from the store on first use.
    c.store
        .hosts()
        .join(
            &joining("h4", 1024, &[]),
            LEASE_MS,
            pandastack_store::now_ms(),
        )
        .await
        .unwrap();
    let h4 = c.fleet.host("h4").await.expect("h4 read through");
    h4.create("minimal", "sb-on-h4")
        .await
        .expect("create on h4");
    assert_eq!(c.running("sb-on-h4"), vec!["h4"]);
    // One the store does not know is refused.
    let e = c.fleet.host("h9").await.err().expect("unknown host");
    assert!(
        matches!(e, HostError::Unreachable { ref host, .. } if host == "h9"),
        "{e:?}"
    );
}

/// A hibernated sandbox whose row moved to another host (#39: its image adopted there) is
/// followed by the fleet once its cached owner is older than `ROW_MAX_AGE`; a move is fenced by
/// the row's host and state.
#[tokio::test]
async fn a_moved_sandbox_is_followed_once_its_cached_owner_expires() {
    let c = Cluster::start(1024).await;
    let row = c.create().await.unwrap();
    assert_eq!(row.host_id, "h1");
    c.control
        .sandboxes
        .lifecycle(row.clone(), pandastack_control::Verb::Hibernate)
        .await
        .unwrap();
    c.fleet.exec(&row.id, exec("true")).await.expect("on h1");
    // What h2 would hold after adopting the image: the same sandbox, hibernated.
    c.host("h2").create("minimal", &row.id).await.unwrap();
    c.host("h2").hibernate(&row.id).await.unwrap();

    // Not from a host it is not on; then from h1 to h2.
    let sandboxes = c.store.sandboxes();
    assert!(!sandboxes
        .move_hibernated(&row.id, "h3", "h2")
        .await
        .unwrap());
    assert!(sandboxes
        .move_hibernated(&row.id, "h1", "h2")
        .await
        .unwrap());
    assert!(
        !sandboxes
            .move_hibernated(&row.id, "h1", "h2")
            .await
            .unwrap(),
        "moved once"
    );

    let h2_execs = c.host("h2").exec_log().len();
    let t = Instant::now();
    loop {
        c.fleet.exec(&row.id, exec("true")).await.expect("exec");
        if c.host("h2").exec_log().len() > h2_execs {
            break;
        }
        assert!(
            t.elapsed() < pandastack_control::fleet::ROW_MAX_AGE * 2,
            "still routed to h1 {} ms after the move",
            t.elapsed().as_millis()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "followed to h2 {} ms after the move",
        t.elapsed().as_millis()
    );
    // A running sandbox is not moved.
    let other = c.create().await.unwrap();
    assert!(!sandboxes
        .move_hibernated(&other.id, &other.host_id, "h3")
        .await
        .unwrap());
}

/// A TCP proxy to `target` that stops passing bytes while `frozen` is set (as a network that
/// drops a server's packets would): the connections stay open and nothing answers.
async fn freezing_proxy(target: String) -> (String, Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: Arc<AtomicBool>,
    ) {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            while frozen.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let frozen = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&frozen);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            tokio::spawn(pipe(cr, sw, Arc::clone(&f)));
            tokio::spawn(pipe(sr, cw, Arc::clone(&f)));
        }
    });
    (addr, frozen)
}

/// Once its cached owner and host row are older than `ROW_MAX_AGE`, a call reads them again;
/// a store that stops answering (PostgreSQL behind connections that no longer pass bytes: no
/// error, no answer) costs the call `STALE_READ_WAIT` per read, then the cached values serve
/// it — not the pool's 10 s acquire timeout, nor a query that never returns.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_that_stops_answering_delays_a_call_only_briefly() {
    use sqlx::Connection;
    use std::sync::atomic::Ordering;
    let admin = match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
        Ok("skip") => return,
        Ok(u) => u.to_owned(),
        Err(_) => panic!("PANDASTACK_TEST_POSTGRES is not set"),
    };
    let name = format!("psf_{:016x}", rand::random::<u64>());
    let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    // postgres://user@host:port/db: the same server and user, through the proxy.
    let (user, rest) = admin.split_once('@').unwrap();
    let server = rest.split('/').next().unwrap().to_owned();
    let (proxy, frozen) = freezing_proxy(server).await;
    let store = Store::connect(&format!("{user}@{proxy}/{name}"))
        .await
        .unwrap();
    let (ws, _, _) = store
        .keys()
        .create_workspace_with_key("ws", 50, 1000)
        .await
        .unwrap();
    store
        .hosts()
        .join(
            &joining("h1", 1024, &["minimal"]),
            LEASE_MS,
            pandastack_store::now_ms(),
        )
        .await
        .unwrap();
    let h1 = Arc::new(ScriptedHost::new());
    let dial = Arc::new(ByName {
        hosts: HashMap::from([("h1".to_owned(), Arc::clone(&h1))]),
        down: Mutex::new(HashSet::new()),
    });
    let fleet = Fleet::new(store.clone(), dial as Arc<dyn Dial>);
    let row = pandastack_store::SandboxRow::service(&ws.id, "h1", "minimal", Default::default());
    store
        .sandboxes()
        .insert_within_limit(std::slice::from_ref(&row))
        .await
        .unwrap();
    h1.create("minimal", &row.id).await.unwrap();
    fleet.get(&row.id).await.expect("through the fleet");

    tokio::time::sleep(pandastack_control::fleet::ROW_MAX_AGE + Duration::from_millis(300)).await;
    frozen.store(true, Ordering::SeqCst);
    let asked = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(5), fleet.get(&row.id))
        .await
        .expect("answered from the cache, not after the store's own timeouts");
    assert_eq!(got.expect("the host answers").id, row.id);
    eprintln!(
        "answered {} ms after the store stopped answering",
        asked.elapsed().as_millis()
    );
    frozen.store(false, Ordering::SeqCst);
    drop(fleet);
    drop(store);
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await;
}
