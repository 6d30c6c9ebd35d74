//! `pandastack bench compare`: PandaStack side by side with gVisor (`runsc`), in one process, on
//! one host and one root filesystem (the image the sandboxes boot, unpacked for gVisor).
//!
//! Per workload each side runs the same command the same number of times, after one warm-up
//! run off the clock:
//!
//! - `create_exec_true_ms`, `create_python_ms`: a fresh sandbox runs `true` (or Python printing
//!   `1`). Ours: a runtime create from the baked template with no pool (no pre-started VM)
//!   until the guest agent answers, then the command through it, until its exit; the destroy is
//!   off the clock. gVisor: `runsc run` of a container whose process is the command, which
//!   creates the sandbox, starts the process, waits for its exit and deletes the container.
//!   (`runsc create` + `start` + `wait` cannot time a short process: `wait` finds the sandbox
//!   gone.) Ours also reports `pandastack_create_ready_ms`, the create alone (to exec-ready),
//!   from the `true` and Python rounds; `runsc run` has no such split.
//! - `exec_true_running_ms`: `true` in a sandbox that is already running. Ours: an exec over
//!   the open guest agent session; gVisor: `runsc exec` into a container running `sleep`.
//!
//! gVisor runs with `--platform=systrap --network=none` and a writable root (its own overlay,
//! so the unpacked tree is never written); the tree is unpacked once per image with `debugfs`
//! (no mount) into `$PANDASTACK_CACHE/gvisor/`. runsc state lives in a temporary directory, and
//! every container left there is deleted when the bench ends, failed or not.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use pandastack_qemu::{accel, QemuConfig, QemuDriver};
use pandastack_runtime::{DataDir, Runtime, Shape};
use pandastack_vm::VmDriver;

use super::bench::{host_info, metric, ms, Metric};

#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// Root filesystem image with the guest agent: booted by PandaStack, unpacked for gVisor.
    #[arg(long, env = "PANDASTACK_TEST_ROOTFS")]
    image: PathBuf,
    /// Guest kernel (default: the cached build).
    #[arg(long, env = "PANDASTACK_KERNEL")]
    kernel: Option<PathBuf>,
    /// Where the scratch data directory goes (default: /var/lib/pandastack, reflink-capable
    /// after `pandastack host init`; a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Sandboxes created per create workload, on each side.
    #[arg(long, default_value_t = 20)]
    creates: usize,
    /// Execs into one running sandbox, on each side.
    #[arg(long, default_value_t = 50)]
    execs: usize,
    #[arg(long, default_value_t = 512)]
    memory_mib: u32,
    /// The gVisor runtime binary.
    #[arg(long, default_value = "runsc")]
    runsc: PathBuf,
}

/// The command of `create_exec_true_ms` and `exec_true_running_ms`.
const TRUE: &[&str] = &["true"];
/// The command of `create_python_ms`, and what it must print.
const PYTHON: &[&str] = &["python3", "-c", "print(1)"];
const PYTHON_OUT: &[u8] = b"1\n";
/// What the container of `exec_true_running_ms` runs while it is exec'd into.
const SLEEP: &[&str] = &["sleep", "infinity"];
/// The flags every runsc command gets besides `--root`.
const RUNSC_FLAGS: &[&str] = &["--platform=systrap", "--network=none"];

pub(crate) async fn run(a: CompareArgs) -> anyhow::Result<ExitCode> {
    // gVisor first: if it cannot run here, say why before the bake.
    let cache = pandastack_image::ImageCache::from_env()
        .root()
        .join("gvisor");
    let tree = rootfs_tree(&a.image, &cache)?;
    let gv = Runsc::new(a.runsc.clone(), tree)?;
    let version = gv.version().await?;
    eprintln!("gVisor: {version}");
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    gvisor(&gv, &a, &mut metrics).await?;
    let gvisor_info = serde_json::json!({
        "runsc": version,
        "flags": RUNSC_FLAGS,
        "rootfs": gv.rootfs,
    });
    drop(gv);

    let kernel = a
        .kernel
        .clone()
        .or_else(super::doctor::cached_kernel)
        .context("no guest kernel: run scripts/setup-host.sh or pass --kernel")?;
    let choice = accel::detect(Path::new("qemu-system-x86_64"), &kernel).await;
    eprintln!("accelerator: {} ({})", choice.accel, choice.reason);
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    std::fs::create_dir_all(&parent)?;
    let dir = tempfile::Builder::new()
        .prefix("bench-compare-")
        .tempdir_in(&parent)
        .context("scratch data dir")?;
    let rt = Runtime::new(
        QemuDriver::new(QemuConfig::new(choice.accel)),
        DataDir::open(dir.path())?,
        kernel,
    );
    pandastack(&rt, &a, &mut metrics).await?;

    for m in [
        "create_exec_true_ms",
        "create_python_ms",
        "exec_true_running_ms",
    ] {
        if let (Some(ours), Some(theirs)) = (
            metrics.get(&format!("pandastack_{m}")),
            metrics.get(&format!("gvisor_{m}")),
        ) {
            let r = ratio(ours, theirs);
            metrics.insert(format!("ratio_{m}"), r);
        }
    }
    println!("{:<40} {:>10} {:>10} {:>5}", "metric", "p50", "p99", "n");
    for (k, m) in &metrics {
        println!(
            "{k:<40} {:>10.2} {:>10.2} {:>5} {}",
            m.p50, m.p99, m.n, m.unit
        );
    }
    if let Some(path) = a.json {
        let doc = serde_json::json!({
            "name": "compare",
            "accel": rt.driver().accel(),
            "accel_reason": choice.reason,
            "host": host_info(),
            "gvisor": gvisor_info,
            "metrics": metrics,
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&doc)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Ours over theirs, p50 by p50 and p99 by p99 (2 decimals); below 1 means PandaStack is faster.
fn ratio(ours: &Metric, theirs: &Metric) -> Metric {
    let r = |a: f64, b: f64| (a / b * 100.0).round() / 100.0;
    Metric {
        p50: r(ours.p50, theirs.p50),
        p99: r(ours.p99, theirs.p99),
        n: ours.n.min(theirs.n),
        unit: "x",
    }
}

async fn gvisor(
    gv: &Runsc,
    a: &CompareArgs,
    metrics: &mut BTreeMap<String, Metric>,
) -> anyhow::Result<()> {
    for (name, argv, want) in [
        ("create_exec_true_ms", TRUE, None),
        ("create_python_ms", PYTHON, Some(PYTHON_OUT)),
    ] {
        let bundle = gv.bundle(name, argv)?;
        let mut samples = Vec::new();
        for i in 0..=a.creates {
            let t = Instant::now();
            let out = gv
                .run(&bundle, &format!("{}-{i}", name.replace('_', "-")))
                .await
                .context("gVisor cannot run here")?;
            let took = ms(t.elapsed());
            if let Some(want) = want {
                anyhow::ensure!(
                    out == want,
                    "{argv:?} printed {:?} under gVisor",
                    String::from_utf8_lossy(&out)
                );
            }
            // The first run warms caches (page cache of the tree, runsc's binary).
            if i > 0 {
                samples.push(took);
            }
        }
        eprintln!("gVisor {name} done");
        metrics.insert(format!("gvisor_{name}"), metric(samples, "ms"));
    }

    let bundle = gv.bundle("sleep", SLEEP)?;
    let id = "running";
    gv.start(&bundle, id).await?;
    let mut samples = Vec::new();
    for i in 0..=a.execs {
        let took = gv.exec(id, TRUE).await?;
        if i > 0 {
            samples.push(ms(took));
        }
    }
    gv.delete(id).await?;
    eprintln!("gVisor exec_true_running_ms done");
    metrics.insert("gvisor_exec_true_running_ms".into(), metric(samples, "ms"));
    Ok(())
}

async fn pandastack(
    rt: &Runtime<QemuDriver>,
    a: &CompareArgs,
    metrics: &mut BTreeMap<String, Metric>,
) -> anyhow::Result<()> {
    let shape = Shape {
        vcpus: 1,
        memory_mib: a.memory_mib,
        disk: None,
    };
    eprintln!("baking the template");
    let template = rt.bake("compare", &a.image, shape).await?;
    // Where a create's time goes: to exec-ready, the rest is the first exec in the new guest.
    let mut ready = Vec::new();
    for (name, argv, want) in [
        ("create_exec_true_ms", TRUE, None),
        ("create_python_ms", PYTHON, Some(PYTHON_OUT)),
    ] {
        let mut samples = Vec::new();
        for i in 0..=a.creates {
            let t = Instant::now();
            // The id is the guest's hostname: no underscores.
            let sb = rt
                .create(&template, &format!("{}-{i}", name.replace('_', "-")))
                .await?;
            let out = exec(&sb.agent, argv).await?;
            let took = ms(t.elapsed());
            let ready_in = sb.ready_in;
            rt.destroy(sb).await?;
            if let Some(want) = want {
                anyhow::ensure!(
                    out == want,
                    "{argv:?} printed {:?} in PandaStack",
                    String::from_utf8_lossy(&out)
                );
            }
            if i > 0 {
                samples.push(took);
                ready.push(ms(ready_in));
            }
        }
        eprintln!("PandaStack {name} done");
        metrics.insert(format!("pandastack_{name}"), metric(samples, "ms"));
    }

    metrics.insert("pandastack_create_ready_ms".into(), metric(ready, "ms"));

    let sb = rt.create(&template, "running").await?;
    let mut samples = Vec::new();
    for i in 0..=a.execs {
        let t = Instant::now();
        exec(&sb.agent, TRUE).await?;
        if i > 0 {
            samples.push(ms(t.elapsed()));
        }
    }
    rt.destroy(sb).await?;
    eprintln!("PandaStack exec_true_running_ms done");
    metrics.insert(
        "pandastack_exec_true_running_ms".into(),
        metric(samples, "ms"),
    );
    Ok(())
}

/// Runs `argv` through the guest agent; its stdout, once it exited 0.
async fn exec(ch: &tonic::transport::Channel, argv: &[&str]) -> anyhow::Result<Vec<u8>> {
    let start = v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(v1::ExecStart {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        })),
    };
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start]))
        .await?
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = s.message().await? {
        match m.output {
            Some(v1::exec_output::Output::Stdout(b)) => out.extend_from_slice(&b),
            Some(v1::exec_output::Output::Exit(e)) => {
                anyhow::ensure!(e.exit_code == 0, "{argv:?} exited {}", e.exit_code);
                return Ok(out);
            }
            _ => {}
        }
    }
    anyhow::bail!("exec stream ended without exit")
}

/// The cache directory of `image`'s unpacked tree: named after the image's directory and file
/// (`minimal-<spechash>-rootfs-<agenthash>`), which change whenever its contents do.
fn tree_name(image: &Path) -> String {
    let part = |p: Option<&std::ffi::OsStr>| p.map(|s| s.to_string_lossy().into_owned());
    let dir = part(image.parent().and_then(Path::file_name));
    let file = part(image.file_stem()).unwrap_or_else(|| "image".into());
    match dir {
        Some(dir) if !dir.is_empty() => format!("{dir}-{file}"),
        _ => file,
    }
}

/// `image`'s files in `cache`, unpacked with `debugfs rdump` (read-only, no mount) unless
/// already there.
fn rootfs_tree(image: &Path, cache: &Path) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(image.is_file(), "no image at {}", image.display());
    let tree = cache.join(tree_name(image));
    if tree.join("usr/bin").is_dir() {
        return Ok(tree);
    }
    std::fs::create_dir_all(cache)?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(cache)?;
    eprintln!("unpacking {} for gVisor", image.display());
    let out = std::process::Command::new("debugfs")
        .arg("-R")
        .arg(format!("rdump / {}", tmp.path().display()))
        .arg(image)
        .stdin(Stdio::null())
        .output()
        .context("debugfs (e2fsprogs)")?;
    // debugfs exits 0 on most failures: judge by what it left.
    anyhow::ensure!(
        out.status.success() && tmp.path().join("usr/bin").is_dir(),
        "debugfs could not unpack {}: {}",
        image.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(tmp.keep(), &tree)?;
    Ok(tree)
}

/// A minimal OCI runtime spec: `args` as root in `/` of `rootfs` (writable: runsc overlays it),
/// proc, a tmpfs `/dev` and a read-only sysfs, and its own pid, ipc, uts and mount namespaces
/// (no network namespace: runsc runs with `--network=none`).
fn oci_config(rootfs: &Path, args: &[&str]) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": { "uid": 0, "gid": 0 },
            "args": args,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
        },
        "root": { "path": rootfs, "readonly": false },
        "hostname": "gvisor",
        "mounts": [
            { "destination": "/proc", "type": "proc", "source": "proc" },
            { "destination": "/dev", "type": "tmpfs", "source": "tmpfs" },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
        ],
        "linux": {
            "namespaces": [
                { "type": "pid" },
                { "type": "ipc" },
                { "type": "uts" },
                { "type": "mount" },
            ],
        },
    })
}

/// runsc with its state in a temporary directory; dropping it deletes every container there.
struct Runsc {
    bin: PathBuf,
    /// The unpacked root filesystem every bundle uses.
    rootfs: PathBuf,
    /// `state/` (runsc `--root`), one bundle directory per command, `stderr` of the last call.
    dir: tempfile::TempDir,
}

impl Runsc {
    fn new(bin: PathBuf, rootfs: PathBuf) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("ps-runsc-").tempdir()?;
        std::fs::create_dir(dir.path().join("state"))?;
        Ok(Self { bin, rootfs, dir })
    }

    /// The global flags of every command.
    fn flags(&self) -> Vec<String> {
        let mut f = vec![format!(
            "--root={}",
            self.dir.path().join("state").display()
        )];
        f.extend(RUNSC_FLAGS.iter().map(|s| s.to_string()));
        f
    }

    fn command(&self) -> anyhow::Result<tokio::process::Command> {
        let mut c = tokio::process::Command::new(&self.bin);
        c.args(self.flags())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // A file, not a pipe: a detached sandbox keeps its copy open.
            .stderr(std::fs::File::create(self.dir.path().join("stderr"))?);
        Ok(c)
    }

    /// Runs `c`; its stdout, or an error with runsc's own message.
    async fn call(&self, mut c: tokio::process::Command, what: &str) -> anyhow::Result<Vec<u8>> {
        // Not `output()`: it pipes stdout and stderr whatever was set, and a detached sandbox
        // keeps them open.
        let child = c.spawn().with_context(|| {
            format!(
                "{}: install it with apt-get install -t bookworm-backports runsc \
                 (scripts/setup-host.sh does)",
                self.bin.display()
            )
        })?;
        let out = child.wait_with_output().await?;
        if !out.status.success() {
            let err = std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default();
            anyhow::bail!("runsc {what}: {} ({})", err.trim(), out.status);
        }
        Ok(out.stdout)
    }

    async fn version(&self) -> anyhow::Result<String> {
        let mut c = self.command()?;
        c.arg("--version").stdout(Stdio::piped());
        let out = self.call(c, "--version").await?;
        let out = String::from_utf8_lossy(&out);
        Ok(out.lines().next().unwrap_or_default().trim().to_owned())
    }

    /// A bundle directory `name` whose container runs `args`.
    fn bundle(&self, name: &str, args: &[&str]) -> anyhow::Result<PathBuf> {
        let dir = self.dir.path().join("bundles").join(name);
        std::fs::create_dir_all(&dir)?;
        let config = oci_config(&self.rootfs, args);
        std::fs::write(dir.join("config.json"), serde_json::to_vec_pretty(&config)?)?;
        Ok(dir)
    }

    /// `runsc run`: create, start, wait for the exit, delete. The process's stdout.
    async fn run(&self, bundle: &Path, id: &str) -> anyhow::Result<Vec<u8>> {
        let mut c = self.command()?;
        c.arg("run")
            .arg(format!("--bundle={}", bundle.display()))
            .arg(id)
            .stdout(Stdio::piped());
        self.call(c, "run").await
    }

    /// `runsc run --detach`: returns once the process runs.
    async fn start(&self, bundle: &Path, id: &str) -> anyhow::Result<()> {
        let mut c = self.command()?;
        c.args(["run", "--detach"])
            .arg(format!("--bundle={}", bundle.display()))
            .arg(id);
        self.call(c, "run --detach").await.map(drop)
    }

    /// `runsc exec`: how long until `argv` exited 0.
    async fn exec(&self, id: &str, argv: &[&str]) -> anyhow::Result<Duration> {
        let mut c = self.command()?;
        c.args(["exec", id]).args(argv);
        let t = Instant::now();
        self.call(c, "exec").await?;
        Ok(t.elapsed())
    }

    /// Kills container `id`'s processes and deletes it.
    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let mut c = self.command()?;
        c.args(["delete", "--force", id]);
        self.call(c, "delete").await.map(drop)
    }
}

impl Drop for Runsc {
    fn drop(&mut self) {
        let list = std::process::Command::new(&self.bin)
            .args(self.flags())
            .args(["list", "--quiet"])
            .stderr(Stdio::null())
            .output();
        let Ok(list) = list else { return };
        for id in String::from_utf8_lossy(&list.stdout).split_whitespace() {
            let _ = std::process::Command::new(&self.bin)
                .args(self.flags())
                .args(["delete", "--force", id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_config_runs_the_args_in_a_writable_root_without_a_network_namespace() {
        let c = oci_config(Path::new("/cache/gvisor/minimal"), PYTHON);
        assert_eq!(c["process"]["args"], serde_json::json!(PYTHON));
        assert_eq!(c["process"]["cwd"], "/");
        assert!(c["process"]["env"][0]
            .as_str()
            .is_some_and(|e| e.starts_with("PATH=") && e.contains("/usr/bin")));
        assert_eq!(c["root"]["path"], "/cache/gvisor/minimal");
        assert_eq!(c["root"]["readonly"], false);
        let ns: Vec<&str> = c["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["type"].as_str().unwrap())
            .collect();
        assert_eq!(ns, ["pid", "ipc", "uts", "mount"]);
    }

    #[test]
    fn runsc_gets_its_own_state_dir_systrap_and_no_network() {
        let gv = Runsc::new("runsc".into(), "/tree".into()).unwrap();
        let flags = gv.flags();
        let state = gv.dir.path().join("state");
        assert_eq!(flags[0], format!("--root={}", state.display()));
        assert_eq!(flags[1..], ["--platform=systrap", "--network=none"]);
        let bundle = gv.bundle("t", TRUE).unwrap();
        let c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
        assert_eq!(c["process"]["args"], serde_json::json!(["true"]));
        assert_eq!(c["root"]["path"], "/tree");
    }

    #[test]
    fn the_unpacked_tree_is_named_after_the_image_directory_and_file() {
        let img = Path::new("/var/cache/pandastack/images/minimal-b0a7/rootfs-3994.ext4");
        assert_eq!(tree_name(img), "minimal-b0a7-rootfs-3994");
        assert_eq!(tree_name(Path::new("rootfs.ext4")), "rootfs");
    }

    #[test]
    fn ratio_is_ours_over_theirs_per_percentile() {
        let m = |p50, p99, n| Metric {
            p50,
            p99,
            n,
            unit: "ms",
        };
        let r = ratio(&m(150.0, 300.0, 20), &m(200.0, 200.0, 19));
        assert_eq!((r.p50, r.p99, r.n, r.unit), (0.75, 1.5, 19, "x"));
    }
}
