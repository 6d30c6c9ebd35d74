//! The gRPC services of `guest.proto` and the state they share.
//!
//! [`State`] lives as long as the agent and is shared by every session; each session builds its
//! own [`routes`](State::routes) with its own detach signal, so `Agent.Detach` ends only the
//! session it arrived on.

mod agent;
mod balloon;
mod exec;
mod files;
mod net;
mod ports;
mod pty;
mod stats;
mod watch;

pub use agent::apply_post_restore;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pandastack_guest_proto::v1::agent_server::AgentServer;
use pandastack_guest_proto::v1::files_server::FilesServer;
use pandastack_guest_proto::v1::ports_server::PortsServer;
use pandastack_guest_proto::v1::process_server::ProcessServer;
use tokio::sync::Notify;

pub use agent::set_hostname;
pub use net::{configure as configure_network, link_up};

/// State shared by all sessions.
#[derive(Clone)]
pub struct State {
    inner: Arc<Inner>,
}

struct Inner {
    /// True when running as PID 1 inside a VM (enables power control and per-command cgroups).
    pid1: bool,
    /// Numbers commands (their cgroup names) across sessions.
    next_exec: AtomicU64,
}

impl State {
    pub fn new(pid1: bool) -> Self {
        Self {
            inner: Arc::new(Inner {
                pid1,
                next_exec: AtomicU64::new(0),
            }),
        }
    }

    pub fn pid1(&self) -> bool {
        self.inner.pid1
    }

    /// A number no other command of this agent has.
    pub fn next_exec_id(&self) -> u64 {
        self.inner.next_exec.fetch_add(1, Ordering::Relaxed)
    }

    /// All services for one session; `detach` is notified when the host asks it to end.
    pub fn routes(&self, detach: Arc<Notify>) -> tonic::service::Routes {
        tonic::service::Routes::new(AgentServer::new(agent::AgentService::new(
            self.clone(),
            detach,
        )))
        .add_service(ProcessServer::new(exec::ProcessService::new(self.clone())))
        .add_service(FilesServer::new(files::FilesService))
        .add_service(PortsServer::new(ports::PortsService))
        .prepare()
    }
}
