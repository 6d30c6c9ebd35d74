//! Sandbox rows.

use std::collections::BTreeMap;

use sqlx::{Row, SqlitePool};

use crate::StoreError;

/// One sandbox as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRow {
    pub id: String,
    pub workspace_id: String,
    pub template: String,
    pub state: String,
    pub vcpus: i64,
    pub memory_mib: i64,
    pub metadata: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub ttl_seconds: Option<i64>,
    pub idle_timeout_seconds: Option<i64>,
    pub on_timeout: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub last_activity_at: i64,
    pub boot_ms: i64,
    pub boot_mode: String,
    pub snapshot_id: Option<String>,
    pub parent_id: Option<String>,
}

/// List filters.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub state: Option<String>,
    /// Every pair must match.
    pub metadata: Vec<(String, String)>,
}

pub struct Sandboxes<'a> {
    pub(crate) pool: &'a SqlitePool,
}

const COLUMNS: &str = "id, workspace_id, template, state, vcpus, memory_mib, metadata, env, ttl_seconds, idle_timeout_seconds, on_timeout, created_at, expires_at, last_activity_at, boot_ms, boot_mode, snapshot_id, parent_id";

fn row(r: &sqlx::sqlite::SqliteRow) -> Result<SandboxRow, StoreError> {
    Ok(SandboxRow {
        id: r.get("id"),
        workspace_id: r.get("workspace_id"),
        template: r.get("template"),
        state: r.get("state"),
        vcpus: r.get("vcpus"),
        memory_mib: r.get("memory_mib"),
        metadata: serde_json::from_str(r.get("metadata"))?,
        env: serde_json::from_str(r.get("env"))?,
        ttl_seconds: r.get("ttl_seconds"),
        idle_timeout_seconds: r.get("idle_timeout_seconds"),
        on_timeout: r.get("on_timeout"),
        created_at: r.get("created_at"),
        expires_at: r.get("expires_at"),
        last_activity_at: r.get("last_activity_at"),
        boot_ms: r.get("boot_ms"),
        boot_mode: r.get("boot_mode"),
        snapshot_id: r.get("snapshot_id"),
        parent_id: r.get("parent_id"),
    })
}

impl Sandboxes<'_> {
    pub async fn insert(&self, s: &SandboxRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO sandboxes ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        ))
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.template)
        .bind(&s.state)
        .bind(s.vcpus)
        .bind(s.memory_mib)
        .bind(serde_json::to_string(&s.metadata)?)
        .bind(serde_json::to_string(&s.env)?)
        .bind(s.ttl_seconds)
        .bind(s.idle_timeout_seconds)
        .bind(&s.on_timeout)
        .bind(s.created_at)
        .bind(s.expires_at)
        .bind(s.last_activity_at)
        .bind(s.boot_ms)
        .bind(&s.boot_mode)
        .bind(&s.snapshot_id)
        .bind(&s.parent_id)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn get(&self, workspace_id: &str, id: &str) -> Result<SandboxRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(workspace_id)
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// A page of a workspace's sandboxes ordered by `(created_at, id)`, after `after`.
    pub async fn list(
        &self,
        workspace_id: &str,
        filter: &Filter,
        after: Option<(i64, String)>,
        limit: u32,
    ) -> Result<Vec<SandboxRow>, StoreError> {
        // Metadata filters are applied after the query (JSON functions differ between engines);
        // keyset paging therefore fetches in batches until the page is full.
        let mut out = Vec::new();
        let mut cursor = after;
        loop {
            let (ms, id) = cursor.clone().unwrap_or((i64::MIN, String::new()));
            let rows = sqlx::query(&format!(
                "SELECT {COLUMNS} FROM sandboxes WHERE workspace_id = $1 \
                 AND (created_at > $2 OR (created_at = $2 AND id > $3)) \
                 AND ($4 IS NULL OR state = $4) \
                 ORDER BY created_at, id LIMIT $5"
            ))
            .bind(workspace_id)
            .bind(ms)
            .bind(&id)
            .bind(&filter.state)
            .bind(i64::from(limit) + 1)
            .fetch_all(self.pool)
            .await?;
            let exhausted = rows.len() <= limit as usize;
            for r in &rows {
                let s = row(r)?;
                cursor = Some((s.created_at, s.id.clone()));
                if filter
                    .metadata
                    .iter()
                    .all(|(k, v)| s.metadata.get(k) == Some(v))
                {
                    out.push(s);
                    if out.len() > limit as usize {
                        return Ok(out);
                    }
                }
            }
            if exhausted {
                return Ok(out);
            }
        }
    }

    pub async fn count_active(&self, workspace_id: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query(
            "SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = $1 AND state <> 'hibernated'",
        )
        .bind(workspace_id)
        .fetch_one(self.pool)
        .await?
        .get("n"))
    }

    pub async fn set_state(&self, id: &str, state: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET state = $1 WHERE id = $2")
            .bind(state)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Records API activity (for the idle timeout).
    pub async fn touch(&self, id: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE sandboxes SET last_activity_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Replaces timeouts and metadata (the caller merged the patch).
    pub async fn update(&self, s: &SandboxRow) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE sandboxes SET metadata = $1, ttl_seconds = $2, idle_timeout_seconds = $3, expires_at = $4 WHERE workspace_id = $5 AND id = $6",
        )
        .bind(serde_json::to_string(&s.metadata)?)
        .bind(s.ttl_seconds)
        .bind(s.idle_timeout_seconds)
        .bind(s.expires_at)
        .bind(&s.workspace_id)
        .bind(&s.id)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM sandboxes WHERE id = $1")
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    /// Every sandbox id on record (all workspaces), for reconciling with the host at start.
    pub async fn all_ids(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query("SELECT id FROM sandboxes")
            .fetch_all(self.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get("id")).collect())
    }

    /// Sandboxes whose TTL has passed or that have been idle past their idle timeout at `now`.
    pub async fn expired(&self, now: i64) -> Result<Vec<SandboxRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM sandboxes WHERE state <> 'hibernated' AND \
             ((expires_at IS NOT NULL AND expires_at <= $1) OR \
              (idle_timeout_seconds IS NOT NULL AND last_activity_at + idle_timeout_seconds * 1000 <= $1))"
        ))
        .bind(now)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }
}
