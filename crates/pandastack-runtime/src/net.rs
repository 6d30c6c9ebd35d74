//! Network slots for VMs. With a [`pandastack_net::NetPool`] attached ([`Runtime::with_network`]),
//! every VM process the runtime starts runs inside a slot's network namespace with the slot's
//! TAP as its NIC; without one, VMs have no NIC at all.
//!
//! Whether a VM gets a NIC is fixed when its template is baked (the NIC is part of the device
//! state a restore loads), so templates, snapshots and sandboxes record it (`network`), and a
//! runtime without a pool refuses to restore something that was baked with a NIC. Every guest
//! sees the same address (see `pandastack_net::GUEST_IP`): it is configured once at bake time from
//! the kernel command line and made unique by the namespace, so restored clones need no network
//! reconfiguration.

use std::sync::Arc;

use pandastack_net::{NetPool, GATEWAY_IP, GUEST_DNS, GUEST_IP, GUEST_MAC, GUEST_PREFIX_LEN};
use pandastack_vm::{NetAttach, VmDriver};

use crate::Runtime;

/// Errors of slot handling.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("this was baked with a network device but the runtime has no network pool")]
    Unavailable,
    #[error("network slot")]
    Slot(#[from] pandastack_net::NetError),
    #[error("no network slot within {0:?}")]
    Timeout(std::time::Duration),
}

/// Bound on taking a slot (building one on the spot included: a few netlink calls and one
/// `nft` run, normally well under a second). A stuck host network stack becomes an error.
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A slot held by one VM process: its index (recorded in `sandbox.json`) and how to attach.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    pub index: u32,
    pub attach: NetAttach,
}

/// Kernel arguments that configure the guest network at cold boot (read by the guest agent).
pub(crate) fn guest_kernel_args() -> Vec<String> {
    vec![
        format!("pandastack.ip={GUEST_IP}/{GUEST_PREFIX_LEN}"),
        format!("pandastack.gw={GATEWAY_IP}"),
        format!("pandastack.dns={GUEST_DNS}"),
    ]
}

impl<D: VmDriver> Runtime<D> {
    /// Gives every VM started from now on a network slot from `pool`.
    pub fn with_network(mut self, pool: Arc<NetPool>) -> Self {
        self.net = Some(pool);
        self
    }

    /// The network pool, if VMs get a NIC.
    pub fn network(&self) -> Option<&Arc<NetPool>> {
        self.net.as_ref()
    }

    /// A slot when `wanted` (the source was baked with a NIC), else none.
    pub(crate) async fn net_acquire(&self, wanted: bool) -> Result<Option<Lease>, SlotError> {
        if !wanted {
            return Ok(None);
        }
        let pool = self.net.as_ref().ok_or(SlotError::Unavailable)?;
        let t = std::time::Instant::now();
        let slot = tokio::time::timeout(ACQUIRE_TIMEOUT, pool.acquire())
            .await
            .map_err(|_| SlotError::Timeout(ACQUIRE_TIMEOUT))??;
        tracing::debug!(
            slot = slot.index,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "network slot acquired"
        );
        Ok(Some(Lease {
            index: slot.index,
            attach: NetAttach {
                tap: slot.tap.clone(),
                mac: pandastack_net::mac_to_string(&GUEST_MAC),
                netns: Some(slot.netns_path.clone()),
            },
        }))
    }

    /// A TCP connection to `port` of `sandbox`'s guest over its network slot (a socket made in
    /// the slot's namespace, see [`pandastack_net::connect_guest`]), non-blocking; `None` when
    /// the sandbox has no slot.
    pub async fn connect_guest(
        &self,
        sandbox: &crate::Sandbox<D::Vm>,
        port: u16,
        timeout: std::time::Duration,
    ) -> Option<Result<std::net::TcpStream, pandastack_net::NetError>> {
        let (slot, pool) = sandbox.info.net_slot.zip(self.net.as_ref())?;
        Some(pandastack_net::connect_guest(&pool.netns_path(slot), port, timeout).await)
    }

    /// Returns a slot to the pool (after its VM process has exited). Failures are logged: the
    /// pool's reconcile at the next start cleans up what could not be released now.
    pub(crate) async fn net_release(&self, index: Option<u32>) {
        let (Some(index), Some(pool)) = (index, self.net.as_ref()) else {
            return;
        };
        if let Err(e) = pool.release_index(index).await {
            tracing::warn!(
                slot = index,
                error = &e as &dyn std::error::Error,
                "release network slot"
            );
        }
    }
}
