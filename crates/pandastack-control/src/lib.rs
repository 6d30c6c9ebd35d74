//! The control plane's own work: what runs over the store and a [`Host`] without an HTTP request
//! behind it. Handlers in `pandastack-api` parse, call and map; the reaper (TTL and idle timeouts,
//! with guest CPU counted as activity) and start-up reconciliation live here, and so will the
//! per-resource services as they move out of the handlers.

mod activity;
mod reaper;
mod reconcile;

pub use activity::{busy, Activity, BUSY_SHARE};
pub use reaper::Reaper;
pub use reconcile::{reconcile_rows, Reconciled};

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
