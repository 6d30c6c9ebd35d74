//! `pandastack bench api`: the REST API end to end with real guests — create latency (serial and
//! 8 concurrent), exec, fork, first byte through the preview proxy (warm and waking a hibernated
//! sandbox), code-interpreter runs (JavaScript's first and warm, Python's warm), sustained
//! creates per second, and how many idle sandboxes this host holds. It starts its own server on a temporary data directory unless `--base-url` and
//! `--api-key` point it at a running one.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

use super::bench::{host_info, metric, ms, Metric};

#[derive(Debug, clap::Args)]
pub struct ApiArgs {
    /// A running server to measure (with --api-key); default: start one.
    #[arg(long, env = "PANDASTACK_BASE_URL", requires = "api_key")]
    base_url: Option<String>,
    #[arg(long, env = "PANDASTACK_API_KEY")]
    api_key: Option<String>,
    /// Template to create sandboxes from (baked before measuring).
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Data directory of the server this command starts (default: a temporary directory
    /// under /var/lib/pandastack, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Serial creates to measure.
    #[arg(long, default_value_t = 20)]
    creates: usize,
    /// Pause between serial creates, so that the warm pool has refilled (ms).
    #[arg(long, default_value_t = 1500)]
    create_gap_ms: u64,
    /// Seconds of sustained create+delete for `creates_per_second`.
    #[arg(long, default_value_t = 30)]
    sustain_secs: u64,
    /// Stop the idle-capacity test at this many sandboxes (0 skips it).
    #[arg(long, default_value_t = 200)]
    max_idle: usize,
    /// Template with Node.js for the code interpreter's JavaScript runs (`""` skips them).
    #[arg(long, default_value = "app")]
    code_template: String,
    /// Code-interpreter runs to measure per language.
    #[arg(long, default_value_t = 20)]
    code_runs: usize,
    /// File writes whose watch events to time (0 skips them).
    #[arg(long, default_value_t = 20)]
    watch_runs: usize,
}

/// The server this command started; killed (with its VMs) on drop.
struct OwnServer {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its sandboxes outlive it by design; a throwaway server's must go with it.
        let _ = std::process::Command::new("pkill")
            .args(["-9", "-f", &format!("{}/", self.dir.path().display())])
            .status();
        kill_vms_in(&self.dir.path().join("sandboxes"));
    }
}

/// SIGKILLs processes whose working directory is below `dir` (QEMU runs in its run dir).
fn kill_vms_in(dir: &std::path::Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(p.path().join("cwd")).is_ok_and(|c| c.starts_with(dir)) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

async fn start_server(a: &ApiArgs) -> anyhow::Result<(OwnServer, String, String, SocketAddr)> {
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    std::fs::create_dir_all(&parent)?;
    let dir = tempfile::Builder::new()
        .prefix("bench-api-")
        .tempdir_in(&parent)
        .context("scratch data dir")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let proxy_port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let key_file = dir.path().join("key");
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["server", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--proxy-listen", &format!("127.0.0.1:{proxy_port}")])
        .args(["--db-listen", "127.0.0.1:0"])
        .args(["--preview-url", &format!("http://localhost:{proxy_port}")])
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--key-file")
        .arg(&key_file)
        .args([
            "--max-sandboxes",
            "100000",
            "--creates-per-minute",
            "1000000",
        ])
        .env("PANDASTACK_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .context("start pandastack server")?;
    let server = OwnServer { child, dir };
    let url = format!("http://127.0.0.1:{port}");
    let c = Client::new();
    for _ in 0..600 {
        if key_file.is_file() && c.get(format!("{url}/v1/health")).send().await.is_ok() {
            let key = std::fs::read_to_string(&key_file)?.trim().to_owned();
            let proxy = SocketAddr::from(([127, 0, 0, 1], proxy_port));
            return Ok((server, url, key, proxy));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the server did not come up")
}

/// A minimal client for what the benchmark calls.
#[derive(Clone)]
struct Api {
    c: Client,
    url: String,
    key: String,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = self
            .c
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .timeout(Duration::from_secs(600));
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

    async fn create(&self, template: &str) -> anyhow::Result<(String, Duration)> {
        let t = Instant::now();
        let (st, v) = self
            .call(
                reqwest::Method::POST,
                "/v1/sandboxes",
                Some(json!({"template": template, "metadata": {"bench": "api"}})),
            )
            .await?;
        let took = t.elapsed();
        if st != StatusCode::CREATED {
            bail!("create: {st} {v}");
        }
        let id = v["id"].as_str().context("create: no id")?.to_owned();
        Ok((id, took))
    }

    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let (st, v) = self
            .call(
                reqwest::Method::DELETE,
                &format!("/v1/sandboxes/{id}"),
                None,
            )
            .await?;
        if st != StatusCode::NO_CONTENT && st != StatusCode::NOT_FOUND {
            bail!("delete {id}: {st} {v}");
        }
        Ok(())
    }
}

/// `POST …/exec` of `true` in sandbox `id`; milliseconds until the answer.
async fn exec_true(api: &Api, id: &str) -> anyhow::Result<f64> {
    let t = Instant::now();
    let (st, v) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["true"]})),
        )
        .await?;
    if st != StatusCode::OK || v["exit_code"] != 0 {
        bail!("exec: {st} {v}");
    }
    Ok(ms(t.elapsed()))
}

pub async fn run(a: ApiArgs) -> anyhow::Result<ExitCode> {
    let (_own, url, key, proxy) = match (&a.base_url, &a.api_key) {
        (Some(u), Some(k)) => (None, u.trim_end_matches('/').to_owned(), k.clone(), None),
        _ => {
            let (s, u, k, p) = start_server(&a).await?;
            (Some(s), u, k, Some(p))
        }
    };
    let api = Api {
        c: Client::new(),
        url,
        key,
    };
    let mut metrics: BTreeMap<&str, Metric> = BTreeMap::new();

    eprintln!(
        "warming up (the first create bakes {} if needed)…",
        a.template
    );
    let (id, first) = api.create(&a.template).await?;
    api.delete(&id).await?;
    eprintln!("first create: {:.0} ms", ms(first));

    // Serial creates, each after the warm pool has refilled, and each sandbox's first command.
    let mut serial = Vec::new();
    let mut first_exec = Vec::new();
    for _ in 0..a.creates {
        tokio::time::sleep(Duration::from_millis(a.create_gap_ms)).await;
        let (id, took) = api.create(&a.template).await?;
        serial.push(ms(took));
        first_exec.push(exec_true(&api, &id).await?);
        api.delete(&id).await?;
    }
    metrics.insert("api_create_ready_ms", metric(serial, "ms"));
    metrics.insert("api_first_exec_ms", metric(first_exec, "ms"));
    eprintln!("serial creates done");

    // 8 at once.
    let mut conc = Vec::new();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(a.create_gap_ms)).await;
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let api = api.clone();
                let t = a.template.clone();
                tokio::spawn(async move { api.create(&t).await })
            })
            .collect();
        let mut ids = Vec::new();
        for t in tasks {
            let (id, took) = t.await??;
            conc.push(ms(took));
            ids.push(id);
        }
        for id in ids {
            api.delete(&id).await?;
        }
    }
    metrics.insert("api_create_ready_concurrent8_ms", metric(conc, "ms"));
    eprintln!("concurrent creates done");

    // Exec and fork on one sandbox.
    let (id, _) = api.create(&a.template).await?;
    let mut exec = Vec::new();
    for _ in 0..50 {
        exec.push(exec_true(&api, &id).await?);
    }
    metrics.insert("api_exec_ms", metric(exec, "ms"));
    let mut fork = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let (st, v) = api
            .call(
                reqwest::Method::POST,
                &format!("/v1/sandboxes/{id}/fork"),
                Some(json!({"count": 1})),
            )
            .await?;
        if st != StatusCode::CREATED && st != StatusCode::OK {
            bail!("fork: {st} {v}");
        }
        fork.push(ms(t.elapsed()));
        for c in v["children"].as_array().cloned().unwrap_or_default() {
            api.delete(c["id"].as_str().unwrap_or_default()).await?;
        }
        if let Some(s) = v["snapshot_id"].as_str() {
            api.call(reqwest::Method::DELETE, &format!("/v1/snapshots/{s}"), None)
                .await?;
        }
    }
    metrics.insert("api_fork1_ms", metric(fork, "ms"));
    eprintln!("exec and fork done");
    let (warm, woken) = preview(&api, &id, proxy).await?;
    metrics.insert("proxy_first_byte_ms", metric(warm, "ms"));
    metrics.insert("proxy_wake_first_byte_ms", metric(woken, "ms"));
    api.delete(&id).await?;
    eprintln!("preview proxy done");

    if a.watch_runs > 0 {
        let latency = watch_latency(&api, &a).await?;
        metrics.insert("watch_event_latency_ms", metric(latency, "ms"));
        eprintln!("file watch done");
    }

    if !a.code_template.is_empty() {
        for (k, m) in code_runs(&api, &a).await? {
            metrics.insert(k, m);
        }
        eprintln!("code interpreter done");
    }

    // Sustained creates (each followed by its delete), two clients.
    let deadline = Instant::now() + Duration::from_secs(a.sustain_secs);
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let api = api.clone();
            let t = a.template.clone();
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    let (id, _) = api.create(&t).await?;
                    api.delete(&id).await?;
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    for w in workers {
        w.await??;
    }
    let n = done.load(std::sync::atomic::Ordering::Relaxed);
    let rate = n as f64 / started.elapsed().as_secs_f64();
    metrics.insert("creates_per_second", metric(vec![rate], "1/s"));
    eprintln!(
        "sustained: {n} creates in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    if a.max_idle > 0 {
        let (held, rss, pss) = idle_capacity(&api, &a).await?;
        metrics.insert("max_idle_sandboxes", metric(vec![held as f64], "sandboxes"));
        metrics.insert("idle_sandbox_host_rss_mib", metric(rss, "MiB"));
        metrics.insert("idle_sandbox_host_pss_mib", metric(pss, "MiB"));
    }

    println!("{:<36} {:>10} {:>10} {:>5}", "metric", "p50", "p99", "n");
    for (k, m) in &metrics {
        println!(
            "{k:<36} {:>10.1} {:>10.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = &a.json {
        // The same boot probe the server runs (for a server elsewhere, this host's answer).
        let kernel = std::env::var_os("PANDASTACK_KERNEL")
            .map(PathBuf::from)
            .or_else(super::doctor::cached_kernel);
        let (accel, reason) = match kernel {
            Some(k) => {
                let c =
                    pandastack_qemu::accel::detect(std::path::Path::new("qemu-system-x86_64"), &k)
                        .await;
                (c.accel.to_string(), c.reason)
            }
            None => (
                "unknown".to_owned(),
                "no guest kernel to probe with".to_owned(),
            ),
        };
        let doc = json!({
            "name": "api",
            "accel": accel,
            "accel_reason": reason,
            "host": host_info(),
            "template": a.template,
            "create_gap_ms": a.create_gap_ms,
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// File watch latency: a watch of a directory (`GET …/files/watch`, SSE) in a sandbox of
/// `--template`, then `--watch-runs` small files written into it through the API (`PUT …/fs`),
/// one at a time: milliseconds from sending each write to its event (a `rename`: the guest
/// writes a temporary file and renames it) reaching this client.
async fn watch_latency(api: &Api, a: &ApiArgs) -> anyhow::Result<Vec<f64>> {
    use pandastack_client::types::WatchFrame;
    let (id, _) = api.create(&a.template).await?;
    let dir = "/tmp/bench-watch";
    let (st, v) = api
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["mkdir", "-p", dir]})),
        )
        .await?;
    if st != StatusCode::OK || v["exit_code"] != 0 {
        bail!("mkdir: {st} {v}");
    }
    let client = pandastack_client::Client::new(pandastack_client::Config::new(
        api.url.as_str(),
        Some(api.key.clone()),
    ))?;
    let mut watch = client.watch_files(&id, dir, false).await?;
    // The next frame of the watch, within 30 s.
    let mut next = async || -> anyhow::Result<WatchFrame> {
        tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .context("no watch event within 30 s")??
            .context("the watch ended")
    };
    let first = next().await?;
    if !matches!(first, WatchFrame::Ready { .. }) {
        bail!("watch: {first:?} before ready");
    }
    let mut out = Vec::with_capacity(a.watch_runs);
    for i in 0..a.watch_runs {
        let path = format!("{dir}/f{i}");
        let t = Instant::now();
        let told = async {
            loop {
                // A write through the API lands by a rename of a temporary file.
                match next().await? {
                    WatchFrame::Create { path: p, .. } | WatchFrame::Rename { path: p, .. }
                        if p == path =>
                    {
                        return Ok::<_, anyhow::Error>(ms(t.elapsed()))
                    }
                    _ => {}
                }
            }
        };
        let (written, told) = tokio::join!(client.write_file(&id, &path, "x"), told);
        written.with_context(|| format!("write {path}"))?;
        out.push(told?);
    }
    drop(watch);
    api.delete(&id).await?;
    Ok(out)
}

/// The code interpreter on a sandbox of `--code-template`: the first JavaScript run (it starts
/// the context's Node.js kernel), then warm runs of a small cell in JavaScript and in Python,
/// each a blocking `POST …/code` whose answer carries the cell's value.
async fn code_runs(api: &Api, a: &ApiArgs) -> anyhow::Result<Vec<(&'static str, Metric)>> {
    let (id, _) = api.create(&a.code_template).await?;
    let path = format!("/v1/sandboxes/{id}/code");
    let run = |language: &'static str, code: &'static str| {
        let path = path.clone();
        async move {
            let t = Instant::now();
            let (st, v) = api
                .call(
                    reqwest::Method::POST,
                    &path,
                    Some(json!({"code": code, "language": language})),
                )
                .await?;
            if st != StatusCode::OK || !v["error"].is_null() || v["results"][0]["text"].is_null() {
                bail!("{language} run {code:?}: {st} {v}");
            }
            Ok::<_, anyhow::Error>(ms(t.elapsed()))
        }
    };
    let first = run("javascript", "let n = 0; n").await?;
    let mut js = Vec::new();
    let mut py = Vec::new();
    run("python", "n = 0\nn").await?;
    for _ in 0..a.code_runs {
        js.push(run("javascript", "n += 1; n").await?);
        py.push(run("python", "n += 1\nn").await?);
    }
    api.delete(&id).await?;
    Ok(vec![
        ("code_js_first_ms", metric(vec![first], "ms")),
        ("code_js_warm_ms", metric(js, "ms")),
        ("code_python_warm_ms", metric(py, "ms")),
    ])
}

/// Preview URL latency: time to the response headers of `GET /` on a port served inside sandbox
/// `id` (Python's `http.server`), through the preview proxy — warm, and as the first request to
/// the sandbox hibernated. `proxy`: where the proxy listens (else the URL's host is resolved).
async fn preview(
    api: &Api,
    id: &str,
    proxy: Option<SocketAddr>,
) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    const PORT: u16 = 8000;
    let exec = |cmd: String| async move {
        api.call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({ "cmd": cmd })),
        )
        .await
    };
    exec(format!(
        "setsid python3 -m http.server {PORT} --bind 127.0.0.1 -d / </dev/null >/dev/null 2>&1 &"
    ))
    .await?;
    let probe =
        format!("python3 -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}))\"");
    let mut listening = false;
    for _ in 0..100 {
        if exec(probe.clone()).await?.1["exit_code"] == 0 {
            listening = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if !listening {
        bail!("the benchmark's HTTP server did not start in the sandbox");
    }
    let (st, v) = api
        .call(
            reqwest::Method::GET,
            &format!("/v1/sandboxes/{id}/ports/{PORT}/url"),
            None,
        )
        .await?;
    if st != StatusCode::OK {
        bail!("port url: {st} {v}");
    }
    let url = v["url"].as_str().context("port url: no url")?.to_owned();
    let token = v["token"].as_str().unwrap_or_default().to_owned();
    let mut b = Client::builder().timeout(Duration::from_secs(120));
    if let Some(p) = proxy {
        let host = url
            .split("://")
            .nth(1)
            .and_then(|r| r.split([':', '/']).next())
            .unwrap_or_default();
        b = b.resolve(host, p);
    }
    let c = b.build()?;
    let first_byte = || async {
        let t = Instant::now();
        let r = c
            .get(format!("{url}/"))
            .header(pandastack_client::types::ACCESS_TOKEN_HEADER, &token)
            .send()
            .await?;
        let took = ms(t.elapsed());
        if r.status() != StatusCode::OK {
            bail!("preview GET: {}", r.status());
        }
        r.bytes().await?;
        Ok::<f64, anyhow::Error>(took)
    };
    first_byte().await?;
    let mut warm = Vec::new();
    for _ in 0..50 {
        warm.push(first_byte().await?);
    }
    let mut woken = Vec::new();
    for _ in 0..5 {
        let (st, v) = api
            .call(
                reqwest::Method::POST,
                &format!("/v1/sandboxes/{id}/hibernate"),
                None,
            )
            .await?;
        if st != StatusCode::OK {
            bail!("hibernate: {st} {v}");
        }
        woken.push(first_byte().await?);
    }
    Ok((warm, woken))
}

/// Free memory in the host, MiB.
fn mem_available_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0)
        / 1024
}

/// Creates idle sandboxes until a create fails, `--max-idle` is reached or the host has less
/// than 1 GiB available; returns how many it held and their host RSS/PSS.
async fn idle_capacity(api: &Api, a: &ApiArgs) -> anyhow::Result<(usize, Vec<f64>, Vec<f64>)> {
    let mut ids = Vec::new();
    let mut stop_reason = format!("reached --max-idle {}", a.max_idle);
    while ids.len() < a.max_idle {
        if mem_available_mib() < 1024 {
            stop_reason = "host memory available < 1 GiB".into();
            break;
        }
        match api.create(&a.template).await {
            Ok((id, _)) => ids.push(id),
            Err(e) => {
                stop_reason = format!("create failed: {e:#}");
                break;
            }
        }
        if ids.len() % 25 == 0 {
            eprintln!(
                "idle sandboxes: {} ({} MiB available)",
                ids.len(),
                mem_available_mib()
            );
        }
    }
    // Let them settle, then read their host memory.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (mut rss, mut pss) = (Vec::new(), Vec::new());
    for id in &ids {
        let (st, v) = api
            .call(
                reqwest::Method::GET,
                &format!("/v1/sandboxes/{id}/metrics"),
                None,
            )
            .await?;
        if st == StatusCode::OK {
            if let (Some(r), Some(p)) = (v["host_rss_bytes"].as_u64(), v["host_pss_bytes"].as_u64())
            {
                rss.push(r as f64 / (1 << 20) as f64);
                pss.push(p as f64 / (1 << 20) as f64);
            }
        }
    }
    eprintln!(
        "idle capacity: held {} sandboxes ({stop_reason})",
        ids.len()
    );
    for id in &ids {
        api.delete(id).await?;
    }
    Ok((ids.len(), rss, pss))
}
