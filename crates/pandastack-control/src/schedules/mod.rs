//! Schedules (cron): a cron expression in a time zone runs a target at each due time.
//!
//! ```text
//!  API ──create/update/resume──▶ schedules row (next_due_at) ──notify──▶ scheduler (1 per host)
//!                                                                            │ sleeps until the
//!                                                                            │ earliest due time
//!        one transaction: next_due_at moved on (compare-and-set)  ◀─────────┘
//!                         + run rows (UNIQUE(schedule_id, due_at), ON CONFLICT DO NOTHING)
//!                         + `schedule_run` job
//!                                   │
//!  runners (RUNNERS per host) ◀── claim ── jobs: sandbox of the target's template, exec the
//!  command with PANDASTACK_PAYLOAD, record exit code and output, delete the sandbox (always)
//! ```
//!
//! A due time fires once: the run row's unique index, not memory, decides, so a second server
//! process or one restarted after a crash cannot fire it again; the job row is what survives
//! the restart. Due times missed while the server was down follow `starting_deadline_seconds`
//! ([`scheduler`]). A target is a command in a new sandbox of a template (`sandbox_exec`) or a
//! call of a function (`function`).

pub mod cron;
mod run;
mod scheduler;

use std::sync::Arc;

use pandastack_api_types::{
    CreateScheduleRequest, RunState, RunTrigger, ScheduleSpec, UpdateScheduleRequest,
};
use pandastack_host::Host;
use pandastack_store::{new_id, now_ms, Firing, NewJob, RunRow, ScheduleRow, Store, StoreError};
use tokio::sync::Notify;

use crate::{Sandboxes, Templates};

pub use cron::{CronError, CronSchedule};

/// Kind of the jobs that carry out runs.
pub const RUN_JOB_KIND: &str = "schedule_run";
/// Sandbox metadata naming the schedule and run a sandbox is for.
pub const SCHEDULE_METADATA: &str = "pandastack.schedule";
pub const RUN_METADATA: &str = "pandastack.schedule_run";
/// Most output a run keeps, bytes.
pub const MAX_RUN_OUTPUT: usize = 64 << 10;
/// Most missed due times recorded for one catch-up (the newest ones).
const MISSED_KEPT: usize = 100;
/// Runs one host carries out at once.
const RUNNERS: usize = 4;

/// Why a schedule operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule {0} not found")]
    NotFound(String),
    #[error("run {0} not found")]
    RunNotFound(String),
    #[error("schedule name {0} is taken")]
    Exists(String),
    /// A cron expression or time zone that cannot be used.
    #[error(transparent)]
    Invalid(#[from] CronError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stored schedule: {0}")]
    Spec(#[from] serde_json::Error),
}

/// A schedule with its spec read.
#[derive(Debug, Clone)]
pub struct ScheduleInfo {
    pub row: ScheduleRow,
    pub spec: ScheduleSpec,
}

/// Schedules of one host: the API's operations, the scheduler and the run runners.
#[derive(Clone)]
pub struct Schedules {
    store: Store,
    host: Arc<dyn Host>,
    sandboxes: Sandboxes,
    templates: Templates,
    /// Functions a `function` target calls.
    functions: crate::Functions,
    host_id: String,
    /// Wakes the scheduler (a schedule changed).
    tick: Arc<Notify>,
    /// Wakes the runners (a run was queued).
    wake: Arc<Notify>,
}

fn spec_of(row: &ScheduleRow) -> Result<ScheduleSpec, ScheduleError> {
    Ok(serde_json::from_value(row.spec.clone())?)
}

impl Schedules {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        sandboxes: Sandboxes,
        templates: Templates,
        functions: crate::Functions,
        host_id: String,
    ) -> Self {
        Self {
            store,
            host,
            sandboxes,
            templates,
            functions,
            host_id,
            tick: Arc::default(),
            wake: Arc::default(),
        }
    }

    /// Starts the scheduler and the runners of this host's runs; returns their tasks.
    pub fn start(&self) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = vec![tokio::spawn(self.clone().scheduler())];
        for _ in 0..RUNNERS {
            tasks.push(tokio::spawn(self.clone().runner()));
        }
        tasks
    }

    async fn row(&self, ws: &str, name: &str) -> Result<ScheduleRow, ScheduleError> {
        match self.store.schedules().get(ws, name).await {
            Ok(r) => Ok(r),
            Err(StoreError::NotFound) => Err(ScheduleError::NotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    fn info(row: ScheduleRow) -> Result<ScheduleInfo, ScheduleError> {
        let spec = spec_of(&row)?;
        Ok(ScheduleInfo { row, spec })
    }

    /// The next due time of `spec` after now (`None` when paused).
    fn next_due(spec: &ScheduleSpec, paused: bool) -> Result<Option<i64>, ScheduleError> {
        let cron = cron::parse(&spec.cron, &spec.timezone)?;
        Ok(if paused {
            None
        } else {
            cron.next_after(now_ms())
        })
    }

    pub async fn create(
        &self,
        ws: &str,
        req: &CreateScheduleRequest,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let spec = req.spec();
        let paused = req.paused.unwrap_or(false);
        let now = now_ms();
        let row = ScheduleRow {
            id: new_id("sch-"),
            workspace_id: ws.to_owned(),
            name: req.name.clone(),
            host_id: self.host_id.clone(),
            spec: serde_json::to_value(&spec)?,
            paused,
            next_due_at: Self::next_due(&spec, paused)?,
            created_at: now,
            updated_at: now,
        };
        match self.store.schedules().insert(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(ScheduleError::Exists(req.name.clone())),
            Err(e) => return Err(e.into()),
        }
        self.tick.notify_one();
        Ok(ScheduleInfo { row, spec })
    }

    pub async fn get(&self, ws: &str, name: &str) -> Result<ScheduleInfo, ScheduleError> {
        Self::info(self.row(ws, name).await?)
    }

    /// A page of a workspace's schedules by name (one more than `limit` when there are more).
    pub async fn list(
        &self,
        ws: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<ScheduleInfo>, ScheduleError> {
        let rows = self.store.schedules().list(ws, after, limit).await?;
        rows.into_iter().map(Self::info).collect()
    }

    /// Changes a schedule; its next due time is counted again from now.
    pub async fn update(
        &self,
        ws: &str,
        name: &str,
        req: &UpdateScheduleRequest,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let mut row = self.row(ws, name).await?;
        let spec = req.apply(spec_of(&row)?);
        row.next_due_at = Self::next_due(&spec, row.paused)?;
        row.spec = serde_json::to_value(&spec)?;
        row.updated_at = now_ms();
        self.store.schedules().update(&row).await?;
        self.tick.notify_one();
        Ok(ScheduleInfo { row, spec })
    }

    /// Pauses (no due time fires; runs under way go on) or resumes (due from now on: the time
    /// paused is not caught up).
    pub async fn set_paused(
        &self,
        ws: &str,
        name: &str,
        paused: bool,
    ) -> Result<ScheduleInfo, ScheduleError> {
        let mut row = self.row(ws, name).await?;
        let spec = spec_of(&row)?;
        row.paused = paused;
        row.next_due_at = Self::next_due(&spec, paused)?;
        row.updated_at = now_ms();
        self.store.schedules().update(&row).await?;
        self.tick.notify_one();
        Ok(ScheduleInfo { row, spec })
    }

    /// Deletes a schedule: runs under way are cancelled (their sandboxes deleted), then the
    /// schedule and its history are removed.
    pub async fn delete(&self, ws: &str, name: &str) -> Result<(), ScheduleError> {
        let row = self.row(ws, name).await?;
        let cancelled = self
            .store
            .schedules()
            .cancel_active(&row.id, "the schedule was deleted", now_ms())
            .await?;
        for r in &cancelled {
            self.kill_run_sandbox(r).await;
        }
        self.store.schedules().delete(&row.id).await?;
        self.tick.notify_one();
        Ok(())
    }

    /// The event of a due time (or a manual run) that made run `run` of schedule `row`.
    pub(crate) async fn fired_event(&self, row: &ScheduleRow, run: &RunRow) {
        let data = serde_json::json!({
            "run_id": run.id,
            "trigger": run.trigger.as_str(),
            "state": run.state.as_str(),
            "due_at": crate::events::rfc3339(run.due_at),
        });
        self.sandboxes
            .events()
            .emit(
                &row.workspace_id,
                "schedule.fired",
                crate::ResourceKind::Schedule,
                &row.name,
                data,
            )
            .await;
    }

    /// A manual run now (the concurrency policy applies as to a due time).
    pub async fn run_now(&self, ws: &str, name: &str) -> Result<RunRow, ScheduleError> {
        let row = self.row(ws, name).await?;
        let spec = spec_of(&row)?;
        // A manual run's due time is when it was asked for; one that lands on a due time
        // already taken (the same millisecond) moves on by a millisecond.
        let now = now_ms();
        for due in now..now + 100 {
            let run = self.new_run(&row, due, RunTrigger::Manual, RunState::Queued);
            let job = self.run_job(&row, &spec, &run.id);
            let fired = self
                .store
                .schedules()
                .fire(&Firing {
                    schedule_id: row.id.clone(),
                    advance: None,
                    missed: Vec::new(),
                    run: Some((run, job)),
                    policy: spec.concurrency_policy,
                })
                .await;
            let fired = match fired {
                Ok(f) => f,
                Err(StoreError::NotFound) => return Err(ScheduleError::NotFound(name.into())),
                Err(e) => return Err(e.into()),
            };
            if let Some(run) = fired.run {
                self.fired_event(&row, &run).await;
                self.after_firing(&fired.cancelled).await;
                return Ok(run);
            }
        }
        Err(ScheduleError::Store(StoreError::Conflict))
    }

    /// A page of a schedule's runs, newest first, due before `before`.
    pub async fn runs(
        &self,
        ws: &str,
        name: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<(ScheduleRow, Vec<RunRow>), ScheduleError> {
        let row = self.row(ws, name).await?;
        let runs = self.store.schedules().runs(&row.id, before, limit).await?;
        Ok((row, runs))
    }

    pub async fn run(
        &self,
        ws: &str,
        name: &str,
        id: &str,
    ) -> Result<(ScheduleRow, RunRow), ScheduleError> {
        let row = self.row(ws, name).await?;
        match self.store.schedules().run(id).await {
            Ok(r) if r.schedule_id == row.id => Ok((row, r)),
            Ok(_) | Err(StoreError::NotFound) => Err(ScheduleError::RunNotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    fn new_run(&self, row: &ScheduleRow, due: i64, trigger: RunTrigger, state: RunState) -> RunRow {
        RunRow::new(new_id("run-"), row, due, trigger, state, now_ms())
    }

    /// The job that carries out run `run` (pinned to the schedule's host; one attempt more
    /// than the retries).
    fn run_job(&self, row: &ScheduleRow, spec: &ScheduleSpec, run: &str) -> NewJob {
        NewJob {
            kind: RUN_JOB_KIND.into(),
            resource: format!("schedule_run:{run}"),
            host_id: Some(row.host_id.clone()),
            payload: serde_json::json!({ "run": run, "schedule": row.id }),
            max_attempts: i64::from(spec.retries) + 1,
            run_after: 0,
        }
    }

    /// After a firing: runs replaced lose their sandboxes, and the runners look for work.
    async fn after_firing(&self, cancelled: &[RunRow]) {
        self.wake.notify_waiters();
        self.wake.notify_one();
        for r in cancelled {
            self.kill_run_sandbox(r).await;
        }
    }

    /// Deletes the sandbox of a run's attempt, if it has one (gone already is fine).
    async fn kill_run_sandbox(&self, run: &RunRow) {
        let Some(sb) = &run.sandbox_id else { return };
        match self.store.sandboxes().by_id(sb).await {
            Ok(row) => {
                if let Err(e) = self.sandboxes.delete(&row).await {
                    tracing::warn!(run = %run.id, sandbox = %sb, error = &e as &dyn std::error::Error, "delete a run's sandbox");
                }
            }
            Err(StoreError::NotFound) => {}
            Err(e) => {
                tracing::warn!(run = %run.id, sandbox = %sb, error = &e as &dyn std::error::Error, "read a run's sandbox")
            }
        }
    }
}
