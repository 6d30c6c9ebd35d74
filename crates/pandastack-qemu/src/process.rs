//! The QEMU process: spawning it detached from us, watching it through a pidfd, reading its
//! resource use from /proc. A VM process is never tied to the lifetime of the host agent: it runs
//! in its own process group and is found again by pid file after an agent restart.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
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

/// How a VM process is confined (see [`crate::confine`]).
#[derive(Debug)]
pub struct Confinement {
    /// Descriptors it inherits (the caller keeps them open until spawn returns): the lock of
    /// its uid claim, held for as long as it lives, and the files it names through fd sets or
    /// `/proc/self/fd`.
    pub inherit: Vec<RawFd>,
    /// Runs as this uid (and gid) from its first instruction, with an empty bounding set and
    /// under this Landlock rule set. `None`: it starts as root and drops to its uid itself
    /// (`-run-with chroot=…,user=…`), keeping [`KEPT_CAPABILITIES`] in its bounding set until
    /// then — where the kernel has no Landlock.
    pub drop_to: Option<(u32, RawFd)>,
    /// A supplementary group besides its own (the group of `/dev/kvm`, for a KVM guest).
    pub extra_group: Option<u32>,
}

/// `binary` as a path `execve(2)` takes: itself when it names a directory, else the first
/// executable file of that name on `PATH` (what a shell would run).
pub(crate) fn resolve(binary: &Path) -> Result<std::path::PathBuf, VmError> {
    if binary.components().count() > 1 {
        return Ok(binary.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(binary))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| {
            VmError::Spawn(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} not found on PATH", binary.display()),
            ))
        })
}

/// `clone3(2)`'s argument (`struct clone_args`, version 2: 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The steps of the child's set-up, reported with errno when one fails.
const STEPS: [&str; 12] = [
    "join cgroup",
    "enter network namespace",
    "redirect stdio",
    "hand over descriptors",
    "chdir",
    "setpgid",
    "drop bounding set",
    "drop to the vm uid",
    "no_new_privs",
    "landlock",
    "execve",
    "signal mask",
];

impl Process {
    /// Spawns `binary argv` in `cwd` with stdout/stderr appended to `log`, inside the network
    /// namespace `netns` when given, joining the cgroups whose `cgroup.procs` files are given
    /// before it runs. With `confined`, the process runs with `no_new_privs`, in pid, IPC and
    /// UTS namespaces of its own (it is pid 1 of its pid namespace: it sees no other process),
    /// and inherits the descriptors `confined` lists.
    ///
    /// The process is made with `clone3(2)` rather than `fork`: the pid namespace has to be
    /// created with it, and the pidfd comes with it. It is our child; a task reaps it when it
    /// ends, so it never lingers as a zombie.
    pub fn spawn(
        binary: &Path,
        argv: &[std::ffi::OsString],
        cwd: &Path,
        log: &Path,
        netns: Option<&Path>,
        cgroup_procs: Vec<std::fs::File>,
        confined: Option<Confinement>,
    ) -> Result<Self, VmError> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let cstr = |s: &std::ffi::OsStr| {
            CString::new(s.as_bytes())
                .map_err(|_| VmError::InvalidSpec(format!("{s:?} contains a NUL byte")))
        };
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let null = std::fs::File::open("/dev/null")?;
        let ns = netns
            .map(|ns| {
                std::fs::File::open(ns).map_err(|e| {
                    VmError::InvalidSpec(format!("network namespace {}: {e}", ns.display()))
                })
            })
            .transpose()?;
        let program = resolve(binary)?;
        let program_c = cstr(program.as_os_str())?;
        let mut args_c = vec![cstr(binary.as_os_str())?];
        for a in argv {
            args_c.push(cstr(a)?);
        }
        let mut arg_ptrs: Vec<*const libc::c_char> = args_c.iter().map(|a| a.as_ptr()).collect();
        arg_ptrs.push(std::ptr::null());
        let env_c: Vec<CString> = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv)
            })
            .filter_map(Result::ok)
            .collect();
        let mut env_ptrs: Vec<*const libc::c_char> = env_c.iter().map(|e| e.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());
        let cwd_c = cstr(cwd.as_os_str())?;
        let last_cap = last_capability();
        let mut ends = [0 as libc::c_int; 2];
        // SAFETY: `ends` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
            return Err(VmError::Spawn(std::io::Error::last_os_error()));
        }
        // SAFETY: pipe2 returned two new descriptors that nothing else owns.
        let (err_r, err_w) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };

        let mut flags = libc::CLONE_PIDFD as u64;
        if confined.is_some() {
            flags |= (libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;
        }
        let mut pidfd: libc::c_int = -1;
        let args = CloneArgs {
            flags,
            pidfd: &mut pidfd as *mut libc::c_int as u64,
            exit_signal: libc::SIGCHLD as u64,
            ..Default::default()
        };
        // SAFETY: clone3 without CLONE_VM is fork(2) with more flags: the child gets a copy of
        // this address space holding only the calling thread, and the stack (0: the copy of
        // ours) is valid in it. `args` and `pidfd` are live for the call.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        if pid == 0 {
            // SAFETY: in the child, before exec. Everything it touches was allocated before the
            // clone and is only read; it makes system calls and nothing else (no allocation,
            // no lock, no Rust runtime), so it is async-signal-safe, as a child of a
            // multi-threaded process must be.
            unsafe {
                child(ChildPlan {
                    cgroup_procs: &cgroup_procs,
                    netns: ns.as_ref().map(|f| f.as_raw_fd()),
                    null: null.as_raw_fd(),
                    out: out.as_raw_fd(),
                    confined: confined.as_ref(),
                    cwd: &cwd_c,
                    program: &program_c,
                    argv: &arg_ptrs,
                    envp: &env_ptrs,
                    last_cap,
                    err: err_w.as_raw_fd(),
                })
            }
        }
        if pid < 0 {
            return Err(VmError::Spawn(std::io::Error::last_os_error()));
        }
        drop(err_w);
        // SAFETY: clone3 with CLONE_PIDFD stored a new pidfd (close-on-exec) that nothing
        // else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
        // The child writes (step, errno) if its set-up fails; EOF alone means it exec'd.
        let mut report = [0u8; 5];
        let mut got = 0;
        loop {
            match rustix::io::read(&err_r, &mut report[got..]) {
                Ok(0) => break,
                Ok(n) => {
                    got += n;
                    if got == report.len() {
                        break;
                    }
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(VmError::Spawn(e.into())),
            }
        }
        if got > 0 {
            reap(&pidfd, true);
            let step = STEPS.get(report[0] as usize).copied().unwrap_or("set-up");
            let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
            let e = std::io::Error::from_raw_os_error(errno);
            return Err(VmError::Spawn(std::io::Error::new(
                e.kind(),
                format!("{}: {step}: {e}", binary.display()),
            )));
        }
        let pid = pid as u32;
        // Its exit is collected as soon as it happens, by whoever watches it or not.
        if let (Ok(handle), Ok(fd)) = (tokio::runtime::Handle::try_current(), pidfd.try_clone()) {
            handle.spawn(async move {
                // SAFETY: `fd` is an OwnedFd moved into the AsyncFd, so it stays open and refers
                // to this process until the AsyncFd is dropped.
                if let Ok(watch) = unsafe { AsyncFd::register(fd) } {
                    let _ = watch.readable().await;
                    reap(watch.get_ref(), false);
                }
            });
        }
        // SAFETY: `pidfd` is an OwnedFd moved into the AsyncFd, so it stays open and refers to
        // this process until the AsyncFd is dropped.
        let pidfd = unsafe { AsyncFd::register(pidfd) }.map_err(|e| VmError::Io(e.into()))?;
        Ok(Self { pid, pidfd })
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

/// What the child of [`Process::spawn`] does between clone and exec, all prepared beforehand.
struct ChildPlan<'a> {
    cgroup_procs: &'a [std::fs::File],
    netns: Option<RawFd>,
    null: RawFd,
    out: RawFd,
    confined: Option<&'a Confinement>,
    cwd: &'a std::ffi::CStr,
    program: &'a std::ffi::CStr,
    argv: &'a [*const libc::c_char],
    envp: &'a [*const libc::c_char],
    last_cap: libc::c_int,
    err: RawFd,
}

/// The child's side of [`Process::spawn`]: sets itself up and execs, or reports the step that
/// failed with its errno on `plan.err` and exits.
///
/// # Safety
/// Only to be called in the child of a clone, before exec: it never returns.
unsafe fn child(plan: ChildPlan<'_>) -> ! {
    // SAFETY: see the function's contract; each call below is a plain system call on
    // descriptors and strings prepared before the clone.
    unsafe {
        let fail = |step: usize| -> ! {
            let errno = *libc::__errno_location();
            let e = errno.to_ne_bytes();
            let report = [step as u8, e[0], e[1], e[2], e[3]];
            libc::write(plan.err, report.as_ptr().cast(), report.len());
            libc::_exit(127)
        };
        let check = |r: libc::c_int, step: usize| {
            if r == -1 {
                fail(step)
            }
        };
        // Signals as a new program expects them: none blocked, SIGPIPE not ignored (Rust ignores
        // it in its own processes).
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        check(
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()),
            11,
        );
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Writing "0" to cgroup.procs moves the writer itself.
        for f in plan.cgroup_procs {
            if libc::write(f.as_raw_fd(), b"0".as_ptr().cast(), 1) != 1 {
                fail(0);
            }
        }
        if let Some(ns) = plan.netns {
            check(libc::setns(ns, libc::CLONE_NEWNET), 1);
        }
        check(libc::dup2(plan.null, 0), 2);
        check(libc::dup2(plan.out, 1), 2);
        check(libc::dup2(plan.out, 2), 2);
        if let Some(c) = plan.confined {
            // Clearing close-on-exec here, in the child alone, hands these descriptors to the new
            // program and to no other.
            for &fd in &c.inherit {
                check(libc::fcntl(fd, libc::F_SETFD, 0), 3);
            }
        }
        check(libc::chdir(plan.cwd.as_ptr()), 4);
        // Own process group: a signal to the server's group (Ctrl-C) must not reach VMs.
        check(libc::setpgid(0, 0), 5);
        if let Some(c) = plan.confined {
            // The bounding set goes first, while this is still root (CAP_SETPCAP); a process that
            // drops to its uid here keeps none, one that drops itself later keeps what it needs
            // until then.
            for cap in 0..=plan.last_cap {
                if c.drop_to.is_none() && KEPT_CAPABILITIES.contains(&cap) {
                    continue;
                }
                check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0), 6);
            }
            if let Some((uid, _)) = c.drop_to {
                let gid = uid;
                let groups = [gid, c.extra_group.unwrap_or(gid)];
                let n = if c.extra_group.is_some() { 2 } else { 1 };
                // The raw system calls, not libc's wrappers: in a process libc believes has
                // other threads (this one is a clone of a multi-threaded server, made behind
                // libc's back) the wrappers take a lock to change every thread's ids, which a
                // thread of the parent may have held at the clone — a hang, seen in CI. Here
                // there is one thread, and the system calls change exactly its ids.
                let ok = |r: libc::c_long| if r == -1 { -1 } else { 0 };
                check(
                    ok(libc::syscall(libc::SYS_setgroups, n, groups.as_ptr())),
                    7,
                );
                check(ok(libc::syscall(libc::SYS_setresgid, gid, gid, gid)), 7);
                // Leaving uid 0 clears the permitted and effective sets: no capability is left.
                check(ok(libc::syscall(libc::SYS_setresuid, uid, uid, uid)), 7);
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 8);
            if let Some((_, ruleset)) = c.drop_to {
                if crate::landlock::restrict_self(ruleset).is_err() {
                    fail(9);
                }
            }
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        fail(10)
    }
}

/// Collects the exit of our child behind `pidfd` (`block`: wait for it). Not our child (a VM
/// found again after a restart), or already collected: nothing to do.
fn reap(pidfd: &OwnedFd, block: bool) {
    let mut info: libc::siginfo_t = unsafe_zeroed_siginfo();
    let options = libc::WEXITED | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: `info` is a live siginfo_t the kernel writes into; the pidfd is open.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                options,
            )
        };
        if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return;
    }
}

fn unsafe_zeroed_siginfo() -> libc::siginfo_t {
    // SAFETY: siginfo_t is plain data for which all-zero bytes are a valid value.
    unsafe { std::mem::zeroed() }
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

    /// The confined spawn changes ids with raw system calls: libc's wrappers, in a clone of a
    /// multi-threaded process, wait on a lock another thread of the parent may have held at the
    /// clone (threads coming and going take it), and the child hung before exec. Two threads
    /// here start and end threads without pause while 300 confined processes are spawned.
    #[test]
    fn a_confined_spawn_never_hangs_while_threads_come_and_go() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        if !rustix::process::geteuid().is_root() || crate::landlock::abi().is_none() {
            eprintln!("skipped: needs root and Landlock");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let churn: Vec<_> = (0..2)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = std::thread::spawn(|| {}).join();
                    }
                })
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let work = dir.path().to_owned();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _in_runtime = rt.enter();
            let rules = crate::confine::base_rules(&work, Path::new("true")).unwrap();
            for i in 0..300 {
                let spawned = Process::spawn(
                    Path::new("true"),
                    &[],
                    &work,
                    &work.join("log"),
                    None,
                    Vec::new(),
                    Some(Confinement {
                        inherit: Vec::new(),
                        drop_to: Some((65_534, rules.fd())),
                        extra_group: None,
                    }),
                );
                if let Err(e) = spawned {
                    let _ = done.send(Err(format!("spawn {i}: {e}")));
                    return;
                }
            }
            let _ = done.send(Ok(()));
        });
        let outcome = finished.recv_timeout(Duration::from_secs(120));
        stop.store(true, Ordering::Relaxed);
        for t in churn {
            t.join().unwrap();
        }
        match outcome {
            Ok(r) => r.unwrap(),
            Err(_) => panic!("a confined spawn hung before exec"),
        }
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
