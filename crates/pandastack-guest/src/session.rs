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
use pandastack_guest_proto::session::{
    parse_hello, ready_line_restorable, restored_line, Restore, Scan, Scanner, LINE_PREFIX,
    MAX_RESTORE_LINE,
};
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
        if let Scan::Found { nonce, rest, .. } = scanner.feed(&buf[..n]) {
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
    io.write_all(&ready_line_restorable(nonce)).await?;
    io.flush().await?;
    let Some(rest) = preamble(&mut io, rest, &state).await? else {
        // The host went away before HTTP/2 (a session opened for a restore and never used).
        return Ok(());
    };
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

/// Handles the handshake's lines that precede the HTTP/2 preface and returns the bytes from the
/// preface on, or `None` if the session is over before HTTP/2: the host went away, or a new
/// host said HELLO. Further HELLO lines before a RESTORE are the host resending HELLO before
/// our READY reached it, and are dropped; a RESTORE line is applied and answered (see
/// `pandastack_guest_proto::session`). A HELLO after a RESTORE comes from a new host — this
/// session was opened for a restore, never used, and the VM was saved and restored again with
/// it — and ends the session: the new host's next HELLO finds the agent waiting for one.
async fn preamble<IO: AsyncRead + AsyncWrite + Unpin>(
    io: &mut IO,
    mut buf: Vec<u8>,
    state: &State,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut chunk = [0u8; 512];
    let mut restored = false;
    loop {
        let n = buf.len().min(LINE_PREFIX.len());
        if n > 0 && buf[..n] != LINE_PREFIX[..n] {
            return Ok(Some(buf));
        }
        if n == LINE_PREFIX.len() {
            if let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                if let Some((nonce, restore)) = Restore::parse_line(&line) {
                    let answer = match apply(restore, state).await {
                        Ok(step_ms) => restored_line(nonce, Ok(step_ms)),
                        Err(why) => restored_line(nonce, Err(&why)),
                    };
                    io.write_all(&answer).await?;
                    io.flush().await?;
                    restored = true;
                } else if restored && parse_hello(&line).is_some() {
                    return Ok(None);
                }
                continue;
            }
            if buf.len() > MAX_RESTORE_LINE {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "handshake line too long",
                ));
            }
        }
        let got = io.read(&mut chunk).await?;
        if got == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..got]);
    }
}

/// Applies a RESTORE line as `Agent.PostRestore` would; the error is the call's message.
async fn apply(r: Restore, state: &State) -> Result<i64, String> {
    crate::services::apply_post_restore(state, r.into())
        .await
        .map_err(|s| s.message().to_owned())
}

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

    use pandastack_guest_proto::session::{hello_line, parse_restored};

    /// A RESTORE that the agent outside a VM accepts (no clock step, no new identity).
    fn restore() -> Restore {
        Restore {
            unix_time_ns: 0,
            entropy: vec![7; 32],
            hostname: String::new(),
            machine_id: String::new(),
            free_page_reporting: pandastack_guest_proto::v1::FreePageReporting::On,
        }
    }

    #[tokio::test]
    async fn resent_hellos_before_the_preface_are_skipped() {
        let state = State::new(false);
        let mut more = hello_line(2);
        more.extend(b"PRI * HTTP/2.0");
        let mut rest = hello_line(1);
        rest.extend(&more[..5]);
        let (mut io, mut peer) = tokio::io::duplex(4096);
        peer.write_all(&more[5..]).await.unwrap();
        let out = preamble(&mut io, rest, &state).await.unwrap();
        assert_eq!(out.as_deref(), Some(&b"PRI * HTTP/2.0"[..]));
        let (mut io, _peer) = tokio::io::duplex(16);
        assert_eq!(
            preamble(&mut io, b"PRI".to_vec(), &state).await.unwrap(),
            Some(b"PRI".to_vec())
        );
        // The host goes away before its preface: no HTTP/2 connection is started.
        let (mut io, peer) = tokio::io::duplex(16);
        drop(peer);
        assert_eq!(
            preamble(&mut io, hello_line(3), &state).await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_restore_line_is_answered_before_the_preface() {
        let state = State::new(false);
        let (mut io, mut peer) = tokio::io::duplex(4096);
        let good = restore();
        let bad = Restore {
            hostname: "-no".into(),
            ..good.clone()
        };
        let mut input = hello_line(1);
        input.extend(bad.line(8));
        input.extend(good.line(9));
        input.extend(b"PRI * HTTP/2.0");
        peer.write_all(&input).await.unwrap();
        let out = preamble(&mut io, Vec::new(), &state).await.unwrap();
        assert_eq!(out.as_deref(), Some(&b"PRI * HTTP/2.0"[..]));
        drop(io);
        let mut answers = String::new();
        peer.read_to_string(&mut answers).await.unwrap();
        let lines: Vec<_> = answers.lines().collect();
        assert_eq!(lines.len(), 2, "{answers}");
        let (nonce, result) = parse_restored(lines[0].as_bytes()).unwrap();
        assert_eq!(nonce, 8);
        assert!(result.unwrap_err().contains("hostname"));
        assert_eq!(parse_restored(lines[1].as_bytes()), Some((9, Ok(0))));
    }

    #[tokio::test]
    async fn a_hello_after_a_restore_ends_the_session() {
        let state = State::new(false);
        let (mut io, mut peer) = tokio::io::duplex(4096);
        let mut input = restore().line(1);
        input.extend(hello_line(2));
        input.extend(b"PRI * HTTP/2.0");
        peer.write_all(&input).await.unwrap();
        assert_eq!(preamble(&mut io, Vec::new(), &state).await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_endless_handshake_line_is_refused() {
        let state = State::new(false);
        let (mut io, mut peer) = tokio::io::duplex(8192);
        let mut input = LINE_PREFIX.to_vec();
        input.extend(vec![b'x'; 2 * MAX_RESTORE_LINE]);
        peer.write_all(&input).await.unwrap();
        assert!(preamble(&mut io, Vec::new(), &state).await.is_err());
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
