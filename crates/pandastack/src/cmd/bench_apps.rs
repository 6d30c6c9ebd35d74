//! `pandastack bench apps`: app hosting end to end with real guests. It starts its own server
//! on a temporary data directory with `--network on` (installs in build VMs reach the npm
//! registry) and the `app` template in its catalog, and deploys from local git repositories
//! (a bare repository and a work tree in a temporary directory, `git.url = file://<bare>`).
//!
//! What is measured (wall time seen by the client; the server's own `phases_ms` of each deploy
//! are recorded next to it, so that time in the emulator is not mistaken for the platform's):
//! - `deploy_static_s`: commit a changed `index.html`, `POST …/deploys`, poll the deploy every
//!   100 ms until `live` (`deploy_static_first_s`: the app's first deploy, which may build and
//!   bake the `app` template); `static_phase_<phase>_ms` and `switch_ms` from `phases_ms`;
//! - `rollback_ms`: once the newest standby version's VM is hibernated (10 s after the switch
//!   that replaced it), `POST …/rollback {}` until its 200 (wake, health check, switch); the
//!   page served through the proxy must then be that version's;
//! - `wake_first_byte_ms`: the live VM hibernated, then a `GET /` through the proxy until the
//!   response headers;
//! - `proxy_get_ms` and `direct_get_ms`: the same `GET /` of the warm page (same `Host`, same
//!   client library, keep-alive on the client's side), in alternation: through the proxy
//!   (`<app>.localhost:<proxy port>`), and straight to the app's server in its VM over the
//!   sandbox network — the most direct path into the VM there is: a socket made inside the live
//!   VM's network namespace (`/run/netns/<net name>-<slot>`, the slot from the sandbox's
//!   `sandbox.json`) connects to the guest's address (`10.88.0.2`, every guest's) and the app's
//!   port, over the TAP; nothing of the platform is on that path. `proxy_overhead_ms` is the
//!   difference of their p50s: what the proxy adds over calling the VM directly (#17's ≤ 1 ms).
//!   `api_health_ms` (`GET /v1/health` on the API) is the floor of a local HTTP round trip;
//!   `proxy_rps`: 16 concurrent clients for 5 s;
//! - unless `--skip-vite`: `deploy_vite_cold_s` (a `create-vite` React project: npm install in
//!   the build VM, `vite build`, plus the bake of the `app-m1024` template) and
//!   `deploy_vite_warm_s` (only `src/App.jsx` changed: the dependency cache replaces the
//!   install), with `vite_cold_phase_*`/`vite_warm_phase_*`; then `deploy_vite_locked_cold_s`:
//!   the same project with a lockfile (`npm install --package-lock-only` on the host), as a new
//!   app with no dependency cache: the npm fast path installs it (packages fetched on the host,
//!   unpacked in the VM, `npm rebuild`), with `vite_locked_phase_*`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use super::bench::{host_info, metric, ms, Metric};
use super::bench_volumes::{accel, start_server, Http, NET_NAME};

#[derive(Debug, clap::Args)]
pub(crate) struct AppsArgs {
    /// Parent of the data directory of the server this command starts (default:
    /// /var/lib/pandastack; a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Template catalog with `app.toml` (default: ./templates, then the installation's).
    #[arg(long)]
    templates_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Static redeploys, rollbacks and wakes.
    #[arg(long, default_value_t = 5)]
    iterations: usize,
    /// Skip the Vite project (npm on the host and the npm registry from the build VM).
    #[arg(long)]
    skip_vite: bool,
}

/// Samples per metric.
type Samples = BTreeMap<String, Vec<f64>>;
type R<T> = anyhow::Result<(T, Duration)>;

const STATIC_APP: &str = "bench-static";
const VITE_APP: &str = "bench-vite";
const VITE_LOCKED_APP: &str = "bench-vite-locked";
/// Longest a deploy may take (a first one may build the `app` image and bake it).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(2400);
/// Longest a replaced version's VM may take to be hibernated (the server waits 10 s).
const HIBERNATE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest a request through the proxy may take (one waking a VM included).
const PROXY_TIMEOUT: Duration = Duration::from_secs(120);
const SEQUENTIAL_GETS: usize = 200;
const RPS_CLIENTS: usize = 16;
const RPS_SECONDS: u64 = 5;

fn push(s: &mut Samples, k: impl Into<String>, v: f64) {
    s.entry(k.into()).or_default().push(v);
}

/// A live deploy's `switch` phase as `switch_ms` and, with a prefix, each of its `phases_ms`
/// as `<prefix>_<phase>_ms`.
fn push_phases(s: &mut Samples, prefix: Option<&str>, deploy: &Value) {
    let Some(phases) = deploy["phases_ms"].as_object() else {
        return;
    };
    for (k, v) in phases.iter().filter_map(|(k, v)| Some((k, v.as_f64()?))) {
        if k == "switch" {
            push(s, "switch_ms", v);
        }
        if let Some(p) = prefix {
            push(s, format!("{p}_{k}_ms"), v);
        }
    }
}

/// The REST API of the bench's server and its app proxy.
struct Bench {
    http: Http,
    api_url: String,
    /// Where the proxy listens (`127.0.0.1:<port>`) and its port (part of the host names).
    proxy: String,
    proxy_port: String,
    c: Client,
    /// The server's data directory (where `sandboxes/<id>/sandbox.json` names a VM's slot).
    data: PathBuf,
    /// Where `git daemon` serves the benchmark's repositories.
    git_port: u16,
}

impl Bench {
    /// `GET path` of app `name` through the proxy: status, body, time to the headers.
    async fn visit(&self, name: &str, path: &str) -> anyhow::Result<(StatusCode, String, f64)> {
        let t = Instant::now();
        let r = self
            .c
            .get(format!("http://{}{path}", self.proxy))
            .header("Host", format!("{name}.localhost:{}", self.proxy_port))
            .send()
            .await
            .with_context(|| format!("GET {path} of app {name} through the proxy"))?;
        let first_byte = ms(t.elapsed());
        let st = r.status();
        Ok((st, r.text().await.unwrap_or_default(), first_byte))
    }

    /// `visit`, failing unless it answers 200 with `want` in the body.
    async fn expect_page(&self, name: &str, want: &str) -> anyhow::Result<f64> {
        let (st, body, took) = self.visit(name, "/").await?;
        if st != StatusCode::OK || !body.contains(want) {
            bail!(
                "app {name} answered {st} without {want:?}: {}",
                snippet(&body)
            );
        }
        Ok(took)
    }

    /// A call that must answer `want`: the answer and its time.
    async fn req(&self, m: Method, path: &str, body: Option<Value>, want: StatusCode) -> R<Value> {
        self.http.expect(m, path, body, want).await
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.req(Method::GET, path, None, StatusCode::OK).await?.0)
    }

    /// Creates an app (its first deploy queued); the id of that deploy.
    async fn create_app(&self, body: Value) -> anyhow::Result<String> {
        let name = body["name"].as_str().unwrap_or_default().to_owned();
        self.http
            .expect(Method::POST, "/v1/apps", Some(body), StatusCode::CREATED)
            .await
            .with_context(|| format!("create app {name}"))?;
        let v = self.get(&format!("/v1/apps/{name}/deploys")).await?;
        str_of(&v["data"][0], "id")
    }

    /// Polls deploy `id` every 100 ms until it is live; fails with its error and log if it
    /// fails or is superseded.
    async fn wait_live(&self, name: &str, id: &str) -> anyhow::Result<Value> {
        let t = Instant::now();
        loop {
            let v = self.get(&format!("/v1/apps/{name}/deploys/{id}")).await?;
            match v["state"].as_str().unwrap_or_default() {
                "live" => return Ok(v),
                "failed" | "superseded" | "standby" => {
                    let log = self.deploy_log(name, id).await;
                    bail!(
                        "deploy {id} of {name} is {}: {}\n--- deploy log ---\n{log}",
                        v["state"],
                        v["error"].as_str().unwrap_or("(no error)")
                    );
                }
                _ if t.elapsed() > DEPLOY_TIMEOUT => {
                    bail!("deploy {id} of {name} not live after {DEPLOY_TIMEOUT:?}: {v}")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn deploy_log(&self, name: &str, id: &str) -> String {
        let path = format!("/v1/apps/{name}/deploys/{id}/logs");
        match self.http.call(Method::GET, &path, None).await {
            Ok((_, Value::String(text))) => text,
            Ok((st, v)) => format!("({st} {v})"),
            Err(e) => format!("(no log: {e:#})"),
        }
    }

    /// Deploys app `name` (already committed) and waits: the live deploy and the wall time.
    async fn redeploy(&self, name: &str) -> anyhow::Result<(Value, Duration)> {
        let t = Instant::now();
        let path = format!("/v1/apps/{name}/deploys");
        let body = Some(json!({}));
        let (d, _) = self
            .req(Method::POST, &path, body, StatusCode::ACCEPTED)
            .await?;
        let v = self.wait_live(name, &str_of(&d, "id")?).await?;
        Ok((v, t.elapsed()))
    }

    /// The live deploy of app `name`.
    async fn live_deploy(&self, name: &str) -> anyhow::Result<Value> {
        let app = self.get(&format!("/v1/apps/{name}")).await?;
        let id = str_of(&app, "live_deploy")?;
        self.get(&format!("/v1/apps/{name}/deploys/{id}")).await
    }

    /// The app's standby deploys that keep a VM, newest first.
    async fn standbys(&self, name: &str) -> anyhow::Result<Vec<Value>> {
        let v = self.get(&format!("/v1/apps/{name}/deploys")).await?;
        let all = v["data"].as_array().context("deploys: no data")?;
        Ok(all
            .iter()
            .filter(|d| d["state"] == "standby" && d["sandbox_id"].is_string())
            .cloned()
            .collect())
    }

    /// Waits until sandbox `id` is hibernated.
    async fn wait_hibernated(&self, id: &str) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            let v = self.get(&format!("/v1/sandboxes/{id}")).await?;
            if v["state"] == "hibernated" {
                return Ok(());
            }
            if t.elapsed() > HIBERNATE_TIMEOUT {
                bail!("sandbox {id} not hibernated after {HIBERNATE_TIMEOUT:?}: {v}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The network namespace the running VM of sandbox `id` is in (`/run/netns/<net name>-<slot>`).
    fn netns_of(&self, id: &str) -> anyhow::Result<PathBuf> {
        let path = self.data.join("sandboxes").join(id).join("sandbox.json");
        let info: Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| format!("read {}", path.display()))?,
        )?;
        let slot = info["net_slot"]
            .as_u64()
            .with_context(|| format!("sandbox {id} holds no network slot: {info}"))?;
        Ok(PathBuf::from(format!("/run/netns/{NET_NAME}-{slot}")))
    }

    async fn delete_app(&self, name: &str) -> anyhow::Result<()> {
        let path = format!("/v1/apps/{name}");
        self.req(Method::DELETE, &path, None, StatusCode::NO_CONTENT)
            .await?;
        Ok(())
    }
}

fn str_of(v: &Value, k: &str) -> anyhow::Result<String> {
    v[k].as_str()
        .map(str::to_owned)
        .with_context(|| format!("no {k} in {v}"))
}

fn snippet(s: &str) -> String {
    s.chars().take(300).collect()
}

/// `git -C dir args…` with a fixed identity; fails with git's stderr.
async fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=b@localhost"])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .context("run git")?;
    if !out.status.success() {
        bail!(
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// `git daemon` serving the benchmark's repositories on `127.0.0.1` (the server is allowed to
/// fetch from its address), in a process group of its own, killed whole when dropped (`git`
/// runs `git-daemon` as a child).
struct GitDaemon {
    child: std::process::Child,
    port: u16,
}

impl GitDaemon {
    fn start(root: &Path) -> anyhow::Result<Self> {
        use std::os::unix::process::CommandExt;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = std::process::Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", root.display()),
            ])
            .arg(root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .context("start git daemon")?;
        let daemon = Self { child, port };
        let t = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(
                t.elapsed() < Duration::from_secs(10),
                "git daemon: not listening on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(daemon)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A bare repository `<root>/<name>.git` and a work tree `<root>/<name>` (made if absent)
/// pushing to it; the app's `git.url` (the repository through `git daemon` on `git_port`).
async fn repo(root: &Path, name: &str, git_port: u16) -> anyhow::Result<(String, PathBuf)> {
    let bare = root.join(format!("{name}.git"));
    let work = root.join(name);
    std::fs::create_dir_all(&bare)?;
    std::fs::create_dir_all(&work)?;
    git(&bare, &["init", "-q", "--bare", "-b", "main"]).await?;
    git(&work, &["init", "-q", "-b", "main"]).await?;
    let bare_s = bare.to_str().context("repository path: not UTF-8")?;
    git(&work, &["remote", "add", "origin", bare_s]).await?;
    Ok((format!("git://127.0.0.1:{git_port}/{name}.git"), work))
}

/// Writes `files` into `work`, commits everything and pushes `main`.
async fn commit(work: &Path, files: &[(&str, String)], message: &str) -> anyhow::Result<()> {
    for (path, text) in files {
        let p = work.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&p, text).with_context(|| format!("write {}", p.display()))?;
    }
    git(work, &["add", "-A"]).await?;
    git(work, &["commit", "--quiet", "-m", message]).await?;
    git(work, &["push", "--quiet", "origin", "main"]).await
}

fn page(version: usize) -> String {
    format!("<!doctype html>\n<h1>bench static v{version}</h1>\n")
}

/// The templates directory given, or the first default one with `app.toml`; canonical.
pub(crate) fn templates_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match given {
        Some(d) => d.to_owned(),
        None => super::template::template_dirs()
            .into_iter()
            .find(|d| d.join("app.toml").is_file())
            .context("no templates directory with app.toml (pass --templates-dir)")?,
    };
    anyhow::ensure!(
        dir.join("app.toml").is_file(),
        "no app.toml in {}",
        dir.display()
    );
    Ok(std::fs::canonicalize(&dir)?)
}

pub(crate) async fn run(a: AppsArgs) -> anyhow::Result<ExitCode> {
    let templates = templates_dir(a.templates_dir.as_deref())?;
    if !a.skip_vite {
        check_npm().await?;
    }
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let (accel, accel_reason) = accel().await;
    eprintln!("accelerator: {accel} ({accel_reason})");

    let templates_arg = templates.to_str().context("templates dir: not UTF-8")?;
    let repos = tempfile::Builder::new()
        .prefix("ps-bench-apps-")
        .tempdir()?;
    let daemon = GitDaemon::start(repos.path())?;
    let allowed = format!("127.0.0.1:{}", daemon.port);
    let server = start_server(
        &parent,
        0,
        &[
            "--network",
            "on",
            "--templates-dir",
            templates_arg,
            "--allow-internal-fetch",
            &allowed,
        ],
    )
    .await?;
    let proxy_port = server
        .proxy
        .rsplit_once(':')
        .map(|(_, p)| p.to_owned())
        .context("proxy address without a port")?;
    let bench = Bench {
        http: Http::new(&server.url, &server.key),
        api_url: server.url.clone(),
        proxy: server.proxy.clone(),
        proxy_port,
        c: Client::builder().timeout(PROXY_TIMEOUT).build()?,
        data: server.dir.path().to_owned(),
        git_port: daemon.port,
    };
    let mut s = Samples::new();
    // The server goes (its VMs and data directory with it) when this returns.
    measure(&bench, &a, repos.path(), &mut s).await?;
    drop(server);

    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for (k, v) in s {
        let unit = match k.as_str() {
            "proxy_rps" => "req/s",
            k if k.ends_with("_s") => "s",
            _ => "ms",
        };
        metrics.insert(k, metric(v, unit));
    }
    print_table(&accel, &accel_reason, &metrics);
    if let Some(path) = &a.json {
        let doc = json!({
            "name": "apps",
            "accel": accel,
            "accel_reason": accel_reason,
            "host": host_info(),
            "iterations": a.iterations,
            "network": "on",
            "vite": !a.skip_vite,
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(accel: &str, reason: &str, metrics: &BTreeMap<String, Metric>) {
    println!("accelerator: {accel} ({reason})");
    println!(
        "{:<32} {:>12} {:>12} {:>5} unit",
        "metric", "p50", "p99", "n"
    );
    for (k, m) in metrics {
        println!(
            "{k:<32} {:>12.1} {:>12.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
}

async fn measure(b: &Bench, a: &AppsArgs, root: &Path, s: &mut Samples) -> anyhow::Result<()> {
    let pages = static_deploys(b, a, root, s).await?;
    rollbacks(b, a, &pages, s).await?;
    wakes(b, a, &pages, s).await?;
    // Replaced versions are hibernated 10 s after a switch: not during the latency runs.
    for d in b.standbys(STATIC_APP).await? {
        b.wait_hibernated(&str_of(&d, "sandbox_id")?).await?;
    }
    proxy_latency(b, s).await?;
    proxy_rps(b, s).await?;
    if !a.skip_vite {
        vite(b, root, s).await?;
        b.delete_app(VITE_APP).await?;
        vite_locked(b, root, s).await?;
        b.delete_app(VITE_LOCKED_APP).await?;
    }
    b.delete_app(STATIC_APP).await?;
    eprintln!("apps deleted");
    Ok(())
}

/// The static app's first deploy and `iterations` redeploys; each deploy id → its page's text.
async fn static_deploys(
    b: &Bench,
    a: &AppsArgs,
    root: &Path,
    s: &mut Samples,
) -> anyhow::Result<HashMap<String, String>> {
    let mut pages = HashMap::new();
    let (url, work) = repo(root, STATIC_APP, b.git_port).await?;
    commit(&work, &[("index.html", page(0))], "v0").await?;
    eprintln!("first static deploy (builds and bakes the app template if not cached)…");
    let t = Instant::now();
    let id = b
        .create_app(json!({"name": STATIC_APP, "git": {"url": url}, "min_instances": 1}))
        .await?;
    let v = b.wait_live(STATIC_APP, &id).await?;
    let secs = t.elapsed().as_secs_f64();
    push(s, "deploy_static_first_s", secs);
    push_phases(s, None, &v);
    b.expect_page(STATIC_APP, "bench static v0").await?;
    pages.insert(id, "bench static v0".to_owned());
    eprintln!("first static deploy: {secs:.1} s {}", v["phases_ms"]);

    for i in 1..=a.iterations {
        commit(&work, &[("index.html", page(i))], &format!("v{i}")).await?;
        let (v, took) = b.redeploy(STATIC_APP).await?;
        push(s, "deploy_static_s", took.as_secs_f64());
        push_phases(s, Some("static_phase"), &v);
        let want = format!("bench static v{i}");
        b.expect_page(STATIC_APP, &want).await?;
        pages.insert(str_of(&v, "id")?, want);
        let (n, secs) = (a.iterations, took.as_secs_f64());
        eprintln!("static deploy {i}/{n}: {secs:.1} s {}", v["phases_ms"]);
    }
    Ok(pages)
}

/// `iterations` rollbacks to the newest standby version, each once its VM is hibernated.
async fn rollbacks(
    b: &Bench,
    a: &AppsArgs,
    pages: &HashMap<String, String>,
    s: &mut Samples,
) -> anyhow::Result<()> {
    for i in 0..a.iterations {
        let standbys = b.standbys(STATIC_APP).await?;
        let target = standbys
            .first()
            .context("no standby version with a VM to roll back to")?;
        let (id, sandbox) = (str_of(target, "id")?, str_of(target, "sandbox_id")?);
        b.wait_hibernated(&sandbox).await?;
        let path = format!("/v1/apps/{STATIC_APP}/rollback");
        let (v, took) = b
            .req(Method::POST, &path, Some(json!({})), StatusCode::OK)
            .await?;
        push(s, "rollback_ms", ms(took));
        anyhow::ensure!(v["id"] == id.as_str(), "rolled back to {v}, want {id}");
        let want = pages
            .get(&id)
            .with_context(|| format!("deploy {id}: not one of the bench's"))?;
        b.expect_page(STATIC_APP, want).await?;
        let (i, n, took) = (i + 1, a.iterations, ms(took));
        eprintln!("rollback {i}/{n} to {want:?}: {took:.0} ms");
    }
    Ok(())
}

/// `iterations` times: the live VM hibernated, then a request through the proxy wakes it.
async fn wakes(
    b: &Bench,
    a: &AppsArgs,
    pages: &HashMap<String, String>,
    s: &mut Samples,
) -> anyhow::Result<()> {
    for i in 0..a.iterations {
        let live = b.live_deploy(STATIC_APP).await?;
        let sandbox = str_of(&live, "sandbox_id")?;
        let want = pages
            .get(&str_of(&live, "id")?)
            .context("the live deploy is not one of the bench's")?;
        let path = format!("/v1/sandboxes/{sandbox}/hibernate");
        b.req(Method::POST, &path, None, StatusCode::OK).await?;
        let took = b.expect_page(STATIC_APP, want).await?;
        push(s, "wake_first_byte_ms", took);
        eprintln!("wake {}/{}: {took:.0} ms", i + 1, a.iterations);
    }
    Ok(())
}

/// Sequential GETs of the warm page, through the proxy and straight to the VM in alternation
/// (so that whatever else the machine does weighs on both alike), each path's first one off
/// the clock; then the API's health (the floor of a local HTTP round trip).
async fn proxy_latency(b: &Bench, s: &mut Samples) -> anyhow::Result<()> {
    let live = b.live_deploy(STATIC_APP).await?;
    let sandbox = str_of(&live, "sandbox_id")?;
    let port = live["plan"]["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .with_context(|| format!("no port in the live deploy's plan: {live}"))?;
    let host = format!("{STATIC_APP}.localhost:{}", b.proxy_port);
    let direct = Direct::start(&b.netns_of(&sandbox)?, port, &host)?;
    b.visit(STATIC_APP, "/").await?;
    direct.get().await?;
    let (mut proxy, mut straight) = (Vec::new(), Vec::new());
    for _ in 0..SEQUENTIAL_GETS {
        let t = Instant::now();
        let (st, _, _) = b.visit(STATIC_APP, "/").await?;
        anyhow::ensure!(st == StatusCode::OK, "proxy GET: {st}");
        proxy.push(ms(t.elapsed()));
        straight.push(direct.get().await?);
    }
    let health = format!("{}/v1/health", b.api_url);
    let mut api = Vec::new();
    for i in 0..=SEQUENTIAL_GETS {
        let t = Instant::now();
        let r = b.c.get(&health).send().await.context("GET /v1/health")?;
        let st = r.status();
        r.bytes().await?;
        anyhow::ensure!(st == StatusCode::OK, "GET /v1/health: {st}");
        if i > 0 {
            api.push(ms(t.elapsed()));
        }
    }
    let (p, d) = (
        metric(proxy.clone(), "ms").p50,
        metric(straight.clone(), "ms").p50,
    );
    push(s, "proxy_overhead_ms", p - d);
    s.insert("proxy_get_ms".into(), proxy);
    s.insert("direct_get_ms".into(), straight);
    s.insert("api_health_ms".into(), api);
    eprintln!(
        "proxy GETs done: p50 {p:.2} ms through the proxy, {d:.2} ms direct (overhead {:.2} ms)",
        p - d
    );
    Ok(())
}

/// One timed `GET /` straight to the VM: its status and milliseconds, or why not.
type DirectReply = tokio::sync::oneshot::Sender<anyhow::Result<(StatusCode, f64)>>;

/// A client of an app's server over the sandbox network: a thread of its own inside the VM's
/// network namespace (sockets belong to the namespace of the thread that makes them) with a
/// runtime of its own, timing the GETs it is asked for. It ends when this is dropped.
struct Direct {
    ask: tokio::sync::mpsc::Sender<DirectReply>,
}

impl Direct {
    fn start(netns: &Path, port: u16, host: &str) -> anyhow::Result<Self> {
        let ns = std::fs::File::open(netns)
            .with_context(|| format!("open the VM's network namespace {}", netns.display()))?;
        let url = format!("http://{}:{port}/", pandastack_net::GUEST_IP);
        let host = host.to_owned();
        let (ask, mut asked) = tokio::sync::mpsc::channel::<DirectReply>(1);
        std::thread::Builder::new()
            .name("bench-direct".into())
            .spawn(move || {
                use std::os::fd::AsFd;
                let ready = pandastack_net::setns_fd(ns.as_fd())
                    .context("enter the VM's network namespace")
                    .and_then(|()| {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()?;
                        let c = Client::builder()
                            .no_proxy()
                            .timeout(PROXY_TIMEOUT)
                            .build()?;
                        Ok((rt, c))
                    });
                let (rt, c) = match ready {
                    Ok(v) => v,
                    Err(e) => {
                        let e = format!("{e:#}");
                        while let Some(reply) = asked.blocking_recv() {
                            let _ = reply.send(Err(anyhow::anyhow!("{e}")));
                        }
                        return;
                    }
                };
                rt.block_on(async move {
                    while let Some(reply) = asked.recv().await {
                        let t = Instant::now();
                        let r = async {
                            let r = c.get(&url).header("Host", &host).send().await?;
                            let st = r.status();
                            r.text().await?;
                            Ok::<_, anyhow::Error>((st, ms(t.elapsed())))
                        }
                        .await
                        .with_context(|| format!("GET {url} in the VM's network namespace"));
                        let _ = reply.send(r);
                    }
                });
            })?;
        Ok(Self { ask })
    }

    /// A `GET /` that must answer 200: its milliseconds.
    async fn get(&self) -> anyhow::Result<f64> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.ask
            .send(tx)
            .await
            .map_err(|_| anyhow::anyhow!("the direct client's thread ended"))?;
        let (st, took) = rx
            .await
            .map_err(|_| anyhow::anyhow!("the direct client's thread ended"))??;
        anyhow::ensure!(st == StatusCode::OK, "direct GET: {st}");
        Ok(took)
    }
}

/// Requests/s of the static page through the proxy: `RPS_CLIENTS` loops for `RPS_SECONDS`.
async fn proxy_rps(b: &Bench, s: &mut Samples) -> anyhow::Result<()> {
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let host = format!("{STATIC_APP}.localhost:{}", b.proxy_port);
    let url = format!("http://{}/", b.proxy);
    let t = Instant::now();
    let deadline = t + Duration::from_secs(RPS_SECONDS);
    let tasks: Vec<_> = (0..RPS_CLIENTS)
        .map(|_| {
            let (c, url, host) = (b.c.clone(), url.clone(), host.clone());
            let (ok, bad) = (Arc::clone(&ok), Arc::clone(&bad));
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let r = c.get(&url).header("Host", &host).send().await;
                    let good = match r {
                        Ok(r) => r.status() == StatusCode::OK && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    let n = if good { &ok } else { &bad };
                    n.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.context("a load client panicked")?;
    }
    let secs = t.elapsed().as_secs_f64();
    let (ok, bad) = (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    anyhow::ensure!(
        ok > 0,
        "no request through the proxy succeeded ({bad} failed)"
    );
    if bad > 0 {
        eprintln!("warning: {bad} of {} proxied requests failed", ok + bad);
    }
    let rps = ok as f64 / secs;
    push(s, "proxy_rps", rps);
    eprintln!("proxy throughput: {rps:.0} req/s with {RPS_CLIENTS} clients");
    Ok(())
}

async fn check_npm() -> anyhow::Result<()> {
    let out = tokio::process::Command::new("npm")
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => bail!(
            "npm --version failed ({}): the Vite deploys need npm on this host; pass --skip-vite",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => bail!("no npm on this host ({e}): the Vite deploys need it; pass --skip-vite"),
    }
}

/// Creates app `name` from `url` (a Vite project, 1 GiB) and times its first deploy to live
/// as `metric`, its phases as `<phases>_*_ms`; the live deploy.
async fn cold_vite_deploy(
    b: &Bench,
    s: &mut Samples,
    name: &str,
    url: &str,
    (metric, phases): (&str, &str),
) -> anyhow::Result<Value> {
    let t = Instant::now();
    let id = b
        .create_app(json!({
            "name": name, "git": {"url": url}, "min_instances": 1, "memory_mb": 1024,
        }))
        .await?;
    let cold = b.wait_live(name, &id).await?;
    let secs = t.elapsed().as_secs_f64();
    push(s, metric, secs);
    push_phases(s, Some(phases), &cold);
    b.expect_page(name, "<div id=\"root\">").await?;
    eprintln!("{name}: first deploy {secs:.1} s {}", cold["phases_ms"]);
    Ok(cold)
}

/// The Vite project of [`vite`] with a lockfile, as a new app: a cold deploy through the npm
/// fast path.
async fn vite_locked(b: &Bench, root: &Path, s: &mut Samples) -> anyhow::Result<()> {
    let (url, work) = repo(root, VITE_LOCKED_APP, b.git_port).await?;
    let copy = format!(
        "git -C '{}' archive HEAD | tar -x -C '{}' && npm install --package-lock-only --no-audit --no-fund",
        root.join(VITE_APP).display(),
        work.display()
    );
    let out = tokio::process::Command::new("sh")
        .args(["-c", &copy])
        .current_dir(&work)
        .stdin(Stdio::null())
        .output()
        .await
        .context("copy the Vite project and lock it")?;
    if !out.status.success() {
        bail!(
            "lock the Vite project ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    commit(&work, &[], "create-vite with its lockfile").await?;
    eprintln!("cold Vite deploy with a lockfile (the npm fast path)…");
    let cold = cold_vite_deploy(
        b,
        s,
        VITE_LOCKED_APP,
        &url,
        ("deploy_vite_locked_cold_s", "vite_locked_phase"),
    )
    .await?;
    if !cold["phases_ms"]["install_fetch"].is_u64() {
        eprintln!(
            "WARNING: the locked Vite deploy did not take the npm fast path (phases {}); see \
             its deploy log",
            cold["phases_ms"]
        );
    }
    Ok(())
}

/// `npm create vite` (React) in `root`: the project's directory.
async fn create_vite(root: &Path) -> anyhow::Result<PathBuf> {
    let run = tokio::process::Command::new("npm")
        .args(["create", "-y", "vite@latest", VITE_APP, "--"])
        .args(["--template", "react", "--no-interactive"])
        .current_dir(root)
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(Duration::from_secs(600), run)
        .await
        .context("npm create vite: no end after 600 s")?
        .context("run npm create vite (or pass --skip-vite)")?;
    let dir = root.join(VITE_APP);
    if !out.status.success() || !dir.join("package.json").is_file() {
        bail!(
            "npm create vite failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(dir)
}

/// A `create-vite` React project: cold deploy (install + build), then a change to
/// `src/App.jsx` only (the dependency cache must replace the install).
async fn vite(b: &Bench, root: &Path, s: &mut Samples) -> anyhow::Result<()> {
    eprintln!("generating a Vite project with npm create vite…");
    create_vite(root).await?;
    let (url, work) = repo(root, VITE_APP, b.git_port).await?;
    commit(&work, &[], "create-vite").await?;
    eprintln!("cold Vite deploy (npm install in the VM; may bake the app-m1024 template)…");
    cold_vite_deploy(
        b,
        s,
        VITE_APP,
        &url,
        ("deploy_vite_cold_s", "vite_cold_phase"),
    )
    .await?;

    let app_jsx = work.join("src/App.jsx");
    let text = std::fs::read_to_string(&app_jsx)
        .with_context(|| format!("{}: not a create-vite React project?", app_jsx.display()))?;
    let changed = format!("{text}\n// bench: warm redeploy\n");
    commit(&work, &[("src/App.jsx", changed)], "change App.jsx").await?;
    let (warm, took) = b.redeploy(VITE_APP).await?;
    push(s, "deploy_vite_warm_s", took.as_secs_f64());
    push_phases(s, Some("vite_warm_phase"), &warm);
    b.expect_page(VITE_APP, "<div id=\"root\">").await?;
    let secs = took.as_secs_f64();
    eprintln!("warm Vite deploy: {secs:.1} s {}", warm["phases_ms"]);
    let phases = &warm["phases_ms"];
    if !phases["deps_restore"].is_u64() || !phases["install"].is_null() {
        eprintln!(
            "WARNING: the warm Vite deploy did not skip the install through the dependency \
             cache (phases {phases}); deploy_vite_warm_s is not a warm figure"
        );
    }
    Ok(())
}
