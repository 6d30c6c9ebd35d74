//! Workspaces and API keys. A key is `pds_` + 64 hex digits of randomness; only its SHA-256 is
//! stored, and verification compares hashes in constant time. An admin key (an operator's,
//! [`Keys::create_admin`]) may also call the operator routes; it still belongs to a workspace.

use sha2::{Digest, Sha256};
use sqlx::AnyPool;
use subtle::ConstantTimeEq;

use crate::{col, found, new_id, now_ms, StoreError};

/// A tenant: every object belongs to exactly one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub max_sandboxes: i64,
    pub creates_per_minute: i64,
}

/// An API key row (no secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    pub id: String,
    pub workspace_id: String,
    pub name: String,
    pub prefix: String,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// An operator's key: it may also call the operator routes (`/v1/hosts`).
    pub admin: bool,
    /// What it may do: `<kind>:<action>` scopes (`pandastack_api_types::Scope`), `*` for all.
    pub scopes: Vec<String>,
    /// Unix ms after which it no longer works.
    pub expires_at: Option<i64>,
    /// Unix ms it was last used at (to within a minute).
    pub last_used_at: Option<i64>,
    /// The workspace member it belongs to (`None`: a workspace key).
    pub member_id: Option<String>,
    /// That member's role (`owner`, `admin`, `developer`, `viewer`), read with the key.
    pub role: Option<String>,
}

/// What a new key may do: its scopes (`*` for all) and when it expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyGrant {
    pub scopes: Vec<String>,
    pub expires_at: Option<i64>,
    /// The member the key is for.
    pub member_id: Option<String>,
}

impl Default for KeyGrant {
    fn default() -> Self {
        Self {
            scopes: vec!["*".into()],
            expires_at: None,
            member_id: None,
        }
    }
}

const KEY_COLUMNS: &str =
    "id, workspace_id, name, prefix, created_at, revoked_at, admin, scopes, expires_at, last_used_at, \
     member_id, (SELECT m.role FROM members m WHERE m.id = api_keys.member_id) AS member_role";

pub struct Keys<'a> {
    pub(crate) pool: &'a AnyPool,
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn new_secret() -> String {
    let mut b = [0u8; 32];
    rand::fill(&mut b);
    format!("pds_{}", hex::encode(b))
}

fn key_row(r: &sqlx::any::AnyRow) -> Result<KeyRow, StoreError> {
    let scopes: String = col(r, "scopes")?;
    Ok(KeyRow {
        scopes: serde_json::from_str(&scopes)?,
        expires_at: col(r, "expires_at")?,
        last_used_at: col(r, "last_used_at")?,
        member_id: col(r, "member_id")?,
        role: col(r, "member_role")?,
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        prefix: col(r, "prefix")?,
        created_at: col(r, "created_at")?,
        revoked_at: col(r, "revoked_at")?,
        admin: col::<i64>(r, "admin")? != 0,
    })
}

fn workspace(r: &sqlx::any::AnyRow) -> Result<Workspace, StoreError> {
    Ok(Workspace {
        id: col(r, "id")?,
        name: col(r, "name")?,
        max_sandboxes: col(r, "max_sandboxes")?,
        creates_per_minute: col(r, "creates_per_minute")?,
    })
}

impl Keys<'_> {
    /// Creates a workspace with default limits and one key; returns the key's secret.
    pub async fn create_workspace_with_key(
        &self,
        name: &str,
        max_sandboxes: i64,
        creates_per_minute: i64,
    ) -> Result<(Workspace, KeyRow, String), StoreError> {
        let ws = self
            .create_workspace(name, max_sandboxes, creates_per_minute)
            .await?;
        let (row, secret) = self.create(&ws.id, "default").await?;
        Ok((ws, row, secret))
    }

    /// Creates a workspace (no keys yet).
    pub async fn create_workspace(
        &self,
        name: &str,
        max_sandboxes: i64,
        creates_per_minute: i64,
    ) -> Result<Workspace, StoreError> {
        let ws = Workspace {
            id: new_id("ws-"),
            name: name.to_owned(),
            max_sandboxes,
            creates_per_minute,
        };
        // Storage and volume quotas as the server last set them on every workspace.
        sqlx::query(
            "INSERT INTO workspaces (id, name, created_at, max_sandboxes, creates_per_minute, \
               max_volume_gb, max_snapshots, max_hibernated, max_template_builds, max_storage_gb) \
             SELECT $1, $2, $3, $4, $5, \
               max_volume_gb, max_snapshots, max_hibernated, max_template_builds, max_storage_gb \
             FROM workspace_defaults WHERE id = 1",
        )
        .bind(&ws.id)
        .bind(&ws.name)
        .bind(now_ms())
        .bind(ws.max_sandboxes)
        .bind(ws.creates_per_minute)
        .execute(self.pool)
        .await?;
        Ok(ws)
    }

    /// Sets every workspace's quota on the total size of its volumes (GiB), and the quota a
    /// workspace created later starts with.
    pub async fn set_volume_quota_all(&self, max_volume_gb: i64) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        for table in ["workspaces", "workspace_defaults"] {
            sqlx::query(&format!("UPDATE {table} SET max_volume_gb = $1"))
                .bind(max_volume_gb)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// A workspace's volume quota (GiB).
    pub async fn volume_quota(&self, id: &str) -> Result<i64, StoreError> {
        let r = sqlx::query("SELECT max_volume_gb FROM workspaces WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        col(&r, "max_volume_gb")
    }

    /// Every workspace, oldest first (administration; never for a user request).
    pub async fn workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, name, max_sandboxes, creates_per_minute FROM workspaces ORDER BY created_at, id",
        )
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(workspace).collect()
    }

    /// A key by id, in any workspace (administration; never for a user request).
    pub async fn get_any(&self, id: &str) -> Result<KeyRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        key_row(&r)
    }

    /// Number of workspaces (zero on a fresh install).
    pub async fn workspace_count(&self) -> Result<i64, StoreError> {
        let r = sqlx::query("SELECT COUNT(*) AS n FROM workspaces")
            .fetch_one(self.pool)
            .await?;
        col(&r, "n")
    }

    pub async fn workspace(&self, id: &str) -> Result<Workspace, StoreError> {
        let r = sqlx::query(
            "SELECT id, name, max_sandboxes, creates_per_minute FROM workspaces WHERE id = $1",
        )
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        workspace(&r)
    }

    /// Counts `adding` creates against the workspace's create rate (`creates_per_minute` in a
    /// one-minute window that starts with the first create after the last one ended), or
    /// refuses with [`StoreError::RateLimited`] and counts nothing. One statement: replicas
    /// sharing the store share the window, and two racing creates never both pass its last place.
    pub async fn take_creates(&self, id: &str, adding: i64, now: i64) -> Result<(), StoreError> {
        const WINDOW_MS: i64 = 60_000;
        // Every SET expression reads the row as it was, in both engines.
        let done = sqlx::query(
            "UPDATE workspaces SET \
               create_window_count = CASE WHEN create_window_start <= $4 THEN $3 \
                 ELSE create_window_count + $3 END, \
               create_window_start = CASE WHEN create_window_start <= $4 THEN $2 \
                 ELSE create_window_start END \
             WHERE id = $1 AND (CASE WHEN create_window_start <= $4 THEN $3 \
               ELSE create_window_count + $3 END) <= creates_per_minute",
        )
        .bind(id)
        .bind(now)
        .bind(adding)
        // A window that started this long ago or earlier is over.
        .bind(now - WINDOW_MS)
        .execute(self.pool)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let r = sqlx::query(
            "SELECT creates_per_minute, create_window_start FROM workspaces WHERE id = $1",
        )
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        let limit: i64 = col(&r, "creates_per_minute")?;
        let start: i64 = col(&r, "create_window_start")?;
        let left_ms = (start + WINDOW_MS - now).clamp(0, WINDOW_MS);
        Err(StoreError::RateLimited {
            limit,
            retry_after_secs: (left_ms as u64).div_ceil(1000).max(1),
        })
    }

    /// Creates a key in `workspace_id`; returns the row and the secret (shown once).
    pub async fn create(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<(KeyRow, String), StoreError> {
        self.insert(workspace_id, name, false, &KeyGrant::default())
            .await
    }

    /// Creates a key in `workspace_id` that may do what `grant` says (checked by the caller:
    /// the API lets a key make only keys its own scopes cover).
    pub async fn create_granted(
        &self,
        workspace_id: &str,
        name: &str,
        grant: &KeyGrant,
    ) -> Result<(KeyRow, String), StoreError> {
        self.insert(workspace_id, name, false, grant).await
    }

    /// Creates an operator's (admin) key in `workspace_id`: it may also call the operator
    /// routes. Only the server's own command line makes one, never a request.
    pub async fn create_admin(
        &self,
        workspace_id: &str,
        name: &str,
    ) -> Result<(KeyRow, String), StoreError> {
        self.insert(workspace_id, name, true, &KeyGrant::default())
            .await
    }

    async fn insert(
        &self,
        workspace_id: &str,
        name: &str,
        admin: bool,
        grant: &KeyGrant,
    ) -> Result<(KeyRow, String), StoreError> {
        let secret = new_secret();
        let row = KeyRow {
            id: new_id("key-"),
            workspace_id: workspace_id.to_owned(),
            name: name.to_owned(),
            prefix: secret[..12].to_owned(),
            created_at: now_ms(),
            revoked_at: None,
            admin,
            scopes: grant.scopes.clone(),
            expires_at: grant.expires_at,
            last_used_at: None,
            member_id: grant.member_id.clone(),
            role: None,
        };
        // A key for a member is written only while the member exists (one statement: a
        // member removed meanwhile leaves no key behind).
        let done = sqlx::query(
            "INSERT INTO api_keys (id, workspace_id, name, prefix, hash, created_at, admin, scopes, expires_at, member_id) \
             SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 \
             WHERE $10 IS NULL OR EXISTS (SELECT 1 FROM members WHERE id = $10 AND workspace_id = $2)",
        )
        .bind(&row.id)
        .bind(&row.workspace_id)
        .bind(&row.name)
        .bind(&row.prefix)
        .bind(hash(&secret))
        .bind(row.created_at)
        .bind(i64::from(row.admin))
        .bind(serde_json::to_string(&row.scopes)?)
        .bind(row.expires_at)
        .bind(row.member_id.as_deref())
        .execute(self.pool)
        .await?;
        found(done)?;
        let row = self.get_any(&row.id).await?;
        Ok((row, secret))
    }

    /// The key a secret belongs to, if it is valid and not revoked (an expired key is
    /// returned: the caller says why it is refused).
    pub async fn verify(&self, secret: &str) -> Result<Option<KeyRow>, StoreError> {
        if !secret.starts_with("pds_") || secret.len() > 200 {
            return Ok(None);
        }
        let h = hash(secret);
        let row = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS}, hash FROM api_keys WHERE hash = $1"
        ))
        .bind(&h)
        .fetch_optional(self.pool)
        .await?;
        let Some(r) = row else {
            return Ok(None);
        };
        let stored: String = col(&r, "hash")?;
        // The lookup used the hash as an index key; the final comparison does not leak timing.
        if !bool::from(stored.as_bytes().ct_eq(h.as_bytes())) {
            return Ok(None);
        }
        let key = key_row(&r)?;
        if key.revoked_at.is_some() {
            return Ok(None);
        }
        Ok(Some(key))
    }

    pub async fn list(&self, workspace_id: &str) -> Result<Vec<KeyRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 ORDER BY created_at, id"
        ))
        .bind(workspace_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(key_row).collect()
    }

    /// Records that key `id` was used at `now` (callers write it at most once a minute).
    pub async fn touch_used(&self, id: &str, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(self.pool)
            .await?;
        Ok(())
    }

    pub async fn revoke(&self, workspace_id: &str, id: &str) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE workspace_id = $2 AND id = $3 AND revoked_at IS NULL",
        )
        .bind(now_ms())
        .bind(workspace_id)
        .bind(id)
        .execute(self.pool)
        .await?;
        found(done)
    }
}

/// Counts of a workspace's things, for its usage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub running: i64,
    pub hibernated: i64,
    pub volumes: i64,
    pub volume_gb: i64,
    pub volume_snapshots: i64,
    pub snapshots: i64,
    pub snapshot_bytes: i64,
}

impl Keys<'_> {
    /// What workspace `ws` holds: sandboxes (not hibernated / hibernated), volumes and their
    /// size, volume snapshots (not a backup's own), sandbox snapshots and their bytes.
    pub async fn counts(&self, ws: &str) -> Result<Counts, StoreError> {
        let one = |sql: &'static str| async move {
            let r = sqlx::query(sql).bind(ws).fetch_one(self.pool).await?;
            col::<i64>(&r, "n")
        };
        Ok(Counts {
            running: one("SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = $1 AND state <> 'hibernated'").await?,
            hibernated: one("SELECT COUNT(*) AS n FROM sandboxes WHERE workspace_id = $1 AND state = 'hibernated'").await?,
            volumes: one("SELECT COUNT(*) AS n FROM volumes WHERE workspace_id = $1").await?,
            volume_gb: one("SELECT CAST(COALESCE(SUM(size_gb), 0) AS BIGINT) AS n FROM volumes WHERE workspace_id = $1").await?,
            volume_snapshots: one("SELECT COUNT(*) AS n FROM volume_snapshots WHERE workspace_id = $1 AND internal = 0").await?,
            snapshots: one("SELECT COUNT(*) AS n FROM snapshots WHERE workspace_id = $1").await?,
            snapshot_bytes: one("SELECT CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) AS n FROM snapshots WHERE workspace_id = $1").await?,
        })
    }
}
