//! Schedule and schedule-run rows (cron).
//!
//! A due time fires once: [`ScheduleRepo::fire`] moves the schedule's `next_due_at` on only from
//! the value its caller read (a compare-and-set) and inserts the run with `ON CONFLICT
//! (schedule_id, due_at) DO NOTHING`, the run's job in the same transaction — so two processes,
//! or a process restarted after a crash, that reach the same due time make one run and one job.

use pandastack_api_types::{ConcurrencyPolicy, RunState, RunTrigger};
use sqlx::AnyPool;

use crate::jobs::enqueue;
use crate::{col, found, parsed, NewJob, StoreError};

/// One schedule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    pub id: String,
    pub workspace_id: String,
    /// Unique in its workspace.
    pub name: String,
    /// The host whose scheduler fires it.
    pub host_id: String,
    /// `pandastack_api_types::ScheduleSpec` as JSON.
    pub spec: serde_json::Value,
    pub paused: bool,
    /// The next due time not yet fired (unix ms); `None` while paused.
    pub next_due_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One run as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub schedule_id: String,
    pub workspace_id: String,
    /// Unique per schedule.
    pub due_at: i64,
    pub trigger: RunTrigger,
    pub state: RunState,
    pub attempt: i64,
    pub sandbox_id: Option<String>,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub exit_code: Option<i64>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl RunRow {
    /// A new run of `schedule` for `due_at` (recorded at `now`).
    pub fn new(
        id: String,
        schedule: &ScheduleRow,
        due_at: i64,
        trigger: RunTrigger,
        state: RunState,
        now: i64,
    ) -> Self {
        Self {
            id,
            schedule_id: schedule.id.clone(),
            workspace_id: schedule.workspace_id.clone(),
            due_at,
            trigger,
            state,
            attempt: 0,
            sandbox_id: None,
            started_at: None,
            ended_at: state.is_final().then_some(now),
            exit_code: None,
            output: None,
            error: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// What one firing writes, in one transaction.
#[derive(Debug, Clone)]
pub struct Firing {
    pub schedule_id: String,
    /// Scheduled firings: the `next_due_at` the caller read and the one it moves to. The
    /// firing writes nothing when the row no longer has `from` (another process fired it, or
    /// the schedule was paused or changed meanwhile). `None`: a manual run.
    pub advance: Option<(i64, Option<i64>)>,
    /// Older due times recorded `missed`.
    pub missed: Vec<RunRow>,
    /// The run to start (state `queued`), with its job.
    pub run: Option<(RunRow, NewJob)>,
    pub policy: ConcurrencyPolicy,
}

/// What a firing did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fired {
    /// `false`: nothing was written (see [`Firing::advance`]).
    pub advanced: bool,
    /// The run as inserted (`queued`, or `skipped` under `forbid`); `None` when that due time
    /// already had a run.
    pub run: Option<RunRow>,
    /// Runs stopped under `replace` (their sandboxes are the caller's to delete).
    pub cancelled: Vec<RunRow>,
}

pub struct ScheduleRepo<'a> {
    pub(crate) pool: &'a AnyPool,
}

const COLUMNS: &str =
    "id, workspace_id, name, host_id, spec, paused, next_due_at, created_at, updated_at";
const RUN_COLUMNS: &str = "id, schedule_id, workspace_id, due_at, run_trigger, state, attempt, \
     sandbox_id, started_at, ended_at, exit_code, output, error, created_at, updated_at";

fn schedule_row(r: &sqlx::any::AnyRow) -> Result<ScheduleRow, StoreError> {
    let spec: String = col(r, "spec")?;
    let paused: i64 = col(r, "paused")?;
    Ok(ScheduleRow {
        id: col(r, "id")?,
        workspace_id: col(r, "workspace_id")?,
        name: col(r, "name")?,
        host_id: col(r, "host_id")?,
        spec: serde_json::from_str(&spec)?,
        paused: paused != 0,
        next_due_at: col(r, "next_due_at")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

fn run_row(r: &sqlx::any::AnyRow) -> Result<RunRow, StoreError> {
    Ok(RunRow {
        id: col(r, "id")?,
        schedule_id: col(r, "schedule_id")?,
        workspace_id: col(r, "workspace_id")?,
        due_at: col(r, "due_at")?,
        trigger: parsed(r, "run_trigger", RunTrigger::parse)?,
        state: parsed(r, "state", RunState::parse)?,
        attempt: col(r, "attempt")?,
        sandbox_id: col(r, "sandbox_id")?,
        started_at: col(r, "started_at")?,
        ended_at: col(r, "ended_at")?,
        exit_code: col(r, "exit_code")?,
        output: col(r, "output")?,
        error: col(r, "error")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
    })
}

/// Inserts `r` unless its schedule has a run for its due time; whether it was inserted.
async fn insert_run<'e, E>(exec: E, r: &RunRow) -> Result<bool, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let done = sqlx::query(&format!(
        "INSERT INTO schedule_runs ({RUN_COLUMNS}) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (schedule_id, due_at) DO NOTHING"
    ))
    .bind(&r.id)
    .bind(&r.schedule_id)
    .bind(&r.workspace_id)
    .bind(r.due_at)
    .bind(r.trigger.as_str())
    .bind(r.state.as_str())
    .bind(r.attempt)
    .bind(&r.sandbox_id)
    .bind(r.started_at)
    .bind(r.ended_at)
    .bind(r.exit_code)
    .bind(&r.output)
    .bind(&r.error)
    .bind(r.created_at)
    .bind(r.updated_at)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

impl ScheduleRepo<'_> {
    /// Inserts a new schedule; [`StoreError::Conflict`] when the workspace has the name.
    pub async fn insert(&self, s: &ScheduleRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO schedules ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&s.id)
        .bind(&s.workspace_id)
        .bind(&s.name)
        .bind(&s.host_id)
        .bind(s.spec.to_string())
        .bind(i64::from(s.paused))
        .bind(s.next_due_at)
        .bind(s.created_at)
        .bind(s.updated_at)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    /// A workspace's schedule by name or id.
    pub async fn get(
        &self,
        workspace_id: &str,
        name_or_id: &str,
    ) -> Result<ScheduleRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM schedules WHERE workspace_id = $1 AND (name = $2 OR id = $2)"
        ))
        .bind(workspace_id)
        .bind(name_or_id)
        .fetch_one(self.pool)
        .await?;
        schedule_row(&r)
    }

    pub async fn by_id(&self, id: &str) -> Result<ScheduleRow, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLUMNS} FROM schedules WHERE id = $1"))
            .bind(id)
            .fetch_one(self.pool)
            .await?;
        schedule_row(&r)
    }

    /// A page of a workspace's schedules by name after `after` (one more than `limit` when
    /// there are more).
    pub async fn list(
        &self,
        workspace_id: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM schedules WHERE workspace_id = $1 AND name > $2 \
             ORDER BY name LIMIT $3"
        ))
        .bind(workspace_id)
        .bind(after.unwrap_or_default())
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(schedule_row).collect()
    }

    /// Host `host_id`'s unpaused schedules due at or before `now`.
    pub async fn due(&self, host_id: &str, now: i64) -> Result<Vec<ScheduleRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM schedules WHERE host_id = $1 AND paused = 0 \
             AND next_due_at IS NOT NULL AND next_due_at <= $2 ORDER BY next_due_at"
        ))
        .bind(host_id)
        .bind(now)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(schedule_row).collect()
    }

    /// The earliest due time of host `host_id`'s unpaused schedules.
    pub async fn next_due(&self, host_id: &str) -> Result<Option<i64>, StoreError> {
        let r = sqlx::query(
            "SELECT MIN(next_due_at) AS t FROM schedules WHERE host_id = $1 AND paused = 0",
        )
        .bind(host_id)
        .fetch_one(self.pool)
        .await?;
        col(&r, "t")
    }

    /// Writes a schedule's spec, paused flag and next due time.
    pub async fn update(&self, s: &ScheduleRow) -> Result<(), StoreError> {
        found(
            sqlx::query(
                "UPDATE schedules SET spec = $2, paused = $3, next_due_at = $4, updated_at = $5 \
                 WHERE id = $1",
            )
            .bind(&s.id)
            .bind(s.spec.to_string())
            .bind(i64::from(s.paused))
            .bind(s.next_due_at)
            .bind(s.updated_at)
            .execute(self.pool)
            .await?,
        )
    }

    /// Removes a schedule and its runs.
    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM schedule_runs WHERE schedule_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        found(
            sqlx::query("DELETE FROM schedules WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?,
        )?;
        tx.commit().await?;
        Ok(())
    }

    /// One firing (see [`Firing`]), in one transaction.
    pub async fn fire(&self, f: &Firing) -> Result<Fired, StoreError> {
        let mut tx = self.pool.begin().await?;
        let now = crate::now_ms();
        // Writing the schedule row first takes SQLite's write lock (PostgreSQL's row lock)
        // before anything is read, so two firings of one schedule run one after the other.
        let moved = match f.advance {
            Some((from, to)) => sqlx::query(
                "UPDATE schedules SET next_due_at = $3 \
                 WHERE id = $1 AND next_due_at = $2 AND paused = 0",
            )
            .bind(&f.schedule_id)
            .bind(from)
            .bind(to),
            None => sqlx::query("UPDATE schedules SET updated_at = updated_at WHERE id = $1")
                .bind(&f.schedule_id),
        }
        .execute(&mut *tx)
        .await?;
        if moved.rows_affected() == 0 {
            return match f.advance {
                Some(_) => Ok(Fired::default()),
                None => Err(StoreError::NotFound),
            };
        }
        for m in &f.missed {
            insert_run(&mut *tx, m).await?;
        }
        let mut out = Fired {
            advanced: true,
            ..Fired::default()
        };
        if let Some((run, job)) = &f.run {
            let mut run = run.clone();
            let active = sqlx::query(&format!(
                "SELECT {RUN_COLUMNS} FROM schedule_runs \
                 WHERE schedule_id = $1 AND state IN ('queued', 'running')"
            ))
            .bind(&f.schedule_id)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(run_row)
            .collect::<Result<Vec<_>, _>>()?;
            if !active.is_empty() {
                match f.policy {
                    ConcurrencyPolicy::Allow => {}
                    ConcurrencyPolicy::Forbid => {
                        run.state = RunState::Skipped;
                        run.ended_at = Some(now);
                        run.error = Some(format!(
                            "skipped: run {} is still {}",
                            active[0].id,
                            active[0].state.as_str()
                        ));
                    }
                    ConcurrencyPolicy::Replace => {
                        for a in &active {
                            sqlx::query(
                                "UPDATE schedule_runs SET state = 'cancelled', ended_at = $2, \
                                 error = $3, updated_at = $2 WHERE id = $1",
                            )
                            .bind(&a.id)
                            .bind(now)
                            .bind(format!("replaced by run {}", run.id))
                            .execute(&mut *tx)
                            .await?;
                        }
                        out.cancelled = active;
                    }
                }
            }
            if insert_run(&mut *tx, &run).await? {
                if run.state == RunState::Queued {
                    enqueue(&mut *tx, job).await?;
                }
                out.run = Some(run);
            } else {
                out.cancelled.clear();
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    pub async fn run(&self, id: &str) -> Result<RunRow, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM schedule_runs WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(self.pool)
        .await?;
        run_row(&r)
    }

    /// A page of a schedule's runs, newest due time first, due before `before` (one more than
    /// `limit` when there are more).
    pub async fn runs(
        &self,
        schedule_id: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<RunRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM schedule_runs WHERE schedule_id = $1 AND due_at < $2 \
             ORDER BY due_at DESC LIMIT $3"
        ))
        .bind(schedule_id)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit) + 1)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(run_row).collect()
    }

    /// A schedule's queued and running runs.
    pub async fn active_runs(&self, schedule_id: &str) -> Result<Vec<RunRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLUMNS} FROM schedule_runs \
             WHERE schedule_id = $1 AND state IN ('queued', 'running')"
        ))
        .bind(schedule_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(run_row).collect()
    }

    /// Marks a queued (or, after a restart, running) run `running` for attempt `attempt`;
    /// `false` when it is over (cancelled meanwhile).
    pub async fn start_run(&self, id: &str, attempt: i64, now: i64) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedule_runs SET state = 'running', attempt = $2, \
             started_at = COALESCE(started_at, $3), updated_at = $3 \
             WHERE id = $1 AND state IN ('queued', 'running')",
        )
        .bind(id)
        .bind(attempt)
        .bind(now)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records the sandbox of a running run's attempt (`None`: deleted); `false` when the run
    /// is no longer running.
    pub async fn set_run_sandbox(
        &self,
        id: &str,
        sandbox_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedule_runs SET sandbox_id = $2 WHERE id = $1 AND state = 'running'",
        )
        .bind(id)
        .bind(sandbox_id)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Ends a running run's attempt: `state` is final, or `queued` for a retry. `false` when
    /// the run was no longer running (cancelled meanwhile: its state stays).
    pub async fn finish_run(
        &self,
        id: &str,
        state: RunState,
        exit_code: Option<i64>,
        output: Option<&str>,
        error: Option<&str>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE schedule_runs SET state = $2, exit_code = $3, output = $4, error = $5, \
             ended_at = CASE WHEN $2 = 'queued' THEN NULL ELSE $6 END, updated_at = $6 \
             WHERE id = $1 AND state = 'running'",
        )
        .bind(id)
        .bind(state.as_str())
        .bind(exit_code)
        .bind(output)
        .bind(error)
        .bind(now)
        .execute(self.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Cancels a schedule's queued and running runs; returns them as they were.
    pub async fn cancel_active(
        &self,
        schedule_id: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<RunRow>, StoreError> {
        let active = self.active_runs(schedule_id).await?;
        for a in &active {
            sqlx::query(
                "UPDATE schedule_runs SET state = 'cancelled', ended_at = $2, error = $3, \
                 updated_at = $2 WHERE id = $1 AND state IN ('queued', 'running')",
            )
            .bind(&a.id)
            .bind(now)
            .bind(reason)
            .execute(self.pool)
            .await?;
        }
        Ok(active)
    }
}
