//! The cluster's PKI: the first slice of multi-host PandaStack (issue #38), where `pandastack
//! server` replicas (the control plane, on PostgreSQL) and one `pandastack agent` per host talk
//! gRPC over mutual TLS and a request without a valid client certificate is refused.
//!
//! What is here:
//! - [`ClusterCa`]: the cluster's certificate authority, made once (`ca.pem` 0644, `ca.key`
//!   0600) and opened again to issue certificates.
//! - [`ClusterCa::issue`]: a certificate per host for a [`Role`] (an agent, or a server
//!   replica) and a name, usable for both client and server authentication.
//! - [`write_bundle`] / [`Identity::load`]: the per-host directory `{ca.pem, cert.pem,
//!   key.pem}`.
//! - [`server_config`] / [`client_config`]: the rustls (ring) configurations both sides use —
//!   TLS 1.3 only, ALPN `h2`, the cluster CA the only trust anchor, and on the server side a
//!   client certificate required.
//! - [`Peer`]: who is on the other end, read from a certificate the handshake verified.
//!
//! How a peer is named: every certificate carries exactly one URI SAN
//! `pandastack://<role>/<name>` (`pandastack://agent/host-0123abcd`), which [`Peer`] reads;
//! its subject CN is the name as well, for people reading it with `openssl x509`. The name is
//! also a DNS SAN, so a caller can dial a host at any address and verify it by name.
//!
//! Not built yet: the agent's gRPC service and the replicas' client of it, membership,
//! placement, certificate rotation and revocation. This crate names no other workspace crate,
//! holds no database credentials and knows nothing of VMs.

mod ca;
mod files;
mod name;
mod peer;
mod tls;

pub use ca::{ClusterCa, InitCaError, IssueError, Issued, OpenCaError, San, DEFAULT_DAYS};
pub use files::{write_bundle, FileError, Identity, LoadIdentityError, WriteBundleError};
pub use name::{check_dns_name, check_name, NameError, Role, RoleParseError, MAX_NAME_LEN};
pub use peer::{Peer, PeerError};
pub use tls::{client_config, server_config, TlsConfigError, ALPN_H2};

/// The CA's certificate in a CA directory and in a host's bundle.
pub const CA_CERT: &str = "ca.pem";
/// The CA's private key in a CA directory (mode 0600).
pub const CA_KEY: &str = "ca.key";
/// A host's certificate in its bundle.
pub const HOST_CERT: &str = "cert.pem";
/// A host's private key in its bundle (mode 0600).
pub const HOST_KEY: &str = "key.pem";
