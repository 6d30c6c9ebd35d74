//! Snapshot rows.

use sqlx::{Row, SqlitePool};

use crate::StoreError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRow {
    pub id: String,
    pub workspace_id: String,
    pub sandbox_id: String,
    pub template: String,
    pub size_bytes: i64,
    pub created_at: i64,
}

pub struct Snapshots<'a> {
    pub(crate) pool: &'a SqlitePool,
}

fn row(r: &sqlx::sqlite::SqliteRow) -> SnapshotRow {
    SnapshotRow {
        id: r.get("id"),
        workspace_id: r.get("workspace_id"),
        sandbox_id: r.get("sandbox_id"),
        template: r.get("template"),
        size_bytes: r.get("size_bytes"),
        created_at: r.get("created_at"),
    }
}

impl Snapshots<'_> {
    pub async fn insert(&self, s: &SnapshotRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO snapshots (id, workspace_id, sandbox_id, template, size_bytes, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.sandbox_id)
        .bind(&s.template)
        .bind(s.size_bytes)
        .bind(s.created_at)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn get(&self, workspace_id: &str, id: &str) -> Result<SnapshotRow, StoreError> {
        let r = sqlx::query(
            "SELECT id, workspace_id, sandbox_id, template, size_bytes, created_at FROM snapshots WHERE workspace_id = $1 AND id = $2",
        )
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        Ok(row(&r))
    }

    pub async fn list(
        &self,
        workspace_id: &str,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SnapshotRow>, StoreError> {
        let (ms, id) = after.unwrap_or((i64::MIN, String::new()));
        let rows = sqlx::query(
            "SELECT id, workspace_id, sandbox_id, template, size_bytes, created_at FROM snapshots \
             WHERE workspace_id = $1 AND (created_at > $2 OR (created_at = $2 AND id > $3)) \
             ORDER BY created_at, id LIMIT $4",
        )
        .bind(workspace_id)
        .bind(ms)
        .bind(&id)
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        Ok(rows.iter().map(row).collect())
    }

    pub async fn delete(&self, workspace_id: &str, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query("DELETE FROM snapshots WHERE workspace_id = $1 AND id = $2")
            .bind(workspace_id)
            .bind(id)
            .execute(self.pool)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn all_ids(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM snapshots")
            .fetch_all(self.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get("id")).collect())
    }
}
