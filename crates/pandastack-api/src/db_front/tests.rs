//! The front end to end in process: a real TCP listener, the front's TLS, HTTP/1.1 and
//! WebSocket, and the PostgreSQL session, against fake backends (a scripted PostgreSQL on an
//! in-memory pipe). What a real database adds is in `tests/neon-ws` (the real driver).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use pandastack_host::{HostError, PortIo};
use pandastack_pgwire::front::Front;
use pandastack_pgwire::startup::{encode_cancel_request, Startup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::ws::unit::password_message;
use super::{Backends, OpenError, Opened};

const DOMAIN: &str = "db.test";
const PASSWORD: &str = "secret";
const WAIT: Duration = Duration::from_secs(10);

/// What the fake backends saw.
#[derive(Debug, PartialEq)]
enum Seen {
    /// A session's startup parameters, as the fake PostgreSQL received them.
    Startup(Vec<(String, String)>),
    /// A session's client end closed (the fake PostgreSQL read the end of its input).
    Eof,
    /// A cancel request's bytes, to this port.
    Cancel(u16, Vec<u8>),
}

struct Fake {
    seen: mpsc::UnboundedSender<Seen>,
    touched: AtomicUsize,
}

impl Backends for Fake {
    fn domain(&self) -> &str {
        DOMAIN
    }

    async fn open(&self, label: &str) -> Result<Opened, OpenError> {
        let port = match label {
            "known" => 5432,
            "known-pooler" => 6432,
            "creating" => return Err(OpenError::NotReady(label.into())),
            _ => return Err(OpenError::NotFound(label.into())),
        };
        let (near, far) = tokio::io::duplex(64 * 1024);
        tokio::spawn(fake_postgres(far, self.seen.clone()));
        Ok(Opened {
            sandbox: "sb-known".into(),
            port,
            stream: Box::new(near),
        })
    }

    async fn touch(&self, _sandbox: &str) {
        self.touched.fetch_add(1, Ordering::Relaxed);
    }

    async fn connect(&self, _sandbox: &str, port: u16) -> Result<Box<dyn PortIo>, HostError> {
        let (near, mut far) = tokio::io::duplex(1024);
        let seen = self.seen.clone();
        tokio::spawn(async move {
            // A cancel request is 16 bytes; PostgreSQL then closes the connection.
            let mut bytes = vec![0u8; 16];
            let _ = far.read_exact(&mut bytes).await;
            let _ = seen.send(Seen::Cancel(port, bytes));
        });
        Ok(Box::new(near))
    }
}

fn message(tag: u8, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(tag);
    b.put_u32(u32::try_from(body.len() + 4).expect("small"));
    b.extend_from_slice(body);
    b.freeze()
}

/// A PostgreSQL that asks for a cleartext password, takes `secret`, sends its parameters, key
/// (pid 42) and `ReadyForQuery`, then echoes what it gets until `bye` (it closes) or the end.
async fn fake_postgres(mut s: DuplexStream, seen: mpsc::UnboundedSender<Seen>) {
    let mut word = [0u8; 4];
    if s.read_exact(&mut word).await.is_err() {
        return;
    }
    let mut body = vec![0u8; u32::from_be_bytes(word) as usize - 4];
    if s.read_exact(&mut body).await.is_err() {
        return;
    }
    let mut framed = word.to_vec();
    framed.extend_from_slice(&body);
    let Ok(pandastack_pgwire::startup::Packet::Startup(startup)) =
        pandastack_pgwire::startup::Packet::parse_framed(&framed)
    else {
        return;
    };
    let _ = seen.send(Seen::Startup(startup.params));
    let _ = s.write_all(&message(b'R', &3u32.to_be_bytes())).await;
    let mut head = [0u8; 5];
    if s.read_exact(&mut head).await.is_err() {
        return;
    }
    let mut pw = vec![0u8; u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4];
    if s.read_exact(&mut pw).await.is_err() {
        return;
    }
    if pw != format!("{PASSWORD}\0").as_bytes() {
        let e = pandastack_pgwire::front::encode_error(
            pandastack_pgwire::front::Severity::Fatal,
            "28P01",
            "password authentication failed for user \"u\"",
            None,
        );
        let _ = s.write_all(&e).await;
        return;
    }
    let mut hello = BytesMut::new();
    hello.extend_from_slice(&message(b'R', &0u32.to_be_bytes()));
    hello.extend_from_slice(&message(b'S', b"server_version\x0017\0"));
    hello.extend_from_slice(&message(b'K', &[0, 0, 0, 42, 0, 0, 0, 7]));
    hello.extend_from_slice(&message(b'Z', b"I"));
    // One write: the front's login must hand on what it read past AuthenticationOk.
    let _ = s.write_all(&hello).await;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = seen.send(Seen::Eof);
                return;
            }
            Ok(n) if &buf[..n] == b"bye" => return,
            Ok(n) => {
                if s.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

struct Server {
    addr: std::net::SocketAddr,
    roots: Arc<rustls::RootCertStore>,
    seen: mpsc::UnboundedReceiver<Seen>,
    fake: Arc<Fake>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn server() -> Server {
    let names = [
        format!("*.{DOMAIN}"),
        DOMAIN.to_owned(),
        "127.0.0.1".to_owned(),
    ];
    let (front, cert, _) = Front::self_signed(&names).expect("front");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert"))
        .expect("root");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (tx, seen) = mpsc::unbounded_channel();
    let fake = Arc::new(Fake {
        seen: tx,
        touched: AtomicUsize::new(0),
    });
    let task = tokio::spawn(super::serve(Arc::clone(&fake), listener, Arc::new(front)));
    Server {
        addr,
        roots: Arc::new(roots),
        seen,
        fake,
        task,
    }
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

impl Server {
    async fn tls(&self, server_name: &str, alpn: &[&[u8]]) -> Tls {
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(Arc::clone(&self.roots))
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let tcp = TcpStream::connect(self.addr).await.expect("tcp");
        let name = ServerName::try_from(server_name.to_owned()).expect("name");
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("tls handshake")
    }

    /// A WebSocket to `wss://<server_name>/<path>`.
    async fn ws(&self, server_name: &str, path: &str) -> WebSocketStream<Tls> {
        let tls = self.tls(server_name, &[]).await;
        let (ws, _) = tokio_tungstenite::client_async(format!("wss://{server_name}{path}"), tls)
            .await
            .expect("websocket handshake");
        ws
    }

    async fn next_seen(&mut self) -> Seen {
        tokio::time::timeout(WAIT, self.seen.recv())
            .await
            .expect("the fake saw nothing")
            .expect("channel")
    }
}

fn startup(params: &[(&str, &str)]) -> Bytes {
    Startup::new(
        params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
    .encode()
}

/// The startup and the password in one frame, as the driver pipelines them.
fn hello(params: &[(&str, &str)], password: &str) -> Message {
    let mut b = BytesMut::from(&startup(params)[..]);
    b.extend_from_slice(&password_message(password));
    Message::Binary(b.freeze())
}

/// Reads PostgreSQL messages from binary frames until `until` (a tag) has come, returning
/// `(tag, body)` of each.
async fn messages(ws: &mut WebSocketStream<Tls>, until: u8) -> Vec<(u8, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    loop {
        while buf.len() >= 5 {
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if buf.len() < len + 1 {
                break;
            }
            let m: Vec<u8> = buf.drain(..len + 1).collect();
            let tag = m[0];
            out.push((tag, m[5..].to_vec()));
            if tag == until {
                return out;
            }
        }
        match tokio::time::timeout(WAIT, ws.next()).await.expect("frame") {
            Some(Ok(Message::Binary(b))) => buf.extend_from_slice(&b),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => panic!("expected binary frames, got {other:?} after {out:?}"),
        }
    }
}

/// The next frame that is not a ping or pong.
async fn next_frame(ws: &mut WebSocketStream<Tls>) -> Option<Message> {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("frame") {
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            Some(Ok(m)) => return Some(m),
            Some(Err(_)) | None => return None,
        }
    }
}

fn error_text(messages: &[(u8, Vec<u8>)]) -> String {
    let (tag, body) = messages.last().expect("a message");
    assert_eq!(*tag, b'E', "{messages:?}");
    String::from_utf8_lossy(body).into_owned()
}

/// Logs in as the driver does and checks the front's answer: its password request, then
/// PostgreSQL's messages from AuthenticationOk to ReadyForQuery.
async fn login(ws: &mut WebSocketStream<Tls>, params: &[(&str, &str)]) {
    ws.send(hello(params, PASSWORD)).await.expect("send");
    let got = messages(ws, b'Z').await;
    let tags: Vec<u8> = got.iter().map(|(t, _)| *t).collect();
    assert_eq!(tags, b"RRSKZ".to_vec(), "{got:?}");
    assert_eq!(got[0].1, 3u32.to_be_bytes(), "cleartext password request");
    assert_eq!(got[1].1, 0u32.to_be_bytes(), "AuthenticationOk");
    assert_eq!(got[3].1, [0, 0, 0, 42, 0, 0, 0, 7]);
}

#[tokio::test]
async fn bytes_pass_both_ways_and_the_clients_close_reaches_postgres() {
    let mut s = server().await;
    let mut ws = s.ws("known.db.test", "/v2").await;
    login(&mut ws, &[("user", "u"), ("database", "d")]).await;
    assert_eq!(
        s.next_seen().await,
        Seen::Startup(vec![
            ("user".into(), "u".into()),
            ("database".into(), "d".into())
        ])
    );
    for chunk in [&b"hello"[..], &[0u8; 40_000][..]] {
        ws.send(Message::Binary(Bytes::copy_from_slice(chunk)))
            .await
            .expect("send");
        let mut back = Vec::new();
        while back.len() < chunk.len() {
            match next_frame(&mut ws).await {
                Some(Message::Binary(b)) => back.extend_from_slice(&b),
                other => panic!("expected the echo, got {other:?}"),
            }
        }
        assert_eq!(back, chunk);
    }
    ws.close(None).await.expect("close");
    assert_eq!(s.next_seen().await, Seen::Eof);
    // The front answers the close and ends the socket.
    assert!(matches!(
        next_frame(&mut ws).await,
        Some(Message::Close(_)) | None
    ));
    assert!(s.fake.touched.load(Ordering::Relaxed) >= 1, "activity");
}

#[tokio::test]
async fn postgres_closing_closes_the_socket() {
    let mut s = server().await;
    let mut ws = s.ws("known.db.test", "/v2").await;
    login(&mut ws, &[("user", "u")]).await;
    s.next_seen().await;
    ws.send(Message::Binary(Bytes::from_static(b"bye")))
        .await
        .expect("send");
    match next_frame(&mut ws).await {
        Some(Message::Close(Some(f))) => assert_eq!(u16::from(f.code), 1000),
        other => panic!("expected a close, got {other:?}"),
    }
}

#[tokio::test]
async fn wrong_database_wrong_host_and_wrong_password_are_refused_clearly() {
    let mut s = server().await;

    let mut ws = s.ws("nope.db.test", "/v2").await;
    ws.send(hello(&[("user", "u")], PASSWORD))
        .await
        .expect("send");
    let e = error_text(&messages(&mut ws, b'E').await);
    assert!(
        e.contains("3D000") && e.contains("database nope does not exist"),
        "{e}"
    );

    let mut ws = s.ws("creating.db.test", "/v2").await;
    ws.send(hello(&[("user", "u")], PASSWORD))
        .await
        .expect("send");
    let e = error_text(&messages(&mut ws, b'E').await);
    assert!(e.contains("57P03"), "{e}");

    // No database in the URL, the TLS name or the startup.
    let mut ws = s.ws("127.0.0.1", "/v2?address=127.0.0.1:5432").await;
    ws.send(hello(&[("user", "u")], PASSWORD))
        .await
        .expect("send");
    let e = error_text(&messages(&mut ws, b'E').await);
    assert!(e.contains("08004") && e.contains("which database?"), "{e}");

    // PostgreSQL's own refusal of the password reaches the client.
    let mut ws = s.ws("known.db.test", "/v2").await;
    ws.send(hello(&[("user", "u")], "wrong"))
        .await
        .expect("send");
    let got = messages(&mut ws, b'E').await;
    assert_eq!(got[0], (b'R', 3u32.to_be_bytes().to_vec()));
    let e = error_text(&got);
    assert!(
        e.contains("28P01") && e.contains("password authentication failed"),
        "{e}"
    );
    s.next_seen().await;
}

#[tokio::test]
async fn the_address_query_and_endpoint_option_name_the_database() {
    let mut s = server().await;
    let mut ws = s
        .ws("127.0.0.1", "/v2?address=known-pooler.db.test:5432")
        .await;
    login(&mut ws, &[("user", "u")]).await;
    s.next_seen().await;

    let mut ws = s.ws("127.0.0.1", "/v2").await;
    login(&mut ws, &[("user", "u"), ("options", "endpoint=known")]).await;
    // The endpoint option is the front's, not PostgreSQL's.
    assert_eq!(
        s.next_seen().await,
        Seen::Startup(vec![("user".into(), "u".into())])
    );
}

#[tokio::test]
async fn an_encryption_request_inside_the_socket_is_declined() {
    let s = server().await;
    let mut ws = s.ws("known.db.test", "/v2").await;
    ws.send(Message::Binary(Bytes::from_static(&[
        0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f,
    ])))
    .await
    .expect("send");
    assert_eq!(
        next_frame(&mut ws).await,
        Some(Message::Binary(Bytes::from_static(b"N")))
    );
    login(&mut ws, &[("user", "u")]).await;
}

#[tokio::test]
async fn a_cancel_request_over_a_websocket_reaches_the_backend() {
    let mut s = server().await;
    let mut ws = s.ws("known.db.test", "/v2").await;
    login(&mut ws, &[("user", "u")]).await;
    s.next_seen().await;
    let mut cancel = s.ws("known.db.test", "/v2").await;
    let request = encode_cancel_request(42, &[0, 0, 0, 7]);
    cancel
        .send(Message::Binary(request.clone()))
        .await
        .expect("send");
    assert_eq!(s.next_seen().await, Seen::Cancel(5432, request.to_vec()));
}

#[tokio::test]
async fn text_frames_and_bad_startups_end_the_socket() {
    let s = server().await;
    let mut ws = s.ws("known.db.test", "/v2").await;
    ws.send(Message::Text("select 1".into()))
        .await
        .expect("send");
    match next_frame(&mut ws).await {
        Some(Message::Close(Some(f))) => assert_eq!(u16::from(f.code), 1003),
        other => panic!("expected a close, got {other:?}"),
    }

    let mut ws = s.ws("known.db.test", "/v2").await;
    ws.send(Message::Binary(Bytes::from_static(&[0x7f, 0, 0, 0])))
        .await
        .expect("send");
    let e = error_text(&messages(&mut ws, b'E').await);
    assert!(e.contains("08P01"), "{e}");

    // A message over the limit ends the socket.
    let mut ws = s.ws("known.db.test", "/v2").await;
    let big = vec![0u8; super::ws::MAX_MESSAGE + 1];
    let _ = ws.send(Message::Binary(big.into())).await;
    assert!(!matches!(
        next_frame(&mut ws).await,
        Some(Message::Binary(_))
    ));
}

#[tokio::test]
async fn other_http_is_answered_not_tunnelled() {
    let s = server().await;
    for (request, status) in [
        ("GET /v2 HTTP/1.1\r\nHost: known.db.test\r\n\r\n", "426"),
        (
            "GET /v1/health HTTP/1.1\r\nHost: known.db.test\r\n\r\n",
            "404",
        ),
    ] {
        let mut tls = s.tls("known.db.test", &[b"http/1.1"]).await;
        tls.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        tokio::time::timeout(WAIT, tls.read_to_end(&mut answer))
            .await
            .expect("answered and closed")
            .ok();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{answer}"
        );
    }
    // Direct TLS that is neither PostgreSQL (ALPN) nor an HTTP request is refused as before.
    let mut tls = s.tls("known.db.test", &[]).await;
    tls.write_all(&startup(&[("user", "u")]))
        .await
        .expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut answer)).await;
    assert_eq!(answer.first(), Some(&b'E'), "{answer:?}");
}
