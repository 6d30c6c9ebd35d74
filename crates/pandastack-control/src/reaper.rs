//! TTL and idle timeouts: every few seconds, the sandboxes of this host whose time is up are
//! killed or hibernated, as each asked. Guest CPU counts as activity ([`crate::Activity`]).

use std::sync::Arc;
use std::time::Duration;

use pandastack_api_types::{OnTimeout, SandboxState};
use pandastack_host::{Host, HostError};
use pandastack_store::{now_ms, SandboxRow, Store, StoreError};

/// How often the reaper looks.
const TICK: Duration = Duration::from_secs(2);

/// Why the reaper could not apply one timeout.
#[derive(Debug, thiserror::Error)]
enum ReapError {
    #[error("host")]
    Host(#[from] HostError),
    #[error("state store")]
    Store(#[from] StoreError),
    #[error("delete")]
    Delete(#[from] crate::ControlError),
}

/// The reaper of one host's sandboxes.
pub struct Reaper {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
}

impl Reaper {
    pub fn new(store: Store, host: Arc<dyn Host>, host_id: String) -> Self {
        Self {
            store,
            host,
            host_id,
        }
    }

    /// Runs until the task is dropped.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(TICK);
        let mut activity = crate::Activity::default();
        loop {
            tick.tick().await;
            // Busy guests count as active (idle = no API calls and no guest work).
            activity.sample(&self.store, &*self.host).await;
            let due = match self
                .store
                .sandboxes()
                .expired(&self.host_id, now_ms())
                .await
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = &e as &dyn std::error::Error, "reaper query");
                    continue;
                }
            };
            for row in due {
                let (id, action) = (row.id.clone(), row.on_timeout.as_str());
                match self.apply(row).await {
                    Ok(()) => tracing::info!(sandbox = %id, action, "timeout"),
                    Err(e) => {
                        tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "reaper")
                    }
                }
            }
        }
    }

    async fn apply(&self, mut row: SandboxRow) -> Result<(), ReapError> {
        if row.on_timeout == OnTimeout::Hibernate {
            self.host.hibernate(&row.id).await?;
            // The absolute TTL is used up: a woken sandbox must not be hibernated again at once
            // (PATCH sets a new one); the idle clock restarts on wake.
            if row.expires_at.is_some_and(|t| t <= now_ms()) {
                row.expires_at = None;
                row.ttl_seconds = None;
                self.store.sandboxes().update(&row).await?;
            }
            self.store
                .sandboxes()
                .set_state(&row.id, SandboxState::Hibernated)
                .await?;
        } else {
            crate::Sandboxes::new(self.store.clone(), Arc::clone(&self.host))
                .delete(&row)
                .await?;
        }
        Ok(())
    }
}
