//! Host side of the guest connection: connect to the unix socket behind the VM's virtio-serial
//! port, open a session (HELLO/READY) and speak gRPC over it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::session::{
    hello_line, offers_free_page_reporting, offers_restore, parse_restored, Restore, Scan, Scanner,
    MAX_RESTORE_LINE,
};
use crate::v1::FreePageReporting;

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
    #[error("guest agent refused the restore line: {0}")]
    Restore(String),
}

/// What a session opened with a [`Restore`] did with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// The guest applied it and stepped its clock by this many milliseconds.
    Applied { clock_step_ms: i64 },
    /// The guest's agent predates RESTORE lines: the caller must make the `PostRestore` call.
    NotOffered,
}

/// Connects to `path` and opens a session, retrying the connection until `timeout` (the socket
/// may not exist yet while QEMU starts). Returns a stream ready for HTTP/2.
pub async fn open_session(path: &Path, timeout: Duration) -> Result<UnixStream, ConnectError> {
    Ok(open(path, timeout, None).await?.0)
}

/// Like [`open_session`], and hands `restore` to the guest before HTTP/2 if its agent takes
/// RESTORE lines (see [`crate::session`]).
pub async fn open_session_restoring(
    path: &Path,
    timeout: Duration,
    restore: &Restore,
) -> Result<(UnixStream, Restored), ConnectError> {
    open(path, timeout, Some(restore)).await
}

async fn open(
    path: &Path,
    timeout: Duration,
    restore: Option<&Restore>,
) -> Result<(UnixStream, Restored), ConnectError> {
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
    let extra = handshake(&mut stream, deadline, timeout).await?;
    let restored = match restore {
        Some(r) if offers_restore(&extra) => {
            // An agent that does not offer the free-page reporting field refuses a line with
            // it; such an agent keeps reporting as it was (as with an old host).
            let r = if offers_free_page_reporting(&extra) {
                r.clone()
            } else {
                Restore {
                    free_page_reporting: FreePageReporting::Unspecified,
                    ..r.clone()
                }
            };
            send_restore(&mut stream, &r, deadline, timeout).await?
        }
        _ => Restored::NotOffered,
    };
    Ok((stream, restored))
}

fn retryable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
    )
}

/// Sends HELLO until a READY for one of its nonces comes back. Returns the words after the
/// READY's nonce: what the guest offers (see [`offers_restore`]).
async fn handshake(
    stream: &mut UnixStream,
    deadline: Instant,
    timeout: Duration,
) -> Result<String, ConnectError> {
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
                    if let Scan::Found { nonce, extra, .. } = scanner.feed(&byte) {
                        if sent.contains(&nonce) {
                            return Ok(extra);
                        }
                    }
                }
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }
}

/// Sends the RESTORE line and reads the guest's answer (the next line it writes: nothing else
/// comes from the guest between READY and HTTP/2).
async fn send_restore(
    stream: &mut UnixStream,
    restore: &Restore,
    deadline: Instant,
    timeout: Duration,
) -> Result<Restored, ConnectError> {
    let nonce = rand::random::<u64>();
    // The clock the guest steps to is read now, not when the caller built `restore`: the
    // handshake before this line can take a restored guest a hundred milliseconds under TCG.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(restore.unix_time_ns);
    let line = Restore {
        unix_time_ns: now.max(restore.unix_time_ns),
        ..restore.clone()
    }
    .line(nonce);
    stream.write_all(&line).await?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        // One byte at a time, as in the handshake: HTTP/2 follows the line.
        match tokio::time::timeout_at(deadline, stream.read(&mut byte)).await {
            Err(_) => return Err(ConnectError::Timeout(timeout)),
            Ok(Ok(0)) => return Err(ConnectError::Closed),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.into()),
        }
        line.push(byte[0]);
        if byte[0] != b'\n' && line.len() < MAX_RESTORE_LINE {
            continue;
        }
        return match parse_restored(&line) {
            Some((n, Ok(clock_step_ms))) if n == nonce => Ok(Restored::Applied { clock_step_ms }),
            Some((n, Err(why))) if n == nonce => Err(ConnectError::Restore(why)),
            _ => Err(ConnectError::Restore(format!(
                "unexpected answer {:?}",
                String::from_utf8_lossy(&line)
            ))),
        };
    }
}

/// A lazily connecting gRPC channel to the guest behind `path`. Every (re)connection opens a new
/// session; calls fail with `Unavailable` while the guest cannot be reached.
pub fn channel(path: PathBuf, connect_timeout: Duration) -> Channel {
    endpoint().connect_with_connector_lazy(sessions(path, None, connect_timeout))
}

/// The endpoint of every channel. The URI is required by tonic but never resolved: the
/// connector ignores it.
fn endpoint() -> Endpoint {
    Endpoint::from_static("http://guest.pandastack")
        .http2_keep_alive_interval(Duration::from_secs(3600))
}

/// A connector whose first connection is `first` when given, and every other one a new session.
fn sessions(
    path: PathBuf,
    mut first: Option<UnixStream>,
    timeout: Duration,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<UnixStream>,
    Error = ConnectError,
    Future: Send + 'static,
> + Send
       + 'static {
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        let ready = first.take();
        async move {
            let stream = match ready {
                Some(s) => s,
                None => open_session(&path, timeout).await?,
            };
            Ok::<_, ConnectError>(TokioIo::new(stream))
        }
    })
}

/// Connects eagerly: returns once a session is open and the channel is ready for calls.
pub async fn connect(path: PathBuf, timeout: Duration) -> Result<Channel, ConnectError> {
    let stream = open_session(&path, timeout).await?;
    channel_over(path, stream, timeout).await
}

/// Opens a session handing `restore` to the guest (see [`open_session_restoring`]) and returns
/// a channel over it. The channel's HTTP/2 connection starts with its first call: a woken VM
/// spends no time on the agent's HTTP/2 code until something asks the agent for something.
pub async fn connect_restoring(
    path: PathBuf,
    timeout: Duration,
    restore: &Restore,
) -> Result<(Channel, Restored), ConnectError> {
    let (stream, restored) = open_session_restoring(&path, timeout, restore).await?;
    let channel = match restored {
        Restored::Applied { .. } => lazy_channel_over(path, stream, timeout),
        Restored::NotOffered => channel_over(path, stream, timeout).await?,
    };
    Ok((channel, restored))
}

/// A channel whose first connection is `stream`; later ones open new sessions.
async fn channel_over(
    path: PathBuf,
    stream: UnixStream,
    timeout: Duration,
) -> Result<Channel, ConnectError> {
    endpoint()
        .connect_with_connector(sessions(path, Some(stream), timeout))
        .await
        .map_err(|e| ConnectError::Io(std::io::Error::other(e)))
}

/// Like [`channel_over`], connecting on the first call.
fn lazy_channel_over(path: PathBuf, stream: UnixStream, timeout: Duration) -> Channel {
    endpoint().connect_with_connector_lazy(sessions(path, Some(stream), timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{restored_line, Scan, Scanner};

    /// A guest agent on `path` that answers one HELLO with READY offering `offer`, then takes one
    /// RESTORE line, answers it and returns it.
    async fn agent_offering(listener: tokio::net::UnixListener, offer: &str) -> String {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut scanner = Scanner::hello();
        let mut byte = [0u8; 1];
        let nonce = loop {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1);
            if let Scan::Found { nonce, .. } = scanner.feed(&byte) {
                break nonce;
            }
        };
        s.write_all(format!("PANDASTACK/1 READY {nonce:016x} {offer}\n").as_bytes())
            .await
            .unwrap();
        let mut line = Vec::new();
        loop {
            assert_eq!(s.read(&mut byte).await.unwrap(), 1);
            line.push(byte[0]);
            if byte[0] != b'\n' {
                continue;
            }
            if let Some((nonce, _)) = Restore::parse_line(&line) {
                s.write_all(&restored_line(nonce, Ok(0))).await.unwrap();
                return String::from_utf8(line).unwrap();
            }
            // A HELLO resent before our READY arrived.
            line.clear();
        }
    }

    /// Agents that take RESTORE lines but predate the free-page reporting field refuse a line
    /// with it: the host leaves it out for them, and sends it to agents that offer `fpr`.
    #[tokio::test]
    async fn the_reporting_field_goes_only_to_agents_that_offer_it() {
        let dir = std::env::temp_dir().join(format!(
            "pandastack-host-test-{}-{:x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let restore = Restore {
            unix_time_ns: 1,
            entropy: vec![3; 32],
            hostname: String::new(),
            machine_id: String::new(),
            free_page_reporting: FreePageReporting::Off,
        };
        for (i, (offer, sent)) in [("restore", false), ("restore fpr", true)]
            .into_iter()
            .enumerate()
        {
            let path = dir.join(format!("agent{i}.sock"));
            let listener = tokio::net::UnixListener::bind(&path).unwrap();
            let agent = tokio::spawn(async move { agent_offering(listener, offer).await });
            let (_stream, restored) =
                open_session_restoring(&path, Duration::from_secs(10), &restore)
                    .await
                    .unwrap();
            assert_eq!(restored, Restored::Applied { clock_step_ms: 0 });
            let line = agent.await.unwrap();
            assert_eq!(line.ends_with(" fpr=off\n"), sent, "{offer}: {line}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
