//! Volume rows, sandboxes' volume mounts, volume snapshots and backups.

use sqlx::AnyPool;

use crate::{col, found, StoreError};

/// Where a volume is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeState {
    /// The row is written; its file is being made (a crash here is undone at start-up).
    Creating,
    Ready,
}

impl VolumeState {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Creating => "creating",
            VolumeState::Ready => "ready",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "creating" => VolumeState::Creating,
            "ready" => VolumeState::Ready,
            _ => return None,
        })
    }
}

/// One volume as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRow {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    /// The host its file is on.
    pub host_id: String,
    pub size_gb: i64,
    pub state: VolumeState,
    /// The volume snapshot or backup it was made from.
    pub source: Option<String>,
    pub created_at: i64,
}

/// A sandbox's mount of a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRow {
    pub sandbox_id: String,
    pub volume_id: String,
    pub slot: i64,
    pub path: String,
    pub read_only: bool,
}

/// A mount a create asks for, by volume name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountClaim {
    pub name: String,
    pub path: String,
    pub read_only: bool,
}

/// A claimed mount: the volume, and for a read-only one the sandbox that has the volume
/// mounted read-write (whose file system a copy must freeze).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    pub volume: VolumeRow,
    pub path: String,
    pub read_only: bool,
    pub writer: Option<MountRow>,
}

/// One volume snapshot as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSnapshotRow {
    pub id: String,
    pub workspace_id: String,
    pub volume_id: String,
    pub host_id: String,
    pub size_gb: i64,
    pub frozen: bool,
    /// Taken for a backup; not listed, removed when the upload ends.
    pub internal: bool,
    pub created_at: i64,
}

/// One volume backup as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeBackupRow {
    pub id: String,
    pub workspace_id: String,
    pub volume_name: String,
    pub volume_id: String,
    pub snapshot_id: String,
    pub host_id: String,
    pub size_gb: i64,
    /// `uploading`, `done` or `failed`.
    pub state: String,
    pub bytes_uploaded: Option<i64>,
    pub chunks: Option<i64>,
    pub error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

pub struct VolumeRepo<'a> {
    pub(crate) pool: &'a AnyPool,
    pub(crate) backend: crate::Backend,
}

const COLUMNS: &str = "id, workspace_id, name, host_id, size_gb, state, source, created_at";
const SNAP_COLUMNS: &str =
    "id, workspace_id, volume_id, host_id, size_gb, frozen, internal, created_at";
const BACKUP_COLUMNS: &str = "id, workspace_id, volume_name, volume_id, snapshot_id, host_id, size_gb, state, bytes_uploaded, chunks, error, created_at, finished_at";

fn row(r: &sqlx::any::AnyRow) -> Result<VolumeRow, StoreError> {
    Ok(VolumeRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        host_id: col(r, "host_id")?,
        size_gb: col(r, "size_gb")?,
        state: crate::parsed(r, "state", VolumeState::parse)?,
        source: col(r, "source")?,
        created_at: col(r, "created_at")?,
    })
}

fn mount_row(r: &sqlx::any::AnyRow) -> Result<MountRow, StoreError> {
    Ok(MountRow {
        sandbox_id: col(r, "sandbox_id")?,
        volume_id: col(r, "volume_id")?,
        slot: col(r, "slot")?,
        path: col(r, "path")?,
        read_only: col::<i64>(r, "read_only")? != 0,
    })
}

fn snap_row(r: &sqlx::any::AnyRow) -> Result<VolumeSnapshotRow, StoreError> {
    Ok(VolumeSnapshotRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        volume_id: col(r, "volume_id")?,
        host_id: col(r, "host_id")?,
        size_gb: col(r, "size_gb")?,
        frozen: col::<i64>(r, "frozen")? != 0,
        internal: col::<i64>(r, "internal")? != 0,
        created_at: col(r, "created_at")?,
    })
}

fn backup_row(r: &sqlx::any::AnyRow) -> Result<VolumeBackupRow, StoreError> {
    Ok(VolumeBackupRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        volume_name: col(r, "volume_name")?,
        volume_id: col(r, "volume_id")?,
        snapshot_id: col(r, "snapshot_id")?,
        host_id: col(r, "host_id")?,
        size_gb: col(r, "size_gb")?,
        state: col(r, "state")?,
        bytes_uploaded: col(r, "bytes_uploaded")?,
        chunks: col(r, "chunks")?,
        error: col(r, "error")?,
        created_at: col(r, "created_at")?,
        finished_at: col(r, "finished_at")?,
    })
}

/// Locks workspace `ws` for the rest of transaction `tx` (a write first: on SQLite it takes
/// the write lock now, on PostgreSQL it locks the row) and returns its volume quota.
async fn lock_workspace(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ws: &str,
) -> Result<i64, StoreError> {
    let locked = sqlx::query("UPDATE workspaces SET max_volume_gb = max_volume_gb WHERE id = $1")
        .bind(ws)
        .execute(&mut **tx)
        .await?;
    found(locked)?;
    let r = sqlx::query("SELECT max_volume_gb FROM workspaces WHERE id = $1")
        .bind(ws)
        .fetch_one(&mut **tx)
        .await?;
    col(&r, "max_volume_gb")
}

/// GiB of volumes workspace `ws` has (every state).
async fn used_gb(tx: &mut sqlx::Transaction<'_, sqlx::Any>, ws: &str) -> Result<i64, StoreError> {
    let r = sqlx::query(
        "SELECT CAST(COALESCE(SUM(size_gb), 0) AS BIGINT) AS n FROM volumes WHERE workspace_id = $1",
    )
    .bind(ws)
    .fetch_one(&mut **tx)
    .await?;
    col(&r, "n")
}

impl VolumeRepo<'_> {
    /// Inserts a volume row (state `creating`) if the workspace's volumes then total at most
    /// its `max_volume_gb` ([`StoreError::LimitReached`]) and the name is free
    /// ([`StoreError::Conflict`]).
    pub async fn insert_within_quota(&self, v: &VolumeRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let quota = lock_workspace(&mut tx, &v.workspace_id).await?;
        if used_gb(&mut tx, &v.workspace_id).await? + v.size_gb > quota {
            return Err(StoreError::LimitReached { limit: quota });
        }
        insert(&mut tx, v).await?;
        tx.commit().await?;
        Ok(())
    }

    /// [`Self::insert_within_quota`] on the host the store's placement chooses for `demand`
    /// (a cluster: the volume goes where the sandbox that will mount it fits — `demand` is that
    /// sandbox's — since a sandbox runs on its volumes' host). Writes the host into `v`.
    pub async fn insert_placed_within_quota(
        &self,
        v: &mut VolumeRow,
        demand: &crate::Demand<'_>,
    ) -> Result<crate::Placement, StoreError> {
        let mut retry = crate::placement::Retry::default();
        loop {
            let mut tx = self.pool.begin().await?;
            let quota = lock_workspace(&mut tx, &v.workspace_id).await?;
            if used_gb(&mut tx, &v.workspace_id).await? + v.size_gb > quota {
                return Err(StoreError::LimitReached { limit: quota });
            }
            let placed = crate::placement::place(&mut tx, self.backend, demand, retry.raced).await;
            let Some(placement) = retry.outcome(placed)? else {
                tx.rollback().await?;
                continue;
            };
            v.host_id.clone_from(&placement.host_id);
            insert(&mut tx, v).await?;
            tx.commit().await?;
            return Ok(placement);
        }
    }

    pub async fn set_ready(&self, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("UPDATE volumes SET state = 'ready' WHERE id = $1")
            .bind(id)
            .execute(self.pool)
            .await?;
        found(done)
    }

    /// Raises a volume's size to `size_gb` if it has no read-write mount and the workspace's
    /// quota allows. `Ok(None)`: done; `Ok(Some(mount))`: refused, mounted there.
    pub async fn grow(&self, v: &VolumeRow, size_gb: i64) -> Result<Option<MountRow>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let quota = lock_workspace(&mut tx, &v.workspace_id).await?;
        if let Some(m) = writer(&mut tx, &v.id).await? {
            return Ok(Some(m));
        }
        let r = sqlx::query("SELECT size_gb FROM volumes WHERE id = $1")
            .bind(&v.id)
            .fetch_one(&mut *tx)
            .await?;
        let now: i64 = col(&r, "size_gb")?;
        if used_gb(&mut tx, &v.workspace_id).await? - now + size_gb > quota {
            return Err(StoreError::LimitReached { limit: quota });
        }
        sqlx::query("UPDATE volumes SET size_gb = $1 WHERE id = $2")
            .bind(size_gb)
            .bind(&v.id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(None)
    }

    pub async fn get(&self, workspace_id: &str, name: &str) -> Result<VolumeRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM volumes WHERE workspace_id = $1 AND name = $2"
        ))
        .bind(workspace_id)
        .bind(name)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// A page of a workspace's volumes, by name after `after`.
    pub async fn list(
        &self,
        workspace_id: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<VolumeRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM volumes WHERE workspace_id = $1 AND name > $2 \
             ORDER BY name LIMIT $3"
        ))
        .bind(workspace_id)
        .bind(after.unwrap_or_default())
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Every volume row on host `host_id` (all workspaces), for start-up reconciliation.
    pub async fn on_host(&self, host_id: &str) -> Result<Vec<VolumeRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM volumes WHERE host_id = $1"))
            .bind(host_id)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    /// The mounts of a volume (read-write first).
    pub async fn mounts(&self, volume_id: &str) -> Result<Vec<MountRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT sandbox_id, volume_id, slot, path, read_only FROM sandbox_volumes \
             WHERE volume_id = $1 ORDER BY read_only, sandbox_id",
        )
        .bind(volume_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(mount_row).collect()
    }

    /// Deletes a volume row and its snapshots' rows if it has no read-write mount. `Ok(None)`:
    /// deleted (returns the snapshot ids whose files to remove); `Ok(Some(mount))`: refused.
    pub async fn delete_unless_mounted(
        &self,
        v: &VolumeRow,
    ) -> Result<Result<Vec<String>, MountRow>, StoreError> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, &v.workspace_id).await?;
        if let Some(m) = writer(&mut tx, &v.id).await? {
            return Ok(Err(m));
        }
        let snaps =
            sqlx::query("SELECT id FROM volume_snapshots WHERE volume_id = $1 AND internal = 0")
                .bind(&v.id)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| col(r, "id"))
                .collect::<Result<Vec<String>, _>>()?;
        sqlx::query("DELETE FROM volume_snapshots WHERE volume_id = $1 AND internal = 0")
            .bind(&v.id)
            .execute(&mut *tx)
            .await?;
        // Read-only mounts are of copies in their sandboxes: they stay, the rows go.
        sqlx::query("DELETE FROM sandbox_volumes WHERE volume_id = $1")
            .bind(&v.id)
            .execute(&mut *tx)
            .await?;
        found(
            sqlx::query("DELETE FROM volumes WHERE id = $1")
                .bind(&v.id)
                .execute(&mut *tx)
                .await?,
        )?;
        tx.commit().await?;
        Ok(Ok(snaps))
    }

    /// Deletes a volume row whatever its state (a failed create; reconciliation).
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM sandbox_volumes WHERE volume_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM volumes WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    // ---- snapshots -----------------------------------------------------------------------

    pub async fn insert_snapshot(&self, s: &VolumeSnapshotRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO volume_snapshots ({SNAP_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.volume_id)
        .bind(&s.host_id)
        .bind(s.size_gb)
        .bind(i64::from(s.frozen))
        .bind(i64::from(s.internal))
        .bind(s.created_at)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn snapshot(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<VolumeSnapshotRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {SNAP_COLUMNS} FROM volume_snapshots WHERE workspace_id = $1 AND id = $2 \
             AND internal = 0"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        snap_row(&r)
    }

    /// A volume's snapshots (not internal), oldest first.
    pub async fn snapshots(&self, volume_id: &str) -> Result<Vec<VolumeSnapshotRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {SNAP_COLUMNS} FROM volume_snapshots WHERE volume_id = $1 AND internal = 0 \
             ORDER BY created_at, id"
        ))
        .bind(volume_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(snap_row).collect()
    }

    pub async fn delete_snapshot(&self, id: &str) -> Result<(), StoreError> {
        found(
            sqlx::query("DELETE FROM volume_snapshots WHERE id = $1")
                .bind(id)
                .execute(self.pool)
                .await?,
        )
    }

    /// Ids of every volume snapshot on host `host_id` (internal ones included).
    pub async fn snapshot_ids_on_host(&self, host_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM volume_snapshots WHERE host_id = $1")
            .bind(host_id)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }

    // ---- backups -------------------------------------------------------------------------

    /// Inserts a backup row and its internal snapshot's row in one transaction.
    pub async fn insert_backup(
        &self,
        b: &VolumeBackupRow,
        snap: &VolumeSnapshotRow,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO volume_snapshots ({SNAP_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
        ))
        .bind(&snap.id)
        .bind(&snap.workspace_id)
        .bind(&snap.volume_id)
        .bind(&snap.host_id)
        .bind(snap.size_gb)
        .bind(i64::from(snap.frozen))
        .bind(i64::from(snap.internal))
        .bind(snap.created_at)
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "INSERT INTO volume_backups ({BACKUP_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
        ))
        .bind(&b.id)
        .bind(&b.workspace_id)
        .bind(&b.volume_name)
        .bind(&b.volume_id)
        .bind(&b.snapshot_id)
        .bind(&b.host_id)
        .bind(b.size_gb)
        .bind(&b.state)
        .bind(b.bytes_uploaded)
        .bind(b.chunks)
        .bind(&b.error)
        .bind(b.created_at)
        .bind(b.finished_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn backup(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<VolumeBackupRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {BACKUP_COLUMNS} FROM volume_backups WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        backup_row(&r)
    }

    pub async fn backup_by_id(&self, id: &str) -> Result<VolumeBackupRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {BACKUP_COLUMNS} FROM volume_backups WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        backup_row(&r)
    }

    /// Backups of host `host_id` still uploading.
    pub async fn uploading_on_host(
        &self,
        host_id: &str,
    ) -> Result<Vec<VolumeBackupRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {BACKUP_COLUMNS} FROM volume_backups WHERE host_id = $1 AND state = 'uploading'"
        ))
        .bind(host_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(backup_row).collect()
    }

    /// Backups of the volumes named `volume_name` in a workspace, oldest first.
    pub async fn backups(
        &self,
        workspace_id: &str,
        volume_name: &str,
    ) -> Result<Vec<VolumeBackupRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {BACKUP_COLUMNS} FROM volume_backups WHERE workspace_id = $1 AND \
             volume_name = $2 ORDER BY created_at, id"
        ))
        .bind(workspace_id)
        .bind(volume_name)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(backup_row).collect()
    }

    /// Deletes a backup's row (its files are the caller's: see `Volumes::forget_backup`);
    /// deleting one that is gone is success.
    pub async fn delete_backup(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM volume_backups WHERE id = $1")
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Records a backup's end: `done` with its figures or `failed` with the reason, and drops
    /// its internal snapshot's row.
    pub async fn finish_backup(&self, b: &VolumeBackupRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        found(
            sqlx::query(
                "UPDATE volume_backups SET state = $1, bytes_uploaded = $2, chunks = $3, \
                 error = $4, finished_at = $5 WHERE id = $6",
            )
            .bind(&b.state)
            .bind(b.bytes_uploaded)
            .bind(b.chunks)
            .bind(&b.error)
            .bind(b.finished_at)
            .bind(&b.id)
            .execute(&mut *tx)
            .await?,
        )?;
        sqlx::query("DELETE FROM volume_snapshots WHERE id = $1 AND internal = 1")
            .bind(&b.snapshot_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}

/// The read-write mount of a volume, if any.
async fn writer(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    volume_id: &str,
) -> Result<Option<MountRow>, StoreError> {
    let r = sqlx::query(
        "SELECT sandbox_id, volume_id, slot, path, read_only FROM sandbox_volumes \
         WHERE volume_id = $1 AND read_only = 0",
    )
    .bind(volume_id)
    .fetch_optional(&mut **tx)
    .await?;
    r.as_ref().map(mount_row).transpose()
}

/// Claims `mounts` for sandbox `sandbox_id` inside a create's transaction: each volume must
/// exist in the workspace and be ready ([`StoreError::MissingVolume`]) and on `host_id`
/// ([`StoreError::VolumeElsewhere`]); a read-write mount needs the volume free of another
/// read-write mount ([`StoreError::VolumeBusy`]). Slot `i` is `mounts[i]`.
pub(crate) async fn claim(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    workspace_id: &str,
    host_id: &str,
    sandbox_id: &str,
    mounts: &[MountClaim],
) -> Result<Vec<Claimed>, StoreError> {
    let mut out = Vec::with_capacity(mounts.len());
    for (slot, m) in mounts.iter().enumerate() {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM volumes WHERE workspace_id = $1 AND name = $2"
        ))
        .bind(workspace_id)
        .bind(&m.name)
        .fetch_optional(&mut **tx)
        .await?;
        let volume = match r.as_ref().map(row).transpose()? {
            Some(v) if v.state == VolumeState::Ready => v,
            _ => return Err(StoreError::MissingVolume(m.name.clone())),
        };
        if volume.host_id != host_id {
            return Err(StoreError::VolumeElsewhere {
                volume: m.name.clone(),
                host: volume.host_id,
            });
        }
        let current = writer(tx, &volume.id).await?;
        if !m.read_only {
            if let Some(w) = current {
                return Err(StoreError::VolumeBusy {
                    volume: m.name.clone(),
                    sandbox: w.sandbox_id,
                });
            }
        }
        sqlx::query(
            "INSERT INTO sandbox_volumes (sandbox_id, volume_id, slot, path, read_only) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(sandbox_id)
        .bind(&volume.id)
        .bind(slot as i64)
        .bind(&m.path)
        .bind(i64::from(m.read_only))
        .execute(&mut **tx)
        .await?;
        out.push(Claimed {
            volume,
            path: m.path.clone(),
            read_only: m.read_only,
            writer: if m.read_only { current } else { None },
        });
    }
    Ok(out)
}

async fn insert(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    v: &VolumeRow,
) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "INSERT INTO volumes ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    ))
    .bind(&v.id)
    .bind(&v.workspace_id)
    .bind(&v.name)
    .bind(&v.host_id)
    .bind(v.size_gb)
    .bind(v.state.as_str())
    .bind(&v.source)
    .bind(v.created_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
