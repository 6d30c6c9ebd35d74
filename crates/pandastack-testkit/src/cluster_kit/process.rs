//! The cluster kit's processes and ports: spawning with a log file, signals, the fake VMs an
//! agent leaves behind, free ports held across test processes, a raw HTTP request.

use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// SIGKILLs and reaps a child (a stopped one too: SIGKILL needs no SIGCONT).
pub(super) fn end(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub(super) fn check_child(name: &str, child: &Option<Child>, log: &Path) {
    if let Some(c) = child {
        let pid = c.id() as i32;
        if !process_alive(pid) {
            panic!("{name} exited:\n{}", tail(log, 80));
        }
    }
}

/// SIGKILLs the process group of every live fake VM whose `fake.pid` is below `dir`: the VM
/// and what its commands started (the fake driver starts each VM as a group of its own).
pub(super) fn kill_fake_vms_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            kill_fake_vms_under(&path);
        } else if path.file_name().is_some_and(|n| n == "fake.pid") {
            let pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
                .filter(|p| *p > 1 && process_alive(*p));
            if let Some(pid) = pid {
                let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// Whether `pid` runs (a zombie does not).
pub(super) fn process_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    !matches!(state, None | Some("Z") | Some("X"))
}

/// The children's log filter: `PANDASTACK_CLUSTER_LOG`, else info with the cluster's crates at
/// debug.
pub(super) fn log_filter() -> String {
    std::env::var("PANDASTACK_CLUSTER_LOG").unwrap_or_else(|_| {
        "info,pandastack_control=debug,pandastack_agent_link=debug,pandastack_store=debug".into()
    })
}

pub(super) fn spawn_logged(cmd: &mut Command, log: &Path, name: &str) -> Child {
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("process log file");
    let out = f.try_clone().expect("log file handle");
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(f)
        .spawn()
        .unwrap_or_else(|e| panic!("start {name} ({:?}): {e}", cmd.get_program()))
}

/// The last `n` lines of `path`.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `name` in the directory above the test binary's (`target/debug/deps/<test>` →
/// `target/debug/<name>`).
pub(super) fn sibling_binary(name: &str, build: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| {
            if deps.file_name().is_some_and(|n| n == "deps") {
                deps.parent()
            } else {
                Some(deps)
            }
        })
        .expect("the target directory");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} does not exist: run `{build}` first",
        bin.display()
    );
    bin
}

pub(super) fn run_cli(bin: &Path, args: &[&str]) {
    let out = Command::new(bin)
        .args(args)
        .env("PANDASTACK_LOG", "warn")
        .output()
        .expect("run pandastack");
    assert!(
        out.status.success(),
        "pandastack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(super) fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

pub(super) fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A bounded `GET path` to `addr`: whether it answered 2xx.
pub(super) async fn http_get_ok(addr: SocketAddr, path: &str) -> bool {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    http_raw(addr, req.as_bytes(), Duration::from_secs(5))
        .await
        .is_ok_and(|resp| resp.starts_with(b"HTTP/1.1 2") || resp.starts_with(b"HTTP/1.0 2"))
}

/// Sends `request` to `addr` and reads the whole answer (the request should say
/// `Connection: close`), within `limit`.
pub async fn http_raw(
    addr: SocketAddr,
    request: &[u8],
    limit: Duration,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(request).await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok(out)
    };
    tokio::time::timeout(limit, io)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

/// A loopback port nothing listens on, held for this test process (also the end-to-end tests'
/// `crates/pandastack/tests/common::free_port`): ports 20000–32767, below the kernel's
/// ephemeral range, each held by an exclusive `flock` on `$TMPDIR/pandastack-test-ports/<port>`
/// for the life of the process, so that test processes running side by side, of either kind,
/// never hand out the same port — nor take one a test frees to start its server again on it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_768;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    static HELD: Mutex<Vec<nix::fcntl::Flock<std::fs::File>>> = Mutex::new(Vec::new());
    let seed = std::process::id().wrapping_mul(7_919)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
    let _ = NEXT.compare_exchange(u32::MAX, seed % SPAN, Ordering::SeqCst, Ordering::SeqCst);
    let locks = std::env::temp_dir().join("pandastack-test-ports");
    std::fs::create_dir_all(&locks).expect("port lock directory");
    for _ in 0..SPAN {
        let port = (LOW + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(locks.join(port.to_string()))
            .expect("port lock file");
        let Ok(lock) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        else {
            continue; // another test process holds it
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
            return port;
        }
    }
    panic!("no free port in {LOW}..{}", LOW + SPAN)
}
