//! A cluster on this machine (issue #38, item 4): two `pandastack server --cluster` replicas on
//! one PostgreSQL and three fake-driver agents (`pandastack_testkit::cluster_kit`). Creates
//! through either replica are placed on every host, and each sandbox answers through every
//! replica — exec (which runs under that sandbox's VM process on the host its row names),
//! files written through one replica and read through the other, a PTY session, and a preview
//! URL through each replica's proxy. An agent refuses a caller without a certificate of the
//! cluster, with another CA's, or with an agent's.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use pandastack_cluster::{Identity, Role};
use pandastack_host::error_chain;
use pandastack_testkit::cluster::TestCa;
use pandastack_testkit::cluster_kit::{free_port, http_raw, Cluster, ClusterSpec};
use pandastack_testkit::within;

/// The fake VM process behind sandbox `id` on the host of agent `j`.
fn vm_pid(c: &Cluster, j: usize, id: &str) -> i32 {
    let f = c.agents[j].data.join("sandboxes").join(id).join("fake.pid");
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Prints the shell's ancestors, itself first (pid, then each parent up to 1).
const ANCESTORS: &str =
    "p=$$; while [ \"$p\" -gt 1 ]; do echo $p; p=$(cut -d' ' -f4 /proc/$p/stat); done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_land_on_every_host_and_each_sandbox_answers_through_every_replica() {
    // Four sandboxes a host at most: nine creates need all three.
    let spec = ClusterSpec {
        slots: 4,
        ..Default::default()
    };
    let t = Instant::now();
    let Some(c) = Cluster::start(spec).await else {
        return;
    };
    eprintln!("cluster up in {:?}", t.elapsed());

    let t = Instant::now();
    let mut placed: Vec<(String, String)> = Vec::new();
    for n in 0..9 {
        placed.push(c.create(n % 2).await);
    }
    eprintln!("9 creates in {:?}", t.elapsed());
    let mut per_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (id, host) in &placed {
        per_host.entry(host.clone()).or_default().push(id.clone());
    }
    eprintln!("placement: {per_host:?}");
    let hosts: BTreeSet<&String> = per_host.keys().collect();
    let expected: BTreeSet<&String> = c.agents.iter().map(|a| &a.host_id).collect();
    assert_eq!(hosts, expected, "every host gets some of the creates");
    for (host, ids) in &per_host {
        assert!(
            ids.len() <= 4,
            "{host} holds {} sandboxes over its 4 slots",
            ids.len()
        );
        let j = c.agent_of(host);
        let vms = c.live_vms(j);
        for id in ids {
            assert!(vms.contains(id), "{id} has no VM on {host}: {vms:?}");
        }
    }

    // Every replica lists the same hosts to an operator, as the store has them; a workspace's
    // key may not.
    for r in 0..c.replicas.len() {
        let mut listed = c
            .admin_client(r)
            .list_hosts()
            .await
            .unwrap_or_else(|e| panic!("GET /v1/hosts through {r}: {}", error_chain(&e)));
        listed.sort_by(|a, b| a.id.cmp(&b.id));
        use pandastack_client::types::HostState;
        let seen: Vec<(String, HostState, Option<String>, u64, bool)> = listed
            .iter()
            .map(|h| {
                (
                    h.id.clone(),
                    h.state,
                    h.address.clone(),
                    h.sandboxes,
                    h.templates.iter().any(|t| t == "base"),
                )
            })
            .collect();
        let expected: Vec<(String, HostState, Option<String>, u64, bool)> = c
            .agents
            .iter()
            .map(|a| {
                (
                    a.host_id.clone(),
                    HostState::Ready,
                    Some(a.listen.to_string()),
                    per_host.get(&a.host_id).map_or(0, |v| v.len() as u64),
                    true,
                )
            })
            .collect();
        assert_eq!(seen, expected, "GET /v1/hosts through replica {r}");
        let refused = c.client_once(r).list_hosts().await;
        assert!(
            matches!(&refused, Err(pandastack_client::Error::Api(a)) if a.status == 403),
            "GET /v1/hosts with a workspace's key: {refused:?}"
        );
    }

    // Files the sandboxes write land on this machine's file system (fake VMs): a directory
    // anyone may write, removed at the end.
    let files = tempfile::tempdir().unwrap();
    std::fs::set_permissions(files.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    let t = Instant::now();
    for (id, host) in &placed {
        let j = c.agent_of(host);
        let pid = vm_pid(&c, j, id).to_string();
        for r in 0..c.replicas.len() {
            // The command runs under this sandbox's VM process on its own host.
            let out = c.exec(r, id, ANCESTORS).await;
            assert!(
                out.lines().any(|l| l == pid),
                "exec in {id} through replica {r} did not run under its VM (pid {pid} on \
                 {host}): ancestors {out:?}"
            );
            // A file written through replica r is read back through the other.
            let path = files.path().join(format!("{id}-{r}"));
            let path = path.to_str().unwrap();
            let body = format!("{id} through replica {r}\n");
            within(
                Duration::from_secs(30),
                "write a file",
                c.client(r).write_file(id, path, body.clone().into_bytes()),
            )
            .await
            .unwrap_or_else(|e| panic!("write {path} in {id} through {r}: {}", error_chain(&e)));
            let other = (r + 1) % c.replicas.len();
            let back = within(
                Duration::from_secs(30),
                "read a file",
                c.client(other).read_file(id, path),
            )
            .await
            .unwrap_or_else(|e| panic!("read {path} in {id} through {other}: {}", error_chain(&e)));
            assert_eq!(std::str::from_utf8(&back).unwrap(), body);
            assert_eq!(c.exec(other, id, &format!("cat {path}")).await, body);
        }
    }
    eprintln!(
        "exec, write and read of 9 sandboxes through 2 replicas in {:?}",
        t.elapsed()
    );

    // A PTY session and a preview URL through every replica, for one sandbox on each host.
    let t = Instant::now();
    for ids in per_host.values() {
        let id = &ids[0];
        for r in 0..c.replicas.len() {
            pty_says(&c, r, id).await;
        }
        preview(&c, id, files.path()).await;
    }
    eprintln!(
        "PTY and preview of 3 sandboxes through 2 replicas in {:?}",
        t.elapsed()
    );

    // Every host is still ready: nothing above cost a lease.
    for h in c.hosts().await {
        assert_eq!(h.state.as_str(), "ready", "{h:?}");
    }
}

/// A PTY session on sandbox `id` through replica `r` runs a command and reports its exit.
async fn pty_says(c: &Cluster, r: usize, id: &str) {
    use pandastack_client::{PtyEvent, PtyOptions};
    let opts = PtyOptions {
        cols: Some(80),
        rows: Some(24),
        cmd: Some("echo pty-$((6*7))".into()),
    };
    within(Duration::from_secs(30), "a PTY session", async {
        let (_tx, mut rx) = c
            .client(r)
            .pty(id, &opts)
            .await
            .unwrap_or_else(|e| panic!("PTY on {id} through {r}: {}", error_chain(&e)));
        let mut seen = Vec::new();
        loop {
            match rx.next().await {
                Ok(Some(PtyEvent::Output(b))) => seen.extend_from_slice(&b),
                Ok(Some(PtyEvent::Exit(code))) => {
                    assert_eq!(code, 0);
                    break;
                }
                other => panic!(
                    "PTY on {id} through {r}: {other:?} after {:?}",
                    String::from_utf8_lossy(&seen)
                ),
            }
        }
        let text = String::from_utf8_lossy(&seen);
        assert!(text.contains("pty-42"), "PTY on {id} through {r}: {text:?}");
    })
    .await;
}

/// A server in sandbox `id` answers through every replica's preview proxy.
async fn preview(c: &Cluster, id: &str, files: &std::path::Path) {
    let port = free_port();
    let dir = files.join(format!("www-{id}"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    c.exec(
        0,
        id,
        &format!("echo served-by-{id} > {}/who", dir.display()),
    )
    .await;
    // Bounded (`timeout`): the fake VM's processes are this machine's.
    c.exec(
        0,
        id,
        &format!(
            "cd {} && (timeout 60 python3 -m http.server {port} --bind 127.0.0.1 \
             >/dev/null 2>&1 & echo $! > pid)",
            dir.display()
        ),
    )
    .await;
    // Ended when this returns, however it returns (`timeout` passes the signal on).
    struct Server(i32);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.0),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }
    let pid = std::fs::read_to_string(dir.join("pid")).expect("the server's pid");
    let _server = Server(pid.trim().parse().expect("a pid"));
    let url = c.client(0).port_url(id, port).await.expect("port URL");
    for r in &c.replicas {
        let host = format!("{port}-{id}.localhost:{}", r.proxy.port());
        let req = format!(
            "GET /who HTTP/1.1\r\nHost: {host}\r\nX-PandaStack-Access-Token: {}\r\n\
             Connection: close\r\n\r\n",
            url.token
        );
        let t = Instant::now();
        loop {
            let resp = http_raw(r.proxy, req.as_bytes(), Duration::from_secs(10))
                .await
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| e.to_string());
            // The status line is the upstream's (Python's server speaks HTTP/1.0).
            if resp.split(' ').nth(1) == Some("200") {
                assert!(resp.contains(&format!("served-by-{id}")), "{resp}");
                break;
            }
            // The server may still be starting: the proxy answers 502 until it listens.
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "preview of {id}:{port} through {}: {resp}",
                r.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// What a TLS client with `config` gets from `addr` (dialled as `name`) after the HTTP/2
/// preface: the first bytes the peer sends (an HTTP/2 server sends its SETTINGS at once), or
/// why there are none (the handshake's or the read's error, or the connection's end).
async fn probe(
    addr: std::net::SocketAddr,
    name: &str,
    config: rustls::ClientConfig,
) -> Result<Vec<u8>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let server = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let mut tls = connector
        .connect(server, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    // TLS 1.3: the client is done before the server has judged its certificate; the verdict
    // comes with the first read.
    let _ = tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    let mut buf = vec![0u8; 64];
    match tokio::time::timeout(Duration::from_secs(5), tls.read(&mut buf)).await {
        Ok(Ok(0)) => Err("closed without a byte".into()),
        Ok(Ok(n)) => Ok(buf[..n].to_vec()),
        Ok(Err(e)) => Err(format!("read: {e}")),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// A TLS 1.3 client configuration trusting only the cluster CA of `ca`, presenting `id`'s
/// certificate (none without).
fn client(ca: &Identity, id: Option<&Identity>, key_pem: Option<&str>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.ca().clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots);
    let mut config = match (id, key_pem) {
        (Some(id), Some(key)) => {
            use rustls::pki_types::pem::PemObject;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder
                .with_client_auth_cert(vec![id.cert().clone()], key)
                .unwrap()
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

/// An HTTP/2 frame header of type SETTINGS (what a server sends first).
fn is_settings(bytes: &[u8]) -> bool {
    bytes.len() >= 9 && bytes[3] == 0x04
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_refuses_callers_without_a_server_certificate_of_the_cluster() {
    use pandastack_agent_link::RemoteHost;
    let spec = ClusterSpec {
        replicas: 1,
        agents: 1,
        ..Default::default()
    };
    let Some(c) = Cluster::start(spec).await else {
        return;
    };
    let agent = &c.agents[0];
    let replica = Identity::load(&c.replicas[0].bundle).unwrap();
    let replica_key = std::fs::read_to_string(c.replicas[0].bundle.join("key.pem")).unwrap();
    let cluster_ca = std::fs::read_to_string(c.ca_dir.join("ca.pem")).unwrap();

    // The controls: the replica's own identity is served, over the link and on the wire.
    let ok = within(
        Duration::from_secs(10),
        "connect as the replica",
        RemoteHost::connect(&replica, agent.listen, &agent.host_id),
    )
    .await;
    assert!(ok.is_ok(), "{}", ok.err().map(|e| error_chain(&e)).unwrap());
    let served = probe(
        agent.listen,
        &agent.host_id,
        client(&replica, Some(&replica), Some(&replica_key)),
    )
    .await;
    assert!(
        served.as_ref().is_ok_and(|b| is_settings(b)),
        "the replica's certificate: {served:?}"
    );

    // No client certificate at all: the agent's port and the replica's membership port.
    for (what, addr, name) in [
        ("agent", agent.listen, agent.host_id.as_str()),
        (
            "membership",
            c.replicas[0].membership,
            c.replicas[0].name.as_str(),
        ),
    ] {
        let said = probe(addr, name, client(&replica, None, None))
            .await
            .expect_err("no certificate, no answer");
        eprintln!("{what} port, no certificate: {said}");
        assert!(
            said.contains("CertificateRequired") || said.contains("closed"),
            "{said}"
        );
    }

    // A server certificate with the replica's very name, from another CA.
    let other = TestCa::new();
    let issued = other
        .ca
        .issue(Role::Server, &c.replicas[0].name, &[], 1)
        .unwrap();
    let stranger = Identity::from_pem(&cluster_ca, &issued.cert_pem, &issued.key_pem).unwrap();
    let said = probe(
        agent.listen,
        &agent.host_id,
        client(&replica, Some(&stranger), Some(&issued.key_pem)),
    )
    .await
    .expect_err("another CA's certificate, no answer");
    eprintln!("another CA's certificate: {said}");
    assert!(
        said.contains("UnknownCA") || said.contains("BadCertificate") || said.contains("closed"),
        "{said}"
    );
    let e = within(
        Duration::from_secs(10),
        "connect with another CA's certificate",
        RemoteHost::connect(&stranger, agent.listen, &agent.host_id),
    )
    .await;
    assert!(e.is_err(), "another CA's certificate made a link");

    // An agent's certificate from the cluster CA: TLS admits it and HTTP/2 answers (agents
    // read each other's images through the `Peer` service), but no call of a replica's
    // (`Agent`) is served to it.
    let ca = pandastack_cluster::ClusterCa::open(&c.ca_dir).unwrap();
    let issued = ca.issue(Role::Agent, "host-9", &[], 1).unwrap();
    let peer_agent = Identity::from_pem(&cluster_ca, &issued.cert_pem, &issued.key_pem).unwrap();
    let served = probe(
        agent.listen,
        &agent.host_id,
        client(&replica, Some(&peer_agent), Some(&issued.key_pem)),
    )
    .await;
    assert!(
        served.as_ref().is_ok_and(|b| is_settings(b)),
        "an agent's certificate: {served:?}"
    );
    let e = within(
        Duration::from_secs(10),
        "connect as an agent",
        RemoteHost::connect(&peer_agent, agent.listen, &agent.host_id),
    )
    .await;
    let e = e.expect_err("an agent's certificate made a link");
    assert!(
        error_chain(&e).contains("may not call this service"),
        "{}",
        error_chain(&e)
    );

    // None of it cost the host anything.
    let h = c.host(0).await;
    assert_eq!(h.state.as_str(), "ready", "{h:?}");
}
