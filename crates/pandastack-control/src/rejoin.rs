//! A host that (re-)joins the cluster, against the rows that name it.
//!
//! An agent that comes back — after a partition, a `SIGSTOP`, a restart of its own — joins
//! with a new epoch. What it still runs is compared with the store, the one source of truth:
//! a VM whose row is on this host and was marked `lost` (the host was declared dead meanwhile)
//! returns to its VM's state — resumed first if its agent paused it when cut off (its lease
//! may have lapsed: see `pandastack_agent::fence`) and it was running when it was lost, as is
//! a VM so paused whose row says `running`; a VM no row on this host names (deleted meanwhile, or moved to
//! another host) is stopped and removed, so no sandbox id is ever active on two hosts; then a
//! volume file no row on this host names (its database failed over meanwhile) is removed. Every
//! write carries the epoch the host joined with and is refused once that epoch is stale.
//!
//! Every replica watches the `hosts` table ([`JoinWatch`]) and reconciles a host when it sees a
//! new epoch for it (and each host once at the replica's start); two replicas doing the same
//! host's reconciliation write the same rows.

use std::collections::HashMap;
use std::time::Duration;

use pandastack_host::{Host, HostError, VmState};
use pandastack_store::{HostState, SandboxState, Store, StoreError};

use crate::Fleet;

/// What [`reconcile_host`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rejoined {
    /// Rows that were `lost` and run again.
    pub found: Vec<String>,
    /// VMs stopped and removed: no row on this host names them.
    pub removed: Vec<String>,
    /// VMs its agent paused when cut off, running again (their rows said `running`).
    pub resumed: Vec<String>,
    /// Volume files removed: no row on this host names them (a database failed over while the
    /// host was dead took its volume's row).
    pub volumes_removed: Vec<String>,
}

/// Why a host's reconciliation stopped.
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    #[error("state store")]
    Store(#[from] StoreError),
    #[error("listing the host's volume files")]
    ListVolumes(#[source] HostError),
    #[error("removing volume {id} from the host")]
    RemoveVolume {
        id: String,
        #[source]
        source: HostError,
    },
    #[error("removing sandbox {id} from the host")]
    Remove {
        id: String,
        #[source]
        source: HostError,
    },
    #[error("resuming sandbox {id}, paused by its agent when cut off")]
    Resume {
        id: String,
        #[source]
        source: HostError,
    },
}

/// VM `id`, paused by its agent when it was cut off, resumed: its state now.
async fn resumed(host: &dyn Host, id: &str) -> Result<VmState, RejoinError> {
    host.resume(id)
        .await
        .map(|v| v.state)
        .map_err(|source| RejoinError::Resume {
            id: id.to_owned(),
            source,
        })
}

/// Reconciles host `host_id`, joined with `epoch`, reached as `host` (see the module docs).
pub async fn reconcile_host(
    store: &Store,
    host: &dyn Host,
    host_id: &str,
    epoch: i64,
) -> Result<Rejoined, RejoinError> {
    let rows: HashMap<String, SandboxState> = store
        .sandboxes()
        .on_host(host_id)
        .await?
        .into_iter()
        .collect();
    let mut out = Rejoined::default();
    for vm in host.list().await {
        match rows.get(&vm.id) {
            Some(SandboxState::Lost) => {
                let mut state = vm.state;
                // Paused by its agent when cut off (see `self_fence`), if it was running then.
                if state == VmState::Paused
                    && store.sandboxes().lost_from(&vm.id).await? == Some(SandboxState::Running)
                {
                    state = resumed(host, &vm.id).await?;
                    out.resumed.push(vm.id.clone());
                }
                match store
                    .sandboxes()
                    .set_state_fenced(&vm.id, host_id, epoch, crate::row_state(state))
                    .await
                {
                    Ok(()) => out.found.push(vm.id),
                    // Joined again since, or the row went: the next reconciliation decides.
                    Err(StoreError::Fenced { .. } | StoreError::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Paused by its agent when cut off, though its host was not declared dead.
            Some(SandboxState::Running) if vm.state == VmState::Paused => {
                resumed(host, &vm.id).await?;
                out.resumed.push(vm.id);
            }
            Some(_) => {}
            None => {
                match host.destroy(&vm.id).await {
                    Ok(()) | Err(HostError::SandboxNotFound(_)) => {}
                    Err(source) => {
                        return Err(RejoinError::Remove {
                            id: vm.id.clone(),
                            source,
                        })
                    }
                }
                out.removed.push(vm.id);
            }
        }
    }
    // After the VMs, which may have mounted them.
    let volumes: std::collections::HashSet<String> = store
        .volumes()
        .on_host(host_id)
        .await?
        .into_iter()
        .map(|v| v.id)
        .collect();
    let files = host.volume_ids().await.map_err(RejoinError::ListVolumes)?;
    for id in files.into_iter().filter(|id| !volumes.contains(id)) {
        match host.delete_volume(&id).await {
            Ok(()) | Err(HostError::VolumeNotFound(_)) => out.volumes_removed.push(id),
            Err(source) => return Err(RejoinError::RemoveVolume { id, source }),
        }
    }
    Ok(out)
}

/// Watches the `hosts` table and reconciles each host that joined with a new epoch (see the
/// module docs).
pub struct JoinWatch {
    store: Store,
    fleet: Fleet,
    /// The epoch each host was last reconciled at.
    seen: HashMap<String, i64>,
}

impl JoinWatch {
    pub fn new(store: Store, fleet: Fleet) -> Self {
        Self {
            store,
            fleet,
            seen: HashMap::new(),
        }
    }

    /// One pass: every ready or draining host whose epoch is new to this watch.
    pub async fn tick(&mut self) -> Result<(), StoreError> {
        for row in self.store.hosts().list().await? {
            if row.state == HostState::Dead || row.address.is_none() {
                continue;
            }
            if self.seen.get(&row.id) == Some(&row.epoch) {
                continue;
            }
            let host = match self.fleet.host(&row.id).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::debug!(host = %row.id, error = &e as &dyn std::error::Error, "rejoin: host not reached yet");
                    continue;
                }
            };
            match reconcile_host(&self.store, &*host, &row.id, row.epoch).await {
                Ok(r) => {
                    if r != Rejoined::default() {
                        tracing::info!(host = %row.id, epoch = row.epoch, found = ?r.found, removed = ?r.removed, resumed = ?r.resumed, "host rejoined: reconciled");
                    }
                    self.seen.insert(row.id.clone(), row.epoch);
                }
                Err(e) => {
                    tracing::warn!(host = %row.id, error = &e as &dyn std::error::Error, "rejoin: reconciling the host")
                }
            }
        }
        Ok(())
    }

    /// Ticks every `every` until the task is dropped.
    pub async fn run(mut self, every: Duration) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if let Err(e) = self.tick().await {
                tracing::debug!(
                    error = &e as &dyn std::error::Error,
                    "rejoin: listing hosts"
                );
            }
        }
    }
}
