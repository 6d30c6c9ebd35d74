//! Why a host operation failed, in terms a caller can act on; causes stay in the source chain.

use crate::VmState;

/// What kind of failure a guest agent reported for a data-plane call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestErrorKind {
    /// The path (or process) does not exist.
    NotFound,
    /// The request is malformed or does not fit the guest's state (not a directory, say).
    InvalidArgument,
    /// The target exists already.
    AlreadyExists,
    /// The guest's filesystem is full.
    NoSpace,
    /// The guest refused the operation.
    PermissionDenied,
    /// The guest did not answer, or the call was cut off.
    Unavailable,
    /// Anything else (a defect of the guest agent or of the boundary).
    Other,
}

/// The `op` of the [`HostError::InvalidState`] a host answers for a hibernated sandbox whose
/// image is on its way to another host (between `store_hibernated` and the end of the move):
/// it does not wake there; a caller reads the sandbox's host again and retries.
pub const WAKE_WHILE_MOVING: &str = "wake it while it moves to another host (try again shortly)";

/// Whether `e` says the sandbox is moving to another host ([`WAKE_WHILE_MOVING`]).
pub fn is_moving(e: &HostError) -> bool {
    matches!(e, HostError::InvalidState { op, .. } if *op == WAKE_WHILE_MOVING)
}

/// Why a host operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("sandbox {0} not found")]
    SandboxNotFound(String),
    #[error("template {0} not found")]
    TemplateNotFound(String),
    #[error("snapshot {0} not found")]
    SnapshotNotFound(String),
    #[error("volume {0} not found")]
    VolumeNotFound(String),
    #[error("volume snapshot {0} not found")]
    VolumeSnapshotNotFound(String),
    /// A create asked for more volumes than its template has slots.
    #[error("template {template} has {slots} volume slots; {wanted} volumes were asked for")]
    TooManyVolumes {
        template: String,
        slots: usize,
        wanted: usize,
    },
    #[error("sandbox {id} is {}: cannot {op}", state.as_str())]
    InvalidState {
        id: String,
        state: VmState,
        op: &'static str,
    },
    /// The sandbox's VM process has exited (killed, crashed): nothing in it can answer; delete
    /// the sandbox.
    #[error("sandbox {0}'s VM has exited")]
    VmExited(String),
    /// A call inside the sandbox was cut off by an operation that stopped its VM (a
    /// hibernate); `state` is the sandbox's state since.
    #[error("sandbox {id} was {} during the call", state.as_str())]
    CutOff { id: String, state: VmState },
    /// The guest agent answered a data-plane call with an error.
    #[error("guest: {message}")]
    Guest {
        kind: GuestErrorKind,
        message: String,
    },
    /// A template build failed for a reason of its own (a failing step, a bad spec or image);
    /// the message says which, as the build's log and row show it.
    #[error("{0}")]
    BuildFailed(String),
    /// The host that holds the sandbox (or snapshot, volume) cannot be reached: declared dead,
    /// or no agent answers for it. Nothing was done; the caller may try again later.
    #[error("host {host} is unreachable")]
    Unreachable {
        host: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The host could not do what was asked (a VM, file or image failure).
    #[error("{what}")]
    Failed {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl HostError {
    /// The message of an error that ends a stream already under way (no status code left to
    /// set): a guest's own words, else the error's.
    pub fn event_message(&self) -> String {
        match self {
            HostError::Guest { message, .. } => message.clone(),
            e => e.to_string(),
        }
    }

    /// A failure of `what` caused by `source`.
    pub fn failed(
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        HostError::Failed {
            what,
            source: source.into(),
        }
    }

    /// A guest error of `kind`.
    pub fn guest(kind: GuestErrorKind, message: impl Into<String>) -> Self {
        HostError::Guest {
            kind,
            message: message.into(),
        }
    }
}

/// `e` and its sources, joined with ": ": the workspace's one chain formatter, for an error
/// that must become text (a build log line, a message returned to a user or stored on a row).
/// A log line takes the error itself instead, `error = &e as &dyn std::error::Error`, which
/// tracing-subscriber's fmt layer prints with its sources (checked by
/// `pandastack-testkit/tests/error_logging.rs`).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}
