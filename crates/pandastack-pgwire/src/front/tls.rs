//! The TLS server configuration of the front: rustls on ring (named explicitly, so no
//! process-wide provider is needed), ALPN `postgresql`, certificates from PEM or self-signed.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

use super::FrontError;

/// The ALPN protocol id PostgreSQL registered (and requires for direct TLS).
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// A server config for this certificate chain and key, both PEM.
pub(super) fn server_config(
    cert_chain_pem: &str,
    key_pem: &str,
) -> Result<ServerConfig, FrontError> {
    let certs = CertificateDer::pem_slice_iter(cert_chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(FrontError::Pem)?;
    if certs.is_empty() {
        return Err(FrontError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(FrontError::Pem)?;
    let config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(FrontError::Config)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(FrontError::Config)?;
    Ok(with_alpn(config))
}

/// HTTP/1.1's ALPN id: WebSocket clients of the same port (browsers offer it).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Sets the ALPN protocols the front speaks: `postgresql`, then `http/1.1` for WebSocket
/// clients. A client offering ALPN with neither fails the handshake; a client offering none is
/// served (see [`super::Front::accept`]).
pub(super) fn with_alpn(mut config: ServerConfig) -> ServerConfig {
    config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec(), ALPN_HTTP1.to_vec()];
    config
}

/// A self-signed certificate for these DNS names: `(cert pem, key pem)`.
pub(super) fn self_signed(names: &[String]) -> Result<(String, String), FrontError> {
    let certified = rcgen::generate_simple_self_signed(names.to_vec())?;
    Ok((certified.cert.pem(), certified.key_pair.serialize_pem()))
}
