//! The host agent: everything one host does for the control plane. It owns the sandboxes
//! running here — each behind its own lock, so lifecycle operations on one sandbox are
//! serialised while different sandboxes proceed in parallel — bakes templates on first use
//! (image build, cold boot, snapshot), keeps the pool of pre-started VMs topped up, and finds its
//! VMs again after a restart.
//!
//! ```text
//!   API handler ──► HostAgent::{create, fork, hibernate, …}
//!                        │  sandboxes: id → Arc<Entry>   (RwLock'd map; short critical sections)
//!                        ▼
//!                   Entry { slot: Mutex<SandboxVm> }          (held for the whole operation)
//!                        │  SandboxVm = Running | Paused | Hibernated
//!                        ▼
//!                   pandastack_runtime::Runtime<D>        (files + VM processes)
//! ```
//!
//! Volumes (ext4 files under the data directory, their snapshots and transfers) are in its
//! `volumes` module. It knows nothing of HTTP, keys or the database: callers pass
//! ids and get typed errors.

mod builds;
mod console;
mod cut_off;
mod dialed;
mod entry;
mod error;
mod guest;
mod host;
mod metrics;
mod moving;
mod moving_snapshots;
mod peer_images;
mod powered_off;
mod shared_templates;
mod steps;
mod templates;
mod volumes;

pub use builds::{api_spec, spec_summary};
pub use console::{trim_consoles, TRIM_EVERY};
pub use entry::SandboxView;
pub use error::AgentError;
pub use host::LocalHost;
pub use moving::StoredSandbox;
pub use pandastack_host::VmState;
pub use pandastack_objects::Objects;
pub use shared_templates::{SharedBake, NAMESPACE as SHARED_NAMESPACE};
pub use templates::TemplateView;
pub use volumes::{VolumeFileError, VOLUME_CHUNK_SIZE};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use pandastack_runtime::{Attached, Found, FoundState, ReconcileReport, Runtime, Snapshot};
use pandastack_vm::{Vm, VmDriver};
use tokio::sync::{Mutex, RwLock};
use tonic::transport::Channel;

use dialed::PortRoute;
use entry::{Entry, SandboxVm};

/// Host agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Directory of template specs (`<name>.toml`).
    pub templates_dir: PathBuf,
    /// Guest agent binary installed into template images.
    pub guest_agent: PathBuf,
    /// Pre-started VMs kept per baked template (0 disables the pool).
    pub pool_size: usize,
    /// Volume slots every template bake of this agent gets (0..=3: the QEMU driver has room
    /// for three; see docs/volumes.md, "Volume slots"). A sandbox can mount at most this
    /// many volumes. A baked catalog template with another number is baked again on first
    /// use, as one baked with another network setting is.
    pub volume_slots: u32,
    /// Where volume snapshots are uploaded to and restored from; `None`: those calls fail.
    pub objects: Option<Objects>,
}

/// The host agent over one runtime.
pub struct HostAgent<D: VmDriver> {
    rt: Runtime<D>,
    cfg: AgentConfig,
    sandboxes: RwLock<HashMap<String, Arc<Entry<D::Vm>>>>,
    /// One lock per template name: concurrent first uses bake once.
    bakes: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Held while a pool refill runs.
    filling: Mutex<()>,
    /// Set in a cluster: templates move through the object store (see `shared_templates`).
    sharing: std::sync::OnceLock<shared_templates::Sharing<D>>,
    /// Set in a cluster: how a fetch reaches the agent a snapshot was taken on (see
    /// `peer_images`).
    peers: std::sync::OnceLock<Arc<dyn pandastack_host::Peers>>,
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Starts the agent: re-attaches to the sandboxes `keep` claims (running or hibernated) and
    /// removes everything else the data directory holds (see [`Runtime::reconcile`]).
    pub async fn start(
        rt: Runtime<D>,
        cfg: AgentConfig,
        keep: impl Fn(&Found) -> bool,
    ) -> Result<(Self, ReconcileReport), AgentError> {
        let report = rt.reconcile(&keep).await?;
        let mut map = HashMap::new();
        for f in rt.scan()? {
            if f.state == FoundState::Broken {
                continue;
            }
            let slot = match rt.attach(&f.id).await {
                Ok(Attached::Running(sb)) => match sb.vm.state().await {
                    Ok(pandastack_vm::RunState::Paused) => SandboxVm::Paused(sb),
                    _ => SandboxVm::Running(sb),
                },
                Ok(Attached::Hibernated(h)) => SandboxVm::Hibernated(h),
                Err(e) => {
                    tracing::warn!(sandbox = %f.id, error = &e as &dyn std::error::Error, "re-attach failed");
                    continue;
                }
            };
            tracing::info!(sandbox = %f.id, state = ?slot.state(), "re-attached");
            map.insert(f.id.clone(), Arc::new(Entry::new(slot)));
        }
        Ok((
            Self {
                rt,
                cfg,
                sandboxes: RwLock::new(map),
                bakes: Mutex::new(HashMap::new()),
                filling: Mutex::new(()),
                sharing: std::sync::OnceLock::new(),
                peers: std::sync::OnceLock::new(),
            },
            report,
        ))
    }

    pub fn runtime(&self) -> &Runtime<D> {
        &self.rt
    }

    async fn entry(&self, id: &str) -> Result<Arc<Entry<D::Vm>>, AgentError> {
        self.sandboxes
            .read()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| AgentError::SandboxNotFound(id.into()))
    }

    /// Ids and states of all sandboxes on this host.
    pub async fn list(&self) -> Vec<SandboxView> {
        let entries: Vec<_> = self.sandboxes.read().await.values().cloned().collect();
        let mut out = Vec::with_capacity(entries.len());
        out.extend(entries.iter().filter_map(|e| self.observed(e)));
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// One sandbox's state.
    pub async fn get(&self, id: &str) -> Result<SandboxView, AgentError> {
        let e = self.entry(id).await?;
        self.observed(&e)
            .ok_or_else(|| AgentError::SandboxNotFound(id.into()))
    }

    /// The state of the last finished operation, except that a VM whose process has ended
    /// since (the guest powered off or rebooted, a kill from outside) is reported
    /// [`VmState::Exited`]. Only while no operation holds the sandbox: one in progress (a
    /// hibernate stops the process before it publishes) says what it did when it ends.
    fn observed(&self, e: &Entry<D::Vm>) -> Option<SandboxView> {
        let mut view = e.view()?;
        if matches!(view.state, VmState::Running | VmState::Paused) {
            if let Ok(slot) = e.slot.try_lock() {
                if slot.sandbox().is_some_and(|sb| !self.rt.is_alive(sb)) {
                    view.state = VmState::Exited;
                }
            }
        }
        Some(view)
    }

    /// Creates sandbox `id` from `template` (baked on first use). Returns when it can exec.
    pub async fn create(
        self: &Arc<Self>,
        template: &str,
        id: &str,
    ) -> Result<SandboxView, AgentError> {
        self.create_limited(template, id, pandastack_host::DiskRequest::default())
            .await
    }

    /// [`HostAgent::create`] with disk limits of its own where `disk` names them (see
    /// [`HostAgent::disk_limits`]).
    pub async fn create_limited(
        self: &Arc<Self>,
        template: &str,
        id: &str,
        disk: pandastack_host::DiskRequest,
    ) -> Result<SandboxView, AgentError> {
        let t = self.template(template).await?;
        let limits = self.disk_limits(&t, disk);
        let sb = self.rt.create_with_options(&t, id, &[], limits).await?;
        let view = self.insert(SandboxVm::Running(sb)).await;
        self.refill(t);
        Ok(view)
    }

    /// The disk limits of a create from `t` that asks for `disk`: what it names, the rest as
    /// `t` has them (else the runtime's default); `None` when it names none (the template's).
    pub fn disk_limits(
        &self,
        t: &pandastack_runtime::Template,
        disk: pandastack_host::DiskRequest,
    ) -> Option<pandastack_vm::DiskLimits> {
        (!disk.is_empty()).then(|| self.rt.disk_limits(t.shape).with(disk.mbps, disk.iops))
    }

    /// Creates sandbox `id` from `template` with its RAM in a file of its own, so that its
    /// snapshots are device state plus a reflink and restore by mapping (see
    /// [`Runtime::create_with_memory_file`]). Takes no pooled VM.
    pub async fn create_with_memory_file(
        &self,
        template: &str,
        id: &str,
    ) -> Result<SandboxView, AgentError> {
        let t = self.template(template).await?;
        let sb = self.rt.create_with_memory_file(&t, id).await?;
        Ok(self.insert(SandboxVm::Running(sb)).await)
    }

    /// Creates sandbox `id` from snapshot `snapshot_id`.
    pub async fn create_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
    ) -> Result<SandboxView, AgentError> {
        let snap = self.rt.get_snapshot(snapshot_id)?;
        let sb = self.rt.create_from_snapshot(&snap, id).await?;
        Ok(self.insert(SandboxVm::Running(sb)).await)
    }

    async fn insert(&self, slot: SandboxVm<D::Vm>) -> SandboxView {
        let id = slot.id().to_owned();
        let entry = Arc::new(Entry::new(slot));
        let view = entry.view().expect("new entry is live");
        self.sandboxes.write().await.insert(id, entry);
        view
    }

    /// Tops up the template's pool in the background (no-op when the pool is disabled or a
    /// fill is already under way; that fill re-checks the size on every round).
    fn refill(self: &Arc<Self>, t: pandastack_runtime::Template) {
        if self.cfg.pool_size == 0 {
            return;
        }
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let Ok(_filling) = me.filling.try_lock() else {
                return;
            };
            if let Err(e) = me.rt.fill_pool(&t, me.cfg.pool_size).await {
                tracing::warn!(template = %t.name, error = &e as &dyn std::error::Error, "pool refill");
            }
        });
    }

    /// Fills the pools of all baked templates up to the configured size.
    pub async fn fill_pools(&self) -> Result<(), AgentError> {
        if self.cfg.pool_size == 0 {
            return Ok(());
        }
        // One fill at a time: a create's refill started meanwhile finds this one running.
        let _filling = self.filling.lock().await;
        for name in self.rt.baked_templates()? {
            let t = self.rt.template(&name)?;
            self.rt.fill_pool(&t, self.cfg.pool_size).await?;
        }
        Ok(())
    }

    /// The guest agent session of a sandbox, waking it first if it is hibernated.
    pub async fn channel(&self, id: &str) -> Result<Channel, AgentError> {
        let e = self.entry(id).await?;
        let slot = self.awake(&e).await?;
        Ok(self.running(id, &slot)?.agent.clone())
    }

    /// How to reach `port` of sandbox `id`'s guest (woken first if it is hibernated): with a
    /// network slot, a TCP connection to the guest's address over the slot's TAP when the
    /// guest accepts one within `NETWORK_DIAL_TIMEOUT` (servers bound to the guest's loopback
    /// refuse it); else the agent session. The connection is made with the sandbox's lock
    /// held, so no hibernate or delete can hand its slot to another sandbox meanwhile, and is
    /// recorded in the entry, which shuts it down when the VM stops running (see [`dialed`]).
    pub(crate) async fn port_route(&self, id: &str, port: u16) -> Result<PortRoute, AgentError> {
        let e = self.entry(id).await?;
        let slot = self.awake(&e).await?;
        let sb = self.running(id, &slot)?;
        match dialed::dial(&self.rt, sb, &e.dialed, port).await {
            Ok(Some(conn)) => return Ok(PortRoute::Network(conn)),
            Ok(None) => {}
            Err(err) => tracing::debug!(
                sandbox = id,
                port,
                error = err.as_ref() as &dyn std::error::Error,
                "no connection over the sandbox's network: the agent's port stream"
            ),
        }
        Ok(PortRoute::Agent(sb.agent.clone()))
    }

    /// Entry `e`'s slot, locked, after waking a hibernated VM (its state published either way).
    async fn awake<'a>(
        &self,
        e: &'a Entry<D::Vm>,
    ) -> Result<tokio::sync::MutexGuard<'a, SandboxVm<D::Vm>>, AgentError> {
        let mut slot = e.lock().await;
        let woke = self.ensure_awake(&mut slot).await;
        e.publish(&slot);
        woke?;
        Ok(slot)
    }

    /// Refuses an operation on a sandbox whose VM process has ended on its own (see
    /// [`Self::observed`]): only a delete is left to do.
    fn check_alive(&self, slot: &SandboxVm<D::Vm>) -> Result<(), AgentError> {
        match slot.sandbox() {
            Some(sb) if !self.rt.is_alive(sb) => Err(AgentError::VmExited(sb.id.clone())),
            _ => Ok(()),
        }
    }

    /// The running sandbox in `slot` (taken through [`Self::awake`], which refused a dead VM:
    /// its session could never answer), or why there is none to talk to.
    fn running<'a>(
        &self,
        id: &str,
        slot: &'a SandboxVm<D::Vm>,
    ) -> Result<&'a pandastack_runtime::Sandbox<D::Vm>, AgentError> {
        match slot {
            SandboxVm::Running(sb) => Ok(sb),
            SandboxVm::Paused(_) => Err(AgentError::InvalidState {
                id: id.into(),
                state: VmState::Paused,
                op: "exec or files (resume it first)",
            }),
            _ => Err(AgentError::SandboxNotFound(id.into())),
        }
    }

    /// Wakes a hibernated sandbox in `slot`; refuses one whose VM process has ended on its own
    /// (every operation on the VM starts here, so none runs on a dead one), and one whose image
    /// is on its way to another host (see [`crate::moving`]).
    async fn ensure_awake(&self, slot: &mut SandboxVm<D::Vm>) -> Result<(), AgentError> {
        self.check_alive(slot)?;
        if let SandboxVm::Hibernated(h) = slot {
            if crate::moving::is_leaving(h) {
                return Err(AgentError::InvalidState {
                    id: h.id.clone(),
                    state: VmState::Hibernated,
                    op: pandastack_host::WAKE_WHILE_MOVING,
                });
            }
            // Woken here, it is no longer what the durable copy holds.
            self.drop_durable(h);
            let SandboxVm::Hibernated(h) = std::mem::replace(slot, SandboxVm::Gone) else {
                unreachable!()
            };
            match self.rt.wake(h).await {
                Ok(sb) => *slot = SandboxVm::Running(sb),
                Err((e, h)) => {
                    *slot = SandboxVm::Hibernated(h);
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Pauses a running sandbox's vCPUs in place.
    pub async fn pause(&self, id: &str) -> Result<SandboxView, AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        let woke = self.ensure_awake(&mut slot).await;
        e.publish(&slot);
        woke?;
        if let SandboxVm::Running(sb) = &*slot {
            sb.vm.pause().await?;
        }
        slot.mark_paused();
        e.publish(&slot);
        Ok(slot.view().expect("live"))
    }

    /// Resumes a paused (or wakes a hibernated) sandbox.
    pub async fn resume(&self, id: &str) -> Result<SandboxView, AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        let woke = self.ensure_awake(&mut slot).await;
        e.publish(&slot);
        woke?;
        if let SandboxVm::Paused(sb) = &*slot {
            sb.vm.resume().await?;
        }
        slot.mark_running();
        e.publish(&slot);
        Ok(slot.view().expect("live"))
    }

    /// Hibernates a sandbox (a paused one too). Idempotent.
    pub async fn hibernate(&self, id: &str) -> Result<SandboxView, AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        self.check_alive(&slot)?;
        let taken = std::mem::replace(&mut *slot, SandboxVm::Gone);
        let (sb, was_paused) = match taken {
            SandboxVm::Running(sb) => (sb, false),
            SandboxVm::Paused(sb) => (sb, true),
            other => {
                *slot = other;
                return Ok(slot.view().expect("live"));
            }
        };
        let result = match self.rt.hibernate(sb).await {
            Ok(h) => {
                *slot = SandboxVm::Hibernated(h);
                Ok(())
            }
            Err((err, sb)) => {
                *slot = if was_paused {
                    SandboxVm::Paused(sb)
                } else {
                    SandboxVm::Running(sb)
                };
                Err(err.into())
            }
        };
        e.publish(&slot);
        result.map(|()| slot.view().expect("live"))
    }

    /// Hibernates sandbox `id` and copies its disk to `to` (a reflink where the filesystem has
    /// them): the disk of a VM that is not running, so consistent with what the guest synced.
    pub async fn export_disk(&self, id: &str, to: &std::path::Path) -> Result<(), AgentError> {
        self.hibernate(id).await?;
        let e = self.entry(id).await?;
        let slot = e.slot.lock().await;
        match &*slot {
            SandboxVm::Hibernated(h) => {
                pandastack_runtime::files::clone_file(&h.rootfs(), to)?;
                Ok(())
            }
            _ => Err(AgentError::Io(std::io::Error::other(format!(
                "sandbox {id} did not stay hibernated"
            )))),
        }
    }

    /// Wakes a hibernated sandbox. Idempotent.
    pub async fn wake(&self, id: &str) -> Result<SandboxView, AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        let woke = self.ensure_awake(&mut slot).await;
        e.publish(&slot);
        woke?;
        Ok(slot.view().expect("live"))
    }

    /// Snapshots a sandbox (waking it if hibernated).
    pub async fn snapshot(&self, id: &str, snapshot_id: &str) -> Result<Snapshot, AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        let woke = self.ensure_awake(&mut slot).await;
        e.publish(&slot);
        woke?;
        let sb = slot
            .sandbox()
            .ok_or_else(|| AgentError::SandboxNotFound(id.into()))?;
        Ok(self.rt.snapshot(sb, snapshot_id).await?)
    }

    /// Forks a sandbox into `child_ids` through snapshot `snapshot_id`.
    pub async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> Result<(Snapshot, Vec<SandboxView>), AgentError> {
        let e = self.entry(id).await?;
        let fork = {
            let mut slot = e.lock().await;
            let woke = self.ensure_awake(&mut slot).await;
            e.publish(&slot);
            woke?;
            let sb = slot
                .sandbox()
                .ok_or_else(|| AgentError::SandboxNotFound(id.into()))?;
            self.rt.fork(sb, snapshot_id, child_ids).await?
        };
        let mut views = Vec::with_capacity(fork.children.len());
        for c in fork.children {
            views.push(self.insert(SandboxVm::Running(c)).await);
        }
        Ok((fork.snapshot, views))
    }

    /// Deletes a snapshot's files (its stand-by processes first).
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<(), AgentError> {
        if let Ok(snap) = self.rt.get_snapshot(snapshot_id) {
            self.forget_stored_snapshot(&snap).await;
        }
        Ok(self.rt.delete_snapshot_and_standby(snapshot_id).await?)
    }

    /// Keeps `count` processes started and waiting for restores from snapshot `snapshot_id`
    /// (fewer are stopped); returns how many wait. See `pandastack_runtime`'s `standby`.
    pub async fn keep_standby(&self, snapshot_id: &str, count: usize) -> Result<usize, AgentError> {
        let snap = self.rt.get_snapshot(snapshot_id)?;
        Ok(self.rt.keep_standby(&snap, count).await?)
    }

    /// Stops a sandbox and removes its files. Idempotent for unknown ids is the caller's choice:
    /// this returns `SandboxNotFound`.
    pub async fn destroy(&self, id: &str) -> Result<(), AgentError> {
        let e = self.entry(id).await?;
        let mut slot = e.lock().await;
        match std::mem::replace(&mut *slot, SandboxVm::Gone) {
            SandboxVm::Running(sb) | SandboxVm::Paused(sb) => {
                if let Err(err) = self.rt.destroy(sb).await {
                    tracing::warn!(
                        sandbox = id,
                        error = &err as &dyn std::error::Error,
                        "destroy"
                    );
                }
            }
            SandboxVm::Hibernated(h) => {
                self.drop_durable(&h);
                std::fs::remove_dir_all(&h.dir)?
            }
            SandboxVm::Gone => {}
        }
        e.publish(&slot);
        drop(slot);
        self.sandboxes.write().await.remove(id);
        Ok(())
    }

    /// Guest console log of a sandbox.
    pub async fn console_log(&self, id: &str) -> Result<PathBuf, AgentError> {
        let e = self.entry(id).await?;
        let slot = e.slot.lock().await;
        Ok(slot.dir().join(console::CONSOLE_LOG))
    }

    /// CPU time used by a running sandbox's VM (`None` when it has no VM process).
    pub async fn cpu_time(&self, id: &str) -> Result<Option<std::time::Duration>, AgentError> {
        let e = self.entry(id).await?;
        let slot = e.slot.lock().await;
        Ok(match slot.sandbox() {
            Some(sb) => Some(sb.vm.cpu_time()?),
            None => None,
        })
    }

    /// Host-side resource use of a sandbox's VM (`None` while hibernated). A VM whose process
    /// has ended has none: [`AgentError::VmExited`], as for any other operation on it.
    pub async fn stats(&self, id: &str) -> Result<Option<pandastack_vm::VmStats>, AgentError> {
        let e = self.entry(id).await?;
        let slot = e.slot.lock().await;
        self.check_alive(&slot)?;
        Ok(match slot.sandbox() {
            // The process may end between the check and the read of its `/proc` files.
            Some(sb) => Some(sb.vm.stats().map_err(|err| {
                if self.rt.is_alive(sb) {
                    AgentError::Vm(err)
                } else {
                    AgentError::VmExited(id.into())
                }
            })?),
            None => None,
        })
    }

    /// Stops the pool's VMs and stand-by processes (sandboxes keep running: they outlive the
    /// agent).
    pub async fn shutdown(&self) {
        self.rt.drain_pool().await;
        self.rt.drain_standby().await;
    }
}
