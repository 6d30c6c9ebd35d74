//! Turning an `ExecStart` into a running process: program, working directory, pipes or a pty,
//! its own session, the requested user, and (as PID 1) its own cgroup.

use std::ffi::CString;
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

use nix::sys::wait::WaitStatus;
use nix::unistd::Uid;
use pandastack_guest_proto::v1;
use tokio::io::{AsyncRead, AsyncWrite};
use tonic::Status;

use super::env::{environment, identity, Identity};
use crate::services::pty;
use crate::services::State;

const CGROUP_ROOT: &str = "/sys/fs/cgroup/pandastack";

/// What to run: program and arguments.
pub(super) fn program(start: &v1::ExecStart) -> Result<(String, Vec<String>), Status> {
    if !start.shell.is_empty() {
        if !start.argv.is_empty() {
            return Err(Status::invalid_argument(
                "start: give argv or shell, not both",
            ));
        }
        return Ok(("/bin/sh".into(), vec!["-c".into(), start.shell.clone()]));
    }
    match start.argv.split_first() {
        Some((first, _)) if first.is_empty() => Err(Status::invalid_argument("argv[0] is empty")),
        Some((first, rest)) => Ok((first.clone(), rest.to_vec())),
        None => Err(Status::invalid_argument("start: argv or shell required")),
    }
}

fn working_dir(cwd: &str, who: &Identity) -> Result<PathBuf, Status> {
    if cwd.is_empty() {
        return Ok(if who.home.is_dir() {
            who.home.clone()
        } else {
            PathBuf::from("/")
        });
    }
    let p = PathBuf::from(cwd);
    if !p.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "cwd must be absolute: {cwd:?}"
        )));
    }
    if !p.is_dir() {
        return Err(Status::invalid_argument(format!(
            "cwd {cwd}: not a directory"
        )));
    }
    Ok(p)
}

/// A spawned command and the handles the driver needs.
pub(super) struct Running {
    pub tree: Tree,
    pub status: tokio::sync::oneshot::Receiver<WaitStatus>,
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub pty: Option<pty::Master>,
}

/// The processes of one command: its process group and, as PID 1, its cgroup.
pub(super) struct Tree {
    pub pid: i32,
    cgroup: Option<PathBuf>,
}

impl Tree {
    /// Kills the whole tree: the cgroup if there is one (catches processes that left the
    /// process group), and the process group.
    pub fn kill(&self) {
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::write(cg.join("cgroup.kill"), "1");
        }
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }

    /// Sends `sig` to the process group.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pid), sig);
    }

    /// Removes the command's cgroup. One that still has processes (background jobs of a command
    /// that exited) is kept in [`LEFTOVER`] and tried again at each later removal.
    pub fn remove_cgroup(&mut self) {
        let Some(cg) = self.cgroup.take() else {
            return;
        };
        let pending = {
            let mut left = LEFTOVER.lock().unwrap_or_else(PoisonError::into_inner);
            if std::fs::remove_dir(&cg).is_err() {
                left.push(cg);
            }
            !left.is_empty()
        };
        if pending {
            tokio::task::spawn_blocking(|| {
                let mut left = LEFTOVER.lock().unwrap_or_else(PoisonError::into_inner);
                left.retain(|c| {
                    std::fs::remove_dir(c).is_err_and(|e| e.kind() != ErrorKind::NotFound)
                });
            });
        }
    }
}

/// Cgroups of exited commands that still held processes when their command ended. Only these
/// are swept: sweeping every empty `exec-*` directory also removed the cgroup a starting command
/// had just made and not yet entered, and that command then ran outside any cgroup of its own
/// (seen in CI: `cold_boot_exec_and_file_round_trip`'s second command in the root cgroup).
static LEFTOVER: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A cgroup for command `n` when running as PID 1 with cgroup v2 set up by init.
fn make_cgroup(state: &State, n: u64) -> Option<PathBuf> {
    if !state.pid1() || !Path::new(CGROUP_ROOT).join("cgroup.procs").exists() {
        return None;
    }
    let dir = Path::new(CGROUP_ROOT).join(format!("exec-{n}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) => {
            tracing::warn!(error = &e as &dyn std::error::Error, dir = %dir.display(), "no cgroup for command");
            None
        }
    }
}

/// Data prepared before fork for the child to use between fork and exec (no allocation there).
struct ChildSetup {
    pty: bool,
    cgroup_procs: Option<CString>,
    ids: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)>,
}

/// Signals the agent ignores or handles itself; a command starts with their default action.
/// (`SIG_IGN` survives exec; handlers are reset by exec anyway.)
const RESET_SIGNALS: [libc::c_int; 5] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

fn child_setup(s: &ChildSetup) -> std::io::Result<()> {
    // SAFETY: runs in the forked child before exec. Only async-signal-safe calls (setsid, ioctl,
    // open, write, close, signal, setgroups, setgid, setuid), reading memory prepared before the
    // fork (`s` owns the C string and the group list); no allocation, no locks.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if s.pty && libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(path) = &s.cgroup_procs {
            // Best effort: without the cgroup the process group still bounds the tree.
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
        for sig in RESET_SIGNALS {
            libc::signal(sig, libc::SIG_DFL);
        }
        if let Some((uid, gid, groups)) = &s.ids {
            if libc::setgroups(groups.len(), groups.as_ptr()) < 0
                || libc::setgid(*gid) < 0
                || libc::setuid(*uid) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Spawns the command described by `start`. The outer error is a bad request (gRPC status); the
/// inner one is an exec failure, reported to the caller as exit code 126/127.
pub(super) fn spawn(
    state: &State,
    start: &v1::ExecStart,
) -> Result<Result<Running, std::io::Error>, Status> {
    let (program, args) = program(start)?;
    let who = identity(&start.user)?;
    let cwd = working_dir(&start.cwd, &who)?;
    let me = Uid::effective();
    if !me.is_root() && who.uid != me.as_raw() {
        return Err(Status::permission_denied(format!(
            "user {:?}: the agent is not root",
            start.user
        )));
    }
    let env = environment(start, &who);
    let mut cmd = Command::new(&program);
    // With PATH in the command's own environment, argv[0] is looked up in that PATH.
    cmd.args(&args).env_clear().envs(&env).current_dir(&cwd);

    let mut master = None;
    if start.pty {
        let size = start.pty_size.unwrap_or_default();
        let internal = |e: std::io::Error| Status::internal(format!("open pty: {e}"));
        let (m, slave) = pty::open(size.rows, size.cols).map_err(internal)?;
        let out = slave.try_clone().map_err(internal)?;
        let err = slave.try_clone().map_err(internal)?;
        cmd.stdin(Stdio::from(slave))
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        master = Some(pty::Master::new(m).map_err(internal)?);
    } else {
        cmd.stdin(if start.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    }

    let cgroup = make_cgroup(state, state.next_exec_id());
    let setup = ChildSetup {
        pty: start.pty,
        cgroup_procs: cgroup.as_ref().and_then(|c| {
            CString::new(c.join("cgroup.procs").into_os_string().into_encoded_bytes()).ok()
        }),
        // Root switches to the requested user (groups included); anyone else runs as itself.
        ids: (!start.user.is_empty() && me.is_root()).then_some((who.uid, who.gid, who.groups)),
    };
    // SAFETY: `child_setup` only makes async-signal-safe calls on data prepared above.
    unsafe {
        cmd.pre_exec(move || child_setup(&setup));
    }
    let (mut child, status) = match crate::reaper::spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            if let Some(cg) = &cgroup {
                let _ = std::fs::remove_dir(cg);
            }
            return Ok(Err(e));
        }
    };
    drop(cmd); // closes our copies of the pty slave
    let tree = Tree {
        pid: child.id() as i32,
        cgroup,
    };
    let internal = |e: std::io::Error| Status::internal(format!("wrap pipe: {e}"));
    let running = match master {
        Some(m) => Running {
            tree,
            status,
            stdin: Some(Box::new(m.clone())),
            stdout: Some(Box::new(m.clone())),
            stderr: None,
            pty: Some(m),
        },
        None => Running {
            tree,
            status,
            stdin: match child.stdin.take() {
                Some(p) => Some(Box::new(
                    tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(p))
                        .map_err(internal)?,
                )),
                None => None,
            },
            stdout: match child.stdout.take() {
                Some(p) => Some(Box::new(
                    tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(p))
                        .map_err(internal)?,
                )),
                None => None,
            },
            stderr: match child.stderr.take() {
                Some(p) => Some(Box::new(
                    tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(p))
                        .map_err(internal)?,
                )),
                None => None,
            },
            pty: None,
        },
    };
    Ok(Ok(running))
}

/// Exit code and message for a command that could not be started (shell conventions).
pub(super) fn spawn_failure(start: &v1::ExecStart, e: &std::io::Error) -> (i32, String) {
    let program = if start.shell.is_empty() {
        start.argv.first().map(String::as_str).unwrap_or("")
    } else {
        "/bin/sh"
    };
    let (code, why) = match e.raw_os_error() {
        Some(libc::ENOENT) => (127, "command not found"),
        Some(libc::EACCES) | Some(libc::EPERM) => (126, "permission denied"),
        Some(libc::ENOEXEC) => (126, "exec format error"),
        _ => (126, "cannot execute"),
    };
    (code, format!("pandastack: {program}: {why} ({e})\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_comes_from_argv_or_shell() {
        let argv = v1::ExecStart {
            argv: vec!["ls".into(), "-l".into()],
            ..Default::default()
        };
        assert_eq!(program(&argv).unwrap(), ("ls".into(), vec!["-l".into()]));
        let shell = v1::ExecStart {
            shell: "echo hi".into(),
            ..Default::default()
        };
        assert_eq!(
            program(&shell).unwrap(),
            ("/bin/sh".into(), vec!["-c".into(), "echo hi".into()])
        );
        for bad in [
            v1::ExecStart::default(),
            v1::ExecStart {
                argv: vec!["".into()],
                ..Default::default()
            },
            v1::ExecStart {
                argv: vec!["ls".into()],
                shell: "ls".into(),
                ..Default::default()
            },
        ] {
            assert_eq!(
                program(&bad).unwrap_err().code(),
                tonic::Code::InvalidArgument
            );
        }
    }

    #[test]
    fn working_dir_defaults_to_home_and_must_be_absolute() {
        let mut who = super::super::env::tests::root();
        who.home = "/nonexistent-home".into();
        assert_eq!(working_dir("", &who).unwrap(), Path::new("/"));
        assert_eq!(working_dir("/tmp", &who).unwrap(), Path::new("/tmp"));
        assert_eq!(
            working_dir("tmp", &who).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            working_dir("/nonexistent-dir", &who).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn spawn_failures_follow_shell_conventions() {
        let start = v1::ExecStart {
            argv: vec!["nope".into()],
            ..Default::default()
        };
        let (code, msg) = spawn_failure(&start, &std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(code, 127);
        assert!(msg.contains("nope: command not found"), "{msg}");
        let (code, _) = spawn_failure(&start, &std::io::Error::from_raw_os_error(libc::EACCES));
        assert_eq!(code, 126);
    }
}
