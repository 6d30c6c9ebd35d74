//! Driving a running command: forward inputs (stdin, signals, resizes), stream its output, enforce
//! the timeout, and report one `exit`.
//!
//! ```text
//!  host inputs ──► input task ──► stdin writer task ──► stdin pipe / pty master
//!                      └─ signal, resize: at once
//!  stdout/stderr ──► pump tasks ──┐
//!  reaper status ──► drive ───────┴─► output channel ──► host   (exit goes last)
//! ```
//!
//! The command is killed (whole tree) on timeout and when the host goes away. After the main
//! process exits, the pumps deliver what is readable and wait at most [`DRAIN_GRACE`] for end of
//! file: a background job may hold the pipes open forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use nix::sys::wait::WaitStatus;
use pandastack_guest_proto::v1::{self, exec_input::Input, exec_output::Output};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Semaphore};
use tonic::{Status, Streaming};

use super::spawn::Running;
use crate::services::pty;

pub(super) type OutTx = mpsc::Sender<Result<v1::ExecOutput, Status>>;

const CHUNK: usize = 64 * 1024;
/// How long to wait for output pipes to close once the command has exited.
const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// Reads of output that is still flowing after the grace period, before giving up on it.
const LATE_READS: usize = 16;
/// Stdin bytes accepted from the host but not yet taken by the command. Past this the input
/// stream is not read further (HTTP/2 flow control pushes back on the host).
const STDIN_BUFFER: usize = 8 << 20;

pub(super) fn out(o: Output) -> Result<v1::ExecOutput, Status> {
    Ok(v1::ExecOutput { output: Some(o) })
}

/// Exit code (128 + signal when killed) and signal number.
pub(super) fn exit_code(status: &WaitStatus) -> (i32, i32) {
    match status {
        WaitStatus::Exited(_, code) => (*code, 0),
        WaitStatus::Signaled(_, sig, _) => (128 + *sig as i32, *sig as i32),
        _ => (-1, 0),
    }
}

/// Streams one output to the host, honouring the cap; returns whether output was dropped.
async fn pump(
    mut src: Box<dyn AsyncRead + Send + Unpin>,
    tx: OutTx,
    cap: u64,
    stderr: bool,
    mut exited: watch::Receiver<bool>,
) -> bool {
    let mut buf = vec![0u8; CHUNK];
    let mut sent = 0u64;
    let mut truncated = false;
    let mut grace_until: Option<tokio::time::Instant> = None;
    let mut late = 0;
    loop {
        let read = match grace_until {
            None => tokio::select! {
                r = src.read(&mut buf) => r,
                _ = exited.wait_for(|e| *e) => {
                    grace_until = Some(tokio::time::Instant::now() + DRAIN_GRACE);
                    continue;
                }
            },
            Some(until) if tokio::time::Instant::now() < until => {
                match tokio::time::timeout_at(until, src.read(&mut buf)).await {
                    Ok(r) => r,
                    Err(_) => continue,
                }
            }
            // Past the grace period: take only what is readable right now, and not forever.
            Some(_) => {
                late += 1;
                match src.read(&mut buf).now_or_never() {
                    Some(r) if late <= LATE_READS => r,
                    _ => return truncated,
                }
            }
        };
        let n = match read {
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

/// Writes queued stdin to the command; ends (closing stdin) when the queue closes.
async fn stdin_writer(
    mut w: Box<dyn AsyncWrite + Send + Unpin>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    budget: Arc<Semaphore>,
) {
    while let Some(data) = rx.recv().await {
        let ok = w.write_all(&data).await.is_ok();
        budget.add_permits(data.len().min(STDIN_BUFFER));
        if !ok {
            // The command closed its stdin; drop the rest.
            rx.close();
        }
    }
}

/// Reads the host's inputs until the host stops sending. Returns `true` if the call broke
/// (cancelled or connection lost), as opposed to a clean end of the input stream.
async fn inputs(
    mut input: Streaming<v1::ExecInput>,
    signals: mpsc::UnboundedSender<nix::sys::signal::Signal>,
    stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    master: Option<pty::Master>,
) -> bool {
    let budget = Arc::new(Semaphore::new(STDIN_BUFFER));
    let mut queue = stdin.map(|w| {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(stdin_writer(w, rx, budget.clone()));
        tx
    });
    loop {
        let msg = match input.message().await {
            Ok(Some(v1::ExecInput { input: Some(i) })) => i,
            Ok(Some(_)) => continue,
            // The host finished sending; the command keeps running.
            Ok(None) => return false,
            Err(_) => return true,
        };
        match msg {
            Input::Stdin(data) => {
                let Some(q) = &queue else { continue };
                let want = data.len().min(STDIN_BUFFER) as u32;
                let Ok(permits) = budget.acquire_many(want).await else {
                    continue;
                };
                permits.forget();
                if q.send(data).is_err() {
                    queue = None;
                }
            }
            Input::StdinEof(_) => {
                if master.is_some() {
                    // End of input on a terminal is ^D.
                    if let Some(q) = &queue {
                        let _ = q.send(vec![4]);
                    }
                } else {
                    queue = None;
                }
            }
            Input::Signal(sig) => {
                if let Ok(sig) = nix::sys::signal::Signal::try_from(sig) {
                    let _ = signals.send(sig);
                }
            }
            Input::Resize(size) => {
                if let Some(m) = &master {
                    let _ = pty::resize(m.fd(), size.rows, size.cols);
                }
            }
            Input::Start(_) => {}
        }
    }
}

/// Runs the command to its end and reports it on `tx`; the exit's `duration_ms` counts from
/// `started` (the start message's arrival, so spawning is included).
pub(super) async fn drive(
    run: Running,
    input: Streaming<v1::ExecInput>,
    tx: OutTx,
    start: v1::ExecStart,
    started: Instant,
) {
    let Running {
        mut tree,
        status: mut status_rx,
        stdin,
        stdout,
        stderr,
        pty,
    } = run;
    let _ = tx
        .send(out(Output::Started(v1::Started {
            pid: tree.pid as u32,
        })))
        .await;
    let (exited_tx, exited_rx) = watch::channel(false);
    let cap = start.max_output_bytes;
    let mut pumps = Vec::with_capacity(2);
    for (i, src) in [stdout, stderr].into_iter().enumerate() {
        if let Some(src) = src {
            let pump = pump(src, tx.clone(), cap, i == 1, exited_rx.clone());
            pumps.push((i, tokio::spawn(pump)));
        }
    }
    let (signal_tx, mut signal_rx) = mpsc::unbounded_channel();
    let mut input_task = tokio::spawn(inputs(input, signal_tx, stdin, pty.clone()));

    let timeout = (start.timeout_ms > 0).then(|| Duration::from_millis(start.timeout_ms));
    let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(u64::MAX / 4)));
    tokio::pin!(deadline);
    let mut timed_out = false;
    let mut abandoned = false;
    let mut inputs_done = false;
    let status = loop {
        tokio::select! {
            s = &mut status_rx => break s.ok(),
            Some(sig) = signal_rx.recv() => tree.signal(sig),
            _ = &mut deadline, if timeout.is_some() && !timed_out => {
                timed_out = true;
                tree.kill();
            }
            // The caller went away (cancelled call, lost connection): kill once, then wait.
            broke = &mut input_task, if !inputs_done => {
                inputs_done = true;
                if broke.unwrap_or(true) && !abandoned {
                    abandoned = true;
                    tree.kill();
                }
            }
            _ = tx.closed(), if !abandoned => {
                abandoned = true;
                tree.kill();
            }
        }
    };
    if timed_out {
        // Leave nothing of a timed-out command behind.
        tree.kill();
    }
    input_task.abort();
    let _ = exited_tx.send(true);
    let mut truncated = [false, false];
    for (i, task) in pumps {
        truncated[i] = task.await.unwrap_or(false);
    }
    drop(pty);
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
    tree.remove_cgroup();
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn reader(bytes: &'static [u8]) -> Box<dyn AsyncRead + Send + Unpin> {
        Box::new(bytes)
    }

    async fn collect(src: Box<dyn AsyncRead + Send + Unpin>, cap: u64) -> (Vec<u8>, bool) {
        let (tx, mut rx) = mpsc::channel(64);
        let (_exited_tx, exited_rx) = watch::channel(false);
        let truncated = pump(src, tx, cap, false, exited_rx).await;
        let mut got = Vec::new();
        while let Ok(Ok(v1::ExecOutput {
            output: Some(Output::Stdout(b)),
        })) = rx.try_recv()
        {
            got.extend(b);
        }
        (got, truncated)
    }

    #[tokio::test]
    async fn pump_caps_output_and_flags_truncation() {
        assert_eq!(
            collect(reader(b"hello world"), 5).await,
            (b"hello".to_vec(), true)
        );
        assert_eq!(
            collect(reader(b"hello"), 5).await,
            (b"hello".to_vec(), false)
        );
        assert_eq!(
            collect(reader(b"hello"), 0).await,
            (b"hello".to_vec(), false)
        );
    }

    #[tokio::test]
    async fn pump_stops_waiting_for_eof_shortly_after_exit() {
        // A pipe whose write end stays open (like one held by a background job).
        let (w, r) = tokio::net::unix::pipe::pipe().unwrap();
        let mut w = w;
        w.write_all(b"before exit").await.unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let (exited_tx, exited_rx) = watch::channel(false);
        let task = tokio::spawn(pump(Box::new(r), tx, 0, true, exited_rx));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        exited_tx.send(true).unwrap();
        assert!(!task.await.unwrap());
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let m = rx.recv().await.unwrap().unwrap();
        assert_eq!(m.output, Some(Output::Stderr(b"before exit".to_vec())));
        drop(w);
    }
}
