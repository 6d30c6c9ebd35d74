//! The rustls configurations of the cluster's mutual TLS, on the ring provider (named
//! explicitly, so no process-wide provider is needed): TLS 1.3 only (both ends are
//! PandaStack), ALPN `h2` (gRPC), the cluster CA the only trust anchor.
//!
//! The server side requires a client certificate chained to the cluster CA; a client with
//! none, or with one from another CA, fails the handshake. Which peer it is — "this is agent
//! X" — is then read with [`crate::Peer::of`]. The client side verifies the server's chain to
//! the cluster CA and the server name it dialled against the certificate's DNS/IP SANs (a
//! host's own name is always one); a caller that needs a particular role checks
//! [`crate::Peer::of`] too, since an agent and a replica may share a name.

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{VerifierBuilderError, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::files::Identity;

/// The ALPN protocol both sides offer: HTTP/2, for gRPC.
pub const ALPN_H2: &[u8] = b"h2";

/// Why a TLS configuration could not be built from an identity.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("the cluster CA certificate")]
    Ca(#[source] rustls::Error),
    #[error("the certificate verifier")]
    Verifier(#[source] VerifierBuilderError),
    #[error("the host's certificate and key")]
    Config(#[source] rustls::Error),
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(id: &Identity) -> Result<Arc<RootCertStore>, TlsConfigError> {
    let mut roots = RootCertStore::empty();
    roots.add(id.ca.clone()).map_err(TlsConfigError::Ca)?;
    Ok(Arc::new(roots))
}

/// The server side: presents `id`'s certificate and requires a client certificate chained to
/// the cluster CA.
pub fn server_config(id: &Identity) -> Result<ServerConfig, TlsConfigError> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(id)?, Arc::clone(&provider))
        .build()
        .map_err(TlsConfigError::Verifier)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsConfigError::Config)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![id.cert.clone()], id.key.clone_key())
        .map_err(TlsConfigError::Config)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// The client side: presents `id`'s certificate and trusts only the cluster CA.
pub fn client_config(id: &Identity) -> Result<ClientConfig, TlsConfigError> {
    // The builder's provider verifies the server's chain (WebPKI, no revocation checks).
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsConfigError::Config)?
        .with_root_certificates(roots(id)?)
        .with_client_auth_cert(vec![id.cert.clone()], id.key.clone_key())
        .map_err(TlsConfigError::Config)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}
