//! Point-in-time restore: a database as of a past time, from the newest base backup taken
//! before it plus the archived WAL, into a new database (`branches {from_time}`) or into the
//! same one (`restore {to_time}`, a new timeline).
//!
//! The base backup's volume backup becomes a new volume; a new VM mounts it; the host writes
//! every archived `.history` file and every segment from the backup's start on into
//! `wal-restore/` on it; the bootstrap script writes the backup label, `recovery.signal` and
//! `recovery_target_time`, starts PostgreSQL and waits for the promotion. A restore into the
//! same database then swaps the volumes in one state-store transaction (the old one renamed
//! and deleted with its VM); a crash before the swap leaves a `pgdata-<id>-r…` volume and a VM
//! that start-up removes ([`Databases::reconcile`]), after it the old ones, removed the same way.

use bytes::Bytes;
use pandastack_api_types::{CreateBranchRequest, CreateVolumeRequest};
use pandastack_store::{now_ms, DatabaseRow, StoreError};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::archive::{gunzip, label_segment, segment_position, window, BaseBackup, WAL_KIND};
use super::{volume_name, Boot, DatabaseError, DatabaseInfo, Databases, DATA_PATH};
use crate::VolumeError;

/// What a VM recovers: a base backup of database `source` replayed to `target`.
pub(crate) struct Recovery {
    pub source_ws: String,
    pub source: String,
    pub base: BaseBackup,
    /// RFC 3339; `None` replays everything archived.
    pub target: Option<String>,
    /// Into the same database (its row names the VM only when the volume is swapped in).
    pub in_place: bool,
}

/// Parses an RFC 3339 time into unix ms.
pub fn parse_time(field: &str, value: &str) -> Result<i64, DatabaseError> {
    let t = OffsetDateTime::parse(value, &Rfc3339).map_err(|e| DatabaseError::BadTime {
        field: field.to_owned(),
        reason: format!("{value:?} is not an RFC 3339 time ({e})"),
    })?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as i64)
}

/// Unix ms as RFC 3339 (UTC); the number itself if out of range.
pub(crate) fn rfc3339(ms: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

impl Databases {
    /// The base backup to restore database `source` to `to_ms` from, after taking what its
    /// running VM has not archived yet. Refuses a time outside the window (no base backup
    /// before it, or in the future).
    async fn plan(&self, source: &DatabaseRow, to_ms: i64) -> Result<BaseBackup, DatabaseError> {
        self.flush_archive(source).await;
        let bases = self
            .usable_base_backups(&source.workspace_id, &source.id)
            .await?;
        let outside = |bases: &[BaseBackup]| DatabaseError::OutsideWindow {
            database: source.id.clone(),
            time: rfc3339(to_ms),
            window: match window(bases) {
                Some((from, to)) => format!("from {} to {}", rfc3339(from), rfc3339(to)),
                None => "there is no finished base backup yet (one is taken when the database \
                         starts, then daily; POST …/backups takes one now)"
                    .to_owned(),
            },
        };
        if to_ms > now_ms() {
            return Err(outside(&bases));
        }
        bases
            .iter()
            .rev()
            .find(|b| b.stop_time_ms <= to_ms)
            .cloned()
            .ok_or_else(|| outside(&bases))
    }

    /// Moves what the database's running VM has in its outbox (after a segment switch, so the
    /// last commits are in it) to the object store. Best effort: a hibernated database has
    /// archived everything it wrote before it slept.
    async fn flush_archive(&self, row: &DatabaseRow) {
        let Some(sb) = &row.sandbox_id else { return };
        match self.store.sandboxes().by_id(sb).await {
            Ok(s) if s.state == pandastack_api_types::SandboxState::Running => {}
            _ => return,
        }
        if let Err(e) = self.script(row, sb, "flush-archive", &[]).await {
            tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "could not switch and archive the current WAL segment");
        }
        if let Err(e) = self.archive_outbox(row, sb).await {
            tracing::warn!(database = %row.id, error = &e as &dyn std::error::Error, "could not archive the outbox before a restore");
        }
    }

    /// A branch of database `id` as of `from_ms`, from its archive.
    pub(crate) async fn branch_at(
        &self,
        ws: &str,
        parent: DatabaseRow,
        from_ms: i64,
        req: &CreateBranchRequest,
    ) -> Result<DatabaseInfo, DatabaseError> {
        let base = self.plan(&parent, from_ms).await?;
        let row = self.branch_row(ws, &parent, req);
        let volume = CreateVolumeRequest {
            name: volume_name(&row.id),
            from_backup: Some(base.backup.clone()),
            ..Default::default()
        };
        let recovery = Recovery {
            source_ws: parent.workspace_id.clone(),
            source: parent.id.clone(),
            base,
            target: Some(rfc3339(from_ms)),
            in_place: false,
        };
        self.make(row, volume, Boot::Recover(Box::new(recovery)))
            .await
    }

    /// Restores database `id` to `to_ms` in place: the same id, name, password and connection
    /// strings; the data as it was then, on a new timeline.
    pub async fn restore(
        &self,
        ws: &str,
        id: &str,
        to_ms: i64,
    ) -> Result<DatabaseInfo, DatabaseError> {
        let row = self.row(ws, id).await?;
        let base = self.plan(&row, to_ms).await?;
        self.restore_from(row, base, Some(rfc3339(to_ms))).await
    }

    /// A database whose volume's host is dead, back on another host: restored in place from its
    /// newest finished base backup and every WAL segment archived since (its last commits not
    /// yet archived are lost: the RPO is the archive's lag, a segment switch at most every
    /// second while it writes). `None` when it has no finished base backup to start from.
    pub(crate) async fn fail_over(
        &self,
        row: DatabaseRow,
    ) -> Result<Option<DatabaseInfo>, DatabaseError> {
        let bases = self.usable_base_backups(&row.workspace_id, &row.id).await?;
        let Some(base) = bases.last().cloned() else {
            return Ok(None);
        };
        self.restore_from(row, base, None).await.map(Some)
    }

    /// Database `row` restored in place from `base` and its archived WAL up to `target`
    /// (RFC 3339; `None`: everything archived).
    async fn restore_from(
        &self,
        row: DatabaseRow,
        base: BaseBackup,
        target: Option<String>,
    ) -> Result<DatabaseInfo, DatabaseError> {
        let ws = row.workspace_id.clone();
        let ws = ws.as_str();
        let temp = format!(
            "{}-r{:06x}",
            volume_name(&row.id),
            rand::random::<u32>() >> 8
        );
        let volume = self
            .volumes
            .create(
                ws,
                &CreateVolumeRequest {
                    name: temp.clone(),
                    from_backup: Some(base.backup.clone()),
                    size_gb: Some(row.size_gb as u32),
                    ..Default::default()
                },
            )
            .await?;
        let recovery_target = target.clone();
        let recovery = Recovery {
            source_ws: ws.to_owned(),
            source: row.id.clone(),
            base,
            target,
            in_place: true,
        };
        let sandbox = match self
            .start_vm(&row, &temp, &Boot::Recover(Box::new(recovery)))
            .await
        {
            Ok(s) => s,
            Err(e) => {
                if let Err(d) = self.volumes.delete(ws, &temp).await {
                    tracing::warn!(volume = %temp, error = &d as &dyn std::error::Error, "could not remove a failed restore's volume");
                }
                return Err(e);
            }
        };
        // Swap under the database's start lock, so no connection starts a VM on the old
        // volume meanwhile.
        let lock = self.start_lock(&row.id);
        let _held = lock.lock().await;
        let current = self.store.databases().by_id(&row.id).await?;
        let retired = format!(
            "{}-x{:06x}",
            volume_name(&row.id),
            rand::random::<u32>() >> 8
        );
        self.store
            .databases()
            .swap_volume(
                &row.id,
                &current.volume_id,
                &retired,
                &volume.row.id,
                &volume_name(&row.id),
                Some(&sandbox.id),
            )
            .await?;
        self.sessions.forget(&row.id);
        // The new timeline's own base backup at the next check: until it exists, a later
        // restore has only the old timeline's backups to start from.
        self.base_backup_due_now(&row.id);
        tracing::info!(database = %row.id, sandbox = %sandbox.id, "database restored in place");
        let data = serde_json::json!({
            "name": row.name,
            "target": recovery_target,
            "sandbox_id": sandbox.id,
        });
        self.sandboxes
            .events()
            .emit(
                ws,
                "database.restored",
                crate::ResourceKind::Database,
                &row.id,
                data,
            )
            .await;
        self.remove_retired(&current).await;
        let row = self.store.databases().by_id(&row.id).await?;
        Ok(DatabaseInfo {
            row,
            sandbox: Some(sandbox),
        })
    }

    /// After a swap: the old VM (its clients told why by a fast shutdown) and the old
    /// (renamed) volume go.
    async fn remove_retired(&self, old: &DatabaseRow) {
        if let Some(sb) = &old.sandbox_id {
            match self.store.sandboxes().by_id(sb).await {
                Ok(s) => {
                    self.shut_down(old, &s).await;
                    if let Err(e) = self.sandboxes.delete(&s).await {
                        tracing::warn!(sandbox = %sb, error = &e as &dyn std::error::Error, "could not remove a restored database's old VM");
                    }
                }
                Err(StoreError::NotFound) => {}
                Err(e) => {
                    tracing::warn!(sandbox = %sb, error = &e as &dyn std::error::Error, "could not look up a restored database's old VM")
                }
            }
        }
        if let Err(e) = self.remove_strays(old).await {
            tracing::warn!(database = %old.id, error = &e as &dyn std::error::Error, "could not remove a restored database's old volume");
        }
    }

    /// Removes VMs and volumes of database `row` that are not its own: what an interrupted
    /// restore left (`pgdata-<id>-…` volumes, VMs naming the database that its row does not).
    pub(crate) async fn remove_strays(&self, row: &DatabaseRow) -> Result<(), DatabaseError> {
        let row = match self.store.databases().by_id(&row.id).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let filter = pandastack_store::Filter {
            state: None,
            metadata: vec![(super::DATABASE_METADATA.to_owned(), row.id.clone())],
        };
        for s in self
            .store
            .sandboxes()
            .list(&row.workspace_id, &filter, None, 1000)
            .await?
        {
            if row.sandbox_id.as_deref() != Some(s.id.as_str()) {
                tracing::info!(database = %row.id, sandbox = %s.id, "removing a VM the database does not use");
                self.sandboxes.delete(&s).await?;
            }
        }
        // The workspace's volumes named after the database's, whatever host holds them (in a
        // cluster they are the agents', a dead one's included: its delete removes the rows).
        let prefix = format!("{}-", volume_name(&row.id));
        let named = self
            .store
            .volumes()
            .list(&row.workspace_id, Some(prefix.clone()), 1000)
            .await?;
        for v in named
            .into_iter()
            .take_while(|v| v.name.starts_with(&prefix))
        {
            tracing::info!(database = %row.id, volume = %v.name, host = %v.host_id, "removing a volume the database does not use");
            match self.volumes.delete(&row.workspace_id, &v.name).await {
                Ok(()) | Err(VolumeError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Places the archive in the VM's volume and runs the recovery.
    pub(crate) async fn recover(
        &self,
        row: &DatabaseRow,
        sandbox: &str,
        r: &Recovery,
    ) -> Result<(), DatabaseError> {
        let placed = self.place_wal(sandbox, r).await?;
        let target = r.target.clone().unwrap_or_default();
        let out = self
            .script(
                row,
                sandbox,
                "recover",
                &[
                    ("PS_BACKUP_LABEL", r.base.label.as_str()),
                    ("PS_TARGET_TIME", target.as_str()),
                ],
            )
            .await?;
        tracing::info!(database = %row.id, source = %r.source, backup = %r.base.backup, target = %target, wal_files = placed, result = %out.lines().last().unwrap_or(""), "point-in-time recovery");
        Ok(())
    }

    /// Writes every archived `.history` file and every segment from the base backup's start
    /// on into `wal-restore/` on the VM's volume; returns how many.
    async fn place_wal(&self, sandbox: &str, r: &Recovery) -> Result<usize, DatabaseError> {
        let Some(first) = label_segment(&r.base.label) else {
            return Err(DatabaseError::Archive(
                "the base backup's label names no start segment".into(),
            ));
        };
        let dir = format!("{DATA_PATH}/wal-restore");
        self.host.mkdir(sandbox, &dir, true).await?;
        let objects = self.volumes.objects();
        let blobs = objects
            .list_blobs(&r.source_ws, WAL_KIND, &r.source)
            .await
            .map_err(|e| DatabaseError::Archive(pandastack_host::error_chain(&e)))?;
        let mut placed = 0;
        for b in blobs {
            let wanted = match segment_position(&b.name) {
                Some(pos) => pos >= first.as_str(),
                None => b.name.ends_with(".history.gz"),
            };
            let Some(name) = b.name.strip_suffix(".gz") else {
                continue;
            };
            if !wanted {
                continue;
            }
            let gz = objects
                .get_blob(&r.source_ws, WAL_KIND, &r.source, &b.name)
                .await
                .map_err(|e| DatabaseError::Archive(pandastack_host::error_chain(&e)))?;
            let data = tokio::task::spawn_blocking(move || gunzip(&gz))
                .await
                .map_err(|e| DatabaseError::Archive(e.to_string()))?
                .map_err(|e| DatabaseError::Archive(format!("{}: {e}", b.name)))?;
            let body = futures::stream::once(async move { Ok(Bytes::from(data)) });
            self.host
                .write_file(sandbox, &format!("{dir}/{name}"), Box::pin(body))
                .await?;
            placed += 1;
        }
        Ok(placed)
    }
}
