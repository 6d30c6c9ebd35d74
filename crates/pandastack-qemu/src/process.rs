//! The QEMU process: spawning it detached from us, watching it through a pidfd, reading its
//! resource use from /proc. A VM process is never tied to the lifetime of the host agent: it runs
//! in its own process group and is found again by pid file after an agent restart.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use pandastack_vm::{VmError, VmStats};
use rustix::process::{Pid, PidfdFlags, Signal};
use tokio::io::unix::AsyncFd;

/// The capabilities a confined QEMU keeps in its bounding set, so in what it starts with as
/// root: what it needs until it drops to the VM's uid (`-run-with chroot=…,user=…`), after which
/// it has none. `CAP_DAC_OVERRIDE`: its disk and volume files are the VM uid's (mode 0600) and
/// it opens them as root (without it the bake's QEMU cannot open its disk);
/// `CAP_SETGID`/`CAP_SETUID`: the drop itself (`setgroups`, `setgid`, `setuid`);
/// `CAP_SYS_CHROOT`: the chroot into its run directory. Every other capability, `CAP_NET_ADMIN`
/// included (the slot's TAP attaches without it), is dropped from the bounding set before exec,
/// so no code QEMU runs, before or after the drop, can hold one.
const KEPT_CAPABILITIES: [libc::c_int; 4] = [
    1,  // CAP_DAC_OVERRIDE
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    18, // CAP_SYS_CHROOT
];

/// The highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`; 40 on
/// kernels since 5.9 when unreadable). Read once: every VM spawn needs it.
fn last_capability() -> libc::c_int {
    static LAST: std::sync::OnceLock<libc::c_int> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40)
    })
}

/// A live QEMU process we can wait on and signal, child or not.
#[derive(Debug)]
pub struct Process {
    pid: u32,
    pidfd: AsyncFd<OwnedFd>,
}

impl Process {
    /// Spawns `binary argv` in `cwd` with stdout/stderr appended to `log`, inside the network
    /// namespace `netns` when given, joining the cgroups whose `cgroup.procs` files are given
    /// before it runs. With `confined`, the process runs with `no_new_privs` and inherits
    /// the given descriptors (which the caller keeps open until this returns): the lock of its
    /// uid claim, held for as long as it lives, and the files it names through fd sets.
    pub fn spawn(
        binary: &Path,
        argv: &[std::ffi::OsString],
        cwd: &Path,
        log: &Path,
        netns: Option<&Path>,
        cgroup_procs: Vec<std::fs::File>,
        confined: Option<Vec<std::os::fd::RawFd>>,
    ) -> Result<Self, VmError> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let err = out.try_clone()?;
        let mut cmd = tokio::process::Command::new(binary);
        if !cgroup_procs.is_empty() {
            // SAFETY: the closure runs in the forked child before exec and only makes write(2)
            // calls on fds the parent keeps open until spawn returns; it allocates nothing and
            // takes no locks, so it is async-signal-safe. Writing "0" moves the writer itself.
            unsafe {
                cmd.pre_exec(move || {
                    for f in &cgroup_procs {
                        nix::unistd::write(f, b"0").map_err(std::io::Error::from)?;
                    }
                    Ok(())
                });
            }
        }
        if let Some(ns) = netns {
            // Opened here (close-on-exec), entered in the child between fork and exec.
            let fd = std::fs::File::open(ns).map_err(|e| {
                VmError::InvalidSpec(format!("network namespace {}: {e}", ns.display()))
            })?;
            // SAFETY: the closure runs in the forked child before exec and only makes the
            // setns(2) system call on an fd the parent keeps open until spawn returns; it
            // allocates nothing and takes no locks, so it is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(std::io::Error::from)
                });
            }
        }
        if let Some(inherit) = confined {
            let last_cap = last_capability();
            // SAFETY: the closure runs in the forked child before exec and only makes the
            // fcntl(2), unshare(2) and prctl(2) system calls, on fds the parent keeps open until
            // spawn returns, reading a vector allocated before the fork; it allocates nothing
            // and takes no locks, so it is async-signal-safe. Clearing close-on-exec in the
            // child alone hands those descriptors to the new program and to no other.
            unsafe {
                cmd.pre_exec(move || {
                    for &fd in &inherit {
                        if libc::fcntl(fd, libc::F_SETFD, 0) == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    // IPC and host name of its own: no System V objects or POSIX message
                    // queues shared with the host or other VMs, no host name to read.
                    if libc::unshare(libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    for cap in 0..=last_cap {
                        if KEPT_CAPABILITIES.contains(&cap) {
                            continue;
                        }
                        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == -1 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .args(argv)
            .current_dir(cwd)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            // Own process group: a signal to the agent's group (Ctrl-C) must not reach VMs.
            .process_group(0)
            .kill_on_drop(false)
            .spawn()
            .map_err(VmError::Spawn)?;
        let pid = child
            .id()
            .ok_or_else(|| VmError::Exited("exited at once".into()))?;
        // Dropping the tokio handle leaves reaping to tokio's orphan queue; we watch the pidfd.
        drop(child);
        Self::from_pid(pid)
    }

    /// Opens a pidfd for an existing process.
    pub fn from_pid(pid: u32) -> Result<Self, VmError> {
        let raw = Pid::from_raw(pid as i32)
            .ok_or_else(|| VmError::InvalidSpec(format!("bad pid {pid}")))?;
        let fd = rustix::process::pidfd_open(raw, PidfdFlags::empty())
            .map_err(|e| VmError::Io(e.into()))?;
        // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it stays open and refers to this
        // pidfd until the AsyncFd is dropped; OwnedFd::as_raw_fd always returns that same fd.
        let pidfd = unsafe { AsyncFd::register(fd) }.map_err(|e| VmError::Io(e.into()))?;
        Ok(Self { pid, pidfd })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// True while the process has not exited.
    pub fn alive(&self) -> bool {
        // A pidfd polls readable once the process has exited.
        let mut fds = [rustix::event::PollFd::new(
            self.pidfd.get_ref(),
            rustix::event::PollFlags::IN,
        )];
        matches!(
            rustix::event::poll(&mut fds, Some(&rustix::time::Timespec::default())),
            Ok(0)
        )
    }

    /// Waits until the process exits.
    pub async fn exited(&self) {
        loop {
            match self.pidfd.readable().await {
                Ok(mut guard) => {
                    if !self.alive() {
                        return;
                    }
                    guard.clear_ready();
                }
                Err(_) => return,
            }
        }
    }

    /// Waits up to `timeout` for exit; true if it exited.
    pub async fn wait_timeout(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.exited()).await.is_ok()
    }

    pub fn kill(&self) -> Result<(), VmError> {
        match rustix::process::pidfd_send_signal(self.pidfd.get_ref(), Signal::KILL) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(e) => Err(VmError::Io(e.into())),
        }
    }

    /// User + system CPU time from /proc (one small read).
    pub fn cpu_time(&self) -> Result<Duration, VmError> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        Ok(cpu_time(&stat).unwrap_or_default())
    }

    /// RSS, PSS and CPU time from /proc.
    pub fn stats(&self) -> Result<VmStats, VmError> {
        let rollup = std::fs::read_to_string(format!("/proc/{}/smaps_rollup", self.pid))?;
        let kib = |key: &str| -> u64 {
            rollup
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        Ok(VmStats {
            pid: self.pid,
            rss_bytes: kib("Rss:"),
            pss_bytes: kib("Pss:"),
            cpu_time: cpu_time(&stat).unwrap_or_default(),
        })
    }
}

/// utime + stime from a /proc/<pid>/stat line.
fn cpu_time(stat: &str) -> Option<Duration> {
    // The command name (field 2) may contain spaces; fields after the closing paren are fixed.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let hz = rustix::param::clock_ticks_per_second();
    Some(Duration::from_millis((utime + stime) * 1000 / hz))
}

/// The pid recorded in a run directory's pid file, if that process still has this directory's
/// `marker` file open (guards against pid reuse). The check goes through the process's open
/// files rather than its command line because a run directory may be renamed while its VM runs
/// (a pre-started VM handed to a sandbox): the kernel reports open files under their current path.
pub fn live_pid(run_dir: &Path, pid_file: &Path, marker: &str) -> Option<u32> {
    let pid: u32 = std::fs::read_to_string(pid_file)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let want = std::fs::canonicalize(run_dir).ok()?.join(marker);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == want))
        .then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_time_with_spaces_in_comm() {
        let hz = rustix::param::clock_ticks_per_second();
        let line = format!(
            "42 (qemu system) S 1 42 42 0 -1 4194560 100 0 0 0 {} {} 0 0 20 0",
            hz * 2,
            hz
        );
        assert_eq!(cpu_time(&line), Some(Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn watches_exit_of_a_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = Process::spawn(
            Path::new("sleep"),
            &["0.2".into()],
            dir.path(),
            &dir.path().join("log"),
            None,
            Vec::new(),
            None,
        )
        .unwrap();
        assert!(p.alive());
        assert!(p.wait_timeout(Duration::from_secs(5)).await);
        assert!(!p.alive());
    }
}
