//! Host side of the guest connection: connect to the unix socket behind the VM's virtio-serial
//! port, open a session (HELLO/READY) and speak gRPC over it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::session::{hello_line, Scan, Scanner};

/// An unanswered HELLO is sent again after 10 ms, then every 20 ms. A restored guest may still
/// be inside the session it had when it was snapshotted and swallow the first HELLO as garbage;
/// it answers the next one, so the resend interval is time a restore waits for nothing (with
/// intervals doubling to 250 ms, session opens after a restore took 50–160 ms under TCG). Extra
/// HELLOs are harmless: a line of 30 bytes, which the guest skips when it precedes the HTTP/2
/// preface.
const HELLO_RESEND_FIRST: Duration = Duration::from_millis(10);
const HELLO_RESEND_MAX: Duration = Duration::from_millis(20);

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connect to guest socket {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("guest socket i/o during handshake")]
    Io(#[from] std::io::Error),
    #[error("guest agent did not answer within {0:?}")]
    Timeout(Duration),
    #[error("guest closed the connection during the handshake")]
    Closed,
}

/// Connects to `path` and opens a session, retrying the connection until `timeout` (the socket
/// may not exist yet while QEMU starts). Returns a stream ready for HTTP/2.
pub async fn open_session(path: &Path, timeout: Duration) -> Result<UnixStream, ConnectError> {
    let deadline = Instant::now() + timeout;
    let mut stream = loop {
        match UnixStream::connect(path).await {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline && retryable(&e) => {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(source) => {
                return Err(ConnectError::Connect {
                    path: path.to_owned(),
                    source,
                })
            }
        }
    };
    handshake(&mut stream, deadline, timeout).await?;
    Ok(stream)
}

fn retryable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

async fn handshake(
    stream: &mut UnixStream,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), ConnectError> {
    let mut sent: Vec<u64> = Vec::new();
    let mut scanner = Scanner::ready();
    let mut byte = [0u8; 1];
    let mut interval = HELLO_RESEND_FIRST;
    loop {
        let nonce = rand::random::<u64>();
        stream.write_all(&hello_line(nonce)).await?;
        sent.push(nonce);
        let resend_at = (Instant::now() + interval).min(deadline);
        interval = (interval * 2).min(HELLO_RESEND_MAX);
        loop {
            // One byte at a time: nothing after the READY line may be consumed here, it is HTTP/2.
            let read = tokio::time::timeout_at(resend_at, stream.read(&mut byte)).await;
            match read {
                Err(_) if Instant::now() >= deadline => return Err(ConnectError::Timeout(timeout)),
                Err(_) => break,
                Ok(Ok(0)) => return Err(ConnectError::Closed),
                Ok(Ok(_)) => {
                    if let Scan::Found { nonce, .. } = scanner.feed(&byte) {
                        if sent.contains(&nonce) {
                            return Ok(());
                        }
                    }
                }
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }
}

/// A lazily connecting gRPC channel to the guest behind `path`. Every (re)connection opens a new
/// session; calls fail with `Unavailable` while the guest cannot be reached.
pub fn channel(path: PathBuf, connect_timeout: Duration) -> Channel {
    // The URI is required by tonic but never resolved: the connector below ignores it.
    Endpoint::from_static("http://guest.pandastack")
        .http2_keep_alive_interval(Duration::from_secs(3600))
        .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = open_session(&path, connect_timeout).await?;
                Ok::<_, ConnectError>(TokioIo::new(stream))
            }
        }))
}

/// Connects eagerly: returns once a session is open and the channel is ready for calls.
pub async fn connect(path: PathBuf, timeout: Duration) -> Result<Channel, ConnectError> {
    let stream = open_session(&path, timeout).await?;
    let mut first = Some(stream);
    let endpoint = Endpoint::from_static("http://guest.pandastack");
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            let ready = first.take();
            async move {
                let stream = match ready {
                    Some(s) => s,
                    None => open_session(&path, timeout).await?,
                };
                Ok::<_, ConnectError>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| ConnectError::Io(std::io::Error::other(e)))
}
