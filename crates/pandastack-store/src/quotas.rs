//! Per-workspace storage quotas: counts of snapshots, hibernated sandboxes and template builds,
//! and the host disk they take together. Checks answer before work starts; the writes that
//! make a snapshot or a template build exist check again in the same transaction, so those
//! counts never pass their limit. A hibernation is checked before it starts only: two at once
//! can both pass the last place (the next one is refused).

use sqlx::AnyPool;

use crate::{col, found, StoreError};

/// A workspace's storage limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageQuotas {
    pub max_snapshots: i64,
    pub max_hibernated: i64,
    pub max_template_builds: i64,
    /// Host disk of snapshots, hibernated sandboxes and template builds together, GiB.
    pub max_storage_gb: i64,
}

/// What a workspace keeps against its [`StorageQuotas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StorageUse {
    pub snapshots: i64,
    pub hibernated: i64,
    pub template_builds: i64,
    pub snapshot_bytes: i64,
    pub hibernated_bytes: i64,
    pub template_bytes: i64,
}

impl StorageUse {
    pub fn bytes(&self) -> i64 {
        self.snapshot_bytes + self.hibernated_bytes + self.template_bytes
    }
}

/// What a caller is about to add.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adding {
    Snapshot,
    Hibernation,
    TemplateBuild,
}

impl Adding {
    /// The plural the limit is named by in errors.
    pub fn what(self) -> &'static str {
        match self {
            Adding::Snapshot => "snapshots",
            Adding::Hibernation => "hibernated sandboxes",
            Adding::TemplateBuild => "template builds",
        }
    }
}

pub struct Quotas<'a> {
    pub(crate) pool: &'a AnyPool,
}

const GIB: i64 = 1 << 30;

impl Quotas<'_> {
    /// Sets every workspace's storage quotas, and those a workspace created later starts with
    /// (the server does at start, as for volumes).
    pub async fn set_all(&self, q: &StorageQuotas) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for table in ["workspaces", "workspace_defaults"] {
            sqlx::query(&format!(
                "UPDATE {table} SET max_snapshots = $1, max_hibernated = $2, \
                 max_template_builds = $3, max_storage_gb = $4"
            ))
            .bind(q.max_snapshots)
            .bind(q.max_hibernated)
            .bind(q.max_template_builds)
            .bind(q.max_storage_gb)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Workspace `ws`'s storage quotas.
    pub async fn get(&self, ws: &str) -> Result<StorageQuotas, StoreError> {
        get(self.pool, ws).await
    }

    /// What workspace `ws` keeps against its quotas.
    pub async fn used(&self, ws: &str) -> Result<StorageUse, StoreError> {
        used(self.pool, ws).await
    }

    /// Whether workspace `ws` may add one more of `adding`: [`StoreError::CountLimit`] when its
    /// count is at the limit, [`StoreError::StorageQuota`] when its storage is at or over the
    /// quota (the size of what is added is not known before it exists).
    pub async fn check(&self, ws: &str, adding: Adding) -> Result<(), StoreError> {
        let q = get(self.pool, ws).await?;
        let u = used(self.pool, ws).await?;
        within(&q, &u, adding)
    }
}

/// Locks workspace `ws` for the rest of `tx` (a write first: SQLite takes its write lock,
/// PostgreSQL locks the row) and checks that one more of `adding` fits.
pub(crate) async fn check_locked(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ws: &str,
    adding: Adding,
) -> Result<(), StoreError> {
    let locked = sqlx::query("UPDATE workspaces SET max_snapshots = max_snapshots WHERE id = $1")
        .bind(ws)
        .execute(&mut **tx)
        .await?;
    found(locked)?;
    let q = get(&mut **tx, ws).await?;
    let u = used(&mut **tx, ws).await?;
    within(&q, &u, adding)
}

fn within(q: &StorageQuotas, u: &StorageUse, adding: Adding) -> Result<(), StoreError> {
    let (count, limit) = match adding {
        Adding::Snapshot => (u.snapshots, q.max_snapshots),
        Adding::Hibernation => (u.hibernated, q.max_hibernated),
        Adding::TemplateBuild => (u.template_builds, q.max_template_builds),
    };
    if count >= limit {
        return Err(StoreError::CountLimit {
            what: adding.what(),
            limit,
        });
    }
    if u.bytes() >= q.max_storage_gb.saturating_mul(GIB) {
        return Err(StoreError::StorageQuota {
            limit_gb: q.max_storage_gb,
            used_bytes: u.bytes(),
        });
    }
    Ok(())
}

async fn get<'e, E>(exec: E, ws: &str) -> Result<StorageQuotas, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let r = sqlx::query(
        "SELECT max_snapshots, max_hibernated, max_template_builds, max_storage_gb \
         FROM workspaces WHERE id = $1",
    )
    .bind(ws)
    .fetch_one(exec)
    .await?;
    Ok(StorageQuotas {
        max_snapshots: col(&r, "max_snapshots")?,
        max_hibernated: col(&r, "max_hibernated")?,
        max_template_builds: col(&r, "max_template_builds")?,
        max_storage_gb: col(&r, "max_storage_gb")?,
    })
}

async fn used<'e, E>(exec: E, ws: &str) -> Result<StorageUse, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    // One statement, so a transaction's executor is used once.
    let r = sqlx::query(
        "SELECT \
           (SELECT COUNT(*) FROM snapshots WHERE workspace_id = $1) AS snapshots, \
           (SELECT CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) FROM snapshots \
              WHERE workspace_id = $1) AS snapshot_bytes, \
           (SELECT COUNT(*) FROM sandboxes WHERE workspace_id = $1 AND state = 'hibernated') \
              AS hibernated, \
           (SELECT CAST(COALESCE(SUM(image_bytes), 0) AS BIGINT) FROM sandboxes \
              WHERE workspace_id = $1 AND state = 'hibernated') AS hibernated_bytes, \
           (SELECT COUNT(*) FROM template_builds WHERE workspace_id = $1 AND status <> 'failed') \
              AS template_builds, \
           (SELECT CAST(COALESCE(SUM(image_bytes), 0) AS BIGINT) FROM template_builds \
              WHERE workspace_id = $1 AND status <> 'failed') AS template_bytes",
    )
    .bind(ws)
    .fetch_one(exec)
    .await?;
    Ok(StorageUse {
        snapshots: col(&r, "snapshots")?,
        hibernated: col(&r, "hibernated")?,
        template_builds: col(&r, "template_builds")?,
        snapshot_bytes: col(&r, "snapshot_bytes")?,
        hibernated_bytes: col(&r, "hibernated_bytes")?,
        template_bytes: col(&r, "template_bytes")?,
    })
}
