//! Connections the host made to a sandbox's guest over its network
//! ([`pandastack_runtime::Runtime::connect_guest`]). They are the guest kernel's, not the VM process's:
//! when the process ends nothing ends them (the slot's TAP stays, so a write would be
//! retransmitted into nothing for minutes), unlike streams on the agent's channel, which end
//! with it. So each sandbox's entry keeps a handle on every such connection and shuts them all
//! down as soon as its VM is no longer running or paused (hibernated, stopped, deleted) — a
//! pooled connection then reads as closed, as a port stream would.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest a connection to a guest over its network may take before the agent's port stream is
/// used instead (a guest that drops the SYN, a firewall in the guest).
const NETWORK_DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// How the host reaches a port of a guest (see [`crate::HostAgent::port_route`]).
pub(crate) enum PortRoute {
    /// A TCP connection over the sandbox's network.
    Network(GuestConn),
    /// The guest agent's session, to open a port stream on.
    Agent(tonic::transport::Channel),
}

/// Connects to `port` of `sandbox`'s guest over its network and records the connection in
/// `owner`; `None` when the sandbox has no network.
pub(crate) async fn dial<D: pandastack_vm::VmDriver>(
    rt: &pandastack_runtime::Runtime<D>,
    sandbox: &pandastack_runtime::Sandbox<D::Vm>,
    owner: &Arc<Dialed>,
    port: u16,
) -> Result<Option<GuestConn>, Box<dyn std::error::Error + Send + Sync>> {
    match rt.connect_guest(sandbox, port, NETWORK_DIAL_TIMEOUT).await {
        Some(s) => Ok(Some(owner.adopt(s?)?)),
        None => Ok(None),
    }
}

/// One sandbox's open connections over its network: a second handle on each socket, to shut it
/// down from here.
#[derive(Default)]
pub(crate) struct Dialed {
    next: AtomicU64,
    open: Mutex<HashMap<u64, TcpStream>>,
}

impl Dialed {
    /// Makes `stream` (connected, non-blocking) a connection of this sandbox's, shut down with
    /// the others by [`Dialed::shut_all`].
    pub(crate) fn adopt(self: &Arc<Self>, stream: TcpStream) -> std::io::Result<GuestConn> {
        let handle = stream.try_clone()?;
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, handle);
        Ok(GuestConn {
            stream: tokio::net::TcpStream::from_std(stream)?,
            owner: Arc::downgrade(self),
            key,
        })
    }

    /// Shuts down every open connection (both directions); their holders see them end.
    pub(crate) fn shut_all(&self) {
        for (_, s) in self.lock().drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// How many connections are open (for tests).
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connection to a guest over its network; dropping it closes it.
pub(crate) struct GuestConn {
    stream: tokio::net::TcpStream,
    owner: Weak<Dialed>,
    key: u64,
}

impl Drop for GuestConn {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.lock().remove(&self.key);
        }
    }
}

impl AsyncRead for GuestConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for GuestConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn pair() -> (TcpStream, tokio::net::TcpStream) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = tokio::spawn(async move { std::net::TcpStream::connect(addr).unwrap() });
        let (server, _) = l.accept().await.unwrap();
        let client = c.await.unwrap();
        client.set_nonblocking(true).unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn shut_all_ends_open_connections_and_dropped_ones_leave() {
        let d = Arc::new(Dialed::default());
        let (a, mut a_server) = pair().await;
        let (b, _b_server) = pair().await;
        let mut a = d.adopt(a).unwrap();
        let b = d.adopt(b).unwrap();
        assert_eq!(d.count(), 2);
        // A connection dropped by its holder closes (its peer reads the end) and leaves.
        drop(b);
        assert_eq!(d.count(), 1);
        a.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        a_server.read_exact(&mut one).await.unwrap();
        // Shut down from the entry: the holder reads the end, the peer too.
        d.shut_all();
        assert_eq!(d.count(), 0);
        let mut buf = [0u8; 8];
        assert_eq!(a.read(&mut buf).await.unwrap(), 0);
        assert_eq!(a_server.read(&mut buf).await.unwrap(), 0);
    }
}
