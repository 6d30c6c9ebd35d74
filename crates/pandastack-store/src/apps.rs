//! App and deploy rows (apps deployed from git).

use pandastack_api_types::DeployState;
use sqlx::AnyPool;

use crate::{col, found, parsed, StoreError};

/// One app as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AppRow {
    pub id: String,
    pub workspace_id: String,
    /// Unique across workspaces: it is the app's host name.
    pub name: String,
    /// The host its deploys run on.
    pub host_id: String,
    /// The app's configuration (`pandastack_api_types::AppConfig` as JSON).
    pub config: serde_json::Value,
    pub webhook_secret: String,
    /// The private half of its SSH deploy key (OpenSSH format; `None` for an app made before
    /// keys were, until the server makes one). Never shown by the API.
    pub deploy_private_key: Option<String>,
    /// The deploy its traffic goes to.
    pub live_deploy_id: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// `app`, or `function` (a function's versions are its deploys).
    pub kind: String,
}

/// One deploy as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployRow {
    pub id: String,
    pub app_id: String,
    pub workspace_id: String,
    pub host_id: String,
    /// 1, 2, 3… per app (assigned by [`AppRepo::insert_deploy`]).
    pub seq: i64,
    pub git_ref: String,
    pub commit_sha: Option<String>,
    pub state: DeployState,
    /// The VM that built and serves this version.
    pub sandbox_id: Option<String>,
    /// The build plan detection chose (JSON).
    pub plan: Option<serde_json::Value>,
    pub error: Option<String>,
    /// The webhook delivery that asked for it.
    pub delivery_id: Option<String>,
    /// Milliseconds per phase (`{"clone":812,…}`).
    pub phases: serde_json::Value,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct AppRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const APP_COLUMNS: &str =
    "id, workspace_id, name, host_id, config, webhook_secret, live_deploy_id, \
     created_at, updated_at, deploy_private_key, kind";
const DEPLOY_COLUMNS: &str = "id, app_id, workspace_id, host_id, seq, git_ref, commit_sha, state, \
     sandbox_id, plan, error, delivery_id, phases, created_at, updated_at";

fn app_row(r: &sqlx::any::AnyRow) -> Result<AppRow, StoreError> {
    let config: String = col(r, "config")?;
    Ok(AppRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        host_id: col(r, "host_id")?,
        config: serde_json::from_str(&config)?,
        webhook_secret: col(r, "webhook_secret")?,
        deploy_private_key: col(r, "deploy_private_key")?,
        live_deploy_id: col(r, "live_deploy_id")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
        kind: col(r, "kind")?,
    })
}

fn deploy_row(r: &sqlx::any::AnyRow) -> Result<DeployRow, StoreError> {
    let plan: Option<String> = col(r, "plan")?;
    let phases: String = col(r, "phases")?;
    Ok(DeployRow {
        id: col(r, "id")?,
        app_id: col(r, "app_id")?,
        workspace_id: col(r, "workspace_id")?,
        host_id: col(r, "host_id")?,
        seq: col(r, "seq")?,
        git_ref: col(r, "git_ref")?,
        commit_sha: col(r, "commit_sha")?,
        state: parsed(r, "state", DeployState::parse)?,
        sandbox_id: col(r, "sandbox_id")?,
        plan: plan.as_deref().map(serde_json::from_str).transpose()?,
        error: col(r, "error")?,
        delivery_id: col(r, "delivery_id")?,
        phases: serde_json::from_str(&phases)?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

impl AppRepo<'_> {
    /// Inserts a new app; [`StoreError::Conflict`] when any workspace has the name.
    pub async fn insert(&self, a: &AppRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO apps ({APP_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(&a.id)
        .bind(&a.workspace_id)
        .bind(&a.name)
        .bind(&a.host_id)
        .bind(a.config.to_string())
        .bind(&a.webhook_secret)
        .bind(&a.live_deploy_id)
        .bind(a.created_at)
        .bind(a.updated_at)
        .bind(&a.deploy_private_key)
        .bind(&a.kind)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    /// Sets the app's SSH deploy key (private half). With `only_if_missing`, only an app that
    /// has none gets it (two readers making a key at once: the first one stays); `false` when
    /// nothing changed.
    pub async fn set_deploy_key(
        &self,
        id: &str,
        private_key: &str,
        only_if_missing: bool,
        now: i64,
    ) -> Result<bool, StoreError> {
        let r = if only_if_missing {
            sqlx::query(
                "UPDATE apps SET deploy_private_key = $2 \
                 WHERE id = $1 AND deploy_private_key IS NULL",
            )
            .bind(id)
            .bind(private_key)
            .execute(self.pool)
            .await?
        } else {
            sqlx::query("UPDATE apps SET deploy_private_key = $2, updated_at = $3 WHERE id = $1")
                .bind(id)
                .bind(private_key)
                .bind(now)
                .execute(self.pool)
                .await?
        };
        Ok(r.rows_affected() > 0)
    }

    /// A workspace's app by name or id.
    pub async fn get(&self, workspace_id: &str, name_or_id: &str) -> Result<AppRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {APP_COLUMNS} FROM apps WHERE workspace_id = $1 AND (name = $2 OR id = $2)"
        ))
        .bind(workspace_id)
        .bind(name_or_id)
        .fetch_one(self.pool)
        .await?;
        app_row(&r)
    }

    /// Any workspace's app by name (the proxy routes by host name alone).
    pub async fn by_name(&self, name: &str) -> Result<AppRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {APP_COLUMNS} FROM apps WHERE name = $1"))
            .bind(name)
            .fetch_one(self.pool)
            .await?;
        app_row(&r)
    }

    pub async fn by_id(&self, id: &str) -> Result<AppRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {APP_COLUMNS} FROM apps WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        app_row(&r)
    }

    /// A page of a workspace's apps of `kind` by name after `after` (one more than `limit`
    /// when there are more).
    pub async fn list(
        &self,
        workspace_id: &str,
        kind: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<AppRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {APP_COLUMNS} FROM apps WHERE workspace_id = $1 AND kind = $2 AND name > $3 \
             ORDER BY name LIMIT $4"
        ))
        .bind(workspace_id)
        .bind(kind)
        .bind(after.unwrap_or_default())
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(app_row).collect()
    }

    pub async fn set_config(
        &self,
        id: &str,
        config: &serde_json::Value,
        now: i64,
    ) -> Result<(), StoreError> {
        found(
            sqlx::query("UPDATE apps SET config = $2, updated_at = $3 WHERE id = $1")
                .bind(id)
                .bind(config.to_string())
                .bind(now)
                .execute(self.pool)
                .await?,
        )
    }

    /// Makes `deploy` the app's live deploy and `previous` (the old live one, if any)
    /// `standby`, in one transaction: the proxy sees one or the other, never neither.
    pub async fn switch_live(
        &self,
        app_id: &str,
        deploy: &str,
        previous: Option<&str>,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        found(
            sqlx::query("UPDATE apps SET live_deploy_id = $2, updated_at = $3 WHERE id = $1")
                .bind(app_id)
                .bind(deploy)
                .bind(now)
                .execute(&mut *tx)
                .await?,
        )?;
        found(
            sqlx::query("UPDATE app_deploys SET state = 'live', updated_at = $2 WHERE id = $1")
                .bind(deploy)
                .bind(now)
                .execute(&mut *tx)
                .await?,
        )?;
        if let Some(p) = previous.filter(|p| *p != deploy) {
            sqlx::query("UPDATE app_deploys SET state = 'standby', updated_at = $2 WHERE id = $1")
                .bind(p)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Removes an app, its deploy rows and its domains.
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM app_domains WHERE app_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM app_deploys WHERE app_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM apps WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    // ---- deploys -----------------------------------------------------------------------------

    /// Inserts a deploy numbered one past the app's newest (its `seq` is set here).
    /// [`StoreError::Conflict`] when its `delivery_id` was seen for this app (or two inserts
    /// raced for a number: the caller may try again).
    pub async fn insert_deploy(&self, d: &mut DeployRow) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        // Writing the app row first takes SQLite's write lock (and PostgreSQL's row lock)
        // before the count, so two inserts cannot take the same number.
        found(
            sqlx::query("UPDATE apps SET updated_at = updated_at WHERE id = $1")
                .bind(&d.app_id)
                .execute(&mut *tx)
                .await?,
        )?;
        let r =
            sqlx::query("SELECT COALESCE(MAX(seq), 0) AS top FROM app_deploys WHERE app_id = $1")
                .bind(&d.app_id)
                .fetch_one(&mut *tx)
                .await?;
        let top: i64 = col(&r, "top")?;
        d.seq = top + 1;
        sqlx::query(&format!(
            "INSERT INTO app_deploys ({DEPLOY_COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
        ))
        .bind(&d.id)
        .bind(&d.app_id)
        .bind(&d.workspace_id)
        .bind(&d.host_id)
        .bind(d.seq)
        .bind(&d.git_ref)
        .bind(&d.commit_sha)
        .bind(d.state.as_str())
        .bind(&d.sandbox_id)
        .bind(d.plan.as_ref().map(|p| p.to_string()))
        .bind(&d.error)
        .bind(&d.delivery_id)
        .bind(d.phases.to_string())
        .bind(d.created_at)
        .bind(d.updated_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Writes a deploy's changing fields (state, commit, VM, plan, error, phases).
    pub async fn update_deploy(&self, d: &DeployRow) -> Result<(), StoreError> {
        found(
            sqlx::query(
                "UPDATE app_deploys SET state = $2, commit_sha = $3, sandbox_id = $4, plan = $5, \
                 error = $6, phases = $7, updated_at = $8 WHERE id = $1",
            )
            .bind(&d.id)
            .bind(d.state.as_str())
            .bind(&d.commit_sha)
            .bind(&d.sandbox_id)
            .bind(d.plan.as_ref().map(|p| p.to_string()))
            .bind(&d.error)
            .bind(d.phases.to_string())
            .bind(d.updated_at)
            .execute(self.pool)
            .await?,
        )
    }

    /// Deploy number `seq` of app `app_id` (a function's version `seq`).
    pub async fn deploy_by_seq(&self, app_id: &str, seq: i64) -> Result<DeployRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {DEPLOY_COLUMNS} FROM app_deploys WHERE app_id = $1 AND seq = $2"
        ))
        .bind(app_id)
        .bind(seq)
        .fetch_optional(self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        deploy_row(&r)
    }

    pub async fn deploy(&self, id: &str) -> Result<DeployRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {DEPLOY_COLUMNS} FROM app_deploys WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        deploy_row(&r)
    }

    /// The deploy a webhook delivery queued, if that delivery was seen.
    pub async fn deploy_by_delivery(
        &self,
        app_id: &str,
        delivery_id: &str,
    ) -> Result<Option<DeployRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {DEPLOY_COLUMNS} FROM app_deploys WHERE app_id = $1 AND delivery_id = $2"
        ))
        .bind(app_id)
        .bind(delivery_id)
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(deploy_row).transpose()
    }

    /// A page of an app's deploys, newest first, numbered below `before` (one more than
    /// `limit` when there are more).
    pub async fn deploys(
        &self,
        app_id: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<DeployRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {DEPLOY_COLUMNS} FROM app_deploys WHERE app_id = $1 AND seq < $2 \
             ORDER BY seq DESC LIMIT $3"
        ))
        .bind(app_id)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(deploy_row).collect()
    }

    /// Whether the app has a queued deploy numbered above `seq` (a newer one wins).
    pub async fn newer_queued(&self, app_id: &str, seq: i64) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "SELECT COUNT(*) AS n FROM app_deploys WHERE app_id = $1 AND seq > $2 AND state = 'queued'",
        )
        .bind(app_id)
        .bind(seq)
        .fetch_one(self.pool)
        .await?;
        let n: i64 = col(&r, "n")?;
        Ok(n > 0)
    }
}
