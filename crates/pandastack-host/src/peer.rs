//! Bytes that go from one host to another directly: a host that must restore a snapshot it
//! lacks reads its files from the agent of the host that took it ([`Origin`]) while that host
//! is alive — without waiting for the upload to the object store, which runs meanwhile — and
//! from the object store otherwise; a hibernated sandbox moving to another host is read from
//! the host it leaves the same way.
//!
//! ```text
//!   destination agent ──Peers::send_snapshot──► origin agent ──Host::send_snapshot──► files
//!                     ◄── Header, Data, Data, …  (holes and all-zero pieces never sent)
//! ```

use bytes::Bytes;

use crate::{BoxStream, HostResult};

/// The agent of the host a snapshot was taken on (or a moving sandbox leaves), where another
/// host may read its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Its host id: the name its certificate must carry.
    pub host_id: String,
    /// `host:port` of its agent (as it advertised at join).
    pub address: String,
}

/// One message of an image's files (a snapshot's, a hibernated sandbox's) going from the host
/// that has them to one that lacks them ([`crate::Host::send_snapshot`],
/// [`crate::Host::send_hibernated`]): an [`ImagePiece::Header`] first, then data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePiece {
    /// What the image is (the sending agent's record of it, JSON, as it stores it in the
    /// object store) and each file with its length, in the order [`ImagePiece::Data`]
    /// names them.
    Header {
        record: Bytes,
        files: Vec<(String, u64)>,
    },
    /// `data` of file number `file` of the header at `offset`. Ranges no piece covers are
    /// zeros (holes).
    Data { file: u32, offset: u64, data: Bytes },
}

/// How a host's agent reaches the agents of other hosts (a cluster's agents: mutual TLS with
/// the cluster's certificates, the peer checked to be the host named).
#[async_trait::async_trait]
pub trait Peers: Send + Sync + 'static {
    /// Snapshot `snapshot_id`'s files as its origin sends them
    /// ([`crate::Host::send_snapshot`] there).
    async fn send_snapshot(
        &self,
        origin: &Origin,
        snapshot_id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>>;
    /// Hibernated sandbox `id`'s image, leaving `origin` ([`crate::Host::send_hibernated`]
    /// there).
    async fn send_hibernated(
        &self,
        origin: &Origin,
        id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>>;
}
