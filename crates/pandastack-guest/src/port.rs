//! The virtio-serial port (guest side).
//!
//! Facts from the Linux virtio console driver (`drivers/char/virtio_console.c`) that shape this
//! code:
//!
//! - While the host side is not connected, `read` returns 0 at once and `poll` reports
//!   `EPOLLIN | EPOLLHUP`, so readiness cannot tell us when a host connects. Writes fail with
//!   `EAGAIN` meanwhile.
//! - With `O_ASYNC` and `F_SETOWN`, the driver sends `SIGIO` on every host connect and
//!   disconnect, and whenever data arrives.
//! - tokio treats a hang-up as final: once an `AsyncFd` has seen `EPOLLHUP` it reports the fd
//!   ready forever. A port's hang-up is not final (the next host connects to the same fd), so an
//!   `AsyncFd` that saw one would spin.
//!
//! Hence two phases. While waiting for a HELLO the port is read without any readiness
//! registration: read what is there, and when nothing is (`0` = no host, `EAGAIN` = host but no
//! data), sleep until `SIGIO` (with a 1 s fallback in case a signal raced with the read). Once a
//! HELLO is found the session gets a fresh `AsyncFd` on a duplicate of the fd, registered while
//! the host is connected, and `O_ASYNC` is off (epoll does the waiting); a hang-up seen by it ends
//! the session (reads end, writes fail), and the registration is dropped with the session.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pandastack_guest_proto::session::{Scan, Scanner};
use pandastack_guest_proto::PORT_NAME;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::services::State;

/// How long to sleep without a `SIGIO` before looking at the port again.
const SIGIO_FALLBACK: Duration = Duration::from_secs(1);
/// How long a HELLO may wait for the driver to mark the host connected (see
/// [`Port::wait_host_connected`]).
const HOST_CONNECT_WAIT: Duration = Duration::from_secs(5);
/// Re-check interval while waiting for that.
const HOST_CONNECT_POLL: Duration = Duration::from_millis(2);

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

/// The open port. The driver allows one open at a time, so it is opened once and shared by all
/// sessions.
pub struct Port {
    file: File,
}

impl Port {
    /// Opens the port non-blocking with `SIGIO` delivery to this process. A `SIGIO` handler must
    /// be installed first (the default action kills the process).
    pub fn open(path: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        // SAFETY: F_SETOWN takes an integer (our own pid) on an fd we own; no memory is passed.
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
        let port = Self { file };
        port.set_async(true)?;
        Ok(port)
    }

    /// Turns `SIGIO` delivery on (waiting for a HELLO) or off (in a session, where epoll does the
    /// waiting and a signal per received buffer would only cost time).
    fn set_async(&self, on: bool) -> std::io::Result<()> {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        let flags = OFlag::from_bits_truncate(fcntl(&self.file, FcntlArg::F_GETFL)?);
        let flags = if on {
            flags | OFlag::O_ASYNC
        } else {
            flags - OFlag::O_ASYNC
        };
        fcntl(&self.file, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        Ok(())
    }

    /// Reads the port until a HELLO line arrives, sleeping on `sigio` while there is nothing to
    /// read. Returns the nonce and the bytes that followed the line.
    pub async fn wait_hello(&self, sigio: &mut Signal) -> std::io::Result<(u64, Vec<u8>)> {
        // Enabled before the first read: whatever happens after it raises SIGIO.
        self.set_async(true)?;
        let mut scanner = Scanner::hello();
        let mut buf = vec![0u8; 4096];
        loop {
            match (&self.file).read(&mut buf) {
                Ok(0) => {}
                Ok(n) => {
                    if let Scan::Found { nonce, rest, .. } = scanner.feed(&buf[..n]) {
                        return Ok((nonce, rest));
                    }
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            // No host (0) or no data yet (EAGAIN): the next connect, disconnect or data arrival
            // raises SIGIO. A SIGIO that arrived since the read above is already recorded by
            // `sigio`, so it is not lost.
            tokio::select! {
                _ = sigio.recv() => {}
                _ = tokio::time::sleep(SIGIO_FALLBACK) => {}
            }
        }
    }

    /// Waits until the driver reports the host connected (`poll` without `POLLHUP`). Returns
    /// false if that does not happen within [`HOST_CONNECT_WAIT`].
    ///
    /// A HELLO can be read before the host is marked connected: the driver takes port data in
    /// its interrupt handler but the "port open" control message in a work queue, so right
    /// after a restore the data may win. An `AsyncFd` registered in that window sees `POLLHUP`,
    /// which tokio keeps for good, and the session would read its first `EAGAIN` as the end of
    /// the connection — after READY went out, leaving the host waiting on a session the guest
    /// has already dropped.
    pub async fn wait_host_connected(&self, sigio: &mut Signal) -> std::io::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let deadline = tokio::time::Instant::now() + HOST_CONNECT_WAIT;
        loop {
            let mut fds = [PollFd::new(self.file.as_fd(), PollFlags::POLLOUT)];
            poll(&mut fds, PollTimeout::ZERO)?;
            let hup = fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLHUP));
            if !hup {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            // The control message raises SIGIO too (O_ASYNC is still on).
            tokio::select! {
                _ = sigio.recv() => {}
                _ = tokio::time::sleep(HOST_CONNECT_POLL) => {}
            }
        }
    }

    /// An IO object for one session, registered with the runtime now.
    pub fn session_io(&self) -> std::io::Result<PortIo> {
        self.set_async(false)?;
        let fd: OwnedFd = self.file.try_clone()?.into();
        // SAFETY: the OwnedFd is moved into the AsyncFd, which alone owns it, so the fd stays open
        // and refers to the same file description until the AsyncFd is dropped.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?;
        Ok(PortIo { fd })
    }
}

/// The port as seen by one session. A host hang-up ends it: reads return EOF once the buffered
/// data is consumed and writes fail with `BrokenPipe`.
pub struct PortIo {
    fd: AsyncFd<OwnedFd>,
}

impl AsyncRead for PortIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let hung_up = guard.ready().is_read_closed();
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| {
                nix::unistd::read(fd.get_ref(), unfilled).map_err(std::io::Error::from)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                // The host of this session hung up and a new one may have connected without
                // sending yet: this session is over.
                Err(_would_block) if hung_up => return Poll::Ready(Ok(())),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for PortIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            let hung_up = guard.ready().is_write_closed();
            match guard
                .try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(std::io::Error::from))
            {
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) if hung_up => {
                    return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()))
                }
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

/// Serves sessions on the port at `path`, one after the other, forever.
pub async fn serve_port(
    path: &Path,
    state: State,
    mut on_waiting: impl FnMut(),
) -> anyhow::Result<()> {
    crate::reaper::ensure_started()?;
    // Before the open: SIGIO's default action would kill us.
    let mut sigio = signal(SignalKind::io())?;
    let port = Port::open(path)?;
    loop {
        on_waiting();
        let (nonce, rest) = port.wait_hello(&mut sigio).await?;
        if !port.wait_host_connected(&mut sigio).await? {
            // Not answered: the host resends HELLO, or has gone and a new one will.
            tracing::warn!("HELLO but the host never showed as connected; ignoring it");
            continue;
        }
        let io = port.session_io()?;
        match crate::session::serve(io, nonce, rest, state.clone()).await {
            Ok(()) => tracing::debug!("session ended"),
            Err(e) => tracing::debug!(
                error = AsRef::<dyn std::error::Error>::as_ref(&e),
                "session ended"
            ),
        }
    }
}
