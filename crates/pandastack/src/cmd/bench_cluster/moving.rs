//! The templates part (#39): a template baked on one real host, made durable in an object store
//! in a directory, and its first create on a second real host that lacks it; then a sandbox
//! hibernated on one host and woken on the other (the host calls of
//! `POST /v1/sandboxes/{id}/migrate`: read from the first host's agent over a loopback agent
//! link, and through the object store), against a wake where it slept; a fork's child on the
//! other host; snapshots stored and restored elsewhere.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use pandastack_cluster::Role;
use pandastack_host::{ExecSpec, Origin};

use crate::cmd::bench::ms;
use crate::cmd::local_host::{open_objects, start_host, StartedHost};

use super::ClusterArgs;

/// The compatibility key both hosts share (they run on this machine with one QEMU and kernel).
const KEY: &str = "bench";

/// What the templates part measured.
pub(super) struct Moved {
    /// From the bake's end to its record in the store (the upload in the background).
    pub(super) upload_ms: f64,
    /// The first create of the template on a host without it, to its first exec answered.
    pub(super) elsewhere_first: Vec<f64>,
    /// A create on the host that holds it, to its first exec answered (for comparison).
    pub(super) local: Vec<f64>,
    /// A hibernated sandbox of host a to its first exec answered on host b (read from a's
    /// agent, adopted, woken).
    pub(super) wake_elsewhere: Vec<f64>,
    /// The same move through the object store (the fallback when the agents cannot reach
    /// each other).
    pub(super) wake_stored: Vec<f64>,
    /// The same sandbox's hibernation image size, MiB (what moved).
    pub(super) image_mib: Vec<f64>,
    /// A hibernated sandbox to its first exec answered where it slept.
    pub(super) wake_local: Vec<f64>,
    /// A running sandbox of host a forked to its child's first exec answered on host b (the
    /// path of a fork with `spread`: the parent's snapshot taken, read by b from a's agent
    /// while its upload runs, the child restored there).
    pub(super) fork_elsewhere: Vec<f64>,
    /// Snapshots of a running sandbox, each: the snapshot call (local), then its upload to the
    /// object store (in the background in a cluster), then a create from it on the other host
    /// (fetched, restored) to its first exec answered.
    pub(super) snapshots: Vec<SnapshotRun>,
    /// A sandbox's durable copy after its hibernation (the upload in the background).
    pub(super) hibernate_durable: Vec<f64>,
    pub(super) accel: String,
}

/// One run of [`snapshot_elsewhere`], milliseconds.
pub(super) struct SnapshotRun {
    pub(super) local: f64,
    pub(super) upload: f64,
    pub(super) create_elsewhere: f64,
}

/// A real host (`pandastack server`'s defaults, no pool, no networking) on `data`, sharing
/// templates through the object store in `objects` as `name`.
async fn host(
    a: &ClusterArgs,
    data: &Path,
    objects: &Path,
    name: &str,
) -> anyhow::Result<StartedHost> {
    let templates = data.join("no-specs");
    std::fs::create_dir_all(&templates)?;
    let mut argv: Vec<PathBuf> = vec!["bench".into(), "--data-dir".into(), data.join("data")];
    argv.extend(["--templates-dir".into(), templates]);
    argv.extend(["--network", "off", "--pool-size", "0"].map(PathBuf::from));
    argv.extend([
        "--objects".into(),
        PathBuf::from(format!("file://{}", objects.display())),
    ]);
    if let Some(k) = &a.kernel {
        argv.extend(["--kernel".into(), k.clone()]);
    }
    let flags = super::host_flags(argv)?;
    let store = open_objects(&flags).await?;
    let started = start_host(&flags, |_| false, store.clone()).await?;
    started.agent.share_templates(store, KEY, name);
    Ok(started)
}

/// Host `a` served on a loopback agent link (a cluster CA made in `ca`), and host `b`
/// reaching it as an agent does: `a`'s origin for a fetch, and the serving task.
async fn peers(
    ca: &Path,
    a: &StartedHost,
    b: &StartedHost,
) -> anyhow::Result<(Origin, tokio::task::JoinHandle<()>)> {
    let ca = pandastack_cluster::ClusterCa::init(ca).context("a cluster CA")?;
    let identity = |name: &str| -> anyhow::Result<pandastack_cluster::Identity> {
        let issued = ca.issue(Role::Agent, name, &[], 1)?;
        Ok(pandastack_cluster::Identity::from_pem(
            ca.cert_pem(),
            &issued.cert_pem,
            &issued.key_pem,
        )?)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = Origin {
        host_id: "host-a".into(),
        address: listener.local_addr()?.to_string(),
    };
    let (served, host) = (identity("host-a")?, Arc::clone(&a.host));
    let serving = tokio::spawn(async move {
        if let Err(e) = pandastack_agent_link::serve(&served, listener, host).await {
            tracing::warn!(error = &e as &dyn std::error::Error, "host-a's agent link");
        }
    });
    let link = pandastack_agent_link::PeerLink::new(&identity("host-b")?)?;
    b.agent.reach_peers(Arc::new(link));
    Ok((origin, serving))
}

/// Creates `id` of template `bench` on `host` and runs `true` in it: milliseconds to that answer.
async fn create_ready(host: &StartedHost, id: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    host.host.create("bench", id).await?;
    exec_true(host, id).await?;
    let took = ms(t.elapsed());
    host.host.destroy(id).await?;
    Ok(took)
}

/// `template_upload_ms`, `create_template_elsewhere_first_ms` (`runs` times: host b's copy is
/// removed between runs, the store's kept) and `create_template_local_ms`: 512 MiB `bench`
/// baked from `image` on host a.
pub(super) async fn templates_moving(
    a: &ClusterArgs,
    image: &Path,
    runs: usize,
) -> anyhow::Result<Moved> {
    let root = super::scratch_root(a, "ps-bench-templates-")?;
    let objects = root.path().join("objects");
    let host_a = host(a, &root.path().join("a"), &objects, "host-a").await?;
    let host_b = host(a, &root.path().join("b"), &objects, "host-b").await?;
    let shape = pandastack_host::Shape {
        vcpus: 1,
        memory_mib: 512,
        disk: None,
    };
    let bake_ms = host_a.host.bake_image("bench", image, shape).await?;
    let baked = Instant::now();
    eprintln!("templates: baked on host-a in {bake_ms} ms");
    let bake_id = host_a.agent.runtime().template("bench")?.bake_id;
    loop {
        if let Some(b) = host_a.agent.shared_bake("bench").await? {
            if b.template.bake_id == bake_id {
                break;
            }
        }
        ensure!(
            baked.elapsed() < Duration::from_secs(600),
            "the bake was not durable within 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let upload_ms = ms(baked.elapsed());
    eprintln!("templates: durable in the store {upload_ms:.0} ms after the bake");

    let mut elsewhere_first = Vec::new();
    let mut local = Vec::new();
    for i in 0..runs {
        host_b
            .agent
            .runtime()
            .remove_template("bench")
            .await
            .context("remove host-b's copy")?;
        let took = create_ready(&host_b, &format!("sb-bench-b-{i}")).await?;
        let got = host_b.agent.runtime().template("bench")?.bake_id;
        ensure!(
            got == bake_id,
            "host-b baked its own ({got}), not host-a's {bake_id}"
        );
        eprintln!("templates: first create on host-b {took:.0} ms");
        elsewhere_first.push(took);
        local.push(create_ready(&host_a, &format!("sb-bench-a-{i}")).await?);
    }
    let (origin, serving) = peers(&root.path().join("ca"), &host_a, &host_b).await?;
    let (mut wake_elsewhere, mut image_mib, mut wake_local) = (Vec::new(), Vec::new(), Vec::new());
    let mut wake_stored = Vec::new();
    for i in 0..runs {
        let id = format!("sb-move-{i}");
        let (took, mib) = wake_on_other(&host_a, &host_b, Some(&origin), &id).await?;
        eprintln!(
            "sandboxes: hibernated on host-a, exec-ready on host-b {took:.0} ms ({mib:.0} MiB, \
             read from host-a)"
        );
        wake_elsewhere.push(took);
        image_mib.push(mib);
        let id = format!("sb-move-stored-{i}");
        let (took, _) = wake_on_other(&host_a, &host_b, None, &id).await?;
        eprintln!("sandboxes: the same through the object store {took:.0} ms");
        wake_stored.push(took);
        wake_local.push(wake_here(&host_a, &format!("sb-wake-{i}")).await?);
    }
    let mut fork_elsewhere = Vec::new();
    for i in 0..runs {
        let took = fork_to_other(&host_a, &host_b, &origin, &format!("sb-parent-{i}")).await?;
        eprintln!("sandboxes: forked on host-a, the child exec-ready on host-b {took:.0} ms");
        fork_elsewhere.push(took);
    }
    let (mut snapshots, mut hibernate_durable) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let (run, durable) = snapshot_elsewhere(&host_a, &host_b, &format!("sb-snap-{i}")).await?;
        eprintln!(
            "snapshots: taken in {:.0} ms, stored in {:.0} ms, a create from it exec-ready on \
             host-b {:.0} ms; hibernated and durable in {durable:.0} ms",
            run.local, run.upload, run.create_elsewhere
        );
        snapshots.push(run);
        hibernate_durable.push(durable);
    }
    serving.abort();
    let accel = host_a.accel.to_string();
    host_a.agent.shutdown().await;
    host_b.agent.shutdown().await;
    Ok(Moved {
        upload_ms,
        elsewhere_first,
        local,
        wake_elsewhere,
        wake_stored,
        image_mib,
        wake_local,
        fork_elsewhere,
        snapshots,
        hibernate_durable,
        accel,
    })
}

/// A sandbox of `bench` running on `from` with 64 MiB of fresh random bytes in its memory (so
/// each run uploads new chunks), snapshotted, the snapshot stored, and a create from it on `to`
/// (fetched, restored) to its first exec answered; then the sandbox hibernated and its durable
/// copy stored: milliseconds of that last upload.
async fn snapshot_elsewhere(
    from: &StartedHost,
    to: &StartedHost,
    id: &str,
) -> anyhow::Result<(SnapshotRun, f64)> {
    from.host.create("bench", id).await?;
    let out = from
        .host
        .exec(
            id,
            ExecSpec {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "head -c 64M /dev/urandom > /dev/shm/fresh".into(),
                ],
                ..Default::default()
            },
        )
        .await?;
    ensure!(
        out.exit_code == 0,
        "filling memory exited {}",
        out.exit_code
    );
    let (snapshot, child) = (format!("{id}-snap"), format!("{id}-child"));
    let t = Instant::now();
    from.host.snapshot(id, &snapshot).await?;
    let local = ms(t.elapsed());
    let t = Instant::now();
    from.host.store_snapshot(&snapshot, WS).await?;
    let upload = ms(t.elapsed());
    let t = Instant::now();
    // From the object store (as when the snapshot's host is lost).
    to.host.fetch_snapshot(&snapshot, WS, None).await?;
    to.host.create_from_snapshot(&snapshot, &child).await?;
    exec_true(to, &child).await?;
    let create_elsewhere = ms(t.elapsed());
    to.host.destroy(&child).await?;
    to.host.delete_snapshot(&snapshot).await?;
    from.host.delete_snapshot(&snapshot).await?;
    from.host.hibernate(id).await?;
    let t = Instant::now();
    let tag = from.host.store_durable(id, WS).await?;
    let durable = ms(t.elapsed());
    from.host.forget_stored(id, WS, &tag).await?;
    from.host.destroy(id).await?;
    Ok((
        SnapshotRun {
            local,
            upload,
            create_elsewhere,
        },
        durable,
    ))
}

/// The workspace the moved sandboxes' images are stored under.
const WS: &str = "bench";

/// `exec true` in `id` on `host`, which must answer 0.
async fn exec_true(host: &StartedHost, id: &str) -> anyhow::Result<()> {
    let out = host
        .host
        .exec(
            id,
            ExecSpec {
                argv: vec!["true".into()],
                ..Default::default()
            },
        )
        .await?;
    ensure!(out.exit_code == 0, "true exited {}", out.exit_code);
    Ok(())
}

/// A sandbox of `bench` created and hibernated on `from`, then timed from its move's start to
/// its first exec answered on `to`; with the image's size in MiB. The move as `migrate` makes
/// it: `to` reads the image from `from`'s agent at `origin` when given, else `from` stores it
/// in the object store and `to` fetches it from there (the fallback).
async fn wake_on_other(
    from: &StartedHost,
    to: &StartedHost,
    origin: Option<&Origin>,
    id: &str,
) -> anyhow::Result<(f64, f64)> {
    from.host.create("bench", id).await?;
    exec_true(from, id).await?;
    let hibernated = from.host.hibernate(id).await?;
    let t = Instant::now();
    let tag = match origin {
        Some(origin) => {
            let tag = from.host.leave(id).await?;
            to.host.adopt_from(id, WS, origin).await?;
            tag
        }
        None => {
            let tag = from.host.store_hibernated(id, WS).await?;
            to.host.adopt_stored(id, WS, &tag).await?;
            tag
        }
    };
    exec_true(to, id).await?;
    let took = ms(t.elapsed());
    from.host.destroy(id).await?;
    to.host.forget_stored(id, WS, &tag).await?;
    to.host.destroy(id).await?;
    Ok((took, hibernated.image_bytes as f64 / (1u64 << 20) as f64))
}

/// A sandbox of `bench` running on `from`, forked to a child on `to` as a fork with `spread`
/// makes it (the parent's snapshot taken, its upload to the object store started in the
/// background, `to` reading the files from `from`'s agent at `origin` over the cluster's link,
/// the child restored there): milliseconds from the fork to the child's first exec answered on
/// `to`.
async fn fork_to_other(
    from: &StartedHost,
    to: &StartedHost,
    origin: &Origin,
    id: &str,
) -> anyhow::Result<f64> {
    from.host.create("bench", id).await?;
    exec_true(from, id).await?;
    let (snapshot, child) = (format!("{id}-snap"), format!("{id}-child"));
    let t = Instant::now();
    from.host.snapshot(id, &snapshot).await?;
    let upload = {
        let (host, snapshot) = (Arc::clone(&from.host), snapshot.clone());
        tokio::spawn(async move { host.store_snapshot(&snapshot, WS).await })
    };
    to.host.fetch_snapshot(&snapshot, WS, Some(origin)).await?;
    to.host.create_from_snapshot(&snapshot, &child).await?;
    exec_true(to, &child).await?;
    let took = ms(t.elapsed());
    upload.await.context("the upload's task")??;
    to.host.destroy(&child).await?;
    to.host.delete_snapshot(&snapshot).await?;
    from.host.destroy(id).await?;
    from.host.delete_snapshot(&snapshot).await?;
    Ok(took)
}

/// A sandbox of `bench` created and hibernated on `host`, timed from there to its first exec
/// answered.
async fn wake_here(host: &StartedHost, id: &str) -> anyhow::Result<f64> {
    host.host.create("bench", id).await?;
    exec_true(host, id).await?;
    host.host.hibernate(id).await?;
    let t = Instant::now();
    exec_true(host, id).await?;
    let took = ms(t.elapsed());
    host.host.destroy(id).await?;
    Ok(took)
}
