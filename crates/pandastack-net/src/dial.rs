//! TCP connections from the host to a guest over its slot: a socket made inside the slot's
//! namespace reaches the guest's address through the TAP, as a client on the guest's own
//! network would, without the guest agent relaying the bytes (the preview and app proxies'
//! fast path; the agent's port stream stays the way to servers bound to the guest's loopback).
//!
//! The slot's input chain accepts only established and related traffic, so the guest can
//! answer such a connection and still open none towards the namespace.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{NetError, Result};
use crate::ns::{enter, on_fresh_thread};
use crate::GUEST_IP;

/// Connects to `port` of the guest behind the namespace at `netns` within `timeout`. The
/// socket is made and connected on a short-lived thread that enters the namespace; the stream
/// keeps the namespace it was made in wherever it is used (non-blocking, for an async runtime).
/// Refused (nothing listens on the guest's address), unreachable and timed-out connections are
/// errors.
pub async fn connect_guest(netns: &Path, port: u16, timeout: Duration) -> Result<TcpStream> {
    let path: PathBuf = netns.to_owned();
    let addr = SocketAddr::from((GUEST_IP, port));
    on_fresh_thread("ps-dial", move || {
        enter(&path)?;
        let s = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| NetError::io(format!("connect to {addr} in {}", path.display()), e))?;
        s.set_nodelay(true)
            .and_then(|()| s.set_nonblocking(true))
            .map_err(|e| NetError::io("set up the connection", e))?;
        Ok(s)
    })
    .await
}
