//! The snapshot service: snapshots and forks of a sandbox, their rows and files in step.

use std::sync::Arc;

use pandastack_host::{Host, SnapshotView};
use pandastack_store::{now_ms, Adding, SandboxRow, SnapshotRow, Store, StoreError};

use crate::{ControlError, Sandboxes};

/// Snapshots of one host's sandboxes.
#[derive(Clone)]
pub struct Snapshots {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
    sandboxes: Sandboxes,
}

/// What a fork made.
#[derive(Debug, Clone)]
pub struct Forked {
    pub parent: SandboxRow,
    pub snapshot: SnapshotRow,
    pub children: Vec<SandboxRow>,
}

impl Snapshots {
    pub fn new(store: Store, host: Arc<dyn Host>, host_id: String) -> Self {
        let sandboxes = Sandboxes::new(store.clone(), Arc::clone(&host));
        Self {
            store,
            host,
            host_id,
            sandboxes,
        }
    }

    /// Records a snapshot the host took, in workspace `ws`; a row that cannot be written takes
    /// the snapshot's files with it. `quota`: the row is written only if the workspace still
    /// has room for it (its quotas may have filled meanwhile, see
    /// [`pandastack_store::Quotas`]); a fork's snapshot, which its running children came from,
    /// is written in any case (the check before the fork stands).
    async fn save(
        &self,
        ws: &str,
        snap: &SnapshotView,
        quota: bool,
    ) -> Result<SnapshotRow, ControlError> {
        let row = SnapshotRow {
            id: snap.id.clone(),
            workspace_id: ws.to_owned(),
            host_id: self.host_id.clone(),
            sandbox_id: snap.sandbox_id.clone(),
            template: snap.template.clone(),
            size_bytes: snap.size_bytes as i64,
            created_at: now_ms(),
        };
        let written = if quota {
            self.store.snapshots().insert_within_quota(&row).await
        } else {
            self.store.snapshots().insert(&row).await
        };
        if let Err(e) = written {
            let _ = self.host.delete_snapshot(&snap.id).await;
            return Err(e.into());
        }
        Ok(row)
    }

    /// Snapshots the sandbox of `row` as `snapshot_id` (it keeps running, or is woken first).
    pub async fn snapshot(
        &self,
        row: SandboxRow,
        snapshot_id: &str,
    ) -> Result<(SandboxRow, SnapshotRow), ControlError> {
        self.store
            .quotas()
            .check(&row.workspace_id, Adding::Snapshot)
            .await?;
        let snap = self.host.snapshot(&row.id, snapshot_id).await?;
        let view = self.host.get(&row.id).await?;
        let ws = row.workspace_id.clone();
        let row = self.sandboxes.record(row, &view).await?;
        let snap = self.save(&ws, &snap, true).await?;
        Ok((row, snap))
    }

    /// Forks `parent` through snapshot `snapshot_id` into the sandboxes of `children` (rows in
    /// state `starting`, built by the caller). All or nothing: the children's rows go in first,
    /// within the workspace's limit in one transaction, and come out again if the fork fails.
    pub async fn fork(
        &self,
        parent: SandboxRow,
        snapshot_id: &str,
        children: Vec<SandboxRow>,
    ) -> Result<Forked, ControlError> {
        self.store
            .quotas()
            .check(&parent.workspace_id, Adding::Snapshot)
            .await?;
        self.store
            .sandboxes()
            .insert_within_limit(&children)
            .await?;
        let ids: Vec<String> = children.iter().map(|r| r.id.clone()).collect();
        let (snap, views) = match self.host.fork(&parent.id, snapshot_id, &ids).await {
            Ok(f) => f,
            Err(e) => {
                for r in &children {
                    self.store.sandboxes().delete(&r.id).await?;
                }
                return Err(e.into());
            }
        };
        let view = self.host.get(&parent.id).await?;
        let ws = parent.workspace_id.clone();
        let parent = self.sandboxes.record(parent, &view).await?;
        let snapshot = self.save(&ws, &snap, false).await?;
        let mut made = Vec::with_capacity(children.len());
        for (r, v) in children.into_iter().zip(views.iter()) {
            made.push(self.sandboxes.finish(r, v).await?);
        }
        Ok(Forked {
            parent,
            snapshot,
            children: made,
        })
    }

    /// Deletes snapshot `id` of workspace `ws`: its row, then its files (a failure to remove
    /// the files is logged; the row is what makes it exist).
    pub async fn delete(&self, ws: &str, id: &str) -> Result<(), StoreError> {
        self.store.snapshots().delete(ws, id).await?;
        if let Err(e) = self.host.delete_snapshot(id).await {
            tracing::warn!(snapshot = %id, error = &e as &dyn std::error::Error, "snapshot files");
        }
        Ok(())
    }
}
