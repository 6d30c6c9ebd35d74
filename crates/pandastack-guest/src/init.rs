//! PID 1 duties: mount the basic filesystems, name the host, bring up networking, then serve the
//! agent on the virtio-serial port forever. Nothing here may exit: the kernel panics if PID 1 dies.

use std::path::Path;
use std::time::Duration;

use nix::mount::{mount, MsFlags};

use crate::services::State;

fn log(msg: impl std::fmt::Display) {
    eprintln!("pandastack-guest: {msg}");
}

fn mount_fs(src: &str, target: &str, fstype: &str, flags: MsFlags, data: Option<&str>) {
    let _ = std::fs::create_dir_all(target);
    if let Err(e) = mount(Some(src), target, Some(fstype), flags, data) {
        if e != nix::errno::Errno::EBUSY {
            log(format_args!("mount {fstype} on {target}: {e}"));
        }
    }
}

fn is_mounted(target: &str) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(target))
        })
        .unwrap_or(false)
}

fn mounts() {
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount_fs("proc", "/proc", "proc", nosuid, None);
    mount_fs("sysfs", "/sys", "sysfs", nosuid, None);
    if !is_mounted("/dev") {
        mount_fs(
            "devtmpfs",
            "/dev",
            "devtmpfs",
            MsFlags::MS_NOSUID,
            Some("mode=0755"),
        );
    }
    mount_fs(
        "devpts",
        "/dev/pts",
        "devpts",
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620,gid=5"),
    );
    if !Path::new("/dev/ptmx").exists()
        || std::fs::symlink_metadata("/dev/ptmx")
            .map(|m| !m.file_type().is_symlink())
            .unwrap_or(true)
    {
        let _ = std::fs::remove_file("/dev/ptmx");
        let _ = std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx");
    }
    mount_fs(
        "shm",
        "/dev/shm",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    );
    mount_fs(
        "tmpfs",
        "/run",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    );
    mount_fs(
        "tmpfs",
        "/tmp",
        "tmpfs",
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=1777"),
    );
    mount_fs(
        "cgroup2",
        "/sys/fs/cgroup",
        "cgroup2",
        nosuid,
        Some("nsdelegate"),
    );
    for (link, target) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        let _ = std::os::unix::fs::symlink(target, link);
    }
    // Offer every controller to child cgroups (users may run containers in the guest), and make
    // the agent's own subtree for per-command cgroups.
    if let Ok(c) = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers") {
        let enable: String = c.split_whitespace().map(|c| format!("+{c} ")).collect();
        let _ = std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", enable.trim());
    }
    let _ = std::fs::create_dir_all("/sys/fs/cgroup/pandastack");
}

/// Value of `key=` on the kernel command line.
pub fn cmdline_value<'a>(cmdline: &'a str, key: &str) -> Option<&'a str> {
    cmdline
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn raise_nofile() {
    let _ = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        1 << 20,
        1 << 20,
    );
}

/// Entry point when running as PID 1. Never returns.
pub fn pid1_main() -> ! {
    std::panic::set_hook(Box::new(|info| log(format_args!("panic: {info}"))));
    mounts();
    raise_nofile();
    std::env::set_var(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let hostname = cmdline_value(&cmdline, "pandastack.hostname")
        .map(str::to_owned)
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sandbox".into());
    if let Err(e) = crate::services::set_hostname(&hostname) {
        log(format_args!("set hostname: {e}"));
    }
    loop {
        let result = std::panic::catch_unwind(|| {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(serve(&cmdline))
        });
        match result {
            Ok(Err(e)) => log(format_args!("agent stopped: {e:#}; restarting")),
            Err(_) => log("agent panicked; restarting"),
            Ok(Ok(())) => {}
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

async fn serve(cmdline: &str) -> anyhow::Result<()> {
    let state = State::new(true);
    crate::reaper::ensure_started()?;
    let net = pandastack_guest_proto::v1::NetworkConfig {
        address_cidr: cmdline_value(cmdline, "pandastack.ip")
            .unwrap_or_default()
            .to_owned(),
        gateway: cmdline_value(cmdline, "pandastack.gw")
            .unwrap_or_default()
            .to_owned(),
        dns: cmdline_value(cmdline, "pandastack.dns")
            .map(|d| d.split(',').map(str::to_owned).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    if !net.address_cidr.is_empty() {
        if let Err(e) = crate::services::configure_network(&net).await {
            log(format_args!("network: {}", e.message()));
        }
    } else {
        let mut ip = std::process::Command::new("ip");
        ip.args(["link", "set", "lo", "up"]);
        let _ = crate::reaper::output(ip).await;
    }
    let port = loop {
        match crate::port::find_port() {
            Some(p) => break p,
            None => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    let up = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() * 1000 + t.tv_nsec() / 1_000_000)
        .unwrap_or(0);
    log(format_args!(
        "ready on {} ({up} ms since boot)",
        port.display()
    ));
    crate::port::serve_port(&port, state).await
}

/// Stops every process, flushes disks and resets the VM (the host runs QEMU with `-no-reboot`
/// and the kernel with `reboot=t`, so the VM ends).
pub fn power_off(_reboot: bool) -> ! {
    use nix::sys::signal::{kill, Signal};
    let all = nix::unistd::Pid::from_raw(-1);
    let _ = kill(all, Signal::SIGTERM);
    std::thread::sleep(Duration::from_secs(1));
    let _ = kill(all, Signal::SIGKILL);
    nix::unistd::sync();
    let _ = nix::sys::reboot::reboot(nix::sys::reboot::RebootMode::RB_AUTOBOOT);
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[cfg(test)]
mod tests {
    use super::cmdline_value;

    #[test]
    fn reads_kernel_cmdline_values() {
        let c = "console=ttyS0 pandastack.hostname=sb-1 pandastack.ip=10.0.0.2/24 quiet";
        assert_eq!(cmdline_value(c, "pandastack.hostname"), Some("sb-1"));
        assert_eq!(cmdline_value(c, "pandastack.ip"), Some("10.0.0.2/24"));
        assert_eq!(cmdline_value(c, "pandastack.gw"), None);
        assert_eq!(cmdline_value(c, "quiet"), None);
    }
}
