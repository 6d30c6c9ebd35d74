//! `pandastack doctor`: checks that this host can run sandboxes and says how to fix what is
//! missing. Each check prints one line: status, what was found, and a hint when not ok.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use pandastack_qemu::accel;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Data directory to check (reflink support, free space).
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    /// Guest kernel used for the accelerator boot probe (default: the cached build).
    #[arg(long, env = "PANDASTACK_KERNEL")]
    kernel: Option<PathBuf>,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warn,
    Fail,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    hint: Option<&str>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        hint: hint.map(str::to_owned),
    }
}

/// The newest cached kernel build, as written by scripts/build-kernel.sh.
pub fn cached_kernel() -> Option<PathBuf> {
    let cache = std::env::var_os("PANDASTACK_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/pandastack".into());
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(cache.join("kernel"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("vmlinux"))
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found.pop().map(|(_, p)| p)
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let mut checks = Vec::new();

    let qemu = std::process::Command::new("qemu-system-x86_64")
        .arg("--version")
        .output();
    let qemu_ok = match qemu {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            checks.push(check("qemu", Status::Ok, v, None));
            true
        }
        _ => {
            checks.push(check(
                "qemu",
                Status::Fail,
                "qemu-system-x86_64 not found",
                Some(
                    "run scripts/setup-host.sh (installs qemu-system-x86 from bookworm-backports)",
                ),
            ));
            false
        }
    };

    match args.kernel.clone().or_else(cached_kernel) {
        Some(k) if k.is_file() => {
            checks.push(check(
                "guest kernel",
                Status::Ok,
                k.display().to_string(),
                None,
            ));
            if qemu_ok {
                let choice = accel::detect(Path::new("qemu-system-x86_64"), &k).await;
                let status = if choice.accel == pandastack_vm::Accel::Kvm {
                    Status::Ok
                } else {
                    Status::Warn
                };
                checks.push(check(
                    "accelerator",
                    status,
                    format!("{}: {}", choice.accel, choice.reason),
                    (status != Status::Ok).then_some("guests run under software emulation (slower); on bare metal or a nested-VMX cloud host KVM is used automatically"),
                ));
            }
        }
        _ => checks.push(check(
            "guest kernel",
            Status::Fail,
            "no guest kernel built",
            Some("run scripts/setup-host.sh (builds it from linux-source-6.12 and caches it)"),
        )),
    }

    checks.push(reflink_check(&args.data_dir));
    checks.push(disk_check(&args.data_dir));
    checks.push(cgroup_check());
    checks.push(netns_check());

    if args.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            let tag = match c.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            println!("[{tag}] {:<13} {}", c.name, c.detail);
            if let Some(h) = &c.hint {
                println!("       {:<13} hint: {h}", "");
            }
        }
    }
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn existing_ancestor(p: &Path) -> PathBuf {
    let mut p = p.to_owned();
    while !p.exists() {
        if !p.pop() {
            return "/".into();
        }
    }
    p
}

fn reflink_check(data_dir: &Path) -> Check {
    let dir = existing_ancestor(data_dir);
    let result = (|| -> std::io::Result<bool> {
        let tmp = tempfile::tempdir_in(&dir)?;
        let a = tmp.path().join("a");
        std::fs::write(&a, b"reflink probe")?;
        let ok = std::process::Command::new("cp")
            .args(["--reflink=always"])
            .arg(&a)
            .arg(tmp.path().join("b"))
            .stderr(std::process::Stdio::null())
            .status()?
            .success();
        Ok(ok)
    })();
    match result {
        Ok(true) => check("reflink", Status::Ok, format!("{} supports reflink copies", dir.display()), None),
        Ok(false) => check(
            "reflink",
            Status::Warn,
            format!("{} has no reflink: disks and memory files are copied (slower creates, more disk)", dir.display()),
            Some("put the data dir on XFS (reflink=1) or btrfs; `pandastack host init` can create a loop-mounted XFS data dir"),
        ),
        Err(e) => check("reflink", Status::Fail, format!("cannot write in {}: {e}", dir.display()), Some("run as root or choose a writable --data-dir")),
    }
}

fn disk_check(data_dir: &Path) -> Check {
    let dir = existing_ancestor(data_dir);
    match nix::sys::statvfs::statvfs(&dir) {
        Ok(s) => {
            let free = s.blocks_available() * s.fragment_size();
            let gib = free as f64 / (1u64 << 30) as f64;
            let status = if gib < 5.0 { Status::Warn } else { Status::Ok };
            check(
                "disk",
                status,
                format!("{gib:.1} GiB free at {}", dir.display()),
                (status != Status::Ok).then_some("free space: templates need a few GiB each"),
            )
        }
        Err(e) => check(
            "disk",
            Status::Fail,
            format!("statvfs {}: {e}", dir.display()),
            None,
        ),
    }
}

fn cgroup_check() -> Check {
    match std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers") {
        Ok(c) => {
            let have: Vec<&str> = c.split_whitespace().collect();
            let missing: Vec<&str> = ["cpu", "memory", "pids"]
                .into_iter()
                .filter(|x| !have.contains(x))
                .collect();
            if missing.is_empty() {
                check(
                    "cgroup v2",
                    Status::Ok,
                    format!("controllers: {}", have.join(" ")),
                    None,
                )
            } else {
                check("cgroup v2", Status::Warn, format!("missing controllers: {}", missing.join(" ")), Some("enable them in the parent cgroup's cgroup.subtree_control; without them sandboxes run without cpu/memory/pids limits"))
            }
        }
        Err(_) => check(
            "cgroup v2",
            Status::Warn,
            "no unified cgroup v2 hierarchy at /sys/fs/cgroup",
            Some("boot the host with cgroup v2 (systemd.unified_cgroup_hierarchy=1)"),
        ),
    }
}

fn netns_check() -> Check {
    let name = format!("ps-doctor-{}", std::process::id());
    let run = |args: &[&str]| {
        std::process::Command::new("ip")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !run(&["netns", "add", &name]) {
        return check(
            "network",
            Status::Fail,
            "cannot create a network namespace",
            Some("run as root with iproute2 installed"),
        );
    }
    let tap = run(&["-n", &name, "tuntap", "add", "dev", "tap0", "mode", "tap"]);
    let nat = std::process::Command::new("ip")
        .args(["netns", "exec", &name, "iptables", "-t", "nat", "-L", "-n"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    run(&["netns", "del", &name]);
    match (tap, nat) {
        (true, true) => check(
            "network",
            Status::Ok,
            "netns, TAP and iptables NAT work",
            None,
        ),
        (false, _) => check(
            "network",
            Status::Fail,
            "cannot create a TAP device in a netns",
            Some("load the tun driver (/dev/net/tun)"),
        ),
        (_, false) => check(
            "network",
            Status::Warn,
            "iptables NAT unavailable",
            Some("install iptables (scripts/setup-host.sh)"),
        ),
    }
}
