//! The proxy's TLS listener: HTTPS for apps' custom domains (and, with a default certificate,
//! for `<app>.<domain>` and preview hosts), in front of the same router as the plain listener.
//!
//! The certificate is chosen per connection from the name the client sends (SNI): the
//! operator's files (`<dir>/<name>/fullchain.pem` + `privkey.pem`) first, then a certificate
//! ACME issued for the name (from the store, so one issued by another host serves here too),
//! then the default certificate (`--proxy-tls-cert`, e.g. a wildcard for the platform's
//! domain). A name none of them covers ends the handshake. What a lookup found is kept for
//! [`FRESH`] (a miss for [`MISS_FRESH`]), so a replaced file or a renewed certificate is
//! served within seconds and a flood of unknown names costs one look each few seconds.
//! Requests that came over TLS carry `X-Forwarded-Proto: https` to the app.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::HeaderValue;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use pandastack_control::CertConfig;
use pandastack_store::{Store, StoreError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::Acceptor;
use rustls::ServerConfig;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::LazyConfigAcceptor;

use crate::ApiState;

/// How long a certificate found stays in the cache before it is looked up again.
const FRESH: Duration = Duration::from_secs(10);
/// How long a name nothing covers stays a miss.
const MISS_FRESH: Duration = Duration::from_secs(2);
/// Longest a client may take over its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Most names kept in the cache (a flood of made-up names empties it).
const MAX_CACHED: usize = 10_000;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: no PEM {kind} in it")]
    Pem { what: String, kind: &'static str },
    #[error("{what}: {source}")]
    Config {
        what: String,
        #[source]
        source: rustls::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A server configuration serving `chain` with `key` (HTTP/2 and HTTP/1.1 by ALPN).
fn server_config(what: &str, chain: &[u8], key: &[u8]) -> Result<Arc<ServerConfig>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what: what.to_owned(),
            kind: "certificate",
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| TlsError::Pem {
        what: what.to_owned(),
        kind: "private key",
    })?;
    let config_err = |source| TlsError::Config {
        what: what.to_owned(),
        source,
    };
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(config_err)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(config_err)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// A certificate and key from PEM files.
pub fn config_from_files(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    server_config(&cert.display().to_string(), &read(cert)?, &read(key)?)
}

struct Cached {
    config: Option<Arc<ServerConfig>>,
    at: Instant,
}

/// Chooses each TLS connection's certificate (see the module's doc).
pub struct ProxyTls {
    certs: Arc<CertConfig>,
    store: Store,
    default: Option<Arc<ServerConfig>>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl ProxyTls {
    pub fn new(store: Store, certs: Arc<CertConfig>, default: Option<Arc<ServerConfig>>) -> Self {
        Self {
            certs,
            store,
            default,
            cache: Mutex::default(),
        }
    }

    /// The configuration for a client that named `sni` (`None`: no certificate covers it).
    pub async fn config_for(&self, sni: Option<&str>) -> Option<Arc<ServerConfig>> {
        let Some(name) = sni else {
            return self.default.clone();
        };
        self.own(name).await.or_else(|| self.default.clone())
    }

    /// Whether `name` has a certificate of its own (from files or ACME; the default one does
    /// not count).
    pub async fn has_own(&self, name: &str) -> bool {
        self.own(name).await.is_some()
    }

    /// `name`'s own certificate's configuration, looked up at most every few seconds.
    async fn own(&self, name: &str) -> Option<Arc<ServerConfig>> {
        let name = name.to_ascii_lowercase();
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(c) = cache.get(&name) {
                let fresh = if c.config.is_some() {
                    FRESH
                } else {
                    MISS_FRESH
                };
                if c.at.elapsed() < fresh {
                    return c.config.clone();
                }
            }
        }
        let found = match self.lookup(&name).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%name, error = &e as &dyn std::error::Error, "tls certificate");
                None
            }
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(
            name,
            Cached {
                config: found.clone(),
                at: Instant::now(),
            },
        );
        found
    }

    /// `name`'s own certificate: from files, else issued by ACME.
    async fn lookup(&self, name: &str) -> Result<Option<Arc<ServerConfig>>, TlsError> {
        if let Some((cert, key)) = self.certs.files(name) {
            return config_from_files(&cert, &key).map(Some);
        }
        let row = match self.store.domains().get(name).await {
            Ok(r) => r,
            Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // A renewal under way (or failed) keeps serving the certificate stored.
        match (&row.cert_pem, &row.key_pem) {
            (Some(c), Some(k)) => server_config(name, c.as_bytes(), k.as_bytes()).map(Some),
            _ => Ok(None),
        }
    }

    /// One connection: the handshake with the certificate its name calls for, then HTTP/1.1
    /// or HTTP/2 (by ALPN) into `router`.
    async fn serve_one(
        &self,
        router: axum::Router,
        tcp: TcpStream,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let start = tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            LazyConfigAcceptor::new(Acceptor::default(), tcp),
        )
        .await??;
        let sni = start.client_hello().server_name().map(str::to_owned);
        let Some(config) = self.config_for(sni.as_deref()).await else {
            return Err(format!("no certificate for {sni:?}").into());
        };
        let stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, start.into_stream(config)).await??;
        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(router))
            .await
    }
}

/// Marks a request that came over the TLS listener.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OverTls;

/// Plain-HTTP requests for the custom domains of apps that have a certificate of their own are
/// answered with `308` to the same URL over HTTPS (`--https-redirect`); ACME's HTTP-01
/// challenges are not.
#[derive(Clone)]
pub struct HttpsRedirect {
    pub tls: Arc<ProxyTls>,
    /// The HTTPS port in the redirect's URL (left out when 443).
    pub port: u16,
}

/// Where a plain request for `name` to `uri` goes: `https://name[:port]/path?query`, the port
/// left out when it is 443.
pub(crate) fn https_location(name: &str, port: u16, uri: &axum::http::Uri) -> String {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    match port {
        443 => format!("https://{name}{path}"),
        port => format!("https://{name}:{port}{path}"),
    }
}

/// Serves the proxy over TLS on `listener` for the life of the process.
pub async fn serve_proxy_tls(app: Arc<ApiState>, listener: TcpListener, tls: Arc<ProxyTls>) {
    let router = crate::proxy_router(app).layer(axum::middleware::map_request(
        |mut req: Request| async move {
            req.headers_mut()
                .insert("x-forwarded-proto", HeaderValue::from_static("https"));
            req.extensions_mut().insert(OverTls);
            req
        },
    ));
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                tracing::warn!(error = &e as &dyn std::error::Error, "proxy tls accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (tls, router) = (Arc::clone(&tls), router.clone());
        tokio::spawn(async move {
            if let Err(e) = tls.serve_one(router, tcp).await {
                tracing::debug!(
                    error = &*e as &dyn std::error::Error,
                    "proxy tls connection"
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_keep_path_and_query_and_name_the_port_unless_443() {
        let uri: axum::http::Uri = "/a/b?c=d&e".parse().unwrap();
        assert_eq!(
            https_location("shop.example.com", 443, &uri),
            "https://shop.example.com/a/b?c=d&e"
        );
        assert_eq!(
            https_location("shop.example.com", 8443, &"/".parse().unwrap()),
            "https://shop.example.com:8443/"
        );
    }

    #[test]
    fn pem_pairs_load_and_bad_ones_say_why() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["shop.example.com".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config =
            server_config("t", cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap();
        assert_eq!(config.alpn_protocols[0], b"h2");
        let e = server_config("t", b"junk", key.serialize_pem().as_bytes()).unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let e = server_config("t", cert.pem().as_bytes(), b"junk").unwrap_err();
        assert!(e.to_string().contains("no PEM private key"), "{e}");
    }
}
