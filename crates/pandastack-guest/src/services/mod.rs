//! The gRPC services and the state they share.

mod agent;
mod exec;
mod files;
mod net;
mod pty;

use std::sync::Arc;

use pandastack_guest_proto::v1::agent_server::AgentServer;
use pandastack_guest_proto::v1::files_server::FilesServer;
use pandastack_guest_proto::v1::process_server::ProcessServer;
use tokio::sync::Notify;

pub use agent::set_hostname;
pub use net::configure as configure_network;

/// State shared by all sessions.
#[derive(Clone)]
pub struct State {
    inner: Arc<Inner>,
}

struct Inner {
    /// True when running as PID 1 inside a VM (enables power control and cgroup use).
    pid1: bool,
    detach: Arc<Notify>,
}

impl State {
    pub fn new(pid1: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                pid1,
                detach: Arc::new(Notify::new()),
            }),
        }
    }

    pub fn pid1(&self) -> bool {
        self.inner.pid1
    }

    /// Notified when the host asks the current session to end.
    pub fn detach_signal(&self) -> Arc<Notify> {
        self.inner.detach.clone()
    }

    /// All services, ready to be served on one connection.
    pub fn routes(&self) -> tonic::service::Routes {
        tonic::service::Routes::new(AgentServer::new(agent::AgentService::new(self.clone())))
            .add_service(ProcessServer::new(exec::ProcessService::new(self.clone())))
            .add_service(FilesServer::new(files::FilesService))
            .prepare()
    }
}
