//! Hibernated sandboxes kept in case their host is lost (#39), and woken elsewhere once it is.
//!
//! In a cluster, each hibernation is followed by an upload, in the background, of the
//! sandbox's image to the object store (`Host::store_durable`: the same content-addressed
//! chunks a move uploads, so a second hibernation of a sandbox stores little that is new). The
//! row records the copy's tag and when it became durable, fenced so that a copy made stale by a
//! wake is never recorded; any change of the sandbox's state clears it. The sandbox stays on its
//! host and wakes there as before; a wake there drops the copy.
//!
//! When a call into a hibernated sandbox fails and its host's row says the host is dead (the
//! fleet answers `Unreachable`, or a link that broke before the fleet read the row), the
//! replica re-homes it: placement chooses a host with the dead
//! host's compatibility key, that host adopts the copy (hibernated), and the row moves, fenced
//! by the dead host and the copy's tag — then the call goes on there. A sandbox with no durable
//! copy (hibernated before the upload ended, or on a single host) cannot be re-homed: the call
//! answers that its host is unreachable, as before. The dead host's own copy is destroyed when
//! it joins again (no row names it there then).

use std::time::Instant;

use pandastack_store::{now_ms, Demand, HostState, SandboxRow, SandboxState};

use super::{ControlError, Sandboxes};

impl Sandboxes {
    /// After sandbox `row` hibernated on its host (its row says so, last touched at
    /// `hibernated_at`): stores a copy of its image for the host's loss in the background and
    /// records it on the row. Nothing on a single host, or for a sandbox this replica is
    /// moving (the move stores its own).
    pub(crate) fn keep_durable(&self, row: &SandboxRow, hibernated_at: i64) {
        let Some(fleet) = self.fleet.get().cloned() else {
            return;
        };
        if super::migrate::is_moving(&self.moving, &row.id) {
            return;
        }
        let store = self.store.clone();
        let (id, ws, host_id) = (
            row.id.clone(),
            row.workspace_id.clone(),
            row.host_id.clone(),
        );
        tokio::spawn(async move {
            let started = Instant::now();
            let host = match fleet.host(&host_id).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::debug!(sandbox = %id, error = &e as &dyn std::error::Error, "durable copy: host unreachable");
                    return;
                }
            };
            let tag = match host.store_durable(&id, &ws).await {
                Ok(tag) => tag,
                // Woken, moved or deleted meanwhile: nothing to keep.
                Err(e) => {
                    tracing::debug!(sandbox = %id, error = &e as &dyn std::error::Error, "durable copy given up");
                    return;
                }
            };
            let recorded = store
                .sandboxes()
                .set_durable(&id, &host_id, hibernated_at, &tag, now_ms())
                .await;
            match recorded {
                Ok(true) => tracing::info!(
                    sandbox = %id,
                    host = %host_id,
                    took_ms = started.elapsed().as_secs_f64() * 1e3,
                    "hibernated sandbox durable"
                ),
                Ok(false) | Err(_) => {
                    if let Err(e) = &recorded {
                        tracing::warn!(sandbox = %id, error = e as &dyn std::error::Error, "durable copy not recorded");
                    }
                    // Woken (and perhaps hibernated again) since: this copy is not the sandbox.
                    if let Err(e) = host.forget_stored(&id, &ws, &tag).await {
                        tracing::debug!(sandbox = %id, error = &e as &dyn std::error::Error, "a stale durable copy stays in the object store");
                    }
                }
            }
        });
    }

    /// After a call into `row` failed: the sandbox re-homed on another host if its host's row
    /// says it is dead (the call failed as the fleet found out: unreachable, or a link that
    /// broke) and the sandbox is hibernated with a durable copy — `Ok(Some(row))` with the
    /// row as it is now (re-homed by this call or by another). `Ok(None)` when it cannot be
    /// re-homed: the caller answers the call's error.
    pub(super) async fn rehomed(
        &self,
        row: &SandboxRow,
        started: Instant,
    ) -> Result<Option<SandboxRow>, ControlError> {
        let Some(fleet) = self.fleet.get().cloned() else {
            return Ok(None);
        };
        if row.state != SandboxState::Hibernated {
            return Ok(None);
        }
        let origin = self.store.hosts().get(&row.host_id).await?;
        if origin.state != HostState::Dead {
            return Ok(None);
        }
        let Some(copy) = self.store.sandboxes().durable_copy(&row.id).await? else {
            return Ok(None);
        };
        let Some(key) = origin.compat_key.as_deref() else {
            return Ok(None);
        };
        let Some(_moving) = super::migrate::Moving::start(&self.moving, &row.id) else {
            // Another call of this replica is re-homing it: follow that.
            return self.followed(row, started).await;
        };
        let began = Instant::now();
        let exclude = [row.host_id.clone()];
        let demand = Demand {
            memory_mib: row.memory_mib,
            template: None,
            compat_key: Some(key),
            host: None,
            exclude: &exclude,
            now_ms: now_ms(),
        };
        let dest = self.store.sandboxes().choose_host(&demand).await?.host_id;
        let target = fleet.host(&dest).await?;
        let (id, ws) = (row.id.as_str(), row.workspace_id.as_str());
        target.adopt_stored(id, ws, &copy.tag).await?;
        let moved = self
            .store
            .sandboxes()
            .rehome_hibernated(id, &row.host_id, &dest, &copy.tag)
            .await;
        if !matches!(moved, Ok(true)) {
            // Re-homed by another replica, deleted, or its host back: the row says where.
            if let Err(e) = target.destroy(id).await {
                tracing::warn!(sandbox = %id, host = %dest, error = &e as &dyn std::error::Error, "re-home given up: the adopted copy stays");
            }
            moved?;
            fleet.moved(id);
            return super::found(self.store.sandboxes().by_id(id).await, id).map(Some);
        }
        fleet.moved(id);
        // The adopted files are the sandbox now: the stored record goes (the chunk collector takes its bytes back).
        if let Err(e) = target.forget_stored(id, ws, &copy.tag).await {
            tracing::debug!(sandbox = %id, error = &e as &dyn std::error::Error, "re-homed: its durable copy's record stays");
        }
        tracing::info!(
            sandbox = %id,
            from = %row.host_id,
            to = %dest,
            durable_at_ms = copy.at_ms,
            took_ms = began.elapsed().as_secs_f64() * 1e3,
            "hibernated sandbox of a dead host re-homed"
        );
        let mut row = row.clone();
        row.host_id = dest;
        Ok(Some(row))
    }
}
