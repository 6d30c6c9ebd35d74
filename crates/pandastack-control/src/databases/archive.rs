//! Continuous WAL archiving and base backups of managed databases.
//!
//! The guest cannot reach the object store, so the host pulls: PostgreSQL's `archive_command`
//! (written by the bootstrap script) copies each finished WAL segment, durably and atomically,
//! into `wal-outbox/` on the database's volume and succeeds; the archiver here lists that
//! outbox through the guest agent every [`POLL`], stores each segment gzip-compressed in the
//! object store as `ws/<ws>/blobs/wal/<database>/<segment>.gz` (create-if-absent) and only then
//! removes it from the outbox. The outbox is on the volume, so a VM that dies between the two
//! leaves the segment to the next VM's archiver; `archive_timeout = 1s` bounds how long a
//! commit waits to be in a finished segment, so the loss window when a host is gone is about
//! 1 s plus one poll. A full outbox (256 segments) makes `archive_command` fail, so
//! PostgreSQL keeps its WAL until the host catches up.
//!
//! A base backup is the volume backup that already exists (a frozen reflink snapshot uploaded
//! by a durable job) taken between `pg_backup_start` and `pg_backup_stop` of a session held
//! open in the guest: the backup label `pg_backup_stop` returns is recorded in the object store
//! beside it (`records/database-backups/<database>.<backup>.json`). A snapshot plus its label
//! plus the archived WAL up to the backup's end record is a valid base for point-in-time
//! recovery ([`super::pitr`]). Every database gets one as soon as it runs, then one every
//! [`ArchiveSettings::backup_interval`]; WAL older than the oldest base backup still inside
//! [`ArchiveSettings::retention`] is deleted.

use std::io::{Read, Write};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_api_types::{BackupState, SandboxState};
use pandastack_host::error_chain;
use pandastack_objects::ObjectsError;
use pandastack_store::{now_ms, DatabaseRow, DatabaseRowState};
use serde::{Deserialize, Serialize};

use super::{volume_name, DatabaseError, Databases, DATA_PATH};

/// The databases whose WAL lag this process reports (see [`set_lag`]).
static LAGGING: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Reports database `id`'s outbox in the process's metrics: `waiting` finished segments, the
/// oldest written at `oldest_ms` (the lag: its age; 0 with none waiting).
fn set_lag(id: &str, waiting: usize, oldest_ms: Option<i64>) {
    let m = pandastack_telemetry::metrics();
    let label = pandastack_telemetry::Database {
        database: id.to_owned(),
    };
    let lag = oldest_ms.map_or(0.0, |t| (now_ms() - t).max(0) as f64 / 1000.0);
    m.wal_archive_lag_seconds.get_or_create(&label).set(lag);
    m.wal_outbox_segments
        .get_or_create(&label)
        .set(waiting as i64);
    LAGGING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.to_owned());
}

/// Drops the lag series of databases no longer archived here (deleted, moved, stopped).
fn forget_lag_of_others(looked: &std::collections::BTreeSet<String>) {
    let m = pandastack_telemetry::metrics();
    let mut lagging = LAGGING.lock().unwrap_or_else(|p| p.into_inner());
    lagging.retain(|id| {
        if looked.contains(id) {
            return true;
        }
        let label = pandastack_telemetry::Database {
            database: id.clone(),
        };
        m.wal_archive_lag_seconds.remove(&label);
        m.wal_outbox_segments.remove(&label);
        false
    });
}

/// Object store blob kind of archived WAL (grouped by database id).
pub(crate) const WAL_KIND: &str = "wal";
/// Object store record kind of base backups (`<database>.<volume backup>`).
const BASE_KIND: &str = "database-backups";
/// How often the outboxes of running databases are looked at.
pub const POLL: Duration = Duration::from_millis(250);
/// How often base backups are due-checked and retention applied (in polls).
const SCHEDULE_EVERY: u64 = 40;
/// The biggest WAL file the archiver takes (segments are 1 MiB; 16 MiB for clusters made
/// with PostgreSQL's default).
const MAX_SEGMENT: usize = 64 << 20;

/// When base backups are taken and how long what they need is kept.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveSettings {
    /// A base backup of each running database this often (the first as soon as it runs).
    pub backup_interval: Duration,
    /// Point-in-time restore reaches back this far: WAL and base-backup records older than
    /// the newest base backup before `now - retention` are deleted.
    pub retention: Duration,
    /// A scheduled base backup that failed (before its record, or its upload) is tried again
    /// this long after it, not a whole interval later: the restore window must not stop
    /// moving because one upload failed.
    pub retry: Duration,
}

impl Default for ArchiveSettings {
    fn default() -> Self {
        Self {
            backup_interval: Duration::from_secs(24 * 3600),
            retention: Duration::from_secs(7 * 24 * 3600),
            retry: Duration::from_secs(5 * 60),
        }
    }
}

/// The last base backup a database's schedule counts from, as the archiver keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastBase {
    /// When it stopped (or the attempt failed), unix ms.
    at_ms: i64,
    upload: Upload,
}

/// Where the upload of a [`LastBase`] stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Upload {
    /// Queued or under way: looked at again by each due check until it ends.
    Pending {
        volume: String,
        backup: String,
    },
    Done,
    /// The attempt or its upload failed: the next one is due [`ArchiveSettings::retry`] after.
    Failed,
    /// The database was restored in place then, on a new timeline: no backup recorded before
    /// is of it, so one is due at once.
    Restored,
}

impl LastBase {
    fn due_at(&self, settings: &ArchiveSettings) -> i64 {
        let after = match self.upload {
            Upload::Restored => Duration::ZERO,
            Upload::Failed => settings.retry,
            Upload::Pending { .. } | Upload::Done => settings.backup_interval,
        };
        self.at_ms.saturating_add(after.as_millis() as i64)
    }
}

/// What the object store records of a base backup (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseBackup {
    pub database: String,
    /// The volume backup (`vb-…`) holding the data files.
    pub backup: String,
    /// The volume backup's volume name (its records are under it).
    pub volume: String,
    pub start_lsn: String,
    pub stop_lsn: String,
    /// When `pg_backup_stop` returned, by the database's clock (unix ms): the earliest time a
    /// restore from this backup can reach.
    pub stop_time_ms: i64,
    /// `pg_backup_stop`'s label file, written as `backup_label` before recovery.
    pub label: String,
    pub created_at: i64,
}

fn base_id(database: &str, backup: &str) -> String {
    format!("{database}.{backup}")
}

/// A WAL segment file name (24 hex digits: timeline, log, segment) → its position (log and
/// segment), which orders segments across timelines.
pub(crate) fn segment_position(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".gz").unwrap_or(name);
    (stem.len() == 24 && stem.bytes().all(|b| b.is_ascii_hexdigit())).then(|| &stem[8..])
}

pub(crate) fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data)?;
    enc.finish()
}

pub(crate) fn gunzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(MAX_SEGMENT as u64 + 1)
        .read_to_end(&mut out)?;
    if out.len() > MAX_SEGMENT {
        return Err(std::io::Error::other("archived WAL file too large"));
    }
    Ok(out)
}

fn objects_error(e: ObjectsError) -> DatabaseError {
    DatabaseError::Archive(error_chain(&e))
}

impl Databases {
    /// Archives and schedules base backups for the life of the process.
    pub async fn archiver(self) {
        let mut pass: u64 = 0;
        loop {
            self.archive_pass(pass.is_multiple_of(SCHEDULE_EVERY)).await;
            pass += 1;
            tokio::time::sleep(POLL).await;
        }
    }

    /// One look at every ready database of this host whose VM is running (a hibernated one
    /// writes nothing and is not woken).
    pub async fn archive_pass(&self, schedule: bool) {
        let rows = match self.store.databases().on_host(&self.host_id).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "archiver: could not list databases"
                );
                return;
            }
        };
        let mut looked = std::collections::BTreeSet::new();
        for row in rows {
            if row.state != DatabaseRowState::Ready {
                continue;
            }
            let Some(sb) = &row.sandbox_id else { continue };
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) if s.state == SandboxState::Running => {}
                _ => continue,
            }
            looked.insert(row.id.clone());
            if let Err(e) = self.archive_outbox(&row, sb).await {
                tracing::debug!(database = %row.id, error = &e as &dyn std::error::Error, "archiver: outbox not taken this time");
            }
            if schedule {
                if let Err(e) = self.scheduled_backup(&row, sb).await {
                    tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "scheduled base backup failed");
                }
            }
        }
        forget_lag_of_others(&looked);
    }

    /// Moves the finished segments in the VM's outbox to the object store; returns how many.
    pub(crate) async fn archive_outbox(
        &self,
        row: &DatabaseRow,
        sandbox: &str,
    ) -> Result<usize, DatabaseError> {
        // One pull at a time (the archiver's and a restore's flush): a segment read but not
        // yet stored by one must not look archived to the other.
        let _one = self.archiving.lock().await;
        let dir = format!("{DATA_PATH}/wal-outbox");
        let mut files = self.host.list_dir_all(sandbox, &dir, 1).await?;
        files.retain(|f| !f.name.starts_with('.') && f.size as usize <= MAX_SEGMENT);
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let oldest = files.iter().map(|f| f.mtime_ms).min();
        set_lag(&row.id, files.len(), oldest);
        let objects = self.volumes.objects();
        for f in &files {
            let mut stream = self.host.read_file(sandbox, &f.path).await?;
            let mut data = Vec::with_capacity(f.size as usize);
            while let Some(chunk) = stream.next().await {
                data.extend_from_slice(&chunk?);
            }
            let gz = tokio::task::spawn_blocking(move || gzip(&data))
                .await
                .map_err(|e| DatabaseError::Archive(e.to_string()))?
                .map_err(|e| DatabaseError::Archive(e.to_string()))?;
            objects
                .put_blob(
                    &row.workspace_id,
                    WAL_KIND,
                    &row.id,
                    &format!("{}.gz", f.name),
                    Bytes::from(gz),
                )
                .await
                .map_err(objects_error)?;
            self.host.remove(sandbox, &f.path, false).await?;
        }
        set_lag(&row.id, 0, None);
        Ok(files.len())
    }

    /// Takes a base backup when the database has none, its newest is older than the interval,
    /// or the last attempt failed [`ArchiveSettings::retry`] ago; applies retention after
    /// each attempt, a failed one included (WAL must not pile up behind failing backups).
    async fn scheduled_backup(
        &self,
        row: &DatabaseRow,
        sandbox: &str,
    ) -> Result<(), DatabaseError> {
        let due = |last: &Option<LastBase>| {
            last.as_ref()
                .is_none_or(|l| now_ms() >= l.due_at(&self.archive))
        };
        let kept = match self.last_base(&row.id) {
            Some(last) => Some(self.settle_upload(row, last).await?),
            None => None,
        };
        if kept.is_some() && !due(&kept) {
            return Ok(());
        }
        // Due by what this process kept, or nothing kept: the records decide (another
        // process may have taken one since).
        let recorded = match self.last_base_from_records(row).await? {
            Some(last) => Some(self.settle_upload(row, last).await?),
            None => None,
        };
        let last = match (kept, recorded) {
            // Recorded before a restore in place: of the old timeline.
            (Some(k), Some(r)) if k.upload == Upload::Restored && r.at_ms <= k.at_ms => Some(k),
            (_, recorded) => recorded,
        };
        if !due(&last) {
            return Ok(());
        }
        tracing::info!(database = %row.id, "taking a scheduled base backup");
        let taken = self.base_backup(row, sandbox).await;
        if taken.is_err() {
            self.set_last_base(
                &row.id,
                LastBase {
                    at_ms: now_ms(),
                    upload: Upload::Failed,
                },
            );
        }
        let retained = self.apply_retention(row).await;
        taken?;
        retained
    }

    /// The newest base backup's record and its upload's state, or none (the first backup is
    /// due).
    async fn last_base_from_records(
        &self,
        row: &DatabaseRow,
    ) -> Result<Option<LastBase>, DatabaseError> {
        let Some(b) = self.base_backups(&row.workspace_id, &row.id).await?.pop() else {
            return Ok(None);
        };
        let last = LastBase {
            at_ms: b.stop_time_ms,
            upload: Upload::Pending {
                volume: b.volume,
                backup: b.backup,
            },
        };
        self.set_last_base(&row.id, last.clone());
        Ok(Some(last))
    }

    /// `last` with its upload's state brought up to date (and kept): a pending upload may have
    /// finished or failed since the last check.
    async fn settle_upload(
        &self,
        row: &DatabaseRow,
        last: LastBase,
    ) -> Result<LastBase, DatabaseError> {
        let Upload::Pending { volume, backup } = &last.upload else {
            return Ok(last);
        };
        let upload = match self
            .volumes
            .get_backup(&row.workspace_id, volume, backup)
            .await
        {
            Ok(info) => match info.state {
                BackupState::Done => Upload::Done,
                BackupState::Failed => Upload::Failed,
                BackupState::Uploading => return Ok(last),
            },
            Err(crate::VolumeError::BackupNotFound(_)) => Upload::Failed,
            Err(e) => return Err(e.into()),
        };
        if upload == Upload::Failed {
            tracing::warn!(database = %row.id, backup = %backup, "a base backup's upload failed: the next one is due sooner");
        }
        let settled = LastBase {
            at_ms: last.at_ms,
            upload,
        };
        self.set_last_base(&row.id, settled.clone());
        Ok(settled)
    }

    /// Makes database `id`'s next base backup due at the next check, whatever came before (a
    /// restore in place starts a new timeline, which no earlier backup is of).
    pub(crate) fn base_backup_due_now(&self, id: &str) {
        self.bases.lock().unwrap_or_else(|p| p.into_inner()).insert(
            id.to_owned(),
            LastBase {
                at_ms: now_ms(),
                upload: Upload::Restored,
            },
        );
    }

    fn last_base(&self, id: &str) -> Option<LastBase> {
        self.bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Keeps `last` unless a later one is kept already (a manual backup racing the schedule).
    fn set_last_base(&self, id: &str, last: LastBase) {
        let mut m = self.bases.lock().unwrap_or_else(|p| p.into_inner());
        match m.get(id) {
            Some(kept) if kept.at_ms > last.at_ms => {}
            _ => {
                m.insert(id.to_owned(), last);
            }
        }
    }

    /// A base backup of the running database: `pg_backup_start`, the volume backup (its
    /// snapshot taken now, the upload a durable job), `pg_backup_stop`, the label recorded.
    pub(crate) async fn base_backup(
        &self,
        row: &DatabaseRow,
        sandbox: &str,
    ) -> Result<crate::BackupInfo, DatabaseError> {
        let dir = format!("/run/pandastack-backup-{:08x}", rand::random::<u32>());
        let env = [("PS_BACKUP_DIR", dir.as_str())];
        let start_lsn = self.script(row, sandbox, "backup-start", &env).await?;
        let backup = self
            .volumes
            .backup(&row.workspace_id, &volume_name(&row.id))
            .await;
        // Ends the held session whether the snapshot was taken or not.
        let stop = self.script(row, sandbox, "backup-stop", &env).await;
        let backup = backup?;
        let stop = stop?;
        let mut lines = stop.splitn(3, '\n');
        let (Some(stop_lsn), Some(stop_time), Some(label)) =
            (lines.next(), lines.next(), lines.next())
        else {
            return Err(DatabaseError::Archive(format!(
                "unexpected pg_backup_stop output: {stop:?}"
            )));
        };
        let stop_time_ms: i64 = stop_time.trim().parse().map_err(|_| {
            DatabaseError::Archive(format!("unexpected backup stop time {stop_time:?}"))
        })?;
        let record = BaseBackup {
            database: row.id.clone(),
            backup: backup.id.clone(),
            volume: backup.volume.clone(),
            start_lsn: start_lsn.trim().to_owned(),
            stop_lsn: stop_lsn.trim().to_owned(),
            stop_time_ms,
            label: label.to_owned(),
            created_at: now_ms(),
        };
        self.volumes
            .objects()
            .put_record(
                &row.workspace_id,
                BASE_KIND,
                &base_id(&row.id, &backup.id),
                &serde_json::to_value(&record).expect("a record serialises"),
            )
            .await
            .map_err(objects_error)?;
        self.set_last_base(
            &row.id,
            LastBase {
                at_ms: stop_time_ms,
                upload: Upload::Pending {
                    volume: backup.volume.clone(),
                    backup: backup.id.clone(),
                },
            },
        );
        tracing::info!(database = %row.id, backup = %backup.id, start_lsn = %record.start_lsn, stop_lsn = %record.stop_lsn, "base backup");
        Ok(backup)
    }

    /// Base backups of database `id` (oldest first), whatever their upload's state.
    pub(crate) async fn base_backups(
        &self,
        ws: &str,
        id: &str,
    ) -> Result<Vec<BaseBackup>, DatabaseError> {
        let objects = self.volumes.objects();
        let prefix = format!("{id}.");
        let mut out = Vec::new();
        for name in objects
            .list_records(ws, BASE_KIND)
            .await
            .map_err(objects_error)?
        {
            if !name.starts_with(&prefix) {
                continue;
            }
            match objects.get_record(ws, BASE_KIND, &name).await {
                Ok(v) => {
                    if let Ok(b) = serde_json::from_value::<BaseBackup>(v) {
                        out.push(b);
                    }
                }
                Err(ObjectsError::NotFound { .. }) => {}
                Err(e) => return Err(objects_error(e)),
            }
        }
        out.sort_by_key(|b| b.stop_time_ms);
        Ok(out)
    }

    /// Base backups whose volume backup finished uploading (usable for a restore).
    pub(crate) async fn usable_base_backups(
        &self,
        ws: &str,
        id: &str,
    ) -> Result<Vec<BaseBackup>, DatabaseError> {
        let mut out = Vec::new();
        for b in self.base_backups(ws, id).await? {
            match self.volumes.get_backup(ws, &b.volume, &b.backup).await {
                Ok(info) if info.state == BackupState::Done => out.push(b),
                Ok(_) | Err(crate::VolumeError::BackupNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Deletes archived WAL older than the oldest base backup a restore inside the retention
    /// window can need (the newest one before the window's start, or the oldest one), and the
    /// records of base backups older than that.
    async fn apply_retention(&self, row: &DatabaseRow) -> Result<(), DatabaseError> {
        let ws = &row.workspace_id;
        let bases = self.usable_base_backups(ws, &row.id).await?;
        let window_start = now_ms() - self.archive.retention.as_millis() as i64;
        let Some(keep_from) = bases
            .iter()
            .rev()
            .find(|b| b.stop_time_ms <= window_start)
            .or(bases.first())
        else {
            return Ok(());
        };
        let Some(first_needed) = label_segment(&keep_from.label) else {
            return Ok(());
        };
        let objects = self.volumes.objects();
        for b in &bases {
            if b.stop_time_ms < keep_from.stop_time_ms {
                // Records are create-if-absent; removing one is what makes it unusable.
                objects
                    .delete_record(ws, BASE_KIND, &base_id(&row.id, &b.backup))
                    .await
                    .map_err(objects_error)?;
                // And its volume backup: the chunk collector takes the bytes back.
                self.volumes.forget_backup(ws, &b.backup).await?;
            }
        }
        for blob in objects
            .list_blobs(ws, WAL_KIND, &row.id)
            .await
            .map_err(objects_error)?
        {
            if segment_position(&blob.name).is_some_and(|p| p < first_needed.as_str()) {
                objects
                    .delete_blob(ws, WAL_KIND, &row.id, &blob.name)
                    .await
                    .map_err(objects_error)?;
            }
        }
        Ok(())
    }

    /// Removes everything archived for database `row` (its WAL, its base-backup records and
    /// their volume backups).
    pub(crate) async fn remove_archive(&self, row: &DatabaseRow) -> Result<(), DatabaseError> {
        let ws = &row.workspace_id;
        let objects = self.volumes.objects();
        for blob in objects
            .list_blobs(ws, WAL_KIND, &row.id)
            .await
            .map_err(objects_error)?
        {
            objects
                .delete_blob(ws, WAL_KIND, &row.id, &blob.name)
                .await
                .map_err(objects_error)?;
        }
        for b in self.base_backups(ws, &row.id).await? {
            objects
                .delete_record(ws, BASE_KIND, &base_id(&row.id, &b.backup))
                .await
                .map_err(objects_error)?;
            self.volumes.forget_backup(ws, &b.backup).await?;
        }
        self.bases
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&row.id);
        Ok(())
    }
}

/// The start segment named in a backup label (`START WAL LOCATION: 0/2000028 (file
/// 000000010000000000000002)`) → its position.
pub(crate) fn label_segment(label: &str) -> Option<String> {
    let line = label
        .lines()
        .find(|l| l.starts_with("START WAL LOCATION:"))?;
    let file = line.split("(file ").nth(1)?.trim_end_matches(')').trim();
    segment_position(file).map(str::to_owned)
}

/// The latest time a restore can reach, for messages: the newest archived segment is not
/// dated, so this is the present.
pub(crate) fn window(bases: &[BaseBackup]) -> Option<(i64, i64)> {
    Some((bases.first()?.stop_time_ms, now_ms()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_order_by_position_across_timelines() {
        assert_eq!(
            segment_position("00000002000000000000000A.gz"),
            Some("000000000000000A")
        );
        assert_eq!(
            segment_position("00000001000000000000000B"),
            Some("000000000000000B")
        );
        assert_eq!(segment_position("00000002.history.gz"), None);
        assert_eq!(segment_position("0000000100000000000000.gz"), None);
    }

    #[test]
    fn a_label_names_its_start_segment() {
        let label = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n\
                     CHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\n";
        assert_eq!(label_segment(label).as_deref(), Some("0000000000000002"));
        assert_eq!(label_segment("nothing"), None);
    }

    #[test]
    fn gzip_round_trips_and_bounds_what_it_inflates() {
        let seg = vec![0u8; 1 << 20];
        let gz = gzip(&seg).unwrap();
        assert!(gz.len() < 8 << 10, "{}", gz.len());
        assert_eq!(gunzip(&gz).unwrap(), seg);
        let huge = gzip(&vec![0u8; MAX_SEGMENT + 1]).unwrap();
        assert!(gunzip(&huge).is_err());
    }
}
