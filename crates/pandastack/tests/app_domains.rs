//! Custom domains of apps through the real server and a real guest: a static site deployed
//! from a local repository answers at its extra host names over the proxy's TLS listener, and
//! plain HTTP to them is redirected there (`--https-redirect`) — one name with a certificate from the operator's directory, one with
//! a certificate issued over ACME by Debian's `pebble` (the ACME test CA), which validates the
//! HTTP-01 challenge by fetching it from the proxy; names resolve through
//! `pebble-challtestsrv`'s DNS, which answers 127.0.0.1 for everything. Bad domains are refused
//! with nothing made, a name nothing covers gets no TLS handshake, and removing a domain stops
//! its traffic.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, GitDaemon, Server};
use pandastack_testkit::runtime;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Longest the deploy may take (the first one here bakes the `app` template).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(1500);
/// Longest the ACME order may take.
const ISSUE_TIMEOUT: Duration = Duration::from_secs(120);

/// A CA and a server certificate it signed for `names`, as PEM (ca, chain, key).
struct TestPki {
    ca_pem: String,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl TestPki {
    fn new(name: &str) -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, format!("{name} test CA"));
        let ca_key = KeyPair::generate().unwrap();
        let ca = p.self_signed(&ca_key).unwrap();
        Self {
            ca_pem: ca.pem(),
            ca,
            ca_key,
        }
    }

    /// (certificate PEM, key PEM) for `names`.
    fn leaf(&self, names: &[&str]) -> (String, String) {
        let p = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// `pebble` and `pebble-challtestsrv`, killed when dropped.
struct Pebble {
    children: Vec<Child>,
    /// The ACME directory URL.
    directory: String,
    /// Management interface (`/roots/0` is the root of what pebble issues).
    management: String,
    /// Trusted for pebble's own HTTPS (directory and management).
    ca_file: PathBuf,
    client: Client,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(program: &str, args: &[&str], envs: &[(&str, &str)], log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    Command::new(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("start {program} (Debian package `pebble`): {e}"))
}

async fn wait_port(addr: SocketAddr, what: &str) {
    let t = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what} did not listen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Pebble {
    /// Starts the CA; it validates HTTP-01 challenges on port `http_port` of 127.0.0.1.
    async fn start(dir: &Path, acme_port: u16, http_port: u16) -> Self {
        let pki = TestPki::new("pebble");
        let (cert, key) = pki.leaf(&["localhost", "127.0.0.1"]);
        let ca_file = dir.join("pebble-ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).unwrap();
        std::fs::write(dir.join("pebble-cert.pem"), cert).unwrap();
        std::fs::write(dir.join("pebble-key.pem"), key).unwrap();
        let (mgmt, dns, dns_mgmt, tls) = (free_port(), free_port(), free_port(), free_port());
        let config = json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{acme_port}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": dir.join("pebble-cert.pem"),
            "privateKey": dir.join("pebble-key.pem"),
            "httpPort": http_port,
            "tlsPort": tls,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        let config_file = dir.join("pebble.json");
        std::fs::write(&config_file, config.to_string()).unwrap();
        let dns_addr = format!("127.0.0.1:{dns}");
        let dns_mgmt = format!("127.0.0.1:{dns_mgmt}");
        // Every name is 127.0.0.1 (and has no IPv6 address): the proxy's listeners.
        let challtest = spawn(
            "pebble-challtestsrv",
            &[
                "-dns01",
                &dns_addr,
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-management",
                &dns_mgmt,
                "-defaultIPv4",
                "127.0.0.1",
                "-defaultIPv6",
                "",
            ],
            &[],
            &dir.join("challtestsrv.log"),
        );
        let pebble = spawn(
            "pebble",
            &[
                "-config",
                config_file.to_str().unwrap(),
                "-dnsserver",
                &dns_addr,
            ],
            // No artificial sleeps, no rejected nonces: the test is about us, not retries.
            &[("PEBBLE_VA_NOSLEEP", "1"), ("PEBBLE_WFE_NONCEREJECT", "0")],
            &dir.join("pebble.log"),
        );
        let me = Self {
            children: vec![challtest, pebble],
            directory: format!("https://127.0.0.1:{acme_port}/dir"),
            management: format!("https://127.0.0.1:{mgmt}"),
            client: Client::builder()
                .tls_built_in_root_certs(false)
                .add_root_certificate(
                    reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap(),
                )
                .build()
                .unwrap(),
            ca_file,
        };
        wait_port(format!("127.0.0.1:{acme_port}").parse().unwrap(), "pebble").await;
        wait_port(
            format!("127.0.0.1:{mgmt}").parse().unwrap(),
            "pebble management",
        )
        .await;
        me
    }

    /// The root CA certificate of what pebble issues (made anew at each start).
    async fn issuing_root(&self) -> String {
        let r = self
            .client
            .get(format!("{}/roots/0", self.management))
            .send()
            .await
            .expect("pebble /roots/0");
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A bare repository holding one commit of a static site, served by `daemon`; its URL.
fn site_repo(root: &Path, text: &str, daemon: &GitDaemon) -> String {
    let (bare, work) = (root.join("site.git"), root.join("site"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("index.html"), text).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "--quiet", "-m", "site"]);
    git(
        root,
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    daemon.url(&bare)
}

/// `GET /` with `Host: <host>` on the proxy's plain listener (redirects not followed).
async fn plain(s: &Server, host: &str) -> (StatusCode, String) {
    plain_to(s, host, "/").await
}

/// `GET <path>` with `Host: <host>` on the proxy's plain listener; a redirect's body is its
/// `Location`.
async fn plain_to(s: &Server, host: &str, path: &str) -> (StatusCode, String) {
    let r = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("http://{}{path}", s.proxy))
        .header("Host", host)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("request through the proxy");
    let st = r.status();
    if st.is_redirection() {
        let to = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_owned());
        return (st, to.unwrap_or_default());
    }
    (st, r.text().await.unwrap_or_default())
}

/// `GET https://<host>:<port>/` on the TLS listener, trusting only `root`.
async fn https(addr: SocketAddr, host: &str, root: &str) -> reqwest::Result<(StatusCode, String)> {
    let c = Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(root.as_bytes()).unwrap())
        .resolve(host, addr)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let r = c
        .get(format!("https://{host}:{}/", addr.port()))
        .send()
        .await?;
    let st = r.status();
    Ok((st, r.text().await.unwrap_or_default()))
}

/// The app's domain `name` as the API shows it.
async fn domain(api: &Api<'_>, app: &str, name: &str) -> Value {
    let (st, v) = api.call("GET", &format!("/v1/apps/{app}"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["domains"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} not among the domains of {v}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_domains_serve_http_and_tls_from_files_and_acme() {
    let guard = runtime().await;
    let data = guard.dir.path();
    let specs = data.join("no-specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/app.toml");
    std::fs::copy(spec, specs.join("app.toml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let daemon = GitDaemon::start(root);
    let [allow, allowed] = daemon.allow_args();

    // The operator's certificate directory: one name covered by a CA of our own.
    let ours = TestPki::new("operator");
    let certs = root.join("certs");
    let (cert, key) = ours.leaf(&["files.example.test"]);
    std::fs::create_dir_all(certs.join("files.example.test")).unwrap();
    std::fs::write(certs.join("files.example.test/fullchain.pem"), cert).unwrap();
    std::fs::write(certs.join("files.example.test/privkey.pem"), key).unwrap();

    let (acme_port, tls_port) = (free_port(), free_port());
    let tls_addr: SocketAddr = format!("127.0.0.1:{tls_port}").parse().unwrap();
    let pebble_dir = root.join("pebble");
    std::fs::create_dir_all(&pebble_dir).unwrap();
    let ca_file = pebble_dir.join("pebble-ca.pem");
    let directory = format!("https://127.0.0.1:{acme_port}/dir");
    let tls_listen = tls_addr.to_string();
    let server = start_with(
        data,
        free_port(),
        &[
            "--pool-size",
            "0",
            "--network",
            "off",
            "--proxy-tls-listen",
            &tls_listen,
            "--tls-cert-dir",
            certs.to_str().unwrap(),
            "--acme-directory",
            &directory,
            "--acme-ca",
            ca_file.to_str().unwrap(),
            "--acme-contact",
            "ops@example.test",
            "--https-redirect",
            &allow,
            &allowed,
        ],
    )
    .await;
    let proxy_port: u16 = server.proxy.rsplit_once(':').unwrap().1.parse().unwrap();
    let pebble = Pebble::start(&pebble_dir, acme_port, proxy_port).await;
    assert_eq!(pebble.directory, directory);
    assert_eq!(pebble.ca_file, ca_file);
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    // Bad domains: a clear error, nothing made.
    for (domains, status, says) in [
        (
            json!(["Shop.Example.test"]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "domains[0]",
        ),
        (
            json!(["a.example.test", "a.example.test"]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "twice",
        ),
        (
            json!(["x.localhost"]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "platform's domain",
        ),
        (
            json!(["10.0.0.1"]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "domains[0]",
        ),
    ] {
        let (st, v) = api
            .call(
                "POST",
                "/v1/apps",
                Some(json!({"name": "bad", "git": {"url": "https://git.example.com/nowhere.git"}, "domains": domains})),
            )
            .await;
        assert_eq!(st, status, "{domains}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
        let (st, v) = api.call("GET", "/v1/apps/bad", None).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    }

    // A static site with two custom domains.
    let url = site_repo(root, "<h1>hello from the custom domain</h1>\n", &daemon);
    let (st, app) = api
        .call(
            "POST",
            "/v1/apps",
            Some(json!({
                "name": "shop",
                "git": {"url": url},
                "min_instances": 1,
                "domains": ["shop.example.test", "files.example.test"],
            })),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{app}");
    let shown: Vec<(&str, &str)> = app["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), d["tls"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("files.example.test", "files"),
            ("shop.example.test", "pending")
        ],
        "{app}"
    );

    // Another app cannot take a name this one has.
    let (st, v) = api
        .call(
            "POST",
            "/v1/apps",
            Some(json!({"name": "thief", "git": {"url": "https://git.example.com/nowhere.git"}, "domains": ["shop.example.test"]})),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{v}");
    let (st, _) = api.call("GET", "/v1/apps/thief", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND);

    // The ACME order: pebble fetches the challenge from the proxy and issues.
    let t = Instant::now();
    loop {
        let d = domain(&api, "shop", "shop.example.test").await;
        match d["tls"].as_str().unwrap() {
            "issued" => {
                assert!(d["tls_expires_at"].is_string(), "{d}");
                eprintln!("certificate issued in {:.1} s", t.elapsed().as_secs_f64());
                break;
            }
            "failed" => panic!(
                "ACME order failed: {d}\npebble log:\n{}",
                std::fs::read_to_string(pebble_dir.join("pebble.log")).unwrap_or_default()
            ),
            _ => {}
        }
        assert!(
            t.elapsed() < ISSUE_TIMEOUT,
            "no certificate: {d}\npebble log:\n{}",
            std::fs::read_to_string(pebble_dir.join("pebble.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The first deploy goes live.
    let (_, list) = api.call("GET", "/v1/apps/shop/deploys", None).await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let t = Instant::now();
    loop {
        let (_, d) = api
            .call("GET", &format!("/v1/apps/shop/deploys/{id}"), None)
            .await;
        match d["state"].as_str().unwrap_or_default() {
            "live" => break,
            "failed" => panic!("deploy failed: {d}"),
            _ => {}
        }
        assert!(t.elapsed() < DEPLOY_TIMEOUT, "deploy still {}", d["state"]);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Plain HTTP by host name (any case, with a port): both names have a certificate, so
    // `--https-redirect` sends the request to the same path and query over HTTPS.
    for (host, name) in [
        ("shop.example.test".to_owned(), "shop.example.test"),
        (
            format!("FILES.example.test:{proxy_port}"),
            "files.example.test",
        ),
    ] {
        let (st, to) = plain_to(&server, &host, "/a/b?c=d").await;
        assert_eq!(st, StatusCode::PERMANENT_REDIRECT, "{host}: {to}");
        assert_eq!(to, format!("https://{name}:{tls_port}/a/b?c=d"));
    }
    let (st, body) = plain(&server, "unknown.example.test").await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{body}");

    // HTTPS with the certificate ACME issued, trusted through pebble's root alone.
    let pebble_root = pebble.issuing_root().await;
    let (st, body) = https(tls_addr, "shop.example.test", &pebble_root)
        .await
        .expect("https to the ACME-certified name");
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(body.contains("hello from the custom domain"), "{body}");
    // The one from the operator's directory, trusted through the operator's CA alone.
    let (st, body) = https(tls_addr, "files.example.test", &ours.ca_pem)
        .await
        .expect("https to the file-certified name");
    assert_eq!(st, StatusCode::OK, "{body}");
    // Each name has its own certificate: pebble's root does not vouch for the file one.
    assert!(https(tls_addr, "files.example.test", &pebble_root)
        .await
        .is_err());
    // A name nothing covers: no handshake (no default certificate configured).
    assert!(https(tls_addr, "unknown.example.test", &pebble_root)
        .await
        .is_err());

    // Dropping a domain stops its traffic; the other keeps its certificate.
    let (st, v) = api
        .call(
            "PATCH",
            "/v1/apps/shop",
            Some(json!({"domains": ["files.example.test"]})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["domains"].as_array().unwrap().len(), 1, "{v}");
    let (st, _) = plain(&server, "shop.example.test").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = https(tls_addr, "files.example.test", &ours.ca_pem)
        .await
        .unwrap();
    assert_eq!(st, StatusCode::OK);

    // The freed name can go to another app; deleting the app frees its names.
    let (st, v) = api.call("DELETE", "/v1/apps/shop", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    let (st, _) = plain(&server, "files.example.test").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, v) = api
        .call(
            "POST",
            "/v1/apps",
            Some(
                json!({"name": "next", "git": {"url": "https://git.example.com/nowhere.git"}, "deploy": false,
                        "domains": ["files.example.test", "shop.example.test"]}),
            ),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = api.call("DELETE", "/v1/apps/next", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    drop(server);
}
