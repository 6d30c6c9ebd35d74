//! Who is on the other end of a connection: the role and name in its certificate's URI SAN.

use std::fmt;

use rustls::pki_types::CertificateDer;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::name::{check_name, Role, URI_PREFIX};

/// A certificate holder's role and name, as `pandastack://<role>/<name>` says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Peer {
    pub role: Role,
    pub name: String,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.name)
    }
}

/// Why a certificate names no peer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the peer presented no certificate")]
    NoCertificate,
    #[error("parse the peer's certificate")]
    Parse(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("read the peer certificate's subject alternative names")]
    San(#[source] x509_parser::error::X509Error),
    #[error("the peer's certificate has no {URI_PREFIX} URI")]
    NoIdentity,
    #[error("the peer's certificate has more than one {URI_PREFIX} URI")]
    TwoIdentities,
    #[error("the peer's certificate names a bad identity {0:?}")]
    BadIdentity(String),
}

impl Peer {
    /// The peer named in `cert`. It reads only: call it on a certificate the TLS handshake
    /// verified against the cluster CA (see [`Peer::of`]).
    pub fn from_certificate(cert: &CertificateDer<'_>) -> Result<Peer, PeerError> {
        let (_, parsed) = X509Certificate::from_der(cert.as_ref()).map_err(PeerError::Parse)?;
        let sans = parsed.subject_alternative_name().map_err(PeerError::San)?;
        let mut found = None;
        for general in sans.iter().flat_map(|s| &s.value.general_names) {
            let GeneralName::URI(uri) = general else {
                continue;
            };
            let Some(rest) = uri.strip_prefix(URI_PREFIX) else {
                continue;
            };
            if found.is_some() {
                return Err(PeerError::TwoIdentities);
            }
            let bad = || PeerError::BadIdentity((*uri).to_owned());
            let (role, name) = rest.split_once('/').ok_or_else(bad)?;
            let role = role.parse::<Role>().map_err(|_| bad())?;
            check_name(name).map_err(|_| bad())?;
            found = Some(Peer {
                role,
                name: name.to_owned(),
            });
        }
        found.ok_or(PeerError::NoIdentity)
    }

    /// The peer of an established connection (a `ServerConnection` or `ClientConnection`
    /// dereferences to the `CommonState` this takes). rustls verified its certificate against
    /// the cluster CA during the handshake, with [`crate::server_config`] or
    /// [`crate::client_config`].
    pub fn of(conn: &rustls::CommonState) -> Result<Peer, PeerError> {
        let cert = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .ok_or(PeerError::NoCertificate)?;
        Peer::from_certificate(cert)
    }
}
