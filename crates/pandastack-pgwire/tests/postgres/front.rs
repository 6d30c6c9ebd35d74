//! The front in a tiny proxy in front of a real PostgreSQL, driven by psql 15 and by a
//! rustls client for direct TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pandastack_pgwire::startup::encode_cancel_request;
use pandastack_pgwire::{host_label, Client, Front, FrontError, Incoming, Limits};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

use crate::fixture::{Cluster, PASSWORD};

const DOMAIN: &str = "db.localhost";

/// What the proxy saw of one connection.
#[derive(Debug)]
enum Seen {
    Startup {
        sni: Option<String>,
        direct: bool,
        endpoint: Option<String>,
    },
    Cancel {
        pid: i32,
        secret: Vec<u8>,
        sni: Option<String>,
    },
    Refused(FrontError),
}

/// A proxy like the host's: `Front::accept`, connect to the database, forward the startup
/// message without the endpoint option, then copy both ways.
struct Proxy {
    addr: SocketAddr,
    seen: mpsc::UnboundedReceiver<Seen>,
    cert_der: Vec<u8>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let names = vec!["localhost".to_owned(), format!("*.{DOMAIN}")];
        let (front, cert_pem, _key) = Front::self_signed(&names).expect("front");
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
            .expect("cert pem")
            .to_vec();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, seen) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (front, tx) = (front.clone(), tx.clone());
                tokio::spawn(async move {
                    let accepted =
                        tokio::time::timeout(Duration::from_secs(10), front.accept(socket))
                            .await
                            .expect("accept timed out");
                    match accepted {
                        Ok(Incoming::Startup(accepted)) => {
                            let mut accepted = *accepted;
                            let _ = tx.send(Seen::Startup {
                                sni: accepted.sni.clone(),
                                direct: accepted.direct,
                                endpoint: accepted.startup.endpoint(),
                            });
                            let mut db = TcpStream::connect(upstream).await.expect("upstream");
                            db.write_all(&accepted.startup.encode_for_upstream())
                                .await
                                .expect("forward startup");
                            let _ =
                                tokio::io::copy_bidirectional(&mut accepted.stream, &mut db).await;
                        }
                        Ok(Incoming::Cancel { pid, secret, sni }) => {
                            let _ = tx.send(Seen::Cancel {
                                pid,
                                secret: secret.to_vec(),
                                sni,
                            });
                        }
                        Ok(Incoming::Http(_)) => {
                            let _ = tx.send(Seen::Refused(FrontError::UnexpectedPacket("http")));
                        }
                        Err(error) => {
                            let _ = tx.send(Seen::Refused(error));
                        }
                    }
                });
            }
        });
        Proxy {
            addr,
            seen,
            cert_der,
            task,
        }
    }

    async fn next(&mut self) -> Seen {
        tokio::time::timeout(Duration::from_secs(10), self.seen.recv())
            .await
            .expect("proxy saw nothing")
            .expect("proxy gone")
    }
}

/// Runs psql 15 with this conninfo; returns (success, stdout, stderr).
async fn psql(pg: &Cluster, conninfo: &str, sql: &str) -> (bool, String, String) {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(pg.bin("psql"))
            .args(["-X", "-A", "-t", "-c", sql, conninfo])
            .env("PGPASSWORD", PASSWORD)
            .env("PGCONNECT_TIMEOUT", "10")
            // No ~/.postgresql/root.crt: sslmode=require must not turn into verify-ca.
            .env("HOME", pg.scratch())
            .env_remove("PGSSLMODE")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("psql timed out")
    .expect("psql runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

#[tokio::test]
async fn psql_through_the_front() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut proxy = Proxy::start(pg.addr()).await;
    let port = proxy.addr.port();

    let conninfo =
        format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require");
    let (ok, out, err) = psql(&pg, &conninfo, "select 1").await;
    assert!(ok, "psql failed: {err}");
    assert_eq!(out, "1");
    match proxy.next().await {
        Seen::Startup {
            sni: None,
            direct: false,
            endpoint: None,
        } => {}
        other => panic!("unexpected {other:?}"),
    }

    // The session really is TLS end to end on the client side: ask the proxy's peer.
    let (ok, out, err) = psql(&pg, &conninfo, "select current_user").await;
    assert!(ok, "psql failed: {err}");
    assert_eq!(out, "postgres");
    proxy.next().await;

    // SNI from a host name (hostaddr keeps it on loopback), as libpq sends it.
    let conninfo = format!(
        "host=abc.{DOMAIN} hostaddr=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require"
    );
    let (ok, out, err) = psql(&pg, &conninfo, "select 1").await;
    assert!(ok, "psql failed: {err}");
    assert_eq!(out, "1");
    match proxy.next().await {
        Seen::Startup { sni: Some(sni), .. } => {
            assert_eq!(sni, format!("abc.{DOMAIN}"));
            assert_eq!(host_label(&sni, DOMAIN), Some("abc"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn psql_endpoint_option_is_seen_and_stripped() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut proxy = Proxy::start(pg.addr()).await;
    let port = proxy.addr.port();

    let conninfo = format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require options=endpoint=xyz"
    );
    let (ok, out, err) = psql(&pg, &conninfo, "select 1").await;
    assert!(ok, "psql failed (endpoint option not stripped?): {err}");
    assert_eq!(out, "1");
    match proxy.next().await {
        Seen::Startup { endpoint, .. } => assert_eq!(endpoint.as_deref(), Some("xyz")),
        other => panic!("unexpected {other:?}"),
    }

    // Other options survive the stripping.
    let conninfo = format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=require \
         options='-c search_path=pandas endpoint=xyz -c work_mem=7MB'"
    );
    let (ok, out, err) = psql(
        &pg,
        &conninfo,
        "select current_setting('search_path') || ' ' || current_setting('work_mem')",
    )
    .await;
    assert!(ok, "psql failed: {err}");
    assert_eq!(out, "pandas 7MB");
    match proxy.next().await {
        Seen::Startup { endpoint, .. } => assert_eq!(endpoint.as_deref(), Some("xyz")),
        other => panic!("unexpected {other:?}"),
    }

    // Without the proxy the option is an error: the check above is not vacuous.
    let direct = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable options=endpoint=xyz",
        pg.port
    );
    let (ok, _, err) = psql(&pg, &direct, "select 1").await;
    assert!(!ok && err.contains("endpoint"), "{err}");
}

#[tokio::test]
async fn plaintext_psql_is_told_to_use_tls() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut proxy = Proxy::start(pg.addr()).await;
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        proxy.addr.port()
    );
    let (ok, out, err) = psql(&pg, &conninfo, "select 1").await;
    assert!(!ok, "plaintext psql succeeded: {out}");
    assert!(
        err.contains("PandaStack requires TLS: connect with sslmode=require"),
        "{err}"
    );
    assert!(matches!(
        proxy.next().await,
        Seen::Refused(FrontError::TlsRequired)
    ));
}

/// Accepts any server certificate (the test checks it is the front's own afterwards).
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn tls_connector(alpn: bool) -> TlsConnector {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
        .with_no_client_auth();
    if alpn {
        config.alpn_protocols = vec![b"postgresql".to_vec()];
    }
    TlsConnector::from(Arc::new(config))
}

fn startup_message() -> Vec<u8> {
    pandastack_pgwire::Startup::new(vec![
        ("user".into(), "postgres".into()),
        ("database".into(), "postgres".into()),
    ])
    .encode()
    .to_vec()
}

#[tokio::test]
async fn direct_tls_needs_alpn() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut proxy = Proxy::start(pg.addr()).await;
    let sni = ServerName::try_from(format!("abc.{DOMAIN}")).expect("name");

    // Direct TLS with ALPN: the server's first answer to the StartupMessage is
    // AuthenticationSASL offering SCRAM-SHA-256.
    let tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    let mut tls = tls_connector(true)
        .connect(sni.clone(), tcp)
        .await
        .expect("handshake");
    let (_, session) = tls.get_ref();
    assert_eq!(session.alpn_protocol(), Some(&b"postgresql"[..]));
    let presented = session.peer_certificates().expect("certificate")[0].to_vec();
    assert_eq!(presented, proxy.cert_der);
    tls.write_all(&startup_message()).await.expect("startup");
    let mut head = [0u8; 9];
    tls.read_exact(&mut head).await.expect("answer");
    assert_eq!(head[0], b'R', "{head:?}");
    assert_eq!(u32::from_be_bytes([head[5], head[6], head[7], head[8]]), 10);
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut mechanisms = vec![0u8; len - 8];
    tls.read_exact(&mut mechanisms).await.expect("mechanisms");
    assert!(String::from_utf8_lossy(&mechanisms).contains("SCRAM-SHA-256"));
    match proxy.next().await {
        Seen::Startup { sni, direct, .. } => {
            assert_eq!(sni.as_deref(), Some("abc.db.localhost"));
            assert!(direct);
        }
        other => panic!("unexpected {other:?}"),
    }
    drop(tls);

    // And a whole session over direct TLS, with this crate's client.
    let tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    let tls = tls_connector(true)
        .connect(sni.clone(), tcp)
        .await
        .expect("handshake");
    let mut client = Client::connect(tls, &pg.options("postgres"))
        .await
        .expect("login over direct tls");
    let result = client
        .query("select 40 + 2", &[], &Limits::default())
        .await
        .expect("query");
    assert_eq!(result.rows, vec![vec![Some("42".into())]]);
    proxy.next().await;

    // Direct TLS without ALPN is refused with PostgreSQL's error.
    let tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    let mut tls = tls_connector(false)
        .connect(sni, tcp)
        .await
        .expect("handshake");
    tls.write_all(&startup_message()).await.expect("write");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut answer)).await;
    assert!(
        read.is_ok(),
        "connection without ALPN was not closed: {answer:?}"
    );
    assert_eq!(answer.first(), Some(&b'E'), "{answer:?}");
    assert!(String::from_utf8_lossy(&answer).contains("ALPN"));
    assert!(matches!(
        proxy.next().await,
        Seen::Refused(FrontError::DirectTlsWithoutAlpn)
    ));
}

#[tokio::test]
async fn gssenc_declined_then_tls_and_cancel_requests() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut proxy = Proxy::start(pg.addr()).await;

    // GSSENCRequest → 'N', then SSLRequest → 'S', TLS without ALPN (libpq before 17), login.
    let mut tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30])
        .await
        .expect("gss");
    assert_eq!(tcp.read_u8().await.expect("answer"), b'N');
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .expect("ssl");
    assert_eq!(tcp.read_u8().await.expect("answer"), b'S');
    let name = ServerName::try_from("localhost").expect("name");
    let tls = tls_connector(false)
        .connect(name.clone(), tcp)
        .await
        .expect("handshake");
    let mut client = Client::connect(tls, &pg.options("postgres"))
        .await
        .expect("login");
    let (pid, secret) = client.backend_key().expect("backend key");
    assert_eq!(
        client
            .query("select pg_backend_pid()", &[], &Limits::default())
            .await
            .expect("query")
            .rows,
        vec![vec![Some(pid.to_string())]]
    );
    match proxy.next().await {
        Seen::Startup { sni, direct, .. } => {
            assert_eq!(sni.as_deref(), Some("localhost"));
            assert!(!direct);
        }
        other => panic!("unexpected {other:?}"),
    }

    // A plaintext CancelRequest is handed back parsed.
    let mut tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    tcp.write_all(&encode_cancel_request(pid, &secret.to_be_bytes()))
        .await
        .expect("cancel");
    match proxy.next().await {
        Seen::Cancel {
            pid: seen_pid,
            secret: seen_secret,
            sni: None,
        } => {
            assert_eq!(seen_pid, pid);
            assert_eq!(seen_secret, secret.to_be_bytes());
        }
        other => panic!("unexpected {other:?}"),
    }

    // So is one inside TLS, with its SNI.
    let mut tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    tcp.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])
        .await
        .expect("ssl");
    assert_eq!(tcp.read_u8().await.expect("answer"), b'S');
    let mut tls = tls_connector(true)
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.write_all(&encode_cancel_request(pid, &secret.to_be_bytes()))
        .await
        .expect("cancel");
    tls.flush().await.expect("flush");
    match proxy.next().await {
        Seen::Cancel {
            pid: seen_pid, sni, ..
        } => {
            assert_eq!(seen_pid, pid);
            assert_eq!(sni.as_deref(), Some("localhost"));
        }
        other => panic!("unexpected {other:?}"),
    }

    // A second GSSENCRequest is a protocol error, not a loop.
    let mut tcp = TcpStream::connect(proxy.addr).await.expect("tcp");
    let gss = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
    tcp.write_all(&gss).await.expect("gss");
    assert_eq!(tcp.read_u8().await.expect("answer"), b'N');
    tcp.write_all(&gss).await.expect("gss again");
    assert!(matches!(
        proxy.next().await,
        Seen::Refused(FrontError::UnexpectedPacket(_))
    ));
}
