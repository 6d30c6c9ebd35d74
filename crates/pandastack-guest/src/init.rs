//! PID 1 duties: mount the basic filesystems, name the host, bring up networking, then serve the
//! agent on the virtio-serial port forever; and, on request, stop everything and end the VM.
//!
//! Nothing here may exit or unwind out: the kernel panics if PID 1 dies. Errors are logged to
//! the console (stderr) and the agent carries on, or restarts its runtime after a pause.

use std::path::Path;
use std::time::Duration;

use nix::mount::{mount, MsFlags};
use nix::sys::signal::{SigHandler, Signal};

use crate::services::State;

const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const CGROUP: &str = "/sys/fs/cgroup";
const AGENT_CGROUP: &str = "/sys/fs/cgroup/pandastack";

fn log(msg: impl std::fmt::Display) {
    eprintln!("pandastack-guest: {msg}");
}

fn mount_fs(src: &str, target: &str, fstype: &str, flags: MsFlags, data: Option<&str>) {
    if is_mounted(target) {
        return;
    }
    let _ = std::fs::create_dir_all(target);
    if let Err(e) = mount(Some(src), target, Some(fstype), flags, data) {
        if e != nix::errno::Errno::EBUSY {
            log(format_args!("mount {fstype} on {target}: {e}"));
        }
    }
}

/// Mount points and options from `/proc/self/mounts` (empty until /proc is mounted).
fn mount_table() -> Vec<(String, String)> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_src, target, _ty, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some((target.to_owned(), opts.to_owned()))
        })
        .collect()
}

fn is_mounted(target: &str) -> bool {
    mount_table().iter().any(|(t, _)| t == target)
}

/// Whether the last mount on `/` in `table` is read-only.
fn root_read_only(table: &[(String, String)]) -> bool {
    table
        .iter()
        .rev()
        .find(|(t, _)| t == "/")
        .is_some_and(|(_, opts)| opts.split(',').any(|o| o == "ro"))
}

fn mounts() {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs("proc", "/proc", "proc", nosuid, None);
    if root_read_only(&mount_table()) {
        if let Err(e) = mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REMOUNT,
            None::<&str>,
        ) {
            log(format_args!("remount / read-write: {e}"));
        }
    }
    mount_fs("sysfs", "/sys", "sysfs", nosuid, None);
    mount_fs(
        "devtmpfs",
        "/dev",
        "devtmpfs",
        MsFlags::MS_NOSUID,
        Some("mode=0755"),
    );
    mount_fs(
        "devpts",
        "/dev/pts",
        "devpts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
    );
    // With a private devpts instance, /dev/ptmx must lead to it.
    let ptmx_is_link = std::fs::symlink_metadata("/dev/ptmx")
        .map(|m| m.file_type().is_symlink())
        .unwrap_or(false);
    if !ptmx_is_link {
        let _ = std::fs::remove_file("/dev/ptmx");
        if let Err(e) = std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx") {
            log(format_args!("link /dev/ptmx: {e}"));
        }
    }
    let tmp = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_fs("shm", "/dev/shm", "tmpfs", tmp, Some("mode=1777"));
    mount_fs("tmpfs", "/run", "tmpfs", tmp, Some("mode=0755"));
    mount_fs("tmpfs", "/tmp", "tmpfs", tmp, Some("mode=1777"));
    // `favordynmods`: moving a process into a cgroup, which every command's child does before
    // it runs (its own cgroup), otherwise waits for an RCU grace period — tens of ms at HZ=100,
    // and in about half of the execs measured here (`exec_true_warm_ms` 58 ms instead of 18).
    // The price is a slightly slower fork and exit. Kernels before 6.0 refuse the option (the
    // failure is logged): the second mount, skipped when the first worked, goes without it.
    for opts in ["nsdelegate,favordynmods", "nsdelegate"] {
        mount_fs("cgroup2", CGROUP, "cgroup2", nosuid, Some(opts));
    }
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        if std::fs::symlink_metadata(link).is_err() {
            let _ = std::os::unix::fs::symlink(target, link);
        }
    }
    // Offer every controller to child cgroups (users may run containers in the guest), and make
    // the agent's subtree for per-command cgroups (it holds no process itself, so controllers can
    // be enabled for its children too).
    enable_controllers(Path::new(CGROUP));
    match std::fs::create_dir(AGENT_CGROUP) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => log(format_args!("create {AGENT_CGROUP}: {e}")),
    }
    enable_controllers(Path::new(AGENT_CGROUP));
}

/// Enables, one by one, every controller available in `dir` for its children.
fn enable_controllers(dir: &Path) {
    let Ok(available) = std::fs::read_to_string(dir.join("cgroup.controllers")) else {
        return;
    };
    for c in available.split_whitespace() {
        if let Err(e) = std::fs::write(dir.join("cgroup.subtree_control"), format!("+{c}")) {
            log(format_args!(
                "enable cgroup controller {c} in {}: {e}",
                dir.display()
            ));
        }
    }
}

/// Value of `key=` on the kernel command line.
pub fn cmdline_value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Network settings from the kernel command line (`pandastack.ip=ADDR/PREFIX pandastack.gw=IP
/// pandastack.dns=IP[,IP]`); `None` without `pandastack.ip`.
fn cmdline_network(cmdline: &str) -> Option<pandastack_guest_proto::v1::NetworkConfig> {
    let address_cidr = cmdline_value(cmdline, "pandastack.ip")?.to_owned();
    Some(pandastack_guest_proto::v1::NetworkConfig {
        address_cidr,
        gateway: cmdline_value(cmdline, "pandastack.gw")
            .unwrap_or_default()
            .to_owned(),
        dns: cmdline_value(cmdline, "pandastack.dns")
            .map(|d| {
                d.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        ..Default::default()
    })
}

/// The hostname to use: the kernel command line's, else /etc/hostname's, else "sandbox".
fn hostname(cmdline: &str, etc_hostname: Option<&str>) -> String {
    cmdline_value(cmdline, "pandastack.hostname")
        .or(etc_hostname.map(str::trim))
        .filter(|h| !h.is_empty())
        .unwrap_or("sandbox")
        .to_owned()
}

fn raise_nofile() {
    use nix::sys::resource::{setrlimit, Resource};
    let max = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 20);
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, max, max) {
        log(format_args!("raise RLIMIT_NOFILE: {e}"));
    }
}

/// The agent ignores the signals a console or a stray `kill` would send to init. Commands get
/// default dispositions back before exec (see `services::exec`).
fn ignore_signals() {
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: installs SIG_IGN, not a handler, so no code runs in signal context.
        if let Err(e) = unsafe { nix::sys::signal::signal(sig, SigHandler::SigIgn) } {
            log(format_args!("ignore {sig}: {e}"));
        }
    }
}

fn boot_ms() -> i64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() * 1000 + t.tv_nsec() / 1_000_000)
        .unwrap_or(0)
}

/// Entry point when running as PID 1. Never returns.
pub fn pid1_main() -> ! {
    std::panic::set_hook(Box::new(|info| log(format_args!("panic: {info}"))));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .without_time()
        .try_init();
    mounts();
    ignore_signals();
    raise_nofile();
    std::env::set_var("PATH", PATH);
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let etc_hostname = std::fs::read_to_string("/etc/hostname").ok();
    let name = hostname(&cmdline, etc_hostname.as_deref());
    if let Err(e) = crate::services::set_hostname(&name) {
        log(format_args!("set hostname {name}: {e}"));
    }
    let mut first = true;
    loop {
        let first_run = std::mem::take(&mut first);
        let result = std::panic::catch_unwind(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(serve(&cmdline, first_run))
        });
        match result {
            Ok(Err(e)) => log(format_args!("agent stopped: {e:#}; restarting")),
            Err(_) => log("agent panicked; restarting"),
            Ok(Ok(())) => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

async fn serve(cmdline: &str, first: bool) -> anyhow::Result<()> {
    let state = State::new(true);
    crate::reaper::ensure_started()?;
    if first {
        if let Err(e) = crate::services::link_up("lo").await {
            log(format_args!("bring up lo: {e:#}"));
        }
        if let Some(net) = cmdline_network(cmdline) {
            if let Err(e) = crate::services::configure_network(&net).await {
                log(format_args!(
                    "network from kernel command line: {:#}",
                    anyhow::Error::from(e)
                ));
            }
        }
    }
    let port = find_port().await;
    let mut announced = !first;
    crate::port::serve_port(&port, state, move || {
        if !std::mem::replace(&mut announced, true) {
            log(format_args!("ready ({} ms since boot)", boot_ms()));
        }
    })
    .await
}

/// Waits for the agent's port to appear (devtmpfs creates the node when the driver probes).
async fn find_port() -> std::path::PathBuf {
    let started = std::time::Instant::now();
    let mut warned = false;
    loop {
        if let Some(p) = crate::port::find_port() {
            return p;
        }
        if !warned && started.elapsed() > Duration::from_secs(5) {
            warned = true;
            log(format_args!(
                "no virtio-serial port named {} yet; still looking",
                pandastack_guest_proto::PORT_NAME
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Processes other than the agent and kernel threads (zombies excluded: the reaper takes them).
fn other_processes() -> usize {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
                return false;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            user_process(&stat)
        })
        .count()
}

/// From a `/proc/PID/stat` line: alive, and not a kernel thread (pid 2 and its children).
fn user_process(stat: &str) -> bool {
    // "pid (comm) state ppid ...": comm may contain spaces and parentheses.
    let Some((head, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let pid = head.split_whitespace().next().unwrap_or("");
    let mut f = rest.split_whitespace();
    let (state, ppid) = (f.next().unwrap_or("Z"), f.next().unwrap_or("2"));
    pid != "2" && ppid != "2" && state != "Z" && state != "X"
}

/// Stops every process (SIGTERM, up to 2 s, SIGKILL), flushes disks and resets the VM. The host
/// runs QEMU with `-no-reboot` and the kernel with `reboot=t`, so a reset ends the VM.
pub async fn power_off(reboot: bool) -> ! {
    use nix::sys::signal::kill;
    let all = nix::unistd::Pid::from_raw(-1);
    log(if reboot { "rebooting" } else { "shutting down" });
    let _ = kill(all, Signal::SIGTERM);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while other_processes() > 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = kill(all, Signal::SIGKILL);
    let _ = tokio::task::spawn_blocking(nix::unistd::sync).await;
    let r = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_AUTOBOOT);
    log(format_args!("reboot: {r:?}"));
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kernel_cmdline_values() {
        let c = "console=ttyS0 pandastack.hostname=sb-1 pandastack.ip=10.0.0.2/24 quiet";
        assert_eq!(cmdline_value(c, "pandastack.hostname"), Some("sb-1"));
        assert_eq!(cmdline_value(c, "pandastack.ip"), Some("10.0.0.2/24"));
        assert_eq!(cmdline_value(c, "pandastack.gw"), None);
        assert_eq!(cmdline_value(c, "quiet"), None);
        assert_eq!(cmdline_value(c, "pandastack.host"), None);
    }

    #[test]
    fn network_from_cmdline() {
        assert_eq!(
            cmdline_network("console=ttyS0 pandastack.gw=10.0.0.1"),
            None
        );
        let n = cmdline_network(
            "pandastack.ip=10.0.0.2/24 pandastack.gw=10.0.0.1 pandastack.dns=1.1.1.1,8.8.8.8",
        )
        .unwrap();
        assert_eq!(n.address_cidr, "10.0.0.2/24");
        assert_eq!(n.gateway, "10.0.0.1");
        assert_eq!(n.dns, ["1.1.1.1", "8.8.8.8"]);
        assert_eq!(n.interface, "");
        let n = cmdline_network("pandastack.ip=10.0.0.2/24").unwrap();
        assert!(n.gateway.is_empty() && n.dns.is_empty());
    }

    #[test]
    fn hostname_prefers_cmdline_then_etc() {
        assert_eq!(hostname("pandastack.hostname=a", Some("b\n")), "a");
        assert_eq!(hostname("quiet", Some("b\n")), "b");
        assert_eq!(hostname("quiet", Some("\n")), "sandbox");
        assert_eq!(hostname("", None), "sandbox");
    }

    #[test]
    fn detects_read_only_root() {
        let t = |s: &[(&str, &str)]| -> Vec<(String, String)> {
            s.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert!(root_read_only(&t(&[("/", "ro,relatime")])));
        assert!(!root_read_only(&t(&[
            ("/", "rw,relatime"),
            ("/boot", "ro")
        ])));
        assert!(!root_read_only(&t(&[("/", "ro"), ("/", "rw")])));
        assert!(!root_read_only(&t(&[("/", "rw,errors=remount-ro")])));
    }

    #[test]
    fn tells_user_processes_from_kernel_threads_and_zombies() {
        assert!(user_process("42 (sleep) S 1 42 42 0 -1"));
        assert!(user_process("43 (a) b) R 42 43 43 0 -1"));
        assert!(!user_process("2 (kthreadd) S 0 0 0 0 -1"));
        assert!(!user_process("17 (kworker/0:1) I 2 0 0 0 -1"));
        assert!(!user_process("44 (sh) Z 1 44 44 0 -1"));
        assert!(!user_process(""));
    }
}
