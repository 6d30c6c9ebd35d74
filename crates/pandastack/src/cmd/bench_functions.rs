//! `pandastack bench functions`: functions end to end with real guests. It starts its own
//! server on a temporary data directory with `--network on` (the build VM installs NumPy from
//! PyPI) and the `app` template in its catalog.
//!
//! What is measured (wall time seen by the client, through the REST API):
//! - `deploy_python_numpy_s`: `POST /v1/functions` of a handler that imports NumPy, with
//!   `numpy` as its dependency, until its first version is live (install in the build VM,
//!   the runtime importing the handler, the snapshot); `deploy_phase_<phase>_ms` from the
//!   version's `phases_ms`. The first function may also build and bake the `app` template:
//!   `deploy_python_numpy_first_s` is kept apart when `--deploys` > 1;
//! - `invoke_cold_ms`: `POST …/invoke` with no warm instance (the idle time set to 1 s and the
//!   instances gone): the call restores an instance from the baked snapshot (`cold: true`);
//!   `handler_cold_ms` is the handler's own time in those calls (its first run in a new VM);
//! - `invoke_warm_ms`: sequential calls answered by a warm instance (`cold: false`);
//!   `handler_ms` is the handler's own time as the runtime reports it;
//! - `invoke_concurrent16_ms`: 16 calls at once (concurrency 4 × 4 instances, warmed first),
//!   each call's time;
//! - `cron_jitter_ms`: a schedule firing every second with the function as its target, over
//!   `--firings` runs: each run's `started_at - due_at`;
//! - `firings_lost` / `firings_doubled`: `--restarts` times `kill -9` of the server (its VMs
//!   keep running) and a restart on the same data, 1.5-3.5 s apart, while a schedule calls the
//!   function every second: due seconds without a run, and due seconds with more than one
//!   (`restart_ms`: a restart until the health check answers).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::bench::{host_info, metric, ms, Metric};
use super::bench_apps::templates_dir;
use super::bench_volumes::{accel, start_server, Http, OwnServer};

#[derive(Debug, clap::Args)]
pub(crate) struct FunctionsArgs {
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
    /// Warm calls.
    #[arg(long, default_value_t = 200)]
    warm: usize,
    /// Cold calls.
    #[arg(long, default_value_t = 10)]
    cold: usize,
    /// Rounds of 16 concurrent calls.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Schedule firings for the jitter.
    #[arg(long, default_value_t = 50)]
    firings: usize,
    /// Functions deployed (each a NumPy install).
    #[arg(long, default_value_t = 2)]
    deploys: usize,
    /// `kill -9` restarts of the server with a schedule firing every second (0: none).
    #[arg(long, default_value_t = 50)]
    restarts: usize,
}

type Samples = BTreeMap<String, Vec<f64>>;

const HANDLER: &str = r#"import numpy as np

def handler(event):
    n = max(1, int((event or {}).get("n", 10)))
    a = np.arange(n, dtype=np.float64)
    return {"sum": float(a.sum()), "mean": float(a.mean()), "numpy": np.__version__}
"#;
/// Longest a deploy may take (the first may build and bake the `app` template).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(2400);

fn push(s: &mut Samples, k: impl Into<String>, v: f64) {
    s.entry(k.into()).or_default().push(v);
}

struct Bench {
    http: Http,
}

impl Bench {
    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self
            .http
            .expect(Method::GET, path, None, StatusCode::OK)
            .await?
            .0)
    }

    /// Creates function `name` and waits for version 1 to be live: the version and the time.
    async fn deploy(&self, name: &str) -> anyhow::Result<(Value, Duration)> {
        let t = Instant::now();
        let body = json!({
            "name": name, "runtime": "python", "handler": "main.handler",
            "files": {"main.py": HANDLER}, "dependencies": "numpy\n",
        });
        self.http
            .expect(
                Method::POST,
                "/v1/functions",
                Some(body),
                StatusCode::CREATED,
            )
            .await
            .with_context(|| format!("create function {name}"))?;
        loop {
            let v = self
                .get(&format!("/v1/functions/{name}/versions/1"))
                .await?;
            match v["state"].as_str().unwrap_or_default() {
                "live" => return Ok((v, t.elapsed())),
                "failed" | "superseded" | "standby" => {
                    let (_, log) = self
                        .http
                        .call(
                            Method::GET,
                            &format!("/v1/functions/{name}/versions/1/logs"),
                            None,
                        )
                        .await?;
                    bail!(
                        "version 1 of {name} is {}: {}\n{log}",
                        v["state"],
                        v["error"]
                    );
                }
                _ if t.elapsed() > DEPLOY_TIMEOUT => {
                    bail!("{name} not live after {DEPLOY_TIMEOUT:?}")
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// One call: its outcome and wall time; fails unless the handler returned.
    async fn invoke(&self, name: &str, event: Value) -> anyhow::Result<(Value, f64)> {
        let path = format!("/v1/functions/{name}/invoke");
        let (v, took) = self
            .http
            .expect(Method::POST, &path, Some(event), StatusCode::OK)
            .await?;
        if v["status"] != "ok" {
            bail!("call of {name}: {v}");
        }
        Ok((v, ms(took)))
    }

    async fn patch(&self, name: &str, body: Value) -> anyhow::Result<()> {
        let path = format!("/v1/functions/{name}");
        self.http
            .expect(Method::PATCH, &path, Some(body), StatusCode::OK)
            .await?;
        Ok(())
    }

    /// Waits until function `name` has no warm instance.
    async fn until_cold(&self, name: &str) -> anyhow::Result<()> {
        let t = Instant::now();
        loop {
            let f = self.get(&format!("/v1/functions/{name}")).await?;
            if f["warm_instances"] == 0 {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!("{name} still has warm instances after 60 s: {f}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn rfc3339_ms(s: &str) -> anyhow::Result<f64> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .with_context(|| format!("not RFC 3339: {s}"))?;
    Ok(t.unix_timestamp_nanos() as f64 / 1e6)
}

async fn measure(b: &Bench, a: &FunctionsArgs, s: &mut Samples) -> anyhow::Result<()> {
    let name = "bench-numpy";
    for i in 0..a.deploys.max(1) {
        let this = if i == 0 {
            name.to_owned()
        } else {
            format!("{name}-{i}")
        };
        eprintln!("deploying {this} (numpy from PyPI in the build VM)…");
        let (v, took) = b.deploy(&this).await?;
        let key = if i == 0 && a.deploys > 1 {
            "deploy_python_numpy_first_s"
        } else {
            "deploy_python_numpy_s"
        };
        push(s, key, took.as_secs_f64());
        if let Some(phases) = v["phases_ms"].as_object() {
            for (k, ms) in phases.iter().filter_map(|(k, v)| Some((k, v.as_f64()?))) {
                push(s, format!("deploy_phase_{k}_ms"), ms);
            }
        }
        eprintln!(
            "{this}: live in {:.1} s {}",
            took.as_secs_f64(),
            v["phases_ms"]
        );
        if i > 0 {
            let path = format!("/v1/functions/{this}");
            b.http
                .expect(Method::DELETE, &path, None, StatusCode::NO_CONTENT)
                .await?;
        }
    }

    eprintln!("{} cold calls…", a.cold);
    b.patch(name, json!({"idle_seconds": 1})).await?;
    for _ in 0..a.cold {
        b.until_cold(name).await?;
        let (v, took) = b.invoke(name, json!({"n": 100})).await?;
        if v["cold"] != true {
            bail!("a call with no warm instance was not cold: {v}");
        }
        push(s, "invoke_cold_ms", took);
        if let Some(h) = v["duration_ms"].as_f64() {
            push(s, "handler_cold_ms", h);
        }
    }
    b.patch(name, json!({"idle_seconds": 600})).await?;

    eprintln!("{} warm calls…", a.warm);
    b.invoke(name, json!({"n": 1})).await?;
    for i in 0..a.warm {
        let (v, took) = b.invoke(name, json!({"n": i + 1})).await?;
        if v["cold"] != false {
            bail!("a warm call restored an instance: {v}");
        }
        push(s, "invoke_warm_ms", took);
        if let Some(h) = v["duration_ms"].as_f64() {
            push(s, "handler_ms", h);
        }
    }

    eprintln!("{} rounds of 16 concurrent calls…", a.rounds);
    b.patch(name, json!({"concurrency": 4, "max_instances": 4}))
        .await?;
    for round in 0..=a.rounds {
        let calls: Vec<_> = (1..=16).map(|i| b.invoke(name, json!({"n": i}))).collect();
        let results = futures::future::join_all(calls).await;
        for r in results {
            let (_, took) = r?;
            // Round 0 warms the instances up.
            if round > 0 {
                push(s, "invoke_concurrent16_ms", took);
            }
        }
    }

    eprintln!("cron: {} firings, one a second…", a.firings);
    let body = json!({
        "name": "bench-jitter", "cron": "* * * * * *",
        "target": {"type": "function", "name": name}, "payload": {"n": 3},
    });
    b.http
        .expect(
            Method::POST,
            "/v1/schedules",
            Some(body),
            StatusCode::CREATED,
        )
        .await?;
    let t = Instant::now();
    let runs = loop {
        let v = b.get("/v1/schedules/bench-jitter/runs?limit=1000").await?;
        let done: Vec<Value> = v["data"]
            .as_array()
            .context("runs: no data")?
            .iter()
            .filter(|r| r["state"] == "succeeded" && r["trigger"] == "scheduled")
            .cloned()
            .collect();
        if done.len() >= a.firings {
            break done;
        }
        if t.elapsed() > Duration::from_secs(a.firings as u64 * 4 + 60) {
            bail!(
                "only {} of {} firings succeeded: {v}",
                done.len(),
                a.firings
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    b.http
        .expect(
            Method::DELETE,
            "/v1/schedules/bench-jitter",
            None,
            StatusCode::NO_CONTENT,
        )
        .await?;
    for r in runs.iter().take(a.firings) {
        let due = rfc3339_ms(r["due_at"].as_str().context("run without due_at")?)?;
        let started = rfc3339_ms(r["started_at"].as_str().context("run without started_at")?)?;
        push(s, "cron_jitter_ms", started - due);
    }
    Ok(())
}

/// `kill -9` of the server `restarts` times, 1.5-3.5 s apart, while a schedule calls the
/// function every second; then every due second between the first and the last firing must
/// have exactly one run (succeeded, failed or recorded `missed`): `firings_lost` and
/// `firings_doubled` count the others. `restart_ms`: from the new process's start to its
/// health check.
async fn restarts(
    server: &mut OwnServer,
    b: &Bench,
    function: &str,
    restarts: usize,
    s: &mut Samples,
) -> anyhow::Result<()> {
    if restarts == 0 {
        return Ok(());
    }
    eprintln!("{restarts} kill -9 restarts with a schedule firing every second…");
    let body = json!({
        "name": "bench-restarts", "cron": "* * * * * *",
        "target": {"type": "function", "name": function}, "payload": {"n": 2},
    });
    b.http
        .expect(
            Method::POST,
            "/v1/schedules",
            Some(body),
            StatusCode::CREATED,
        )
        .await?;
    for i in 0..restarts {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let pause = Duration::from_millis(1500 + u64::from(nanos % 2000));
        tokio::time::sleep(pause).await;
        let t = Instant::now();
        server
            .kill9_restart()
            .await
            .with_context(|| format!("restart {}", i + 1))?;
        push(s, "restart_ms", ms(t.elapsed()));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.http
        .expect(
            Method::POST,
            "/v1/schedules/bench-restarts/pause",
            None,
            StatusCode::OK,
        )
        .await?;
    let t = Instant::now();
    let runs = loop {
        let v = b
            .get("/v1/schedules/bench-restarts/runs?limit=1000")
            .await?;
        let runs = v["data"].as_array().context("runs: no data")?.clone();
        if runs
            .iter()
            .all(|r| r["state"] != "queued" && r["state"] != "running")
        {
            break runs;
        }
        if t.elapsed() > Duration::from_secs(300) {
            bail!("runs still under way after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut seconds = Vec::new();
    for r in runs.iter().filter(|r| r["trigger"] == "scheduled") {
        let due = rfc3339_ms(r["due_at"].as_str().context("run without due_at")?)?;
        seconds.push((due / 1000.0).round() as i64);
    }
    seconds.sort_unstable();
    let total = seconds.len();
    seconds.dedup();
    let doubled = total - seconds.len();
    let lost = match (seconds.first(), seconds.last()) {
        (Some(a), Some(z)) => (z - a + 1) as usize - seconds.len(),
        _ => 0,
    };
    let states = runs
        .iter()
        .fold(BTreeMap::<String, usize>::new(), |mut m, r| {
            *m.entry(r["state"].as_str().unwrap_or("?").to_owned())
                .or_default() += 1;
            m
        });
    eprintln!(
        "restarts: {total} runs over {} due seconds: lost {lost}, doubled {doubled}; {states:?}",
        seconds.len()
    );
    push(s, "firings_lost", lost as f64);
    push(s, "firings_doubled", doubled as f64);
    push(s, "firings_total", total as f64);
    b.http
        .expect(
            Method::DELETE,
            "/v1/schedules/bench-restarts",
            None,
            StatusCode::NO_CONTENT,
        )
        .await?;
    Ok(())
}

pub(crate) async fn run(a: FunctionsArgs) -> anyhow::Result<ExitCode> {
    let templates = templates_dir(a.templates_dir.as_deref())?;
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let (accel, accel_reason) = accel().await;
    eprintln!("accelerator: {accel} ({accel_reason})");
    let templates_arg = templates.to_str().context("templates dir: not UTF-8")?;
    let server = start_server(
        &parent,
        0,
        &["--network", "on", "--templates-dir", templates_arg],
    )
    .await?;
    let mut server = server;
    let bench = Bench {
        http: Http::new(&server.url, &server.key),
    };
    let mut s = Samples::new();
    measure(&bench, &a, &mut s).await?;
    restarts(&mut server, &bench, "bench-numpy", a.restarts, &mut s).await?;
    bench
        .http
        .expect(
            Method::DELETE,
            "/v1/functions/bench-numpy",
            None,
            StatusCode::NO_CONTENT,
        )
        .await?;
    drop(server);

    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    for (k, v) in s {
        let unit = if k.ends_with("_s") {
            "s"
        } else if k.starts_with("firings_") {
            "count"
        } else {
            "ms"
        };
        metrics.insert(k, metric(v, unit));
    }
    println!("accelerator: {accel} ({accel_reason})");
    println!(
        "{:<32} {:>12} {:>12} {:>5} unit",
        "metric", "p50", "p99", "n"
    );
    for (k, m) in &metrics {
        println!(
            "{k:<32} {:>12.1} {:>12.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = &a.json {
        let doc = json!({
            "name": "functions",
            "accel": accel,
            "accel_reason": accel_reason,
            "host": host_info(),
            "network": "on",
            "metrics": metrics,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
