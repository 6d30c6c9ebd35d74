//! Running sandboxes of a lost host restored elsewhere (#39, `on_host_loss: "restore"`).
//!
//! A sandbox created with `on_host_loss: "restore"` that its host's death made `lost` is
//! restored on another host by the replica running the workers, with its id, metadata, access
//! token and preview URL:
//!
//! ```text
//!   lost, host dead ─► choose a host ─► take the row (fenced: lost on the dead host) ─► starting
//!     checkpoint? ─► the host fetches the snapshot from the object store ─► restore from it
//!     none ────────► create from its template
//!   ─► running;   any failure ─► the row is lost on the dead host again (tried at the next pass)
//! ```
//!
//! The **checkpoint** is the newest snapshot of the sandbox whose files are durable in the
//! object store (`SandboxRepo::set_checkpoint`): one a user took (recorded when its upload
//! ends), or one the platform took (an app's VM right after its health check). A memory image
//! restores only on a host with the compatibility key of the host it was taken on.
//!
//! Two copies never run at once: the row moves only while the old host is `dead`, and that host
//! is fenced — an isolated agent pauses its restorable VMs once its lease may have lapsed
//! (`pandastack_agent::self_fence`), and when it joins again the VMs no row names there are
//! destroyed before anything else.

use std::time::{Duration, Instant};

use pandastack_host::{HostError, VmView};
use pandastack_store::{now_ms, Demand, SandboxRow, SandboxState, StoreError};

use super::{ControlError, Sandboxes};
use crate::Fleet;

/// The id of the checkpoint the platform takes of sandbox `id` ([`Sandboxes::checkpoint`]).
pub(crate) fn platform_checkpoint(id: &str) -> String {
    format!("cp-{id}")
}

/// How often the workers look for sandboxes to restore.
pub(crate) const RESTORE_EVERY: Duration = Duration::from_secs(1);
/// Restores started per pass.
const PER_PASS: u32 = 16;

impl Sandboxes {
    /// The workers' restorer: every [`RESTORE_EVERY`], [`Self::restore_lost`]. Nothing on a
    /// single host.
    pub async fn restorer(self) {
        let mut tick = tokio::time::interval(RESTORE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut said = std::collections::HashSet::new();
        loop {
            tick.tick().await;
            if let Err(e) = self.restore_lost_saying(&mut said).await {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "restorer: cannot read the sandboxes to restore"
                );
            }
        }
    }

    /// One pass of the restorer: each sandbox to restore (lost on a dead host, created with
    /// `on_host_loss: "restore"`) restored on another host, one at a time. How many were.
    pub async fn restore_lost(&self) -> Result<usize, ControlError> {
        self.restore_lost_saying(&mut std::collections::HashSet::new())
            .await
    }

    /// [`Self::restore_lost`], a sandbox's failure logged as a warning once (in `said`; again
    /// after it was restored) and at debug level after.
    async fn restore_lost_saying(
        &self,
        said: &mut std::collections::HashSet<String>,
    ) -> Result<usize, ControlError> {
        let Some(fleet) = self.fleet.get().cloned() else {
            return Ok(0);
        };
        let mut restored = 0;
        for (row, checkpoint) in self.store.sandboxes().to_restore(PER_PASS).await? {
            let id = row.id.clone();
            match self.restore(&fleet, row, checkpoint).await {
                Ok(Some(_)) => {
                    restored += 1;
                    said.remove(&id);
                }
                Ok(None) => {}
                Err(e) if said.insert(id.clone()) => tracing::warn!(
                    sandbox = %id,
                    error = &e as &dyn std::error::Error,
                    "restorer: a lost sandbox stays lost for now (tried again every second)"
                ),
                Err(e) => tracing::debug!(
                    sandbox = %id,
                    error = &e as &dyn std::error::Error,
                    "restorer: a lost sandbox stays lost for now"
                ),
            }
        }
        Ok(restored)
    }

    /// Restores lost sandbox `row` on another host, from `checkpoint` if it names one:
    /// `Ok(None)` when another replica took it first.
    async fn restore(
        &self,
        fleet: &Fleet,
        row: SandboxRow,
        checkpoint: Option<String>,
    ) -> Result<Option<SandboxRow>, ControlError> {
        let started = Instant::now();
        let dead = row.host_id.clone();
        // A snapshot's memory image restores only on the compatibility key of the host it was
        // taken on: its row's host (a user's snapshot), else the sandbox's (the platform's).
        let key = match &checkpoint {
            Some(cp) => {
                let taken_on = self.store.hosts().owner_of(cp).await?;
                let taken_on = taken_on.unwrap_or_else(|| dead.clone());
                self.store.hosts().get(&taken_on).await?.compat_key
            }
            None => None,
        };
        let exclude = [dead.clone()];
        let demand = Demand {
            memory_mib: row.memory_mib,
            template: checkpoint.is_none().then_some(row.template.as_str()),
            compat_key: key.as_deref(),
            host: None,
            exclude: &exclude,
            now_ms: now_ms(),
        };
        let dest = self.store.sandboxes().choose_host(&demand).await?.host_id;
        if !self
            .store
            .sandboxes()
            .take_lost(&row.id, &dead, &dest)
            .await?
        {
            return Ok(None);
        }
        fleet.moved(&row.id);
        let mut taken = row.clone();
        taken.host_id = dest.clone();
        taken.state = SandboxState::Starting;
        let made = self.restored_vm(fleet, &taken, checkpoint.as_deref()).await;
        let view = match made {
            Ok(view) => view,
            Err(e) => {
                match self
                    .store
                    .sandboxes()
                    .give_back_lost(&row.id, &dead, &dest)
                    .await
                {
                    Ok(_) => fleet.moved(&row.id),
                    Err(se) => tracing::warn!(
                        sandbox = %row.id,
                        error = &se as &dyn std::error::Error,
                        "restorer: the failed restore's row stays starting"
                    ),
                }
                return Err(e.into());
            }
        };
        let done = match self.finish(taken, &view).await {
            Ok(done) => done,
            // Deleted while it was restored: its new VM goes too.
            Err(ControlError::Store(StoreError::NotFound)) => {
                if let Ok(h) = fleet.host(&dest).await {
                    if let Err(e) = h.destroy(&row.id).await {
                        tracing::warn!(sandbox = %row.id, error = &e as &dyn std::error::Error, "restorer: a deleted sandbox's VM stays");
                    }
                }
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        tracing::info!(
            sandbox = %row.id,
            from = %dead,
            to = %dest,
            checkpoint = checkpoint.as_deref().unwrap_or("none: its template"),
            took_ms = started.elapsed().as_secs_f64() * 1e3,
            "lost sandbox restored on another host"
        );
        Ok(Some(done))
    }

    /// The VM of `row` (taken for its new host) made there: from `checkpoint`, fetched from the
    /// object store first, else from its template. A VM made but not recorded is destroyed.
    async fn restored_vm(
        &self,
        fleet: &Fleet,
        row: &SandboxRow,
        checkpoint: Option<&str>,
    ) -> Result<VmView, HostError> {
        let host = fleet.host(&row.host_id).await?;
        match checkpoint {
            Some(snap) => {
                // Its host is lost: from the object store.
                host.fetch_snapshot(snap, &row.workspace_id, None).await?;
                host.create_from_snapshot(snap, &row.id).await
            }
            None => {
                let disk = super::disk_request(row);
                if disk.is_empty() {
                    host.create(&row.template, &row.id).await
                } else {
                    host.create_with_disk(&row.template, &row.id, Vec::new(), disk)
                        .await
                }
            }
        }
    }

    /// The platform's checkpoint of running sandbox `row` (an app's VM once its server answers
    /// its health check), in a cluster: a snapshot of it on its host ([`platform_checkpoint`];
    /// the VM goes on running), uploaded to the object store in the background; once durable,
    /// the sandbox is restored from it if its host is lost (`on_host_loss` becomes `restore`).
    /// Returns once the local snapshot is taken; `Ok(false)` on a single host (nothing done).
    pub(crate) async fn checkpoint(&self, row: &SandboxRow) -> Result<bool, ControlError> {
        let Some(fleet) = self.fleet.get().cloned() else {
            return Ok(false);
        };
        let snap = platform_checkpoint(&row.id);
        let host = fleet.host(&row.host_id).await?;
        host.snapshot(&row.id, &snap).await?;
        let store = self.store.clone();
        let (id, ws, host_id) = (
            row.id.clone(),
            row.workspace_id.clone(),
            row.host_id.clone(),
        );
        tokio::spawn(async move {
            let started = Instant::now();
            if let Err(e) = host.store_snapshot(&snap, &ws).await {
                tracing::warn!(sandbox = %id, host = %host_id, error = &e as &dyn std::error::Error, "checkpoint not stored: the sandbox is not restored if its host is lost");
                return;
            }
            match store.sandboxes().set_platform_checkpoint(&id, &snap).await {
                Ok(true) => tracing::info!(
                    sandbox = %id,
                    host = %host_id,
                    took_ms = started.elapsed().as_secs_f64() * 1e3,
                    "checkpoint durable: restored from it if its host is lost"
                ),
                Ok(false) => fleet.delete_snapshot_everywhere(&snap).await,
                Err(e) => {
                    tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "checkpoint stored, but not recorded")
                }
            }
        });
        Ok(true)
    }

    /// After sandbox `row` was deleted: the checkpoint the platform took of it, if any, goes
    /// from every live host and the object store.
    pub(super) async fn drop_platform_checkpoint(&self, row: &SandboxRow) {
        if let Some(fleet) = self.fleet.get() {
            if row.on_host_loss == pandastack_store::OnHostLoss::Restore {
                fleet
                    .delete_snapshot_everywhere(&platform_checkpoint(&row.id))
                    .await;
            }
        }
    }
}

impl Sandboxes {
    /// In a cluster, snapshot `snap` the platform took on host `host_id` for workspace `ws`
    /// (a function version's bake: no snapshot row names its host) stored in the object store
    /// now, so any host can fetch it for a create (`launch` does). `Ok(false)` on a single host.
    pub(crate) async fn store_platform_snapshot(
        &self,
        host_id: &str,
        snap: &str,
        ws: &str,
    ) -> Result<bool, ControlError> {
        let Some(fleet) = self.fleet.get() else {
            return Ok(false);
        };
        fleet.host(host_id).await?.store_snapshot(snap, ws).await?;
        Ok(true)
    }

    /// In a cluster, snapshot `snap` the platform took (no snapshot row) removed from every
    /// live host and the object store: `false` on a single host (nothing done).
    pub(crate) async fn drop_platform_snapshot(&self, snap: &str) -> bool {
        match self.fleet.get() {
            Some(fleet) => {
                fleet.delete_snapshot_everywhere(snap).await;
                true
            }
            None => false,
        }
    }
}
