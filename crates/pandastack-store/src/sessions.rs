//! Web console sessions (see migration 0032): a session stands for the API key a browser signed
//! in with. The cookie's secret is `pss_` + 64 hex digits of randomness; only its SHA-256 is
//! stored, and a lookup compares hashes in constant time, as for keys. A session is valid
//! until it expires or is revoked; whether its key still works is the caller's to check.

use sha2::{Digest, Sha256};
use sqlx::AnyPool;
use subtle::ConstantTimeEq;

use crate::{col, StoreError};

/// A console session (no secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRow {
    /// The SHA-256 of the cookie's secret (hex).
    pub id: String,
    /// The API key the session acts as.
    pub key_id: String,
    /// What every state-changing request of the session must send in `X-CSRF-Token`.
    pub csrf_token: String,
    /// Unix ms.
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

pub struct SessionRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, key_id, csrf_token, created_at, expires_at, revoked_at";

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn random_hex() -> String {
    let mut b = [0u8; 32];
    rand::fill(&mut b);
    hex::encode(b)
}

fn row(r: &sqlx::any::AnyRow) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        id: col(r, "id")?,
        key_id: col(r, "key_id")?,
        csrf_token: col(r, "csrf_token")?,
        created_at: col(r, "created_at")?,
        expires_at: col(r, "expires_at")?,
        revoked_at: col(r, "revoked_at")?,
    })
}

impl SessionRepo<'_> {
    /// Starts a session for key `key_id` at `now` (unix ms) that lasts `ttl_ms`; returns it and
    /// the cookie's secret (shown once, never stored).
    pub async fn create(
        &self,
        key_id: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<(SessionRow, String), StoreError> {
        let secret = format!("pss_{}", random_hex());
        let s = SessionRow {
            id: hash(&secret),
            key_id: key_id.to_owned(),
            csrf_token: random_hex(),
            created_at: now,
            expires_at: now.saturating_add(ttl_ms.max(1)),
            revoked_at: None,
        };
        sqlx::query(&format!(
            "INSERT INTO console_sessions ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, NULL)"
        ))
        .bind(&s.id)
        .bind(&s.key_id)
        .bind(&s.csrf_token)
        .bind(s.created_at)
        .bind(s.expires_at)
        .execute(self.pool)
        .await?;
        Ok((s, secret))
    }

    /// The session a cookie's secret belongs to, if it is neither revoked nor expired at `now`.
    pub async fn verify(&self, secret: &str, now: i64) -> Result<Option<SessionRow>, StoreError> {
        if !secret.starts_with("pss_") || secret.len() > 200 {
            return Ok(None);
        }
        let h = hash(secret);
        let found = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM console_sessions WHERE id = $1"
        ))
        .bind(&h)
        .fetch_optional(self.pool)
        .await?;
        let Some(r) = found else {
            return Ok(None);
        };
        let s = row(&r)?;
        // The lookup used the hash as an index key; the final comparison does not leak timing.
        if !bool::from(s.id.as_bytes().ct_eq(h.as_bytes())) {
            return Ok(None);
        }
        if s.revoked_at.is_some() || s.expires_at <= now {
            return Ok(None);
        }
        Ok(Some(s))
    }

    /// Revokes the session with id `id` (its secret's hash) at `now`; `false` if there was no
    /// such session still in force.
    pub async fn revoke(&self, id: &str, now: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE console_sessions SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(id)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Deletes sessions that expired (or were revoked) before `before`; how many.
    pub async fn prune(&self, before: i64) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM console_sessions WHERE expires_at < $1 \
             OR (revoked_at IS NOT NULL AND revoked_at < $1)",
        )
        .bind(before)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected())
    }
}
