//! The agent link: the host boundary ([`pandastack_host::Host`]) as a gRPC service, so a
//! control-plane replica can drive a host on another machine with the same calls it makes on
//! the host in its own process. A host's agent serves its `Arc<dyn Host>` with
//! [`AgentService`] ([`serve`]); a replica holds a [`RemoteHost`], which implements `Host`
//! over the link. Both ends speak mutual TLS with certificates from the cluster CA
//! (`pandastack-cluster`): the agent accepts only `server` peers, a replica accepts only the
//! `agent` whose name is the host id it dialled.
//!
//! ```text
//!   replica: control plane ──► RemoteHost ══ gRPC / mTLS ══► AgentService ──► Arc<dyn Host>
//! ```
//!
//! Every call is one RPC named after its trait method (`proto/agent.proto`); streams stay
//! streams (exec output, file bytes, sessions, ports). A failed call is a status whose details
//! carry the [`pandastack_host::HostError`] itself, rebuilt as the same variant on the other
//! side. This crate must not decide anything a host or the control plane decides: it carries
//! calls, it does not retry, place or remember them.
//!
//! The second service, `Membership` ([`membership`]), runs the other way: a host's agent
//! attends a replica on one stream (join, then heartbeats), and the replica renews its lease
//! in batches through [`Members`], which the control plane implements over the state store —
//! this crate names no store. Only there does it retry: an agent keeps attending some replica.
//!
//! The third, `Peer` ([`PeerLink`]), runs between agents on the agent's listener: a host
//! fetching a snapshot it lacks reads the files from the host that took it.
//!
//! [`run_agent`] runs both for one host (serving it, attending the replicas) until shutdown:
//! the entry point of `pandastack agent` and of the test kit's fake-driver agent.

mod agent;
mod client;
mod convert;
pub mod fence;
pub mod membership;
mod peers;
mod server;
mod status;
mod tls;

/// The generated protocol types and service stubs (package `pandastack.agent.v1`).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("pandastack.agent.v1");
}

pub use agent::{agent_host_id, run_agent, AgentOptions, ParseReplicaError, RunAgentError};
pub use client::{ConnectError, RemoteHost};
pub use membership::{
    serve_membership, Attendance, HostReport, Members, MembersError, MembershipService, Replica,
};
pub use peers::PeerLink;
pub use server::{serve, serve_counting, AgentService, InFlight, ServeError};
pub use status::{from_status, to_status, RemoteCause};
pub use tls::DialError;

/// Bytes per message of a file or port stream: well under gRPC's default message limit.
const CHUNK: usize = 1 << 20;

/// HTTP/2 receive windows of a link's client (a stream's, a connection's): HTTP/2's default of
/// 64 KiB would hold an image or file streamed from a peer to a few round trips per MiB.
const STREAM_WINDOW: u32 = 16 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;
