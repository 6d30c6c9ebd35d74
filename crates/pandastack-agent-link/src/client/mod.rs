//! The replica's side: [`RemoteHost`] implements [`pandastack_host::Host`] by calling a host's
//! agent over the link. Each method is one RPC; a host's error comes back as the same
//! [`pandastack_host::HostError`], a failure of the link itself as `HostError::Failed`
//! (`what`: "agent link").
//!
//! The trait's three synchronous calls (`catalog`, `is_catalog`, `check_spec`) block on their
//! RPC where the runtime allows it (a multi-threaded runtime, or a thread outside any
//! runtime); on a current-thread runtime, which cannot block, `catalog` and `is_catalog` answer
//! from the catalog fetched at connect and `check_spec` refuses the spec.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use pandastack_cluster::{Identity, TlsConfigError};
use pandastack_host::{DiskRequest, HostResult, TemplateView, VmView, VolumeMount};
use tokio::runtime::{Handle, RuntimeFlavor};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

use crate::convert::*;
use crate::pb;
use crate::pb::agent_client::AgentClient;
use crate::status::from_status;
use crate::tls::dial;

mod host;
mod streams;

/// Why [`RemoteHost::connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the replica's TLS configuration")]
    Tls(#[source] TlsConfigError),
    #[error("connecting to agent {host_id} at {addr}")]
    Connect {
        host_id: String,
        addr: SocketAddr,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("agent {host_id} refused the first call")]
    FirstCall {
        host_id: String,
        #[source]
        source: Status,
    },
}

/// A host on another machine, reached through its agent. Cheap to clone.
#[derive(Clone)]
pub struct RemoteHost {
    client: AgentClient<Channel>,
    host_id: String,
    /// The runtime the channel runs on, for the trait's synchronous calls.
    handle: Handle,
    /// The catalog as of the last synchronous fetch (or connect).
    catalog: Arc<Mutex<Vec<TemplateView>>>,
}

impl std::fmt::Debug for RemoteHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteHost")
            .field("host_id", &self.host_id)
            .finish_non_exhaustive()
    }
}

impl RemoteHost {
    /// Connects to the agent of host `host_id` at `addr` as `identity` (a replica's), checks
    /// that the peer is agent `host_id`, and fetches its catalog (the first call: an agent
    /// that refuses this replica fails it). Reconnects by itself after that.
    pub async fn connect(
        identity: &Identity,
        addr: SocketAddr,
        host_id: &str,
    ) -> Result<RemoteHost, ConnectError> {
        let config = pandastack_cluster::client_config(identity).map_err(ConnectError::Tls)?;
        Self::connect_with(config, addr, host_id).await
    }

    /// [`RemoteHost::connect`] with a TLS configuration of the caller's (tests: a client
    /// without a certificate).
    pub async fn connect_with(
        config: rustls::ClientConfig,
        addr: SocketAddr,
        host_id: &str,
    ) -> Result<RemoteHost, ConnectError> {
        let config = Arc::new(config);
        let id = host_id.to_owned();
        // The URI is required by tonic but never resolved: the connector dials `addr`.
        let endpoint = Endpoint::from_static("http://agent.pandastack")
            .initial_stream_window_size(crate::STREAM_WINDOW)
            .initial_connection_window_size(crate::CONNECTION_WINDOW);
        let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let (config, id) = (Arc::clone(&config), id.clone());
            async move { dial(config, addr, id).await }
        });
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|source| ConnectError::Connect {
                host_id: host_id.to_owned(),
                addr,
                source,
            })?;
        let mut client = AgentClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        let first =
            client
                .catalog(pb::Empty {})
                .await
                .map_err(|source| ConnectError::FirstCall {
                    host_id: host_id.to_owned(),
                    source,
                })?;
        let catalog = first
            .into_inner()
            .templates
            .into_iter()
            .filter_map(|t| template_from_pb(t).ok())
            .collect();
        Ok(RemoteHost {
            client,
            host_id: host_id.to_owned(),
            handle: Handle::current(),
            catalog: Arc::new(Mutex::new(catalog)),
        })
    }

    /// The host id this link dialled (and checked the agent's certificate against).
    pub fn host_id(&self) -> &str {
        &self.host_id
    }

    fn c(&self) -> AgentClient<Channel> {
        self.client.clone()
    }

    /// Runs `f` to completion from synchronous code, where this thread may block (`None`: a
    /// current-thread runtime, which would stop the very task that must answer).
    fn block<F: Future>(&self, f: F) -> Option<F::Output> {
        match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::CurrentThread => None,
            Ok(_) => Some(tokio::task::block_in_place(|| self.handle.block_on(f))),
            Err(_) => Some(self.handle.block_on(f)),
        }
    }

    async fn vm(
        &self,
        call: impl Future<Output = Result<tonic::Response<pb::Vm>, Status>>,
    ) -> HostResult<VmView> {
        vm_from_pb(call.await.map_err(from_status)?.into_inner())
    }

    fn create_request(
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: DiskRequest,
    ) -> pb::CreateRequest {
        pb::CreateRequest {
            template: template.to_owned(),
            id: id.to_owned(),
            volumes: volumes.into_iter().map(mount_to_pb).collect(),
            disk: Some(disk_to_pb(disk)),
        }
    }
}

impl RemoteHost {
    fn cached_is_catalog(&self, name: &str) -> bool {
        self.catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|t| t.name == name)
    }
}
