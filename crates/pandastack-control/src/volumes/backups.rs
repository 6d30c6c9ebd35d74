//! Volume backups: a snapshot of the volume (taken in the request, so a backup is of that
//! instant) uploaded to the object store by a durable job — only the chunks the workspace's
//! store does not have yet — then its manifest and a record of what it is. The record and
//! manifest are named `<volume name>.<backup id>` under kind `volume-backups`, so a backup can
//! be listed and restored from the object store alone, by this host or another, after this
//! host's data directory is gone.

use std::sync::Arc;
use std::time::Duration;

use pandastack_api_types::BackupState;
use pandastack_host::error_chain;
use pandastack_objects::{Manifest, ObjectsError};
use pandastack_store::{new_id, now_ms, JobRow, NewJob, StoreError, VolumeBackupRow};
use serde::{Deserialize, Serialize};

use super::{VolumeError, Volumes};

/// The job kind of a backup upload.
pub const BACKUP_JOB_KIND: &str = "volume_backup";
/// Object store kind of backup manifests and records.
const KIND: &str = "volume-backups";
/// Attempts of an upload before the backup is failed.
const ATTEMPTS: i64 = 3;

#[derive(Debug, Serialize, Deserialize)]
struct BackupJob {
    backup: String,
}

/// What the object store records of a finished backup (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct BackupRecord {
    id: String,
    volume: String,
    volume_id: String,
    size_gb: i64,
    bytes_uploaded: i64,
    chunks: i64,
    created_at: i64,
    finished_at: i64,
}

/// A backup, from this host's rows or the object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    pub id: String,
    pub volume: String,
    pub size_gb: i64,
    pub state: BackupState,
    pub bytes_uploaded: Option<i64>,
    pub chunks: Option<i64>,
    pub error: Option<String>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

impl BackupInfo {
    fn of_row(r: &VolumeBackupRow) -> Self {
        Self {
            id: r.id.clone(),
            volume: r.volume_name.clone(),
            size_gb: r.size_gb,
            state: BackupState::parse(&r.state).unwrap_or(BackupState::Failed),
            bytes_uploaded: r.bytes_uploaded,
            chunks: r.chunks,
            error: r.error.clone(),
            created_at: r.created_at,
            finished_at: r.finished_at,
        }
    }

    fn of_record(r: BackupRecord) -> Self {
        Self {
            id: r.id,
            volume: r.volume,
            size_gb: r.size_gb,
            state: BackupState::Done,
            bytes_uploaded: Some(r.bytes_uploaded),
            chunks: Some(r.chunks),
            error: None,
            created_at: r.created_at,
            finished_at: Some(r.finished_at),
        }
    }
}

fn object_id(volume: &str, backup: &str) -> String {
    format!("{volume}.{backup}")
}

fn resource(backup: &str) -> String {
    format!("backup:{backup}")
}

impl Volumes {
    /// Starts a backup of volume `name`: its snapshot now, the upload as a job.
    pub async fn backup(&self, ws: &str, name: &str) -> Result<BackupInfo, VolumeError> {
        let row = self.reachable_row(ws, name).await?;
        let snap = self.take_snapshot(&row, true).await?;
        let b = VolumeBackupRow {
            id: new_id("vb-"),
            workspace_id: ws.to_owned(),
            volume_name: row.name.clone(),
            volume_id: row.id.clone(),
            snapshot_id: snap.id.clone(),
            host_id: self.host_id.clone(),
            size_gb: row.size_gb,
            state: BackupState::Uploading.as_str().into(),
            bytes_uploaded: None,
            chunks: None,
            error: None,
            created_at: now_ms(),
            finished_at: None,
        };
        if let Err(e) = self.store.volumes().insert_backup(&b, &snap).await {
            let _ = self.host.delete_volume_snapshot(&snap.id).await;
            return Err(e.into());
        }
        if let Err(e) = self.enqueue(&b.id).await {
            self.end(
                b.clone(),
                Err(format!("queue the upload: {}", error_chain(&e))),
            )
            .await;
            return Err(e.into());
        }
        Ok(BackupInfo::of_row(&b))
    }

    async fn enqueue(&self, backup: &str) -> Result<(), StoreError> {
        self.store
            .jobs()
            .enqueue(&NewJob {
                kind: BACKUP_JOB_KIND.into(),
                resource: resource(backup),
                host_id: Some(self.host_id.clone()),
                payload: serde_json::to_value(BackupJob {
                    backup: backup.into(),
                })
                .expect("a job payload serialises"),
                max_attempts: ATTEMPTS,
                run_after: now_ms(),
            })
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Backups of volume name `name` (the volume need not exist any more): this database's
    /// rows and the object store's records, oldest first.
    pub async fn backups(&self, ws: &str, name: &str) -> Result<Vec<BackupInfo>, VolumeError> {
        let mut out: Vec<BackupInfo> = self
            .store
            .volumes()
            .backups(ws, name)
            .await?
            .iter()
            .map(BackupInfo::of_row)
            .collect();
        let prefix = format!("{name}.");
        for id in self.records(ws).await? {
            let Some(backup) = id.strip_prefix(&prefix) else {
                continue;
            };
            if out.iter().any(|b| b.id == backup) {
                continue;
            }
            if let Some(r) = self.record(ws, &id).await? {
                out.push(BackupInfo::of_record(r));
            }
        }
        out.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    /// One backup of volume name `name`.
    pub async fn get_backup(
        &self,
        ws: &str,
        name: &str,
        id: &str,
    ) -> Result<BackupInfo, VolumeError> {
        match self.store.volumes().backup(ws, id).await {
            Ok(r) if r.volume_name == name => return Ok(BackupInfo::of_row(&r)),
            Ok(_) => return Err(VolumeError::BackupNotFound(id.into())),
            Err(StoreError::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
        match self.record(ws, &object_id(name, id)).await? {
            Some(r) => Ok(BackupInfo::of_record(r)),
            None => Err(VolumeError::BackupNotFound(id.into())),
        }
    }

    /// A finished backup's record and manifest, found by id in the object store.
    pub(super) async fn done_backup(
        &self,
        ws: &str,
        id: &str,
    ) -> Result<(BackupInfo, Manifest), VolumeError> {
        let suffix = format!(".{id}");
        let Some(object) = self
            .records(ws)
            .await?
            .into_iter()
            .find(|o| o.ends_with(&suffix))
        else {
            return Err(match self.store.volumes().backup(ws, id).await {
                Ok(r) if r.state == BackupState::Uploading.as_str() => {
                    VolumeError::BackupNotDone(id.into())
                }
                _ => VolumeError::BackupNotFound(id.into()),
            });
        };
        let record = self
            .record(ws, &object)
            .await?
            .ok_or_else(|| VolumeError::BackupNotFound(id.into()))?;
        let manifest = self
            .objects
            .get_manifest(ws, KIND, &object)
            .await
            .map_err(VolumeError::Objects)?;
        Ok((BackupInfo::of_record(record), manifest))
    }

    /// Backup `id` of workspace `ws` forgotten: its record and manifest removed from the object
    /// store (so the chunk collector takes its bytes back) and its row deleted. Gone already is
    /// success. For a database's base backups its archive no longer needs.
    pub(crate) async fn forget_backup(&self, ws: &str, id: &str) -> Result<(), VolumeError> {
        let suffix = format!(".{id}");
        for object in self
            .records(ws)
            .await?
            .into_iter()
            .filter(|o| o.ends_with(&suffix))
        {
            // The record first: without it the backup is not offered.
            self.objects
                .delete_record(ws, KIND, &object)
                .await
                .map_err(VolumeError::Objects)?;
            self.objects
                .delete_manifest(ws, KIND, &object)
                .await
                .map_err(VolumeError::Objects)?;
        }
        self.store.volumes().delete_backup(id).await?;
        Ok(())
    }

    async fn records(&self, ws: &str) -> Result<Vec<String>, VolumeError> {
        self.objects
            .list_records(ws, KIND)
            .await
            .map_err(VolumeError::Objects)
    }

    async fn record(&self, ws: &str, object: &str) -> Result<Option<BackupRecord>, VolumeError> {
        match self.objects.get_record(ws, KIND, object).await {
            Ok(v) => Ok(serde_json::from_value(v).ok()),
            Err(ObjectsError::NotFound { .. }) => Ok(None),
            Err(e) => Err(VolumeError::Objects(e)),
        }
    }

    /// Start-up: uploads cut off by a restart are queued again (with the template worker's
    /// `requeue_running`); an `uploading` backup without a job gets one.
    pub async fn recover_backups(&self) -> Result<(), VolumeError> {
        self.store.jobs().requeue_running(&self.host_id).await?;
        for b in self
            .store
            .volumes()
            .uploading_on_host(&self.host_id)
            .await?
        {
            if self
                .store
                .jobs()
                .incomplete(&resource(&b.id))
                .await?
                .is_none()
            {
                tracing::info!(backup = %b.id, "backup upload queued again");
                self.enqueue(&b.id).await?;
            }
        }
        Ok(())
    }

    /// Runs this host's backup uploads one after another, for the life of the process. Call
    /// [`Volumes::recover_backups`] first.
    pub async fn worker(self) {
        let runner = crate::jobs::Runner {
            store: self.store.clone(),
            host_id: self.host_id.clone(),
            kind: BACKUP_JOB_KIND,
            wake: Arc::clone(&self.wake),
            retry_after: Duration::from_secs(5),
        };
        runner
            .run(|job| {
                let me = self.clone();
                async move {
                    let result = me.run_job(&job).await;
                    if let Err(message) = &result {
                        // The last attempt: the backup has failed for good.
                        if job.attempts >= job.max_attempts {
                            if let Ok(b) = me.backup_row(&job).await {
                                me.end(b, Err(message.clone())).await;
                            }
                        }
                    }
                    result
                }
            })
            .await
    }

    async fn backup_row(&self, job: &JobRow) -> Result<VolumeBackupRow, String> {
        let spec: BackupJob =
            serde_json::from_value(job.payload.clone()).map_err(|e| format!("job payload: {e}"))?;
        self.store
            .volumes()
            .backup_by_id(&spec.backup)
            .await
            .map_err(|e| format!("state store: {}", error_chain(&e)))
    }

    /// One upload: chunks (those stored already are skipped, so a retry sends only what is
    /// missing), then the manifest, then the record; then the row says `done`.
    async fn run_job(&self, job: &JobRow) -> Result<(), String> {
        let b = self.backup_row(job).await?;
        if b.state != BackupState::Uploading.as_str() {
            return Ok(());
        }
        let ws = &b.workspace_id;
        let up = self
            .host
            .upload_volume_snapshot(&b.snapshot_id, ws)
            .await
            .map_err(|e| format!("upload: {}", error_chain(&e)))?;
        let object = object_id(&b.volume_name, &b.id);
        let fail = |e: ObjectsError| format!("object store: {}", error_chain(&e));
        self.objects
            .put_manifest(ws, KIND, &object, &up.manifest)
            .await
            .map_err(fail)?;
        // The figures of the attempt that finished; a retry's would be smaller.
        let record = BackupRecord {
            id: b.id.clone(),
            volume: b.volume_name.clone(),
            volume_id: b.volume_id.clone(),
            size_gb: b.size_gb,
            bytes_uploaded: up.bytes_uploaded as i64,
            chunks: up.chunks as i64 - up.holes as i64,
            created_at: b.created_at,
            finished_at: now_ms(),
        };
        let value = serde_json::to_value(&record).expect("a record serialises");
        match self.objects.put_record(ws, KIND, &object, &value).await {
            Ok(()) => {}
            // Written by an earlier attempt that stopped before the row: that one stands.
            Err(ObjectsError::Conflict { .. }) => {}
            Err(e) => return Err(fail(e)),
        }
        self.end(b, Ok(record)).await;
        Ok(())
    }

    /// Records a backup's end on its row and removes its snapshot.
    async fn end(&self, mut b: VolumeBackupRow, result: Result<BackupRecord, String>) {
        match result {
            Ok(r) => {
                b.state = BackupState::Done.as_str().into();
                b.bytes_uploaded = Some(r.bytes_uploaded);
                b.chunks = Some(r.chunks);
                b.finished_at = Some(r.finished_at);
            }
            Err(message) => {
                tracing::warn!(backup = %b.id, error = message.as_str(), "backup failed");
                b.state = BackupState::Failed.as_str().into();
                b.error = Some(message);
                b.finished_at = Some(now_ms());
            }
        }
        if let Err(e) = self.store.volumes().finish_backup(&b).await {
            tracing::warn!(backup = %b.id, error = &e as &dyn std::error::Error, "record a backup's end");
            return;
        }
        if let Err(e) = self.host.delete_volume_snapshot(&b.snapshot_id).await {
            tracing::warn!(backup = %b.id, error = &e as &dyn std::error::Error, "remove a backup's snapshot");
        }
    }
}
