//! `pandastack server --cluster DIR`: the server as one control-plane replica of a cluster. It
//! runs no VMs: its host is the [`Fleet`] of the agents that attend any replica, reached over
//! the cluster's mutual TLS as this replica's identity; it answers agents' membership streams,
//! reaps hosts whose lease lapsed and reconciles hosts that join again. The state store must be
//! the cluster's PostgreSQL (`--state postgres://…`), shared by every replica.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use pandastack_cluster::{Identity, Role};
use pandastack_control::membership::{LeaseReaper, StoreMembers, LEASE, REAP_EVERY};
use pandastack_control::{AgentDialer, Fleet, JoinWatch};
use pandastack_store::Store;
use tokio::task::JoinHandle;

/// How often membership renews the leases of the agents attending this replica.
const RENEW_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The PostgreSQL advisory lock held by the one replica that runs the control plane's workers
/// (its bytes spell "PSWORKER").
const WORKERS_LOCK: i64 = 0x5053_574f_524b_4552;

/// How often the workers' replica checks its lock's session, and others try to take it.
const LEAD_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How often a replica looks for hosts that joined with a new epoch.
const REJOIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, clap::Args)]
pub struct ReplicaArgs {
    /// Run as one control-plane replica of a cluster, as the identity in DIR (a server bundle
    /// from `pandastack cluster cert --role server`): no VMs here, sandboxes placed on the
    /// agents that attend the replicas. Needs `--state postgres://…` (shared by every replica).
    #[arg(long, env = "PANDASTACK_CLUSTER", value_name = "DIR")]
    pub cluster: Option<PathBuf>,
    /// Where agents attend this replica (the membership service; with `--cluster`).
    #[arg(
        long,
        env = "PANDASTACK_MEMBERSHIP_LISTEN",
        default_value = "0.0.0.0:7444",
        value_name = "ADDR"
    )]
    pub membership_listen: SocketAddr,
}

/// A running replica's own tasks (membership, the lease reaper, the join watch).
pub struct Replica {
    pub name: String,
    pub fleet: Fleet,
    tasks: Vec<JoinHandle<()>>,
}

impl Replica {
    /// Runs `control`'s workers (reaper, schedules, builds, archivers, …) in whichever one
    /// replica holds the workers' advisory lock: this one takes it when free, starts the workers,
    /// and stops them as soon as the lock's session stops answering (another replica then takes
    /// over within about a second of the session's end).
    pub fn lead_workers(&mut self, store: Store, control: pandastack_control::ControlPlane) {
        self.tasks.push(tokio::spawn(async move {
            loop {
                match store.try_advisory_lock(WORKERS_LOCK).await {
                    Ok(Some(mut lock)) => {
                        tracing::info!("this replica runs the control plane's workers");
                        control.start();
                        loop {
                            tokio::time::sleep(LEAD_EVERY).await;
                            let checked =
                                tokio::time::timeout(LEAD_EVERY * 5, lock.check()).await;
                            match checked {
                                Ok(Ok(())) => {}
                                Ok(Err(e)) => {
                                    tracing::warn!(error = &e as &dyn std::error::Error, "the workers' lock session failed: stopping the workers");
                                    break;
                                }
                                Err(_) => {
                                    tracing::warn!("the workers' lock session does not answer: stopping the workers");
                                    break;
                                }
                            }
                        }
                        control.shutdown(false).await;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        "taking the workers' lock"
                    ),
                }
                tokio::time::sleep(LEAD_EVERY).await;
            }
        }));
    }

    /// Stops the replica's tasks (agents attend another replica).
    pub fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The replica identity in `args`, checked: `None` when the server is not a replica.
pub fn identity(
    args: &ReplicaArgs,
    state: Option<&str>,
    objects: Option<&str>,
) -> anyhow::Result<Option<Identity>> {
    let Some(dir) = &args.cluster else {
        return Ok(None);
    };
    if !state.is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://")) {
        anyhow::bail!(
            "--cluster needs the cluster's PostgreSQL as the state store (--state postgres://…): \
             every replica and the agents' membership share it"
        );
    }
    if objects.is_none() {
        anyhow::bail!(
            "--cluster needs --objects: every replica and agent shares one object store \
             (s3://bucket/prefix, or file:///a/directory every one of them sees) for deploy \
             uploads and logs, volume backups and databases' WAL; the default, a directory in \
             --data-dir, is this machine's alone"
        );
    }
    let identity =
        Identity::load(dir).with_context(|| format!("cluster identity in {}", dir.display()))?;
    if identity.peer().role != Role::Server {
        anyhow::bail!(
            "{} holds an {} certificate ({}); a replica needs a server one \
             (`pandastack cluster cert --role server`)",
            dir.display(),
            identity.peer().role.as_str(),
            identity.peer().name
        );
    }
    Ok(Some(identity))
}

/// Starts the replica's side of the cluster over `store`: the membership service on
/// `args.membership_listen`, the lease reaper and the join watch.
pub async fn start(
    args: &ReplicaArgs,
    identity: Identity,
    store: &Store,
) -> anyhow::Result<Replica> {
    let name = identity.peer().name.clone();
    let listener = tokio::net::TcpListener::bind(args.membership_listen)
        .await
        .with_context(|| format!("membership listen on {}", args.membership_listen))?;
    let fleet = Fleet::new(store.clone(), Arc::new(AgentDialer::new(identity.clone())));
    let members = Arc::new(StoreMembers::new(store.clone()));
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(async move {
        if let Err(e) =
            pandastack_agent_link::serve_membership(&identity, listener, members, RENEW_EVERY).await
        {
            tracing::error!(
                error = &e as &dyn std::error::Error,
                "membership service stopped"
            );
        }
    }));
    tasks.push(tokio::spawn(
        LeaseReaper::new(store.clone(), LEASE).run(REAP_EVERY, pandastack_store::now_ms),
    ));
    tasks.push(tokio::spawn(
        JoinWatch::new(store.clone(), fleet.clone()).run(REJOIN_EVERY),
    ));
    tracing::info!(
        replica = %name,
        membership = %args.membership_listen,
        "control-plane replica: agents attend here"
    );
    Ok(Replica { name, fleet, tasks })
}
