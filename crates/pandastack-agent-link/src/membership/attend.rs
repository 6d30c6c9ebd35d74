//! The agent's side: [`Attendance`] keeps the host attending one replica.
//!
//! ```text
//!   ┌─► dial replica i (TLS, peer must be `server` named as listed) ──► Attend ──► Join
//!   │     ◄── Joined { epoch }: publish the epoch; Heartbeat (capacity, templates) every second
//!   │     ◄── Fenced: epoch withdrawn; Join again on the same stream
//!   └── refused / unreachable / stream lost: next replica, after a backoff (0.1 s … 5 s)
//! ```
//!
//! Nothing here touches a sandbox: an agent that reaches no replica keeps trying, and says
//! through [`Attendance::lease`] until when its lease certainly runs — each heartbeat is
//! numbered, each `Renewed` names the newest heartbeat its renewal took, and the lease runs
//! for `lease_ms` from at least that heartbeat's sending — so the agent can pause its VMs
//! before its host may be declared dead (`crate::fence`). What it may no longer do is write as
//! an epoch the store has fenced.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Heartbeats remembered by their number and sending time, for the `Renewed`s to come.
const SENT_KEPT: usize = 64;

/// What an attending agent knows of its lease.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseView {
    /// The epoch it joined with: `None` before the first join and once fenced.
    pub epoch: Option<i64>,
    /// Until when, on this host's monotonic clock, the lease certainly runs: `lease_ms` after
    /// the sending of the newest join or heartbeat a renewal is known to have taken (the
    /// renewal came after it). `None`: no lease is known to run (before the first join, and
    /// once fenced).
    pub runs_until: Option<Instant>,
}

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
    lease: watch::Sender<LeaseView>,
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
            lease: watch::Sender::new(LeaseView::default()),
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

    /// What the host knows of its lease, as it learns it (see [`LeaseView`]).
    pub fn lease(&self) -> watch::Receiver<LeaseView> {
        self.lease.subscribe()
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
        // When the newest join went out, and the heartbeats since (number, when sent).
        let mut join_sent = Instant::now();
        let mut sent: VecDeque<(u64, Instant)> = VecDeque::new();
        let mut seq = 0u64;
        let mut lease_for = Duration::ZERO;
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
                        lease_for = Duration::from_millis(j.lease_ms);
                        self.lease.send_replace(LeaseView {
                            epoch: Some(j.epoch),
                            runs_until: Some(join_sent + lease_for),
                        });
                    }
                    Ok(Some(pb::ReplicaSays { says: Some(Answer::Renewed(r)) }))
                        if attending && current == Some(r.epoch) =>
                    {
                        while sent.front().is_some_and(|(n, _)| *n < r.seq) {
                            sent.pop_front();
                        }
                        if let Some((_, at)) = sent.front().filter(|(n, _)| *n == r.seq) {
                            let until = *at + lease_for;
                            self.lease.send_if_modified(|l| {
                                let later = l.epoch == Some(r.epoch)
                                    && l.runs_until.is_none_or(|u| u < until);
                                if later {
                                    l.runs_until = Some(until);
                                }
                                later
                            });
                        }
                    }
                    // A stale `Fenced` (the batch's and a heartbeat's, for an epoch already
                    // left behind) is ignored: one join per fencing.
                    Ok(Some(pb::ReplicaSays { says: Some(Answer::Fenced(f)) }))
                        if attending && current == Some(f.epoch) =>
                    {
                        tracing::warn!(replica = name, epoch = f.epoch, "membership: fenced; joining again");
                        attending = false;
                        // The store withdrew the epoch: the host may be declared dead.
                        self.lease.send_replace(LeaseView::default());
                        self.epoch.send_if_modified(|e| {
                            let fenced = *e == Some(f.epoch);
                            if fenced {
                                *e = None;
                            }
                            fenced
                        });
                        join_sent = Instant::now();
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
                    seq += 1;
                    let says = pb::AgentSays {
                        says: Some(pb::agent_says::Says::Heartbeat(pb::Heartbeat {
                            capacity: Some(capacity_to_pb(now.capacity)),
                            templates: now.templates,
                            seq,
                        })),
                    };
                    if sent.len() == SENT_KEPT {
                        sent.pop_front();
                    }
                    sent.push_back((seq, Instant::now()));
                    if outbox.send(says).await.is_err() {
                        return AttendError::Ended { name };
                    }
                }
            }
        }
    }
}
