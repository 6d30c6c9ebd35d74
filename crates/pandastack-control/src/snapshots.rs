//! The snapshot service: snapshots and forks of a sandbox, their rows and files in step.
//!
//! A fork's snapshot goes with its sandboxes unless the fork asked to keep it: its row is
//! [`SnapshotRow::auto_delete`], and the delete of the last sandbox whose row names it
//! (`snapshot_id`: the fork's children, or sandboxes created from it since) deletes its row and
//! files ([`release`]). "Last" is what the store says at that moment, so it holds across
//! restarts and concurrent deletes. Nothing else pins it: a hibernated child's image holds its
//! whole RAM and its disk is a reflink in its own directory, and a running child keeps the RAM
//! file it maps. Explicit snapshots and kept forks' are deleted only by
//! `DELETE /v1/snapshots/{id}` ([`Snapshots::delete`]).

use std::sync::Arc;

use pandastack_api_types::{ForkRequest, SandboxState};
use pandastack_host::{Host, SnapshotView};
use pandastack_store::{
    new_id, now_ms, Adding, Demand, SandboxRow, SnapshotRow, Store, StoreError,
};

use crate::{expiry, ControlError, Fleet, ResourceKind, Sandboxes};

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
    pub fn new(store: Store, host: Arc<dyn Host>, host_id: String, sandboxes: Sandboxes) -> Self {
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
    /// is written in any case (the check before the fork stands). `auto_delete`: see
    /// [`SnapshotRow::auto_delete`]. The snapshot is on `host_id`, the host of the sandbox it
    /// was taken of.
    async fn save(
        &self,
        host_id: &str,
        ws: &str,
        snap: &SnapshotView,
        quota: bool,
        auto_delete: bool,
    ) -> Result<SnapshotRow, ControlError> {
        let row = SnapshotRow {
            id: snap.id.clone(),
            workspace_id: ws.to_owned(),
            host_id: host_id.to_owned(),
            sandbox_id: snap.sandbox_id.clone(),
            template: snap.template.clone(),
            size_bytes: snap.size_bytes as i64,
            created_at: now_ms(),
            auto_delete,
            durable_at: None,
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
        let (row, snap) = self.take(row, snapshot_id, true, false).await?;
        self.keep_durable(&snap, true);
        let data =
            serde_json::json!({"sandbox_id": snap.sandbox_id, "size_bytes": snap.size_bytes});
        self.sandboxes
            .events()
            .emit(
                &snap.workspace_id,
                "snapshot.created",
                ResourceKind::Snapshot,
                &snap.id,
                data,
            )
            .await;
        Ok((row, snap))
    }

    /// Snapshot `snapshot_id` of the sandbox of `row` taken (within the workspace's snapshot
    /// quota; it keeps running) and saved as [`Self::save`] saves it (`quota`, `auto_delete`);
    /// returns the sandbox's row as the host now reports it, and the snapshot's.
    async fn take(
        &self,
        row: SandboxRow,
        snapshot_id: &str,
        quota: bool,
        auto_delete: bool,
    ) -> Result<(SandboxRow, SnapshotRow), ControlError> {
        self.store
            .quotas()
            .check(&row.workspace_id, Adding::Snapshot)
            .await?;
        let snap = self.host.snapshot(&row.id, snapshot_id).await?;
        let view = self.host.get(&row.id).await?;
        let (ws, host) = (row.workspace_id.clone(), row.host_id.clone());
        let row = self.sandboxes.record(row, &view).await?;
        let snap = self.save(&host, &ws, &snap, quota, auto_delete).await?;
        Ok((row, snap))
    }

    /// In a cluster, after snapshot `snap` was taken: its files uploaded to the object store
    /// in the background (the snapshot call does not wait), and the row told when they are
    /// durable; from then on a create from it may run on another host even once its own host
    /// is lost (see `Sandboxes::launch`). `checkpoint`: it becomes its sandbox's checkpoint
    /// then (what the sandbox is restored from if its host is lost; a fork's snapshot, which
    /// goes with its children, does not). A failed upload is logged: the snapshot restores
    /// elsewhere only while its host is alive.
    fn keep_durable(&self, snap: &SnapshotRow, checkpoint: bool) {
        let Some(fleet) = self.sandboxes.fleet() else {
            return;
        };
        let (store, snap) = (self.store.clone(), snap.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let stored = async {
                fleet
                    .host(&snap.host_id)
                    .await?
                    .store_snapshot(&snap.id, &snap.workspace_id)
                    .await
            }
            .await;
            if let Err(e) = stored {
                tracing::warn!(
                    snapshot = %snap.id,
                    host = %snap.host_id,
                    error = &e as &dyn std::error::Error,
                    "snapshot not stored in the object store: it restores only on its host"
                );
                return;
            }
            match store.snapshots().set_durable(&snap.id, now_ms()).await {
                Ok(true) => {
                    tracing::info!(
                        snapshot = %snap.id,
                        host = %snap.host_id,
                        took_ms = started.elapsed().as_secs_f64() * 1e3,
                        "snapshot durable"
                    );
                    // What the sandbox is restored from if its host is lost (its newest).
                    if !checkpoint {
                        return;
                    }
                    if let Err(e) = store
                        .sandboxes()
                        .set_checkpoint(&snap.sandbox_id, &snap.id)
                        .await
                    {
                        tracing::warn!(snapshot = %snap.id, error = &e as &dyn std::error::Error, "snapshot durable, but not its sandbox's checkpoint");
                    }
                }
                // Deleted meanwhile: its delete removed the stored record, or does.
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    snapshot = %snap.id,
                    error = &e as &dyn std::error::Error,
                    "snapshot durable, but its row does not say so"
                ),
            }
        });
    }

    /// Forks the workspace's sandbox `id` as `req` asks: `count` children (against the
    /// workspace's create rate), each a copy of the parent's row with its own id, access token,
    /// creation time and expiry (the parent's TTL counted from now), and `metadata` when given.
    pub async fn fork(
        &self,
        ws: &str,
        id: &str,
        req: &ForkRequest,
    ) -> Result<Forked, ControlError> {
        let parent = self.sandboxes.get(ws, id).await?;
        let now = now_ms();
        self.store
            .keys()
            .take_creates(ws, i64::from(req.count), now)
            .await?;
        let snapshot_id = new_id("snap-");
        let children = (0..req.count)
            .map(|_| {
                let mut r = parent.clone();
                r.id = new_id("sb-");
                r.state = SandboxState::Starting;
                r.created_at = now;
                r.last_activity_at = now;
                r.expires_at = expiry(now, parent.ttl_seconds);
                r.snapshot_id = Some(snapshot_id.clone());
                r.parent_id = Some(parent.id.clone());
                // Its own secret: the parent's token does not open a child's ports.
                r.access_token = pandastack_store::new_token();
                if !req.metadata.is_empty() {
                    r.metadata = req.metadata.clone();
                }
                r
            })
            .collect();
        let cluster = self.sandboxes.fleet().is_some();
        let forked = if (cluster && req.spread) || self.no_room_beside(&parent, req.count).await? {
            self.fork_elsewhere(
                parent,
                &snapshot_id,
                children,
                req.keep_snapshot,
                req.spread,
            )
            .await?
        } else {
            self.fork_into(parent, &snapshot_id, children, req.keep_snapshot)
                .await?
        };
        let data = serde_json::json!({
            "snapshot_id": forked.snapshot.id,
            "children": forked.children.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        });
        self.sandboxes
            .events()
            .emit(
                ws,
                "sandbox.forked",
                ResourceKind::Sandbox,
                &forked.parent.id,
                data,
            )
            .await;
        Ok(forked)
    }

    /// In a cluster, whether the host of `parent` lacks the memory for `count` more of it (a
    /// fork's children then go to other hosts: [`Self::fork_elsewhere`]). Always `false` on a
    /// single host, where a fork that does not fit fails as the host says.
    async fn no_room_beside(&self, parent: &SandboxRow, count: u32) -> Result<bool, ControlError> {
        if self.sandboxes.fleet().is_none() {
            return Ok(false);
        }
        let demand = Demand {
            memory_mib: parent.memory_mib.saturating_mul(i64::from(count)),
            template: None,
            compat_key: None,
            host: Some(&parent.host_id),
            exclude: &[],
            now_ms: now_ms(),
        };
        match self.store.sandboxes().choose_host(&demand).await {
            Ok(_) => Ok(false),
            Err(StoreError::NoCapacity { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// A fork in a cluster whose children do not fit on the parent's host, or that asked to
    /// `spread`: the parent's snapshot is taken there (it keeps running) and uploaded to the
    /// object store in the background, and each child is created from it by placement
    /// (`Sandboxes::launch`: beside its parent while there is room, else on a host with the
    /// parent host's compatibility key, which reads the snapshot's files from the parent's
    /// host — not waiting for the upload — or, if that host stopped answering, from the object
    /// store). `spread`: each child
    /// avoids the parent's host and its siblings' while another host has room, then the
    /// parent's host only, then goes anywhere with room. All or nothing: a child that cannot be
    /// made takes the children made before it, and a snapshot that goes with its sandboxes
    /// goes too.
    async fn fork_elsewhere(
        &self,
        parent: SandboxRow,
        snapshot_id: &str,
        children: Vec<SandboxRow>,
        keep_snapshot: bool,
        spread: bool,
    ) -> Result<Forked, ControlError> {
        let started = std::time::Instant::now();
        let host = parent.host_id.clone();
        let (parent, snapshot) = self
            .take(parent, snapshot_id, false, !keep_snapshot)
            .await?;
        // Uploaded meanwhile: the children elsewhere read it from the parent's host.
        self.keep_durable(&snapshot, false);
        let mut made = Vec::with_capacity(children.len());
        let placed = async {
            let mut used = vec![host.clone()];
            for child in children {
                let r = self.place_child(child, &snapshot.id, spread, &used).await?;
                if !used.contains(&r.host_id) {
                    used.push(r.host_id.clone());
                }
                made.push(r);
            }
            Ok::<(), ControlError>(())
        }
        .await;
        if let Err(e) = placed {
            for r in &made {
                if let Err(d) = self.sandboxes.delete(r).await {
                    tracing::warn!(sandbox = %r.id, error = &d as &dyn std::error::Error, "a failed fork's child stays");
                }
            }
            if !keep_snapshot {
                release(
                    &self.store,
                    &*self.host,
                    self.sandboxes.fleet().as_ref(),
                    &snapshot.id,
                )
                .await;
            }
            return Err(e);
        }
        tracing::info!(sandbox = %parent.id, host = %host, children = made.len(), spread, took_ms = started.elapsed().as_millis() as u64, "fork: children placed from the parent's stored snapshot");
        Ok(Forked {
            parent,
            snapshot,
            children: made,
        })
    }

    /// Child `row` of a fork made from snapshot `snap` by placement; with `spread`
    /// avoiding the hosts in `used` (the parent's first, then its siblings'), then the parent's
    /// only, then none (see [`Self::fork_elsewhere`]).
    async fn place_child(
        &self,
        row: SandboxRow,
        snap: &str,
        spread: bool,
        used: &[String],
    ) -> Result<SandboxRow, ControlError> {
        let source = || crate::Source::Snapshot(snap.to_owned());
        if spread {
            for avoid in [used, &used[..1]] {
                match self
                    .sandboxes
                    .launch_avoiding(row.clone(), source(), avoid)
                    .await
                {
                    Err(ControlError::Store(StoreError::NoCapacity { .. })) => {}
                    r => return r,
                }
            }
        }
        self.sandboxes.launch(row, source()).await
    }

    /// A page of the workspace's snapshots, oldest first, after the `(created_at, id)` of the
    /// previous page's last.
    pub async fn list(
        &self,
        ws: &str,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        self.store.snapshots().list(ws, after, limit).await
    }

    /// Forks `parent` through snapshot `snapshot_id` into the sandboxes of `children` (rows in
    /// state `starting`). All or nothing: the children's rows go in first,
    /// within the workspace's limit in one transaction, and come out again if the fork fails.
    /// The snapshot is deleted with the last sandbox restored from it unless `keep_snapshot`
    /// (see the module docs); the children's rows must name it (`snapshot_id`).
    async fn fork_into(
        &self,
        parent: SandboxRow,
        snapshot_id: &str,
        children: Vec<SandboxRow>,
        keep_snapshot: bool,
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
        let (ws, host) = (parent.workspace_id.clone(), parent.host_id.clone());
        let parent = self.sandboxes.record(parent, &view).await?;
        let snapshot = self.save(&host, &ws, &snap, false, !keep_snapshot).await?;
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
        self.store.snapshots().get(ws, id).await?; // 404 for another workspace's
        self.store.snapshots().delete(ws, id).await?;
        // A sandbox it was the checkpoint of is restored from its template now.
        self.store.sandboxes().clear_checkpoint(id).await?;
        remove_files(&*self.host, self.sandboxes.fleet().as_ref(), id).await;
        Ok(())
    }

    /// Deletes the fork snapshots of this host that no sandbox uses any more (see [`release`]);
    /// at start, for those a crash left between a sandbox's delete and its snapshot's, or
    /// whose last sandbox's row start-up reconciliation removed. Returns their ids.
    pub async fn release_unused(&self) -> Result<Vec<String>, StoreError> {
        let mut released = Vec::new();
        for id in self.store.snapshots().unused_on_host(&self.host_id).await? {
            if release(
                &self.store,
                &*self.host,
                self.sandboxes.fleet().as_ref(),
                &id,
            )
            .await
            {
                released.push(id);
            }
        }
        Ok(released)
    }
}

/// Removes snapshot `id`'s files once its row is gone: from its host, or in a cluster
/// (`fleet`) from every live host, its own and those that fetched a copy for a create; a
/// failure is logged (the row is what makes a snapshot exist).
async fn remove_files(host: &dyn Host, fleet: Option<&Fleet>, id: &str) {
    if let Some(fleet) = fleet {
        fleet.delete_snapshot_everywhere(id).await;
    } else if let Err(e) = host.delete_snapshot(id).await {
        tracing::warn!(snapshot = %id, error = &e as &dyn std::error::Error, "snapshot files");
    }
}

/// Deletes snapshot `id` if it goes with its sandboxes ([`SnapshotRow::auto_delete`]) and no
/// sandbox row names it any more: the row in one conditional delete, so that of callers racing
/// (two last children deleted at once) exactly one deletes it, then its files as
/// [`Snapshots::delete`] removes them (from every live host in a cluster: `fleet`). Called
/// after a sandbox's row is deleted. Never fails its
/// caller, whose sandbox is gone either way: a store error is logged and the snapshot is left
/// to [`Snapshots::release_unused`] at the next start. Returns whether it was deleted.
pub(crate) async fn release(
    store: &Store,
    host: &dyn Host,
    fleet: Option<&Fleet>,
    id: &str,
) -> bool {
    match store.snapshots().delete_unused(id).await {
        Ok(true) => {
            remove_files(host, fleet, id).await;
            tracing::debug!(snapshot = %id, "fork snapshot deleted with its last sandbox");
            true
        }
        Ok(false) => false,
        Err(e) => {
            tracing::warn!(snapshot = %id, error = &e as &dyn std::error::Error, "release snapshot");
            false
        }
    }
}
