//! Finding VMs again. VM processes outlive the process that started them; after a restart the
//! owner scans the data directory, re-attaches to what it still knows and reconciles the rest:
//! VMs and files that belong to nothing (unfinished creates, pooled VMs, partial snapshots and
//! bakes) are stopped and removed.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pandastack_vm::{RunState, Vm, VmDriver};

use crate::hibernate::{Hibernated, HIBERNATE_STATE};
use crate::pool::POOL_PREFIX;
use crate::sandbox::{CreateError, Sandbox, SandboxInfo};
use crate::{valid_id, Runtime, RESTORE_TIMEOUT};

/// What a sandbox directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundState {
    /// Its VM process is alive.
    Running,
    /// No VM process; a complete hibernation image.
    Hibernated,
    /// Neither: an unfinished create, or a VM that died (crash, kill).
    Broken,
}

/// A sandbox directory found by [`Runtime::scan`].
#[derive(Debug, Clone)]
pub struct Found {
    pub id: String,
    pub dir: PathBuf,
    /// `None` when the create never finished.
    pub info: Option<SandboxInfo>,
    pub state: FoundState,
}

/// What [`Runtime::reconcile`] removed.
#[derive(Debug, Default, Clone)]
pub struct ReconcileReport {
    /// Sandbox ids whose VMs were stopped and files removed.
    pub removed: Vec<String>,
    /// Other leftovers: pooled VMs, partial snapshots and bakes, temporaries of volume files.
    pub leftovers: usize,
}

/// The result of re-attaching to a sandbox.
pub enum Attached<V: Vm> {
    Running(Sandbox<V>),
    Hibernated(Hibernated),
}

fn subdirs(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            out.push((e.file_name().to_string_lossy().into_owned(), e.path()));
        }
    }
    out.sort();
    Ok(out)
}

impl<D: VmDriver> Runtime<D> {
    /// Lists sandbox directories and what state each is in.
    pub fn scan(&self) -> std::io::Result<Vec<Found>> {
        let mut found = Vec::new();
        for (id, dir) in subdirs(&self.data.root().join("sandboxes"))? {
            if !valid_id(&id) {
                continue;
            }
            let info = SandboxInfo::load(&dir).ok();
            let state = if info.is_none() {
                FoundState::Broken
            } else if self.driver.is_running(&dir) {
                FoundState::Running
            } else if dir.join(HIBERNATE_STATE).is_file() {
                FoundState::Hibernated
            } else {
                FoundState::Broken
            };
            found.push(Found {
                id,
                dir,
                info,
                state,
            });
        }
        Ok(found)
    }

    /// Re-attaches to sandbox `id` after a restart. A VM that was stopped while its hibernation
    /// image was complete (a hibernate interrupted before the process ended) is finished off and
    /// reported hibernated. The agent session opens lazily: a paused VM attaches too.
    pub async fn attach(&self, id: &str) -> Result<Attached<D::Vm>, CreateError> {
        let t = Instant::now();
        if !valid_id(id) {
            return Err(CreateError::InvalidId(id.into()));
        }
        let dir = self.data.sandbox(id);
        let mut info = SandboxInfo::load(&dir)?;
        let image = dir.join(HIBERNATE_STATE);
        if !self.driver.is_running(&dir) {
            if image.is_file() {
                return Ok(Attached::Hibernated(Hibernated {
                    id: id.to_owned(),
                    dir,
                    info,
                }));
            }
            return Err(
                pandastack_vm::VmError::Exited(format!("sandbox {id} has no running vm")).into(),
            );
        }
        let vm = self.driver.attach(&dir).await?;
        if image.is_file() {
            if vm.state().await? == RunState::Paused {
                vm.stop().await?;
                self.net_release(info.net_slot.take()).await;
                info.save(&dir)?;
                return Ok(Attached::Hibernated(Hibernated {
                    id: id.to_owned(),
                    dir,
                    info,
                }));
            }
            // Running again (a wake that did not get to remove the image): the image is stale.
            std::fs::remove_file(&image)?;
        }
        let agent = pandastack_guest_proto::host::channel(vm.agent_socket(), RESTORE_TIMEOUT);
        Ok(Attached::Running(Sandbox {
            id: id.to_owned(),
            dir,
            info,
            vm,
            agent,
            ready_in: t.elapsed(),
        }))
    }

    /// Stops and removes everything under the data directory that `keep` does not claim, plus
    /// all leftovers of unfinished work. Call once at start, before creating anything.
    pub async fn reconcile(
        &self,
        keep: impl Fn(&Found) -> bool,
    ) -> std::io::Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        let mut slots_in_use = Vec::new();
        for f in self.scan()? {
            if f.state != FoundState::Broken && keep(&f) {
                if f.state == FoundState::Running {
                    slots_in_use.extend(f.info.as_ref().and_then(|i| i.net_slot));
                }
                continue;
            }
            self.stop_in(&f.dir).await;
            if let Err(e) = std::fs::remove_dir_all(&f.dir) {
                // Not fatal: the server must still start; the next start tries again.
                tracing::warn!(sandbox = %f.id, error = &e as &dyn std::error::Error, "reconcile: could not remove");
                continue;
            }
            tracing::info!(sandbox = %f.id, state = ?f.state, "reconcile: removed");
            report.removed.push(f.id);
        }
        let root = self.data.root();
        let leftovers = [
            (root.join("sandboxes"), POOL_PREFIX, ""),
            (root.join("snapshots"), "", ".partial"),
            (root.join("templates"), "", ".baking"),
            (root.join("templates"), "", ".old"),
        ];
        for (parent, prefix, suffix) in leftovers {
            for (name, dir) in subdirs(&parent)? {
                let matches = if prefix.is_empty() {
                    name.ends_with(suffix)
                } else {
                    name.starts_with(prefix)
                };
                if matches {
                    self.stop_in(&dir).await;
                    std::fs::remove_dir_all(&dir)?;
                    report.leftovers += 1;
                }
            }
        }
        // Temporaries of volume operations cut off half-way (a copy, a download, a grow):
        // dot-files beside the volume files.
        for parent in [self.data.volumes(), self.data.volume_snapshots()] {
            for e in std::fs::read_dir(&parent)? {
                let e = e?;
                if e.file_name().as_encoded_bytes().starts_with(b".") && e.file_type()?.is_file() {
                    std::fs::remove_file(e.path())?;
                    report.leftovers += 1;
                }
            }
        }
        // Every VM that is not kept is gone now: free the slots they held.
        if let Some(pool) = &self.net {
            let r = pool
                .reconcile(&slots_in_use)
                .await
                .map_err(std::io::Error::other)?;
            tracing::info!(report = ?r, "reconcile: network slots");
        }
        Ok(report)
    }

    async fn stop_in(&self, dir: &Path) {
        if self.driver.is_running(dir) {
            match self.driver.attach(dir).await {
                Ok(vm) => {
                    if let Err(e) = vm.stop().await {
                        tracing::warn!(dir = %dir.display(), error = &e as &dyn std::error::Error, "reconcile: stop vm");
                    }
                }
                Err(e) => {
                    // E.g. cut off while starting (no control socket yet): kill it outright, or
                    // it would keep writing into the directory about to be removed.
                    tracing::warn!(dir = %dir.display(), error = &e as &dyn std::error::Error, "reconcile: attach; killing");
                    if let Err(e) = self.driver.kill_in(dir).await {
                        tracing::warn!(dir = %dir.display(), error = &e as &dyn std::error::Error, "reconcile: kill vm");
                    }
                }
            }
        }
    }
}

/// Kills (`SIGKILL`) every process whose working directory is `dir` or below it, until none is
/// left (at most 5 s), and returns how many: a VM process works in its sandbox's directory, so
/// for a host's data directory these are its VMs. What a host's loss does to them; for tests and
/// benchmarks that play one (the agent itself never calls this).
pub fn kill_processes_working_in(dir: &Path) -> usize {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    let mut total = 0;
    loop {
        let killed = kill_pass(dir);
        if killed == 0 || Instant::now() > deadline {
            return total;
        }
        total += killed;
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// One pass of [`kill_processes_working_in`]: how many were signalled.
fn kill_pass(dir: &Path) -> usize {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for p in procs.flatten() {
        let Some(pid) = p
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
        else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(p.path().join("cwd")) else {
            continue;
        };
        // A removed directory reads `… (deleted)`.
        let cwd = cwd.to_string_lossy();
        let cwd = Path::new(cwd.strip_suffix(" (deleted)").unwrap_or(&cwd));
        if cwd.starts_with(dir)
            && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}
