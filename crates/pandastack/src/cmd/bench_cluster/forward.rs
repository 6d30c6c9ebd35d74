//! The forward part: an exec in-process, through the agent link and through a replica's fleet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::ensure;
use pandastack_agent_link::RemoteHost;
use pandastack_cluster::{Identity, Role};
use pandastack_host::{ExecSpec, Host};
use pandastack_store::Store;

use super::{ClusterArgs, Pki, Task};
use crate::cmd::bench::ms;

/// Exec round trips (ms) in-process, through the agent link and through a replica's fleet.
pub(super) struct Forwarded {
    pub(super) local: Vec<f64>,
    pub(super) remote: Vec<f64>,
    pub(super) fleet: Vec<f64>,
    pub(super) accel: String,
}

/// Unmeasured execs on each side before the measured ones (the guest's exec path translated by
/// TCG, the link's connection warm).
const EXEC_WARM_UP: usize = 20;

/// `forward_exec_overhead_ms`: `true` exec'd in one running sandbox of a real host, in-process
/// (`LocalHost`, as the single-node server calls it), through the agent link (`RemoteHost` to
/// that host served on loopback mutual TLS) and through a replica's `Fleet` (the owner from
/// the store at `url`, then that link), in turn in blocks of ten. The host is `pandastack
/// server`'s (`local_host::start_host`, its defaults) on a scratch data directory, with no
/// warm pool and no sandbox networking (neither is on an exec's path; networking would claim
/// the host's network names).
pub(super) async fn forward_exec(
    a: &ClusterArgs,
    image: &Path,
    pki: &Pki,
    url: &str,
) -> anyhow::Result<Forwarded> {
    let root = super::scratch_root(a, "ps-bench-cluster-")?;
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
    let flags = super::host_flags(argv)?;
    let objects = crate::cmd::local_host::open_objects(&flags).await?;
    let started = crate::cmd::local_host::start_host(&flags, |_| false, objects).await?;
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
