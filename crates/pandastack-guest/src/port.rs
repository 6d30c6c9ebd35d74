//! The virtio-serial port (guest side).
//!
//! Facts from the Linux virtio console driver that shape this code: while the host side is not
//! connected, `read` returns 0 at once and `poll` reports readable+hangup, so the port cannot be
//! waited on for a connection; instead, with `O_ASYNC` and `F_SETOWN`, the driver sends SIGIO on
//! every host connect and disconnect (and on data). So: read until EOF, then wait for SIGIO (with a
//! slow fallback timer) and read again — no busy loop, no sleep on the reconnect path.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pandastack_guest_proto::session::{Scan, Scanner};
use pandastack_guest_proto::PORT_NAME;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::signal::unix::{signal, SignalKind};

use crate::services::State;

/// Finds the device of the agent's port: `/sys/class/virtio-ports/<dev>/name` == PORT_NAME.
pub fn find_port() -> Option<PathBuf> {
    for entry in std::fs::read_dir("/sys/class/virtio-ports").ok()?.flatten() {
        let name = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
        if name.trim() == PORT_NAME {
            return Some(Path::new("/dev").join(entry.file_name()));
        }
    }
    None
}

/// The open port, shared by successive sessions.
#[derive(Clone)]
pub struct Port {
    fd: Arc<AsyncFd<File>>,
}

impl Port {
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        // SAFETY: F_SETOWN with our own pid on an fd we own; no memory is passed.
        let r = unsafe {
            libc::fcntl(
                file.as_raw_fd(),
                libc::F_SETOWN,
                std::process::id() as libc::c_int,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let flags = OFlag::from_bits_truncate(fcntl(&file, FcntlArg::F_GETFL)?);
        fcntl(
            &file,
            FcntlArg::F_SETFL(flags | OFlag::O_ASYNC | OFlag::O_NONBLOCK),
        )?;
        // SAFETY: the File is moved into the AsyncFd and stays open, with the same fd, for the
        // AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register(file) }.map_err(std::io::Error::from)?;
        Ok(Self { fd: Arc::new(fd) })
    }
}

impl AsyncRead for Port {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|inner| inner.get_ref().read(unfilled)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Port {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|inner| inner.get_ref().write(data)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Serves sessions on the port at `path` forever.
pub async fn serve_port(path: &Path, state: State) -> anyhow::Result<()> {
    crate::reaper::ensure_started()?;
    let mut sigio = signal(SignalKind::io())?;
    let port = Port::open(path)?;
    loop {
        let (nonce, rest) = wait_hello(&port, &mut sigio).await?;
        if let Err(e) = crate::session::serve(port.clone(), nonce, rest, state.clone()).await {
            tracing::debug!(error = %e, "session ended");
        }
    }
}

/// Reads the port until a HELLO line arrives, sleeping on SIGIO while the host is away.
async fn wait_hello(
    port: &Port,
    sigio: &mut tokio::signal::unix::Signal,
) -> std::io::Result<(u64, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut scanner = Scanner::hello();
    let mut buf = vec![0u8; 4096];
    let mut reader = port.clone();
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            // Host not connected: wait for it (SIGIO), with a slow fallback in case the signal
            // raced with the read above.
            tokio::select! {
                Some(()) = sigio.recv() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            continue;
        }
        if let Scan::Found { nonce, rest } = scanner.feed(&buf[..n]) {
            return Ok((nonce, rest));
        }
    }
}
