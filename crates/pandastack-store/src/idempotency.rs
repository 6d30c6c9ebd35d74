//! Idempotency records: the response to a create, replayed when the same key comes again. A key
//! is reserved (status 0) before the work starts, so a concurrent retry with the same key sees
//! it in progress instead of creating a second object.

use sqlx::AnyPool;

use crate::{col, now_ms, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// Hash of method, path and body of the original request.
    pub request_hash: String,
    pub status: i64,
    pub body: String,
}

/// Outcome of [`Idempotency::reserve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key is ours: do the work, then [`Idempotency::put`] (or [`Idempotency::release`]).
    Reserved,
    /// The key is taken: a finished response (status ≠ 0) or one in progress (status 0).
    Existing(IdempotencyRecord),
}

pub struct Idempotency<'a> {
    pub(crate) pool: &'a AnyPool,
}

fn record(r: &sqlx::any::AnyRow) -> Result<IdempotencyRecord, StoreError> {
    Ok(IdempotencyRecord {
        request_hash: col(r, "request_hash")?,
        status: col(r, "status")?,
        body: col(r, "body")?,
    })
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
        r.as_ref().map(record).transpose()
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

    /// Claims `key` for a request with `request_hash`, unless a live record holds it.
    pub async fn reserve(
        &self,
        workspace_id: &str,
        key: &str,
        request_hash: &str,
    ) -> Result<Reservation, StoreError> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE workspace_id = $1 AND key = $2 AND created_at <= $3",
        )
        .bind(workspace_id)
        .bind(key)
        .bind(now - TTL_MS)
        .execute(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (workspace_id, key, request_hash, status, body, created_at) VALUES ($1, $2, $3, 0, '', $4) ON CONFLICT (workspace_id, key) DO NOTHING",
        )
        .bind(workspace_id)
        .bind(key)
        .bind(request_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let out = if inserted == 1 {
            Reservation::Reserved
        } else {
            let r = sqlx::query(
                "SELECT request_hash, status, body FROM idempotency_keys WHERE workspace_id = $1 AND key = $2",
            )
            .bind(workspace_id)
            .bind(key)
            .fetch_one(&mut *tx)
            .await?;
            Reservation::Existing(record(&r)?)
        };
        tx.commit().await?;
        Ok(out)
    }

    /// Gives up a reservation (the work failed; a retry may try again).
    pub async fn release(&self, workspace_id: &str, key: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency_keys WHERE workspace_id = $1 AND key = $2 AND status = 0",
        )
        .bind(workspace_id)
        .bind(key)
        .execute(self.pool)
        .await?;
        Ok(())
    }
}
