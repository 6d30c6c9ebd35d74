//! Asynchronous function calls (`POST …/invoke?async=1`): the call's row and its durable job
//! (`function_invoke`, pinned to the function's host) go in together, so an accepted call runs
//! even if the server restarts first. The job runs the call like a synchronous one; a call
//! that ends in `error` or `timeout` with attempts left is queued again (after
//! [`RETRY_AFTER`]) and its row shows the last attempt's outcome meanwhile.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pandastack_api_types::{Invocation, InvocationStatus};
use pandastack_store::{new_id, now_ms, InvocationRow, JobRow, NewJob, StoreError};

use super::function::public_name;
use super::{FunctionError, Functions};

/// Kind of the jobs that run asynchronous calls.
pub const INVOKE_JOB_KIND: &str = "function_invoke";
/// Pause before a failed asynchronous call is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// Asynchronous calls run side by side on a host.
const RUNNERS: usize = 4;

/// The wire view of a stored asynchronous call.
fn view(name: &str, row: &InvocationRow) -> Invocation {
    let state = InvocationStatus::parse(&row.state).unwrap_or(InvocationStatus::Queued);
    let mut inv = row
        .outcome
        .as_ref()
        .and_then(|o| serde_json::from_value::<Invocation>(o.clone()).ok())
        .unwrap_or_else(|| Invocation::new(name, state));
    inv.id = Some(row.id.clone());
    inv.function = name.to_owned();
    inv.status = state;
    inv.attempts = row.attempts as u32;
    inv.created_at = Some(crate::databases::rfc3339(row.created_at));
    inv.finished_at = state
        .finished()
        .then(|| crate::databases::rfc3339(row.updated_at));
    inv
}

impl Functions {
    /// Queues a call of function `name` with `event` (JSON); `retries` more attempts after a
    /// failed one.
    pub async fn invoke_async(
        &self,
        ws: &str,
        name: &str,
        event: Bytes,
        retries: u32,
    ) -> Result<Invocation, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        let payload: serde_json::Value =
            serde_json::from_slice(&event).map_err(|e| FunctionError::BadEvent(e.to_string()))?;
        let now = now_ms();
        let inv = InvocationRow {
            id: new_id("inv-"),
            app_id: row.id.clone(),
            workspace_id: ws.to_owned(),
            host_id: row.host_id.clone(),
            state: InvocationStatus::Queued.as_str().into(),
            payload,
            outcome: None,
            attempts: 0,
            max_attempts: i64::from(retries) + 1,
            created_at: now,
            updated_at: now,
        };
        let job = NewJob {
            kind: INVOKE_JOB_KIND.into(),
            resource: format!("invocation:{}", inv.id),
            host_id: Some(row.host_id.clone()),
            payload: serde_json::json!({ "invocation": inv.id }),
            max_attempts: inv.max_attempts,
            run_after: now,
        };
        self.s.store.invocations().queue(&inv, &job).await?;
        self.invoke_wake.notify_one();
        Ok(view(name, &inv))
    }

    /// Asynchronous call `id` of function `name`.
    pub async fn invocation(
        &self,
        ws: &str,
        name: &str,
        id: &str,
    ) -> Result<Invocation, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        match self.s.store.invocations().get(&row.id, id).await {
            Ok(inv) => Ok(view(name, &inv)),
            Err(StoreError::NotFound) => Err(FunctionError::InvocationNotFound(id.into())),
            Err(e) => Err(e.into()),
        }
    }

    /// Starts the runners of this host's asynchronous calls; returns their tasks.
    pub fn start_invoke_runners(&self) -> Vec<tokio::task::JoinHandle<()>> {
        (0..RUNNERS)
            .map(|_| {
                let me = self.clone();
                tokio::spawn(async move {
                    let runner = crate::jobs::Runner {
                        store: me.s.store.clone(),
                        host_id: me.s.host_id.clone(),
                        kind: INVOKE_JOB_KIND,
                        wake: Arc::clone(&me.invoke_wake),
                        retry_after: RETRY_AFTER,
                    };
                    runner
                        .run(|job| {
                            let me = me.clone();
                            async move { me.run_invocation(&job).await }
                        })
                        .await
                })
            })
            .collect()
    }

    /// One attempt of the call `job` names; `Err` queues another while attempts are left.
    async fn run_invocation(&self, job: &JobRow) -> Result<(), String> {
        let id = job
            .payload
            .get("invocation")
            .and_then(|v| v.as_str())
            .ok_or("job names no invocation")?;
        let mut inv = match self.s.store.invocations().by_id(id).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Ok(()), // the function was deleted
            Err(e) => return Err(e.to_string()),
        };
        if InvocationStatus::parse(&inv.state).is_some_and(|s| s.finished()) {
            return Ok(());
        }
        let app = match self.s.store.apps().by_id(&inv.app_id).await {
            Ok(a) => a,
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        inv.attempts = job.attempts;
        inv.state = InvocationStatus::Running.as_str().into();
        inv.updated_at = now_ms();
        self.s
            .store
            .invocations()
            .update(&inv)
            .await
            .map_err(|e| e.to_string())?;
        let event = Bytes::from(inv.payload.to_string());
        let outcome = match self.invoke_row(&app, event, Some(&inv.id)).await {
            Ok(o) => o,
            Err(e) => {
                let mut failed = Invocation::new(public_name(&app.name), InvocationStatus::Error);
                failed.id = Some(inv.id.clone());
                failed.attempts = job.attempts as u32;
                failed.error = Some(pandastack_api_types::InvocationError {
                    kind: "InvokeError".into(),
                    message: e.to_string(),
                    traceback: String::new(),
                });
                failed
            }
        };
        let last = job.attempts >= job.max_attempts;
        let failed = outcome.status != InvocationStatus::Ok;
        inv.state = if failed && !last {
            InvocationStatus::Queued.as_str().into()
        } else {
            outcome.status.as_str().into()
        };
        inv.outcome = serde_json::to_value(&outcome).ok();
        inv.updated_at = now_ms();
        self.s
            .store
            .invocations()
            .update(&inv)
            .await
            .map_err(|e| e.to_string())?;
        if failed && !last {
            return Err(format!(
                "attempt {}: {}",
                job.attempts,
                outcome.status.as_str()
            ));
        }
        Ok(())
    }
}
