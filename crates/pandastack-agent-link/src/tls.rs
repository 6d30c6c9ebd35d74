//! The link's TLS streams: the accept loop and a verified connection as tonic's server takes it
//! (with the peer it proved to be), and the connector, which dials a peer (a replica dials an
//! agent, an agent a replica) and checks who answered.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use pandastack_cluster::{Identity, Peer, Role};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::ServeError;

/// A replica's connection, its handshake done and its peer checked. Handlers find the
/// [`Peer`] in a request's extensions (`Request::extensions().get::<Peer>()`).
pub(crate) struct TlsConn {
    stream: TlsStream<TcpStream>,
    peer: Peer,
}

impl TlsConn {
    pub(crate) fn new(stream: TlsStream<TcpStream>, peer: Peer) -> Self {
        Self { stream, peer }
    }
}

impl Connected for TlsConn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Why a connection to an agent could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connecting to {0}")]
    Tcp(SocketAddr, #[source] io::Error),
    #[error("{0:?} is not a TLS server name")]
    ServerName(String),
    #[error("TLS handshake with {0}")]
    Handshake(SocketAddr, #[source] io::Error),
    #[error("the peer at {0} has no cluster identity")]
    Identity(SocketAddr, #[source] pandastack_cluster::PeerError),
    #[error("{addr} answered as {found}, not {expected}")]
    WrongPeer {
        addr: SocketAddr,
        expected: Peer,
        found: Peer,
    },
}

/// Dials the agent of host `host_id` at `addr`: TLS with `config`, the server name `host_id`,
/// and the peer checked to be role `agent` named `host_id`.
pub(crate) async fn dial(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    host_id: String,
) -> Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>, DialError> {
    dial_peer(config, addr, Role::Agent, host_id).await
}

/// Dials `addr` with TLS server name `name` and checks that the peer is `role` named `name`.
pub(crate) async fn dial_peer(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    role: Role,
    name: String,
) -> Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>, DialError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| DialError::Tcp(addr, e))?;
    let _ = tcp.set_nodelay(true);
    let server_name =
        ServerName::try_from(name.clone()).map_err(|_| DialError::ServerName(name.clone()))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(server_name, tcp)
        .await
        .map_err(|e| DialError::Handshake(addr, e))?;
    let peer = Peer::of(tls.get_ref().1).map_err(|e| DialError::Identity(addr, e))?;
    if peer.role != role || peer.name != name {
        return Err(DialError::WrongPeer {
            addr,
            expected: Peer { role, name },
            found: peer,
        });
    }
    Ok(TokioIo::new(tls))
}

/// Verified connections, as tonic's server takes them.
pub(crate) type Incoming = ReceiverStream<io::Result<TlsConn>>;

/// How long a peer has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts on `listener` with the cluster's server configuration for `identity`: each
/// handshake on its own task (bounded in time), then the peer read from its certificate and
/// dropped unless `admit` says yes. Returns the accept loop (run it alongside the server; it
/// ends only with an accept error) and the verified connections for tonic.
pub(crate) fn accept(
    identity: &Identity,
    listener: TcpListener,
    what: &'static str,
    admit: fn(&Peer) -> bool,
) -> Result<
    (
        impl std::future::Future<Output = Result<(), ServeError>>,
        Incoming,
    ),
    ServeError,
> {
    let config = pandastack_cluster::server_config(identity).map_err(ServeError::Tls)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<TlsConn>>(64);
    let accept = async move {
        loop {
            let (tcp, addr) = listener.accept().await.map_err(ServeError::Accept)?;
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => {
                        tracing::info!(%addr, error = &e as &dyn std::error::Error, "{what}: handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::info!(%addr, "{what}: handshake timed out");
                        return;
                    }
                };
                let peer = match Peer::of(tls.get_ref().1) {
                    Ok(p) => p,
                    Err(e) => {
                        tracing::warn!(%addr, error = &e as &dyn std::error::Error, "{what}: peer without a cluster identity");
                        return;
                    }
                };
                if !admit(&peer) {
                    tracing::warn!(%addr, %peer, "{what}: refused a peer of the wrong role");
                    return;
                }
                let _ = tx.send(Ok(TlsConn::new(tls.into(), peer))).await;
            });
        }
    };
    Ok((accept, ReceiverStream::new(rx)))
}
