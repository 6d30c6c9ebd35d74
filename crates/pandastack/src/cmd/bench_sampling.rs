//! `pandastack bench sampling`: what reading every running VM's resource use costs (issue #42).
//! `--sandboxes` idle sandboxes run under a server of its own that does not sample; the host CPU
//! time of the server and of every VM process is measured over `--window-secs`; the server is
//! killed and started again on the same data directory (its VMs keep running and are
//! re-attached) with sampling every `--interval-ms`, and the window measured again; then once
//! more without sampling, so that drift in the idle guests' own use shows. The cost is the
//! difference, in percent of one CPU, scaled to 100 sandboxes; the sampler's own round time is
//! read from the server's `/metrics`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use reqwest::{Method, StatusCode};
use serde_json::json;

use super::bench::host_info;
use super::bench_apps::str_of;
use super::bench_soak::qemu_processes_under;
use super::bench_volumes::{accel, start_server_on, Http, OwnServer};

#[derive(Debug, clap::Args)]
pub(crate) struct SamplingArgs {
    /// Idle sandboxes running while the CPU is measured.
    #[arg(long, default_value_t = 100)]
    sandboxes: usize,
    /// Seconds of each measurement.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// The sampling interval measured (ms).
    #[arg(long, default_value_t = 5000)]
    interval_ms: u64,
    /// Template of the sandboxes.
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Parent of the server's temporary data directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// User + system CPU time of process `pid` in seconds (`None`: it is gone).
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
    Some(ticks as f64 / hz)
}

/// CPU seconds the server and the VMs used over `window`: `(server, vms)`.
async fn measure(server: &OwnServer, window: Duration) -> (f64, f64) {
    let vms = qemu_processes_under(server.dir.path());
    let before: Vec<(u32, f64)> = std::iter::once(server.pid())
        .chain(vms.iter().copied())
        .filter_map(|p| Some((p, cpu_secs(p)?)))
        .collect();
    tokio::time::sleep(window).await;
    let (mut own, mut guests) = (0.0, 0.0);
    for (pid, b) in before {
        if let Some(a) = cpu_secs(pid) {
            if pid == server.pid() {
                own += a - b;
            } else {
                guests += a - b;
            }
        }
    }
    (own, guests)
}

/// The mean of a histogram in the server's `/metrics` (`sum / count`), in seconds.
async fn histogram_mean(server: &OwnServer, admin: &str, name: &str) -> anyhow::Result<f64> {
    let text = reqwest::Client::new()
        .get(format!("{}/metrics", server.url))
        .bearer_auth(admin)
        .send()
        .await?
        .text()
        .await?;
    let value = |suffix: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_{suffix} ")))
            .and_then(|v| v.trim().parse().ok())
    };
    let (sum, count) = (value("sum").unwrap_or(0.0), value("count").unwrap_or(0.0));
    Ok(if count > 0.0 { sum / count } else { f64::NAN })
}

/// An admin key of the server's only workspace, made in its store as `keys create --admin` does.
async fn admin_key(data: &Path) -> anyhow::Result<String> {
    let store = super::keys::open_store(data, None).await?;
    let ws = store
        .keys()
        .workspaces()
        .await?
        .into_iter()
        .next()
        .context("the server has no workspace")?;
    Ok(store.keys().create_admin(&ws.id, "bench").await?.1)
}

pub(crate) async fn run(a: SamplingArgs) -> anyhow::Result<ExitCode> {
    ensure!(a.sandboxes > 0, "--sandboxes: at least 1");
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let (accel, accel_reason) = accel().await;
    eprintln!("accelerator: {accel} ({accel_reason})");
    let off = ["--network", "off", "--sample-interval-ms", "0"];
    let mut server = start_server_on(&parent, 0, ("pssm", "10.215.0.0/16"), &off).await?;
    let http = Http::new(&server.url, &server.key);
    let t = Instant::now();
    for i in 0..a.sandboxes {
        let (v, _) = http
            .expect(
                Method::POST,
                "/v1/sandboxes",
                Some(json!({"template": a.template})),
                StatusCode::CREATED,
            )
            .await
            .with_context(|| format!("sandbox {}", i + 1))?;
        str_of(&v, "id")?;
        if (i + 1) % 10 == 0 {
            eprintln!("{} sandboxes ({:.0} s)", i + 1, t.elapsed().as_secs_f64());
        }
    }
    // Let the creates' after-effects (page faults, the guests' first timers) settle.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let window = Duration::from_secs(a.window_secs);
    eprintln!("measuring {} s without sampling…", a.window_secs);
    let off1 = measure(&server, window).await;
    let interval = a.interval_ms.to_string();
    server
        .restart_with(|args| {
            if let Some(i) = args.iter().position(|x| x == "--sample-interval-ms") {
                args[i + 1] = interval.clone();
            }
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!(
        "measuring {} s sampling every {} ms…",
        a.window_secs, a.interval_ms
    );
    let on = measure(&server, window).await;
    let admin = admin_key(server.dir.path()).await?;
    let round_ms =
        histogram_mean(&server, &admin, "pandastack_metrics_sample_round_seconds").await? * 1e3;
    server
        .restart_with(|args| {
            if let Some(i) = args.iter().position(|x| x == "--sample-interval-ms") {
                args[i + 1] = "0".into();
            }
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!("measuring {} s without sampling again…", a.window_secs);
    let off2 = measure(&server, window).await;

    let w = a.window_secs as f64;
    let pct = |cpu: f64| cpu / w * 100.0;
    let per100 = |x: f64| x * 100.0 / a.sandboxes as f64;
    let off_server = (off1.0 + off2.0) / 2.0;
    let off_vms = (off1.1 + off2.1) / 2.0;
    let server_cost = per100(pct(on.0 - off_server));
    let vm_cost = per100(pct(on.1 - off_vms));
    println!(
        "sampling every {} ms, {} idle sandboxes, {} s windows ({accel})",
        a.interval_ms, a.sandboxes, a.window_secs
    );
    println!(
        "  server CPU: {:.2}% of a core without, {:.2}% with → {:.2}% per 100 sandboxes",
        pct(off_server),
        pct(on.0),
        server_cost
    );
    println!(
        "  VM CPU:     {:.1}% / {:.1}% / {:.1}% (off, on, off) → {:.2}% per 100 sandboxes (guests answering)",
        pct(off1.1),
        pct(on.1),
        pct(off2.1),
        vm_cost
    );
    println!("  one round: {round_ms:.1} ms (wall, {} VMs)", a.sandboxes);
    if let Some(path) = &a.json {
        let doc = json!({
            "name": "sampling",
            "accel": accel,
            "accel_reason": accel_reason,
            "host": host_info(),
            "sandboxes": a.sandboxes,
            "window_secs": a.window_secs,
            "interval_ms": a.interval_ms,
            "server_cpu_pct": {"off": pct(off_server), "on": pct(on.0)},
            "vm_cpu_pct": {"off_before": pct(off1.1), "on": pct(on.1), "off_after": pct(off2.1)},
            "sampling_server_cpu_pct_per_100": server_cost,
            "sampling_vm_cpu_pct_per_100": vm_cost,
            "sample_round_ms": round_ms,
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    drop(server);
    Ok(ExitCode::SUCCESS)
}
