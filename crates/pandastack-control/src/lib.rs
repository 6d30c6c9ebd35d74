//! The control plane: the work over the store and a [`pandastack_host::Host`] that is not HTTP.
//! Handlers in `pandastack-api` parse, call and map. Here: the sandbox service ([`Sandboxes`]:
//! create with the row first and within the workspace limit, lifecycle, wake-for-work, delete,
//! one row update per state change), the snapshot service ([`Snapshots`]: snapshot, fork all or
//! nothing, delete), the reaper (TTL and idle timeouts, with guest CPU counted as activity) and
//! start-up reconciliation. Template builds and code contexts are still in their handlers.

mod activity;
mod reaper;
mod reconcile;
mod sandboxes;
mod snapshots;

pub use activity::{busy, Activity, BUSY_SHARE};
pub use reaper::Reaper;
pub use reconcile::{reconcile_rows, Reconciled};
pub use sandboxes::{ControlError, Sandboxes, Source, Verb};
pub use snapshots::{Forked, Snapshots};

use pandastack_api_types::SandboxState;
use pandastack_host::VmState;

/// The row state of a VM state (the one place they are mapped).
pub fn row_state(v: VmState) -> SandboxState {
    match v {
        VmState::Running => SandboxState::Running,
        VmState::Paused => SandboxState::Paused,
        VmState::Hibernated => SandboxState::Hibernated,
    }
}
