//! `pandastack bench runtime`: measures the VM runtime with real guests on this host and prints
//! p50/p99 per metric, optionally writing them as JSON.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use pandastack_qemu::{accel, QemuConfig, QemuDriver};
use pandastack_runtime::{DataDir, DeviceProfile, Runtime, Shape, VolumeDisk};
use pandastack_vm::{Vm, VmDriver};
use serde::Serialize;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Debug, clap::Subcommand)]
enum BenchWhat {
    /// Boot, bake, restore and exec latency, and idle memory per VM.
    Runtime(RuntimeArgs),
    /// The REST API end to end: create, exec, fork, creates/s, idle capacity.
    Api(super::bench_api::ApiArgs),
    /// Object storage: first, incremental and unchanged upload and download of one file.
    Objects(super::bench_objects::ObjectsArgs),
    /// Durable volumes: create, create a sandbox with one, snapshots, backups, restore.
    Volumes(super::bench_volumes::VolumesArgs),
    /// Managed PostgreSQL: create, connect, wake, branch, HTTP query, pgbench, a killed VM.
    Databases(super::bench_databases::DatabasesArgs),
    /// App hosting: static and Vite deploys, rollback, wake on a request, the app proxy.
    Apps(super::bench_apps::AppsArgs),
    /// Soak: create/exec/delete cycles with forks and hibernates, then nothing may be left; and
    /// a `kill -9` of the server holding running sandboxes, all re-attached.
    Soak(super::bench_soak::SoakArgs),
    /// Functions: a NumPy deploy, cold and warm calls, 16 at once, cron dispatch jitter.
    Functions(super::bench_functions::FunctionsArgs),
    /// What reading every VM's resource use costs: server and VM CPU with and without
    /// sampling, per 100 idle sandboxes.
    Sampling(super::bench_sampling::SamplingArgs),
    /// The regression guard: a new run against the committed one (bench/<name>.json), each
    /// metric's ratio, flagging any more than 1.25x worse (exit status 1).
    Diff(super::bench_diff::DiffArgs),
    /// Side by side with gVisor (runsc) on the same root filesystem: create + exec `true`,
    /// create + Python, exec in a running sandbox; ratios of the p50s and p99s.
    Compare(super::bench_compare::CompareArgs),
    /// The cluster (#38): placement at 3 and 200 hosts, dead-host detection, a PostgreSQL
    /// restart under attending agents, exec through the agent link against in-process.
    Cluster(super::bench_cluster::ClusterArgs),
}

#[derive(Debug, clap::Args)]
struct RuntimeArgs {
    /// Root filesystem image with the guest agent (e.g. from `pandastack template build minimal --agent …`).
    #[arg(long, env = "PANDASTACK_TEST_ROOTFS")]
    image: PathBuf,
    /// Guest kernel (default: the cached build).
    #[arg(long, env = "PANDASTACK_KERNEL")]
    kernel: Option<PathBuf>,
    /// Scratch data directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Serial restores to measure.
    #[arg(long, default_value_t = 20)]
    restores: usize,
    /// Snapshots and forks of one running sandbox to measure (fork4 runs half as many).
    #[arg(long, default_value_t = 10)]
    forks: usize,
    #[arg(long, default_value_t = 512)]
    memory_mib: u32,
    /// Bake the template with this many volume slots (unbound unless measured with a volume:
    /// `restore_ready_volume_ms`, `volume_mount_ms`).
    #[arg(long, default_value_t = 0)]
    volume_slots: u32,
}

#[derive(Debug, Serialize)]
pub(crate) struct Metric {
    pub p50: f64,
    pub p99: f64,
    pub n: usize,
    pub unit: &'static str,
}

pub(crate) fn metric(mut samples: Vec<f64>, unit: &'static str) -> Metric {
    samples.sort_by(|a, b| a.total_cmp(b));
    let pick = |q: f64| {
        if samples.is_empty() {
            return f64::NAN;
        }
        let idx = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        (samples[idx] * 10.0).round() / 10.0
    };
    Metric {
        p50: pick(0.5),
        p99: pick(0.99),
        n: samples.len(),
        unit,
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        BenchWhat::Runtime(a) => runtime(a).await,
        BenchWhat::Api(a) => super::bench_api::run(a).await,
        BenchWhat::Objects(a) => super::bench_objects::run(a).await,
        BenchWhat::Volumes(a) => super::bench_volumes::run(a).await,
        BenchWhat::Databases(a) => super::bench_databases::run(a).await,
        BenchWhat::Apps(a) => super::bench_apps::run(a).await,
        BenchWhat::Functions(a) => super::bench_functions::run(a).await,
        BenchWhat::Soak(a) => super::bench_soak::run(a).await,
        BenchWhat::Sampling(a) => super::bench_sampling::run(a).await,
        BenchWhat::Diff(a) => super::bench_diff::run(a),
        BenchWhat::Compare(a) => super::bench_compare::run(a).await,
        BenchWhat::Cluster(a) => super::bench_cluster::run(a).await,
    }
}

/// Unmeasured execs before those of `exec_true_warm_ms`, and the measured ones.
const WARM_UP: usize = 10;
const WARM_EXECS: usize = 100;

/// Runs `true` through the agent: the round trip, and the agent's own `duration_ms` (start
/// message received → exit sent, spawn included).
async fn exec_true(ch: &tonic::transport::Channel) -> anyhow::Result<(Duration, f64)> {
    let t = Instant::now();
    let start = v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(v1::ExecStart {
            argv: vec!["true".into()],
            ..Default::default()
        })),
    };
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start]))
        .await?
        .into_inner();
    while let Some(m) = s.message().await? {
        if let Some(v1::exec_output::Output::Exit(e)) = m.output {
            anyhow::ensure!(e.exit_code == 0, "true exited {}", e.exit_code);
            return Ok((t.elapsed(), e.duration_ms as f64));
        }
    }
    anyhow::bail!("exec stream ended without exit")
}

async fn runtime(a: RuntimeArgs) -> anyhow::Result<ExitCode> {
    let kernel = a
        .kernel
        .or_else(super::doctor::cached_kernel)
        .context("no guest kernel: run scripts/setup-host.sh or pass --kernel")?;
    let choice = accel::detect(Path::new("qemu-system-x86_64"), &kernel).await;
    eprintln!("accelerator: {} ({})", choice.accel, choice.reason);
    let tmp;
    let root = match a.data_dir {
        Some(d) => d,
        None => {
            tmp = tempfile::Builder::new()
                .prefix("ps-bench-")
                .tempdir_in("/var/tmp")?;
            tmp.path().to_owned()
        }
    };
    let rt = Runtime::new(
        QemuDriver::new(QemuConfig::new(choice.accel)),
        DataDir::open(&root)?,
        kernel,
    );
    let shape = Shape {
        vcpus: 1,
        memory_mib: a.memory_mib,
        disk: None,
    };
    let mut metrics: BTreeMap<&str, Metric> = BTreeMap::new();

    // Bake twice: cold boot (to agent ready) and the full bake (boot + snapshot).
    let (mut cold, mut bake) = (Vec::new(), Vec::new());
    let mut template = None;
    for i in 0..2 {
        eprintln!("bake {}/2", i + 1);
        let profile = DeviceProfile {
            volume_slots: a.volume_slots,
        };
        let t = rt.bake_with("bench", &a.image, shape, profile).await?;
        cold.push(t.boot_ms as f64);
        bake.push(t.bake_ms as f64);
        template = Some(t);
    }
    let template = template.context("no template")?;
    metrics.insert("cold_boot_ms", metric(cold, "ms"));
    metrics.insert("bake_ms", metric(bake, "ms"));

    // Serial restores, with exec round trips on each.
    let (mut restore, mut exec) = (Vec::new(), Vec::new());
    for i in 0..a.restores {
        let sb = rt.create(&template, &format!("b{i}")).await?;
        restore.push(ms(sb.ready_in));
        for _ in 0..5 {
            exec.push(ms(exec_true(&sb.agent).await?.0));
        }
        rt.destroy(sb).await?;
    }
    eprintln!("serial restores done");
    metrics.insert("restore_ready_ms", metric(restore, "ms"));
    metrics.insert("exec_true_ms", metric(exec, "ms"));

    // Exec in a sandbox that has run a few commands already (its paths translated by TCG).
    let sb = rt.create(&template, "warm").await?;
    let (mut warm, mut inside) = (Vec::new(), Vec::new());
    for i in 0..WARM_UP + WARM_EXECS {
        let (t, guest_ms) = exec_true(&sb.agent).await?;
        if i >= WARM_UP {
            warm.push(ms(t));
            inside.push(guest_ms);
        }
    }
    rt.destroy(sb).await?;
    metrics.insert("exec_true_warm_ms", metric(warm, "ms"));
    metrics.insert("exec_true_warm_guest_ms", metric(inside, "ms"));

    // The same with a 256 MiB ext4 volume bound to slot 0 (no pool either way), then mounted.
    if a.volume_slots > 0 {
        let disk = VolumeDisk {
            path: root.join("bench-volume.ext4"),
            read_only: false,
        };
        pandastack_runtime::create_volume_file(&disk.path, 256 << 20)?;
        let (mut ready, mut mount) = (Vec::new(), Vec::new());
        for i in 0..a.restores {
            let sb = rt
                .create_with_volumes(&template, &format!("v{i}"), &[Some(disk.clone())])
                .await?;
            ready.push(ms(sb.ready_in));
            let t = Instant::now();
            rt.mount_volume(&sb, 0, "/data", None).await?;
            mount.push(ms(t.elapsed()));
            rt.destroy(sb).await?;
        }
        std::fs::remove_file(&disk.path)?;
        eprintln!("restores with a volume done");
        metrics.insert("restore_ready_volume_ms", metric(ready, "ms"));
        metrics.insert("volume_mount_ms", metric(mount, "ms"));
    }

    // The same with a pre-started VM waiting in the pool (refilled off the clock).
    let mut pooled = Vec::new();
    for i in 0..a.restores {
        rt.fill_pool(&template, 1).await?;
        let sb = rt.create(&template, &format!("p{i}")).await?;
        pooled.push(ms(sb.ready_in));
        rt.destroy(sb).await?;
    }
    rt.drain_pool().await;
    eprintln!("pooled restores done");
    metrics.insert("restore_ready_pooled_ms", metric(pooled, "ms"));

    lifecycle(&rt, &template, a.forks, &mut metrics).await?;

    // Eight at once, twice; then measure idle memory of the last eight.
    let mut conc = Vec::new();
    let mut rss = Vec::new();
    let mut pss = Vec::new();
    for round in 0..2 {
        let ids: Vec<String> = (0..8).map(|i| format!("c{round}-{i}")).collect();
        let creates = ids.iter().map(|id| rt.create(&template, id));
        let sbs: Vec<_> = futures::future::join_all(creates)
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        conc.extend(sbs.iter().map(|s| ms(s.ready_in)));
        if round == 1 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            for s in &sbs {
                let st = s.vm.stats()?;
                rss.push(st.rss_bytes as f64 / (1 << 20) as f64);
                pss.push(st.pss_bytes as f64 / (1 << 20) as f64);
            }
        }
        for s in sbs {
            rt.destroy(s).await?;
        }
    }
    metrics.insert("restore_ready_concurrent8_ms", metric(conc, "ms"));
    metrics.insert("idle_vm_rss_mib", metric(rss, "MiB"));
    metrics.insert("idle_vm_pss_mib", metric(pss, "MiB"));
    churn(&rt, &template, &mut metrics).await?;

    println!("{:<32} {:>10} {:>10} {:>5}", "metric", "p50", "p99", "n");
    for (k, m) in &metrics {
        println!(
            "{k:<32} {:>10.1} {:>10.1} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = a.json {
        let doc = serde_json::json!({
            "name": "runtime",
            "accel": rt.driver().accel(),
            "accel_reason": choice.reason,
            "host": host_info(),
            "metrics": metrics,
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Snapshot, fork and hibernate/wake of a running sandbox that has done some work.
async fn lifecycle(
    rt: &Runtime<QemuDriver>,
    template: &pandastack_runtime::Template,
    n: usize,
    metrics: &mut BTreeMap<&str, Metric>,
) -> anyhow::Result<()> {
    let mut parent = rt.create(template, "parent").await?;
    let warm = "python3 -c 'import json, hashlib; print(len(json.dumps(list(range(100000)))))'";
    exec_shell(&parent.agent, warm).await?;
    let (mut snap, mut fork1, mut fork4) = (Vec::new(), Vec::new(), Vec::new());
    let mut size = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let s = rt.snapshot(&parent, &format!("s{i}")).await?;
        snap.push(ms(t.elapsed()));
        size.push(s.size_bytes as f64 / (1 << 20) as f64);
        rt.delete_snapshot(&s.id)?;
    }
    for i in 0..n {
        let f = rt
            .fork(&parent, &format!("f{i}"), &[format!("f{i}-0")])
            .await?;
        fork1.push(ms(f.took));
        for c in f.children {
            rt.destroy(c).await?;
        }
        rt.delete_snapshot(&f.snapshot.id)?;
    }
    for i in 0..n.div_ceil(2) {
        let ids: Vec<String> = (0..4).map(|c| format!("g{i}-{c}")).collect();
        let f = rt.fork(&parent, &format!("g{i}"), &ids).await?;
        fork4.push(ms(f.took));
        for c in f.children {
            rt.destroy(c).await?;
        }
        rt.delete_snapshot(&f.snapshot.id)?;
    }
    eprintln!("snapshots and forks done");
    let (mut hib, mut wake) = (Vec::new(), Vec::new());
    for _ in 0..n.div_ceil(2) {
        let t = Instant::now();
        let h = match rt.hibernate(parent).await {
            Ok(h) => h,
            Err((e, _)) => return Err(e.into()),
        };
        hib.push(ms(t.elapsed()));
        parent = match rt.wake(h).await {
            Ok(sb) => sb,
            Err((e, _)) => return Err(e.into()),
        };
        wake.push(ms(parent.ready_in));
    }
    rt.destroy(parent).await?;
    metrics.insert("snapshot_ms", metric(snap, "ms"));
    metrics.insert("snapshot_size_mib", metric(size, "MiB"));
    metrics.insert("fork1_ms", metric(fork1, "ms"));
    metrics.insert("fork4_ms", metric(fork4, "ms"));
    metrics.insert("hibernate_ms", metric(hib, "ms"));
    metrics.insert("wake_ready_ms", metric(wake, "ms"));
    Ok(())
}

/// Allocates and frees 128 MiB in the guest, then gives free-page reporting time to act.
const CHURN: &str =
    "python3 -c \"b = b'x' * (128 << 20); del b\" && echo 3 > /proc/sys/vm/drop_caches && sleep 6";

/// Host RSS of a VM after its guest allocated and freed memory: a template clone (RAM a private
/// mapping of the read-only template memory file) and a fork child (RAM its own) — what
/// free-page reporting gives back, and where.
async fn churn(
    rt: &Runtime<QemuDriver>,
    template: &pandastack_runtime::Template,
    metrics: &mut BTreeMap<&str, Metric>,
) -> anyhow::Result<()> {
    let (mut clone_rss, mut child_rss) = (Vec::new(), Vec::new());
    for i in 0..3 {
        let sb = rt.create(template, &format!("churn{i}")).await?;
        exec_shell(&sb.agent, CHURN).await?;
        clone_rss.push(sb.vm.stats()?.rss_bytes as f64 / (1 << 20) as f64);
        let fork = rt
            .fork(&sb, &format!("churn-snap{i}"), &[format!("churn-child{i}")])
            .await?;
        for child in fork.children {
            exec_shell(&child.agent, CHURN).await?;
            child_rss.push(child.vm.stats()?.rss_bytes as f64 / (1 << 20) as f64);
            rt.destroy(child).await?;
        }
        rt.delete_snapshot(&fork.snapshot.id)?;
        rt.destroy(sb).await?;
    }
    eprintln!("memory churn done");
    metrics.insert("churned_clone_rss_mib", metric(clone_rss, "MiB"));
    metrics.insert("churned_fork_child_rss_mib", metric(child_rss, "MiB"));
    Ok(())
}

async fn exec_shell(ch: &tonic::transport::Channel, cmd: &str) -> anyhow::Result<()> {
    let start = v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(v1::ExecStart {
            shell: cmd.into(),
            ..Default::default()
        })),
    };
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start]))
        .await?
        .into_inner();
    while let Some(m) = s.message().await? {
        if let Some(v1::exec_output::Output::Exit(e)) = m.output {
            anyhow::ensure!(e.exit_code == 0, "{cmd} exited {}", e.exit_code);
            return Ok(());
        }
    }
    anyhow::bail!("exec stream ended without exit")
}

pub(crate) fn host_info() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let qemu = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_default();
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0);
    serde_json::json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu_model": cpu,
        "memory_gib": mem_kib / (1 << 20),
        "qemu": qemu,
    })
}
