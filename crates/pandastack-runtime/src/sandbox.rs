//! Sandboxes: VMs restored from a template's bake or a snapshot, each with its own disk clone and
//! identity.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::Instrument;

use pandastack_vm::{Memory, Vm, VmDriver, VmError, VmSpec, VolumeDisk};
use serde::{Deserialize, Serialize};
use tonic::transport::Channel;

use crate::files::clone_file;
use crate::identity::{
    free_page_reporting, identify, post_restore_within, GuestReadyError, Identity,
};
use crate::template::{Shape, Template};
use crate::volumes::{self, SlotSource};
use crate::{valid_id, Runtime};

/// What a sandbox is, as recorded in its directory (`sandbox.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxInfo {
    pub id: String,
    /// Template it descends from (directly or through snapshots).
    pub template: String,
    pub shape: Shape,
    pub kernel: PathBuf,
    /// Snapshot it was restored from, if not from the template's bake.
    pub snapshot: Option<String>,
    pub created_unix_ms: u64,
    /// Has a NIC (baked with one): needs a network slot whenever its VM runs.
    #[serde(default)]
    pub network: bool,
    /// The network slot its running VM holds (none while hibernated).
    #[serde(default)]
    pub net_slot: Option<u32>,
    /// One entry per volume slot, in slot order: the disk bound to it, or `None` (an empty
    /// placeholder, `slot<N>.img` in the sandbox directory). Kept across hibernate and wake.
    #[serde(default)]
    pub volumes: Vec<Option<VolumeDisk>>,
    /// RAM is the sandbox's own file ([`MEMORY`] in its directory), mapped shared: a snapshot
    /// or hibernation saves device state only and the file holds the RAM (see
    /// [`Runtime::create_with_memory_file`]).
    #[serde(default)]
    pub memory_file: bool,
}

pub(crate) const INFO_FILE: &str = "sandbox.json";
pub(crate) const ROOTFS: &str = "rootfs.ext4";
/// A sandbox's (or snapshot's) own RAM file.
pub(crate) const MEMORY: &str = "mem";

impl SandboxInfo {
    pub(crate) fn load(dir: &Path) -> std::io::Result<Self> {
        let raw = std::fs::read(dir.join(INFO_FILE))?;
        serde_json::from_slice(&raw).map_err(std::io::Error::other)
    }

    pub(crate) fn save(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(".sandbox.json.tmp");
        std::fs::write(
            &tmp,
            serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?,
        )?;
        std::fs::rename(tmp, dir.join(INFO_FILE))
    }
}

/// A running sandbox.
pub struct Sandbox<V: Vm> {
    pub id: String,
    pub dir: PathBuf,
    pub info: SandboxInfo,
    pub vm: V,
    /// Connected guest agent session.
    pub agent: Channel,
    /// Time from the create (or wake) call to exec-ready.
    pub ready_in: Duration,
}

impl<V: Vm> Sandbox<V> {
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join(ROOTFS)
    }

    /// The disk bound to volume slot `slot`, if any.
    pub fn volume(&self, slot: usize) -> Option<&VolumeDisk> {
        self.info.volumes.get(slot).and_then(Option::as_ref)
    }
}

/// Why a create failed. Nothing of the half-created sandbox is left behind.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("invalid sandbox id {0:?}")]
    InvalidId(String),
    #[error("sandbox {0} already exists")]
    Exists(String),
    #[error("sandbox files")]
    Io(#[from] std::io::Error),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error(transparent)]
    Net(#[from] crate::net::SlotError),
    #[error(transparent)]
    Agent(#[from] GuestReadyError),
    #[error("{given} volumes for {slots} volume slots")]
    TooManyVolumes { given: usize, slots: usize },
    #[error("volume slot {0} holds the snapshot's copy of its volume; it cannot be bound to another file")]
    SlotInSnapshot(usize),
    #[error("volume for slot {slot} ({path})")]
    Volume {
        slot: usize,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Prepares the disks of `slots` in a new sandbox's directory `dir`: placeholders, checks of
/// the caller's files, reflinks of snapshot copies. Returns the bindings to record.
fn bind_slots(slots: &[SlotSource], dir: &Path) -> Result<Vec<Option<VolumeDisk>>, CreateError> {
    let mut bound = Vec::with_capacity(slots.len());
    for (slot, s) in slots.iter().enumerate() {
        let wrap = |path: &Path| {
            let path = path.to_owned();
            move |source| CreateError::Volume { slot, path, source }
        };
        bound.push(match s {
            SlotSource::Unbound => {
                volumes::placeholder(dir, slot)?;
                None
            }
            SlotSource::Bound(d) => {
                volumes::check_volume(d).map_err(wrap(&d.path))?;
                Some(d.clone())
            }
            SlotSource::CloneOf { from, read_only } => {
                let path = dir.join(volumes::copy_name(slot));
                clone_file(from, &path).map_err(wrap(from))?;
                Some(VolumeDisk {
                    path,
                    read_only: *read_only,
                })
            }
            SlotSource::MoveIn { from, read_only } => {
                let path = dir.join(volumes::copy_name(slot));
                move_file(from, &path).map_err(wrap(from))?;
                Some(VolumeDisk {
                    path,
                    read_only: *read_only,
                })
            }
        });
    }
    Ok(bound)
}

/// Moves `from` to `to` (which must not exist): a rename, or a clone and removal across file
/// systems.
fn move_file(from: &Path, to: &Path) -> std::io::Result<()> {
    volumes::check_volume(&VolumeDisk {
        path: from.to_owned(),
        read_only: true,
    })?;
    match rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::XDEV) => {
            clone_file(from, to)?;
            std::fs::remove_file(from)
        }
        Err(e) => Err(e.into()),
    }
}

/// Where a new sandbox's RAM comes from.
pub(crate) enum Ram {
    /// Mapped as given: a template's or snapshot's file copy-on-write, or anonymous memory
    /// loaded from the state file.
    Map(Memory),
    /// A reflink of this file (a template's or snapshot's RAM) becomes the sandbox's own RAM
    /// file, mapped shared.
    OwnCopyOf(PathBuf),
}

/// Where a new sandbox's disk, memory and state come from.
pub(crate) struct Source {
    pub rootfs: PathBuf,
    pub ram: Ram,
    pub state: PathBuf,
    pub template: String,
    pub shape: Shape,
    pub kernel: PathBuf,
    pub snapshot: Option<String>,
    /// Baked with a NIC.
    pub network: bool,
    /// What backs each volume slot (one entry per slot of the source).
    pub volumes: Vec<SlotSource>,
}

/// A create from `template`'s bake with RAM from `ram` and the caller's volume `bindings`.
fn template_source(
    template: &Template,
    ram: Ram,
    bindings: &[SlotSource],
) -> Result<Source, CreateError> {
    Ok(Source {
        rootfs: template.rootfs(),
        ram,
        state: template.state(),
        template: template.name.clone(),
        shape: template.shape,
        kernel: template.kernel.clone(),
        snapshot: None,
        network: template.network,
        volumes: template_slots(template.volume_slots as usize, bindings)?,
    })
}

/// The slots of a create from a template with `slots` slots and the caller's `bindings`.
pub(crate) fn template_slots(
    slots: usize,
    bindings: &[SlotSource],
) -> Result<Vec<SlotSource>, CreateError> {
    if bindings.len() > slots {
        return Err(CreateError::TooManyVolumes {
            given: bindings.len(),
            slots,
        });
    }
    Ok((0..slots)
        .map(|slot| bindings.get(slot).cloned().unwrap_or(SlotSource::Unbound))
        .collect())
}

impl<D: VmDriver> Runtime<D> {
    /// Creates sandbox `id` from `template`: clone the disk, restore the bake with the template
    /// memory mapped copy-on-write, give the guest a new identity. Takes a pre-started VM process
    /// from the pool when one is there. Returns when the guest agent answers, i.e. when exec is
    /// possible.
    pub async fn create(
        &self,
        template: &Template,
        id: &str,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        self.create_with_volumes(template, id, &[]).await
    }

    /// [`Runtime::create`] with volume slot `i` bound to `volumes[i]` (missing or `None`: an
    /// empty placeholder). A create that binds a volume does not take a pooled VM (those run
    /// with placeholders bound).
    pub async fn create_with_volumes(
        &self,
        template: &Template,
        id: &str,
        volumes: &[Option<VolumeDisk>],
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let bindings: Vec<SlotSource> = volumes
            .iter()
            .map(|v| v.clone().map_or(SlotSource::Unbound, SlotSource::Bound))
            .collect();
        self.create_with_bindings(template, id, &bindings).await
    }

    /// [`Runtime::create_with_volumes`] with each slot's [`SlotSource`] given: a file bound
    /// where it is, or a copy of one that becomes the sandbox's own (`vol<N>.img` in its
    /// directory, removed with it). More bindings than the template has slots is
    /// [`CreateError::TooManyVolumes`]; missing ones are placeholders.
    pub async fn create_with_bindings(
        &self,
        template: &Template,
        id: &str,
        bindings: &[SlotSource],
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        self.create_with_options(template, id, bindings, None).await
    }

    /// [`Runtime::create_with_bindings`] with disk limits of its own (`None`: the template's,
    /// else the runtime's default). The limits are the sandbox's from then on: its
    /// `sandbox.json` keeps them for a wake or a restart, and its snapshots and forks have
    /// them. A create whose limits differ from its template's does not take a pooled VM (those
    /// run with the template's).
    pub async fn create_with_options(
        &self,
        template: &Template,
        id: &str,
        bindings: &[SlotSource],
        disk: Option<pandastack_vm::DiskLimits>,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let ram = Ram::Map(Memory::PrivateFile(template.memory()));
        let mut source = template_source(template, ram, bindings)?;
        source.shape = source.shape.with_disk(disk);
        self.create_from(source, Some(template), id).await
    }

    /// [`Runtime::create`] with the sandbox's RAM in a file of its own (a reflink of the
    /// template's, mapped shared) instead of a private mapping of the template's. Such a
    /// sandbox costs page-cache sharing with its siblings and a file as large as its RAM, and
    /// gains cheap saves: a snapshot (or hibernation) writes device state only and reflinks
    /// the file, and sandboxes restored from that snapshot map its RAM copy-on-write instead of
    /// loading it. For VMs that exist to be snapshotted (function bakes, fork parents). Never
    /// takes a pooled VM.
    pub async fn create_with_memory_file(
        &self,
        template: &Template,
        id: &str,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let source = template_source(template, Ram::OwnCopyOf(template.memory()), &[])?;
        self.create_from(source, None, id).await
    }

    /// Creates sandbox `id` from `source`; with `pooled`, a pre-started VM for that template is
    /// used if available.
    pub(crate) async fn create_from(
        &self,
        mut source: Source,
        pooled: Option<&Template>,
        id: &str,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let started = Instant::now();
        // The sandbox keeps the limits it starts with, whatever the default later is.
        source.shape.disk = Some(self.disk_limits(source.shape));
        let _busy = self.pool.busy();
        if !valid_id(id) {
            return Err(CreateError::InvalidId(id.into()));
        }
        let dir = self.data.sandbox(id);
        // The empty directory reserves the id; a pooled VM's directory is renamed over it.
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(CreateError::Exists(id.into()))
            }
            Err(e) => return Err(e.into()),
        }
        let result = self.create_in(&source, pooled, id, &dir, started).await;
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        result
    }

    async fn create_in(
        &self,
        source: &Source,
        pooled: Option<&Template>,
        id: &str,
        dir: &Path,
        started: Instant,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        // Pooled VMs run with every slot on a placeholder, and with their template's disk
        // limits.
        let poolable = source
            .volumes
            .iter()
            .all(|v| matches!(v, SlotSource::Unbound));
        let pooled = pooled.filter(|t| self.disk_limits(t.shape) == self.disk_limits(source.shape));
        let taken = match pooled.filter(|_| poolable) {
            Some(t) => self.take_pooled(t).await,
            None => None,
        };
        let warm = match taken {
            Some(p) => match p.adopt(dir) {
                Ok(a) => Some(a),
                Err((e, vm, slot)) => {
                    let _ = vm.stop().await;
                    self.net_release(slot).await;
                    return Err(e.into());
                }
            },
            None => None,
        };
        let from_pool = warm.is_some();
        // A process waiting for this snapshot's state (see `standby.rs`).
        let standby = match (&warm, &source.snapshot) {
            (None, Some(snap)) if poolable => self.take_standby(snap).await,
            _ => None,
        };
        let memory_file = matches!(source.ram, Ram::OwnCopyOf(_));
        let mut bound = vec![None; source.volumes.len()];
        // The restore as a span of a trace (its end is where this handle is dropped).
        let restore = tracing::info_span!("restore", from_pool, standby = standby.is_some());
        let (vm, net_slot, warm_agent) = match (warm, standby) {
            // Already restored and running, session open: only the identity is left to do.
            (Some(a), _) => (a.vm, a.net_slot, Some(a.agent)),
            // Started, disk cloned, slot held: only the state is left to load.
            (None, Some(s)) => {
                let (vm, slot) = match s.adopt(dir) {
                    Ok(adopted) => adopted,
                    Err((e, vm, slot)) => {
                        let _ = vm.stop().await;
                        self.net_release(slot).await;
                        return Err(e.into());
                    }
                };
                // On failure finish_restore stops the process itself.
                let finished = self
                    .driver
                    .finish_restore(&vm, &source.state)
                    .instrument(restore.clone())
                    .await;
                if let Err(e) = finished {
                    self.net_release(slot).await;
                    return Err(e.into());
                }
                (vm, slot, None)
            }
            (None, None) => {
                clone_file(&source.rootfs, &dir.join(ROOTFS))?;
                let memory = match &source.ram {
                    Ram::Map(m) => m.clone(),
                    Ram::OwnCopyOf(from) => {
                        clone_file(from, &dir.join(MEMORY))?;
                        Memory::SharedFile(dir.join(MEMORY))
                    }
                };
                bound = bind_slots(&source.volumes, dir)?;
                let lease = self.net_acquire(source.network).await?;
                let spec = VmSpec {
                    id: id.to_owned(),
                    vcpus: source.shape.vcpus,
                    memory_mib: source.shape.memory_mib,
                    kernel: source.kernel.clone(),
                    rootfs: dir.join(ROOTFS),
                    kernel_args: vec![],
                    memory,
                    net: lease.as_ref().map(|l| l.attach.clone()),
                    volumes: volumes::disks_in(dir, &bound),
                    disk_limits: source.shape.disk,
                    run_dir: dir.to_owned(),
                };
                let slot = lease.map(|l| l.index);
                let vm = match self
                    .driver
                    .prepare_restore(&spec)
                    .instrument(restore.clone())
                    .await
                {
                    Ok(vm) => vm,
                    Err(e) => {
                        self.net_release(slot).await;
                        return Err(e.into());
                    }
                };
                // On failure finish_restore stops the process itself.
                let finished = self
                    .driver
                    .finish_restore(&vm, &source.state)
                    .instrument(restore.clone())
                    .await;
                if let Err(e) = finished {
                    self.net_release(slot).await;
                    return Err(e.into());
                }
                if let Err(e) = volumes::refresh_bound(&vm, &bound).await {
                    let _ = vm.stop().await;
                    self.net_release(slot).await;
                    return Err(e.into());
                }
                (vm, slot, None)
            }
        };
        drop(restore);
        let restored_at = started.elapsed();
        let info = SandboxInfo {
            id: id.to_owned(),
            template: source.template.clone(),
            shape: source.shape,
            kernel: source.kernel.clone(),
            snapshot: source.snapshot.clone(),
            created_unix_ms: now_unix_ms(),
            network: source.network,
            net_slot,
            volumes: bound,
            memory_file,
        };
        // Pooled and stand-by VMs run with the RAM the source maps too.
        let reporting = match &source.ram {
            Ram::Map(m) => free_page_reporting(m),
            Ram::OwnCopyOf(p) => free_page_reporting(&Memory::SharedFile(p.clone())),
        };
        let ready = async {
            let identity = Identity::New { hostname: id };
            let agent = match warm_agent {
                Some(agent) => {
                    post_restore_within(&agent, identity, reporting, self.restore_timeout).await?;
                    agent
                }
                None => identify(&vm, identity, reporting, self.restore_timeout).await?,
            };
            info.save(dir)?;
            Ok::<_, CreateError>(agent)
        }
        .instrument(tracing::info_span!("guest.post_restore"))
        .await;
        match ready {
            Ok(agent) => {
                tracing::debug!(
                    sandbox = id,
                    from_pool,
                    restore_ms = restored_at.as_secs_f64() * 1e3,
                    agent_ms = (started.elapsed() - restored_at).as_secs_f64() * 1e3,
                    "sandbox created"
                );
                Ok(Sandbox {
                    id: id.to_owned(),
                    dir: dir.to_owned(),
                    info,
                    vm,
                    agent,
                    ready_in: started.elapsed(),
                })
            }
            Err(e) => {
                let _ = vm.stop().await;
                self.net_release(net_slot).await;
                Err(e)
            }
        }
    }

    /// Stops a sandbox and removes its files (its placeholders and its own volume copies too;
    /// volume files bound from elsewhere stay).
    pub async fn destroy(&self, sandbox: Sandbox<D::Vm>) -> Result<(), CreateError> {
        drop(sandbox.agent);
        sandbox.vm.stop().await?;
        self.net_release(sandbox.info.net_slot).await;
        std::fs::remove_dir_all(&sandbox.dir)?;
        Ok(())
    }
}
