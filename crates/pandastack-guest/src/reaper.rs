//! The one place that waits for child processes.
//!
//! As PID 1 the agent inherits every orphan and must reap them, but a blanket `waitpid(-1)` would
//! steal the exit status of commands the agent is running. So there is exactly one reaper: on
//! every SIGCHLD it reaps everything that has exited; a pid registered by [`spawn`] gets its
//! status through a oneshot, any other pid is just reaped. Registration happens under the same
//! lock the reaper holds while reaping, so a child that exits at once is never lost.

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::{Mutex, OnceLock};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::oneshot;

type Waiters = HashMap<i32, oneshot::Sender<WaitStatus>>;

fn waiters() -> &'static Mutex<Waiters> {
    static W: OnceLock<Mutex<Waiters>> = OnceLock::new();
    W.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Waiters> {
    waiters().lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the reaper task unless one is running (a PID 1 that restarted its runtime after a
/// failure gets a new one). Call inside the runtime before spawning anything.
pub fn ensure_started() -> std::io::Result<()> {
    static TASK: Mutex<Option<tokio::task::JoinHandle<()>>> = Mutex::new(None);
    let mut task = TASK.lock().unwrap_or_else(|e| e.into_inner());
    if task.as_ref().is_some_and(|t| !t.is_finished()) {
        return Ok(());
    }
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    *task = Some(tokio::spawn(async move {
        loop {
            reap_all();
            // Signals coalesce; a periodic pass covers any that raced with registration.
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
            }
        }
    }));
    Ok(())
}

fn reap_all() {
    let mut w = lock();
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(status) => {
                if let Some(pid) = status.pid() {
                    if let Some(tx) = w.remove(&pid.as_raw()) {
                        let _ = tx.send(status);
                    }
                }
            }
        }
    }
}

/// Spawns `cmd` and returns the child with a receiver for its exit status. The child must not be
/// waited on through the `Child` handle.
pub fn spawn(cmd: &mut Command) -> std::io::Result<(Child, oneshot::Receiver<WaitStatus>)> {
    let mut w = lock();
    let child = cmd.spawn()?;
    let (tx, rx) = oneshot::channel();
    w.insert(child.id() as i32, tx);
    Ok((child, rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_child_gets_its_own_status_even_when_it_exits_at_once() {
        ensure_started().unwrap();
        let mut waits = Vec::new();
        for code in 0..24 {
            let mut cmd = Command::new("/bin/sh");
            cmd.args(["-c", &format!("exit {code}")]);
            let (child, status) = spawn(&mut cmd).unwrap();
            waits.push((code, child.id() as i32, status));
        }
        for (code, pid, status) in waits {
            let status = tokio::time::timeout(std::time::Duration::from_secs(10), status)
                .await
                .expect("status within 10 s")
                .expect("status sent");
            assert_eq!(status, WaitStatus::Exited(Pid::from_raw(pid), code));
        }
    }
}
