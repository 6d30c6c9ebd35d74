use pandastack_runtime::{BakeError, CreateError, HibernateError, SnapshotError};
use pandastack_vm::VmError;

use crate::VmState;

/// Why a host agent operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("sandbox {0} not found")]
    SandboxNotFound(String),
    #[error("template {0} not found")]
    TemplateNotFound(String),
    #[error("sandbox {id} is {state:?}: cannot {op}")]
    InvalidState {
        id: String,
        state: VmState,
        op: &'static str,
    },
    #[error("build template {name}")]
    Image {
        name: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(transparent)]
    Bake(#[from] BakeError),
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Hibernate(#[from] HibernateError),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error("host files")]
    Io(#[from] std::io::Error),
}
