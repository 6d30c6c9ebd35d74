//! Bytes that move between hosts (#39), with the test kit's fake driver (the real guest agent
//! as each "VM") and a real object store in a directory. Templates: a bake made on one host
//! agent is uploaded and served by another without a bake there (the same bake id and files), a
//! host with another compatibility key bakes the stored image instead, a damaged upload is
//! refused, and removing the template removes it from the store. Hibernated sandboxes: one
//! stored by its host is adopted by another with the same key and wakes there; another key,
//! or a second adoption, is refused and leaves nothing behind; the same move made as a
//! replica makes it, through each host's agent link (`RemoteHost` over mutual TLS); a
//! replica's `migrate` moves running and hibernated sandboxes, refuses what cannot move, and a
//! second replica's calls follow a moved sandbox.
//! (`cluster_guests` moves a template with real guests through a replica.)

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pandastack_agent::{AgentConfig, HostAgent, Objects, SHARED_NAMESPACE};
use pandastack_runtime::{DataDir, Runtime, Shape};
use pandastack_testkit::fake::{guest_agent, FakeDriver, MEMORY};
use pandastack_testkit::within;

const KEY: &str = "qemu-10.kernel-ab.tcg.xeon";

/// A host agent over the fake driver in `dir`, sharing templates through `objects` with
/// compatibility key `key`; no catalog specs.
async fn host(dir: &Path, objects: &Objects, key: &str, name: &str) -> Arc<HostAgent<FakeDriver>> {
    let driver = FakeDriver::new(guest_agent());
    let data = DataDir::open(dir.join("data")).unwrap();
    // The fake ignores the kernel.
    let rt = Runtime::new(driver, data, dir.join("vmlinux"));
    let cfg = AgentConfig {
        templates_dir: dir.join("no-specs"),
        guest_agent: guest_agent(),
        pool_size: 0,
        volume_slots: 0,
        objects: Some(objects.clone()),
    };
    let (agent, _) = HostAgent::start(rt, cfg, |_| false).await.unwrap();
    let agent = Arc::new(agent);
    agent.share_templates(objects.clone(), key, name);
    agent
}

/// Writes `text` in the sandbox's memory (the fake's [`MEMORY`]: its snapshots carry it).
async fn mark(ch: &tonic::transport::Channel, text: &str) {
    pandastack_testkit::exec(ch, &format!("echo {text} > {MEMORY}/mark")).await;
}

/// What [`mark`] wrote in the sandbox's memory.
async fn marked(ch: &tonic::transport::Channel) -> String {
    pandastack_testkit::exec(ch, &format!("cat {MEMORY}/mark"))
        .await
        .stdout
}

/// An image of `mib` MiB: data at its start, the rest zero.
fn image(dir: &Path, mib: usize) -> std::path::PathBuf {
    let path = dir.join("image.ext4");
    let mut bytes = vec![0u8; mib << 20];
    for (i, b) in bytes.iter_mut().take(1 << 20).enumerate() {
        *b = (i % 251) as u8;
    }
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Waits until template `name` has a durable bake in the store, and returns its bake id.
async fn durable(agent: &HostAgent<FakeDriver>, name: &str) -> String {
    within(Duration::from_secs(30), "the bake durable", async {
        loop {
            if let Some(b) = agent.shared_bake(name).await.unwrap() {
                return b.template.bake_id;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
}

/// Waits (up to 30 s) until workspace `ws` has no stored hibernation image's record left.
async fn no_stored_images(objects: &Objects, ws: &str, what: &str) {
    within(Duration::from_secs(30), what, async {
        while !objects
            .list_records(ws, "hibernated")
            .await
            .unwrap()
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bake_made_on_one_host_serves_another_without_a_bake_there() {
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let (a_dir, b_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    let a = host(&a_dir, &objects, KEY, "host-a").await;
    let b = host(&b_dir, &objects, KEY, "host-b").await;

    // Host b has no spec and no store entry yet: the template is unknown to it.
    assert!(matches!(
        b.template("tiny").await,
        Err(pandastack_agent::AgentError::TemplateNotFound(_))
    ));

    let baked = a
        .bake_image("tiny", &image(tmp.path(), 8), Shape::new(1, 64))
        .await
        .unwrap();
    assert_eq!(durable(&a, "tiny").await, baked.bake_id);

    let got = b.template("tiny").await.unwrap();
    assert_eq!(
        got.bake_id, baked.bake_id,
        "the same bake, not one of b's own"
    );
    assert_eq!(got.shape, baked.shape);
    assert!(
        got.dir.starts_with(b_dir.join("data")),
        "{}",
        got.dir.display()
    );
    for (mine, theirs) in [
        (got.rootfs(), baked.rootfs()),
        (got.memory(), baked.memory()),
        (got.state(), baked.state()),
    ] {
        assert!(read(&mine) == read(&theirs), "{} differs", mine.display());
    }
    assert_eq!(
        b.runtime().check_template("tiny").await.unwrap(),
        pandastack_runtime::TemplateCheck::Intact
    );
    // A sandbox of it runs on b.
    let v = b.create("tiny", "sb-on-b").await.unwrap();
    assert_eq!(v.state, pandastack_agent::VmState::Running);
    b.destroy("sb-on-b").await.unwrap();

    // A rebake on a replaces the stored bake: the older record is gone once the new is durable.
    let again = a
        .bake_image("tiny", &image(tmp.path(), 8), Shape::new(1, 64))
        .await
        .unwrap();
    assert_ne!(again.bake_id, baked.bake_id);
    within(
        Duration::from_secs(30),
        "the new bake the only one",
        async {
            loop {
                let ids = objects
                    .list_records(SHARED_NAMESPACE, "templates")
                    .await
                    .unwrap();
                if ids == [format!("tiny.{}", again.bake_id)] {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;

    // Host b still holds the replaced bake. Sharing started again over its data directory (an
    // agent restarted) does not offer it: it must not come back as the newest.
    let b_again = host(&b_dir, &objects, KEY, "host-b").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        objects
            .list_records(SHARED_NAMESPACE, "templates")
            .await
            .unwrap(),
        [format!("tiny.{}", again.bake_id)],
        "the replaced bake stays replaced"
    );
    drop(b_again);

    // Removing it (on every host, as the fleet does) removes it from the store: a third host
    // cannot get it.
    a.remove_template("tiny").await.unwrap();
    b.remove_template("tiny").await.unwrap();
    assert!(objects
        .list_records(SHARED_NAMESPACE, "templates")
        .await
        .unwrap()
        .is_empty());
    let c = host(&tmp.path().join("c"), &objects, KEY, "host-c").await;
    assert!(matches!(
        c.template("tiny").await,
        Err(pandastack_agent::AgentError::TemplateNotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_compatibility_key_bakes_the_stored_image_and_a_damaged_upload_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let a = host(&tmp.path().join("a"), &objects, KEY, "host-a").await;
    let baked = a
        .bake_image("tiny", &image(tmp.path(), 4), Shape::new(1, 64))
        .await
        .unwrap();
    durable(&a, "tiny").await;

    // Another QEMU or kernel: the memory image is not restored there; the image is baked.
    let other = host(&tmp.path().join("o"), &objects, "qemu-9.other", "host-o").await;
    let got = other.template("tiny").await.unwrap();
    assert_ne!(got.bake_id, baked.bake_id, "baked on host-o");
    assert!(read(got.image.as_ref().unwrap()) == read(baked.image.as_ref().unwrap()));
    // Its own bake is made durable too, under its own key.
    within(Duration::from_secs(30), "host-o's bake durable", async {
        loop {
            if let Some(b) = other.shared_bake("tiny").await.unwrap() {
                if b.template.bake_id == got.bake_id {
                    assert_eq!(b.compat_key, "qemu-9.other");
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // A record whose seals do not match the stored memory image: refused, nothing installed.
    let c2 = host(&tmp.path().join("c2"), &objects, "qemu-9.other", "host-c2").await;
    let mut record = objects
        .get_record(
            SHARED_NAMESPACE,
            "templates",
            &format!("tiny.{}", got.bake_id),
        )
        .await
        .unwrap();
    record["template"]["seals"]["memory"]["sha256"] = "0".repeat(64).into();
    objects
        .delete_record(
            SHARED_NAMESPACE,
            "templates",
            &format!("tiny.{}", got.bake_id),
        )
        .await
        .unwrap();
    objects
        .put_record(
            SHARED_NAMESPACE,
            "templates",
            &format!("tiny.{}", got.bake_id),
            &record,
        )
        .await
        .unwrap();
    let err = c2.template("tiny").await.unwrap_err();
    assert!(
        pandastack_host::error_chain(&err).contains("is not what that host's bake sealed"),
        "{}",
        pandastack_host::error_chain(&err)
    );
    assert!(c2.runtime().template("tiny").is_err(), "nothing installed");
    assert!(!tmp.path().join("c2/data/templates/tiny.fetching").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hibernated_sandbox_stored_by_its_host_wakes_on_another() {
    const WS: &str = "ws-moving";
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let (a_dir, b_dir, o_dir) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("o"),
    );
    let a = host(&a_dir, &objects, KEY, "host-a").await;
    let b = host(&b_dir, &objects, KEY, "host-b").await;
    let o = host(&o_dir, &objects, "qemu-9.other", "host-o").await;
    a.bake_image("tiny", &image(tmp.path(), 4), Shape::new(1, 64))
        .await
        .unwrap();
    a.create("tiny", "mover").await.unwrap();

    let tag = a.store_hibernated("mover", WS).await.unwrap();
    assert_eq!(
        a.get("mover").await.unwrap().state,
        pandastack_agent::VmState::Hibernated,
        "stays on its host, hibernated"
    );
    let a_files = a_dir.join("data/sandboxes/mover");
    // Stored for a move, it does not wake where it is.
    let err = a.wake("mover").await.unwrap_err();
    assert!(
        matches!(&err, pandastack_agent::AgentError::InvalidState { op, .. }
            if *op == pandastack_host::WAKE_WHILE_MOVING),
        "{err:?}"
    );

    // Another compatibility key: refused, nothing left.
    let err = o.adopt_stored("mover", WS, &tag).await.unwrap_err();
    let chain = pandastack_host::error_chain(&err);
    assert!(chain.contains("compatibility key qemu-10"), "{chain}");
    assert!(!o_dir.join("data/sandboxes/mover").exists());
    assert!(!o_dir.join("data/sandboxes/.moving-mover").exists());

    let v = b.adopt_stored("mover", WS, &tag).await.unwrap();
    assert_eq!(v.state, pandastack_agent::VmState::Hibernated);
    let b_files = b_dir.join("data/sandboxes/mover");
    for f in ["rootfs.ext4", "hibernate.state"] {
        assert!(
            read(&b_files.join(f)) == read(&a_files.join(f)),
            "{f} differs"
        );
    }
    let info: serde_json::Value =
        serde_json::from_slice(&read(&b_files.join("sandbox.json"))).unwrap();
    assert_eq!(info["id"], "mover");
    assert_eq!(
        info["kernel"],
        b_dir.join("vmlinux").to_str().unwrap(),
        "b's kernel"
    );
    // A second adoption is refused; the adopted sandbox is untouched.
    let err = b.adopt_stored("mover", WS, &tag).await.unwrap_err();
    let chain = pandastack_host::error_chain(&err);
    assert!(chain.contains("on this host already"), "{chain}");
    assert!(b_files.join("hibernate.state").is_file());

    // It wakes on b and answers there.
    let v = b.wake("mover").await.unwrap();
    assert_eq!(v.state, pandastack_agent::VmState::Running);
    let ch = b.channel("mover").await.unwrap();
    assert_eq!(
        pandastack_testkit::exec(&ch, "echo moved").await.stdout,
        "moved\n"
    );

    // The origin's copy and the stored image go; b's sandbox stays.
    a.destroy("mover").await.unwrap();
    a.forget_stored("mover", WS, &tag).await.unwrap();
    assert!(objects
        .list_records(WS, "hibernated")
        .await
        .unwrap()
        .is_empty());
    assert!(objects
        .list_manifests(WS, "hibernated-files")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(
        b.get("mover").await.unwrap().state,
        pandastack_agent::VmState::Running
    );
    // A move given up (its image forgotten) leaves it waking where it is.
    let tag = b.store_hibernated("mover", WS).await.unwrap();
    assert!(b.wake("mover").await.is_err(), "stored for a move");
    b.forget_stored("mover", WS, &tag).await.unwrap();
    let v = b.wake("mover").await.unwrap();
    assert_eq!(v.state, pandastack_agent::VmState::Running);
    b.destroy("mover").await.unwrap();
}

/// Serves `agent` on a loopback agent link as host `name`: its address.
async fn served(
    ca: &pandastack_testkit::cluster::TestCa,
    agent: &Arc<HostAgent<FakeDriver>>,
    name: &str,
) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use pandastack_cluster::Role;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let identity = ca.identity(Role::Agent, name, &[]);
    let host: Arc<dyn pandastack_host::Host> =
        Arc::new(pandastack_agent::LocalHost(Arc::clone(agent)));
    let task = tokio::spawn(async move {
        let _ = pandastack_agent_link::serve(&identity, listener, host).await;
    });
    (addr, task)
}

/// Serves `agent` on a loopback agent link as host `name`; a replica's `RemoteHost` to it.
async fn linked(
    ca: &pandastack_testkit::cluster::TestCa,
    agent: &Arc<HostAgent<FakeDriver>>,
    name: &str,
) -> (
    pandastack_agent_link::RemoteHost,
    tokio::task::JoinHandle<()>,
) {
    use pandastack_cluster::Role;
    let (addr, task) = served(ca, agent, name).await;
    let replica = ca.identity(Role::Server, "replica-1", &[]);
    let remote = pandastack_agent_link::RemoteHost::connect(&replica, addr, name)
        .await
        .unwrap();
    (remote, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hibernated_sandbox_moves_through_the_agent_links() {
    use pandastack_host::{Host, HostError, VmState};
    const WS: &str = "ws-linked";
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let a = host(&tmp.path().join("a"), &objects, KEY, "host-a").await;
    let b = host(&tmp.path().join("b"), &objects, KEY, "host-b").await;
    a.bake_image("tiny", &image(tmp.path(), 4), Shape::new(1, 64))
        .await
        .unwrap();
    let ca = pandastack_testkit::cluster::TestCa::new();
    let (to_a, serving_a) = linked(&ca, &a, "host-a").await;
    let (to_b, serving_b) = linked(&ca, &b, "host-b").await;

    to_a.create("tiny", "linked").await.unwrap();
    let tag = to_a.store_hibernated("linked", WS).await.unwrap();
    assert_eq!(to_a.get("linked").await.unwrap().state, VmState::Hibernated);
    // An image that is not there comes back as a failure with the store's reason.
    let err = to_b
        .adopt_stored("linked", WS, "0000000000000000")
        .await
        .unwrap_err();
    assert!(matches!(err, HostError::Failed { .. }), "{err:?}");
    assert!(to_b.get("linked").await.is_err(), "nothing adopted");

    let v = to_b.adopt_stored("linked", WS, &tag).await.unwrap();
    assert_eq!(v.state, VmState::Hibernated);
    let v = within(Duration::from_secs(30), "wake on b", to_b.wake("linked"))
        .await
        .unwrap();
    assert_eq!(v.state, VmState::Running);
    to_a.destroy("linked").await.unwrap();
    to_b.forget_stored("linked", WS, &tag).await.unwrap();
    assert!(objects
        .list_records(WS, "hibernated")
        .await
        .unwrap()
        .is_empty());
    // A durable copy for the host's loss, through the link: the same tag while it stays
    // hibernated; refused for a running sandbox; dropped when it is destroyed.
    let err = to_b.store_durable("linked", WS).await.unwrap_err();
    assert!(matches!(err, HostError::InvalidState { .. }), "{err:?}");
    to_b.hibernate("linked").await.unwrap();
    let durable = to_b.store_durable("linked", WS).await.unwrap();
    assert_eq!(to_b.store_durable("linked", WS).await.unwrap(), durable);
    assert_eq!(
        objects.list_records(WS, "hibernated").await.unwrap().len(),
        1
    );
    to_b.destroy("linked").await.unwrap();
    no_stored_images(&objects, WS, "the durable copy's record gone").await;
    serving_a.abort();
    serving_b.abort();
}

/// A snapshot read from the agent that took it, over the agent link (mutual TLS, the `Peer`
/// service), before any upload: host b fetches it from a and restores it with its files while
/// the object store holds nothing of it; a hibernated sandbox leaving a is adopted by b the
/// same way (not before it leaves) and wakes there with its files. The origin must be the host named (another name is
/// refused at the handshake), a replica's certificate may not call `Peer`, and an origin that
/// does not answer leaves the fetch to the object store once the snapshot is stored there.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_is_read_from_the_host_that_took_it_before_its_upload() {
    use pandastack_cluster::Role;
    use pandastack_host::{error_chain, Host, Origin, Peers};
    const WS: &str = "ws-peer";
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let a = host(&tmp.path().join("a"), &objects, KEY, "host-a").await;
    let b = host(&tmp.path().join("b"), &objects, KEY, "host-b").await;
    for agent in [&a, &b] {
        agent
            .bake_image("tiny", &image(tmp.path(), 4), Shape::new(1, 64))
            .await
            .unwrap();
    }
    let ca = pandastack_testkit::cluster::TestCa::new();
    let (addr, serving_a) = served(&ca, &a, "host-a").await;
    let peers =
        pandastack_agent_link::PeerLink::new(&ca.identity(Role::Agent, "host-b", &[])).unwrap();
    b.reach_peers(Arc::new(peers));
    let (on_a, on_b) = (
        pandastack_agent::LocalHost(Arc::clone(&a)),
        pandastack_agent::LocalHost(Arc::clone(&b)),
    );
    on_a.create("tiny", "peered").await.unwrap();
    let ch = a.channel("peered").await.unwrap();
    mark(&ch, "from-a").await;
    on_a.snapshot("peered", "snap-peer1").await.unwrap();

    let origin = Origin {
        host_id: "host-a".into(),
        address: addr.to_string(),
    };
    on_b.fetch_snapshot("snap-peer1", WS, Some(&origin))
        .await
        .unwrap();
    assert!(
        objects
            .list_records(WS, "snapshots")
            .await
            .unwrap()
            .is_empty(),
        "nothing was uploaded: b read it from a"
    );
    let (mine, theirs) = (
        b.runtime().get_snapshot("snap-peer1").unwrap(),
        a.runtime().get_snapshot("snap-peer1").unwrap(),
    );
    for f in mine.moving_files().unwrap() {
        assert_eq!(read(&mine.dir.join(f)), read(&theirs.dir.join(f)), "{f}");
    }
    on_b.create_from_snapshot("snap-peer1", "peered-b")
        .await
        .unwrap();
    let ch = b.channel("peered-b").await.unwrap();
    assert_eq!(marked(&ch).await, "from-a\n");

    // Who may read: the origin must be the host named; a replica's certificate calls `Agent`
    // only.
    let wrong = Origin {
        host_id: "host-c".into(),
        address: addr.to_string(),
    };
    let replica =
        pandastack_agent_link::PeerLink::new(&ca.identity(Role::Server, "r", &[])).unwrap();
    let e = match replica.send_snapshot(&origin, "snap-peer1").await {
        Ok(_) => panic!("a replica read a snapshot through `Peer`"),
        Err(e) => error_chain(&e),
    };
    assert!(e.contains("may not call this service"), "{e}");
    on_a.snapshot("peered", "snap-peer2").await.unwrap();
    // Not host-a's name: refused at the handshake, and not in the object store either.
    on_b.fetch_snapshot("snap-peer2", WS, Some(&wrong))
        .await
        .unwrap_err();
    assert!(b.runtime().get_snapshot("snap-peer2").is_err());

    // A hibernated sandbox moves the same way: read from the host it leaves, nothing stored.
    // Not before it leaves (its files could change under a wake there).
    let e = on_b
        .adopt_from("peered", WS, &origin)
        .await
        .expect_err("not leaving yet");
    assert!(
        error_chain(&e).contains("not leaving"),
        "{}",
        error_chain(&e)
    );
    assert!(on_b.get("peered").await.is_err(), "nothing adopted");
    on_a.leave("peered").await.unwrap();
    let e = on_a.wake("peered").await.expect_err("leaving: no wake");
    assert!(pandastack_host::is_moving(&e), "{e:?}");
    let v = on_b.adopt_from("peered", WS, &origin).await.unwrap();
    assert_eq!(v.state, pandastack_host::VmState::Hibernated);
    assert!(objects
        .list_records(WS, "hibernated")
        .await
        .unwrap()
        .is_empty());
    within(Duration::from_secs(30), "wake on b", on_b.wake("peered"))
        .await
        .unwrap();
    let ch = b.channel("peered").await.unwrap();
    assert_eq!(marked(&ch).await, "from-a\n");
    on_a.destroy("peered").await.unwrap();

    // The origin gone: once stored, the object store serves the fetch.
    serving_a.abort();
    on_a.store_snapshot("snap-peer2", WS).await.unwrap();
    on_b.fetch_snapshot("snap-peer2", WS, Some(&origin))
        .await
        .unwrap();
    on_b.create_from_snapshot("snap-peer2", "peered-b2")
        .await
        .unwrap();
    let ch = b.channel("peered-b2").await.unwrap();
    assert_eq!(marked(&ch).await, "from-a\n");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("b/data/snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");
}

/// Reads snapshots from the other hosts' agents in process (the agent link's `PeerLink` is
/// tested above).
struct LocalPeers(std::collections::HashMap<String, Arc<dyn pandastack_host::Host>>);

#[async_trait::async_trait]
impl pandastack_host::Peers for LocalPeers {
    async fn send_snapshot(
        &self,
        origin: &pandastack_host::Origin,
        snapshot_id: &str,
    ) -> pandastack_host::HostResult<
        pandastack_host::BoxStream<pandastack_host::HostResult<pandastack_host::ImagePiece>>,
    > {
        let host = self.0.get(&origin.host_id).ok_or_else(|| {
            pandastack_host::HostError::failed("peer", format!("no host {}", origin.host_id))
        })?;
        host.send_snapshot(snapshot_id).await
    }

    async fn send_hibernated(
        &self,
        origin: &pandastack_host::Origin,
        id: &str,
    ) -> pandastack_host::HostResult<
        pandastack_host::BoxStream<pandastack_host::HostResult<pandastack_host::ImagePiece>>,
    > {
        let host = self.0.get(&origin.host_id).ok_or_else(|| {
            pandastack_host::HostError::failed("peer", format!("no host {}", origin.host_id))
        })?;
        host.send_hibernated(id).await
    }
}

/// Dials host agents by host id, in process.
struct Agents(std::collections::HashMap<String, Arc<dyn pandastack_host::Host>>);

#[async_trait::async_trait]
impl pandastack_control::Dial for Agents {
    async fn dial(
        &self,
        host_id: &str,
        _address: &str,
    ) -> Result<Arc<dyn pandastack_host::Host>, pandastack_control::fleet::DialError> {
        Ok(Arc::clone(self.0.get(host_id).ok_or("unknown host")?))
    }
}

/// A control-plane replica over `hosts` (id, agent, compatibility key) joined in `store`.
async fn replica(
    store: &pandastack_store::Store,
    objects: &Objects,
    builds: &Path,
    hosts: &[(&str, &Arc<HostAgent<FakeDriver>>)],
) -> pandastack_control::ControlPlane {
    use pandastack_control::{ControlPlane, Dial, Fleet, PlaceMode};
    let agents = hosts
        .iter()
        .map(|(id, a)| {
            let h: Arc<dyn pandastack_host::Host> =
                Arc::new(pandastack_agent::LocalHost(Arc::clone(a)));
            ((*id).to_owned(), h)
        })
        .collect();
    let fleet = Fleet::new(store.clone(), Arc::new(Agents(agents)) as Arc<dyn Dial>);
    pandastack_control::JoinWatch::new(store.clone(), fleet.clone())
        .tick()
        .await
        .unwrap();
    let config = pandastack_control::ControlConfig {
        place: PlaceMode::AcrossHosts,
        ..pandastack_testkit::fake::test_config("replica", builds)
    };
    let control = ControlPlane::new(
        store.clone(),
        Arc::new(fleet.clone()),
        objects.clone(),
        config,
    );
    control.sandboxes.set_fleet(fleet);
    control
}

fn joining(id: &str, key: &str) -> pandastack_store::Joining {
    pandastack_store::Joining {
        id: id.into(),
        name: id.into(),
        address: format!("{id}.test:7443"),
        capacity: pandastack_store::HostCapacity {
            vcpus: 4,
            memory_mib: 1024,
            disk_bytes: 1 << 40,
            free_slots: 16,
            creates_in_flight: 0,
            slots: 16,
        },
        compat_key: key.into(),
        templates: vec!["tiny".into()],
    }
}

/// `migrate` through a replica: a running sandbox moves to the other host with the same key
/// and runs there (the origin's copy goes, and so does the stored image); a move to a host
/// of another key, or to its own host, is refused and changes nothing; a hibernated one moves
/// hibernated; a call made through a second replica, whose cached owner still names the
/// origin, waits out the move and follows the sandbox; a fork with `spread` puts its children
/// on the other host; a drain moves the drained host's hibernated sandboxes off it. These
/// agents reach no peers: every move takes the fallback through the object store (a pair's
/// agents read from each other: `a_moved_sandbox_is_read_from_the_host_it_leaves`).
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_migrates_sandboxes_and_calls_follow_them() {
    use pandastack_control::ControlError;
    use pandastack_store::{SandboxState, StoreError};
    let tmp = tempfile::tempdir().unwrap();
    let objects =
        Objects::open(&format!("file://{}", tmp.path().join("objects").display())).unwrap();
    let a = host(&tmp.path().join("a"), &objects, KEY, "host-a").await;
    let b = host(&tmp.path().join("b"), &objects, KEY, "host-b").await;
    let o = host(&tmp.path().join("o"), &objects, "qemu-9.other", "host-o").await;
    for agent in [&a, &b, &o] {
        agent
            .bake_image("tiny", &image(tmp.path(), 4), Shape::new(1, 64))
            .await
            .unwrap();
    }
    let store = pandastack_store::Store::open(&tmp.path().join("state.db"))
        .await
        .unwrap();
    let (ws, _, _) = store
        .keys()
        .create_workspace_with_key("ws", 50, 1000)
        .await
        .unwrap();
    let now = pandastack_store::now_ms();
    for (id, key) in [("host-a", KEY), ("host-b", KEY), ("host-o", "qemu-9.other")] {
        store
            .hosts()
            .join(&joining(id, key), 600_000, now)
            .await
            .unwrap();
    }
    let hosts = [("host-a", &a), ("host-b", &b), ("host-o", &o)];
    let one = replica(&store, &objects, &tmp.path().join("b1"), &hosts).await;
    let two = replica(&store, &objects, &tmp.path().join("b2"), &hosts).await;
    let req: pandastack_api_types::CreateSandboxRequest =
        serde_json::from_value(serde_json::json!({"template": "tiny"})).unwrap();

    // Pinned to a, the only way to know where it starts.
    let row = {
        let mut req = req.clone();
        req.metadata.insert("k".into(), "v".into());
        one.sandboxes.create(&ws.id, &req).await.unwrap()
    };
    let row = if row.host_id == "host-a" {
        row
    } else {
        // Placed on another host: move it to a first (itself a migrate).
        one.sandboxes.migrate(row, Some("host-a")).await.unwrap()
    };
    assert_eq!(row.host_id, "host-a");
    let id = row.id.clone();

    // Refusals change nothing.
    let err = one
        .sandboxes
        .migrate(row.clone(), Some("host-o"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ControlError::Store(StoreError::NoCapacity { .. })),
        "{err:?}"
    );
    let err = one
        .sandboxes
        .migrate(row.clone(), Some("host-a"))
        .await
        .unwrap_err();
    assert!(matches!(err, ControlError::CannotMove { .. }), "{err:?}");
    assert_eq!(
        a.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Running
    );

    // Running on a, running on b.
    let moved = one.sandboxes.migrate(row, None).await.unwrap();
    assert_eq!(moved.host_id, "host-b");
    assert_eq!(moved.state, SandboxState::Running);
    assert_eq!(moved.metadata["k"], "v");
    let stored = store.sandboxes().by_id(&id).await.unwrap();
    assert_eq!(
        (stored.host_id.as_str(), stored.state),
        ("host-b", SandboxState::Running)
    );
    assert_eq!(
        b.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Running
    );
    let ch = b.channel(&id).await.unwrap();
    assert_eq!(
        pandastack_testkit::exec(&ch, "echo here").await.stdout,
        "here\n"
    );
    // The origin keeps a copy (refusing wakes) until no replica's cached owner names it.
    within(Duration::from_secs(30), "the origin's copy gone", async {
        while a.get(&id).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    no_stored_images(&objects, &ws.id, "the stored image forgotten").await;

    // Hibernated on b; replica two reads its owner (b) now, then it moves back to a through
    // replica one. Replica two's call, made with its cached owner, still finds it.
    let row = one
        .sandboxes
        .lifecycle(moved, pandastack_control::Verb::Hibernate)
        .await
        .unwrap();
    assert_eq!(
        two.host().get(&id).await.unwrap().state,
        pandastack_host::VmState::Hibernated
    );
    let back = one.sandboxes.migrate(row, None).await.unwrap();
    assert_eq!(
        (back.host_id.as_str(), back.state),
        ("host-a", SandboxState::Hibernated)
    );
    let seen_by_two = store.sandboxes().by_id(&id).await.unwrap();
    let woke = two.sandboxes.awake(seen_by_two).await.unwrap();
    assert_eq!(
        (woke.host_id.as_str(), woke.state),
        ("host-a", SandboxState::Running)
    );
    assert_eq!(
        a.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Running
    );

    // A fork with `spread`: the children run on the other host with the parent's key (two
    // children, one such host: both there); the parent stays.
    let spread: pandastack_api_types::ForkRequest =
        serde_json::from_value(serde_json::json!({"count": 2, "spread": true})).unwrap();
    let forked = one.snapshots.fork(&ws.id, &id, &spread).await.unwrap();
    assert_eq!(forked.parent.host_id, "host-a");
    for child in &forked.children {
        assert_eq!(
            (child.host_id.as_str(), child.state),
            ("host-b", SandboxState::Running),
            "{child:?}"
        );
        let row = store.sandboxes().by_id(&child.id).await.unwrap();
        assert_eq!(row.host_id, "host-b");
        let ch = b.channel(&child.id).await.unwrap();
        assert_eq!(
            pandastack_testkit::exec(&ch, "echo child").await.stdout,
            "child\n"
        );
    }
    for child in &forked.children {
        one.sandboxes.delete(child).await.unwrap();
    }

    // A drain of host-a moves its hibernated sandboxes and its running app VMs off it (an
    // app's VM: a sandbox with its metadata); a running sandbox of a user stays.
    let slept = one
        .sandboxes
        .lifecycle(woke, pandastack_control::Verb::Hibernate)
        .await
        .unwrap();
    let mut app_vm = on_a(&one, &ws.id).await;
    app_vm.metadata.extend([
        (
            pandastack_control::apps::APP_METADATA.to_owned(),
            "site".to_owned(),
        ),
        (
            pandastack_control::apps::DEPLOY_METADATA.to_owned(),
            "dep-1".to_owned(),
        ),
    ]);
    store.sandboxes().update(&app_vm).await.unwrap();
    let users = on_a(&one, &ws.id).await;
    store.hosts().drain("host-a").await.unwrap();
    assert_eq!(one.sandboxes.move_off("host-a").await.unwrap(), (2, 0));
    let moved = store.sandboxes().by_id(&app_vm.id).await.unwrap();
    assert_eq!(
        (moved.host_id.as_str(), moved.state),
        ("host-b", SandboxState::Running)
    );
    let ch = b.channel(&app_vm.id).await.unwrap();
    assert_eq!(
        pandastack_testkit::exec(&ch, "echo app").await.stdout,
        "app\n"
    );
    assert_eq!(
        store.sandboxes().by_id(&users.id).await.unwrap().host_id,
        "host-a"
    );
    for sb in [&moved, &users] {
        one.sandboxes.delete(sb).await.unwrap();
    }
    let row = store.sandboxes().by_id(&id).await.unwrap();
    assert_eq!(
        (row.host_id.as_str(), row.state),
        ("host-b", SandboxState::Hibernated)
    );
    assert_eq!(
        b.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Hibernated
    );
    one.sandboxes.delete(&row).await.unwrap();
    drop(slept);
}

/// Two hosts with key [`KEY`] and template `tiny`, joined in a store with workspace `ws`, and
/// a replica over them.
struct Pair {
    objects: Objects,
    a: Arc<HostAgent<FakeDriver>>,
    b: Arc<HostAgent<FakeDriver>>,
    store: pandastack_store::Store,
    ws: pandastack_store::Workspace,
    one: pandastack_control::ControlPlane,
}

async fn pair(dir: &Path) -> Pair {
    let objects = Objects::open(&format!("file://{}", dir.join("objects").display())).unwrap();
    let a = host(&dir.join("a"), &objects, KEY, "host-a").await;
    let b = host(&dir.join("b"), &objects, KEY, "host-b").await;
    for agent in [&a, &b] {
        agent
            .bake_image("tiny", &image(dir, 4), Shape::new(1, 64))
            .await
            .unwrap();
    }
    let store = pandastack_store::Store::open(&dir.join("state.db"))
        .await
        .unwrap();
    let (ws, _, _) = store
        .keys()
        .create_workspace_with_key("ws", 50, 1000)
        .await
        .unwrap();
    for id in ["host-a", "host-b"] {
        store
            .hosts()
            .join(&joining(id, KEY), 600_000, pandastack_store::now_ms())
            .await
            .unwrap();
    }
    let hosts = [("host-a", &a), ("host-b", &b)];
    let peers: std::collections::HashMap<String, Arc<dyn pandastack_host::Host>> = hosts
        .iter()
        .map(|(id, agent)| {
            let h: Arc<dyn pandastack_host::Host> =
                Arc::new(pandastack_agent::LocalHost(Arc::clone(agent)));
            ((*id).to_owned(), h)
        })
        .collect();
    let peers = Arc::new(LocalPeers(peers));
    a.reach_peers(peers.clone());
    b.reach_peers(peers);
    let one = replica(&store, &objects, &dir.join("b1"), &hosts).await;
    Pair {
        objects,
        a,
        b,
        store,
        ws,
        one,
    }
}

/// A running sandbox of `tiny` on host-a, made through `one` (moved there if placed on b).
async fn on_a(one: &pandastack_control::ControlPlane, ws: &str) -> pandastack_store::SandboxRow {
    on_a_asking(one, ws, serde_json::json!({"template": "tiny"})).await
}

/// [`on_a`] with the create request `req`.
async fn on_a_asking(
    one: &pandastack_control::ControlPlane,
    ws: &str,
    req: serde_json::Value,
) -> pandastack_store::SandboxRow {
    let req: pandastack_api_types::CreateSandboxRequest = serde_json::from_value(req).unwrap();
    let row = one.sandboxes.create(ws, &req).await.unwrap();
    if row.host_id == "host-a" {
        row
    } else {
        one.sandboxes.migrate(row, Some("host-a")).await.unwrap()
    }
}

/// A running sandbox moved through a replica between agents that reach each other: the
/// destination reads its image from the host it leaves, so nothing is stored for the move
/// (no record in the object store right after it, where the fallback's would stay until the
/// origin's copy is retired), and it runs there with its files.
#[tokio::test(flavor = "multi_thread")]
async fn a_moved_sandbox_is_read_from_the_host_it_leaves() {
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        objects,
        a,
        b,
        ws,
        one,
        ..
    } = pair(tmp.path()).await;
    let row = on_a(&one, &ws.id).await;
    let ch = a.channel(&row.id).await.unwrap();
    mark(&ch, "was-on-a").await;
    let moved = one.sandboxes.migrate(row, Some("host-b")).await.unwrap();
    assert_eq!(
        (moved.host_id.as_str(), moved.state),
        ("host-b", pandastack_store::SandboxState::Running)
    );
    assert!(objects
        .list_records(&ws.id, "hibernated")
        .await
        .unwrap()
        .is_empty());
    let ch = b.channel(&moved.id).await.unwrap();
    assert_eq!(marked(&ch).await, "was-on-a\n");
}

/// A hibernated sandbox whose host is lost wakes on another host: each hibernation through a
/// replica stores a durable copy of its image in the background and the row records it; a
/// wake where it slept drops that copy (record and row); once its host is dead, the next call
/// into it adopts the copy on a host with the same key, moves the row and runs it there, the
/// dead host's copy never woken. A sandbox without a durable copy answers that its host is
/// unreachable, as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_hibernated_sandbox_of_a_lost_host_wakes_on_another() {
    use pandastack_control::Verb;
    use pandastack_store::SandboxState;
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        objects,
        a,
        b,
        store,
        ws,
        one,
    } = pair(tmp.path()).await;
    let create_on_a = || on_a(&one, &ws.id);
    let durable = |id: String| {
        let store = store.clone();
        async move {
            within(Duration::from_secs(30), "a durable copy recorded", async {
                loop {
                    if let Some(c) = store.sandboxes().durable_copy(&id).await.unwrap() {
                        return c;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
        }
    };
    let row = create_on_a().await;
    let id = row.id.clone();
    let ch = a.channel(&id).await.unwrap();
    mark(&ch, "kept").await;

    // Hibernated: durable. Woken where it slept: the copy goes, record and row.
    let slept = one.sandboxes.lifecycle(row, Verb::Hibernate).await.unwrap();
    let first = durable(id.clone()).await;
    assert!(first.at_ms >= slept.last_activity_at, "{first:?}");
    let records = objects.list_records(&ws.id, "hibernated").await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    let woke = one.sandboxes.lifecycle(slept, Verb::Wake).await.unwrap();
    assert_eq!(store.sandboxes().durable_copy(&id).await.unwrap(), None);
    no_stored_images(&objects, &ws.id, "the stale copy's record gone").await;

    // Hibernated again (durable again), and a second sandbox hibernated with its copy's
    // record taken away (as if its host died before the upload ended).
    let slept = one
        .sandboxes
        .lifecycle(woke, Verb::Hibernate)
        .await
        .unwrap();
    let copy = durable(id.clone()).await;
    assert_ne!(copy.tag, first.tag);
    let bare = create_on_a().await;
    let bare = one
        .sandboxes
        .lifecycle(bare, Verb::Hibernate)
        .await
        .unwrap();
    durable(bare.id.clone()).await;
    assert!(store
        .sandboxes()
        .set_state_touched(&bare.id, SandboxState::Running, 1)
        .await
        .is_ok());
    store
        .sandboxes()
        .set_state(&bare.id, SandboxState::Hibernated)
        .await
        .unwrap();
    assert_eq!(
        store.sandboxes().durable_copy(&bare.id).await.unwrap(),
        None
    );

    lose_host_a(&store).await;
    // The replica stops calling a dead host once its cached row is re-read.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    let woke = one.sandboxes.awake(slept).await.unwrap();
    assert_eq!(
        (woke.host_id.as_str(), woke.state),
        ("host-b", SandboxState::Running)
    );
    let row = store.sandboxes().by_id(&id).await.unwrap();
    assert_eq!(
        (row.host_id.as_str(), row.state),
        ("host-b", SandboxState::Running)
    );
    let ch = b.channel(&id).await.unwrap();
    assert_eq!(marked(&ch).await, "kept\n");
    // The dead host's copy never ran; the stored record went with the adoption.
    assert_eq!(
        a.get(&id).await.unwrap().state,
        pandastack_agent::VmState::Hibernated
    );
    assert_eq!(store.sandboxes().durable_copy(&id).await.unwrap(), None);

    // No durable copy: unreachable, as before, and still on a.
    let err = one.sandboxes.awake(bare.clone()).await.unwrap_err();
    assert!(
        matches!(
            err,
            pandastack_control::ControlError::Host(pandastack_host::HostError::Unreachable { .. })
        ),
        "{err:?}"
    );
    assert_eq!(
        store.sandboxes().by_id(&bare.id).await.unwrap().host_id,
        "host-a"
    );
}

/// A snapshot taken through a replica is stored in the object store in the background (the
/// snapshot call does not wait) and its row says when it became durable; with its own host
/// drained, a create from it is placed on another host with the same key, which fetches it
/// and restores it there with its files; deleting the snapshot removes it from both hosts and
/// from the object store, and the chunk collector then takes its bytes back.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_taken_on_one_host_restores_on_another() {
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        objects,
        a,
        b,
        store,
        ws,
        one,
    } = pair(tmp.path()).await;
    let row = on_a(&one, &ws.id).await;
    let ch = a.channel(&row.id).await.unwrap();
    mark(&ch, "snapped").await;
    let snap_id = pandastack_store::new_id("snap-");
    let (_, snap) = one.snapshots.snapshot(row, &snap_id).await.unwrap();
    assert_eq!(snap.host_id, "host-a");
    within(Duration::from_secs(30), "the snapshot durable", async {
        while store
            .snapshots()
            .durable_at(&snap_id)
            .await
            .unwrap()
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(b.runtime().get_snapshot(&snap_id).is_err(), "not on b yet");

    // Its host takes no creates: the create from it runs on b, from the stored files.
    store.hosts().drain("host-a").await.unwrap();
    let from: pandastack_api_types::CreateSandboxRequest =
        serde_json::from_value(serde_json::json!({"snapshot_id": snap_id})).unwrap();
    let restored = one.sandboxes.create(&ws.id, &from).await.unwrap();
    assert_eq!(
        (restored.host_id.as_str(), restored.state),
        ("host-b", pandastack_store::SandboxState::Running)
    );
    let ch = b.channel(&restored.id).await.unwrap();
    assert_eq!(marked(&ch).await, "snapped\n");
    assert!(b.runtime().get_snapshot(&snap_id).is_ok(), "fetched to b");

    // Deleted: gone from both hosts and from the object store; the restored sandbox runs on.
    one.snapshots.delete(&ws.id, &snap_id).await.unwrap();
    assert!(a.runtime().get_snapshot(&snap_id).is_err());
    assert!(b.runtime().get_snapshot(&snap_id).is_err());
    assert!(objects
        .list_records(&ws.id, "snapshots")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(marked(&ch).await, "snapped\n");
    // Its bytes: the chunk collector takes back what no manifest of the workspace names (here
    // with no grace: nothing uploads into it now).
    assert!(!objects.list_chunks(&ws.id).await.unwrap().is_empty());
    let collected = objects
        .collect_chunks(&ws.id, Duration::ZERO)
        .await
        .unwrap();
    assert!(collected.deleted > 0, "{collected:?}");
    assert!(objects.list_chunks(&ws.id).await.unwrap().is_empty());
    // A pass over the whole store with the real grace takes nothing young: the hosts' bakes,
    // whose uploads may still be running, keep every chunk.
    let bakes = objects.list_chunks(SHARED_NAMESPACE).await.unwrap().len();
    let all = pandastack_control::chunks::collect_all(&objects, pandastack_objects::GC_GRACE).await;
    assert_eq!(all.deleted, 0, "{all:?}");
    assert!(objects.list_chunks(SHARED_NAMESPACE).await.unwrap().len() >= bakes);
}

/// Host a is lost: its lease lapses (a join with a 1 ms lease) and a reaper says so.
async fn lose_host_a(store: &pandastack_store::Store) {
    lose_host(store, "host-a").await
}

/// Host `id` is lost (see [`lose_host_a`]).
async fn lose_host(store: &pandastack_store::Store, id: &str) {
    store
        .hosts()
        .join(&joining(id, KEY), 1, pandastack_store::now_ms())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let reaped = store
        .hosts()
        .reap(pandastack_store::now_ms())
        .await
        .unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
}

/// A running sandbox created with `on_host_loss: "restore"` whose host is lost runs again on
/// another host with its id: from its newest durable snapshot (fetched there) when it has one,
/// else from its template; one created without it stays `lost`. A second
/// pass restores nothing again, and when the lost host joins again its copies of the restored
/// sandboxes are destroyed (no row names them there) while the `lost` one runs again there.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_sandbox_created_to_restore_runs_again_on_another_host() {
    use pandastack_store::SandboxState::*;
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        objects: _objects,
        a,
        b,
        store,
        ws,
        one,
    } = pair(tmp.path()).await;
    let restore = serde_json::json!({"template": "tiny", "on_host_loss": "restore"});
    let snapped = on_a_asking(&one, &ws.id, restore.clone()).await;
    let fresh = on_a_asking(&one, &ws.id, restore).await;
    let stays = on_a(&one, &ws.id).await;
    assert_eq!(
        snapped.on_host_loss,
        pandastack_api_types::OnHostLoss::Restore
    );
    let (snapped, snap) = one
        .snapshots
        .snapshot(snapped, "snap-checkpoint")
        .await
        .unwrap();
    // Its checkpoint once the snapshot is durable.
    within(Duration::from_secs(30), "the checkpoint recorded", async {
        while store.sandboxes().checkpoint(&snapped.id).await.unwrap() != Some(snap.id.clone()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(b.runtime().get_snapshot(&snap.id).is_err(), "not on b yet");

    // Nothing to restore while host a lives.
    assert_eq!(one.sandboxes.restore_lost().await.unwrap(), 0);
    lose_host_a(&store).await;
    for id in [&snapped.id, &fresh.id, &stays.id] {
        assert_eq!(store.sandboxes().by_id(id).await.unwrap().state, Lost);
    }
    assert_eq!(one.sandboxes.restore_lost().await.unwrap(), 2);
    for id in [&snapped.id, &fresh.id] {
        let row = store.sandboxes().by_id(id).await.unwrap();
        assert_eq!(
            (row.host_id.as_str(), row.state),
            ("host-b", Running),
            "{id}"
        );
    }
    // (The fake driver keeps no memory or /tmp: real guests show those, `cluster_guests`.)
    assert!(b.runtime().get_snapshot(&snap.id).is_ok(), "fetched to b");
    for id in [&snapped.id, &fresh.id] {
        let ch = b.channel(id).await.unwrap();
        assert_eq!(
            pandastack_testkit::exec(&ch, "echo up").await.stdout,
            "up\n"
        );
    }
    // Through the replica, as any sandbox.
    let row = store.sandboxes().by_id(&snapped.id).await.unwrap();
    let woke = one.sandboxes.awake(row).await.unwrap();
    assert_eq!(woke.host_id, "host-b");
    let stays_now = store.sandboxes().by_id(&stays.id).await.unwrap();
    assert_eq!(
        (stays_now.host_id.as_str(), stays_now.state),
        ("host-a", Lost)
    );
    assert_eq!(one.sandboxes.restore_lost().await.unwrap(), 0);

    // Host a comes back: what was restored elsewhere goes, the lost one runs again.
    let back = store
        .hosts()
        .join(&joining("host-a", KEY), 600_000, pandastack_store::now_ms())
        .await
        .unwrap();
    let host_a = pandastack_agent::LocalHost(Arc::clone(&a));
    let r = pandastack_control::reconcile_host(&store, &host_a, "host-a", back.epoch)
        .await
        .unwrap();
    let mut removed = r.removed.clone();
    removed.sort();
    let mut want = vec![snapped.id.clone(), fresh.id.clone()];
    want.sort();
    assert_eq!(removed, want, "{r:?}");
    assert_eq!(r.found, std::slice::from_ref(&stays.id));
    assert!(a.get(&snapped.id).await.is_err());
    assert_eq!(
        store.sandboxes().by_id(&stays.id).await.unwrap().state,
        Running
    );
}

/// An agent fences itself: with no lease, or one that may have lapsed, its running VMs are
/// paused (one created meanwhile too); a renewal of the same epoch resumes what it paused; a
/// new epoch leaves them paused for the control plane's reconciliation, which resumes a VM
/// whose row says `running`, and one whose row is `lost` if it was running when it was lost
/// (not one that was paused by its user).
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_cut_off_pauses_its_vms_until_its_lease_is_renewed_or_it_is_reconciled() {
    use pandastack_agent::VmState as Vm;
    use pandastack_agent_link::fence::{Fence, MARGIN};
    use pandastack_agent_link::membership::LeaseView;
    use pandastack_store::SandboxState::*;
    use std::time::Instant;
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        a, store, ws, one, ..
    } = pair(tmp.path()).await;
    let host_a = pandastack_agent::LocalHost(Arc::clone(&a));
    let running = on_a(&one, &ws.id).await;
    let held = on_a(&one, &ws.id).await;
    let held = one
        .sandboxes
        .lifecycle(held, pandastack_control::Verb::Pause)
        .await
        .unwrap();
    let state = |id: String| {
        let a = Arc::clone(&a);
        async move { a.get(&id).await.unwrap().state }
    };
    let now = Instant::now();
    let lease = |epoch: i64, secs: u64| LeaseView {
        epoch: Some(epoch),
        runs_until: Some(now + Duration::from_secs(secs)),
    };
    let mut fence = Fence::default();

    // A lease that runs: nothing. One within the margin of its end: paused.
    assert_eq!(
        fence.check(&host_a, lease(1, 10), now).await,
        (vec![], vec![])
    );
    assert_eq!(state(running.id.clone()).await, Vm::Running);
    let near = now + Duration::from_secs(10) - MARGIN;
    let (paused, _) = fence.check(&host_a, lease(1, 10), near).await;
    assert_eq!(paused, std::slice::from_ref(&running.id));
    assert_eq!(state(running.id.clone()).await, Vm::Paused);
    assert_eq!(state(held.id.clone()).await, Vm::Paused);
    // Renewed, same epoch: resumed; the one its user paused stays paused.
    let (_, resumed) = fence.check(&host_a, lease(1, 20), near).await;
    assert_eq!(resumed, std::slice::from_ref(&running.id));
    assert_eq!(state(running.id.clone()).await, Vm::Running);
    assert_eq!(state(held.id.clone()).await, Vm::Paused);

    // No lease (fenced, or an agent's start): paused; a new epoch resumes nothing here.
    let (paused, _) = fence.check(&host_a, LeaseView::default(), now).await;
    assert_eq!(paused, std::slice::from_ref(&running.id));
    assert_eq!(
        fence.check(&host_a, lease(2, 10), now).await,
        (vec![], vec![])
    );
    assert_eq!(state(running.id.clone()).await, Vm::Paused);
    // The reconciliation of the new epoch: the row says running, so it runs.
    let joined = store
        .hosts()
        .join(&joining("host-a", KEY), 600_000, pandastack_store::now_ms())
        .await
        .unwrap();
    let r = pandastack_control::reconcile_host(&store, &host_a, "host-a", joined.epoch)
        .await
        .unwrap();
    assert_eq!(r.resumed, std::slice::from_ref(&running.id), "{r:?}");
    assert_eq!(state(running.id.clone()).await, Vm::Running);
    assert_eq!(state(held.id.clone()).await, Vm::Paused);

    // Declared dead while fenced: both lost; back, the running one resumes, the held one not.
    fence.check(&host_a, LeaseView::default(), now).await;
    assert_eq!(state(running.id.clone()).await, Vm::Paused);
    lose_host_a(&store).await;
    let joined = store
        .hosts()
        .join(&joining("host-a", KEY), 600_000, pandastack_store::now_ms())
        .await
        .unwrap();
    let r = pandastack_control::reconcile_host(&store, &host_a, "host-a", joined.epoch)
        .await
        .unwrap();
    let mut found = r.found.clone();
    found.sort();
    let mut want = vec![running.id.clone(), held.id.clone()];
    want.sort();
    assert_eq!(found, want, "{r:?}");
    assert_eq!(r.resumed, std::slice::from_ref(&running.id), "{r:?}");
    assert_eq!(state(running.id.clone()).await, Vm::Running);
    let rows = store.sandboxes();
    assert_eq!(rows.by_id(&running.id).await.unwrap().state, Running);
    assert_eq!(rows.by_id(&held.id).await.unwrap().state, Paused);
}

/// A volume whose host is lost reads `unavailable`; a snapshot, a backup or a sandbox mounting
/// it is refused saying so (and what to do), with nothing written; its delete removes its row
/// without calling the dead host; when the host joins again, the file no row names is removed.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_of_a_lost_host_is_unavailable_and_can_be_deleted() {
    use pandastack_control::{ControlError, VolumeError};
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        a,
        b,
        store,
        ws,
        one,
        ..
    } = pair(tmp.path()).await;
    let req: pandastack_api_types::CreateVolumeRequest =
        serde_json::from_value(serde_json::json!({"name": "data", "size_gb": 1})).unwrap();
    let made = one.volumes.create(&ws.id, &req).await.unwrap();
    assert!(!made.unavailable);
    let host = made.row.host_id.clone();
    lose_host(&store, &host).await;

    let got = one.volumes.get(&ws.id, "data").await.unwrap();
    assert!(got.unavailable, "its host {host} is dead");
    let unavailable = |e: &VolumeError| matches!(e, VolumeError::Unavailable { volume, host: h } if volume == "data" && *h == host);
    let e = one.volumes.snapshot(&ws.id, "data").await.unwrap_err();
    assert!(unavailable(&e), "{e:?}");
    assert!(e.to_string().contains("from_backup"), "{e}");
    let e = one.volumes.backup(&ws.id, "data").await.unwrap_err();
    assert!(unavailable(&e), "{e:?}");
    let mount: pandastack_api_types::CreateSandboxRequest = serde_json::from_value(
        serde_json::json!({"template": "tiny", "volumes": [{"name": "data", "path": "/data"}]}),
    )
    .unwrap();
    let e = one.sandboxes.create(&ws.id, &mount).await.unwrap_err();
    assert!(
        matches!(&e, ControlError::VolumeUnavailable(v) if unavailable(v.as_ref())),
        "{e:?}"
    );
    assert!(store
        .sandboxes()
        .list(&ws.id, &Default::default(), None, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .volumes()
        .snapshots(&got.row.id)
        .await
        .unwrap()
        .is_empty());

    one.volumes.delete(&ws.id, "data").await.unwrap();
    assert!(matches!(
        one.volumes.get(&ws.id, "data").await,
        Err(VolumeError::NotFound(_))
    ));

    // Its host joins again: the file no row names any more is removed.
    let agent = if host == "host-a" { &a } else { &b };
    let back = store
        .hosts()
        .join(&joining(&host, KEY), 600_000, pandastack_store::now_ms())
        .await
        .unwrap();
    let local = pandastack_agent::LocalHost(Arc::clone(agent));
    use pandastack_host::Host as _;
    assert!(local.volume_ids().await.unwrap().contains(&got.row.id));
    let r = pandastack_control::reconcile_host(&store, &local, &host, back.epoch)
        .await
        .unwrap();
    assert_eq!(r.volumes_removed, std::slice::from_ref(&got.row.id));
    assert!(!local.volume_ids().await.unwrap().contains(&got.row.id));
}

/// After a call into a sandbox failed, its host counts as lost only when its lease runs out
/// without a renewal (a schedule's run then fails with `host_lost`): a host that renews is not
/// lost; one that stops renewing is, once reaped (the sandbox `lost`); no sandbox, no host.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_is_lost_for_a_failed_call_only_when_its_lease_runs_out_unrenewed() {
    let tmp = tempfile::tempdir().unwrap();
    let Pair { store, ws, one, .. } = pair(tmp.path()).await;
    let sb = on_a(&one, &ws.id).await;
    assert_eq!(one.sandboxes.lost_host("sb-none").await.unwrap(), None);

    // A short lease, renewed: alive.
    let short = |ms| pandastack_store::now_ms() + ms;
    let joined = store
        .hosts()
        .join(&joining("host-a", KEY), 400, pandastack_store::now_ms())
        .await
        .unwrap();
    let renewing = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                store
                    .hosts()
                    .renew(&[("host-a".to_owned(), joined.epoch)], short(400))
                    .await
                    .unwrap();
            }
        })
    };
    assert_eq!(one.sandboxes.lost_host(&sb.id).await.unwrap(), None);
    renewing.abort();

    // No renewal: once the lease has run out the host is reaped, and lost.
    let reaping = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if !store
                    .hosts()
                    .reap(pandastack_store::now_ms())
                    .await
                    .unwrap()
                    .is_empty()
                {
                    return;
                }
            }
        })
    };
    let lost = within(Duration::from_secs(10), "the host lost", async {
        one.sandboxes.lost_host(&sb.id).await.unwrap()
    })
    .await;
    reaping.await.unwrap();
    assert_eq!(lost.as_deref(), Some("host-a"));
    assert_eq!(
        store.sandboxes().by_id(&sb.id).await.unwrap().state,
        pandastack_store::SandboxState::Lost
    );
}

/// A fork whose children do not fit on the parent's host: each child is created from the
/// parent's snapshot where it fits — the first beside its parent (room for one), the second on
/// the other host, which reads it from the parent's (the upload to the object store runs in
/// the background and ends durable). Both run; deleting them deletes the fork's snapshot on
/// both hosts.
#[tokio::test(flavor = "multi_thread")]
async fn a_fork_too_big_for_its_parents_host_puts_children_on_another() {
    let tmp = tempfile::tempdir().unwrap();
    let Pair {
        a,
        b,
        store,
        ws,
        one,
        ..
    } = pair(tmp.path()).await;
    let parent = on_a(&one, &ws.id).await;
    // Room on host-a for the parent and one more.
    let mut small = joining("host-a", KEY);
    small.capacity.memory_mib = parent.memory_mib * 2;
    store
        .hosts()
        .join(&small, 600_000, pandastack_store::now_ms())
        .await
        .unwrap();
    let req: pandastack_api_types::ForkRequest =
        serde_json::from_value(serde_json::json!({"count": 2})).unwrap();
    let forked = one.snapshots.fork(&ws.id, &parent.id, &req).await.unwrap();
    let snap = forked.snapshot.id.clone();
    let hosts: Vec<&str> = forked.children.iter().map(|c| c.host_id.as_str()).collect();
    assert_eq!(hosts, ["host-a", "host-b"], "{:?}", forked.children);
    within(
        Duration::from_secs(30),
        "the fork's snapshot durable",
        async {
            while store.snapshots().durable_at(&snap).await.unwrap().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    for (child, agent) in forked.children.iter().zip([&a, &b]) {
        assert_eq!(child.state, pandastack_store::SandboxState::Running);
        assert_eq!(child.parent_id.as_deref(), Some(parent.id.as_str()));
        let ch = agent.channel(&child.id).await.unwrap();
        assert_eq!(
            pandastack_testkit::exec(&ch, "echo forked").await.stdout,
            "forked\n"
        );
    }
    assert!(b.runtime().get_snapshot(&snap).is_ok(), "fetched to b");
    for child in &forked.children {
        one.sandboxes.delete(child).await.unwrap();
    }
    assert!(matches!(
        store.snapshots().get(&ws.id, &snap).await,
        Err(pandastack_store::StoreError::NotFound)
    ));
    assert!(a.runtime().get_snapshot(&snap).is_err(), "gone from a");
    assert!(b.runtime().get_snapshot(&snap).is_err(), "gone from b");
}

/// A replica's fleet builds templates on a host (the real-guest test builds one): an OCI
/// tarball given as a path in the replica's directory (not stored in the object store, which
/// the host could read) is refused, and a bake of a build it did not place is refused saying
/// to build again.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_refuses_an_oci_build_and_a_bake_of_a_build_it_did_not_place() {
    use pandastack_host::{BuildSource, Host, HostError};
    let tmp = tempfile::tempdir().unwrap();
    let Pair { store, a, b, .. } = pair(tmp.path()).await;
    let hosts: std::collections::HashMap<String, Arc<dyn Host>> = [("host-a", &a), ("host-b", &b)]
        .into_iter()
        .map(|(id, agent)| {
            let h: Arc<dyn Host> = Arc::new(pandastack_agent::LocalHost(Arc::clone(agent)));
            (id.to_owned(), h)
        })
        .collect();
    let fleet = pandastack_control::Fleet::new(
        store.clone(),
        Arc::new(Agents(hosts)) as Arc<dyn pandastack_control::Dial>,
    );
    let oci = BuildSource::Oci {
        tarball: tmp.path().join("image.tar"),
        disk_mb: None,
    };
    let e = fleet
        .build_image("t-v1-abc", oci, tmp.path().join("build"), Box::new(|_| {}))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, HostError::BuildFailed(m) if m.contains("build from a spec")),
        "{e:?}"
    );
    let e = fleet
        .bake_image(
            "t-v1-abc",
            &tmp.path().join("rootfs.ext4"),
            pandastack_host::Shape {
                vcpus: 1,
                memory_mib: 64,
                disk: None,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, HostError::BuildFailed(m) if m.contains("build the version again")),
        "{e:?}"
    );
}
