//! TTL and idle timeouts: every few seconds, the sandboxes of this host whose time is up are
//! killed or hibernated, as each asked. Guest CPU counts as activity ([`crate::Activity`]).
//! The same tick marks `failed` the sandboxes whose VM exited on its own.

use std::sync::Arc;
use std::time::Duration;

use pandastack_api_types::{OnTimeout, SandboxState};
use pandastack_host::{Host, HostError, VmState};
use pandastack_store::{now_ms, Adding, SandboxRow, Store, StoreError};

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

/// The reaper of one host's sandboxes (or, over a cluster's fleet, of every host's).
pub struct Reaper {
    store: Store,
    host: Arc<dyn Host>,
    host_id: String,
    sandboxes: crate::Sandboxes,
    every_host: bool,
    /// Calls in flight in this process: a sandbox with one is not idle (a TTL is absolute: it
    /// applies all the same).
    in_flight: crate::InFlight,
}

impl Reaper {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        host_id: String,
        sandboxes: crate::Sandboxes,
        in_flight: crate::InFlight,
    ) -> Self {
        Self {
            store,
            host,
            host_id,
            sandboxes,
            every_host: false,
            in_flight,
        }
    }

    /// Reaps the sandboxes of every host, not only `host_id`'s: the reaper of a cluster's
    /// control plane, whose host is the fleet of its agents (one replica runs it at a time).
    pub fn on_every_host(mut self) -> Self {
        self.every_host = true;
        self
    }

    /// Runs until the task is dropped.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(TICK);
        let mut activity = crate::Activity::default();
        // Sandboxes whose hibernation waits for room in their workspace's quotas.
        let mut deferred = std::collections::HashSet::new();
        loop {
            tick.tick().await;
            self.mark_exited().await;
            // Busy guests count as active (idle = no API calls and no guest work).
            activity.sample(&self.store, &*self.host).await;
            let rows = self.store.sandboxes();
            let now = now_ms();
            let due = match if self.every_host {
                rows.expired_on_any_host(now).await
            } else {
                rows.expired(&self.host_id, now).await
            } {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(error = &e as &dyn std::error::Error, "reaper query");
                    continue;
                }
            };
            // Nothing runs in a failed sandbox to hibernate: it stays for inspection until
            // deleted (or until its time is up, when it asked to be killed then).
            let hibernating_failed = |r: &SandboxRow| {
                r.state == SandboxState::Failed && r.on_timeout == OnTimeout::Hibernate
            };
            let in_a_call = |r: &SandboxRow| {
                let ttl_due = r.expires_at.is_some_and(|t| t <= now);
                !ttl_due && self.in_flight.contains(&r.id)
            };
            for row in due
                .into_iter()
                .filter(|r| !hibernating_failed(r) && !in_a_call(r))
            {
                let (id, action) = (row.id.clone(), row.on_timeout.as_str());
                match self.apply(row).await {
                    Ok(Applied::Done) => {
                        deferred.remove(&id);
                        tracing::info!(sandbox = %id, action, "timeout")
                    }
                    // Tried again every tick; said once.
                    Ok(Applied::Deferred(why)) => {
                        if deferred.insert(id.clone()) {
                            tracing::warn!(sandbox = %id, reason = %why, "timeout: not hibernated while the workspace is at its storage quota; it keeps running");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(sandbox = %id, error = &e as &dyn std::error::Error, "reaper")
                    }
                }
            }
        }
    }

    /// The rows of sandboxes whose VM exited without being stopped (see [`VmState::Exited`])
    /// say `failed` from the next tick on, so the API never reports a dead VM as running.
    async fn mark_exited(&self) {
        let exited = self.host.list().await.into_iter();
        for v in exited.filter(|v| v.state == VmState::Exited) {
            match self.store.sandboxes().by_id(&v.id).await {
                Ok(row)
                    if row.state != SandboxState::Failed
                        && (self.every_host || row.host_id == self.host_id) =>
                {
                    tracing::warn!(sandbox = %v.id, "its VM exited (the guest powered off or rebooted, or the process was killed): failed");
                    if let Err(e) = self
                        .store
                        .sandboxes()
                        .set_state(&v.id, SandboxState::Failed)
                        .await
                    {
                        tracing::warn!(sandbox = %v.id, error = &e as &dyn std::error::Error, "mark failed");
                    }
                }
                // Failed already; a row not made yet (a create in progress) or gone (a delete).
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => {
                    tracing::warn!(sandbox = %v.id, error = &e as &dyn std::error::Error, "reaper: exited VM's row")
                }
            }
        }
    }

    async fn apply(&self, mut row: SandboxRow) -> Result<Applied, ReapError> {
        if row.on_timeout == OnTimeout::Hibernate {
            // A hibernation the workspace has no room for waits (the sandbox keeps running):
            // idle timeouts must not let a workspace keep more than its quotas allow.
            match self
                .store
                .quotas()
                .check(&row.workspace_id, Adding::Hibernation)
                .await
            {
                Ok(()) => {}
                Err(e @ (StoreError::CountLimit { .. } | StoreError::StorageQuota { .. })) => {
                    return Ok(Applied::Deferred(e.to_string()))
                }
                Err(e) => return Err(e.into()),
            }
            self.expired(&row).await;
            let view = self.host.hibernate(&row.id).await?;
            self.store
                .sandboxes()
                .set_image_bytes(&row.id, view.image_bytes as i64)
                .await?;
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
            self.sandboxes.keep_durable(&row, row.last_activity_at);
            self.sandboxes
                .state_event(&row, row.state, SandboxState::Hibernated)
                .await;
        } else {
            self.expired(&row).await;
            self.sandboxes.delete(&row).await?;
        }
        Ok(Applied::Done)
    }

    /// The event of a sandbox whose time is up (its TTL or its idle timeout), before what it
    /// asked for (`on_timeout`) is done.
    async fn expired(&self, row: &SandboxRow) {
        let reason = if row.expires_at.is_some_and(|t| t <= now_ms()) {
            "ttl"
        } else {
            "idle"
        };
        let data = serde_json::json!({"reason": reason, "on_timeout": row.on_timeout.as_str()});
        self.sandboxes
            .events()
            .emit(
                &row.workspace_id,
                "sandbox.expired",
                crate::ResourceKind::Sandbox,
                &row.id,
                data,
            )
            .await;
    }
}

/// What became of a timeout.
enum Applied {
    Done,
    /// Not applied for now, and why.
    Deferred(String),
}
