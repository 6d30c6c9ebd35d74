//! The link's TLS streams: a verified connection as tonic's server takes it (with the peer it
//! proved to be), and the replica's connector, which dials an agent and checks who answered.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use pandastack_cluster::{Peer, Role};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;
use tonic::transport::server::Connected;

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
    #[error("host id {0:?} is not a TLS server name")]
    ServerName(String),
    #[error("TLS handshake with {0}")]
    Handshake(SocketAddr, #[source] io::Error),
    #[error("the agent at {0} has no cluster identity")]
    Identity(SocketAddr, #[source] pandastack_cluster::PeerError),
    #[error("{addr} answered as {found}, not agent {expected}")]
    WrongPeer {
        addr: SocketAddr,
        expected: String,
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
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| DialError::Tcp(addr, e))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(host_id.clone())
        .map_err(|_| DialError::ServerName(host_id.clone()))?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| DialError::Handshake(addr, e))?;
    let peer = Peer::of(tls.get_ref().1).map_err(|e| DialError::Identity(addr, e))?;
    if peer.role != Role::Agent || peer.name != host_id {
        return Err(DialError::WrongPeer {
            addr,
            expected: host_id,
            found: peer,
        });
    }
    Ok(TokioIo::new(tls))
}
