//! One sandbox's owner: its state behind a lock held for each whole operation.

use std::path::Path;

use pandastack_runtime::{Hibernated, Sandbox, SandboxInfo};
use pandastack_vm::Vm;
use tokio::sync::Mutex;

/// Where a sandbox's VM is, as its host sees it (the row's `SandboxState` adds the control
/// plane's own states: starting, stopped, failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmState {
    Running,
    Paused,
    Hibernated,
}

impl VmState {
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Running => "running",
            VmState::Paused => "paused",
            VmState::Hibernated => "hibernated",
        }
    }
}

/// A snapshot of one sandbox's state for callers.
#[derive(Debug, Clone)]
pub struct SandboxView {
    pub id: String,
    pub state: VmState,
    pub info: SandboxInfo,
    /// Milliseconds the last create or wake took to exec-ready.
    pub ready_ms: u64,
}

pub(crate) enum Slot<V: Vm> {
    Running(Sandbox<V>),
    Paused(Sandbox<V>),
    Hibernated(Hibernated),
    /// Taken for an operation that failed half-way, or destroyed.
    Gone,
}

impl<V: Vm> Slot<V> {
    pub(crate) fn id(&self) -> &str {
        match self {
            Slot::Running(sb) | Slot::Paused(sb) => &sb.id,
            Slot::Hibernated(h) => &h.id,
            Slot::Gone => "",
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        match self {
            Slot::Running(sb) | Slot::Paused(sb) => &sb.dir,
            Slot::Hibernated(h) => &h.dir,
            Slot::Gone => Path::new("/nonexistent"),
        }
    }

    pub(crate) fn state(&self) -> Option<VmState> {
        match self {
            Slot::Running(_) => Some(VmState::Running),
            Slot::Paused(_) => Some(VmState::Paused),
            Slot::Hibernated(_) => Some(VmState::Hibernated),
            Slot::Gone => None,
        }
    }

    pub(crate) fn sandbox(&self) -> Option<&Sandbox<V>> {
        match self {
            Slot::Running(sb) | Slot::Paused(sb) => Some(sb),
            _ => None,
        }
    }

    pub(crate) fn view(&self) -> Option<SandboxView> {
        let (info, ready_ms) = match self {
            Slot::Running(sb) | Slot::Paused(sb) => {
                (sb.info.clone(), sb.ready_in.as_millis() as u64)
            }
            Slot::Hibernated(h) => (h.info.clone(), 0),
            Slot::Gone => return None,
        };
        Some(SandboxView {
            id: self.id().to_owned(),
            state: self.state()?,
            info,
            ready_ms,
        })
    }

    pub(crate) fn mark_paused(&mut self) {
        if let Slot::Running(_) = self {
            if let Slot::Running(sb) = std::mem::replace(self, Slot::Gone) {
                *self = Slot::Paused(sb);
            }
        }
    }

    pub(crate) fn mark_running(&mut self) {
        if let Slot::Paused(_) = self {
            if let Slot::Paused(sb) = std::mem::replace(self, Slot::Gone) {
                *self = Slot::Running(sb);
            }
        }
    }
}

pub(crate) struct Entry<V: Vm> {
    /// Held for the whole of each operation on this sandbox.
    pub(crate) slot: Mutex<Slot<V>>,
    /// The state as of the last finished operation: readers never wait behind a long one.
    view: std::sync::Mutex<Option<SandboxView>>,
}

impl<V: Vm> Entry<V> {
    pub(crate) fn new(slot: Slot<V>) -> Self {
        let view = slot.view();
        Self {
            slot: Mutex::new(slot),
            view: std::sync::Mutex::new(view),
        }
    }

    pub(crate) fn view(&self) -> Option<SandboxView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records the state after an operation (call with the slot lock held).
    pub(crate) fn publish(&self, slot: &Slot<V>) {
        *self.view.lock().unwrap_or_else(|e| e.into_inner()) = slot.view();
    }
}
