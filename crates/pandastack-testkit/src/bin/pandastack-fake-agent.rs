//! `pandastack-fake-agent`: a host's agent over the test kit's [`FakeDriver`] (each "VM" is the
//! real guest agent as a process on this machine), for fast cluster tests. It runs the same
//! [`run_agent`] as `pandastack agent` and takes its flags where they apply; what a real host
//! measures (memory, slots, the compatibility key) is given on the command line instead, and
//! `--template NAME` bakes a template at start (the fake bake takes milliseconds).
//!
//! Like the real agent it keeps every sandbox it finds in its data directory at start, and
//! leaves its VMs running when it exits (`kill -9` included: a test cleans them up with
//! [`pandastack_testkit::fake::kill_fakes_under`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use pandastack_agent::{AgentConfig, HostAgent, LocalHost};
use pandastack_agent_link::membership::Capacity;
use pandastack_agent_link::{agent_host_id, run_agent, AgentOptions, HostReport, Replica};
use pandastack_cluster::Identity;
use pandastack_host::{error_chain, Host, VmState};
use pandastack_runtime::{DataDir, Runtime, Shape};
use pandastack_testkit::fake::FakeDriver;

#[derive(Debug, Parser)]
#[command(
    name = "pandastack-fake-agent",
    about = "A host agent over the fake VM driver (tests)"
)]
struct Args {
    /// The agent's bundle (`pandastack cluster cert --role agent`); its name is the host id.
    #[arg(long, value_name = "DIR")]
    identity: PathBuf,
    /// Where replicas reach the agent service.
    #[arg(long, default_value = "0.0.0.0:7443")]
    listen: SocketAddr,
    /// `host:port` replicas dial (default: the address listened on, unless unspecified).
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,
    /// A replica to attend: its certificate name and membership address (repeatable).
    #[arg(long = "server", value_name = "NAME=ADDR", required = true, value_parser = replica)]
    servers: Vec<Replica>,
    /// Data directory (templates, sandboxes).
    #[arg(long)]
    data_dir: PathBuf,
    /// The guest agent binary each fake VM runs.
    #[arg(long, env = "PANDASTACK_GUEST_AGENT")]
    guest_agent: PathBuf,
    /// Memory the host reports, MiB.
    #[arg(long, default_value_t = 16384)]
    memory_mib: i64,
    /// Sandboxes the host can run at once (its network slots).
    #[arg(long, default_value_t = 64)]
    slots: i64,
    /// The compatibility key the host reports.
    #[arg(long, default_value = "fake")]
    compat_key: String,
    /// A template to bake at start unless baked already (repeatable).
    #[arg(long = "template", value_name = "NAME")]
    templates: Vec<String>,
    /// Heartbeat period, ms.
    #[arg(long, default_value_t = 1000)]
    heartbeat_ms: u64,
}

fn replica(s: &str) -> Result<Replica, String> {
    s.parse::<Replica>().map_err(|e| error_chain(&e))
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PANDASTACK_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: the async runtime: {}", error_chain(&e));
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(a: Args) -> Result<(), String> {
    let identity = Identity::load(&a.identity).map_err(because(format!(
        "the agent identity in {}",
        a.identity.display()
    )))?;
    let host_id = agent_host_id(&identity)
        .map_err(because("--identity"))?
        .to_owned();
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .map_err(because(format!("listen on {}", a.listen)))?;
    let bound = listener
        .local_addr()
        .map_err(because("the listener's address"))?;
    let advertise = match a.advertise.clone() {
        Some(s) => s,
        None if !bound.ip().is_unspecified() => bound.to_string(),
        None => return Err("--advertise: required when --listen is unspecified".into()),
    };
    let agent = start_host(&a).await?;
    let host: Arc<dyn Host> = Arc::new(LocalHost(Arc::clone(&agent)));
    let running = Arc::new(AtomicI64::new(0));
    tokio::spawn(count_running(Arc::clone(&host), Arc::clone(&running)));
    let name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| host_id.clone());
    let vcpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
    let (memory_mib, slots, compat_key) = (a.memory_mib, a.slots, a.compat_key.clone());
    let data_dir = a.data_dir.clone();
    let facts = move || HostReport {
        name: name.clone(),
        capacity: Capacity {
            vcpus,
            memory_mib,
            disk_bytes: free_bytes(&data_dir),
            free_slots: (slots - running.load(Ordering::Relaxed)).max(0),
            creates_in_flight: 0,
            slots,
        },
        templates: agent.runtime().baked_templates().unwrap_or_default(),
        compat_key: compat_key.clone(),
        ..HostReport::default()
    };
    let mut opts = AgentOptions::new(identity, listener, advertise, a.servers.clone());
    opts.heartbeat = Some(Duration::from_millis(a.heartbeat_ms.max(10)));
    run_agent(opts, host, facts, shutdown_signal())
        .await
        .map_err(because("the agent"))
}

/// An error as `what: ` and its whole chain.
fn because<E: std::error::Error + 'static>(
    what: impl std::fmt::Display,
) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {}", error_chain(&e))
}

/// The host agent over [`FakeDriver`], `--template`s baked, every sandbox found kept.
async fn start_host(a: &Args) -> Result<Arc<HostAgent<FakeDriver>>, String> {
    let data = DataDir::open(&a.data_dir).map_err(because("data dir"))?;
    // The fake reads no kernel and no image: any file will do for both.
    let image = a.data_dir.join("fake-image.ext4");
    if !image.is_file() {
        std::fs::write(&image, vec![0u8; 1 << 20]).map_err(because("the fake image"))?;
    }
    let rt = Runtime::new(FakeDriver::new(a.guest_agent.clone()), data, image.clone());
    for name in &a.templates {
        if rt.template(name).is_ok() {
            continue;
        }
        let shape = Shape {
            vcpus: 1,
            memory_mib: 64,
            disk: None,
        };
        rt.bake(name, &image, shape)
            .await
            .map_err(because(format!("bake template {name}")))?;
    }
    let specs = a.data_dir.join("no-specs");
    std::fs::create_dir_all(&specs).map_err(because("the templates dir"))?;
    let cfg = AgentConfig {
        templates_dir: specs,
        guest_agent: a.guest_agent.clone(),
        pool_size: 0,
        volume_slots: 0,
        objects: None,
    };
    let (agent, _) = HostAgent::start(rt, cfg, |_| true)
        .await
        .map_err(because("start the host agent"))?;
    Ok(Arc::new(agent))
}

/// Keeps `running` at the number of sandboxes with a VM (running or paused), every second.
async fn count_running(host: Arc<dyn Host>, running: Arc<AtomicI64>) {
    loop {
        let n = host
            .list()
            .await
            .iter()
            .filter(|v| matches!(v.state, VmState::Running | VmState::Paused))
            .count();
        running.store(n as i64, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Bytes free to an unprivileged user on `dir`'s file system (0 if it cannot be read).
fn free_bytes(dir: &Path) -> i64 {
    nix::sys::statvfs::statvfs(dir)
        .map(|s| (s.blocks_available() as i64).saturating_mul(s.fragment_size() as i64))
        .unwrap_or(0)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}
