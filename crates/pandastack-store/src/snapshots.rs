//! Snapshot rows.

use sqlx::AnyPool;

use crate::{col, found, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRow {
    pub id: String,
    pub workspace_id: String,
    /// The host the snapshot's files are on.
    pub host_id: String,
    pub sandbox_id: String,
    pub template: String,
    pub size_bytes: i64,
    pub created_at: i64,
    /// Deleted with the last sandbox restored from it (a fork's snapshot the fork did not ask
    /// to keep): see [`SnapshotRepo::delete_unused`]. Never set for a snapshot a user took.
    pub auto_delete: bool,
    /// Unix ms when its files became durable in the object store (a cluster's: from then on
    /// it restores on other hosts too); `None` before, and on a single node. Set by
    /// [`SnapshotRepo::set_durable`], never by an insert.
    pub durable_at: Option<i64>,
}

pub struct SnapshotRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str =
    "id, workspace_id, host_id, sandbox_id, template, size_bytes, created_at, auto_delete";
/// What a read selects: [`COLUMNS`] and when the files became durable.
const READ: &str = "id, workspace_id, host_id, sandbox_id, template, size_bytes, created_at, \
                    auto_delete, durable_at";

fn row(r: &sqlx::any::AnyRow) -> Result<SnapshotRow, StoreError> {
    Ok(SnapshotRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        host_id: col(r, "host_id")?,
        sandbox_id: col(r, "sandbox_id")?,
        template: col(r, "template")?,
        size_bytes: col(r, "size_bytes")?,
        created_at: col(r, "created_at")?,
        auto_delete: col::<i64>(r, "auto_delete")? != 0,
        durable_at: col(r, "durable_at")?,
    })
}

async fn insert<'e, E>(exec: E, s: &SnapshotRow) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    sqlx::query(&format!(
        "INSERT INTO snapshots ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    ))
    .bind(&s.id)
    .bind(&s.workspace_id)
    .bind(&s.host_id)
    .bind(&s.sandbox_id)
    .bind(&s.template)
    .bind(s.size_bytes)
    .bind(s.created_at)
    .bind(i64::from(s.auto_delete))
    .execute(exec)
    .await?;
    Ok(())
}

impl SnapshotRepo<'_> {
    pub async fn insert(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        insert(self.pool, s).await
    }

    /// Inserts `s` if its workspace has room for one more snapshot (count and storage, see
    /// [`crate::quotas`]), in one transaction; otherwise writes nothing.
    pub async fn insert_within_quota(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        crate::quotas::check_locked(&mut tx, &s.workspace_id, crate::Adding::Snapshot).await?;
        insert(&mut *tx, s).await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn get(&self, workspace_id: &str, id: &str) -> Result<SnapshotRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {READ} FROM snapshots WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    pub async fn list(
        &self,
        workspace_id: &str,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        let (ms, id) = after.unwrap_or((i64::MIN, String::new()));
        let rows = sqlx::query(&format!(
            "SELECT {READ} FROM snapshots \
             WHERE workspace_id = $1 AND (created_at > $2 OR (created_at = $2 AND id > $3)) \
             ORDER BY created_at, id LIMIT $4"
        ))
        .bind(workspace_id)
        .bind(ms)
        .bind(&id)
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    pub async fn delete(&self, workspace_id: &str, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM snapshots WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.pool)
            .await?;
        found(done)
    }

    /// Records that snapshot `id`'s files are durable in the object store since `at` (Unix
    /// ms). Whether its row is still there.
    pub async fn set_durable(&self, id: &str, at: i64) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE snapshots SET durable_at = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// When snapshot `id`'s files became durable in the object store (see
    /// [`Self::set_durable`]); `None` while they are only on its host.
    pub async fn durable_at(&self, id: &str) -> Result<Option<i64>, StoreError> {
        let r = sqlx::query("SELECT durable_at FROM snapshots WHERE id = $1")
            .bind(id)
            .fetch_optional(self.pool)
            .await?
            .ok_or(StoreError::NotFound)?;
        col(&r, "durable_at")
    }

    /// Deletes snapshot `id` if it is [`SnapshotRow::auto_delete`] and no sandbox row names it
    /// (`sandboxes.snapshot_id`) any more, in one statement: of callers racing to release it
    /// (the last two children deleted at once) exactly one gets `true`, and a sandbox whose row
    /// is in keeps it. `false`: kept, or already deleted.
    pub async fn delete_unused(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM snapshots WHERE id = $1 AND auto_delete = 1 \
             AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE snapshot_id = $1)",
        )
        .bind(id)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Ids of the [`SnapshotRow::auto_delete`] snapshots on host `host_id` that no sandbox row
    /// names: left behind by a crash between a sandbox's delete and its snapshot's.
    pub async fn unused_on_host(&self, host_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM snapshots s WHERE host_id = $1 AND auto_delete = 1 \
             AND NOT EXISTS (SELECT 1 FROM sandboxes b WHERE b.snapshot_id = s.id) ORDER BY id",
        )
        .bind(host_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }

    /// Ids of every snapshot on host `host_id` (all workspaces).
    pub async fn ids_on_host(&self, host_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM snapshots WHERE host_id = $1")
            .bind(host_id)
            .fetch_all(self.pool)
            .await?;
        rows.iter().map(|r| col(r, "id")).collect()
    }
}
