//! The volume service: volumes (rows, files on their host, the workspace's quota), volume
//! snapshots, backups to the object store (uploads are durable jobs run by [`Volumes::worker`])
//! and restores from them, and start-up reconciliation of volume rows with the host's files.
//!
//! Order of writes, so that a crash at any point leaves nothing a restart cannot settle:
//! a volume's row is written `creating` before its file and set `ready` after (start-up
//! removes `creating` rows with their files, and files without rows); a delete removes the row
//! first and then the file; a backup's row, its internal snapshot's row and its job are written
//! after the snapshot's file, and the snapshot is removed only once the upload has ended.

mod backups;

use std::sync::Arc;

use pandastack_api_types::{CreateVolumeRequest, VolumeAttachment};
use pandastack_host::{Host, HostError, VolumeHolder, VolumeMount};
use pandastack_objects::{Objects, ObjectsError};
use pandastack_store::{
    new_id, now_ms, Claimed, MountRow, SandboxState, Store, StoreError, VolumeRow,
    VolumeSnapshotRow, VolumeState,
};
use tokio::sync::Notify;

use crate::PlaceMode;

pub use backups::{BackupInfo, BACKUP_JOB_KIND};

/// Bytes in a GiB (volume sizes are whole GiB).
pub const GIB: u64 = 1 << 30;

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume {0} not found")]
    NotFound(String),
    #[error("volume snapshot {0} not found")]
    SnapshotNotFound(String),
    #[error("backup {0} not found")]
    BackupNotFound(String),
    #[error("volume {0} exists")]
    Exists(String),
    #[error("volume quota of {limit_gb} GiB for this workspace would be exceeded")]
    Quota { limit_gb: i64 },
    #[error("volume {volume} is mounted read-write by sandbox {sandbox}")]
    Busy { volume: String, sandbox: String },
    #[error("volume {volume} is {size_gb} GiB: it can only grow (asked for {asked_gb} GiB)")]
    Shrink {
        volume: String,
        size_gb: i64,
        asked_gb: i64,
    },
    #[error("volume {volume} is on host {host}, not this one")]
    Elsewhere { volume: String, host: String },
    #[error("backup {0} is not finished")]
    BackupNotDone(String),
    #[error(
        "volume {volume} is unavailable: its host {host} is dead; make a new volume from one of \
         its backups (POST /v1/volumes with from_backup; GET /v1/volumes/{volume}/backups lists \
         them), or wait for the host to come back"
    )]
    Unavailable { volume: String, host: String },
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("object store")]
    Objects(#[source] ObjectsError),
}

impl From<StoreError> for VolumeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LimitReached { limit } => VolumeError::Quota { limit_gb: limit },
            StoreError::MissingVolume(v) => VolumeError::NotFound(v),
            StoreError::VolumeBusy { volume, sandbox } => VolumeError::Busy { volume, sandbox },
            StoreError::VolumeElsewhere { volume, host } => VolumeError::Elsewhere { volume, host },
            e => VolumeError::Store(e),
        }
    }
}

/// A volume with its mounts.
#[derive(Debug, Clone)]
pub struct VolumeInfo {
    pub row: VolumeRow,
    pub mounts: Vec<VolumeAttachment>,
    /// Its host is dead (a cluster's host lost): nothing can reach its file.
    pub unavailable: bool,
}

impl VolumeInfo {
    /// The sandbox that has it mounted read-write.
    pub fn writer(&self) -> Option<&str> {
        self.mounts
            .iter()
            .find(|m| !m.read_only)
            .map(|m| m.sandbox_id.as_str())
    }
}

/// Where a new volume's content comes from.
enum Content {
    Empty,
    Snapshot(VolumeSnapshotRow),
    Backup(pandastack_objects::Manifest),
}

/// The sandbox a new volume is for, as placement needs it (a cluster).
pub(crate) struct Mounter<'a> {
    pub memory_mib: i64,
    pub template: Option<&'a str>,
}

impl Default for Mounter<'_> {
    fn default() -> Self {
        Self {
            memory_mib: DEFAULT_MOUNTER_MIB,
            template: None,
        }
    }
}

/// Volumes of one host, over the store, the host and the object store.
#[derive(Clone)]
pub struct Volumes {
    store: Store,
    host: Arc<dyn Host>,
    objects: Objects,
    host_id: String,
    place: PlaceMode,
    wake: Arc<Notify>,
}

/// How many hosts a volume create tries when hosts refuse it (a link down, a disk full).
const PLACE_TRIES: usize = 3;

/// The memory a volume's host must have room for when the sandbox that will mount it is not
/// known (a volume created through the API).
const DEFAULT_MOUNTER_MIB: i64 = 512;

impl Volumes {
    pub fn new(store: Store, host: Arc<dyn Host>, objects: Objects, host_id: String) -> Self {
        Self {
            store,
            host,
            objects,
            host_id,
            place: PlaceMode::ThisHost,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Where new volumes go: this host, or (a cluster) the host placement chooses.
    pub fn with_placement(mut self, place: PlaceMode) -> Self {
        self.place = place;
        self
    }

    /// The object store backups go to (managed databases archive their WAL there too).
    pub(crate) fn objects(&self) -> &Objects {
        &self.objects
    }

    async fn row(&self, ws: &str, name: &str) -> Result<VolumeRow, VolumeError> {
        match self.store.volumes().get(ws, name).await {
            Ok(v) if v.state == VolumeState::Ready => Ok(v),
            Ok(_) | Err(StoreError::NotFound) => Err(VolumeError::NotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    async fn info(&self, row: VolumeRow) -> Result<VolumeInfo, VolumeError> {
        let mounts = self
            .store
            .volumes()
            .mounts(&row.id)
            .await?
            .into_iter()
            .map(attachment)
            .collect();
        let unavailable = self.host_dead(&row).await?;
        Ok(VolumeInfo {
            row,
            mounts,
            unavailable,
        })
    }

    /// Whether volume `row`'s host is dead (its file cannot be reached).
    async fn host_dead(&self, row: &VolumeRow) -> Result<bool, VolumeError> {
        match self.store.hosts().get(&row.host_id).await {
            Ok(h) => Ok(h.state == pandastack_store::HostState::Dead),
            Err(StoreError::NotFound) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Volume `name` (ready), [`VolumeError::Unavailable`] if its host is dead.
    pub(crate) async fn reachable_row(
        &self,
        ws: &str,
        name: &str,
    ) -> Result<VolumeRow, VolumeError> {
        let row = self.row(ws, name).await?;
        if self.host_dead(&row).await? {
            return Err(VolumeError::Unavailable {
                volume: name.to_owned(),
                host: row.host_id,
            });
        }
        Ok(row)
    }

    /// Creates a volume: empty (`size_gb`), from a volume snapshot or from a backup (grown to
    /// `size_gb` when given and larger). The row is written first, within the quota.
    pub async fn create(
        &self,
        ws: &str,
        req: &CreateVolumeRequest,
    ) -> Result<VolumeInfo, VolumeError> {
        self.create_for(ws, req, &Mounter::default()).await
    }

    /// [`Self::create`] of a volume `mounter` will mount: in a cluster its host is placed so
    /// that sandbox fits there (a sandbox runs on its volumes' host); from a snapshot, on the
    /// snapshot's host.
    pub(crate) async fn create_for(
        &self,
        ws: &str,
        req: &CreateVolumeRequest,
        mounter: &Mounter<'_>,
    ) -> Result<VolumeInfo, VolumeError> {
        self.create_avoiding(ws, req, mounter, &[]).await
    }

    /// A copy of volume `row` as a new volume `name` of its workspace on another host of the
    /// cluster (placement chooses, never `row`'s host): a snapshot of it is uploaded to the
    /// object store as chunks (those stored already are skipped, zero chunks elided) and the
    /// new host makes the volume from them; the snapshot goes either way. For a volume nobody
    /// writes to (a drained database's, its VM removed first): later writes are not copied.
    pub(crate) async fn copy_elsewhere(
        &self,
        row: &VolumeRow,
        name: &str,
    ) -> Result<VolumeInfo, VolumeError> {
        let ws = row.workspace_id.as_str();
        let snap = self.take_snapshot(row, true).await?;
        let uploaded = self.host.upload_volume_snapshot(&snap.id, ws).await;
        if let Err(e) = self.host.delete_volume_snapshot(&snap.id).await {
            tracing::warn!(volume = %row.id, snapshot = %snap.id, error = &e as &dyn std::error::Error, "could not remove a copied volume's snapshot");
        }
        let up = uploaded?;
        tracing::info!(volume = %row.id, bytes_uploaded = up.bytes_uploaded, chunks = up.chunks, "volume uploaded to be copied to another host");
        let req = CreateVolumeRequest {
            name: name.to_owned(),
            size_gb: Some(row.size_gb as u32),
            ..Default::default()
        };
        let from = Content::Backup(up.manifest);
        self.place_and_make(
            ws,
            &req,
            &from,
            row.size_gb,
            &Mounter::default(),
            std::slice::from_ref(&row.host_id),
        )
        .await
    }

    /// [`Self::create_for`], placement never choosing the hosts in `avoid`.
    async fn create_avoiding(
        &self,
        ws: &str,
        req: &CreateVolumeRequest,
        mounter: &Mounter<'_>,
        avoid: &[String],
    ) -> Result<VolumeInfo, VolumeError> {
        let (from, source_gb) = if let Some(id) = &req.from_snapshot {
            let s = match self.store.volumes().snapshot(ws, id).await {
                Ok(s) => s,
                Err(StoreError::NotFound) => return Err(VolumeError::SnapshotNotFound(id.clone())),
                Err(e) => return Err(e.into()),
            };
            if self.place == PlaceMode::ThisHost && s.host_id != self.host_id {
                return Err(VolumeError::Elsewhere {
                    volume: id.clone(),
                    host: s.host_id,
                });
            }
            let gb = s.size_gb;
            (Content::Snapshot(s), gb)
        } else if let Some(id) = &req.from_backup {
            let (record, manifest) = self.done_backup(ws, id).await?;
            (Content::Backup(manifest), record.size_gb)
        } else {
            (Content::Empty, 0)
        };
        self.place_and_make(ws, req, &from, source_gb, mounter, avoid)
            .await
    }

    /// The row of new volume `req` (at least `source_gb`) written within the quota on this
    /// host, or in a cluster on the host placement chooses (not one in `avoid`), then its file
    /// made there from `from` (the next host tried when one refuses).
    async fn place_and_make(
        &self,
        ws: &str,
        req: &CreateVolumeRequest,
        from: &Content,
        source_gb: i64,
        mounter: &Mounter<'_>,
        avoid: &[String],
    ) -> Result<VolumeInfo, VolumeError> {
        let size_gb = i64::from(req.size_gb.unwrap_or(0)).max(source_gb);
        let row = VolumeRow {
            id: new_id("vol-"),
            workspace_id: ws.to_owned(),
            name: req.name.clone(),
            host_id: self.host_id.clone(),
            size_gb,
            state: VolumeState::Creating,
            source: req
                .from_snapshot
                .clone()
                .or_else(|| req.from_backup.clone()),
            created_at: now_ms(),
        };
        if self.place == PlaceMode::ThisHost {
            self.insert(&row, self.store.volumes().insert_within_quota(&row).await)?;
            return self.make(row, from).await;
        }
        let pinned = match from {
            Content::Snapshot(s) => Some(s.host_id.clone()),
            _ => None,
        };
        let mut refused: Vec<String> = Vec::new();
        loop {
            let mut row = row.clone();
            let exclude = [avoid, &refused].concat();
            let demand = pandastack_store::Demand {
                memory_mib: mounter.memory_mib,
                template: mounter.template,
                compat_key: None,
                host: pinned.as_deref(),
                exclude: &exclude,
                now_ms: now_ms(),
            };
            let placed = self
                .store
                .volumes()
                .insert_placed_within_quota(&mut row, &demand)
                .await;
            let placement = self.insert(&row, placed)?;
            tracing::info!(volume = %row.id, host = %placement.host_id, reason = %placement.reason, candidates = placement.candidates, "volume placed");
            let host = row.host_id.clone();
            match self.make(row, from).await {
                Err(VolumeError::Host(e))
                    if crate::sandboxes::refusal(&e)
                        && pinned.is_none()
                        && refused.len() + 1 < PLACE_TRIES =>
                {
                    tracing::warn!(host = %host, error = &e as &dyn std::error::Error, "placement: the host refused the volume; trying the next one");
                    refused.push(host);
                }
                r => return r,
            }
        }
    }

    /// The outcome of writing a new volume's row: a name taken is [`VolumeError::Exists`].
    fn insert<T>(&self, row: &VolumeRow, r: Result<T, StoreError>) -> Result<T, VolumeError> {
        match r {
            Ok(t) => Ok(t),
            Err(StoreError::Conflict) => Err(VolumeError::Exists(row.name.clone())),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the file of a volume whose row is written (on the host the row names); a failure
    /// removes the file and the row.
    async fn make(&self, row: VolumeRow, from: &Content) -> Result<VolumeInfo, VolumeError> {
        let bytes = row.size_gb as u64 * GIB;
        let made = match from {
            Content::Empty => self.host.create_volume(&row.id, bytes).await,
            Content::Snapshot(s) => self.host.volume_from_snapshot(&s.id, &row.id, bytes).await,
            Content::Backup(m) => {
                self.host
                    .volume_from_manifest(&row.workspace_id, m, &row.id, bytes)
                    .await
            }
        };
        if let Err(e) = made {
            if let Err(d) = self.host.delete_volume(&row.id).await {
                tracing::debug!(volume = %row.id, error = &d as &dyn std::error::Error, "removing a volume whose create failed");
            }
            self.store.volumes().delete(&row.id).await?;
            return Err(e.into());
        }
        self.store.volumes().set_ready(&row.id).await?;
        let mut row = row;
        row.state = VolumeState::Ready;
        Ok(VolumeInfo {
            row,
            mounts: Vec::new(),
            unavailable: false,
        })
    }

    pub async fn get(&self, ws: &str, name: &str) -> Result<VolumeInfo, VolumeError> {
        let row = self.row(ws, name).await?;
        self.info(row).await
    }

    /// A page of volumes by name (one more than `limit` when there are more).
    pub async fn list(
        &self,
        ws: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<VolumeInfo>, VolumeError> {
        let rows = self.store.volumes().list(ws, after, limit).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows.into_iter().filter(|r| r.state == VolumeState::Ready) {
            out.push(self.info(r).await?);
        }
        Ok(out)
    }

    /// Grows a volume no sandbox has mounted read-write (read-only mounts are of copies).
    pub async fn grow(
        &self,
        ws: &str,
        name: &str,
        size_gb: i64,
    ) -> Result<VolumeInfo, VolumeError> {
        let row = self.reachable_row(ws, name).await?;
        if size_gb < row.size_gb {
            return Err(VolumeError::Shrink {
                volume: name.into(),
                size_gb: row.size_gb,
                asked_gb: size_gb,
            });
        }
        if size_gb > row.size_gb {
            // The row first (within the quota, refused while mounted), then the file; a failed
            // grow puts the row back (the host leaves the file as it was).
            if let Some(m) = self.store.volumes().grow(&row, size_gb).await? {
                return Err(VolumeError::Busy {
                    volume: name.into(),
                    sandbox: m.sandbox_id,
                });
            }
            if let Err(e) = self.host.grow_volume(&row.id, size_gb as u64 * GIB).await {
                let _ = self.store.volumes().grow(&row, row.size_gb).await;
                return Err(e.into());
            }
        }
        self.get(ws, name).await
    }

    /// Deletes a volume and its snapshots (backups stay in the object store). Refused while a
    /// sandbox has it mounted read-write. A volume whose host is dead loses only its rows (its
    /// files are that host's).
    pub async fn delete(&self, ws: &str, name: &str) -> Result<(), VolumeError> {
        let row = self.row(ws, name).await?;
        let dead = self.host_dead(&row).await?;
        let snaps = match self.store.volumes().delete_unless_mounted(&row).await? {
            Ok(snaps) => snaps,
            Err(m) => {
                return Err(VolumeError::Busy {
                    volume: name.into(),
                    sandbox: m.sandbox_id,
                })
            }
        };
        if dead {
            tracing::info!(volume = %row.id, host = %row.host_id, "deleted a volume of a dead host: its files stay there");
            return Ok(());
        }
        self.host.delete_volume(&row.id).await?;
        for s in snaps {
            self.host.delete_volume_snapshot(&s).await?;
        }
        Ok(())
    }

    /// The running sandbox that has volume `row` mounted read-write, to freeze for a copy.
    async fn holder(&self, row: &VolumeRow) -> Result<Option<VolumeHolder>, VolumeError> {
        let mounts = self.store.volumes().mounts(&row.id).await?;
        Ok(self
            .running_holder(&row.workspace_id, mounts.into_iter().find(|m| !m.read_only))
            .await)
    }

    async fn running_holder(&self, ws: &str, writer: Option<MountRow>) -> Option<VolumeHolder> {
        let w = writer?;
        match self.store.sandboxes().get(ws, &w.sandbox_id).await {
            Ok(s) if s.state == SandboxState::Running => Some(VolumeHolder {
                sandbox_id: w.sandbox_id,
                path: w.path,
            }),
            _ => None,
        }
    }

    /// Takes a volume snapshot: a reflink of the volume's file, the file system of a running
    /// sandbox that has it mounted read-write frozen for the moment of the copy.
    pub async fn snapshot(&self, ws: &str, name: &str) -> Result<VolumeSnapshotRow, VolumeError> {
        let row = self.reachable_row(ws, name).await?;
        let s = self.take_snapshot(&row, false).await?;
        self.store.volumes().insert_snapshot(&s).await?;
        Ok(s)
    }

    /// The snapshot file of `row` (the row is not written).
    async fn take_snapshot(
        &self,
        row: &VolumeRow,
        internal: bool,
    ) -> Result<VolumeSnapshotRow, VolumeError> {
        let id = new_id("vs-");
        let holder = self.holder(row).await?;
        let view = self.host.snapshot_volume(&row.id, &id, holder).await?;
        tracing::debug!(volume = %row.id, snapshot = %id, frozen = view.frozen, copy_ms = view.copy_ms, "volume snapshot");
        Ok(VolumeSnapshotRow {
            id,
            workspace_id: row.workspace_id.clone(),
            volume_id: row.id.clone(),
            host_id: row.host_id.clone(),
            size_gb: row.size_gb,
            frozen: view.frozen,
            internal,
            created_at: now_ms(),
        })
    }

    pub async fn snapshots(
        &self,
        ws: &str,
        name: &str,
    ) -> Result<Vec<VolumeSnapshotRow>, VolumeError> {
        let row = self.row(ws, name).await?;
        Ok(self.store.volumes().snapshots(&row.id).await?)
    }

    pub async fn delete_snapshot(&self, ws: &str, name: &str, id: &str) -> Result<(), VolumeError> {
        let row = self.row(ws, name).await?;
        match self.store.volumes().snapshot(ws, id).await {
            Ok(s) if s.volume_id == row.id => {}
            Ok(_) | Err(StoreError::NotFound) => {
                return Err(VolumeError::SnapshotNotFound(id.into()))
            }
            Err(e) => return Err(e.into()),
        }
        self.store.volumes().delete_snapshot(id).await?;
        self.host.delete_volume_snapshot(id).await?;
        Ok(())
    }

    /// The volume mounts of a sandbox being created: claimed with its row (see
    /// [`crate::Sandboxes::create_with_volumes`]), as the host is to mount them.
    pub(crate) async fn host_mounts(&self, claimed: Vec<Claimed>) -> Vec<VolumeMount> {
        let mut out = Vec::with_capacity(claimed.len());
        for c in claimed {
            let holder = if c.read_only {
                self.running_holder(&c.volume.workspace_id, c.writer).await
            } else {
                None
            };
            out.push(VolumeMount {
                volume_id: c.volume.id,
                path: c.path,
                read_only: c.read_only,
                holder,
                owner: None,
            });
        }
        out
    }

    /// Start-up: removes this host's volume rows left `creating` by a crash (and their files),
    /// and every volume or volume snapshot file no row names.
    pub async fn reconcile(&self) -> Result<(), VolumeError> {
        let rows = self.store.volumes().on_host(&self.host_id).await?;
        let mut known = std::collections::HashSet::new();
        for r in rows {
            if r.state == VolumeState::Creating {
                tracing::warn!(volume = %r.id, name = %r.name, "removing a volume whose create did not finish");
                self.host.delete_volume(&r.id).await?;
                self.store.volumes().delete(&r.id).await?;
            } else {
                known.insert(r.id);
            }
        }
        for id in self.host.volume_ids().await? {
            if !known.contains(&id) {
                tracing::warn!(volume = %id, "removing a volume file no row names");
                self.host.delete_volume(&id).await?;
            }
        }
        let snaps: std::collections::HashSet<String> = self
            .store
            .volumes()
            .snapshot_ids_on_host(&self.host_id)
            .await?
            .into_iter()
            .collect();
        for id in self.host.volume_snapshot_ids().await? {
            if !snaps.contains(&id) {
                tracing::warn!(snapshot = %id, "removing a volume snapshot file no row names");
                self.host.delete_volume_snapshot(&id).await?;
            }
        }
        Ok(())
    }
}

fn attachment(m: MountRow) -> VolumeAttachment {
    VolumeAttachment {
        sandbox_id: m.sandbox_id,
        path: m.path,
        read_only: m.read_only,
    }
}
