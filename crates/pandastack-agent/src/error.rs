use pandastack_runtime::{BakeError, CreateError, HibernateError, SnapshotError};
use pandastack_vm::VmError;

use pandastack_host::HostError;

use crate::{VmState, VolumeFileError};

/// Why a host agent operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("sandbox {0} not found")]
    SandboxNotFound(String),
    #[error("template {0} not found")]
    TemplateNotFound(String),
    #[error("sandbox {0}'s VM has exited")]
    VmExited(String),
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
    /// A spec's own step failed in the builder VM (the message names the step).
    #[error("{0}")]
    BuildSteps(String),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error("host files")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Volume(#[from] crate::VolumeFileError),
    #[error("object store")]
    Objects(#[from] pandastack_objects::ObjectsError),
    #[error("this agent shares nothing through an object store (a cluster's agent does)")]
    NotShared,
    #[error("fetching from host {host}")]
    FromPeer {
        host: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl From<AgentError> for HostError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::SandboxNotFound(id) => HostError::SandboxNotFound(id),
            AgentError::TemplateNotFound(name) => HostError::TemplateNotFound(name),
            AgentError::VmExited(id) => HostError::VmExited(id),
            AgentError::InvalidState { id, state, op } => HostError::InvalidState { id, state, op },
            AgentError::Snapshot(pandastack_runtime::SnapshotError::NotFound(id)) => {
                HostError::SnapshotNotFound(id)
            }
            AgentError::BuildSteps(m) => HostError::BuildFailed(m),
            e @ (AgentError::Bake(_) | AgentError::Image { .. }) => {
                HostError::failed("template", e)
            }
            e @ AgentError::Create(_) => HostError::failed("create", e),
            e @ AgentError::Snapshot(_) => HostError::failed("snapshot", e),
            e @ AgentError::Hibernate(_) => HostError::failed("hibernate", e),
            e @ (AgentError::Vm(_) | AgentError::Io(_)) => {
                HostError::failed("sandbox operation", e)
            }
            AgentError::Volume(e) => e.into(),
            e @ (AgentError::Objects(_) | AgentError::NotShared) => {
                HostError::failed("object store", e)
            }
            e @ AgentError::FromPeer { .. } => HostError::failed("fetch from another host", e),
        }
    }
}

impl From<VolumeFileError> for HostError {
    fn from(e: VolumeFileError) -> Self {
        match e {
            VolumeFileError::NotFound(id) => HostError::VolumeNotFound(id),
            VolumeFileError::SnapshotNotFound(id) => HostError::VolumeSnapshotNotFound(id),
            VolumeFileError::TooMany {
                template,
                slots,
                wanted,
            } => HostError::TooManyVolumes {
                template,
                slots,
                wanted,
            },
            e @ (VolumeFileError::NoObjectStore | VolumeFileError::Objects(_)) => {
                HostError::failed("object store", e)
            }
            e @ VolumeFileError::Mount { .. } => HostError::failed("mount volume", e),
            e @ (VolumeFileError::Freeze { .. } | VolumeFileError::Thaw { .. }) => {
                HostError::failed("freeze volume", e)
            }
            e => HostError::failed("volume", e),
        }
    }
}
