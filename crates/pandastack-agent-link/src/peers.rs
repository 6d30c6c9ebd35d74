//! Agents reading each other's images (a snapshot's files, a leaving sandbox's hibernation
//! image): the `Peer` service an agent serves beside
//! `Agent` on the same listener (a peer with an `agent` certificate may call it, and nothing
//! else; a replica may call `Agent` only), and [`PeerLink`], with which an agent dials another
//! (the peer checked to be the host it named).
//!
//! ```text
//!   destination HostAgent ──Peers──► PeerLink ══ gRPC / mTLS ══► Peer service ──► origin Host
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use futures::StreamExt;
use pandastack_cluster::{Identity, Peer, Role, TlsConfigError};
use pandastack_host::{BoxStream, Host, HostError, HostResult, ImagePiece, Origin, Peers};
use tonic::transport::Endpoint;
use tonic::{Request, Response, Status};

use crate::convert::{piece_from_pb, piece_to_pb};
use crate::pb;
use crate::pb::peer_client::PeerClient;
use crate::pb::peer_server::PeerServer;
use crate::status::{from_status, to_status};
use crate::tls::dial_peer;

/// The `Peer` service of one host: its snapshots' files for other hosts' agents.
pub(crate) struct PeerService {
    host: Arc<dyn Host>,
}

impl PeerService {
    pub(crate) fn server(host: Arc<dyn Host>) -> PeerServer<Self> {
        PeerServer::new(Self { host })
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }
}

type PieceStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::ImagePiece, Status>> + Send>>;

#[tonic::async_trait]
impl pb::peer_server::Peer for PeerService {
    type SendSnapshotStream = PieceStream;

    async fn send_snapshot(
        &self,
        r: Request<pb::SnapshotId>,
    ) -> Result<Response<PieceStream>, Status> {
        let id = r.into_inner().snapshot_id;
        let pieces = self
            .host
            .send_snapshot(&id)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(rpc_stream(pieces)))
    }

    type SendHibernatedStream = PieceStream;

    async fn send_hibernated(
        &self,
        r: Request<pb::SandboxId>,
    ) -> Result<Response<PieceStream>, Status> {
        let id = r.into_inner().id;
        let pieces = self
            .host
            .send_hibernated(&id)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(rpc_stream(pieces)))
    }
}

fn rpc_stream(pieces: BoxStream<HostResult<ImagePiece>>) -> PieceStream {
    Box::pin(pieces.map(|p| p.map(piece_to_pb).map_err(|e| to_status(&e))))
}

fn host_stream(s: tonic::Streaming<pb::ImagePiece>) -> BoxStream<HostResult<ImagePiece>> {
    Box::pin(s.map(|p| p.map_err(from_status).and_then(piece_from_pb)))
}

/// An interceptor that lets through only calls from a peer of `role` (the handshake admitted
/// both roles; each service takes one).
pub(crate) fn only(
    role: Role,
) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + 'static {
    move |r: Request<()>| match r.extensions().get::<Peer>() {
        Some(p) if p.role == role => Ok(r),
        Some(p) => Err(Status::permission_denied(format!(
            "{p} may not call this service: it is for {role} peers"
        ))),
        None => Err(Status::permission_denied(
            "a caller without a cluster identity",
        )),
    }
}

/// How an agent dials the other agents of its cluster, as its own identity. Cheap to clone.
#[derive(Clone)]
pub struct PeerLink {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for PeerLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLink").finish_non_exhaustive()
    }
}

impl PeerLink {
    /// Dials as `identity` (an agent's).
    pub fn new(identity: &Identity) -> Result<Self, TlsConfigError> {
        let config = pandastack_cluster::client_config(identity)?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// A client of `origin`'s `Peer` service over a new connection.
    async fn client(&self, origin: &Origin) -> HostResult<PeerClient<tonic::transport::Channel>> {
        let unreachable = |e: Box<dyn std::error::Error + Send + Sync>| HostError::Unreachable {
            host: origin.host_id.clone(),
            source: e,
        };
        let addr: SocketAddr = tokio::net::lookup_host(&origin.address)
            .await
            .map_err(|e| unreachable(e.into()))?
            .next()
            .ok_or_else(|| unreachable(format!("{} resolves to nothing", origin.address).into()))?;
        let (config, name) = (Arc::clone(&self.config), origin.host_id.clone());
        // The URI is required by tonic but never resolved: the connector dials `addr`.
        let connector = tower::service_fn(move |_: tonic::codegen::http::Uri| {
            let (config, name) = (Arc::clone(&config), name.clone());
            async move { dial_peer(config, addr, Role::Agent, name).await }
        });
        let channel = Endpoint::from_static("http://peer.pandastack")
            .initial_stream_window_size(crate::STREAM_WINDOW)
            .initial_connection_window_size(crate::CONNECTION_WINDOW)
            .connect_with_connector(connector)
            .await
            .map_err(|e| unreachable(e.into()))?;
        Ok(PeerClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX))
    }
}

#[async_trait::async_trait]
impl Peers for PeerLink {
    async fn send_snapshot(
        &self,
        origin: &Origin,
        snapshot_id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        let mut client = self.client(origin).await?;
        let r = pb::SnapshotId {
            snapshot_id: snapshot_id.to_owned(),
        };
        let s = client
            .send_snapshot(r)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(host_stream(s))
    }

    async fn send_hibernated(
        &self,
        origin: &Origin,
        id: &str,
    ) -> HostResult<BoxStream<HostResult<ImagePiece>>> {
        let mut client = self.client(origin).await?;
        let r = pb::SandboxId { id: id.to_owned() };
        let s = client
            .send_hibernated(r)
            .await
            .map_err(from_status)?
            .into_inner();
        Ok(host_stream(s))
    }
}
