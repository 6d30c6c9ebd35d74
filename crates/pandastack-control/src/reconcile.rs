//! Start-up: the rows of this host's sandboxes against what the host really has. Rows of other
//! hosts are theirs and untouched.

use pandastack_host::Host;
use pandastack_store::{Store, StoreError};

/// What reconciliation changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// Rows whose state now says what the host says.
    pub kept: Vec<String>,
    /// Rows removed: no VM on the host (a create that never finished, or a VM lost with the host).
    pub removed: Vec<String>,
}

/// Sets the state of each of `known` (rows of this host) to the host's, and removes the rows
/// the host has no sandbox for.
pub async fn reconcile_rows(
    store: &Store,
    host: &dyn Host,
    known: Vec<String>,
) -> Result<Reconciled, StoreError> {
    let mut out = Reconciled::default();
    for id in known {
        match host.get(&id).await {
            Ok(v) => {
                store
                    .sandboxes()
                    .set_state(&id, crate::row_state(v.state))
                    .await?;
                out.kept.push(id);
            }
            Err(_) => {
                tracing::warn!(sandbox = %id, "no vm for this sandbox; removing its row");
                store.sandboxes().delete(&id).await?;
                out.removed.push(id);
            }
        }
    }
    Ok(out)
}
