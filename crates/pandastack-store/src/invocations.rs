//! Asynchronous function invocations: a row per call, queued together with the durable job
//! that runs it (one transaction), so a call accepted is a call run even across a restart.

use sqlx::AnyPool;

use crate::jobs::enqueue;
use crate::{col, found, NewJob, StoreError};

/// One asynchronous invocation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationRow {
    pub id: String,
    /// The function (an app row of kind `function`).
    pub app_id: String,
    pub workspace_id: String,
    pub host_id: String,
    /// `queued`, `running`, `ok`, `error` or `timeout`.
    pub state: String,
    pub payload: serde_json::Value,
    /// The finished invocation (JSON), once there is one.
    pub outcome: Option<serde_json::Value>,
    pub attempts: i64,
    pub max_attempts: i64,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct Invocations<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str = "id, app_id, workspace_id, host_id, state, payload, outcome, attempts, \
     max_attempts, created_at, updated_at";

fn row(r: &sqlx::any::AnyRow) -> Result<InvocationRow, StoreError> {
    let payload: String = col(r, "payload")?;
    let outcome: Option<String> = col(r, "outcome")?;
    Ok(InvocationRow {
        id: col(r, "id")?,
        app_id: col(r, "app_id")?,
        workspace_id: col(r, "workspace_id")?,
        host_id: col(r, "host_id")?,
        state: col(r, "state")?,
        payload: serde_json::from_str(&payload)?,
        outcome: outcome.as_deref().map(serde_json::from_str).transpose()?,
        attempts: col(r, "attempts")?,
        max_attempts: col(r, "max_attempts")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

impl Invocations<'_> {
    /// Inserts a queued invocation and its job in one transaction.
    pub async fn queue(&self, inv: &InvocationRow, job: &NewJob) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO function_invocations ({COLUMNS}) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(&inv.id)
        .bind(&inv.app_id)
        .bind(&inv.workspace_id)
        .bind(&inv.host_id)
        .bind(&inv.state)
        .bind(inv.payload.to_string())
        .bind(inv.outcome.as_ref().map(|o| o.to_string()))
        .bind(inv.attempts)
        .bind(inv.max_attempts)
        .bind(inv.created_at)
        .bind(inv.updated_at)
        .execute(&mut *tx)
        .await?;
        enqueue(&mut *tx, job).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Invocation `id` of function `app_id`.
    pub async fn get(&self, app_id: &str, id: &str) -> Result<InvocationRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM function_invocations WHERE app_id = $1 AND id = $2"
        ))
        .bind(app_id)
        .bind(id)
        .fetch_optional(self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        row(&r)
    }

    /// Invocation `id`, whatever its function.
    pub async fn by_id(&self, id: &str) -> Result<InvocationRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM function_invocations WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool)
        .await?
        .ok_or(StoreError::NotFound)?;
        row(&r)
    }

    /// Writes state, outcome and attempts.
    pub async fn update(&self, inv: &InvocationRow) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE function_invocations SET state = $1, outcome = $2, attempts = $3, \
             updated_at = $4 WHERE id = $5",
        )
        .bind(&inv.state)
        .bind(inv.outcome.as_ref().map(|o| o.to_string()))
        .bind(inv.attempts)
        .bind(inv.updated_at)
        .bind(&inv.id)
        .execute(self.pool)
        .await?;
        found(done)
    }
}
