//! The loop every durable-job runner of a host shares: claim this host's next job of one kind
//! with a lease, keep the lease renewed while the job runs, record the outcome (done, or failed
//! and queued again after a pause while it has attempts left), and sleep until woken or a
//! while has passed when there is nothing to do.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use pandastack_store::{now_ms, JobRow, Store};
use tokio::sync::Notify;

/// A running job renews its lease this often; a lease lasts three times as long.
const LEASE_RENEW: Duration = Duration::from_secs(10);
/// Longest sleep between looks for work when nobody wakes the runner.
const IDLE: Duration = Duration::from_secs(5);

/// One kind of job and where its runner runs.
pub(crate) struct Runner {
    pub store: Store,
    pub host_id: String,
    /// `kind` of the jobs this runner claims.
    pub kind: &'static str,
    /// Notified when a job of this kind is queued.
    pub wake: Arc<Notify>,
    /// Pause before a failed attempt runs again.
    pub retry_after: Duration,
}

impl Runner {
    /// Runs jobs one after another with `run` for the life of the process. `run` returns the
    /// failure's message, which the job row keeps.
    pub async fn run<F, Fut>(self, mut run: F)
    where
        F: FnMut(JobRow) -> Fut,
        Fut: Future<Output = Result<(), String>>,
    {
        let owner = format!("{}/{}/{}", self.host_id, std::process::id(), self.kind);
        let lease = (LEASE_RENEW * 3).as_millis() as i64;
        loop {
            let job = match self
                .store
                .jobs()
                .claim_kind(&self.host_id, &owner, lease, self.kind)
                .await
            {
                Ok(Some(j)) => j,
                Ok(None) => {
                    let _ = tokio::time::timeout(IDLE, self.wake.notified()).await;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(
                        kind = self.kind,
                        error = &e as &dyn std::error::Error,
                        "claim a job"
                    );
                    tokio::time::sleep(IDLE).await;
                    continue;
                }
            };
            let renew = {
                let (store, id, owner) = (self.store.clone(), job.id.clone(), owner.clone());
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(LEASE_RENEW).await;
                        if let Err(e) = store.jobs().renew(&id, &owner, lease).await {
                            tracing::warn!(job = %id, error = &e as &dyn std::error::Error, "renew a job's lease");
                        }
                    }
                })
            };
            let id = job.id.clone();
            let result = run(job).await;
            renew.abort();
            let done = match result {
                Ok(()) => self.store.jobs().complete(&id, &owner).await,
                Err(message) => {
                    let retry = now_ms() + self.retry_after.as_millis() as i64;
                    self.store
                        .jobs()
                        .fail(&id, &owner, &message, Some(retry))
                        .await
                        .map(|_| ())
                }
            };
            if let Err(e) = done {
                tracing::warn!(job = %id, error = &e as &dyn std::error::Error, "finish a job");
            }
        }
    }
}
