//! The cluster CA: made once by `pandastack cluster init`, opened again to issue each host's
//! certificate.
//!
//! The CA's subject is `O=PandaStack, CN=PandaStack cluster <id>`, where `<id>` is the first 8
//! bytes (hex) of the SHA-256 of its public key: two clusters' CAs differ by name, and the
//! subject follows from the key, so [`ClusterCa::open`] rebuilds the issuer from `ca.key` and
//! checks that `ca.pem` is that CA (same key, same subject) before it signs anything with it.
//! rcgen 0.13 cannot load a CA certificate without its `x509-parser` feature, which would bring
//! a second x509-parser; rebuilding from the key needs none.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};
use time::{Duration, OffsetDateTime};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer;

use crate::files::{self, FileError};
use crate::name::{check_dns_name, check_name, identity_uri, NameError, Role};
use crate::peer::Peer;
use crate::{CA_CERT, CA_KEY};

/// Default validity of a host's certificate, in days.
pub const DEFAULT_DAYS: u32 = 365;
/// Validity of the CA.
const CA_DAYS: i64 = 3650;
/// How far before now a certificate starts, for hosts whose clocks are a little behind.
const BACKDATE: Duration = Duration::minutes(5);

/// A subject alternative name besides the holder's own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Ip(IpAddr),
}

/// A certificate and its private key, both PEM, as [`ClusterCa::issue`] made them.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    /// Who the certificate names.
    pub peer: Peer,
    pub not_after: OffsetDateTime,
}

/// The cluster's certificate authority, with its private key.
pub struct ClusterCa {
    key: KeyPair,
    /// The CA rebuilt from its key: what rcgen signs with (issuer name, key identifier).
    issuer: rcgen::Certificate,
    /// `ca.pem` as stored.
    cert_pem: String,
    id: String,
    not_after: OffsetDateTime,
}

/// Why a CA could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InitCaError {
    #[error("{} already exists: this directory already holds a cluster CA", .0.display())]
    Exists(PathBuf),
    #[error("generate the CA")]
    Generate(#[source] rcgen::Error),
    #[error(transparent)]
    File(#[from] FileError),
}

/// Why a CA directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenCaError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{}: not a PEM private key", .path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: rcgen::Error,
    },
    #[error("{}: not a PEM certificate", .path.display())]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{}: not an X.509 certificate", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: x509_parser::nom::Err<x509_parser::error::X509Error>,
    },
    #[error("{} is not the certificate of the key in {}", .cert.display(), .key.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error("{}: not a PandaStack cluster CA (its subject is not the one its key gives)", .0.display())]
    NotClusterCa(PathBuf),
    #[error("rebuild the CA")]
    Rebuild(#[source] rcgen::Error),
}

/// Why a certificate could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("host name")]
    Name(#[source] NameError),
    #[error("DNS name")]
    Dns(#[source] NameError),
    #[error("a certificate must be valid for at least one day")]
    NoDays,
    #[error("the certificate would outlive the cluster CA (valid until {ca_until})")]
    OutlivesCa { ca_until: time::Date },
    #[error("generate the certificate")]
    Generate(#[source] rcgen::Error),
}

/// The cluster id the CA's key gives: 8 bytes of the SHA-256 of its public key, hex.
fn cluster_id(key: &KeyPair) -> String {
    hex::encode(&Sha256::digest(key.public_key_der())[..8])
}

/// The CA's certificate parameters for `key`, valid from `not_before` to `not_after`.
fn ca_params(
    key: &KeyPair,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "PandaStack");
    dn.push(
        DnType::CommonName,
        format!("PandaStack cluster {}", cluster_id(key)),
    );
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = not_before;
    params.not_after = not_after;
    params
}

/// Whole seconds: what a certificate can say, so a comparison with a parsed one is exact.
fn now() -> OffsetDateTime {
    let now = OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

impl ClusterCa {
    /// Makes a new CA in `dir` (created 0700 if missing): `ca.key` (0600) and `ca.pem` (0644).
    /// Refuses a directory that already holds either.
    pub fn init(dir: &Path) -> Result<ClusterCa, InitCaError> {
        for name in [CA_KEY, CA_CERT] {
            let path = dir.join(name);
            if path.symlink_metadata().is_ok() {
                return Err(InitCaError::Exists(path));
            }
        }
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(InitCaError::Generate)?;
        let now = now();
        let not_after = now + Duration::days(CA_DAYS);
        let issuer = ca_params(&key, now - BACKDATE, not_after)
            .self_signed(&key)
            .map_err(InitCaError::Generate)?;
        let cert_pem = issuer.pem();
        files::write_new_set(
            dir,
            &[
                (CA_KEY, key.serialize_pem().as_bytes(), 0o600),
                (CA_CERT, cert_pem.as_bytes(), 0o644),
            ],
        )?;
        Ok(ClusterCa {
            id: cluster_id(&key),
            key,
            issuer,
            cert_pem,
            not_after,
        })
    }

    /// Opens the CA in `dir`, checking that `ca.pem` is the certificate of `ca.key`.
    pub fn open(dir: &Path) -> Result<ClusterCa, OpenCaError> {
        let (key_path, cert_path) = (dir.join(CA_KEY), dir.join(CA_CERT));
        let key_pem = files::read_string(&key_path)?;
        let key = KeyPair::from_pem(&key_pem).map_err(|source| OpenCaError::Key {
            path: key_path.clone(),
            source,
        })?;
        let cert_pem = files::read_string(&cert_path)?;
        let der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|source| {
            OpenCaError::Pem {
                path: cert_path.clone(),
                source,
            }
        })?;
        let (_, stored) =
            X509Certificate::from_der(der.as_ref()).map_err(|source| OpenCaError::Parse {
                path: cert_path.clone(),
                source,
            })?;
        if stored.public_key().raw != key.public_key_der().as_slice() {
            return Err(OpenCaError::KeyMismatch {
                cert: cert_path,
                key: key_path,
            });
        }
        let validity = stored.validity();
        let not_after = validity.not_after.to_datetime();
        let issuer = ca_params(&key, validity.not_before.to_datetime(), not_after)
            .self_signed(&key)
            .map_err(OpenCaError::Rebuild)?;
        // The issuer name of every certificate signed from here must be `ca.pem`'s subject,
        // byte for byte, or no chain would build to it.
        let (_, rebuilt) =
            X509Certificate::from_der(issuer.der()).map_err(|source| OpenCaError::Parse {
                path: cert_path.clone(),
                source,
            })?;
        if rebuilt.subject().as_raw() != stored.subject().as_raw() || !stored.is_ca() {
            return Err(OpenCaError::NotClusterCa(cert_path));
        }
        Ok(ClusterCa {
            id: cluster_id(&key),
            key,
            issuer,
            cert_pem,
            not_after,
        })
    }

    /// The CA certificate, PEM (what every host trusts).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The cluster's id (16 hex digits, from the CA's key).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Issues a certificate for `name` in `role`, valid for `days` from now (and no longer
    /// than the CA): a new P-256 key; subject `CN=<name>`; SANs `pandastack://<role>/<name>`,
    /// DNS `<name>`, then `sans`; key usage digitalSignature; extended key usages serverAuth
    /// and clientAuth.
    pub fn issue(
        &self,
        role: Role,
        name: &str,
        sans: &[San],
        days: u32,
    ) -> Result<Issued, IssueError> {
        check_name(name).map_err(IssueError::Name)?;
        let mut alt = vec![
            SanType::URI(ia5(identity_uri(role, name))),
            SanType::DnsName(ia5(name.to_owned())),
        ];
        for san in sans {
            let san = match san {
                San::Dns(dns) => {
                    check_dns_name(dns).map_err(IssueError::Dns)?;
                    SanType::DnsName(ia5(dns.to_ascii_lowercase()))
                }
                San::Ip(ip) => SanType::IpAddress(*ip),
            };
            if !alt.contains(&san) {
                alt.push(san);
            }
        }
        if days == 0 {
            return Err(IssueError::NoDays);
        }
        let now = now();
        let not_after = now + Duration::days(days.into());
        if not_after > self.not_after {
            return Err(IssueError::OutlivesCa {
                ca_until: self.not_after.date(),
            });
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.subject_alt_names = alt;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        params.not_before = now - BACKDATE;
        params.not_after = not_after;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(IssueError::Generate)?;
        let cert = params
            .signed_by(&key, &self.issuer, &self.key)
            .map_err(IssueError::Generate)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            peer: Peer {
                role,
                name: name.to_owned(),
            },
            not_after,
        })
    }
}

/// An IA5 string from text already checked to be ASCII (a name, a DNS name, our URI).
fn ia5(s: String) -> rcgen::Ia5String {
    rcgen::Ia5String::try_from(s).expect("checked names are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reopened_ca_issues_certificates_naming_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let made = ClusterCa::init(dir.path()).unwrap();
        let ca = ClusterCa::open(dir.path()).unwrap();
        assert_eq!(ca.id(), made.id());
        assert_eq!(ca.cert_pem(), made.cert_pem());
        assert_eq!(ca.not_after(), made.not_after());
        let issued = ca
            .issue(
                Role::Agent,
                "host-1",
                &[San::Dns("Agent-1.Example.com".into())],
                30,
            )
            .unwrap();
        let der = CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            Peer::from_certificate(&der).unwrap(),
            Peer {
                role: Role::Agent,
                name: "host-1".into()
            }
        );
        let (_, cert) = X509Certificate::from_der(der.as_ref()).unwrap();
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap();
        let (_, ca_cert) = X509Certificate::from_der(ca_der.as_ref()).unwrap();
        assert_eq!(cert.issuer().as_raw(), ca_cert.subject().as_raw());
        assert!(!cert.is_ca());
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && eku.client_auth);
        let sans: Vec<String> = cert
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
            .iter()
            .map(|g| g.to_string())
            .collect();
        assert_eq!(
            sans,
            [
                "URI(pandastack://agent/host-1)",
                "DNSName(host-1)",
                "DNSName(agent-1.example.com)"
            ]
        );
        let days =
            (cert.validity().not_after.to_datetime() - OffsetDateTime::now_utc()).whole_days();
        assert!((29..=30).contains(&days), "{days}");
    }

    #[test]
    fn bad_requests_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ca = ClusterCa::init(dir.path()).unwrap();
        let e = ca.issue(Role::Agent, "Host_1", &[], 1).err().unwrap();
        assert!(matches!(e, IssueError::Name(_)), "{e:?}");
        let e = ca
            .issue(Role::Agent, "h", &[San::Dns("*.example.com".into())], 1)
            .err()
            .unwrap();
        assert!(matches!(e, IssueError::Dns(_)), "{e:?}");
        let e = ca.issue(Role::Server, "r1", &[], 0).err().unwrap();
        assert!(matches!(e, IssueError::NoDays), "{e:?}");
        let e = ca.issue(Role::Server, "r1", &[], 20 * 365).err().unwrap();
        assert!(matches!(e, IssueError::OutlivesCa { .. }), "{e:?}");
    }

    #[test]
    fn a_ca_directory_with_a_foreign_certificate_does_not_open() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        ClusterCa::init(a.path()).unwrap();
        ClusterCa::init(b.path()).unwrap();
        std::fs::copy(b.path().join(CA_CERT), a.path().join(CA_CERT)).unwrap();
        let e = ClusterCa::open(a.path()).err().unwrap();
        assert!(matches!(e, OpenCaError::KeyMismatch { .. }), "{e:?}");
    }
}
