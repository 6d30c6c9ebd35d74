//! Stand-by VM processes for restores from one snapshot: the hypervisor process started with the
//! snapshot's memory mapping, a clone of its disk and a network slot, waiting for device state
//! (QEMU `-incoming`). Nothing of the snapshot has run in it: a restore that takes one only loads
//! the state, and the guest starts from the snapshot exactly as in any other restore (new
//! identity, fresh entropy). What it takes off the restore path is process start, the disk clone
//! and the slot — for function instances, each restored from their version's snapshot, that is
//! about half of the restore under TCG.
//!
//! Unlike the template pool (`pool.rs`), whose VMs are already running, stand-by processes hold
//! no guest state, so a restore from one is still a restore ("cold"). Only snapshots without
//! volume copies qualify (a stand-by process has every slot on a placeholder). Directories use
//! the pool's prefix, so start-up reconciliation removes those a previous process left.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use pandastack_vm::{Memory, Vm, VmDriver, VmSpec};

use crate::files::clone_file;
use crate::pool::POOL_PREFIX;
use crate::sandbox::{CreateError, ROOTFS};
use crate::snapshot::Snapshot;
use crate::{volumes, Runtime};

/// One waiting process, its run directory and network slot.
pub(crate) struct Standby<V> {
    pub dir: PathBuf,
    pub vm: V,
    pub net_slot: Option<u32>,
}

/// Waiting processes by snapshot id.
pub(crate) struct Standbys<V> {
    by_snapshot: Mutex<HashMap<String, Vec<Standby<V>>>>,
    /// Held by changes of the set (start, stop), so a stop for a snapshot being deleted
    /// cannot miss a process that a concurrent start is still bringing up.
    changing: tokio::sync::Mutex<()>,
}

impl<V> Default for Standbys<V> {
    fn default() -> Self {
        Self {
            by_snapshot: Mutex::new(HashMap::new()),
            changing: tokio::sync::Mutex::new(()),
        }
    }
}

impl<V> Standbys<V> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Standby<V>>>> {
        self.by_snapshot.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn take(&self, snapshot: &str) -> Option<Standby<V>> {
        self.lock().get_mut(snapshot).and_then(Vec::pop)
    }

    fn put(&self, snapshot: &str, s: Standby<V>) {
        self.lock().entry(snapshot.to_owned()).or_default().push(s);
    }

    fn len(&self, snapshot: &str) -> usize {
        self.lock().get(snapshot).map_or(0, Vec::len)
    }

    fn take_snapshot(&self, snapshot: &str) -> Vec<Standby<V>> {
        self.lock().remove(snapshot).unwrap_or_default()
    }

    fn take_all(&self) -> Vec<Standby<V>> {
        self.lock().drain().flat_map(|(_, v)| v).collect()
    }
}

/// Whether restores from `snapshot` can use stand-by processes (no volume copies to bind).
pub(crate) fn qualifies(snapshot: &Snapshot) -> bool {
    snapshot.volumes.iter().all(Option::is_none)
}

/// What a restore runs with: the snapshot's RAM file mapped copy-on-write, or anonymous RAM
/// loaded from the state.
pub(crate) fn memory_of(snapshot: &Snapshot) -> Memory {
    if snapshot.memory_file {
        Memory::PrivateFile(snapshot.memory())
    } else {
        Memory::Anonymous
    }
}

impl<D: VmDriver> Runtime<D> {
    /// Starts processes until `count` wait for restores from `snapshot` (fewer are stopped).
    /// Returns how many wait. A snapshot with volume copies gets none.
    pub async fn keep_standby(
        &self,
        snapshot: &Snapshot,
        count: usize,
    ) -> Result<usize, CreateError> {
        if !qualifies(snapshot) {
            return Ok(0);
        }
        let _changing = self.standbys.changing.lock().await;
        if !snapshot.state().is_file() {
            // Deleted meanwhile (its stand-by processes were stopped with it).
            return Ok(0);
        }
        while self.standbys.len(&snapshot.id) > count {
            match self.standbys.take(&snapshot.id) {
                Some(s) => self.discard_standby(s).await,
                None => break,
            }
        }
        while self.standbys.len(&snapshot.id) < count {
            let s = self.start_standby(snapshot).await?;
            self.standbys.put(&snapshot.id, s);
        }
        Ok(self.standbys.len(&snapshot.id))
    }

    /// Processes waiting for restores from `snapshot_id`.
    pub fn standby_count(&self, snapshot_id: &str) -> usize {
        self.standbys.len(snapshot_id)
    }

    /// Stops the processes waiting for `snapshot_id` (before its files go).
    pub async fn drop_standby(&self, snapshot_id: &str) {
        let _changing = self.standbys.changing.lock().await;
        self.discard_standbys(snapshot_id).await;
    }

    async fn discard_standbys(&self, snapshot_id: &str) {
        for s in self.standbys.take_snapshot(snapshot_id) {
            self.discard_standby(s).await;
        }
    }

    /// Stops the stand-by processes of `snapshot_id`, then deletes the snapshot's files, with
    /// no start of another in between.
    pub async fn delete_snapshot_and_standby(
        &self,
        snapshot_id: &str,
    ) -> Result<(), crate::SnapshotError> {
        let _changing = self.standbys.changing.lock().await;
        self.discard_standbys(snapshot_id).await;
        self.delete_snapshot(snapshot_id)
    }

    /// Stops every stand-by process (at shutdown).
    pub async fn drain_standby(&self) {
        let _changing = self.standbys.changing.lock().await;
        for s in self.standbys.take_all() {
            self.discard_standby(s).await;
        }
    }

    /// A stand-by process for `snapshot` that still runs; exited ones are discarded on the way
    /// (as [`Runtime::take_pooled`] does for the pool).
    pub(crate) async fn take_standby(&self, snapshot: &str) -> Option<Standby<D::Vm>> {
        while let Some(s) = self.standbys.take(snapshot) {
            if !s.vm.has_exited() {
                return Some(s);
            }
            tracing::warn!(snapshot, dir = %s.dir.display(), "a stand-by VM had exited; discarded");
            self.discard_standby(s).await;
        }
        None
    }

    pub(crate) async fn discard_standby(&self, s: Standby<D::Vm>) {
        let _ = s.vm.stop().await;
        self.net_release(s.net_slot).await;
        let _ = std::fs::remove_dir_all(&s.dir);
    }

    async fn start_standby(&self, snapshot: &Snapshot) -> Result<Standby<D::Vm>, CreateError> {
        self.start_waiting(&Waiting {
            rootfs: snapshot.rootfs(),
            memory: memory_of(snapshot),
            shape: snapshot.shape,
            kernel: snapshot.kernel.clone(),
            network: snapshot.network,
            slots: snapshot.volumes.len(),
        })
        .await
    }

    /// Starts a VM process in a new directory under the pool's prefix, waiting for state: the
    /// disk cloned from `w.rootfs`, every volume slot on a placeholder, a network slot held.
    /// On failure nothing of it is left.
    pub(crate) async fn start_waiting(&self, w: &Waiting) -> Result<Standby<D::Vm>, CreateError> {
        let name = format!("{POOL_PREFIX}{:08x}", rand::random::<u32>());
        let dir = self.data.sandbox(&name);
        std::fs::create_dir(&dir)?;
        let lease = match self.net_acquire(w.network).await {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e.into());
            }
        };
        let net_slot = lease.as_ref().map(|l| l.index);
        let started = async {
            clone_file(&w.rootfs, &dir.join(ROOTFS))?;
            let volumes = (0..w.slots)
                .map(|slot| volumes::placeholder(&dir, slot))
                .collect::<Result<Vec<_>, _>>()?;
            let spec = VmSpec {
                id: name.clone(),
                vcpus: w.shape.vcpus,
                memory_mib: w.shape.memory_mib,
                kernel: w.kernel.clone(),
                rootfs: dir.join(ROOTFS),
                kernel_args: vec![],
                memory: w.memory.clone(),
                net: lease.map(|l| l.attach),
                volumes,
                disk_limits: w.shape.disk,
                run_dir: dir.clone(),
            };
            Ok::<_, CreateError>(self.driver.prepare_restore(&spec).await?)
        }
        .await;
        match started {
            Ok(vm) => Ok(Standby { dir, vm, net_slot }),
            Err(e) => {
                self.net_release(net_slot).await;
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }
}

/// What a waiting process is started for (a template's bake or a snapshot).
pub(crate) struct Waiting {
    pub rootfs: PathBuf,
    pub memory: Memory,
    pub shape: crate::Shape,
    pub kernel: PathBuf,
    pub network: bool,
    pub slots: usize,
}

/// A failed adoption: the error, and the process and slot for the caller to stop and release.
pub(crate) type AdoptError<V> = (std::io::Error, V, Option<u32>);

impl<V: Vm> Standby<V> {
    /// Moves the run directory to `dir` (an empty directory, replaced atomically). The process
    /// keeps working across the rename: QEMU holds its disk, memory and log files open and its
    /// sockets move with the directory. On failure the directory is removed and the process
    /// and slot are handed back for the caller to stop and release.
    pub(crate) fn adopt(self, dir: &std::path::Path) -> Result<(V, Option<u32>), AdoptError<V>> {
        let Standby {
            dir: from,
            mut vm,
            net_slot,
        } = self;
        match std::fs::rename(&from, dir) {
            Ok(()) => {
                vm.relocate(dir.to_owned());
                Ok((vm, net_slot))
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&from);
                Err((e, vm, net_slot))
            }
        }
    }
}
