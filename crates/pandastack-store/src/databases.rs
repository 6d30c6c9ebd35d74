//! Managed-database rows.

use sqlx::AnyPool;

use crate::{col, found, StoreError};

/// Where a database row is in its life (whether its VM runs is the sandbox row's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseRowState {
    /// Written before its volume and VM are made; a crash here is undone at start-up.
    Creating,
    Ready,
}

impl DatabaseRowState {
    pub fn as_str(self) -> &'static str {
        match self {
            DatabaseRowState::Creating => "creating",
            DatabaseRowState::Ready => "ready",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "creating" => DatabaseRowState::Creating,
            "ready" => DatabaseRowState::Ready,
            _ => return None,
        })
    }
}

/// One database as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseRow {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub version: i64,
    /// The host its volume (and so its VM) is on.
    pub host_id: String,
    pub state: DatabaseRowState,
    pub volume_id: String,
    /// The sandbox serving it now (`None`: no VM; the next use starts one).
    pub sandbox_id: Option<String>,
    pub role_name: String,
    pub password: String,
    pub size_gb: i64,
    /// Memory of its VM (MiB).
    pub memory_mb: i64,
    pub idle_seconds: i64,
    pub parent_id: Option<String>,
    pub created_at: i64,
}

pub struct DatabaseRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, workspace_id, name, version, host_id, state, volume_id, sandbox_id, \
                       role_name, password, size_gb, idle_seconds, parent_id, created_at, memory_mb";

fn row(r: &sqlx::any::AnyRow) -> Result<DatabaseRow, StoreError> {
    Ok(DatabaseRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        version: col(r, "version")?,
        host_id: col(r, "host_id")?,
        state: crate::parsed(r, "state", DatabaseRowState::parse)?,
        volume_id: col(r, "volume_id")?,
        sandbox_id: col(r, "sandbox_id")?,
        role_name: col(r, "role_name")?,
        password: col(r, "password")?,
        size_gb: col(r, "size_gb")?,
        idle_seconds: col(r, "idle_seconds")?,
        parent_id: col(r, "parent_id")?,
        created_at: col(r, "created_at")?,
        memory_mb: col(r, "memory_mb")?,
    })
}

impl DatabaseRepo<'_> {
    /// Inserts a new row; [`StoreError::Conflict`] when the workspace has the name already.
    pub async fn insert(&self, d: &DatabaseRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO databases ({COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .bind(&d.id)
        .bind(&d.workspace_id)
        .bind(&d.name)
        .bind(d.version)
        .bind(&d.host_id)
        .bind(d.state.as_str())
        .bind(&d.volume_id)
        .bind(&d.sandbox_id)
        .bind(&d.role_name)
        .bind(&d.password)
        .bind(d.size_gb)
        .bind(d.idle_seconds)
        .bind(&d.parent_id)
        .bind(d.created_at)
        .bind(d.memory_mb)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn set_ready(&self, id: &str) -> Result<(), StoreError> {
        found(
            sqlx::query("UPDATE databases SET state = 'ready' WHERE id = $1")
                .bind(id)
                .execute(self.pool)
                .await?,
        )
    }

    pub async fn set_volume(&self, id: &str, volume_id: &str) -> Result<(), StoreError> {
        found(
            sqlx::query("UPDATE databases SET volume_id = $2 WHERE id = $1")
                .bind(id)
                .bind(volume_id)
                .execute(self.pool)
                .await?,
        )
    }

    /// Records the sandbox that serves the database now (`None`: none).
    pub async fn set_sandbox(&self, id: &str, sandbox_id: Option<&str>) -> Result<(), StoreError> {
        found(
            sqlx::query("UPDATE databases SET sandbox_id = $2 WHERE id = $1")
                .bind(id)
                .bind(sandbox_id)
                .execute(self.pool)
                .await?,
        )
    }

    /// Puts a restored volume in place of database `id`'s, in one transaction: volume
    /// `current` is renamed `retired_name` (to be deleted), volume `restored` takes the name
    /// `name`, and the row names `restored` and the VM `sandbox_id` that serves it (`None`:
    /// none yet).
    pub async fn swap_volume(
        &self,
        id: &str,
        current: &str,
        retired_name: &str,
        restored: &str,
        name: &str,
        sandbox_id: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        found(
            sqlx::query("UPDATE volumes SET name = $2 WHERE id = $1")
                .bind(current)
                .bind(retired_name)
                .execute(&mut *tx)
                .await?,
        )?;
        found(
            sqlx::query("UPDATE volumes SET name = $2 WHERE id = $1")
                .bind(restored)
                .bind(name)
                .execute(&mut *tx)
                .await?,
        )?;
        found(
            sqlx::query("UPDATE databases SET volume_id = $2, sandbox_id = $3 WHERE id = $1")
                .bind(id)
                .bind(restored)
                .bind(sandbox_id)
                .execute(&mut *tx)
                .await?,
        )?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn set_password(&self, id: &str, password: &str) -> Result<(), StoreError> {
        found(
            sqlx::query("UPDATE databases SET password = $2 WHERE id = $1")
                .bind(id)
                .bind(password)
                .execute(self.pool)
                .await?,
        )
    }

    /// A workspace's database by id or by name.
    pub async fn get(
        &self,
        workspace_id: &str,
        id_or_name: &str,
    ) -> Result<DatabaseRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases WHERE workspace_id = $1 AND (id = $2 OR name = $2)"
        ))
        .bind(workspace_id)
        .bind(id_or_name)
        .fetch_one(self.pool)
        .await?;
        row(&r)
    }

    /// Databases whose volume is on a host that is `dead` (lost with it: failed over from
    /// their base backup and archived WAL onto a new volume elsewhere).
    pub async fn on_dead_hosts(&self) -> Result<Vec<DatabaseRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases d WHERE EXISTS (SELECT 1 FROM volumes v \
             JOIN hosts h ON h.id = v.host_id WHERE v.id = d.volume_id AND h.state = 'dead') \
             ORDER BY created_at, id"
        ))
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Databases (every workspace's) whose volume is on host `host_id` (a drain moves them).
    pub async fn with_volume_on(&self, host_id: &str) -> Result<Vec<DatabaseRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases d WHERE EXISTS (SELECT 1 FROM volumes v \
             WHERE v.id = d.volume_id AND v.host_id = $1) ORDER BY created_at, id"
        ))
        .bind(host_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Any workspace's database by id (the connection front routes by id alone).
    pub async fn by_id(&self, id: &str) -> Result<DatabaseRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM databases WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        row(&r)
    }

    /// The database a sandbox serves, if it serves one.
    pub async fn by_sandbox(&self, sandbox_id: &str) -> Result<Option<DatabaseRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases WHERE sandbox_id = $1"
        ))
        .bind(sandbox_id)
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(row).transpose()
    }

    /// A page of a workspace's databases by name after `after` (one more than `limit` when
    /// there are more).
    pub async fn list(
        &self,
        workspace_id: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<DatabaseRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases WHERE workspace_id = $1 AND name > $2 \
             ORDER BY name LIMIT $3"
        ))
        .bind(workspace_id)
        .bind(after.unwrap_or_default())
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// Every database row on host `host_id`, for start-up reconciliation.
    pub async fn on_host(&self, host_id: &str) -> Result<Vec<DatabaseRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM databases WHERE host_id = $1"
        ))
        .bind(host_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM databases WHERE id = $1")
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }
}
