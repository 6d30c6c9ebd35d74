//! The agent's side: [`Attendance`] keeps the host attending one replica.
//!
//! ```text
//!   ┌─► dial replica i (TLS, peer must be `server` named as listed) ──► Attend ──► Join
//!   │     ◄── Joined { epoch }: publish the epoch; Heartbeat (capacity, templates) every second
//!   │     ◄── Fenced: epoch withdrawn; Join again on the same stream
//!   └── refused / unreachable / stream lost: next replica, after a backoff (0.1 s … 5 s)
//! ```
//!
//! Nothing here touches a sandbox: an agent that reaches no replica keeps its VMs running and
//! keeps trying. What it may no longer do is write as an epoch the store has fenced.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pandastack_cluster::{Identity, Role, TlsConfigError};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tonic::Status;

use super::{capacity_to_pb, join_to_pb, HostReport};
use crate::pb;
use crate::pb::membership_client::MembershipClient;
use crate::pb::replica_says::Says as Answer;
use crate::tls::dial_peer;

/// How often an attending agent sends a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A replica an agent may attend: its certificate's name (the TLS server name) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub name: String,
    pub addr: SocketAddr,
}

/// Why one attempt to attend a replica ended.
#[derive(Debug, thiserror::Error)]
pub enum AttendError {
    #[error("connecting to replica {name} at {addr}")]
    Connect {
        name: String,
        addr: SocketAddr,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("replica {name} refused the stream")]
    Refused {
        name: String,
        #[source]
        source: Status,
    },
    #[error("the stream to replica {name} broke")]
    Lost {
        name: String,
        #[source]
        source: Status,
    },
    #[error("replica {name} ended the stream")]
    Ended { name: String },
}

/// A host attending the control plane: see the module doc. [`Attendance::run`] never returns.
pub struct Attendance {
    config: Arc<rustls::ClientConfig>,
    replicas: Vec<Replica>,
    report: Arc<dyn Fn() -> HostReport + Send + Sync>,
    heartbeat: Duration,
    epoch: watch::Sender<Option<i64>>,
}

impl Attendance {
    /// Attends `replicas` (in turn, from the first) as `identity` (an agent's), saying what
    /// `report` returns: all of it at each join, its capacity and templates with each
    /// heartbeat.
    pub fn new(
        identity: &Identity,
        replicas: Vec<Replica>,
        report: impl Fn() -> HostReport + Send + Sync + 'static,
    ) -> Result<Attendance, TlsConfigError> {
        let config = pandastack_cluster::client_config(identity)?;
        Ok(Attendance {
            config: Arc::new(config),
            replicas,
            report: Arc::new(report),
            heartbeat: HEARTBEAT,
            epoch: watch::Sender::new(None),
        })
    }

    /// Heartbeats every `every` instead of [`HEARTBEAT`] (tests).
    pub fn heartbeat_every(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    /// The epoch the host joined with: `None` before the first join and while fenced. A stream
    /// lost keeps it (the lease may still run; the store fences a stale one anyway).
    pub fn epoch(&self) -> watch::Receiver<Option<i64>> {
        self.epoch.subscribe()
    }

    /// Attends until dropped: one replica at a time, the next one after a failure.
    pub async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        for replica in self.replicas.iter().cycle() {
            let mut joined = false;
            let e = self.attend(replica, &mut joined).await;
            if joined {
                backoff = MIN_BACKOFF;
            }
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                retry_in = ?backoff,
                "membership: not attending a replica"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        // No replica to attend: nothing to do but stay up.
        std::future::pending::<()>().await;
    }

    /// One stream to `replica`, until it ends; `joined` says whether a join was taken.
    async fn attend(&self, replica: &Replica, joined: &mut bool) -> AttendError {
        let name = replica.name.clone();
        let (config, addr, peer) = (Arc::clone(&self.config), replica.addr, name.clone());
        let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let (config, peer) = (Arc::clone(&config), peer.clone());
            async move { dial_peer(config, addr, Role::Server, peer).await }
        });
        // The URI is required by tonic but never resolved: the connector dials `addr`.
        let channel = match Endpoint::from_static("http://replica.pandastack")
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true)
            .connect_with_connector(connector)
            .await
        {
            Ok(c) => c,
            Err(source) => return AttendError::Connect { name, addr, source },
        };
        let (outbox, rx) = mpsc::channel(4);
        let join = || pb::AgentSays {
            says: Some(pb::agent_says::Says::Join(join_to_pb((self.report)()))),
        };
        if outbox.send(join()).await.is_err() {
            return AttendError::Ended { name };
        }
        let mut inbound = match MembershipClient::new(channel)
            .attend(ReceiverStream::new(rx))
            .await
        {
            Ok(r) => r.into_inner(),
            Err(source) => return AttendError::Refused { name, source },
        };
        let mut beat = tokio::time::interval(self.heartbeat);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.tick().await;
        // Joined, and not fenced since; with the epoch this stream joined with.
        let mut attending = false;
        let mut current = None;
        loop {
            tokio::select! {
                m = inbound.message() => match m {
                    Ok(Some(pb::ReplicaSays { says: Some(Answer::Joined(j)) })) => {
                        tracing::info!(replica = name, epoch = j.epoch, "membership: joined");
                        *joined = true;
                        attending = true;
                        current = Some(j.epoch);
                        self.epoch.send_replace(Some(j.epoch));
                    }
                    // A stale `Fenced` (the batch's and a heartbeat's, for an epoch already
                    // left behind) is ignored: one join per fencing.
                    Ok(Some(pb::ReplicaSays { says: Some(Answer::Fenced(f)) }))
                        if attending && current == Some(f.epoch) =>
                    {
                        tracing::warn!(replica = name, epoch = f.epoch, "membership: fenced; joining again");
                        attending = false;
                        self.epoch.send_if_modified(|e| {
                            let fenced = *e == Some(f.epoch);
                            if fenced {
                                *e = None;
                            }
                            fenced
                        });
                        if outbox.send(join()).await.is_err() {
                            return AttendError::Ended { name };
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return AttendError::Ended { name },
                    Err(source) if !*joined => return AttendError::Refused { name, source },
                    Err(source) => return AttendError::Lost { name, source },
                },
                _ = beat.tick(), if attending => {
                    let now = (self.report)();
                    let says = pb::AgentSays {
                        says: Some(pb::agent_says::Says::Heartbeat(pb::Heartbeat {
                            capacity: Some(capacity_to_pb(now.capacity)),
                            templates: now.templates,
                        })),
                    };
                    if outbox.send(says).await.is_err() {
                        return AttendError::Ended { name };
                    }
                }
            }
        }
    }
}
