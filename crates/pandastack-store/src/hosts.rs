//! Hosts: the machines that run sandboxes. Each registers itself when it starts.

use sqlx::AnyPool;

use crate::{col, now_ms, StoreError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    pub id: String,
    /// The machine's hostname, for people.
    pub name: String,
    pub created_at: i64,
    pub last_seen_at: i64,
}

pub struct Hosts<'a> {
    pub(crate) pool: &'a AnyPool,
}

impl Hosts<'_> {
    /// Records that host `id` is up (inserting it the first time).
    pub async fn register(&self, id: &str, name: &str) -> Result<HostRow, StoreError> {
        let now = now_ms();
        sqlx::query(
            "INSERT INTO hosts (id, name, created_at, last_seen_at) VALUES ($1, $2, $3, $3) \
             ON CONFLICT (id) DO UPDATE SET name = $2, last_seen_at = $3",
        )
        .bind(id)
        .bind(name)
        .bind(now)
        .execute(self.pool)
        .await?;
        self.get(id).await
    }

    pub async fn get(&self, id: &str) -> Result<HostRow, StoreError> {
        let r = sqlx::query("SELECT id, name, created_at, last_seen_at FROM hosts WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        Ok(HostRow {
            id: col(&r, "id")?,
            name: col(&r, "name")?,
            created_at: col(&r, "created_at")?,
            last_seen_at: col(&r, "last_seen_at")?,
        })
    }

    /// Gives rows written before hosts existed (host id `''`) to host `id`; returns how many.
    /// Only the first host to start on an old single-host database finds any.
    pub async fn adopt_unowned(&self, id: &str) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let mut n = 0;
        for table in ["sandboxes", "snapshots", "template_builds"] {
            n += sqlx::query(&format!(
                "UPDATE {table} SET host_id = $1 WHERE host_id = ''"
            ))
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        }
        tx.commit().await?;
        Ok(n)
    }
}
