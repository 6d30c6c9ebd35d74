//! Carrying out a run: the `schedule_run` job.
//!
//! The job names its run. A run whose sandbox of an attempt cut off by a restart still exists
//! loses it first; a run that is over (cancelled meanwhile) ends the job. Then the target runs:
//! for `sandbox_exec` a new sandbox of the template (through the sandbox service), the command
//! with `PANDASTACK_PAYLOAD` (the schedule's payload, JSON) in its environment, exit code and
//! output recorded, and the sandbox deleted whatever happened. A failed attempt with retries
//! left puts the run back to `queued` and the job runner queues the job again.
//!
//! In a cluster the scheduler and the runners run on the replica running the workers, so a
//! host's loss stops no schedule; a run whose sandbox's host is lost mid-run fails with
//! [`HOST_LOST`] (after waiting for the host to be declared lost, so that the next attempt is
//! placed on another host) and runs again while it has retries left.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use pandastack_api_types::{
    FunctionTarget, InvocationStatus, RunState, SandboxExecTarget, ScheduleTarget, PAYLOAD_ENV,
};
use pandastack_host::{error_chain, ExecSpec};
use pandastack_store::{new_id, now_ms, JobRow, RunRow, SandboxRow, ScheduleRow, StoreError};

use super::{spec_of, Schedules, MAX_RUN_OUTPUT, RUN_JOB_KIND, RUN_METADATA, SCHEDULE_METADATA};
use crate::Source;

/// How the error of an attempt whose sandbox's host was lost starts.
pub const HOST_LOST: &str = "host_lost";

/// Pause before a failed attempt runs again.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// How an attempt ended.
struct Outcome {
    exit_code: Option<i64>,
    output: Option<String>,
    /// Why it failed (`None`: exit code 0).
    error: Option<String>,
}

/// Stdout then stderr, at most [`MAX_RUN_OUTPUT`] bytes (cut on a character boundary).
fn bounded_output(stdout: &[u8], stderr: &[u8]) -> String {
    let mut out = String::from_utf8_lossy(stdout).into_owned();
    out.push_str(&String::from_utf8_lossy(stderr));
    if out.len() > MAX_RUN_OUTPUT {
        let mut cut = MAX_RUN_OUTPUT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

impl Schedules {
    /// One runner of this host's run jobs (several run side by side).
    pub(super) async fn runner(self) {
        let runner = crate::jobs::Runner {
            store: self.store.clone(),
            host_id: self.host_id.clone(),
            kind: RUN_JOB_KIND,
            wake: std::sync::Arc::clone(&self.wake),
            retry_after: RETRY_AFTER,
        };
        runner
            .run(|job| {
                let me = self.clone();
                async move { me.run_job_row(&job).await }
            })
            .await
    }

    /// Carries out the run of `job`; `Err` is a failed attempt (queued again while it has
    /// attempts left).
    async fn run_job_row(&self, job: &JobRow) -> Result<(), String> {
        let Some(run_id) = job.payload.get("run").and_then(|v| v.as_str()) else {
            return Err("job without a run".into());
        };
        let run = match self.store.schedules().run(run_id).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Ok(()), // the schedule was deleted
            Err(e) => return Err(error_chain(&e)),
        };
        // An attempt cut off (the process died) may have left its sandbox.
        self.kill_run_sandbox(&run).await;
        let schedule = match self.store.schedules().by_id(&run.schedule_id).await {
            Ok(s) => s,
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(error_chain(&e)),
        };
        let started = self
            .store
            .schedules()
            .start_run(&run.id, job.attempts, now_ms())
            .await
            .map_err(|e| error_chain(&e))?;
        if !started {
            return Ok(()); // cancelled
        }
        let spec = spec_of(&schedule).map_err(|e| error_chain(&e))?;
        let outcome = match &spec.target {
            ScheduleTarget::SandboxExec(t) => {
                self.sandbox_exec(&schedule, &run, t, &spec.payload).await
            }
            ScheduleTarget::Function(t) => {
                self.call_function(&schedule, &run, t, &spec.payload).await
            }
        };
        let last = job.attempts >= job.max_attempts;
        let state = match (&outcome.error, last) {
            (None, _) => RunState::Succeeded,
            (Some(_), true) => RunState::Failed,
            (Some(_), false) => RunState::Queued,
        };
        let recorded = self
            .store
            .schedules()
            .finish_run(
                &run.id,
                state,
                outcome.exit_code,
                outcome.output.as_deref(),
                outcome.error.as_deref(),
                now_ms(),
            )
            .await
            .map_err(|e| error_chain(&e))?;
        if recorded && state == RunState::Failed {
            let data = serde_json::json!({
                "run_id": run.id,
                "attempt": job.attempts,
                "exit_code": outcome.exit_code,
                "error": outcome.error,
            });
            self.sandboxes
                .events()
                .emit(
                    &schedule.workspace_id,
                    "schedule.failed",
                    crate::ResourceKind::Schedule,
                    &schedule.name,
                    data,
                )
                .await;
        }
        // The sandbox goes after the result is kept: a process that dies in between leaves a
        // finished run whose job, run again, only deletes the sandbox.
        let run = self
            .store
            .schedules()
            .run(&run.id)
            .await
            .map_err(|e| error_chain(&e))?;
        self.kill_run_sandbox(&run).await;
        match (recorded, outcome.error) {
            (false, _) | (true, None) => Ok(()),
            (true, Some(e)) => Err(e),
        }
    }

    /// One call of the target function with the payload as its event; the output is the
    /// result (or the error's traceback) and what the call printed.
    async fn call_function(
        &self,
        schedule: &ScheduleRow,
        run: &RunRow,
        t: &FunctionTarget,
        payload: &serde_json::Value,
    ) -> Outcome {
        let event = bytes::Bytes::from(payload.to_string());
        match self
            .functions
            .invoke(&schedule.workspace_id, &t.name, event, Some(&run.id))
            .await
        {
            Err(e) => Outcome {
                exit_code: None,
                output: None,
                error: Some(format!("function {}: {}", t.name, error_chain(&e))),
            },
            Ok(inv) => {
                let mut out = match (&inv.result, &inv.error) {
                    (Some(r), _) => format!("{r}\n"),
                    (None, Some(e)) => format!("{}: {}\n{}", e.kind, e.message, e.traceback),
                    (None, None) => "null\n".to_owned(),
                };
                out.push_str(&inv.stdout);
                out.push_str(&inv.stderr);
                Outcome {
                    exit_code: None,
                    output: Some(bounded_output(out.as_bytes(), b"")),
                    error: match inv.status {
                        InvocationStatus::Ok => None,
                        s => Some(format!(
                            "function {}: {}{}",
                            t.name,
                            s.as_str(),
                            inv.error
                                .map(|e| format!(" ({}: {})", e.kind, e.message))
                                .unwrap_or_default()
                        )),
                    },
                }
            }
        }
    }

    /// A new sandbox of the target's template, the command in it, the sandbox deleted.
    async fn sandbox_exec(
        &self,
        schedule: &ScheduleRow,
        run: &RunRow,
        t: &SandboxExecTarget,
        payload: &serde_json::Value,
    ) -> Outcome {
        let failed = |error: String| Outcome {
            exit_code: None,
            output: None,
            error: Some(error),
        };
        let resolved = match self
            .templates
            .resolve(&schedule.workspace_id, &t.template)
            .await
        {
            Ok(r) => r,
            Err(e) => return failed(format!("template {}: {}", t.template, error_chain(&e))),
        };
        let id = new_id("sb-");
        // The sandbox's id is the run's before the sandbox exists: whoever cancels the run, or
        // the next attempt after a crash, can find and delete it.
        match self
            .store
            .schedules()
            .set_run_sandbox(&run.id, Some(&id))
            .await
        {
            Ok(true) => {}
            Ok(false) => return failed("cancelled".into()),
            Err(e) => return failed(error_chain(&e)),
        }
        let mut row = SandboxRow::service(
            &schedule.workspace_id,
            &self.host_id,
            &t.template,
            BTreeMap::from([
                (SCHEDULE_METADATA.to_owned(), schedule.name.clone()),
                (RUN_METADATA.to_owned(), run.id.clone()),
            ]),
        );
        row.id = id.clone();
        // A safety net: the reaper removes a sandbox nobody deleted (the process died and the
        // run was not attempted again).
        let ttl = (t.timeout_seconds + 600) as i64;
        row.ttl_seconds = Some(ttl);
        row.expires_at = crate::expiry(row.created_at, row.ttl_seconds);
        if let Err(e) = self
            .sandboxes
            .launch(row, Source::Template(resolved.baked.clone()))
            .await
        {
            return failed(format!(
                "sandbox of template {}: {}",
                t.template,
                error_chain(&e)
            ));
        }
        // Cancelled while the sandbox was made: the canceller may have missed it.
        match self.store.schedules().run(&run.id).await {
            Ok(r) if r.state == RunState::Running => {}
            _ => return failed("cancelled".into()),
        }
        let mut env: HashMap<String, String> = resolved.env.into_iter().collect();
        env.extend(t.env.clone());
        env.insert(PAYLOAD_ENV.into(), payload.to_string());
        let timeout = Duration::from_secs(t.timeout_seconds);
        let exec = self.host.exec(
            &id,
            ExecSpec {
                shell: t.command.clone(),
                env,
                timeout,
                max_output_bytes: MAX_RUN_OUTPUT as u64,
                ..Default::default()
            },
        );
        // The guest kills the command at `timeout`; this bounds a guest that does not answer.
        let why = match tokio::time::timeout(timeout + Duration::from_secs(30), exec).await {
            Err(_) => format!("no answer from the sandbox after {}s", t.timeout_seconds),
            Ok(Err(e)) => format!("exec: {}", error_chain(&e)),
            Ok(Ok(o)) => return Self::exited(o, t.timeout_seconds),
        };
        // Its host lost meanwhile: said so (the next attempt, if any, is placed on a live host:
        // the lost one's lease has run out by the time this returns).
        match self.sandboxes.lost_host(&id).await {
            Ok(Some(host)) => failed(format!(
                "{HOST_LOST}: host {host} was lost while the run was on it ({why})"
            )),
            Ok(None) => failed(why),
            Err(e) => failed(format!("{why} (and reading its host: {})", error_chain(&e))),
        }
    }

    /// How a command that ran ended.
    fn exited(o: pandastack_host::ExecOutcome, timeout_seconds: u64) -> Outcome {
        Outcome {
            exit_code: Some(i64::from(o.exit_code)),
            output: Some(bounded_output(&o.stdout, &o.stderr)),
            error: if o.timed_out {
                Some(format!("timed out after {timeout_seconds}s"))
            } else if o.exit_code != 0 {
                Some(format!("exit code {}", o.exit_code))
            } else {
                None
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_bounded_on_a_char_boundary() {
        let big = "é".repeat(MAX_RUN_OUTPUT);
        let o = bounded_output(big.as_bytes(), b"tail");
        assert!(o.len() <= MAX_RUN_OUTPUT);
        assert!(o.starts_with('é'));
        assert_eq!(bounded_output(b"out\n", b"err\n"), "out\nerr\n");
    }
}
