//! Load while something fails: sandboxes created (and deleted again) in a loop through some
//! replicas, every attempt recorded with when it began and ended.

use std::time::{Duration, Instant};

use pandastack_host::error_chain;

use super::Cluster;

/// Bound on one call of a [`CreateLoop`].
const CALL_LIMIT: Duration = Duration::from_secs(20);

/// One create of a [`CreateLoop`].
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The replica it went through.
    pub replica: usize,
    pub started: Instant,
    pub ended: Instant,
    /// The sandbox's id, or the error's chain.
    pub result: Result<String, String>,
}

/// Sandboxes created in a loop through some replicas ([`Cluster::create_loop`]).
pub struct CreateLoop {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Attempt>>>,
}

impl CreateLoop {
    /// Stops the loops (each finishes its attempt) and returns every attempt, in start order.
    pub async fn stop(mut self) -> Vec<Attempt> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut all = Vec::new();
        for t in std::mem::take(&mut self.tasks) {
            all.extend(t.await.expect("a create loop panicked"));
        }
        all.sort_by_key(|a| a.started);
        all
    }
}

impl Drop for CreateLoop {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Cluster {
    /// Creates (then deletes) sandboxes through each of `replicas` in a loop of its own,
    /// `pause` between attempts, until [`CreateLoop::stop`]; every attempt is recorded. Each
    /// call is made once (no client retries) and bounded.
    pub fn create_loop(&self, replicas: &[usize], pause: Duration) -> CreateLoop {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tasks = replicas
            .iter()
            .map(|&i| {
                let client = self.client_once(i);
                let stop = std::sync::Arc::clone(&stop);
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let started = Instant::now();
                        let made = tokio::time::timeout(
                            CALL_LIMIT,
                            client.create_sandbox(&Default::default()),
                        )
                        .await;
                        let result = match made {
                            Ok(Ok(sb)) => Ok(sb.id),
                            Ok(Err(e)) => Err(error_chain(&e)),
                            Err(_) => Err(format!("no answer within {CALL_LIMIT:?}")),
                        };
                        let ended = Instant::now();
                        if let Ok(id) = &result {
                            let _ =
                                tokio::time::timeout(CALL_LIMIT, client.delete_sandbox(id)).await;
                        }
                        out.push(Attempt {
                            replica: i,
                            started,
                            ended,
                            result,
                        });
                        tokio::time::sleep(pause).await;
                    }
                    out
                })
            })
            .collect();
        CreateLoop { stop, tasks }
    }
}
