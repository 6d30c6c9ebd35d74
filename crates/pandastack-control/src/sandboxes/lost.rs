//! After a call into a sandbox failed: was its host lost?
//!
//! A call into a VM on an agent that was just killed fails at once (its link drops), but the
//! host is declared `dead` only when its lease has run out without a renewal (at most
//! [`crate::membership::LEASE`] later, then the reap). Work that wants to tell "the host is
//! gone" from "the call failed" — a schedule's run, which fails with `host_lost` or runs again
//! elsewhere — asks [`Sandboxes::lost_host`], which waits for that answer.

use std::time::Duration;

use pandastack_store::{now_ms, HostState, SandboxState, StoreError};

use super::Sandboxes;

/// How often the host's row is read while waiting.
const POLL: Duration = Duration::from_millis(250);
/// How long past the lease's end the reap may take before the host counts as lost anyway.
const REAP_GRACE_MS: i64 = 3_000;

impl Sandboxes {
    /// The id of sandbox `id`'s host when that host is lost: `dead` already, or its lease runs
    /// out without a renewal (waiting for that and the reap, which makes the sandbox `lost`, at
    /// most [`crate::membership::LEASE`] and a grace). `None` when the host renews its lease
    /// meanwhile (it is alive: the failure was the call's), when its lease neither lapses nor
    /// is renewed within that wait, when the sandbox or its host has no row, and for the
    /// in-process host of a single node, which is never lost.
    pub async fn lost_host(&self, id: &str) -> Result<Option<String>, StoreError> {
        let lease_max = crate::membership::LEASE.as_millis() as i64;
        let started = now_ms();
        let mut seen: Option<i64> = None;
        loop {
            let sandbox = match self.store.sandboxes().by_id(id).await {
                Ok(s) => s,
                Err(StoreError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
            let host = match self.store.hosts().get(&sandbox.host_id).await {
                Ok(h) => h,
                Err(StoreError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
            if host.address.is_none() || host.lease_until == 0 {
                return Ok(None);
            }
            if host.state == HostState::Dead || sandbox.state == SandboxState::Lost {
                return Ok(Some(host.id));
            }
            let first = *seen.get_or_insert(host.lease_until);
            if host.lease_until > first {
                return Ok(None); // renewed since the failure
            }
            let now = now_ms();
            if now > first + REAP_GRACE_MS {
                return Ok(Some(host.id)); // lapsed, even if no replica has reaped it yet
            }
            if now > started + lease_max + REAP_GRACE_MS {
                // Neither renewed nor lapsed within any lease this platform grants: not lost.
                return Ok(None);
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
