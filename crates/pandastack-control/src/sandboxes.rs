//! The sandbox service: a sandbox's row and its VM kept in step. Handlers check the caller and
//! the request, build the row and call these; every state change is one row update.

use std::sync::Arc;

use pandastack_host::{Host, HostError, VmState, VmView};
use pandastack_store::{now_ms, Adding, MountClaim, SandboxRow, SandboxState, Store, StoreError};

use crate::row_state;

/// Why a sandbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
}

/// What a new sandbox starts from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A baked template (its name on the host).
    Template(String),
    /// A baked template, the sandbox's RAM a file of its own: snapshots of it restore by
    /// mapping instead of loading RAM ([`Host::create_with_memory_file`]).
    TemplateWithMemoryFile(String),
    /// A snapshot.
    Snapshot(String),
}

/// A lifecycle operation on a sandbox's VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Pause,
    Resume,
    Hibernate,
    Wake,
}

/// Sandboxes of one host, over the store and the host.
#[derive(Clone)]
pub struct Sandboxes {
    store: Store,
    host: Arc<dyn Host>,
}

impl Sandboxes {
    pub fn new(store: Store, host: Arc<dyn Host>) -> Self {
        Self { store, host }
    }

    /// Creates the sandbox of `row` (state `starting`, owned by this host) from `source`: the
    /// row goes in first, within its workspace's limit in one transaction — a crash mid-create
    /// leaves a row start-up reconciliation settles, never a VM nobody knows about — then the
    /// VM, then one update records it. A failed VM create removes the row.
    pub async fn create(
        &self,
        row: SandboxRow,
        source: Source,
    ) -> Result<SandboxRow, ControlError> {
        self.store
            .sandboxes()
            .insert_within_limit(std::slice::from_ref(&row))
            .await?;
        let disk = disk_request(&row);
        let created = match &source {
            Source::Template(t) if !disk.is_empty() => {
                self.host
                    .create_with_disk(t, &row.id, Vec::new(), disk)
                    .await
            }
            Source::Template(t) => self.host.create(t, &row.id).await,
            Source::TemplateWithMemoryFile(t) => {
                self.host.create_with_memory_file(t, &row.id).await
            }
            Source::Snapshot(s) => self.host.create_from_snapshot(s, &row.id).await,
        };
        match created {
            Ok(view) => self.finish(row, &view).await,
            Err(e) => {
                self.store.sandboxes().delete(&row.id).await?;
                Err(e.into())
            }
        }
    }

    /// Creates the sandbox of `row` from template `template` with volumes mounted: the row and
    /// its claims on the volumes go in first, in one transaction (a missing, busy or remote
    /// volume writes nothing and starts no VM), then the VM with the volumes mounted. A failed
    /// VM create removes the row and its claims.
    pub async fn create_with_volumes(
        &self,
        row: SandboxRow,
        template: &str,
        claims: &[MountClaim],
        volumes: &crate::Volumes,
    ) -> Result<SandboxRow, ControlError> {
        let claimed = self
            .store
            .sandboxes()
            .insert_with_volumes(&row, claims)
            .await?;
        let mounts = volumes.host_mounts(claimed).await;
        let disk = disk_request(&row);
        match self
            .host
            .create_with_disk(template, &row.id, mounts, disk)
            .await
        {
            Ok(view) => self.finish(row, &view).await,
            Err(e) => {
                self.store.sandboxes().delete(&row.id).await?;
                Err(e.into())
            }
        }
    }

    /// Records a finished create (shape, boot time, state) in one update.
    pub async fn finish(
        &self,
        mut row: SandboxRow,
        view: &VmView,
    ) -> Result<SandboxRow, ControlError> {
        row.template = view.template.clone();
        row.vcpus = i64::from(view.shape.vcpus);
        row.memory_mib = i64::from(view.shape.memory_mib);
        let disk = view
            .shape
            .disk
            .unwrap_or(pandastack_host::DiskLimits::UNLIMITED);
        row.disk_mbps = disk.mbps() as i64;
        row.disk_iops = disk.iops as i64;
        row.boot_ms = view.ready_ms as i64;
        row.state = row_state(view.state);
        self.store.sandboxes().finish_create(&row).await?;
        Ok(row)
    }

    /// Records the host's view of a sandbox after an operation (its state, if it changed) and
    /// the activity.
    pub async fn record(
        &self,
        mut row: SandboxRow,
        view: &VmView,
    ) -> Result<SandboxRow, ControlError> {
        let state = row_state(view.state);
        let now = now_ms();
        if view.state == VmState::Hibernated {
            self.store
                .sandboxes()
                .set_image_bytes(&row.id, view.image_bytes as i64)
                .await?;
        }
        if row.state != state {
            self.store
                .sandboxes()
                .set_state_touched(&row.id, state, now)
                .await?;
            row.state = state;
        } else {
            self.store.sandboxes().touch(&row.id, now).await?;
        }
        row.last_activity_at = now;
        Ok(row)
    }

    /// [`Self::lifecycle`] for a caller's request: a hibernation first checks the workspace's
    /// storage quotas (count of hibernated sandboxes, storage; see
    /// [`pandastack_store::Quotas`]). The platform's own hibernations (an app's idle VM) call
    /// [`Self::lifecycle`] and are never refused.
    pub async fn requested(&self, row: SandboxRow, verb: Verb) -> Result<SandboxRow, ControlError> {
        if verb == Verb::Hibernate && row.state != SandboxState::Hibernated {
            self.store
                .quotas()
                .check(&row.workspace_id, Adding::Hibernation)
                .await?;
        }
        self.lifecycle(row, verb).await
    }

    /// Runs `verb` on the sandbox's VM and records the result.
    pub async fn lifecycle(&self, row: SandboxRow, verb: Verb) -> Result<SandboxRow, ControlError> {
        let view = match verb {
            Verb::Pause => self.host.pause(&row.id).await?,
            Verb::Resume => self.host.resume(&row.id).await?,
            Verb::Hibernate => self.host.hibernate(&row.id).await?,
            Verb::Wake => self.host.wake(&row.id).await?,
        };
        self.record(row, &view).await
    }

    /// The sandbox ready for work inside it: woken if it was hibernated, the row saying so.
    pub async fn awake(&self, row: SandboxRow) -> Result<SandboxRow, ControlError> {
        let view = self.host.awake(&row.id).await?;
        self.record(row, &view).await
    }

    /// Stops the sandbox's VM, removes its files and its row. A VM the host does not have
    /// (already gone) is not an error. The snapshot it was restored from goes too if it was a
    /// fork's, not kept, and this was the last sandbox using it (see [`crate::Snapshots`]).
    pub async fn delete(&self, row: &SandboxRow) -> Result<(), ControlError> {
        match self.host.destroy(&row.id).await {
            Ok(()) | Err(HostError::SandboxNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.store.sandboxes().delete(&row.id).await?;
        if let Some(snapshot) = &row.snapshot_id {
            crate::snapshots::release(&self.store, &*self.host, snapshot).await;
        }
        Ok(())
    }
}

/// The disk limits a new sandbox's row asks for (its `disk_mbps` and `disk_iops` until its
/// create finishes; 0: not named).
fn disk_request(row: &SandboxRow) -> pandastack_host::DiskRequest {
    let named = |v: i64| u64::try_from(v).ok().filter(|&v| v > 0);
    pandastack_host::DiskRequest {
        mbps: named(row.disk_mbps),
        iops: named(row.disk_iops),
    }
}
