//! Pseudo-terminals for interactive execs.

use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

fn winsize(rows: u32, cols: u32) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows.clamp(1, u16::MAX as u32) as u16,
        ws_col: cols.clamp(1, u16::MAX as u32) as u16,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// Opens a pty pair of the given size; the master is non-blocking.
pub fn open(rows: u32, cols: u32) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (rows, cols) = if rows == 0 || cols == 0 {
        (24, 80)
    } else {
        (rows, cols)
    };
    let pty = nix::pty::openpty(Some(&winsize(rows, cols)), None)?;
    use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(&pty.master, FcntlArg::F_GETFL)?);
    fcntl(&pty.master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    fcntl(&pty.master, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok((pty.master, pty.slave))
}

/// Sets the terminal size seen by the program.
pub fn resize(master: &OwnedFd, rows: u32, cols: u32) -> std::io::Result<()> {
    let ws = winsize(rows, cols);
    // SAFETY: TIOCSWINSZ reads a `struct winsize` from the pointer, which is valid for the call.
    let r = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCSWINSZ,
            &ws as *const nix::pty::Winsize,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Async read/write access to a pty master. EIO (all slave ends closed) reads as EOF.
#[derive(Clone)]
pub struct Master {
    fd: Arc<AsyncFd<OwnedFd>>,
}

impl Master {
    pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
        // SAFETY: the OwnedFd is moved into the AsyncFd and stays open with the same fd number
        // for the AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(std::io::Error::from)?;
        Ok(Self { fd: Arc::new(fd) })
    }

    pub fn fd(&self) -> &OwnedFd {
        self.fd.get_ref()
    }
}

impl AsyncRead for Master {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| {
                nix::unistd::read(fd.get_ref(), unfilled).map_err(std::io::Error::from)
            }) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Master {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard
                .try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(std::io::Error::from))
            {
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
