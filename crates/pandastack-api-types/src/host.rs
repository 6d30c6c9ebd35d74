//! Hosts as an operator sees them (`/v1/hosts`, admin keys only): the machines that run
//! sandboxes, whether they take work, their leases and what they offer.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Whether a host takes work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HostState {
    /// Takes new sandboxes.
    Ready,
    /// Keeps what it runs and takes nothing new (`POST /v1/hosts/{id}/drain`).
    Draining,
    /// Its lease lapsed and a replica declared it dead; only its agent joining again brings it
    /// back. A dead host nothing lives on any more can be forgotten (`DELETE /v1/hosts/{id}`).
    Dead,
}

/// What a host offers, as its agent last reported it (all 0 until then; the single-node
/// server's in-process host reports none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HostCapacity {
    pub vcpus: u64,
    pub memory_mib: u64,
    pub disk_bytes: u64,
    /// How many more sandboxes it can start now.
    pub free_slots: u64,
    /// How many creates (and restores, forks) its agent has under way.
    pub creates_in_flight: u64,
    /// How many sandboxes it can run in all (its network slots); 0: not limited by slots.
    pub slots: u64,
}

/// A host: a machine that runs sandboxes.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Host {
    /// `host-…`.
    pub id: String,
    /// The machine's hostname, for people.
    pub name: String,
    /// Where replicas reach its agent; null for the single-node server's in-process host.
    pub address: Option<String>,
    pub state: HostState,
    /// Bumped by every join and every reap: an opaque, increasing number. A write its agent
    /// causes is applied only under the current epoch.
    pub epoch: u64,
    /// When its lease runs out unless renewed (RFC 3339; past for a host whose lease lapsed);
    /// null when it holds none (the single-node server's in-process host, never reaped).
    pub lease_expires_at: Option<String>,
    pub capacity: HostCapacity,
    /// The QEMU, guest kernel and CPU features a snapshot needs to be restored on it; null
    /// until its agent reports one.
    pub compat_key: Option<String>,
    /// The templates it holds (sorted), as its agent last reported them.
    pub templates: Vec<String>,
    /// Sandboxes on it (every state, every workspace).
    pub sandboxes: u64,
    /// RFC 3339.
    pub created_at: String,
    /// When it last joined (an agent's host) or started (the single-node server's host), RFC
    /// 3339; heartbeats move `lease_expires_at` instead.
    pub last_seen_at: String,
}
