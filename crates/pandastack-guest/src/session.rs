//! Sessions: one HELLO/READY exchange, then one HTTP/2 connection serving the gRPC services.
//! Transport-specific code finds the HELLO (the virtio port in [`crate::port`], a unix socket
//! with [`read_hello`]); [`serve`] answers it and serves what follows, generically over any
//! `AsyncRead + AsyncWrite`.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use pandastack_guest_proto::session::{hello_line, ready_line, Scan, Scanner};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;

use crate::services::State;

/// An IO that first yields bytes already read past the HELLO line.
pub struct Prefixed<IO> {
    prefix: Vec<u8>,
    pos: usize,
    io: IO,
}

impl<IO> Prefixed<IO> {
    pub fn new(prefix: Vec<u8>, io: IO) -> Self {
        Self { prefix, pos: 0, io }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Prefixed<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.pos < self.prefix.len() {
            let n = (self.prefix.len() - self.pos).min(buf.remaining());
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Prefixed<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Reads `io` until a HELLO line arrives; returns its nonce and the bytes after it, or `None` if
/// the peer closed first. For transports where readiness means what it says (a unix socket); the
/// virtio port has its own loop in [`crate::port`].
pub async fn read_hello<IO: AsyncRead + Unpin>(
    io: &mut IO,
) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let mut scanner = Scanner::hello();
    let mut buf = vec![0u8; 4096];
    loop {
        let n = io.read(&mut buf).await?;
        if n == 0 {
            return Ok(None);
        }
        if let Scan::Found { nonce, rest } = scanner.feed(&buf[..n]) {
            return Ok(Some((nonce, rest)));
        }
    }
}

/// Answers `nonce` and serves one HTTP/2 connection on `io` until the peer goes away, the
/// connection fails (e.g. stale bytes that are not HTTP/2), or the host asks to detach.
pub async fn serve<IO>(mut io: IO, nonce: u64, rest: Vec<u8>, state: State) -> anyhow::Result<()>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    io.write_all(&ready_line(nonce)).await?;
    io.flush().await?;
    let rest = skip_hellos(&mut io, rest).await?;
    let detach = Arc::new(Notify::new());
    let service = TowerToHyperService::new(state.routes(detach.clone()));
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .keep_alive_interval(None)
        .max_concurrent_streams(1024);
    let conn = builder.serve_connection(TokioIo::new(Prefixed::new(rest, io)), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => return r.map_err(Into::into),
        _ = detach.notified() => {}
    }
    // Detach: let the answer to Detach (and anything else in flight, briefly) go out, then close.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(DETACH_GRACE, conn).await;
    Ok(())
}

/// How long a detaching session waits for in-flight calls to finish.
const DETACH_GRACE: Duration = Duration::from_secs(1);

/// Drops further HELLO lines that precede the HTTP/2 preface: a host that resent HELLO before
/// our READY reached it has them in the stream ahead of its first HTTP/2 byte.
async fn skip_hellos<IO: AsyncRead + Unpin>(
    io: &mut IO,
    mut buf: Vec<u8>,
) -> std::io::Result<Vec<u8>> {
    let hello = &hello_line(0)[..HELLO_PREFIX_LEN];
    let mut chunk = [0u8; 512];
    loop {
        let n = buf.len().min(hello.len());
        if buf[..n] != hello[..n] {
            return Ok(buf);
        }
        if n == hello.len() {
            if let Some(end) = buf.iter().position(|&b| b == b'\n') {
                buf.drain(..=end);
                continue;
            }
        }
        let got = io.read(&mut chunk).await?;
        if got == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..got]);
    }
}

/// Length of "PANDASTACK/1 HELLO ".
const HELLO_PREFIX_LEN: usize = 19;

/// Serves sessions on a unix socket: every accepted connection scans for HELLO and becomes one
/// session; connections are served concurrently. For tests and local debugging outside a VM.
pub async fn serve_unix(path: &Path, state: State) -> anyhow::Result<()> {
    crate::reaper::ensure_started()?;
    // A socket left by an earlier run is replaced; anything else at the path is an error.
    if let Ok(md) = std::fs::symlink_metadata(path) {
        if std::os::unix::fs::FileTypeExt::is_socket(&md.file_type()) {
            std::fs::remove_file(path)?;
        }
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    tracing::info!(path = %path.display(), "serving on unix socket");
    loop {
        let (mut stream, _) = listener.accept().await?;
        let state = state.clone();
        tokio::spawn(async move {
            let (nonce, rest) = match read_hello(&mut stream).await {
                Ok(Some(hello)) => hello,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(
                        error = &e as &dyn std::error::Error,
                        "connection lost before HELLO"
                    );
                    return;
                }
            };
            if let Err(e) = serve(stream, nonce, rest, state).await {
                tracing::debug!(
                    error = AsRef::<dyn std::error::Error>::as_ref(&e),
                    "session ended"
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resent_hellos_before_the_preface_are_skipped() {
        let mut more = hello_line(2);
        more.extend(b"PRI * HTTP/2.0");
        let mut rest = hello_line(1);
        rest.extend(&more[..5]);
        let mut io: &[u8] = &more[5..];
        let out = skip_hellos(&mut io, rest).await.unwrap();
        assert_eq!(out, b"PRI * HTTP/2.0");
        let mut empty: &[u8] = b"";
        assert_eq!(
            skip_hellos(&mut empty, b"PRI".to_vec()).await.unwrap(),
            b"PRI"
        );
    }

    #[tokio::test]
    async fn prefixed_yields_prefix_then_inner() {
        let inner: &[u8] = b"world";
        let mut p = Prefixed::new(b"hello ".to_vec(), inner);
        let mut out = String::new();
        p.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
