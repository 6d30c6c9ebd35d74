//! `https://` base URLs: the client (and so the CLI) speaks TLS, trusting the system's roots and
//! `SSL_CERT_FILE`, and refuses a certificate nobody vouches for. The server side is a minimal
//! TLS endpoint made here with a self-signed certificate (a reverse proxy in production).
//! One test per binary: it sets `SSL_CERT_FILE` for the whole process.

use std::sync::Arc;

use pandastack_client::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// Serves `GET /v1/templates` over TLS with a new self-signed certificate for `localhost`;
/// returns its port and the certificate (PEM).
async fn tls_server() -> (u16, String) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key_pair.serialize_der()));
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"data":[{"name":"over-tls","description":"","cpu":1,"memory_mb":512,"disk_mb":1024,"state":"ready","bake_ms":1}],"next_cursor":null}"#;
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: req_tls\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(resp.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, cert.cert.pem())
}

#[tokio::test]
async fn https_base_urls_speak_tls_and_check_the_certificate() {
    let (trusted_port, pem) = tls_server().await;
    let (untrusted_port, _) = tls_server().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, pem).unwrap();
    // Read when a client is built; no client exists yet and this binary has one test.
    std::env::set_var("SSL_CERT_FILE", &ca);

    let client = Client::new(Config::new(
        format!("https://localhost:{trusted_port}"),
        Some("pds_test".into()),
    ))
    .unwrap();
    let templates = client.list_templates().await.unwrap();
    assert_eq!(templates[0].name, "over-tls");

    let client = Client::new(Config::new(
        format!("https://localhost:{untrusted_port}"),
        Some("pds_test".into()),
    ))
    .unwrap();
    let err = client.list_templates().await.unwrap_err();
    assert!(
        err.is_connect() || format!("{err:?}").contains("certificate"),
        "{err:?}"
    );
}
