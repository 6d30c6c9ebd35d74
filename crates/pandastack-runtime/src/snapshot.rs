//! Snapshots of running sandboxes and forks.
//!
//! A snapshot pauses the VM, writes its state — device state and all of guest RAM, since a
//! sandbox's RAM is a private mapping or anonymous memory — reflinks its disk while nothing can
//! write to it, and resumes the VM: memory and disk are captured at the same instant. A sandbox
//! restored from a snapshot gets anonymous RAM loaded from the state file and a reflink of the
//! snapshot's disk. A fork is a snapshot plus N such restores.
//!
//! Every bound volume is reflinked into the snapshot in the same pause (`vol<N>.img`); a
//! sandbox restored from the snapshot, and so each fork child, gets a reflink of that copy in
//! its own directory, never the live volume (see [`crate::volumes`]).
//!
//! A sandbox whose RAM is a file of its own ([`Runtime::create_with_memory_file`]) is saved
//! differently: the state file holds device state only and the RAM file is reflinked into the
//! snapshot (`mem`) in the same pause; sandboxes restored from such a snapshot map that file
//! copy-on-write (read-only, like a template's) instead of loading RAM from the state, so a
//! restore reads only the pages the guest touches.
//!
//! Layout: `snapshots/<id>/{state, rootfs.ext4, mem?, vol<N>.img…, snapshot.json}`; built in
//! `<id>.partial` and renamed when complete, so a crash never leaves a snapshot that looks
//! usable.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::future::join_all;
use pandastack_vm::{Vm, VmDriver, VmError, VolumeDisk};
use serde::{Deserialize, Serialize};

use crate::files::clone_file;
use crate::sandbox::{now_unix_ms, CreateError, Ram, Sandbox, Source, MEMORY, ROOTFS};
use crate::template::Shape;
use crate::volumes::{self, SlotSource, SnapshotVolume};
use crate::{valid_id, Runtime};

const INFO_FILE: &str = "snapshot.json";
/// Every file of a snapshot that another host may fetch (see [`Snapshot::moving_files`]).
pub const SNAPSHOT_FILES: [&str; 3] = [STATE, ROOTFS, MEMORY];
const STATE: &str = "state";

/// A complete snapshot on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub id: String,
    pub sandbox_id: String,
    pub template: String,
    pub shape: Shape,
    pub kernel: PathBuf,
    /// Taken from a sandbox with a NIC: its sandboxes need a network slot.
    #[serde(default)]
    pub network: bool,
    /// One entry per volume slot of the sandbox: `Some` when a volume was bound (its content
    /// is [`Snapshot::volume`]), `None` for a placeholder.
    #[serde(default)]
    pub volumes: Vec<Option<SnapshotVolume>>,
    /// RAM is in the snapshot's own file ([`Snapshot::memory`]), not in the state file.
    #[serde(default)]
    pub memory_file: bool,
    pub created_unix_ms: u64,
    /// Disk space the snapshot's own files take (allocated blocks; the disk shares unchanged
    /// blocks with its sandbox through the reflink).
    pub size_bytes: u64,
    /// Time the sandbox was paused for.
    pub paused_ms: u64,
    #[serde(skip)]
    pub dir: PathBuf,
}

impl Snapshot {
    /// The files another host needs to restore this snapshot (its state, its disk and its RAM
    /// file if it has one), by name in its directory. A snapshot holding a copy of a volume
    /// cannot move: a volume stays on its host.
    pub fn moving_files(&self) -> Result<Vec<&'static str>, SnapshotError> {
        if self.volumes.iter().any(Option::is_some) {
            return Err(SnapshotError::Immovable {
                id: self.id.clone(),
                why: "it holds a copy of a volume (volumes stay on their host)".into(),
            });
        }
        Ok([STATE, ROOTFS, MEMORY]
            .into_iter()
            .filter(|&f| f != MEMORY || self.memory_file)
            .collect())
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join(STATE)
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join(ROOTFS)
    }
    /// The RAM file (when [`Snapshot::memory_file`]).
    pub fn memory(&self) -> PathBuf {
        self.dir.join(MEMORY)
    }
    /// The snapshot's copy of the volume bound to slot `slot` (if one was).
    pub fn volume(&self, slot: usize) -> PathBuf {
        self.dir.join(volumes::copy_name(slot))
    }
}

/// The outcome of a fork: the snapshot the children came from, and the children.
pub struct Fork<V: Vm> {
    pub snapshot: Snapshot,
    pub children: Vec<Sandbox<V>>,
    pub took: Duration,
}

/// Why a snapshot or fork failed. A failed snapshot leaves no files; the sandbox keeps running.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("invalid snapshot id {0:?}")]
    InvalidId(String),
    #[error("snapshot {0} already exists")]
    Exists(String),
    #[error("snapshot {0} not found")]
    NotFound(String),
    #[error("snapshot files")]
    Io(#[from] std::io::Error),
    #[error("snapshot manifest")]
    Manifest(#[from] serde_json::Error),
    #[error("vm")]
    Vm(#[from] VmError),
    #[error("fork child")]
    Child(#[source] CreateError),
    /// The snapshot cannot go to another host (see [`Snapshot::moving_files`]).
    #[error("snapshot {id} cannot move to another host: {why}")]
    Immovable { id: String, why: String },
}

fn allocated(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

impl<D: VmDriver> Runtime<D> {
    /// Snapshots a running sandbox as `snapshot_id`. The sandbox is paused meanwhile and runs
    /// on afterwards (also when the snapshot fails).
    pub async fn snapshot(
        &self,
        sandbox: &Sandbox<D::Vm>,
        snapshot_id: &str,
    ) -> Result<Snapshot, SnapshotError> {
        let _busy = self.pool.busy();
        if !valid_id(snapshot_id) {
            return Err(SnapshotError::InvalidId(snapshot_id.into()));
        }
        let dir = self.data.snapshot(snapshot_id);
        if dir.exists() {
            return Err(SnapshotError::Exists(snapshot_id.into()));
        }
        let work = dir.with_extension("partial");
        match std::fs::create_dir(&work) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SnapshotError::Exists(snapshot_id.into()))
            }
            Err(e) => return Err(e.into()),
        }
        let result = self.snapshot_into(sandbox, snapshot_id, &work).await;
        let result = result.and_then(|mut s| {
            std::fs::rename(&work, &dir)?;
            s.dir = dir;
            Ok(s)
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&work);
        }
        result
    }

    async fn snapshot_into(
        &self,
        sandbox: &Sandbox<D::Vm>,
        snapshot_id: &str,
        work: &Path,
    ) -> Result<Snapshot, SnapshotError> {
        let t = Instant::now();
        sandbox.vm.pause().await?;
        // Paused: vCPUs stopped and block requests drained, so state and disks agree.
        let captured = async {
            // With a RAM file of its own, the state is device state only: the file is the RAM.
            sandbox.vm.save_state(&work.join(STATE)).await?;
            if sandbox.info.memory_file {
                clone_file(&sandbox.dir.join(MEMORY), &work.join(MEMORY))?;
            }
            clone_file(&sandbox.rootfs(), &work.join(ROOTFS))?;
            for (slot, disk) in sandbox.info.volumes.iter().enumerate() {
                if let Some(disk) = disk {
                    clone_file(&disk.path, &work.join(volumes::copy_name(slot)))?;
                }
            }
            Ok::<_, SnapshotError>(())
        }
        .await;
        let resumed = sandbox.vm.resume().await;
        let paused_ms = t.elapsed().as_millis() as u64;
        captured?;
        resumed?;
        let volumes: Vec<Option<SnapshotVolume>> = sandbox
            .info
            .volumes
            .iter()
            .map(|v| {
                v.as_ref().map(|d| SnapshotVolume {
                    read_only: d.read_only,
                })
            })
            .collect();
        let snap = Snapshot {
            id: snapshot_id.to_owned(),
            sandbox_id: sandbox.id.clone(),
            template: sandbox.info.template.clone(),
            shape: sandbox.info.shape,
            kernel: sandbox.info.kernel.clone(),
            network: sandbox.info.network,
            volumes: volumes.clone(),
            memory_file: sandbox.info.memory_file,
            created_unix_ms: now_unix_ms(),
            size_bytes: allocated(&work.join(STATE))
                + allocated(&work.join(MEMORY))
                + allocated(&work.join(ROOTFS))
                + (0..volumes.len())
                    .map(|slot| allocated(&work.join(volumes::copy_name(slot))))
                    .sum::<u64>(),
            paused_ms,
            dir: work.to_owned(),
        };
        std::fs::write(work.join(INFO_FILE), serde_json::to_vec_pretty(&snap)?)?;
        tracing::debug!(
            sandbox = %sandbox.id,
            snapshot = snapshot_id,
            paused_ms,
            size_mib = snap.size_bytes >> 20,
            "snapshot taken"
        );
        Ok(snap)
    }

    /// Loads a snapshot by id.
    pub fn get_snapshot(&self, snapshot_id: &str) -> Result<Snapshot, SnapshotError> {
        if !valid_id(snapshot_id) {
            return Err(SnapshotError::InvalidId(snapshot_id.into()));
        }
        let dir = self.data.snapshot(snapshot_id);
        let raw = match std::fs::read(dir.join(INFO_FILE)) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SnapshotError::NotFound(snapshot_id.into()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut s: Snapshot = serde_json::from_slice(&raw)?;
        s.dir = dir;
        Ok(s)
    }

    /// An empty directory to fetch snapshot `id`'s files into from another host, unique to
    /// the call (two fetches of one snapshot never share one); see [`Self::adopt_snapshot`].
    pub fn snapshot_moving_in(&self, id: &str) -> Result<PathBuf, SnapshotError> {
        if !valid_id(id) {
            return Err(SnapshotError::InvalidId(id.into()));
        }
        let dir = self
            .data
            .root()
            .join("snapshots")
            .join(format!(".fetching-{id}-{:016x}", rand::random::<u64>()));
        crate::files::empty_dir(&dir)?;
        Ok(dir)
    }

    /// Makes the snapshot `info` describes, whose files ([`Snapshot::moving_files`]) another
    /// host stored and this one fetched into `staged` ([`Self::snapshot_moving_in`]), a
    /// snapshot of this host: restored with this host's kernel (the same by the compatibility
    /// key the caller checked). `staged` is gone afterwards, whatever happens; a snapshot with
    /// the id already here (another fetch of it finished first) is that one.
    pub fn adopt_snapshot(
        &self,
        mut info: Snapshot,
        staged: &Path,
    ) -> Result<Snapshot, SnapshotError> {
        let id = info.id.clone();
        let adopted = (|| {
            if !valid_id(&id) {
                return Err(SnapshotError::InvalidId(id.clone()));
            }
            if info.network && self.net.is_none() {
                return Err(SnapshotError::Immovable {
                    id: id.clone(),
                    why: "it has a network card and this host runs sandboxes without networking"
                        .into(),
                });
            }
            for f in info.moving_files()? {
                if !staged.join(f).is_file() {
                    return Err(SnapshotError::Immovable {
                        id: id.clone(),
                        why: format!("its {f} was not fetched"),
                    });
                }
            }
            info.kernel = self.kernel.clone();
            std::fs::write(staged.join(INFO_FILE), serde_json::to_vec_pretty(&info)?)?;
            let dir = self.data.snapshot(&id);
            if let Err(e) = std::fs::rename(staged, &dir) {
                if !dir.join(INFO_FILE).is_file() {
                    return Err(e.into());
                }
            }
            Ok(())
        })();
        let _ = std::fs::remove_dir_all(staged);
        adopted?;
        self.get_snapshot(&id)
    }

    /// Deletes a snapshot's files. Sandboxes restored from it are unaffected (their disks are
    /// reflinks, their RAM was loaded or maps the file, which lives on while mapped). Stop its
    /// stand-by processes first ([`Runtime::drop_standby`]).
    pub fn delete_snapshot(&self, snapshot_id: &str) -> Result<(), SnapshotError> {
        let s = self.get_snapshot(snapshot_id)?;
        std::fs::remove_dir_all(s.dir)?;
        Ok(())
    }

    /// Creates sandbox `id` from a snapshot: the snapshot's memory and disk, a new identity; a
    /// volume slot bound in the snapshot gets a reflink of the snapshot's copy.
    pub async fn create_from_snapshot(
        &self,
        snapshot: &Snapshot,
        id: &str,
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        self.create_from_snapshot_with_volumes(snapshot, id, &[])
            .await
    }

    /// [`Runtime::create_from_snapshot`] with volume slot `i` bound to `volumes[i]`. Only slots
    /// that were unbound in the snapshot may be bound (the guest has the others' file systems
    /// mounted, and gets their snapshot copies): `Some` for a slot bound in the snapshot is
    /// [`CreateError::SlotInSnapshot`].
    pub async fn create_from_snapshot_with_volumes(
        &self,
        snapshot: &Snapshot,
        id: &str,
        volumes: &[Option<VolumeDisk>],
    ) -> Result<Sandbox<D::Vm>, CreateError> {
        let slots = snapshot.volumes.len();
        if volumes.len() > slots {
            return Err(CreateError::TooManyVolumes {
                given: volumes.len(),
                slots,
            });
        }
        let mut sources = Vec::with_capacity(slots);
        for (slot, recorded) in snapshot.volumes.iter().enumerate() {
            let given = volumes.get(slot).cloned().flatten();
            sources.push(match (recorded, given) {
                (Some(_), Some(_)) => return Err(CreateError::SlotInSnapshot(slot)),
                (Some(v), None) => SlotSource::CloneOf {
                    from: snapshot.volume(slot),
                    read_only: v.read_only,
                },
                (None, Some(d)) => SlotSource::Bound(d),
                (None, None) => SlotSource::Unbound,
            });
        }
        let source = Source {
            rootfs: snapshot.rootfs(),
            ram: Ram::Map(crate::standby::memory_of(snapshot)),
            state: snapshot.state(),
            template: snapshot.template.clone(),
            shape: snapshot.shape,
            kernel: snapshot.kernel.clone(),
            snapshot: Some(snapshot.id.clone()),
            network: snapshot.network,
            volumes: sources,
        };
        self.create_from(source, None, id).await
    }

    /// Forks a running sandbox into children named `child_ids`: each starts from the parent's
    /// memory and disks at one instant and diverges independently (each child's volumes are
    /// reflinks of the snapshot's copies, in its own directory). All or nothing: if one child
    /// fails, the others and the snapshot are removed again.
    pub async fn fork(
        &self,
        parent: &Sandbox<D::Vm>,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> Result<Fork<D::Vm>, SnapshotError> {
        let t = Instant::now();
        let snapshot = self.snapshot(parent, snapshot_id).await?;
        let results = join_all(
            child_ids
                .iter()
                .map(|id| self.create_from_snapshot(&snapshot, id)),
        )
        .await;
        let mut children = Vec::with_capacity(results.len());
        let mut failure = None;
        for r in results {
            match r {
                Ok(c) => children.push(c),
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        if let Some(e) = failure {
            for c in children {
                let _ = self.destroy(c).await;
            }
            let _ = std::fs::remove_dir_all(&snapshot.dir);
            return Err(SnapshotError::Child(e));
        }
        Ok(Fork {
            snapshot,
            children,
            took: t.elapsed(),
        })
    }
}
