//! The server side of the start of a client's connection.
//!
//! ```text
//! first 4 bytes ── 0x16.. ─────────────────────────────► direct TLS (ALPN `postgresql` required)
//!       │                                                       │
//!       └─ packet ─┬─ SSLRequest ──── 'S' ── TLS handshake ─────┤
//!                  ├─ GSSENCRequest ─ 'N' ── next packet (once) │
//!                  ├─ CancelRequest ─────────► Incoming::Cancel │
//!                  └─ StartupMessage ─ FATAL 28000 "requires TLS"
//!                                                               ▼
//!                                         packet inside TLS ─┬─ StartupMessage ─► Incoming::Startup
//!                                                            └─ CancelRequest ──► Incoming::Cancel
//! ```
//!
//! Direct TLS whose ALPN is not `postgresql` — `http/1.1`, or none, as Node's `ws` sends —
//! and whose first bytes are `GET ` is handed back as [`Incoming::Http`]: a WebSocket client
//! (`@neondatabase/serverless` in its `Pool`/`Client` mode) on the same port, certificate and
//! server names. Anything else without ALPN `postgresql` is refused as PostgreSQL refuses it,
//! so a TLS connection meant for another protocol is still never taken for a PostgreSQL one.
//!
//! Nothing is read past the end of a packet before TLS starts, so plaintext bytes a
//! man-in-the-middle pipelines behind an `SSLRequest` reach the TLS parser (and fail the
//! handshake), never the session (CVE-2021-23214).
//!
//! [`Front::accept`] has no time limit of its own: the caller wraps it in one (a client that
//! sends nothing must not hold a task forever).

mod prefixed;
mod reply;
mod tls;

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;

use crate::startup::{Packet, Startup, StartupError};

pub use prefixed::Prefixed;
pub use reply::{encode_error, write_error, Severity};
pub use tls::{ALPN_HTTP1, ALPN_POSTGRESQL};

/// The first byte of a TLS record carrying a handshake (a ClientHello, for direct TLS). No
/// startup packet starts with it: its length would be over 369 MB.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What the front told a plaintext client.
pub const TLS_REQUIRED_MESSAGE: &str = "PandaStack requires TLS: connect with sslmode=require";

/// Why a connection could not be accepted (or a front not built).
#[derive(Debug, thiserror::Error)]
pub enum FrontError {
    /// Reading from or writing to the client failed (including an early end of stream).
    #[error("client connection i/o")]
    Io(#[from] io::Error),
    /// The TLS handshake failed.
    #[error("tls handshake")]
    Handshake(#[source] io::Error),
    /// A startup-phase packet was malformed.
    #[error("malformed startup packet")]
    Startup(#[from] StartupError),
    /// A packet that is valid but not at this point (a second `SSLRequest`, a
    /// `GSSENCRequest` inside TLS, …).
    #[error("unexpected {0} during connection start")]
    UnexpectedPacket(&'static str),
    /// The client sent a plaintext `StartupMessage`; it was told that TLS is required.
    #[error("client did not use tls")]
    TlsRequired,
    /// A direct TLS connection that did not offer ALPN `postgresql`; it was refused.
    #[error("direct tls connection without alpn postgresql")]
    DirectTlsWithoutAlpn,
    /// The certificate chain or key is not usable PEM.
    #[error("certificate or key pem")]
    Pem(#[source] rustls::pki_types::pem::Error),
    /// The certificate PEM holds no certificate.
    #[error("no certificate in the certificate pem")]
    NoCertificate,
    /// rustls refused the configuration (e.g. a key that does not match the certificate).
    #[error("tls configuration")]
    Config(#[source] rustls::Error),
    /// The self-signed certificate could not be generated.
    #[error("self-signed certificate")]
    SelfSigned(#[from] rcgen::Error),
}

/// What a client connection turned out to be.
#[derive(Debug)]
pub enum Incoming<S> {
    /// A client that completed TLS and sent its `StartupMessage`.
    Startup(Box<Accepted<S>>),
    /// A `CancelRequest`: to be matched to the backend by the caller, then the connection is
    /// simply closed (PostgreSQL never answers one). Sent in plaintext by most clients, in
    /// which case `sni` is `None`.
    Cancel {
        /// Backend process id.
        pid: i32,
        /// Secret key: 4 bytes in protocol 3.0, up to 256 in 3.2.
        secret: Bytes,
        /// The SNI host name, if the request came inside TLS.
        sni: Option<String>,
    },
    /// An HTTP/1.1 request over direct TLS (see the module doc): the caller serves it (a
    /// WebSocket upgrade) or drops it.
    Http(Box<HttpConn<S>>),
}

/// An HTTP/1.1 client on the front's TLS port.
#[derive(Debug)]
pub struct HttpConn<S> {
    /// The decrypted stream, from the first byte of the request on.
    pub stream: Prefixed<TlsStream<S>>,
    /// The SNI host name the client sent, if any.
    pub sni: Option<String>,
}

/// A client past TLS and its `StartupMessage`, ready to be forwarded.
#[derive(Debug)]
pub struct Accepted<S> {
    /// The decrypted stream: the next bytes are the client's answer to authentication.
    pub stream: TlsStream<S>,
    /// The SNI host name the client sent, if any (libpq sends none for an IP address).
    pub sni: Option<String>,
    /// `true` for direct TLS (PostgreSQL 17 `sslnegotiation=direct`), `false` after an
    /// `SSLRequest`.
    pub direct: bool,
    /// The client's `StartupMessage`.
    pub startup: Startup,
}

/// The TLS front: accepts client connections and hands back the decrypted stream with the
/// startup message, SNI and endpoint needed to route it.
#[derive(Debug, Clone)]
pub struct Front {
    config: Arc<ServerConfig>,
}

impl Front {
    /// A front serving this certificate chain (PEM, leaf first) with this private key (PEM).
    pub fn new(cert_chain_pem: &str, key_pem: &str) -> Result<Front, FrontError> {
        Ok(Front {
            config: Arc::new(tls::server_config(cert_chain_pem, key_pem)?),
        })
    }

    /// A front over an existing rustls configuration (e.g. one with a certificate resolver);
    /// its ALPN list is replaced by `postgresql`.
    pub fn from_config(config: ServerConfig) -> Front {
        Front {
            config: Arc::new(tls::with_alpn(config)),
        }
    }

    /// A front with a new self-signed certificate for these DNS names (`*.domain` works);
    /// also returns the certificate and key as PEM, so they can be stored and trusted.
    pub fn self_signed(names: &[String]) -> Result<(Front, String, String), FrontError> {
        let (cert, key) = tls::self_signed(names)?;
        Ok((Front::new(&cert, &key)?, cert, key))
    }

    /// The TLS configuration in use.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }

    /// Reads the start of a client connection, negotiates TLS and returns the startup
    /// message (or a cancel request). A plaintext `StartupMessage` is answered with
    /// `FATAL 28000` ([`TLS_REQUIRED_MESSAGE`]) and [`FrontError::TlsRequired`]; GSSAPI
    /// encryption is declined with `N` once; protocol versions 3.x are accepted with their
    /// minor version recorded, others answered with `FATAL 0A000`.
    pub async fn accept<S>(&self, mut stream: S) -> Result<Incoming<S>, FrontError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let mut gss_declined = false;
        loop {
            let mut word = [0u8; 4];
            stream.read_exact(&mut word).await?;
            if word[0] == TLS_HANDSHAKE_RECORD {
                return self.after_tls(stream, &word, true).await;
            }
            match read_packet(&mut stream, word).await {
                Ok(Packet::SslRequest) => {
                    stream.write_all(b"S").await?;
                    stream.flush().await?;
                    return self.after_tls(stream, &[], false).await;
                }
                Ok(Packet::GssEncRequest) if !gss_declined => {
                    gss_declined = true;
                    stream.write_all(b"N").await?;
                    stream.flush().await?;
                }
                Ok(Packet::GssEncRequest) => {
                    return Err(FrontError::UnexpectedPacket("second GSSENCRequest"))
                }
                Ok(Packet::Cancel { pid, secret }) => {
                    return Ok(Incoming::Cancel {
                        pid,
                        secret,
                        sni: None,
                    })
                }
                Ok(Packet::Startup(_)) => {
                    refuse(&mut stream, "28000", TLS_REQUIRED_MESSAGE).await;
                    return Err(FrontError::TlsRequired);
                }
                Err(error) => return Err(refuse_startup(&mut stream, error).await),
            }
        }
    }

    /// TLS handshake (`prefix` is what was already read of the ClientHello), then the packet
    /// inside TLS.
    async fn after_tls<S>(
        &self,
        stream: S,
        prefix: &[u8],
        direct: bool,
    ) -> Result<Incoming<S>, FrontError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let mut acceptor = rustls::server::Acceptor::default();
        if !prefix.is_empty() {
            acceptor
                .read_tls(&mut &prefix[..])
                .map_err(FrontError::Handshake)?;
        }
        let start = LazyConfigAcceptor::new(acceptor, stream)
            .await
            .map_err(FrontError::Handshake)?;
        let hello = start.client_hello();
        let sni = hello.server_name().map(str::to_owned);
        let mut tls = start
            .into_stream(self.config.clone())
            .await
            .map_err(FrontError::Handshake)?;
        let negotiated = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        if direct && negotiated.as_deref() != Some(ALPN_POSTGRESQL) {
            let mut word = [0u8; 4];
            tls.read_exact(&mut word).await?;
            if &word == b"GET " && negotiated.as_deref().is_none_or(|p| p == ALPN_HTTP1) {
                return Ok(Incoming::Http(Box::new(HttpConn {
                    stream: Prefixed::new(word.to_vec(), tls),
                    sni,
                })));
            }
            // PostgreSQL's rule: direct TLS must be negotiated with ALPN, so that a TLS
            // connection meant for another protocol is never taken for a PostgreSQL one.
            refuse(
                &mut tls,
                "08P01",
                "received direct SSL connection request without ALPN protocol negotiation extension",
            )
            .await;
            return Err(FrontError::DirectTlsWithoutAlpn);
        }
        let mut word = [0u8; 4];
        tls.read_exact(&mut word).await?;
        match read_packet(&mut tls, word).await {
            Ok(Packet::Startup(startup)) => Ok(Incoming::Startup(Box::new(Accepted {
                stream: tls,
                sni,
                direct,
                startup,
            }))),
            Ok(Packet::Cancel { pid, secret }) => Ok(Incoming::Cancel { pid, secret, sni }),
            Ok(Packet::SslRequest) => Err(FrontError::UnexpectedPacket("SSLRequest inside TLS")),
            Ok(Packet::GssEncRequest) => {
                Err(FrontError::UnexpectedPacket("GSSENCRequest inside TLS"))
            }
            Err(error) => Err(refuse_startup(&mut tls, error).await),
        }
    }
}

/// Reads the body of a startup-phase packet whose length word is `word`.
async fn read_packet<S: AsyncRead + Unpin>(
    stream: &mut S,
    word: [u8; 4],
) -> Result<Packet, FrontError> {
    let len = Packet::body_len(word)?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    Ok(Packet::parse_body(&body)?)
}

/// Tells the client why its startup packet was refused, as PostgreSQL would, and returns the
/// error to report.
async fn refuse_startup<S: AsyncWrite + Unpin>(stream: &mut S, error: FrontError) -> FrontError {
    match &error {
        FrontError::Startup(StartupError::UnsupportedProtocol { major, minor }) => {
            let message = format!(
                "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.2"
            );
            refuse(stream, "0A000", &message).await;
        }
        FrontError::Startup(_) => refuse(stream, "08P01", "invalid startup packet layout").await,
        _ => {}
    }
    error
}

/// A best-effort `FATAL`: the connection is being dropped either way.
async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S, sqlstate: &str, message: &str) {
    if let Err(error) = write_error(stream, Severity::Fatal, sqlstate, message, None).await {
        tracing::debug!(
            error = &error as &dyn std::error::Error,
            "could not send the refusal to the client"
        );
    }
}

/// The one label in front of `.domain` in an SNI host name, compared without case:
/// `host_label("abc.db.localhost", "db.localhost") == Some("abc")`. `None` for the bare domain,
/// another domain, or more than one label.
pub fn host_label<'a>(sni: &'a str, domain: &str) -> Option<&'a str> {
    let sni = sni.strip_suffix('.').unwrap_or(sni);
    let domain = domain.trim_matches('.');
    let split = sni.len().checked_sub(domain.len() + 1)?;
    let (label, suffix) = (sni.get(..split)?, sni.get(split..)?);
    let suffix = suffix.strip_prefix('.')?;
    (!domain.is_empty()
        && suffix.eq_ignore_ascii_case(domain)
        && !label.is_empty()
        && !label.contains('.'))
    .then_some(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_label_takes_one_label() {
        assert_eq!(host_label("abc.db.localhost", "db.localhost"), Some("abc"));
        assert_eq!(host_label("ABC.DB.Localhost", "db.localhost"), Some("ABC"));
        assert_eq!(host_label("abc.db.localhost.", "db.localhost"), Some("abc"));
        assert_eq!(host_label("abc.db.localhost", ".db.localhost"), Some("abc"));
        assert_eq!(host_label("db.localhost", "db.localhost"), None);
        assert_eq!(host_label(".db.localhost", "db.localhost"), None);
        assert_eq!(host_label("a.b.db.localhost", "db.localhost"), None);
        assert_eq!(host_label("abcdb.localhost", "db.localhost"), None);
        assert_eq!(host_label("abc.other.localhost", "db.localhost"), None);
        assert_eq!(host_label("abc", ""), None);
        assert_eq!(host_label("é.db.localhost", "db.localhost"), Some("é"));
        assert_eq!(host_label("x", "db.localhost"), None);
    }

    #[tokio::test]
    async fn plaintext_startup_is_told_to_use_tls() {
        let (front, _, _) = Front::self_signed(&["localhost".to_owned()]).expect("front");
        let (mut client, server) = tokio::io::duplex(4096);
        let startup = Startup::new(vec![("user".into(), "u".into())]).encode();
        client.write_all(&startup).await.expect("write");
        let result = front.accept(server).await;
        assert!(matches!(result, Err(FrontError::TlsRequired)), "{result:?}");
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.expect("read");
        assert_eq!(answer.first(), Some(&b'E'));
        let text = String::from_utf8_lossy(&answer);
        assert!(
            text.contains("28000") && text.contains(TLS_REQUIRED_MESSAGE),
            "{text}"
        );
    }

    #[tokio::test]
    async fn malformed_and_oversized_packets_are_errors() {
        let (front, _, _) = Front::self_signed(&["localhost".to_owned()]).expect("front");
        for packet in [
            vec![0, 0, 0, 2],
            vec![0, 0, 0x27, 0x11],
            vec![0x7f, 0xff, 0xff, 0xff],
            b"\0\0\0\x0d\0\x03\0\0user\0".to_vec(),
            b"\0\0\0\x0c\0\x02\0\0\0\0\0\0".to_vec(),
            vec![0, 0, 0, 9],
        ] {
            let (mut client, server) = tokio::io::duplex(4096);
            client.write_all(&packet).await.expect("write");
            client.shutdown().await.expect("shutdown");
            let result = front.accept(server).await;
            assert!(
                matches!(result, Err(FrontError::Startup(_) | FrontError::Io(_))),
                "{packet:?}: {result:?}"
            );
        }
    }

    #[tokio::test]
    async fn plaintext_cancel_is_returned() {
        let (front, _, _) = Front::self_signed(&["localhost".to_owned()]).expect("front");
        let (mut client, server) = tokio::io::duplex(4096);
        client
            .write_all(&crate::startup::encode_cancel_request(77, &[0, 0, 0, 5]))
            .await
            .expect("write");
        match front.accept(server).await {
            Ok(Incoming::Cancel { pid, secret, sni }) => {
                assert_eq!((pid, &secret[..], sni), (77, &[0u8, 0, 0, 5][..], None));
            }
            other => panic!("expected a cancel, got {other:?}"),
        }
    }
}
