//! Shared helpers: the agent binary behind a kill-on-drop guard, exec helpers, and a pty standing
//! in for a virtio-serial port.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use tonic::transport::Channel;

pub const AGENT: &str = env!("CARGO_BIN_EXE_pandastack-guest");

/// A running agent; killed (and waited for) on drop.
pub struct Agent {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the agent process has exited (and its exit status if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// CPU time (user + system) the agent has used so far, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        let rest = stat.rsplit_once(')').unwrap().1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        // After "(comm)": state=0 ppid=1 ... utime=11 stime=12.
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }
}

/// `pandastack-guest serve --unix <tempdir>/agent.sock`.
pub fn start() -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("agent.sock");
    let mut cmd = Command::new(AGENT);
    cmd.args(["serve", "--unix"]).arg(&socket);
    spawn(cmd, dir, socket)
}

/// Starts `cmd` (which must make the agent serve `socket`) as an [`Agent`].
pub fn spawn(mut cmd: Command, dir: tempfile::TempDir, socket: PathBuf) -> Agent {
    cmd.env("PANDASTACK_GUEST_LOG", "warn").stdin(Stdio::null());
    let child = cmd.spawn().expect("start agent");
    Agent { child, dir, socket }
}

pub async fn connect(a: &Agent) -> Channel {
    pandastack_guest_proto::host::connect(a.socket.clone(), Duration::from_secs(10))
        .await
        .expect("connect")
}

#[derive(Debug, Default)]
pub struct Out {
    pub pid: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<v1::Exited>,
}

impl Out {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
    pub fn code(&self) -> i32 {
        self.exit.as_ref().expect("exit").exit_code
    }
}

pub fn start_msg(s: v1::ExecStart) -> v1::ExecInput {
    v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(s)),
    }
}

pub fn stdin_msg(data: &[u8]) -> v1::ExecInput {
    v1::ExecInput {
        input: Some(v1::exec_input::Input::Stdin(data.to_vec())),
    }
}

pub fn eof_msg() -> v1::ExecInput {
    v1::ExecInput {
        input: Some(v1::exec_input::Input::StdinEof(v1::Empty {})),
    }
}

/// Collects an exec's outputs until the stream ends; checks that `started` comes first and
/// `exit` last.
pub async fn collect(mut s: tonic::Streaming<v1::ExecOutput>) -> Out {
    let mut out = Out::default();
    let mut first = true;
    while let Some(m) = s.message().await.expect("stream") {
        assert!(out.exit.is_none(), "output after exit: {m:?}");
        match m.output {
            Some(v1::exec_output::Output::Started(st)) => {
                assert!(first, "started is not first");
                out.pid = st.pid;
            }
            Some(v1::exec_output::Output::Stdout(b)) => out.stdout.extend(b),
            Some(v1::exec_output::Output::Stderr(b)) => out.stderr.extend(b),
            Some(v1::exec_output::Output::Exit(e)) => out.exit = Some(e),
            None => {}
        }
        first = false;
    }
    assert!(out.exit.is_some(), "stream ended without exit");
    out
}

/// Runs an exec with the given inputs (first must be start) and collects everything.
pub async fn run(ch: &Channel, inputs: Vec<v1::ExecInput>) -> Out {
    let s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter(inputs))
        .await
        .expect("exec")
        .into_inner();
    collect(s).await
}

pub async fn sh(ch: &Channel, cmd: &str) -> Out {
    run(
        ch,
        vec![start_msg(v1::ExecStart {
            shell: cmd.into(),
            ..Default::default()
        })],
    )
    .await
}

/// Whether `pid` is a live (non-zombie) process.
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            let state = s.rsplit_once(')').map(|r| r.1.trim_start()).unwrap_or("");
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}

/// Waits up to `within` for `pid` to be gone.
pub async fn gone(pid: i32, within: Duration) -> bool {
    let end = std::time::Instant::now() + within;
    while std::time::Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !alive(pid)
}

/// Waits for a file to hold a pid (written by a test command).
pub async fn read_pid(path: &Path) -> i32 {
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(path) {
            if let Ok(pid) = s.trim().parse() {
                return pid;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no pid in {}", path.display());
}

/// A pseudo-terminal in raw mode standing in for a virtio-serial port: the agent serves its slave
/// with `serve --port`, and hosts connect to a unix socket bridged to the master, one connection
/// at a time. Like the real port, the byte pipe outlives host connections: a new host meets
/// whatever state the agent's previous session left.
pub struct PtyPort {
    pub slave_path: PathBuf,
    pub socket: PathBuf,
    _slave: OwnedFd,
}

impl PtyPort {
    pub fn new(dir: &Path) -> Self {
        use nix::sys::termios;
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut t = termios::tcgetattr(&pty.slave).unwrap();
        termios::cfmakeraw(&mut t);
        termios::tcsetattr(&pty.slave, termios::SetArg::TCSANOW, &t).unwrap();
        let slave_path = nix::unistd::ttyname(&pty.slave).unwrap();
        let socket = dir.join("port.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let master = Arc::new(std::fs::File::from(pty.master));
        let current: Arc<Mutex<Option<UnixStream>>> = Arc::default();
        // Port -> host: whatever the agent writes goes to the connected host, or is lost.
        {
            let (master, current) = (master.clone(), current.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 16384];
                while let Ok(n) = (&*master).read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let mut cur = current.lock().unwrap();
                    if let Some(s) = cur.as_mut() {
                        if s.write_all(&buf[..n]).is_err() {
                            *cur = None;
                        }
                    }
                }
            });
        }
        // Host -> port, for each host connection in turn.
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                *current.lock().unwrap() = conn.try_clone().ok();
                let mut buf = [0u8; 16384];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || (&*master).write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                *current.lock().unwrap() = None;
            }
        });
        Self {
            slave_path,
            socket,
            _slave: pty.slave,
        }
    }
}
