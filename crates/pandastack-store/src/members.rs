//! A workspace's members (see migration 0030). The role is checked by the API; this keeps
//! the one rule the rows themselves must hold: a workspace that has owners keeps at least one.
//! Changes that could take its last owner away lock the workspace's row first, so two racing
//! demotions cannot both pass the count.

use sqlx::AnyPool;

use crate::{col, found, new_id, now_ms, StoreError};

/// A member as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    /// Lower case; unique in the workspace.
    pub email: String,
    /// `owner`, `admin`, `developer` or `viewer`.
    pub role: String,
    pub created_at: i64,
    /// Its keys that are not revoked.
    pub active_keys: i64,
}

/// Why a member change was refused.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("member not found")]
    NotFound,
    #[error("a member with this email already exists in the workspace")]
    EmailTaken,
    #[error("the workspace's last owner cannot be removed or lose the owner role")]
    LastOwner,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for MemberError {
    fn from(e: sqlx::Error) -> Self {
        MemberError::Store(e.into())
    }
}

pub struct MemberRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, workspace_id, name, email, role, created_at, \
     (SELECT COUNT(*) FROM api_keys k WHERE k.member_id = members.id AND k.revoked_at IS NULL) AS active_keys";

fn row(r: &sqlx::any::AnyRow) -> Result<MemberRow, StoreError> {
    Ok(MemberRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        email: col(r, "email")?,
        role: col(r, "role")?,
        created_at: col(r, "created_at")?,
        active_keys: col(r, "active_keys")?,
    })
}

/// Takes workspace `ws`'s row lock (PostgreSQL) or the write lock (SQLite) for the rest of
/// `tx`: member changes of one workspace go one at a time.
async fn lock_workspace(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ws: &str,
) -> Result<(), StoreError> {
    let done = sqlx::query("UPDATE workspaces SET name = name WHERE id = $1")
        .bind(ws)
        .execute(&mut **tx)
        .await?;
    found(done)
}

/// Member `id`'s role, read in `tx`.
async fn role_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    ws: &str,
    id: &str,
) -> Result<String, MemberError> {
    let r = sqlx::query("SELECT role FROM members WHERE workspace_id = $1 AND id = $2")
        .bind(ws)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    match r {
        Some(r) => Ok(col(&r, "role")?),
        None => Err(MemberError::NotFound),
    }
}

async fn owners(tx: &mut sqlx::Transaction<'_, sqlx::Any>, ws: &str) -> Result<i64, StoreError> {
    let r =
        sqlx::query("SELECT COUNT(*) AS n FROM members WHERE workspace_id = $1 AND role = 'owner'")
            .bind(ws)
            .fetch_one(&mut **tx)
            .await?;
    col(&r, "n")
}

impl MemberRepo<'_> {
    /// Adds a member to workspace `ws`; `email` is stored as given (callers lower-case it).
    pub async fn create(
        &self,
        ws: &str,
        name: &str,
        email: &str,
        role: &str,
    ) -> Result<MemberRow, MemberError> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, ws).await?;
        let taken = sqlx::query("SELECT id FROM members WHERE workspace_id = $1 AND email = $2")
            .bind(ws)
            .bind(email)
            .fetch_optional(&mut *tx)
            .await?;
        if taken.is_some() {
            return Err(MemberError::EmailTaken);
        }
        let id = new_id("mem-");
        sqlx::query(
            "INSERT INTO members (id, workspace_id, name, email, role, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(ws)
        .bind(name)
        .bind(email)
        .bind(role)
        .bind(now_ms())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.get(ws, &id).await
    }

    /// Workspace `ws`'s members, oldest first.
    pub async fn list(&self, ws: &str) -> Result<Vec<MemberRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM members WHERE workspace_id = $1 ORDER BY created_at, id"
        ))
        .bind(ws)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    pub async fn get(&self, ws: &str, id: &str) -> Result<MemberRow, MemberError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM members WHERE workspace_id = $1 AND id = $2"
        ))
        .bind(ws)
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        match r {
            Some(r) => Ok(row(&r)?),
            None => Err(MemberError::NotFound),
        }
    }

    /// Changes a member's name and/or role; refuses to take the owner role from the last owner.
    pub async fn update(
        &self,
        ws: &str,
        id: &str,
        name: Option<&str>,
        role: Option<&str>,
    ) -> Result<MemberRow, MemberError> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, ws).await?;
        let current = role_in(&mut tx, ws, id).await?;
        if let Some(role) = role {
            if current == "owner" && role != "owner" && owners(&mut tx, ws).await? <= 1 {
                return Err(MemberError::LastOwner);
            }
        }
        sqlx::query(
            "UPDATE members SET name = COALESCE($1, name), role = COALESCE($2, role) \
             WHERE workspace_id = $3 AND id = $4",
        )
        .bind(name)
        .bind(role)
        .bind(ws)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        self.get(ws, id).await
    }

    /// Removes a member and revokes its keys (one transaction); refuses the last owner.
    pub async fn delete(&self, ws: &str, id: &str) -> Result<(), MemberError> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, ws).await?;
        let role = role_in(&mut tx, ws, id).await?;
        if role == "owner" && owners(&mut tx, ws).await? <= 1 {
            return Err(MemberError::LastOwner);
        }
        sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE member_id = $2 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM members WHERE workspace_id = $1 AND id = $2")
            .bind(ws)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }
}
