//! `pandastack agent`: one host of a cluster. It runs this machine's host runtime (the same as
//! a single-node server's, [`LocalHostArgs`]) and serves it to the control-plane replicas over
//! the cluster's mutual TLS, attending one of them (join, a heartbeat a second) with what this
//! host offers ([`super::agent_facts`]). It holds no database credentials: only its
//! certificate bundle.
//!
//! At start it keeps every sandbox it finds in its data directory (the control plane reconciles
//! the host once it joins); on exit (SIGTERM, ctrl-c) it stops its pools and leaves every
//! sandbox running, as the server does; when no replica answers it keeps serving and trying.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use pandastack_agent_link::{agent_host_id, run_agent, AgentOptions, PeerLink, Replica};
use pandastack_cluster::Identity;

use super::agent_facts::HostFacts;
use super::local_host::{open_objects, start_host, LocalHostArgs};

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// This host's certificate bundle: a directory from `pandastack cluster cert --role agent`
    /// (ca.pem, cert.pem, key.pem readable by its owner only). Its name is this host's id.
    #[arg(long, env = "PANDASTACK_IDENTITY", value_name = "DIR")]
    identity: PathBuf,
    /// Address the agent service listens on (replicas call this host's sandboxes there, over
    /// the cluster's mutual TLS).
    #[arg(
        long,
        env = "PANDASTACK_AGENT_LISTEN",
        default_value = "0.0.0.0:7443",
        value_name = "ADDR"
    )]
    listen: SocketAddr,
    /// Address of a listener serving only `GET /metrics` (this host's VM operations, pool,
    /// sampler and object-store traffic, as Prometheus text) without a key.
    #[arg(long, env = "PANDASTACK_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Where replicas reach the agent service, `host:port` (default: the listen address,
    /// unless it is unspecified such as 0.0.0.0: then this flag is needed).
    #[arg(long, env = "PANDASTACK_ADVERTISE", value_name = "HOST:PORT", value_parser = advertised)]
    advertise: Option<String>,
    /// A control-plane replica to attend: its certificate name and membership address (its
    /// `--membership-listen`), e.g. `cp-1=10.0.0.5:7444`. Repeat for each replica: they are
    /// tried in turn.
    #[arg(
        long = "server",
        env = "PANDASTACK_SERVERS",
        value_delimiter = ',',
        value_name = "NAME=ADDR",
        required = true,
        value_parser = replica
    )]
    servers: Vec<Replica>,
    /// Memory kept for this machine itself, MiB: the host reports its total memory less this.
    #[arg(long, env = "PANDASTACK_RESERVE_MEMORY_MIB", default_value_t = 1024)]
    reserve_memory_mib: u64,
    /// Sandboxes this host runs at once when it has no sandbox networking (with networking:
    /// the network pool's size).
    #[arg(long, env = "PANDASTACK_AGENT_MAX_SANDBOXES", default_value_t = 64)]
    max_sandboxes: u32,
    #[command(flatten)]
    host: LocalHostArgs,
}

fn replica(s: &str) -> Result<Replica, String> {
    s.parse::<Replica>()
        .map_err(|e| pandastack_host::error_chain(&e))
}

fn advertised(s: &str) -> Result<String, String> {
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(s.to_owned())
        }
        _ => Err(format!("`{s}`: expected HOST:PORT")),
    }
}

pub async fn run(a: AgentArgs) -> anyhow::Result<ExitCode> {
    // Everything that needs no VM is checked first, so a wrong flag fails in milliseconds.
    let identity = Identity::load(&a.identity).with_context(|| {
        format!(
            "--identity {}: the agent's bundle (from `pandastack cluster cert --role agent`)",
            a.identity.display()
        )
    })?;
    let host_id = agent_host_id(&identity)
        .with_context(|| format!("--identity {}", a.identity.display()))?
        .to_owned();
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("listen on {} (choose another with --listen)", a.listen))?;
    let bound = listener.local_addr().context("the listener's address")?;
    if let Some(addr) = a.metrics_listen {
        let metrics = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr} (metrics)"))?;
        tracing::info!(%addr, "metrics listener");
        tokio::spawn(
            async move { axum::serve(metrics, pandastack_api::metrics_router(None)).await },
        );
    }
    let advertise = match &a.advertise {
        Some(s) => s.clone(),
        None if !bound.ip().is_unspecified() => bound.to_string(),
        None => anyhow::bail!(
            "--advertise HOST:PORT is needed: --listen {} names no address replicas can dial",
            a.listen
        ),
    };

    if a.host.objects.is_none() {
        anyhow::bail!(
            "--objects is needed: an agent writes volume backups to the object store the \
             replicas share (s3://bucket/prefix, or file:///a/directory they all see)"
        );
    }
    let objects = open_objects(&a.host).await?;
    // No store here: every sandbox found is kept; the control plane reconciles after the join.
    let started = start_host(&a.host, |_| true, objects.clone()).await?;
    let facts = HostFacts::measure(
        &started,
        &a.host.data_dir,
        a.reserve_memory_mib,
        a.max_sandboxes,
    )
    .await?;
    // Templates move between hosts through the shared store (bakes uploaded, a missing one
    // fetched), keyed by what restores a memory image.
    started
        .agent
        .share_templates(objects, facts.compat_key(), &host_id);
    // A snapshot this host lacks is read from the agent that took it, over the cluster's TLS.
    let peers = PeerLink::new(&identity).context("the agent's TLS configuration for its peers")?;
    started.agent.reach_peers(Arc::new(peers));
    tokio::spawn(Arc::clone(&facts).count_running_forever());
    println!(
        "PandaStack agent {host_id} serving on {bound} (advertised as {advertise}; guests run \
         under {}), attending {}",
        started.accel,
        a.servers
            .iter()
            .map(|r| format!("{}={}", r.name, r.addr))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let opts = AgentOptions::new(identity, listener, advertise, a.servers.clone());
    let report = move || facts.report();
    run_agent(opts, started.host, report, super::server::shutdown_signal())
        .await
        .context("the agent")?;
    tracing::info!("shutting down: pools stopped, sandboxes left running");
    started.agent.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
