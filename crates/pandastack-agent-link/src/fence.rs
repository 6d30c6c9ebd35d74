//! The agent fences itself: it pauses its VMs once its lease may have lapsed.
//!
//! A host whose lease lapses is declared dead by the control plane, and a sandbox of a dead
//! host created with `on_host_loss: "restore"` is restored on another host. An agent cut off
//! from every replica (a partition, a stopped process that resumes) cannot know whether that
//! happened, so it stops its guests from running before it could have:
//!
//! ```text
//!   lease runs until T (attend: lease_ms after the newest heartbeat a renewal took)
//!   now ≥ T − MARGIN, or no lease ─► pause every running VM (again each POLL while so)
//!   renewed, same epoch ──────────► the lease never lapsed: resume the VMs it paused
//!   joined with a new epoch ──────► forget them: the control plane's reconciliation resumes
//!                                   those whose rows still name this host as running, and
//!                                   destroys those no row names here (restored elsewhere)
//! ```
//!
//! An agent starts without a lease, so a restarted agent pauses the VMs it found until it has
//! joined and been reconciled (about a second). The margin covers the heartbeat's own delay and
//! a replica's clock running ahead of this host's by up to a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pandastack_host::{Host, HostError, VmState};
use tokio::sync::watch;

use crate::membership::LeaseView;

/// How long before the lease's certain end the VMs are paused.
pub const MARGIN: Duration = Duration::from_secs(1);
/// How often a fenced host looks for VMs running again (a create that was under way).
const POLL: Duration = Duration::from_millis(250);

/// The VMs an agent paused when its lease may have lapsed, and the epoch it held then.
#[derive(Debug, Default)]
pub struct Fence {
    paused: Vec<String>,
    epoch: Option<i64>,
    fenced: bool,
}

impl Fence {
    /// One look at `lease` at `now`: pauses the running VMs of `host` if the lease may have
    /// lapsed, resumes the ones it paused if the same epoch's lease was renewed since, and
    /// forgets them on a new epoch. Returns the VMs paused and resumed by this look.
    pub async fn check(
        &mut self,
        host: &dyn Host,
        lease: LeaseView,
        now: Instant,
    ) -> (Vec<String>, Vec<String>) {
        let lapsed = lease.runs_until.is_none_or(|until| now + MARGIN >= until);
        if lapsed {
            if !self.fenced {
                self.fenced = true;
                self.epoch = lease.epoch;
            }
            let mut paused = Vec::new();
            for vm in host.list().await {
                if vm.state != VmState::Running {
                    continue;
                }
                match host.pause(&vm.id).await {
                    Ok(_) => paused.push(vm.id),
                    // Gone or changed meanwhile: nothing runs.
                    Err(HostError::SandboxNotFound(_) | HostError::InvalidState { .. }) => {}
                    Err(e) => tracing::error!(
                        sandbox = %vm.id,
                        error = &e as &dyn std::error::Error,
                        "fence: cannot pause a VM while the lease may have lapsed"
                    ),
                }
            }
            if !paused.is_empty() {
                tracing::warn!(
                    vms = ?paused,
                    epoch = ?lease.epoch,
                    "fence: the lease may have lapsed; VMs paused until it is renewed or the \
                     host joins again"
                );
            }
            self.paused.extend(paused.iter().cloned());
            return (paused, Vec::new());
        }
        if !self.fenced {
            return (Vec::new(), Vec::new());
        }
        self.fenced = false;
        let paused = std::mem::take(&mut self.paused);
        if lease.epoch.is_none() || lease.epoch != self.epoch {
            // A new epoch: the reconciliation after the join decides.
            tracing::info!(
                vms = ?paused,
                epoch = ?lease.epoch,
                "fence: joined again; the control plane resumes what is still this host's"
            );
            return (Vec::new(), Vec::new());
        }
        let mut resumed = Vec::new();
        for id in paused {
            match host.resume(&id).await {
                Ok(_) => resumed.push(id),
                Err(HostError::SandboxNotFound(_) | HostError::InvalidState { .. }) => {}
                Err(e) => tracing::warn!(
                    sandbox = %id,
                    error = &e as &dyn std::error::Error,
                    "fence: lease renewed, but a VM it paused stays paused"
                ),
            }
        }
        if !resumed.is_empty() {
            tracing::info!(vms = ?resumed, "fence: lease renewed; VMs resumed");
        }
        (Vec::new(), resumed)
    }
}

/// Fences `host` by what `lease` says (see the module docs) until the attendance is gone,
/// going on from `fence` (take a first look with [`Fence::check`] before attending).
pub async fn guard(host: Arc<dyn Host>, mut lease: watch::Receiver<LeaseView>, mut fence: Fence) {
    loop {
        let view = *lease.borrow_and_update();
        fence.check(&*host, view, Instant::now()).await;
        // Look again when the lease changes, at its margin, or soon while fenced.
        let wake = match view.runs_until {
            Some(until) if !fence.fenced => until.checked_sub(MARGIN).unwrap_or(until),
            _ => Instant::now() + POLL,
        };
        tokio::select! {
            changed = lease.changed() => if changed.is_err() {
                // The attendance is gone (the agent stops).
                return;
            },
            () = tokio::time::sleep_until(wake.into()) => {}
        }
    }
}
