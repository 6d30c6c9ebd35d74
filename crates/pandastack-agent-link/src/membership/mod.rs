//! Membership over the link: a host's agent attends one replica on one long-lived stream
//! (`Membership.Attend`), and the replica keeps the host's lease alive while it does.
//!
//! ```text
//!   agent: Attendance ══ Attend (gRPC / mTLS) ══► MembershipService ──► LeaseBatcher ──► Members
//!          Join, then Heartbeat every second        peer is agent `host_id`?   one renew per tick
//!          ◄── Joined { epoch } / Renewed / Fenced  (refused otherwise)        for every stream
//! ```
//!
//! The replica side ([`MembershipService`], [`serve_membership`]) holds no state of its own
//! beyond the open streams: what a join or a renewal means is the [`Members`] implementation's
//! (the control plane's, over the state store — this crate names no store). Heartbeats from
//! all streams are renewed together, one [`Members::renew`] call per tick; a host whose epoch
//! is no longer current is told [`pb::Fenced`](crate::pb::Fenced) and joins again. A heartbeat
//! whose capacity or templates differ from the host's last message is passed on too, all such
//! hosts in one [`Members::report`] call per tick. A replica that cannot reach the store keeps
//! every stream open, logs, and retries on the next tick: a store outage is not a reason to
//! drop agents.
//!
//! The agent side ([`Attendance`]) dials the replicas in turn until one takes its join, sends a
//! heartbeat with fresh capacity and templates every second, joins again when fenced or when
//! the stream is lost (the next replica, with backoff), and publishes its current epoch (a
//! `watch`) for the agent's fenced writes. It never stops or touches a sandbox because no
//! replica answers: it only keeps trying.

mod attend;
mod replica;

pub use attend::{AttendError, Attendance, LeaseView, Replica};
pub use replica::{serve_membership, BatchTick, LeaseBatcher, MembershipService};

use crate::pb;

/// What a host offers now; sent at join and with every heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    pub vcpus: i64,
    pub memory_mib: i64,
    pub disk_bytes: i64,
    /// How many more sandboxes it can start now (free network slots).
    pub free_slots: i64,
    pub creates_in_flight: i64,
    /// How many sandboxes it can run in all (its network slots); 0: not limited by slots.
    pub slots: i64,
}

/// What an agent says about its host when it joins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostReport {
    /// The host id; must be the name in the agent's certificate.
    pub host_id: String,
    /// The machine's hostname, for people.
    pub name: String,
    /// Where replicas reach the agent's `Agent` service (`host:port`).
    pub address: String,
    pub capacity: Capacity,
    /// The templates the host holds.
    pub templates: Vec<String>,
    /// The QEMU, guest kernel and CPU a snapshot needs to be restored on this host.
    pub compat_key: String,
}

/// A join taken: the host's new epoch and how long its lease runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    pub epoch: i64,
    pub lease_ms: u64,
}

/// What one [`Members::renew`] did with each `(host id, epoch)` it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    /// The leases renewed run until this (unix ms).
    pub lease_until: i64,
    pub renewed: Vec<(String, i64)>,
    /// Not current (reaped, joined again elsewhere, unknown): these agents must join again.
    pub fenced: Vec<(String, i64)>,
}

/// What a host's heartbeat says changed since its last message: all of its capacity and
/// templates now, under the epoch its stream joined with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostUpdate {
    pub host_id: String,
    pub epoch: i64,
    pub capacity: Capacity,
    /// The templates the host holds now (all of them).
    pub templates: Vec<String>,
}

/// The membership store could not be asked (unreachable, or it failed).
#[derive(Debug, thiserror::Error)]
#[error("membership store")]
pub struct MembersError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

impl MembersError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}

/// What a replica needs of membership: the control plane implements it over the state store.
#[async_trait::async_trait]
pub trait Members: Send + Sync + 'static {
    /// Host `report.host_id` joins: a new epoch and a lease.
    async fn join(&self, report: HostReport) -> Result<Joined, MembersError>;
    /// Renews the leases of these `(host id, epoch)` pairs, all in one call.
    async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError>;
    /// Records what these hosts say they have now, all in one call. An update whose epoch is
    /// not current any more is dropped (its host is fenced and told so by [`Members::renew`]);
    /// an error means the store could not be asked, and the replica asks again next tick. A
    /// membership that keeps no capacity may leave it as it is: this does nothing.
    async fn report(&self, reports: &[HostUpdate]) -> Result<(), MembersError> {
        let _ = reports;
        Ok(())
    }
}

fn capacity_to_pb(c: Capacity) -> pb::HostCapacity {
    pb::HostCapacity {
        vcpus: c.vcpus,
        memory_mib: c.memory_mib,
        disk_bytes: c.disk_bytes,
        free_slots: c.free_slots,
        creates_in_flight: c.creates_in_flight,
        slots: c.slots,
    }
}

fn capacity_from_pb(c: Option<pb::HostCapacity>) -> Capacity {
    let c = c.unwrap_or_default();
    Capacity {
        vcpus: c.vcpus,
        memory_mib: c.memory_mib,
        disk_bytes: c.disk_bytes,
        free_slots: c.free_slots,
        creates_in_flight: c.creates_in_flight,
        slots: c.slots,
    }
}

fn join_to_pb(r: HostReport) -> pb::Join {
    pb::Join {
        host_id: r.host_id,
        name: r.name,
        address: r.address,
        capacity: Some(capacity_to_pb(r.capacity)),
        templates: r.templates,
        compat_key: r.compat_key,
    }
}

fn join_from_pb(j: pb::Join) -> HostReport {
    HostReport {
        host_id: j.host_id,
        name: j.name,
        address: j.address,
        capacity: capacity_from_pb(j.capacity),
        templates: j.templates,
        compat_key: j.compat_key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_round_trips() {
        let r = HostReport {
            host_id: "host-a".into(),
            name: "a.example".into(),
            address: "10.0.0.1:7443".into(),
            capacity: Capacity {
                vcpus: 16,
                memory_mib: 65536,
                disk_bytes: 1 << 40,
                free_slots: 200,
                creates_in_flight: 3,
                slots: 250,
            },
            templates: vec!["base".into(), "python".into()],
            compat_key: "qemu-9.2/linux-6.12/x86-64-v3".into(),
        };
        assert_eq!(join_from_pb(join_to_pb(r.clone())), r);
        assert_eq!(capacity_from_pb(None), Capacity::default());
    }
}
