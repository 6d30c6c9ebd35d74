//! One sandbox's owner: its state behind a lock held for each whole operation.

use std::path::Path;

use pandastack_host::VmState;
use pandastack_runtime::{Hibernated, Sandbox, SandboxInfo};
use pandastack_vm::Vm;
use tokio::sync::Mutex;

/// A snapshot of one sandbox's state for callers.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub id: String,
    pub state: VmState,
    pub info: SandboxInfo,
    /// Milliseconds the last create or wake took to exec-ready.
    pub ready_ms: u64,
    /// Host disk the sandbox's files take while it is hibernated (0 otherwise).
    pub image_bytes: u64,
}

/// What a sandbox's entry holds: its running or paused VM, its hibernation image, or nothing.
/// (A *network* slot is `pandastack_net::Slot`; this was called `Slot` too.)
pub(crate) enum SandboxVm<V: Vm> {
    Running(Sandbox<V>),
    Paused(Sandbox<V>),
    Hibernated(Hibernated),
    /// Taken for an operation that failed half-way, or destroyed.
    Gone,
}

impl<V: Vm> SandboxVm<V> {
    pub(crate) fn id(&self) -> &str {
        match self {
            SandboxVm::Running(sb) | SandboxVm::Paused(sb) => &sb.id,
            SandboxVm::Hibernated(h) => &h.id,
            SandboxVm::Gone => "",
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        match self {
            SandboxVm::Running(sb) | SandboxVm::Paused(sb) => &sb.dir,
            SandboxVm::Hibernated(h) => &h.dir,
            SandboxVm::Gone => Path::new("/nonexistent"),
        }
    }

    pub(crate) fn state(&self) -> Option<VmState> {
        match self {
            SandboxVm::Running(_) => Some(VmState::Running),
            SandboxVm::Paused(_) => Some(VmState::Paused),
            SandboxVm::Hibernated(_) => Some(VmState::Hibernated),
            SandboxVm::Gone => None,
        }
    }

    pub(crate) fn sandbox(&self) -> Option<&Sandbox<V>> {
        match self {
            SandboxVm::Running(sb) | SandboxVm::Paused(sb) => Some(sb),
            _ => None,
        }
    }

    pub(crate) fn view(&self) -> Option<SandboxView> {
        let (info, ready_ms, image_bytes) = match self {
            SandboxVm::Running(sb) | SandboxVm::Paused(sb) => {
                (sb.info.clone(), sb.ready_in.as_millis() as u64, 0)
            }
            SandboxVm::Hibernated(h) => (h.info.clone(), 0, h.image_bytes()),
            SandboxVm::Gone => return None,
        };
        Some(SandboxView {
            id: self.id().to_owned(),
            state: self.state()?,
            info,
            ready_ms,
            image_bytes,
        })
    }

    pub(crate) fn mark_paused(&mut self) {
        if let SandboxVm::Running(_) = self {
            if let SandboxVm::Running(sb) = std::mem::replace(self, SandboxVm::Gone) {
                *self = SandboxVm::Paused(sb);
            }
        }
    }

    pub(crate) fn mark_running(&mut self) {
        if let SandboxVm::Paused(_) = self {
            if let SandboxVm::Paused(sb) = std::mem::replace(self, SandboxVm::Gone) {
                *self = SandboxVm::Running(sb);
            }
        }
    }
}

pub(crate) struct Entry<V: Vm> {
    /// Held for the whole of each operation on this sandbox.
    pub(crate) slot: Mutex<SandboxVm<V>>,
    /// The host's connections to the guest over its network, shut down when the VM stops
    /// running (see [`crate::dialed`]).
    pub(crate) dialed: std::sync::Arc<crate::dialed::Dialed>,
    /// The state as of the last finished operation: readers never wait behind a long one.
    view: std::sync::Mutex<Option<SandboxView>>,
    /// Cancels the upload of a durable copy of its hibernation image under way, if any (see
    /// [`crate::HostAgent::store_durable`]): an operation that changes the sandbox does not
    /// wait behind it.
    durable: std::sync::Mutex<Option<tokio_util::sync::CancellationToken>>,
    /// The host's readings of its VM (see [`crate::metrics`]).
    pub(crate) history: std::sync::Mutex<crate::metrics::History>,
}

impl<V: Vm> Entry<V> {
    pub(crate) fn new(slot: SandboxVm<V>) -> Self {
        let view = slot.view();
        Self {
            slot: Mutex::new(slot),
            dialed: Default::default(),
            view: std::sync::Mutex::new(view),
            durable: std::sync::Mutex::new(None),
            history: Default::default(),
        }
    }

    /// The slot, for an operation that changes the sandbox (wakes, hibernates, forks or
    /// destroys it): an upload of a durable copy of its image holding it is given up first.
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, SandboxVm<V>> {
        if let Some(upload) = self
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            upload.cancel();
        }
        self.slot.lock().await
    }

    /// A token for an upload of a durable copy of the image, cancelled by the next
    /// [`Self::lock`] (and by a later upload's start).
    pub(crate) fn durable_upload(&self) -> tokio_util::sync::CancellationToken {
        let token = tokio_util::sync::CancellationToken::new();
        let earlier = self
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(token.clone());
        if let Some(earlier) = earlier {
            earlier.cancel();
        }
        token
    }

    pub(crate) fn view(&self) -> Option<SandboxView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records the state after an operation (call with the slot lock held); a VM that no
    /// longer runs (hibernated, gone) takes the host's connections to its guest with it.
    pub(crate) fn publish(&self, slot: &SandboxVm<V>) {
        if slot.sandbox().is_none() {
            self.dialed.shut_all();
        }
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = slot.view();
    }
}
