//! PostgreSQL over WebSocket on the database front's port: what `@neondatabase/serverless`
//! speaks in its `Pool`/`Client` mode. The driver opens `wss://<host>/v2` (its `wsProxy`
//! setting chooses the address) and sends the PostgreSQL wire protocol in binary frames.
//!
//! ```text
//! TLS (the front's certificate, SNI) ─ HTTP/1.1 GET /v2 ─ Upgrade ─► WebSocket ◄─ pump ─► pipe
//!   pipe: startup ─ AuthenticationCleartextPassword ─ PasswordMessage ─ open (wake, connect)
//!         ─ startup upstream ─ login (SCRAM, the client's password) ─ AuthenticationOk ─ relay
//! ```
//!
//! - **Which database**: the `address=<host>:<port>` query (what the driver adds when
//!   `wsProxy` is a plain string), else the TLS server name, else the `Host` header — each a
//!   `<id>[-pooler].<domain>` name — else the startup's `options=endpoint=<id>`. An unknown
//!   database, or none named, is a PostgreSQL `FATAL` in the socket, as on the TCP front.
//! - **TLS**: only ever inside TLS — this is the TCP front's port and certificate, and a
//!   WebSocket reaches it only by direct TLS ([`pandastack_pgwire::front`]) — so there is no
//!   plaintext `ws://` at all, in production or in development (a development server's
//!   self-signed certificate is trusted by the client, or not verified). PostgreSQL's own TLS
//!   inside the socket is declined (`SSLRequest` → `N`): the driver's default
//!   (`forceDisablePgSSL = true`) never asks for it.
//! - **Password**: asked for in cleartext (`AuthenticationCleartextPassword`), as Neon's
//!   proxy does and as the driver's default `pipelineConnect = "password"` sends it without
//!   waiting; it is safe because the socket is TLS. The front then logs in to PostgreSQL (or
//!   PgBouncer) with it by SCRAM, so PostgreSQL still checks it, for any role, and the client
//!   gets PostgreSQL's own refusal (`28P01`). Nothing else authenticates: no API key.
//! - **Bounds**: messages and frames of at most [`MAX_MESSAGE`] bytes (a longer one closes
//!   the socket), binary frames only (text closes it with 1003), a ping every
//!   [`PING_EVERY`] and the socket closed after [`IDLE`] without a frame from the client (its
//!   pongs count: a live client is never idle, a vanished one cannot keep its database
//!   awake), the HTTP request's head within [`HTTP_HEAD_TIMEOUT`], the startup and password
//!   within the front's handshake timeout, and the front's connection limit.
//! - **Close**: the client's close ends the session upstream (PostgreSQL sees its socket end);
//!   the session's end (PostgreSQL closing, a refusal) closes the socket with 1000.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use pandastack_pgwire::client::ClientError;
use pandastack_pgwire::front::{self, HttpConn, Prefixed};
use pandastack_pgwire::startup::{Packet, Startup};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::Notify;

use super::{Backends, CancelKeys, Opened, HANDSHAKE_TIMEOUT};

/// The path the driver opens by default (`wsProxy: host => host + "/v2"`).
pub(crate) const PATH: &str = "/v2";
/// Largest WebSocket message or frame (a PostgreSQL message in it, e.g. a big `INSERT`, must
/// fit: the driver sends what it wrote in one turn of its event loop as one message).
pub(crate) const MAX_MESSAGE: usize = 16 << 20;
/// How often the front pings the client.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(30);
/// A socket with no frame from the client for this long is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(90);
/// How long the client has to answer the front's close (or finish its own) once the session
/// is over.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Longest the HTTP request's head may take.
pub(crate) const HTTP_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes buffered between the socket and the session each way.
const PIPE: usize = 64 * 1024;
/// Longest `PasswordMessage` accepted (PostgreSQL's own limit on an authentication token).
const MAX_PASSWORD_MESSAGE: usize = 65_535;

/// One HTTP connection's view of the front.
struct Target<B> {
    backends: Arc<B>,
    keys: Arc<CancelKeys>,
    sni: Option<String>,
}

/// Serves one HTTP/1.1 connection that came in over the front's TLS: `GET /v2` upgrades to
/// PostgreSQL over WebSocket; anything else is answered with `Connection: close`.
pub(super) async fn serve_http<B: Backends, S>(
    backends: Arc<B>,
    keys: Arc<CancelKeys>,
    http: HttpConn<S>,
) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let HttpConn { stream, sni } = http;
    let target = Arc::new(Target {
        backends,
        keys,
        sni,
    });
    let router = Router::new()
        .route(PATH, get(upgrade::<B>))
        .fallback(elsewhere)
        .with_state(target);
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HTTP_HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router))
        .with_upgrades()
        .await?;
    Ok(())
}

async fn elsewhere() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONNECTION, "close")],
        format!("this port serves PostgreSQL, and PostgreSQL over WebSocket at {PATH}\n"),
    )
        .into_response()
}

/// `GET /v2`: the upgrade. Which database is decided here from the URL and TLS, or later from
/// the startup message; every refusal after the upgrade is a PostgreSQL error in the socket.
async fn upgrade<B: Backends>(
    State(t): State<Arc<Target<B>>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Ok(ws) = ws else {
        return (
            StatusCode::UPGRADE_REQUIRED,
            [
                (header::UPGRADE, "websocket"),
                (header::CONNECTION, "close"),
            ],
            "PostgreSQL over WebSocket: open a WebSocket here (e.g. @neondatabase/serverless)\n",
        )
            .into_response();
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let label = label(
        t.backends.domain(),
        query.as_deref(),
        t.sni.as_deref(),
        host,
    );
    ws.max_message_size(MAX_MESSAGE)
        .max_frame_size(MAX_MESSAGE)
        .on_upgrade(move |socket| tunnel(t, label, socket))
}

/// The database a WebSocket names, if its URL or TLS does: the `address` query parameter
/// first (the driver's `?address=host:port`), then the TLS server name, then `Host`.
fn label(
    domain: &str,
    query: Option<&str>,
    sni: Option<&str>,
    host: Option<&str>,
) -> Option<String> {
    let of = |name: &str| front::host_label(strip_port(name), domain).map(str::to_owned);
    let address = query.and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "address")
            .map(|(_, v)| v.into_owned())
    });
    address
        .as_deref()
        .and_then(of)
        .or_else(|| sni.and_then(of))
        .or_else(|| host.and_then(of))
}

/// `name` without a `:port` (an IPv6 literal in brackets keeps its colons).
fn strip_port(name: &str) -> &str {
    match name.rsplit_once(':') {
        Some((h, port))
            if !h.is_empty()
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!h.contains(':') || h.ends_with(']')) =>
        {
            h
        }
        _ => name,
    }
}

/// Why the WebSocket side of a tunnel ended abnormally.
#[derive(Debug, thiserror::Error)]
enum PumpError {
    #[error("websocket")]
    Socket(#[source] axum::Error),
    #[error("no frame from the client for {0:?}")]
    Idle(Duration),
    #[error("text frame (PostgreSQL over WebSocket is binary frames only)")]
    Text,
}

/// One WebSocket: the pump between its frames and a pipe, and the PostgreSQL session on the
/// pipe's other end, until both are done.
async fn tunnel<B: Backends>(t: Arc<Target<B>>, label: Option<String>, socket: WebSocket) {
    let (session_end, socket_end) = tokio::io::duplex(PIPE);
    let (pumped, ended) = tokio::join!(
        pump(socket, socket_end),
        session(&t.backends, &t.keys, label, session_end)
    );
    if let Err(e) = pumped {
        tracing::debug!(
            error = &e as &dyn std::error::Error,
            "database front: websocket ended"
        );
    }
    if let Err(e) = ended {
        tracing::debug!(
            error =
                AsRef::<dyn std::error::Error + Send + Sync>::as_ref(&e) as &dyn std::error::Error,
            "database front: websocket session ended"
        );
    }
}

/// Carries binary frames into `pipe` and what comes out of `pipe` back as binary frames; pings
/// the client and closes an idle socket. Ends when both directions are done: the client's
/// close (or silence) ends the pipe's input, the pipe's end sends a close.
async fn pump(socket: WebSocket, pipe: DuplexStream) -> Result<(), PumpError> {
    let (mut tx, mut rx) = socket.split();
    let (mut from_session, mut to_session) = tokio::io::split(pipe);
    // Set by the inbound half when it stops the socket for a reason the close frame tells.
    let close_reason: Mutex<Option<CloseFrame>> = Mutex::new(None);
    let outbound_done = AtomicBool::new(false);
    let outbound_ended = Notify::new();

    let inbound = async {
        let mut deadline = tokio::time::Instant::now() + IDLE;
        let result = loop {
            let next = tokio::select! {
                m = rx.next() => m,
                () = tokio::time::sleep_until(deadline) => {
                    break if outbound_done.load(Ordering::Acquire) { Ok(()) } else { Err(PumpError::Idle(IDLE)) };
                }
                () = outbound_ended.notified() => {
                    deadline = deadline.min(tokio::time::Instant::now() + CLOSE_GRACE);
                    continue;
                }
            };
            if !outbound_done.load(Ordering::Acquire) {
                deadline = tokio::time::Instant::now() + IDLE;
            }
            match next {
                None | Some(Ok(Message::Close(_))) => break Ok(()),
                Some(Err(e)) => break Err(PumpError::Socket(e)),
                Some(Ok(Message::Binary(b))) => {
                    // The session may be over already; the rest is dropped until the close.
                    let _ = to_session.write_all(&b).await;
                }
                Some(Ok(Message::Text(_))) => {
                    set(
                        &close_reason,
                        axum::extract::ws::close_code::UNSUPPORTED,
                        "binary frames only",
                    );
                    break Err(PumpError::Text);
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            }
        };
        // The session sees the end of its input: PostgreSQL's connection is closed.
        let _ = to_session.shutdown().await;
        drop(to_session);
        result
    };

    let outbound = async {
        let mut buf = vec![0u8; PIPE];
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        let result = loop {
            tokio::select! {
                n = from_session.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break Ok(()),
                    Ok(n) => {
                        if let Err(e) = tx.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await {
                            break Err(PumpError::Socket(e));
                        }
                    }
                },
                _ = ping.tick() => {
                    if let Err(e) = tx.send(Message::Ping(Bytes::new())).await {
                        break Err(PumpError::Socket(e));
                    }
                }
            }
        };
        if result.is_ok() {
            let frame = close_reason
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .unwrap_or(CloseFrame {
                    code: axum::extract::ws::close_code::NORMAL,
                    reason: "".into(),
                });
            let _ = tx.send(Message::Close(Some(frame))).await;
        }
        outbound_done.store(true, Ordering::Release);
        outbound_ended.notify_one();
        drop(from_session);
        result
    };

    let (i, o) = tokio::join!(inbound, outbound);
    i.and(o)
}

fn set(reason: &Mutex<Option<CloseFrame>>, code: u16, text: &'static str) {
    *reason.lock().unwrap_or_else(|p| p.into_inner()) = Some(CloseFrame {
        code,
        reason: text.into(),
    });
}

/// The first packet of a session: a startup message or a cancel request.
enum Start {
    Startup(Startup),
    Cancel(super::CancelKey),
}

/// The PostgreSQL session on the pipe: startup, the password, the database, the login
/// upstream, then the relay.
async fn session<B: Backends, C>(
    b: &Arc<B>,
    keys: &CancelKeys,
    label: Option<String>,
    mut client: C,
) -> anyhow::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin + Send,
{
    let start = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_start(&mut client)).await {
        Ok(s) => s?,
        Err(_) => anyhow::bail!("no startup message within {HANDSHAKE_TIMEOUT:?}"),
    };
    let startup = match start {
        Start::Startup(s) => s,
        Start::Cancel(key) => return super::cancel(b.as_ref(), keys, key).await,
    };
    let Some(label) = label.or_else(|| startup.endpoint()) else {
        let domain = b.domain();
        return super::refuse(
            &mut client,
            "08004",
            &format!(
                "which database? open the WebSocket at <database id>.{domain}, or add \
                 ?address=<database id>.{domain}:<port> to its URL, or options=endpoint=<database id> \
                 to the connection string"
            ),
        )
        .await;
    };
    let Some(user) = startup.user().map(str::to_owned) else {
        return super::refuse(
            &mut client,
            "28000",
            "no PostgreSQL user name specified in startup packet",
        )
        .await;
    };
    // Inside TLS: the password in cleartext, as Neon's proxy asks (and the driver's
    // pipelineConnect sends it without waiting for this).
    client.write_all(&AUTH_CLEARTEXT).await?;
    client.flush().await?;
    let password = match tokio::time::timeout(HANDSHAKE_TIMEOUT, read_password(&mut client)).await {
        Ok(Ok(p)) => p,
        Ok(Err(PasswordError::Io(e))) => return Err(e.into()),
        Ok(Err(e)) => {
            super::refuse(&mut client, "08P01", &e.to_string()).await?;
            return Err(e.into());
        }
        Err(_) => anyhow::bail!("no password within {HANDSHAKE_TIMEOUT:?}"),
    };
    let mut opened = match b.open(&label).await {
        Ok(o) => o,
        Err(e) => return super::refuse_open(&mut client, e).await,
    };
    opened
        .stream
        .write_all(&startup.encode_for_upstream())
        .await?;
    let Opened {
        sandbox,
        port,
        stream,
    } = opened;
    let login = pandastack_pgwire::client::login(stream, &user, &password);
    let (stream, rest) = match tokio::time::timeout(HANDSHAKE_TIMEOUT, login).await {
        Ok(Ok(s)) => s,
        Ok(Err(ClientError::Db(e))) => {
            // PostgreSQL's own refusal (a wrong password: 28P01), passed on.
            front::write_error(
                &mut client,
                front::Severity::Fatal,
                &e.code,
                &e.message,
                e.hint.as_deref(),
            )
            .await?;
            return Ok(());
        }
        Ok(Err(e)) => {
            super::refuse(
                &mut client,
                "08006",
                &format!("database {label} login failed: {e}"),
            )
            .await?;
            return Err(e.into());
        }
        Err(_) => {
            super::refuse(
                &mut client,
                "08006",
                &format!("database {label} login timed out"),
            )
            .await?;
            anyhow::bail!("login upstream took over {HANDSHAKE_TIMEOUT:?}");
        }
    };
    client.write_all(&AUTH_OK).await?;
    let opened = Opened {
        sandbox,
        port,
        stream: Box::new(Prefixed::new(rest, stream)),
    };
    super::relay(b, keys, &mut client, opened).await
}

/// `AuthenticationCleartextPassword`.
const AUTH_CLEARTEXT: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 3];
/// `AuthenticationOk`.
const AUTH_OK: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 0];

/// Reads the first packet; `SSLRequest` and `GSSENCRequest` are declined (`N`, once each):
/// the socket is TLS already.
async fn read_start<C: AsyncRead + AsyncWrite + Unpin>(client: &mut C) -> anyhow::Result<Start> {
    let (mut ssl, mut gss) = (false, false);
    loop {
        let mut word = [0u8; 4];
        client.read_exact(&mut word).await?;
        let len = match Packet::body_len(word) {
            Ok(l) => l,
            Err(e) => {
                super::refuse(client, "08P01", "invalid startup packet layout").await?;
                return Err(e.into());
            }
        };
        let mut body = vec![0u8; len];
        client.read_exact(&mut body).await?;
        match Packet::parse_body(&body) {
            Ok(Packet::Startup(s)) => return Ok(Start::Startup(s)),
            Ok(Packet::Cancel { pid, secret }) => return Ok(Start::Cancel((pid, secret.to_vec()))),
            Ok(Packet::SslRequest) if !ssl => ssl = true,
            Ok(Packet::GssEncRequest) if !gss => gss = true,
            Ok(Packet::SslRequest | Packet::GssEncRequest) => {
                anyhow::bail!("a second encryption request")
            }
            Err(e) => {
                let message = match &e {
                    pandastack_pgwire::startup::StartupError::UnsupportedProtocol {
                        major,
                        minor,
                    } => format!(
                        "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.2"
                    ),
                    _ => "invalid startup packet layout".to_owned(),
                };
                super::refuse(client, "08P01", &message).await?;
                return Err(e.into());
            }
        }
        client.write_all(b"N").await?;
        client.flush().await?;
    }
}

/// Why the client's answer to the password request was not a password.
#[derive(Debug, thiserror::Error)]
enum PasswordError {
    #[error("reading the password")]
    Io(#[from] std::io::Error),
    #[error("expected a password message, got message type {0:?}")]
    NotPassword(char),
    #[error("invalid password message length {0}")]
    Length(usize),
    #[error("password message is not a NUL-terminated UTF-8 string")]
    Malformed,
}

async fn read_password<C: AsyncRead + Unpin>(client: &mut C) -> Result<String, PasswordError> {
    let mut head = [0u8; 5];
    client.read_exact(&mut head).await?;
    if head[0] != b'p' {
        return Err(PasswordError::NotPassword(char::from(head[0])));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if !(5..=MAX_PASSWORD_MESSAGE).contains(&len) {
        return Err(PasswordError::Length(len));
    }
    let mut body = vec![0u8; len - 4];
    client.read_exact(&mut body).await?;
    match body.split_last() {
        Some((0, text)) if !text.contains(&0) => {
            String::from_utf8(text.to_vec()).map_err(|_| PasswordError::Malformed)
        }
        _ => Err(PasswordError::Malformed),
    }
}

#[cfg(test)]
pub(super) mod unit {
    use super::*;
    use bytes::{BufMut, BytesMut};

    /// A `PasswordMessage`.
    pub(in crate::db_front) fn password_message(password: &str) -> Bytes {
        let mut b = BytesMut::with_capacity(password.len() + 6);
        b.put_u8(b'p');
        b.put_u32(u32::try_from(password.len() + 5).unwrap_or(u32::MAX));
        b.extend_from_slice(password.as_bytes());
        b.put_u8(0);
        b.freeze()
    }

    #[test]
    fn label_prefers_address_then_sni_then_host() {
        let d = "db.test";
        assert_eq!(
            label(
                d,
                Some("address=a.db.test:5432"),
                Some("b.db.test"),
                Some("c.db.test")
            ),
            Some("a".into())
        );
        assert_eq!(
            label(d, Some("address=127.0.0.1:5432"), Some("b.db.test"), None),
            Some("b".into())
        );
        assert_eq!(
            label(d, None, None, Some("c-pooler.db.test:5432")),
            Some("c-pooler".into())
        );
        assert_eq!(label(d, Some("x=1"), None, Some("db.test")), None);
        assert_eq!(
            label(d, None, Some("other.example"), Some("[::1]:5432")),
            None
        );
        assert_eq!(
            label(d, Some("address=a%2Edb.test%3A1"), None, None),
            Some("a".into())
        );
    }

    #[test]
    fn strip_port_keeps_ipv6() {
        assert_eq!(strip_port("a.b:5432"), "a.b");
        assert_eq!(strip_port("a.b"), "a.b");
        assert_eq!(strip_port("[::1]:5432"), "[::1]");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("a:"), "a:");
    }

    #[tokio::test]
    async fn password_messages_are_bounded_and_checked() {
        let read = |bytes: Vec<u8>| async move { read_password(&mut &bytes[..]).await };
        assert_eq!(
            read(password_message("pw").to_vec()).await.expect("ok"),
            "pw"
        );
        assert!(matches!(
            read(b"Q\0\0\0\x05\0".to_vec()).await,
            Err(PasswordError::NotPassword('Q'))
        ));
        assert!(matches!(
            read(b"p\0\0\0\x04".to_vec()).await,
            Err(PasswordError::Length(4))
        ));
        assert!(matches!(
            read(b"p\x7f\0\0\0".to_vec()).await,
            Err(PasswordError::Length(_))
        ));
        assert!(matches!(
            read(b"p\0\0\0\x07abc".to_vec()).await,
            Err(PasswordError::Malformed)
        ));
        assert!(matches!(
            read(b"p\0\0\0\x07a\0\0".to_vec()).await,
            Err(PasswordError::Malformed)
        ));
        assert!(matches!(
            read(b"p\0\0\0\x09ab".to_vec()).await,
            Err(PasswordError::Io(_))
        ));
    }
}
