//! Mutual TLS between cluster hosts, for real: tokio-rustls over TCP loopback sockets with the
//! configurations `pandastack-cluster` builds. A certificate from the cluster CA gets in and is
//! named; no certificate, or one from another CA, does not; a client refuses a server from
//! another CA or under another name.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use pandastack_cluster::{
    client_config, server_config, write_bundle, ClusterCa, Identity, Peer, Role, San,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

struct Cluster {
    _dir: tempfile::TempDir,
    ca: ClusterCa,
}

fn cluster() -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let ca = ClusterCa::init(dir.path()).unwrap();
    Cluster { _dir: dir, ca }
}

impl Cluster {
    /// A host's identity (in memory), with a SAN for the loopback address.
    fn identity(&self, role: Role, name: &str) -> Identity {
        let issued = self.ca.issue(role, name, &[San::Ip(LOOPBACK)], 1).unwrap();
        Identity::from_pem(self.ca.cert_pem(), &issued.cert_pem, &issued.key_pem).unwrap()
    }
}

/// What each end saw: the server's view of its client, the client's view of its server (an
/// error's text when the handshake or the first read failed).
struct Outcome {
    server: Result<Peer, String>,
    client: Result<Peer, String>,
}

/// One connection from a client with `client` to a server with `server`, dialled as `name`.
/// The server answers a verified client with the name it read; the client reads that answer,
/// so a refusal the server sends after the client's half of the handshake shows on both ends.
async fn connect(server: &Identity, client: ClientConfig, name: ServerName<'static>) -> Outcome {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(server).unwrap()));
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_side = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor.accept(tcp).await.map_err(|e| e.to_string())?;
        let peer = Peer::of(tls.get_ref().1).map_err(|e| e.to_string())?;
        tls.write_all(peer.to_string().as_bytes()).await.unwrap();
        tls.shutdown().await.unwrap();
        Ok(peer)
    });
    let client_side = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let mut tls = TlsConnector::from(Arc::new(client))
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        let peer = Peer::of(tls.get_ref().1).map_err(|e| e.to_string())?;
        let mut answer = String::new();
        tls.read_to_string(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        if answer.is_empty() {
            return Err("the server sent nothing".to_owned());
        }
        Ok(peer)
    };
    let limit = Duration::from_secs(10);
    let client = tokio::time::timeout(limit, client_side).await.unwrap();
    let server = tokio::time::timeout(limit, server_side)
        .await
        .unwrap()
        .unwrap();
    Outcome { server, client }
}

fn ip(addr: IpAddr) -> ServerName<'static> {
    ServerName::IpAddress(addr.into())
}

fn dns(name: &str) -> ServerName<'static> {
    ServerName::try_from(name.to_owned()).unwrap()
}

fn peer(role: Role, name: &str) -> Peer {
    Peer {
        role,
        name: name.into(),
    }
}

#[tokio::test]
async fn an_agent_with_a_cluster_certificate_gets_in_and_is_named() {
    let c = cluster();
    let server = c.identity(Role::Server, "replica-1");
    let agent = c.identity(Role::Agent, "host-0123abcd");
    let out = connect(&server, client_config(&agent).unwrap(), ip(LOOPBACK)).await;
    assert_eq!(out.server.unwrap(), peer(Role::Agent, "host-0123abcd"));
    assert_eq!(out.client.unwrap(), peer(Role::Server, "replica-1"));
}

#[tokio::test]
async fn a_host_is_dialled_by_its_name_and_a_wrong_name_is_refused() {
    let c = cluster();
    let agent = c.identity(Role::Agent, "host-a");
    let server = c.identity(Role::Server, "replica-1");
    // A replica calling an agent: the agent serves, the replica is the client.
    let out = connect(&agent, client_config(&server).unwrap(), dns("host-a")).await;
    assert_eq!(out.server.unwrap(), peer(Role::Server, "replica-1"));
    assert_eq!(out.client.unwrap(), peer(Role::Agent, "host-a"));

    let out = connect(&agent, client_config(&server).unwrap(), dns("host-b")).await;
    let e = out.client.unwrap_err();
    assert!(e.contains("not valid for name \"host-b\""), "{e}");
    assert!(out.server.is_err());
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let c = cluster();
    let server = c.identity(Role::Server, "replica-1");
    // Trusts the cluster CA, presents nothing.
    let mut roots = RootCertStore::empty();
    roots.add(server.ca().clone()).unwrap();
    let mut anonymous =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    anonymous.alpn_protocols = vec![b"h2".to_vec()];
    let out = connect(&server, anonymous, ip(LOOPBACK)).await;
    let e = out.server.unwrap_err();
    assert!(e.contains("peer sent no certificates"), "{e}");
    let e = out.client.unwrap_err();
    assert!(e.contains("CertificateRequired"), "{e}");
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused() {
    let (c, other) = (cluster(), cluster());
    let server = c.identity(Role::Server, "replica-1");
    // Trusts this cluster's CA, but its certificate comes from the other's.
    let issued = other
        .ca
        .issue(Role::Agent, "host-a", &[San::Ip(LOOPBACK)], 1)
        .unwrap();
    let stranger = Identity::from_pem(c.ca.cert_pem(), &issued.cert_pem, &issued.key_pem).unwrap();
    let out = connect(&server, client_config(&stranger).unwrap(), ip(LOOPBACK)).await;
    let e = out.server.unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(out.client.is_err());
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_is_refused_by_the_client() {
    let (c, other) = (cluster(), cluster());
    let impostor = other.identity(Role::Agent, "host-a");
    let replica = c.identity(Role::Server, "replica-1");
    let out = connect(&impostor, client_config(&replica).unwrap(), dns("host-a")).await;
    let e = out.client.unwrap_err();
    assert!(e.contains("UnknownIssuer"), "{e}");
    assert!(out.server.is_err());
}

#[tokio::test]
async fn bundles_from_a_reopened_ca_work_with_those_from_the_first() {
    let root = tempfile::tempdir().unwrap();
    let ca_dir = root.path().join("ca");
    let first = ClusterCa::init(&ca_dir).unwrap();
    let issued = first
        .issue(Role::Server, "replica-1", &[San::Ip(LOOPBACK)], 1)
        .unwrap();
    write_bundle(&root.path().join("replica-1"), &issued, &first).unwrap();
    drop(first);

    let reopened = ClusterCa::open(&ca_dir).unwrap();
    let issued = reopened.issue(Role::Agent, "host-a", &[], 1).unwrap();
    write_bundle(&root.path().join("host-a"), &issued, &reopened).unwrap();

    let server = Identity::load(&root.path().join("replica-1")).unwrap();
    let agent = Identity::load(&root.path().join("host-a")).unwrap();
    assert_eq!(agent.peer(), &peer(Role::Agent, "host-a"));
    let out = connect(&server, client_config(&agent).unwrap(), ip(LOOPBACK)).await;
    assert_eq!(out.server.unwrap(), peer(Role::Agent, "host-a"));
    assert_eq!(out.client.unwrap(), peer(Role::Server, "replica-1"));
}
