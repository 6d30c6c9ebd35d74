//! A session-held PostgreSQL advisory lock: how one replica of many runs what must run once
//! (the control plane's workers). The lock lives as long as the database session that took it,
//! so a replica that dies, or loses its connection, lets another take it; nothing of ours
//! elects or gossips. On SQLite (one process) the lock is always granted.

use sqlx::pool::PoolConnection;
use sqlx::Any;

use crate::{Backend, Store, StoreError};

/// A held advisory lock: released when dropped (its connection is closed, never returned to
/// the pool; the server frees the lock as soon as its backend sees the connection end).
pub struct AdvisoryLock {
    /// The session holding the lock (`None`: SQLite, nothing to hold).
    conn: Option<PoolConnection<Any>>,
}

impl AdvisoryLock {
    /// `Ok` while the session holding the lock answers; an error means the lock may be gone
    /// (the session ended with the connection) and its holder must stop what it guards.
    pub async fn check(&mut self) -> Result<(), StoreError> {
        if let Some(conn) = self.conn.as_mut() {
            sqlx::query("SELECT 1").execute(&mut **conn).await?;
        }
        Ok(())
    }
}

impl Drop for AdvisoryLock {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            // Closing the session releases the lock; a pooled connection would keep it.
            drop(conn.detach());
        }
    }
}

impl Store {
    /// Takes advisory lock `key` for this session if no other session holds it: `None` when
    /// another does. The lock is held until the returned guard is dropped or its session ends.
    pub async fn try_advisory_lock(&self, key: i64) -> Result<Option<AdvisoryLock>, StoreError> {
        if self.backend == Backend::Sqlite {
            return Ok(Some(AdvisoryLock { conn: None }));
        }
        let mut conn = self.pool.acquire().await?;
        let row = sqlx::query("SELECT pg_try_advisory_lock($1) AS taken")
            .bind(key)
            .fetch_one(&mut *conn)
            .await?;
        let taken: bool = crate::col(&row, "taken")?;
        if !taken {
            return Ok(None);
        }
        Ok(Some(AdvisoryLock { conn: Some(conn) }))
    }
}
