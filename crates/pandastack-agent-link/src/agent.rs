//! Running a host's agent: [`run_agent`] serves the host to replicas ([`serve_counting`]) and attends
//! one of them ([`Attendance`]) until told to stop. `pandastack agent` (real VMs) and the test
//! kit's fake-driver agent both start here, so they join and answer the same way.
//!
//! ```text
//!   run_agent ─┬─ serve(identity, listener, host)     replicas call the host's methods
//!              ├─ Attendance(identity, replicas, …)   join with facts(), heartbeat every second
//!              └─ shutdown                            ends both; the host's VMs keep running
//! ```
//!
//! The host id is the name in the agent's certificate, and the address is the one the agent
//! advertises: both are set here on every report, whatever `facts` says, so a host cannot
//! join as anything its certificate does not name. So is `creates_in_flight`: the creates,
//! restores and forks the service is running now.

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use pandastack_cluster::{Identity, Role, TlsConfigError};
use pandastack_host::Host;
use tokio::net::TcpListener;

use crate::fence::Fence;
use crate::{serve_counting, Attendance, HostReport, InFlight, Replica, ServeError};

/// How an agent runs: who it is, where replicas reach it, and which replicas it attends.
#[derive(Debug)]
pub struct AgentOptions {
    /// The agent's bundle (`pandastack cluster cert --role agent`); its name is the host id.
    pub identity: Identity,
    /// Where the `Agent` service accepts replicas.
    pub listener: TcpListener,
    /// `host:port` replicas dial to reach `listener` (reported at join).
    pub advertise: String,
    /// The replicas to attend, tried in turn from the first.
    pub replicas: Vec<Replica>,
    /// How often to send a heartbeat; `None`: the attendance's own (a second).
    pub heartbeat: Option<Duration>,
}

impl AgentOptions {
    /// Options with the default heartbeat.
    pub fn new(
        identity: Identity,
        listener: TcpListener,
        advertise: String,
        replicas: Vec<Replica>,
    ) -> Self {
        Self {
            identity,
            listener,
            advertise,
            replicas,
            heartbeat: None,
        }
    }
}

/// Why an agent could not start or stopped before it was told to.
#[derive(Debug, thiserror::Error)]
pub enum RunAgentError {
    #[error(
        "the certificate names {role} {name}, not an agent: issue one with \
         `pandastack cluster cert --role agent`"
    )]
    NotAnAgent { role: Role, name: String },
    #[error("no replica to attend: name at least one")]
    NoReplicas,
    #[error("the TLS configuration of the agent's attendance")]
    Tls(#[source] TlsConfigError),
    #[error("serving replicas")]
    Serve(#[source] ServeError),
}

/// The host id `identity` may join as: its name, if it is an agent's certificate.
pub fn agent_host_id(identity: &Identity) -> Result<&str, RunAgentError> {
    let peer = identity.peer();
    match peer.role {
        Role::Agent => Ok(&peer.name),
        role => Err(RunAgentError::NotAnAgent {
            role,
            name: peer.name.clone(),
        }),
    }
}

/// Runs the agent of `host` until `shutdown` completes (then `Ok`) or serving fails: the
/// [`serve`] loop for replicas' calls and an [`Attendance`] of `opts.replicas` saying what
/// `facts` returns (with the certificate's host id and `opts.advertise` as its address).
///
/// Nothing here stops a VM: when no replica answers the agent keeps serving and keeps trying,
/// and when it returns the host's sandboxes are left as they are (the caller decides what a
/// shutdown does to its own pools). It pauses them while its lease may have lapsed (and at
/// start, until it has joined): see [`crate::fence`].
pub async fn run_agent(
    opts: AgentOptions,
    host: Arc<dyn Host>,
    facts: impl Fn() -> HostReport + Send + Sync + 'static,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunAgentError> {
    let host_id = agent_host_id(&opts.identity)?.to_owned();
    if opts.replicas.is_empty() {
        return Err(RunAgentError::NoReplicas);
    }
    let listening = opts.listener.local_addr().ok();
    let advertise = opts.advertise.clone();
    let (id, address) = (host_id.clone(), advertise.clone());
    let in_flight = InFlight::default();
    let counted = in_flight.clone();
    let report = move || {
        let mut r = HostReport {
            host_id: id.clone(),
            address: address.clone(),
            ..facts()
        };
        r.capacity.creates_in_flight = counted.now();
        r
    };
    let mut attendance = Attendance::new(&opts.identity, opts.replicas.clone(), report)
        .map_err(RunAgentError::Tls)?;
    if let Some(every) = opts.heartbeat {
        attendance = attendance.heartbeat_every(every);
    }
    let replicas: Vec<String> = opts
        .replicas
        .iter()
        .map(|r| format!("{}={}", r.name, r.addr))
        .collect();
    tracing::info!(
        host = %host_id,
        listen = ?listening,
        advertise = %advertise,
        replicas = %replicas.join(","),
        "agent: serving replicas and attending"
    );
    // No lease yet: the VMs a restarted agent found are paused until it joins (see `fence`).
    let lease = attendance.lease();
    let mut fence = Fence::default();
    fence
        .check(&*host, *lease.borrow(), std::time::Instant::now())
        .await;
    let guard = tokio::spawn(crate::fence::guard(Arc::clone(&host), lease, fence));
    let _guard = AbortOnDrop(guard);
    tokio::select! {
        r = serve_counting(&opts.identity, opts.listener, host, in_flight) => {
            r.map_err(RunAgentError::Serve)?;
            // `serve` returns only with an error; stopping without one is still a stop.
            Ok(())
        }
        () = attendance.run() => Ok(()),
        () = shutdown => {
            tracing::info!(host = %host_id, "agent: stopping; its sandboxes keep running");
            Ok(())
        }
    }
}

/// Stops a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A `--server NAME=ADDR` value that is not one.
#[derive(Debug, thiserror::Error)]
pub enum ParseReplicaError {
    #[error("`{0}`: expected NAME=ADDR (a replica's certificate name and its membership address)")]
    Form(String),
    #[error("`{0}`: the replica's name")]
    Name(String, #[source] pandastack_cluster::NameError),
    #[error("`{0}`: resolving the address")]
    Resolve(String, #[source] std::io::Error),
    #[error("`{0}`: the address resolves to nothing")]
    NoAddress(String),
}

/// `NAME=ADDR`: a replica's certificate name and its membership address, `ip:port` or
/// `host:port` (resolved once, now; the first address is kept).
impl FromStr for Replica {
    type Err = ParseReplicaError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (name, addr) = s
            .split_once('=')
            .filter(|(n, a)| !n.is_empty() && !a.is_empty())
            .ok_or_else(|| ParseReplicaError::Form(s.into()))?;
        pandastack_cluster::check_name(name).map_err(|e| ParseReplicaError::Name(s.into(), e))?;
        let addr = match addr.parse::<SocketAddr>() {
            Ok(a) => a,
            Err(_) => addr
                .to_socket_addrs()
                .map_err(|e| ParseReplicaError::Resolve(s.into(), e))?
                .next()
                .ok_or_else(|| ParseReplicaError::NoAddress(s.into()))?,
        };
        Ok(Replica {
            name: name.into(),
            addr,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_argument_is_a_name_and_an_address() {
        let r: Replica = "cp-1=127.0.0.1:7444".parse().unwrap();
        assert_eq!(
            r,
            Replica {
                name: "cp-1".into(),
                addr: "127.0.0.1:7444".parse().unwrap()
            }
        );
        let r: Replica = "cp-2=localhost:7444".parse().unwrap();
        assert_eq!((r.name.as_str(), r.addr.port()), ("cp-2", 7444));
        for bad in [
            "cp-1",
            "=1.2.3.4:5",
            "cp-1=",
            "Bad_Name=1.2.3.4:5",
            "cp-1=1.2.3.4",
        ] {
            assert!(bad.parse::<Replica>().is_err(), "{bad}");
        }
    }
}
