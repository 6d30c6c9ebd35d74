//! `Process.Exec`: run a command (or a PTY session) and stream its output.
//!
//! Each command is its own session and process group, and — as PID 1 with cgroup v2 — its own
//! cgroup, so a timeout or a cancelled stream kills the whole tree, grandchildren included.
//! Background processes a command leaves behind when it exits normally keep running.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::Stream;
use nix::sys::wait::WaitStatus;
use pandastack_guest_proto::v1::{self, exec_input::Input, exec_output::Output, process_server};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::{pty, State};

const CGROUP_ROOT: &str = "/sys/fs/cgroup/pandastack";
const CHUNK: usize = 64 * 1024;
/// How long to wait for output pipes to close after the command exited (a background grandchild
/// may hold them open forever).
const DRAIN_GRACE: Duration = Duration::from_millis(100);
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

pub struct ProcessService {
    state: State,
    next: AtomicU64,
}

impl ProcessService {
    pub fn new(state: State) -> Self {
        Self {
            state,
            next: AtomicU64::new(0),
        }
    }
}

type OutStream = Pin<Box<dyn Stream<Item = Result<v1::ExecOutput, Status>> + Send>>;

fn out(o: Output) -> Result<v1::ExecOutput, Status> {
    Ok(v1::ExecOutput { output: Some(o) })
}

/// Who runs the command.
struct Identity {
    uid: u32,
    gid: u32,
    groups: Vec<libc::gid_t>,
    home: PathBuf,
    name: String,
}

fn identity(user: &str) -> Result<Identity, Status> {
    let found = if user.is_empty() {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(0))
    } else if let Ok(uid) = user.parse::<u32>() {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
    } else {
        nix::unistd::User::from_name(user)
    }
    .map_err(|e| Status::internal(format!("look up user: {e}")))?;
    match found {
        Some(u) => {
            let cname = CString::new(u.name.clone())
                .map_err(|_| Status::invalid_argument("user: bad name"))?;
            let groups = nix::unistd::getgrouplist(&cname, u.gid)
                .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
                .unwrap_or_else(|_| vec![u.gid.as_raw()]);
            Ok(Identity {
                uid: u.uid.as_raw(),
                gid: u.gid.as_raw(),
                groups,
                home: u.dir,
                name: u.name,
            })
        }
        // A bare uid without a passwd entry still runs, as that uid.
        None if user.parse::<u32>().is_ok() => {
            let uid: u32 = user.parse().unwrap_or(0);
            Ok(Identity {
                uid,
                gid: uid,
                groups: vec![uid],
                home: "/".into(),
                name: user.into(),
            })
        }
        None => Err(Status::invalid_argument(format!(
            "user: no such user {user:?}"
        ))),
    }
}

fn environment(start: &v1::ExecStart, who: &Identity) -> HashMap<String, String> {
    let mut env = HashMap::from([
        ("PATH".to_string(), DEFAULT_PATH.to_string()),
        ("HOME".to_string(), who.home.to_string_lossy().into_owned()),
        ("USER".to_string(), who.name.clone()),
        ("LOGNAME".to_string(), who.name.clone()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ]);
    if start.pty {
        env.insert("TERM".into(), "xterm-256color".into());
    }
    env.extend(start.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// A spawned command and the handles the driver needs.
struct Running {
    pid: i32,
    status: tokio::sync::oneshot::Receiver<WaitStatus>,
    stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pty: Option<pty::Master>,
    cgroup: Option<PathBuf>,
}

/// Data prepared before fork, used by the child between fork and exec (no allocation there).
struct ChildSetup {
    pty: bool,
    cgroup_procs: Option<CString>,
    ids: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)>,
}

fn child_setup(s: &ChildSetup) -> std::io::Result<()> {
    // SAFETY: runs in the forked child before exec; only async-signal-safe syscalls, on memory
    // prepared before the fork (C strings and the group list live in `s`).
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if s.pty && libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(path) = &s.cgroup_procs {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
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

fn make_cgroup(state: &State, n: u64) -> Option<PathBuf> {
    if !state.pid1() || !Path::new(CGROUP_ROOT).is_dir() {
        return None;
    }
    let dir = Path::new(CGROUP_ROOT).join(format!("exec-{n}"));
    std::fs::create_dir(&dir).ok().map(|_| dir)
}

/// Removes exec cgroups that have no processes left (rmdir fails on populated ones).
fn sweep_cgroups() {
    if let Ok(entries) = std::fs::read_dir(CGROUP_ROOT) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("exec-") {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

fn kill_tree(pid: i32, cgroup: Option<&Path>) {
    if let Some(cg) = cgroup {
        let _ = std::fs::write(cg.join("cgroup.kill"), "1");
    }
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

fn spawn(
    state: &State,
    n: u64,
    start: &v1::ExecStart,
) -> Result<Result<Running, std::io::Error>, Status> {
    let (program, args): (String, Vec<String>) = if !start.shell.is_empty() {
        ("/bin/sh".into(), vec!["-c".into(), start.shell.clone()])
    } else if let Some((first, rest)) = start.argv.split_first() {
        if first.is_empty() {
            return Err(Status::invalid_argument("argv[0] is empty"));
        }
        (first.clone(), rest.to_vec())
    } else {
        return Err(Status::invalid_argument("start: argv or shell required"));
    };
    let who = identity(&start.user)?;
    let env = environment(start, &who);
    let cwd = if start.cwd.is_empty() {
        if who.home.is_dir() {
            who.home.clone()
        } else {
            PathBuf::from("/")
        }
    } else {
        let p = PathBuf::from(&start.cwd);
        if !p.is_absolute() {
            return Err(Status::invalid_argument("cwd must be absolute"));
        }
        if !p.is_dir() {
            return Err(Status::invalid_argument(format!(
                "cwd {} is not a directory",
                start.cwd
            )));
        }
        p
    };
    // Resolve argv[0] with the command's PATH so a missing program is reported as 127.
    let mut cmd = Command::new(&program);
    cmd.args(&args).env_clear().envs(&env).current_dir(&cwd);

    let cgroup = make_cgroup(state, n);
    let setup = ChildSetup {
        pty: start.pty,
        cgroup_procs: cgroup.as_ref().and_then(|c| {
            CString::new(c.join("cgroup.procs").into_os_string().into_encoded_bytes()).ok()
        }),
        ids: (who.uid != nix::unistd::getuid().as_raw() || !start.user.is_empty())
            .then(|| (who.uid, who.gid, who.groups.clone())),
    };
    let mut master = None;
    if start.pty {
        let size = start.pty_size.unwrap_or_default();
        let (m, slave) = pty::open(size.rows, size.cols)
            .map_err(|e| Status::internal(format!("open pty: {e}")))?;
        let s2 = slave
            .try_clone()
            .map_err(|e| Status::internal(e.to_string()))?;
        let s3 = slave
            .try_clone()
            .map_err(|e| Status::internal(e.to_string()))?;
        cmd.stdin(Stdio::from(slave))
            .stdout(Stdio::from(s2))
            .stderr(Stdio::from(s3));
        master = Some(pty::Master::new(m).map_err(|e| Status::internal(e.to_string()))?);
    } else {
        cmd.stdin(if start.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    }
    // SAFETY: `child_setup` only makes async-signal-safe syscalls on data prepared above.
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
    let pipe_in =
        |fd: Option<OwnedFd>| -> Result<Option<Box<dyn AsyncWrite + Send + Unpin>>, Status> {
            match fd {
                Some(fd) => Ok(Some(Box::new(
                    tokio::net::unix::pipe::Sender::from_owned_fd(fd)
                        .map_err(|e| Status::internal(e.to_string()))?,
                ))),
                None => Ok(None),
            }
        };
    let pipe_out =
        |fd: Option<OwnedFd>| -> Result<Option<Box<dyn AsyncRead + Send + Unpin>>, Status> {
            match fd {
                Some(fd) => Ok(Some(Box::new(
                    tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                        .map_err(|e| Status::internal(e.to_string()))?,
                ))),
                None => Ok(None),
            }
        };
    let running = match &master {
        Some(m) => Running {
            pid: child.id() as i32,
            status,
            stdin: Some(Box::new(m.clone())),
            stdout: Some(Box::new(m.clone())),
            stderr: None,
            pty: master.clone(),
            cgroup,
        },
        None => Running {
            pid: child.id() as i32,
            status,
            stdin: pipe_in(child.stdin.take().map(OwnedFd::from))?,
            stdout: pipe_out(child.stdout.take().map(OwnedFd::from))?,
            stderr: pipe_out(child.stderr.take().map(OwnedFd::from))?,
            pty: None,
            cgroup,
        },
    };
    Ok(Ok(running))
}

/// Streams one output pipe, honouring the cap; returns whether output was dropped.
async fn pump(
    mut src: Box<dyn AsyncRead + Send + Unpin>,
    tx: mpsc::Sender<Result<v1::ExecOutput, Status>>,
    cap: u64,
    stderr: bool,
) -> bool {
    let mut buf = vec![0u8; CHUNK];
    let mut sent = 0u64;
    let mut truncated = false;
    loop {
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => return truncated,
            Ok(n) => n,
        };
        let allowed = if cap == 0 {
            n
        } else {
            (cap.saturating_sub(sent) as usize).min(n)
        };
        if allowed < n {
            truncated = true;
        }
        if allowed == 0 {
            continue;
        }
        sent += allowed as u64;
        let data = buf[..allowed].to_vec();
        let msg = if stderr {
            Output::Stderr(data)
        } else {
            Output::Stdout(data)
        };
        if tx.send(out(msg)).await.is_err() {
            return truncated;
        }
    }
}

fn exit_code(status: &WaitStatus) -> (i32, i32) {
    match status {
        WaitStatus::Exited(_, code) => (*code, 0),
        WaitStatus::Signaled(_, sig, _) => (128 + *sig as i32, *sig as i32),
        _ => (-1, 0),
    }
}

async fn drive(
    mut run: Running,
    mut input: Streaming<v1::ExecInput>,
    tx: mpsc::Sender<Result<v1::ExecOutput, Status>>,
    start: v1::ExecStart,
) {
    let started = Instant::now();
    let _ = tx
        .send(out(Output::Started(v1::Started {
            pid: run.pid as u32,
        })))
        .await;
    let cap = start.max_output_bytes;
    let out_task = run
        .stdout
        .take()
        .map(|s| tokio::spawn(pump(s, tx.clone(), cap, false)));
    let err_task = run
        .stderr
        .take()
        .map(|s| tokio::spawn(pump(s, tx.clone(), cap, true)));

    // Inputs: stdin, signals, resizes. A broken input stream (cancelled call) kills the tree.
    let (cancel_tx, mut cancel_rx) = mpsc::channel::<()>(1);
    let pid = run.pid;
    let pty_master = run.pty.clone();
    let mut stdin = run.stdin.take();
    let input_task = tokio::spawn(async move {
        loop {
            match input.message().await {
                Ok(Some(v1::ExecInput { input: Some(i) })) => match i {
                    Input::Stdin(data) => {
                        if let Some(w) = stdin.as_mut() {
                            if w.write_all(&data).await.is_err() {
                                stdin = None;
                            }
                        }
                    }
                    Input::StdinEof(_) => {
                        if pty_master.is_some() {
                            // EOF on a terminal is ^D.
                            if let Some(w) = stdin.as_mut() {
                                let _ = w.write_all(&[4]).await;
                            }
                        } else {
                            stdin = None;
                        }
                    }
                    Input::Signal(sig) => {
                        if let Ok(sig) = nix::sys::signal::Signal::try_from(sig) {
                            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), sig);
                        }
                    }
                    Input::Resize(size) => {
                        if let Some(m) = &pty_master {
                            let _ = pty::resize(m.fd(), size.rows, size.cols);
                        }
                    }
                    Input::Start(_) => {}
                },
                Ok(Some(_)) => {}
                // The host finished sending; the command keeps running.
                Ok(None) => return,
                Err(_) => {
                    let _ = cancel_tx.send(()).await;
                    return;
                }
            }
        }
    });

    let timeout = (start.timeout_ms > 0).then(|| Duration::from_millis(start.timeout_ms));
    let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut timed_out = false;
    let mut abandoned = false;
    let mut status_rx = run.status;
    let status = loop {
        tokio::select! {
            s = &mut status_rx => break s.ok(),
            _ = &mut deadline, if timeout.is_some() && !timed_out => {
                timed_out = true;
                kill_tree(run.pid, run.cgroup.as_deref());
            }
            // The caller went away (cancelled call, lost connection): kill once, then wait.
            Some(()) = cancel_rx.recv(), if !abandoned => {
                abandoned = true;
                kill_tree(run.pid, run.cgroup.as_deref());
            }
            _ = tx.closed(), if !abandoned => {
                abandoned = true;
                kill_tree(run.pid, run.cgroup.as_deref());
            }
        }
    };
    if timed_out {
        // Leave nothing of a timed-out command behind.
        kill_tree(run.pid, run.cgroup.as_deref());
    }
    input_task.abort();
    let grace = tokio::time::sleep(DRAIN_GRACE);
    tokio::pin!(grace);
    let mut truncated = [false, false];
    for (i, task) in [out_task, err_task].into_iter().enumerate() {
        if let Some(mut t) = task {
            tokio::select! {
                r = &mut t => truncated[i] = r.unwrap_or(false),
                _ = &mut grace => t.abort(),
            }
        }
    }
    drop(run.pty);
    let (exit_code, signal) = status.as_ref().map(exit_code).unwrap_or((-1, 0));
    let _ = tx
        .send(out(Output::Exit(v1::Exited {
            exit_code,
            signal,
            timed_out,
            stdout_truncated: truncated[0],
            stderr_truncated: truncated[1],
            duration_ms: started.elapsed().as_millis() as u64,
        })))
        .await;
    if let Some(cg) = &run.cgroup {
        let _ = std::fs::remove_dir(cg);
        tokio::task::spawn_blocking(sweep_cgroups);
    }
}

#[tonic::async_trait]
impl process_server::Process for ProcessService {
    type ExecStream = OutStream;

    async fn exec(
        &self,
        req: Request<Streaming<v1::ExecInput>>,
    ) -> Result<Response<OutStream>, Status> {
        let mut input = req.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no start message"))?;
        let Some(Input::Start(start)) = first.input else {
            return Err(Status::invalid_argument("first input must be start"));
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(32);
        match spawn(&self.state, n, &start)? {
            Ok(running) => {
                tokio::spawn(drive(running, input, tx, start));
            }
            Err(e) => {
                // Shell conventions: 127 not found, 126 found but not executable.
                let program = start
                    .argv
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "/bin/sh".into());
                let (code, why) = match e.kind() {
                    std::io::ErrorKind::NotFound => (127, "command not found"),
                    std::io::ErrorKind::PermissionDenied => (126, "permission denied"),
                    _ => (126, "cannot execute"),
                };
                let msg = format!("{program}: {why} ({e})\n");
                tokio::spawn(async move {
                    let _ = tx.send(out(Output::Stderr(msg.into_bytes()))).await;
                    let _ = tx
                        .send(out(Output::Exit(v1::Exited {
                            exit_code: code,
                            ..Default::default()
                        })))
                        .await;
                });
            }
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_defaults_are_overridden_by_request() {
        let who = Identity {
            uid: 0,
            gid: 0,
            groups: vec![],
            home: "/root".into(),
            name: "root".into(),
        };
        let start = v1::ExecStart {
            env: [
                ("PATH".to_string(), "/x".to_string()),
                ("A".to_string(), "1".to_string()),
            ]
            .into(),
            pty: true,
            ..Default::default()
        };
        let env = environment(&start, &who);
        assert_eq!(env["PATH"], "/x");
        assert_eq!(env["A"], "1");
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["TERM"], "xterm-256color");
    }

    #[test]
    fn exit_codes_follow_shell_conventions() {
        let pid = nix::unistd::Pid::from_raw(1);
        assert_eq!(exit_code(&WaitStatus::Exited(pid, 3)), (3, 0));
        assert_eq!(
            exit_code(&WaitStatus::Signaled(
                pid,
                nix::sys::signal::Signal::SIGKILL,
                false
            )),
            (137, 9)
        );
    }
}
