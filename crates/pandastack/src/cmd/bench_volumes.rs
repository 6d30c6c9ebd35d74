//! `pandastack bench volumes`: durable volumes through the REST API with real guests (issue #15)
//! — volume create, sandbox create with a volume against one without (warm pool on, then a second
//! server with the pool off), volume snapshots with the holder running and with no holder, first
//! and incremental backups, and a restore from a backup. It starts its own server on a temporary
//! data directory unless `--base-url` and `--api-key` point it at a running one (then the
//! pool-off phase is skipped).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::{Client, Method, StatusCode};
use serde_json::{json, Value};

use super::bench::{host_info, metric, ms, Metric};

#[derive(Debug, clap::Args)]
pub(crate) struct VolumesArgs {
    /// A running server to measure (with --api-key); default: start one.
    #[arg(long, env = "PANDASTACK_BASE_URL", requires = "api_key")]
    base_url: Option<String>,
    #[arg(long, env = "PANDASTACK_API_KEY")]
    api_key: Option<String>,
    /// Template to create sandboxes from (it needs volume slots; the servers this command starts
    /// bake it with the default two).
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Parent of the data directories of the servers this command starts (default:
    /// /var/lib/pandastack; each is a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Samples of each latency: volume creates, creates with and without a volume (each, per
    /// phase), snapshots (attached and detached) and restores.
    #[arg(long, default_value_t = 5)]
    iterations: usize,
    /// Incremental backups, each after 10 MiB changed in the volume.
    #[arg(long, default_value_t = 3)]
    incremental_backups: usize,
    /// MiB of random data written to the 1 GiB volume before its snapshots and first backup.
    #[arg(long, default_value_t = 256)]
    data_mib: u64,
    /// Pause before each sandbox create, so that the warm pool has refilled (ms).
    #[arg(long, default_value_t = 1500)]
    create_gap_ms: u64,
    /// Skip the second phase (a server started with `--pool-size 0`).
    #[arg(long)]
    skip_nopool: bool,
}

const MIB: f64 = (1 << 20) as f64;
/// What an incremental backup follows: 10 MiB written in the guest.
const CHANGED: u64 = 10 << 20;

/// The server this command started; stopped (with its VMs) and its data directory removed on
/// drop.
pub(crate) struct OwnServer {
    child: Child,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) url: String,
    pub(crate) key: String,
    /// Where its preview (and app) proxy listens: `127.0.0.1:<port>`.
    pub(crate) proxy: String,
    /// Its command line (for a restart).
    args: Vec<String>,
    /// Its `--net-name` (its network objects are removed with it).
    net_name: String,
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        // SIGTERM first so that it can take its network objects down; then whatever is left.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its sandboxes (and warm VMs) outlive it by design; a throwaway server's must go with it,
        // and so must its network objects (a server leaves them for its next start).
        kill_processes_under(self.dir.path());
        remove_network(&self.net_name);
    }
}

/// `--net-name` of the servers this command starts.
pub(crate) const NET_NAME: &str = "psbv";

/// What a command prints on stdout (empty when it cannot run or fails to say anything).
pub(crate) fn output(args: &[&str]) -> String {
    std::process::Command::new(args[0])
        .args(&args[1..])
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The network namespaces (`<name>-N`) and host veths (`<name>vN`) of a server's network named
/// `name`.
pub(crate) fn network_links(name: &str) -> (Vec<String>, Vec<String>) {
    let netns = output(&["ip", "netns", "list"])
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|ns| ns.strip_prefix(name).is_some_and(|r| r.starts_with('-')))
        .map(str::to_owned)
        .collect();
    let veths = output(&["ip", "-o", "link", "show"])
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|l| l.split('@').next().unwrap_or_default())
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('v')))
        .map(str::to_owned)
        .collect();
    (netns, veths)
}

/// Deletes the namespaces (`<name>-N`, their veths with them), leftover host veths
/// (`<name>vN`) and the nftables table of a server's network named `name`.
fn remove_network(name: &str) {
    let (netns, veths) = network_links(name);
    for ns in netns {
        output(&["ip", "netns", "del", &ns]);
    }
    for l in veths {
        output(&["ip", "link", "del", &l]);
    }
    output(&[
        "nft",
        "delete",
        "table",
        "inet",
        &format!("pandastack_{name}"),
    ]);
}

/// SIGKILLs processes whose working directory is below `dir` (QEMU runs in its run directory)
/// or whose command line names a path below it.
fn kill_processes_under(dir: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    let needle = format!("{}/", dir.display());
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let in_dir = std::fs::read_link(p.path().join("cwd")).is_ok_and(|c| c.starts_with(dir));
        let names_dir = std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle));
        if in_dir || names_dir {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Starts `pandastack server` on a new temporary data directory under `parent`, with
/// `--pool-size pool_size` and its own network names and range (so that it does not meet a
/// server with the defaults on this host), and `extra` arguments.
pub(crate) async fn start_server(
    parent: &Path,
    pool_size: usize,
    extra: &[&str],
) -> anyhow::Result<OwnServer> {
    start_server_on(parent, pool_size, (NET_NAME, "10.213.0.0/16"), extra).await
}

/// [`start_server`] with network names and addresses of its own (`--net-name`, `--net-base`):
/// for a command whose server may run beside another bench's.
pub(crate) async fn start_server_on(
    parent: &Path,
    pool_size: usize,
    (net_name, net_base): (&str, &str),
    extra: &[&str],
) -> anyhow::Result<OwnServer> {
    std::fs::create_dir_all(parent)?;
    let dir = tempfile::Builder::new()
        .prefix("bench-volumes-")
        .tempdir_in(parent)
        .context("scratch data dir")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let db_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let key_file = dir.path().join("key");
    let data = dir
        .path()
        .to_str()
        .context("data dir: not UTF-8")?
        .to_owned();
    let mut args: Vec<String> = [
        "server",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--proxy-listen",
        &format!("127.0.0.1:{proxy_port}"),
        "--db-listen",
        &format!("127.0.0.1:{db_port}"),
        "--data-dir",
        &data,
        "--key-file",
        &format!("{data}/key"),
        "--pool-size",
        &pool_size.to_string(),
        "--net-name",
        net_name,
        "--net-base",
        net_base,
        "--max-sandboxes",
        "100000",
        "--creates-per-minute",
        "1000000",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    let child = spawn_server(&args)?;
    let mut server = OwnServer {
        child,
        dir,
        url: format!("http://127.0.0.1:{port}"),
        key: String::new(),
        proxy: format!("127.0.0.1:{proxy_port}"),
        args,
        net_name: net_name.to_owned(),
    };
    server.until_up(&key_file).await?;
    Ok(server)
}

fn spawn_server(args: &[String]) -> anyhow::Result<Child> {
    std::process::Command::new(std::env::current_exe()?)
        .args(args)
        // The caller's PANDASTACK_LOG (e.g. `pandastack_runtime=debug` to see each restore's
        // phases) reaches the server; warnings only otherwise.
        .env(
            "PANDASTACK_LOG",
            std::env::var("PANDASTACK_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .spawn()
        .context("start pandastack server")
}

impl OwnServer {
    /// Waits until the server answers its health check (and has written its key).
    async fn until_up(&mut self, key_file: &Path) -> anyhow::Result<()> {
        let c = Client::new();
        for _ in 0..600 {
            if let Ok(Some(st)) = self.child.try_wait() {
                bail!("the server exited at start: {st}");
            }
            if key_file.is_file()
                && c.get(format!("{}/v1/health", self.url))
                    .send()
                    .await
                    .is_ok()
            {
                self.key = std::fs::read_to_string(key_file)?.trim().to_owned();
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the server did not come up")
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// [`Self::kill9_restart`] with its arguments changed by `change` first.
    pub(crate) async fn restart_with(
        &mut self,
        change: impl FnOnce(&mut Vec<String>),
    ) -> anyhow::Result<()> {
        change(&mut self.args);
        self.kill9_restart().await
    }

    /// SIGKILLs the server process (its VMs keep running, as after a crash) and starts it
    /// again with the same arguments on the same data directory; waits until it answers.
    pub(crate) async fn kill9_restart(&mut self) -> anyhow::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn_server(&self.args)?;
        let key_file = self.dir.path().join("key");
        self.until_up(&key_file).await
    }
}

/// A minimal client for what the benchmark calls; remembers what it created so that a failed
/// run against someone else's server leaves nothing behind.
/// The REST API of a bench's server: a call, and a timed call that must get one status.
pub(crate) struct Http {
    c: Client,
    url: String,
    key: String,
}

impl Http {
    pub(crate) fn new(url: &str, key: &str) -> Self {
        Self {
            c: Client::new(),
            url: url.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
        }
    }

    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = self
            .c
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .timeout(Duration::from_secs(3600));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let text = resp.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// `call`, timed, failing unless the answer is `want`.
    pub(crate) async fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        want: StatusCode,
    ) -> anyhow::Result<(Value, Duration)> {
        let what = format!("{method} {path}");
        let t = Instant::now();
        let (st, v) = self.call(method, path, body).await?;
        let took = t.elapsed();
        if st != want {
            bail!("{what}: {st} {v}");
        }
        Ok((v, took))
    }
}

struct Api {
    http: Http,
    template: String,
    sandboxes: Vec<String>,
    volumes: Vec<String>,
}

impl Api {
    fn new(url: &str, key: &str, template: &str) -> Self {
        Api {
            http: Http::new(url, key),
            template: template.to_owned(),
            sandboxes: Vec::new(),
            volumes: Vec::new(),
        }
    }

    /// Creates a sandbox of the template, with `volume` mounted read-write at /data if given.
    async fn create_sandbox(&mut self, volume: Option<&str>) -> anyhow::Result<(String, Duration)> {
        let mut body = json!({"template": self.template, "metadata": {"bench": "volumes"}});
        if let Some(v) = volume {
            body["volumes"] = json!([{"name": v, "path": "/data"}]);
        }
        let (v, took) = self
            .http
            .expect(
                Method::POST,
                "/v1/sandboxes",
                Some(body),
                StatusCode::CREATED,
            )
            .await?;
        let id = v["id"].as_str().context("create: no id")?.to_owned();
        self.sandboxes.push(id.clone());
        Ok((id, took))
    }

    async fn delete_sandbox(&mut self, id: &str) -> anyhow::Result<()> {
        let (st, v) = self
            .http
            .call(Method::DELETE, &format!("/v1/sandboxes/{id}"), None)
            .await?;
        if st != StatusCode::NO_CONTENT && st != StatusCode::NOT_FOUND {
            bail!("delete sandbox {id}: {st} {v}");
        }
        self.sandboxes.retain(|s| s != id);
        Ok(())
    }

    async fn create_volume(&mut self, body: Value) -> anyhow::Result<(Value, Duration)> {
        let name = body["name"].as_str().unwrap_or_default().to_owned();
        let r = self
            .http
            .expect(Method::POST, "/v1/volumes", Some(body), StatusCode::CREATED)
            .await?;
        self.volumes.push(name);
        Ok(r)
    }

    async fn delete_volume(&mut self, name: &str) -> anyhow::Result<Duration> {
        let (_, took) = self
            .http
            .expect(
                Method::DELETE,
                &format!("/v1/volumes/{name}"),
                None,
                StatusCode::NO_CONTENT,
            )
            .await?;
        self.volumes.retain(|v| v != name);
        Ok(took)
    }

    /// Runs a shell command in a sandbox, failing unless it exits 0.
    async fn sh(&self, id: &str, cmd: &str) -> anyhow::Result<()> {
        let (v, _) = self
            .http
            .expect(
                Method::POST,
                &format!("/v1/sandboxes/{id}/exec"),
                Some(json!({"cmd": cmd, "timeout_seconds": 900})),
                StatusCode::OK,
            )
            .await?;
        if v["exit_code"] != 0 {
            bail!("`{cmd}` in {id}: {v}");
        }
        Ok(())
    }

    /// Takes a snapshot of `volume`, deletes it, and returns how long the `POST` took and
    /// whether the holder's file system was frozen.
    async fn snapshot(&self, volume: &str) -> anyhow::Result<(Duration, bool)> {
        let path = format!("/v1/volumes/{volume}/snapshots");
        let (v, took) = self
            .http
            .expect(Method::POST, &path, None, StatusCode::CREATED)
            .await?;
        let id = v["id"].as_str().context("snapshot: no id")?;
        self.http
            .expect(
                Method::DELETE,
                &format!("{path}/{id}"),
                None,
                StatusCode::NO_CONTENT,
            )
            .await?;
        Ok((took, v["frozen"] == json!(true)))
    }

    /// Backs `volume` up and waits until the backup is done: (its id, bytes uploaded, time from
    /// the `POST` to the first `GET` that saw it done).
    async fn backup(&self, volume: &str) -> anyhow::Result<(String, u64, Duration)> {
        let path = format!("/v1/volumes/{volume}/backups");
        let t = Instant::now();
        let (v, _) = self
            .http
            .expect(Method::POST, &path, None, StatusCode::ACCEPTED)
            .await?;
        let id = v["id"].as_str().context("backup: no id")?.to_owned();
        loop {
            let (b, _) = self
                .http
                .expect(Method::GET, &format!("{path}/{id}"), None, StatusCode::OK)
                .await?;
            match b["state"].as_str() {
                Some("uploading") => tokio::time::sleep(Duration::from_millis(20)).await,
                Some("done") => {
                    let took = t.elapsed();
                    let bytes = b["bytes_uploaded"]
                        .as_u64()
                        .context("backup done without bytes_uploaded")?;
                    return Ok((id, bytes, took));
                }
                _ => bail!("backup {id}: {b}"),
            }
        }
    }

    /// Best effort: deletes what this run created and still exists.
    async fn clean_up(&mut self) {
        for id in std::mem::take(&mut self.sandboxes) {
            if let Err(e) = self.delete_sandbox(&id).await {
                eprintln!("clean-up: {e:#}");
            }
        }
        for name in std::mem::take(&mut self.volumes) {
            if let Err(e) = self.delete_volume(&name).await {
                eprintln!("clean-up: {e:#}");
            }
        }
    }
}

/// Samples per metric, collected over both phases.
type Samples = BTreeMap<&'static str, Vec<f64>>;

pub(crate) async fn run(a: VolumesArgs) -> anyhow::Result<ExitCode> {
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let own = a.base_url.is_none();
    // Names unique to this run, for a server that has other volumes.
    let run_id = format!(
        "{:08x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos()
            ^ std::process::id()
    );
    let mut s = Samples::new();

    // Phase 1: the server as configured (the one this command starts: warm pool 1).
    let server = if own {
        Some(start_server(&parent, 1, &[]).await?)
    } else {
        None
    };
    let (url, key) = match &server {
        Some(sv) => (sv.url.clone(), sv.key.clone()),
        None => (
            a.base_url.clone().unwrap_or_default(),
            a.api_key.clone().unwrap_or_default(),
        ),
    };
    let mut api = Api::new(&url, &key, &a.template);
    let r = phase_pooled(&mut api, &a, &run_id, &mut s).await;
    api.clean_up().await;
    r?;
    drop(server);

    // Phase 2: a server with no warm pool, so that both creates restore.
    if own && !a.skip_nopool {
        eprintln!("phase 2: a server with --pool-size 0");
        let server = start_server(&parent, 0, &[]).await?;
        let mut api = Api::new(&server.url, &server.key, &a.template);
        let r = phase_nopool(&mut api, &a, &run_id, &mut s).await;
        api.clean_up().await;
        r?;
    }

    let mut metrics: BTreeMap<&str, Metric> = BTreeMap::new();
    let p50 = |s: &Samples, k: &str| {
        let v = s.get(k).cloned().unwrap_or_default();
        metric(v, "ms").p50
    };
    let with_ratio = p50(&s, "api_create_with_volume_ms") / p50(&s, "api_create_without_volume_ms");
    let nopool_ratio =
        p50(&s, "api_create_with_volume_nopool_ms") / p50(&s, "api_create_nopool_ms");
    for (k, v) in s {
        let unit = match k {
            "backup_first_mib_s" => "MiB/s",
            "backup_first_bytes" | "backup_incremental_bytes" => "bytes",
            "backup_incremental_ratio" => "x",
            _ => "ms",
        };
        metrics.insert(k, metric(v, unit));
    }
    metrics.insert("create_with_volume_ratio", metric(vec![with_ratio], "x"));
    if nopool_ratio.is_finite() {
        metrics.insert(
            "create_with_volume_nopool_ratio",
            metric(vec![nopool_ratio], "x"),
        );
    }

    println!(
        "{:<36} {:>12} {:>12} {:>5} {:<6} target (issue #15)",
        "metric", "p50", "p99", "n", "unit"
    );
    for (k, m) in &metrics {
        println!(
            "{k:<36} {:>12.1} {:>12.1} {:>5} {:<6} {}",
            m.p50,
            m.p99,
            m.n,
            m.unit,
            target(k, m)
        );
    }
    if let Some(path) = &a.json {
        let (accel, reason) = accel().await;
        let doc = json!({
            "name": "volumes",
            "accel": accel,
            "accel_reason": reason,
            "host": host_info(),
            "template": a.template,
            "create_gap_ms": a.create_gap_ms,
            "data_mib": a.data_mib,
            "pool_size": if own { json!(1) } else { json!("as configured") },
            "nopool_phase": own && !a.skip_nopool,
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Issue #15's target for a metric, and whether its p50 meets it (printed, never enforced).
fn target(k: &str, m: &Metric) -> String {
    let (bound, what) = match k {
        "create_with_volume_ratio" | "create_with_volume_nopool_ratio" => (1.3, "≤ 1.3×"),
        "volume_snapshot_ms" | "volume_snapshot_detached_ms" => (50.0, "≤ 50 ms"),
        "backup_incremental_ratio" => (2.0, "≤ 2× bytes changed"),
        _ => return String::new(),
    };
    let verdict = if m.p50 <= bound { "met" } else { "NOT met" };
    format!("{what}: {verdict}")
}

/// The same boot probe the server runs (for a server elsewhere, this host's answer).
pub(crate) async fn accel() -> (String, String) {
    let kernel = std::env::var_os("PANDASTACK_KERNEL")
        .map(PathBuf::from)
        .or_else(super::doctor::cached_kernel);
    match kernel {
        Some(k) => {
            let c = pandastack_qemu::accel::detect(Path::new("qemu-system-x86_64"), &k).await;
            (c.accel.to_string(), c.reason)
        }
        None => (
            "unknown".to_owned(),
            "no guest kernel to probe with".to_owned(),
        ),
    }
}

/// Creates with and without a volume, interleaved, each after `--create-gap-ms`; samples go to
/// `with` and `without`.
async fn creates(
    api: &mut Api,
    a: &VolumesArgs,
    volume: &str,
    s: &mut Samples,
    (with, without): (&'static str, &'static str),
) -> anyhow::Result<()> {
    for _ in 0..a.iterations {
        for v in [None, Some(volume)] {
            tokio::time::sleep(Duration::from_millis(a.create_gap_ms)).await;
            let (id, took) = api.create_sandbox(v).await?;
            let key = if v.is_some() { with } else { without };
            s.entry(key).or_default().push(ms(took));
            api.delete_sandbox(&id).await?;
        }
    }
    Ok(())
}

/// First create of the template (a bake if it has none with these slots) and of the mount path,
/// off the clock.
async fn warm_up(api: &mut Api, volume: &str) -> anyhow::Result<()> {
    eprintln!(
        "warming up (the first create bakes {} if needed)…",
        api.template
    );
    for v in [None, Some(volume)] {
        let (id, took) = api.create_sandbox(v).await?;
        api.delete_sandbox(&id).await?;
        eprintln!(
            "first create {}: {:.0} ms",
            if v.is_some() { "with a volume" } else { "" },
            ms(took)
        );
    }
    Ok(())
}

async fn phase_pooled(
    api: &mut Api,
    a: &VolumesArgs,
    run_id: &str,
    s: &mut Samples,
) -> anyhow::Result<()> {
    let mount = format!("bench-{run_id}-mount");
    api.create_volume(json!({"name": mount, "size_gb": 1}))
        .await?;
    warm_up(api, &mount).await?;

    for i in 0..a.iterations {
        let name = format!("bench-{run_id}-empty-{i}");
        let (_, took) = api
            .create_volume(json!({"name": name, "size_gb": 1}))
            .await?;
        s.entry("volume_create_ms").or_default().push(ms(took));
        let took = api.delete_volume(&name).await?;
        s.entry("volume_delete_ms").or_default().push(ms(took));
    }
    eprintln!("volume creates done");

    creates(
        api,
        a,
        &mount,
        s,
        ("api_create_with_volume_ms", "api_create_without_volume_ms"),
    )
    .await?;
    api.delete_volume(&mount).await?;
    eprintln!("sandbox creates done");

    // One volume with data, written by a sandbox that keeps it mounted.
    let data = format!("bench-{run_id}-data");
    api.create_volume(json!({"name": data, "size_gb": 1}))
        .await?;
    let (holder, _) = api.create_sandbox(Some(&data)).await?;
    let t = Instant::now();
    api.sh(
        &holder,
        &format!(
            "head -c {} /dev/urandom > /data/f && sync",
            a.data_mib << 20
        ),
    )
    .await?;
    eprintln!(
        "wrote {} MiB in the guest in {:.1} s",
        a.data_mib,
        t.elapsed().as_secs_f64()
    );
    for _ in 0..a.iterations {
        let (took, frozen) = api.snapshot(&data).await?;
        if !frozen {
            eprintln!("warning: a snapshot with its holder running was not frozen");
        }
        s.entry("volume_snapshot_ms").or_default().push(ms(took));
    }
    eprintln!("snapshots (holder running) done");

    let (_, bytes, took) = api.backup(&data).await?;
    s.entry("backup_first_ms").or_default().push(ms(took));
    s.entry("backup_first_bytes")
        .or_default()
        .push(bytes as f64);
    s.entry("backup_first_mib_s")
        .or_default()
        .push(bytes as f64 / MIB / took.as_secs_f64());
    eprintln!(
        "first backup: {:.1} MiB in {:.1} s",
        bytes as f64 / MIB,
        took.as_secs_f64()
    );
    let mut last = None;
    for _ in 0..a.incremental_backups {
        api.sh(
            &holder,
            &format!("head -c {CHANGED} /dev/urandom > /data/ten && sync"),
        )
        .await?;
        let (id, bytes, took) = api.backup(&data).await?;
        s.entry("backup_incremental_ms").or_default().push(ms(took));
        s.entry("backup_incremental_bytes")
            .or_default()
            .push(bytes as f64);
        s.entry("backup_incremental_ratio")
            .or_default()
            .push(bytes as f64 / CHANGED as f64);
        last = Some(id);
    }
    eprintln!("incremental backups done");

    api.delete_sandbox(&holder).await?;
    for _ in 0..a.iterations {
        let (took, frozen) = api.snapshot(&data).await?;
        if frozen {
            eprintln!("warning: a snapshot with no holder says it froze one");
        }
        s.entry("volume_snapshot_detached_ms")
            .or_default()
            .push(ms(took));
    }
    eprintln!("snapshots (no holder) done");

    // Restores of the latest backup (the first one's if there was no incremental one).
    let backup = match last {
        Some(id) => id,
        None => api.backup(&data).await?.0,
    };
    for i in 0..a.iterations {
        let name = format!("bench-{run_id}-restored-{i}");
        let (_, took) = api
            .create_volume(json!({"name": name, "from_backup": backup}))
            .await?;
        s.entry("restore_from_backup_ms")
            .or_default()
            .push(ms(took));
        api.delete_volume(&name).await?;
    }
    eprintln!("restores done");
    api.delete_volume(&data).await?;
    Ok(())
}

async fn phase_nopool(
    api: &mut Api,
    a: &VolumesArgs,
    run_id: &str,
    s: &mut Samples,
) -> anyhow::Result<()> {
    let mount = format!("bench-{run_id}-mount");
    api.create_volume(json!({"name": mount, "size_gb": 1}))
        .await?;
    warm_up(api, &mount).await?;
    creates(
        api,
        a,
        &mount,
        s,
        ("api_create_with_volume_nopool_ms", "api_create_nopool_ms"),
    )
    .await?;
    api.delete_volume(&mount).await?;
    eprintln!("sandbox creates (no pool) done");
    Ok(())
}
