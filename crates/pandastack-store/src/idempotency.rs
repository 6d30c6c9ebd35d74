//! Idempotency records: the response to a create, replayed when the same key comes again.

use sqlx::{Row, SqlitePool};

use crate::{now_ms, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// Hash of method, path and body of the original request.
    pub request_hash: String,
    pub status: i64,
    pub body: String,
}

pub struct Idempotency<'a> {
    pub(crate) pool: &'a SqlitePool,
}

/// Records older than this are ignored (and may be purged).
const TTL_MS: i64 = 24 * 3600 * 1000;

impl Idempotency<'_> {
    pub async fn get(
        &self,
        workspace_id: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let r = sqlx::query(
            "SELECT request_hash, status, body FROM idempotency_keys WHERE workspace_id = $1 AND key = $2 AND created_at > $3",
        )
        .bind(workspace_id)
        .bind(key)
        .bind(now_ms() - TTL_MS)
        .fetch_optional(self.pool)
        .await?;
        Ok(r.map(|r| IdempotencyRecord {
            request_hash: r.get("request_hash"),
            status: r.get("status"),
            body: r.get("body"),
        }))
    }

    pub async fn put(
        &self,
        workspace_id: &str,
        key: &str,
        rec: &IdempotencyRecord,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM idempotency_keys WHERE workspace_id = $1 AND key = $2")
            .bind(workspace_id)
            .bind(key)
            .execute(self.pool)
            .await?;
        sqlx::query(
            "INSERT INTO idempotency_keys (workspace_id, key, request_hash, status, body, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(workspace_id)
        .bind(key)
        .bind(&rec.request_hash)
        .bind(rec.status)
        .bind(&rec.body)
        .bind(now_ms())
        .execute(self.pool)
        .await?;
        Ok(())
    }
}
