//! Durable jobs: work that must survive a restart of the process (or the loss of a host) is a
//! row here before it starts.
//!
//! A job names the `resource` it changes; at most one job per resource is incomplete (queued or
//! running) — a second [`Jobs::enqueue`] for it is a [`StoreError::Conflict`]. A runner
//! [`claim`](Jobs::claim)s a job with a lease and renews it while it works; a job whose lease ran
//! out (its runner died with its process or host) can be claimed again, until it has used its
//! attempts. On PostgreSQL, concurrent runners skip each other's rows (`FOR UPDATE SKIP
//! LOCKED`); SQLite has one writer at a time, so the claim is a single atomic statement there.

use sqlx::AnyPool;

use crate::{col, found, new_id, now_ms, parsed, Backend, StoreError};

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for a runner (from `run_after` on).
    Queued,
    /// Claimed; its runner holds a lease.
    Running,
    Done,
    /// Gave up: its last error is kept.
    Failed,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => JobState::Queued,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "failed" => JobState::Failed,
            _ => return None,
        })
    }
}

/// A job to enqueue.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// What to do, e.g. `template_build`.
    pub kind: String,
    /// What it changes, e.g. `build:<id>`: one incomplete job per resource.
    pub resource: String,
    /// The host that must run it; `None`: any host.
    pub host_id: Option<String>,
    pub payload: serde_json::Value,
    pub max_attempts: i64,
    /// Not before this time (unix ms).
    pub run_after: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: String,
    pub kind: String,
    pub resource: String,
    pub host_id: Option<String>,
    pub payload: serde_json::Value,
    pub state: JobState,
    /// Claims so far (the running one included).
    pub attempts: i64,
    pub max_attempts: i64,
    pub error: Option<String>,
    pub run_after: i64,
    pub lease_owner: Option<String>,
    pub lease_until: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct Jobs<'a> {
    pub(crate) pool: &'a AnyPool,
    pub(crate) backend: Backend,
}

const COLUMNS: &str = "id, kind, resource, host_id, payload, state, attempts, max_attempts, error, run_after, lease_owner, lease_until, created_at, updated_at";

fn row(r: &sqlx::any::AnyRow) -> Result<JobRow, StoreError> {
    let payload: String = col(r, "payload")?;
    Ok(JobRow {
        id: col(r, "id")?,
        kind: col(r, "kind")?,
        resource: col(r, "resource")?,
        host_id: col(r, "host_id")?,
        payload: serde_json::from_str(&payload)?,
        state: parsed(r, "state", JobState::parse)?,
        attempts: col(r, "attempts")?,
        max_attempts: col(r, "max_attempts")?,
        error: col(r, "error")?,
        run_after: col(r, "run_after")?,
        lease_owner: col(r, "lease_owner")?,
        lease_until: col(r, "lease_until")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

impl Jobs<'_> {
    /// How many jobs there are of each kind and state, for the operator's metrics.
    pub async fn count_by_kind_and_state(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT kind, state, COUNT(*) AS n FROM jobs GROUP BY kind, state")
            .fetch_all(self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((col(r, "kind")?, col(r, "state")?, col(r, "n")?)))
            .collect()
    }

    /// For each kind with queued jobs due at `now`, the time the longest-waiting of them has
    /// been due (unix ms), for the operator's metrics.
    pub async fn oldest_due_by_kind(&self, now: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, MIN(run_after) AS due FROM jobs \
             WHERE state = 'queued' AND run_after <= $1 GROUP BY kind",
        )
        .bind(now)
        .fetch_all(self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((col(r, "kind")?, col(r, "due")?)))
            .collect()
    }

    /// Queues `job`, unless its resource already has an incomplete job
    /// ([`StoreError::Conflict`]).
    pub async fn enqueue(&self, job: &NewJob) -> Result<JobRow, StoreError> {
        enqueue(self.pool, job).await
    }

    /// Claims the next runnable job for host `host_id` (its own jobs and those any host may
    /// run) with a lease until `now + lease_ms`, for runner `owner`. Jobs whose runner's lease
    /// ran out are runnable again; those that used all their attempts that way are failed.
    pub async fn claim(
        &self,
        host_id: &str,
        owner: &str,
        lease_ms: i64,
    ) -> Result<Option<JobRow>, StoreError> {
        self.claim_of(host_id, owner, lease_ms, None).await
    }

    /// [`Jobs::claim`] of jobs of `kind` only (each kind has its own runner).
    pub async fn claim_kind(
        &self,
        host_id: &str,
        owner: &str,
        lease_ms: i64,
        kind: &str,
    ) -> Result<Option<JobRow>, StoreError> {
        self.claim_of(host_id, owner, lease_ms, Some(kind)).await
    }

    async fn claim_of(
        &self,
        host_id: &str,
        owner: &str,
        lease_ms: i64,
        kind: Option<&str>,
    ) -> Result<Option<JobRow>, StoreError> {
        let now = now_ms();
        sqlx::query(
            "UPDATE jobs SET state = 'failed', error = 'its runner stopped (lease expired) on the last attempt', \
             lease_owner = NULL, lease_until = NULL, updated_at = $1 \
             WHERE state = 'running' AND lease_until < $1 AND attempts >= max_attempts",
        )
        .bind(now)
        .execute(self.pool)
        .await?;
        let lock = match self.backend {
            Backend::Postgres => "FOR UPDATE SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let r = sqlx::query(&format!(
            "UPDATE jobs SET state = 'running', lease_owner = $1, lease_until = $2, \
             attempts = attempts + 1, updated_at = $3 \
             WHERE id = (SELECT id FROM jobs \
                 WHERE ((state = 'queued' AND run_after <= $3) OR (state = 'running' AND lease_until < $3)) \
                 AND (host_id IS NULL OR host_id = $4) AND ($5 = '' OR kind = $5) \
                 ORDER BY run_after, id LIMIT 1 {lock}) \
             RETURNING {COLUMNS}"
        ))
        .bind(owner)
        .bind(now + lease_ms)
        .bind(now)
        .bind(host_id)
        .bind(kind.unwrap_or(""))
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(row).transpose()
    }

    /// Extends `owner`'s lease on job `id`; [`StoreError::NotFound`] if the lease was lost (it
    /// ran out and another runner took the job): the caller must stop working on it.
    pub async fn renew(&self, id: &str, owner: &str, lease_ms: i64) -> Result<(), StoreError> {
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE jobs SET lease_until = $1, updated_at = $2 \
             WHERE id = $3 AND state = 'running' AND lease_owner = $4",
        )
        .bind(now + lease_ms)
        .bind(now)
        .bind(id)
        .bind(owner)
        .execute(self.pool)
        .await?;
        found(done)
    }

    /// Marks `owner`'s job `id` done.
    pub async fn complete(&self, id: &str, owner: &str) -> Result<(), StoreError> {
        self.finish(id, owner, JobState::Done, None, 0).await
    }

    /// Records that `owner`'s attempt at job `id` failed with `error`: queued again at
    /// `retry_at` if it has attempts left and `retry_at` is given, failed otherwise. Returns
    /// the job's new state.
    pub async fn fail(
        &self,
        id: &str,
        owner: &str,
        error: &str,
        retry_at: Option<i64>,
    ) -> Result<JobState, StoreError> {
        let job = self.get(id).await?;
        let state = match retry_at {
            Some(_) if job.attempts < job.max_attempts => JobState::Queued,
            _ => JobState::Failed,
        };
        self.finish(
            id,
            owner,
            state,
            Some(error),
            retry_at.unwrap_or(job.run_after),
        )
        .await?;
        Ok(state)
    }

    async fn finish(
        &self,
        id: &str,
        owner: &str,
        state: JobState,
        error: Option<&str>,
        run_after: i64,
    ) -> Result<(), StoreError> {
        let done = sqlx::query(
            "UPDATE jobs SET state = $1, error = $2, run_after = CASE WHEN $3 > 0 THEN $3 ELSE run_after END, \
             lease_owner = NULL, lease_until = NULL, updated_at = $4 \
             WHERE id = $5 AND state = 'running' AND lease_owner = $6",
        )
        .bind(state.as_str())
        .bind(error)
        .bind(run_after)
        .bind(now_ms())
        .bind(id)
        .bind(owner)
        .execute(self.pool)
        .await?;
        found(done)
    }

    pub async fn get(&self, id: &str) -> Result<JobRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        row(&r)
    }

    /// Puts the running jobs of host `host_id` back in the queue (attempt kept): called by a
    /// host at start, when its previous process — their runner — is known to be gone, so they
    /// need not wait for their leases to run out.
    pub async fn requeue_running(&self, host_id: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query(
            "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL, updated_at = $1 \
             WHERE state = 'running' AND host_id = $2",
        )
        .bind(now_ms())
        .bind(host_id)
        .execute(self.pool)
        .await?
        .rows_affected())
    }

    /// The incomplete (queued or running) job of `resource`, if there is one.
    pub async fn incomplete(&self, resource: &str) -> Result<Option<JobRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE resource = $1 AND state IN ('queued', 'running')"
        ))
        .bind(resource)
        .fetch_optional(self.pool)
        .await?;
        r.as_ref().map(row).transpose()
    }
}

pub(crate) async fn enqueue<'e, E>(exec: E, job: &NewJob) -> Result<JobRow, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let now = now_ms();
    let row = JobRow {
        id: new_id("job-"),
        kind: job.kind.clone(),
        resource: job.resource.clone(),
        host_id: job.host_id.clone(),
        payload: job.payload.clone(),
        state: JobState::Queued,
        attempts: 0,
        max_attempts: job.max_attempts.max(1),
        error: None,
        run_after: job.run_after,
        lease_owner: None,
        lease_until: None,
        created_at: now,
        updated_at: now,
    };
    sqlx::query(&format!(
        "INSERT INTO jobs ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    ))
    .bind(&row.id)
    .bind(&row.kind)
    .bind(&row.resource)
    .bind(&row.host_id)
    .bind(serde_json::to_string(&row.payload)?)
    .bind(row.state.as_str())
    .bind(row.attempts)
    .bind(row.max_attempts)
    .bind(&row.error)
    .bind(row.run_after)
    .bind(&row.lease_owner)
    .bind(row.lease_until)
    .bind(row.created_at)
    .bind(row.updated_at)
    .execute(exec)
    .await?;
    Ok(row)
}
