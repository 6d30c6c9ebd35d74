//! A pool of pre-started VM processes per template: QEMU started with the template's memory
//! mapping and a disk clone, waiting for device state. A create that finds one skips process
//! start and the disk clone; it renames the pooled directory to the sandbox's and loads the
//! state. The pool is refilled by the caller ([`Runtime::fill_pool`]), off the create path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pandastack_vm::{Memory, Vm, VmDriver, VmSpec};

use crate::files::clone_file;
use crate::sandbox::{CreateError, ROOTFS};
use crate::template::Template;
use crate::Runtime;

/// Directory names of pooled VMs start with this (not a valid sandbox id).
pub(crate) const POOL_PREFIX: &str = ".pool-";

/// One pre-started VM and its run directory.
pub(crate) struct Prepared<V> {
    dir: PathBuf,
    vm: V,
}

impl<V: Vm> Prepared<V> {
    /// Moves the pooled run directory to `dir` (an empty directory, replaced atomically) and
    /// hands over the VM. On failure the VM is returned for the caller to stop.
    pub(crate) fn adopt(self, dir: &Path) -> Result<V, (std::io::Error, V)> {
        let Prepared { dir: from, mut vm } = self;
        match std::fs::rename(&from, dir) {
            Ok(()) => {
                vm.relocate(dir.to_owned());
                Ok(vm)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&from);
                Err((e, vm))
            }
        }
    }
}

pub(crate) struct Pool<V> {
    /// Keyed by template name and bake id: a re-bake makes older entries unusable.
    entries: Mutex<HashMap<String, Vec<Prepared<V>>>>,
}

impl<V> Default for Pool<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

fn key(t: &Template) -> String {
    format!("{}#{}", t.name, t.bake_id)
}

impl<V> Pool<V> {
    pub(crate) fn take(&self, t: &Template) -> Option<Prepared<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get_mut(&key(t)).and_then(Vec::pop)
    }

    fn put(&self, t: &Template, p: Prepared<V>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.entry(key(t)).or_default().push(p);
    }

    fn len(&self, t: &Template) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get(&key(t)).map_or(0, Vec::len)
    }

    fn take_all(&self) -> Vec<Prepared<V>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.drain().flat_map(|(_, v)| v).collect()
    }
}

impl<D: VmDriver> Runtime<D> {
    /// Starts VM processes for `template` until `size` wait in its pool. Returns how many are
    /// ready.
    pub async fn fill_pool(&self, template: &Template, size: usize) -> Result<usize, CreateError> {
        while self.pool.len(template) < size {
            let p = self.prepare(template).await?;
            self.pool.put(template, p);
        }
        Ok(self.pool.len(template))
    }

    /// Number of pre-started VMs waiting for `template`.
    pub fn pool_size(&self, template: &Template) -> usize {
        self.pool.len(template)
    }

    /// Stops every pooled VM and removes its directory.
    pub async fn drain_pool(&self) {
        for p in self.pool.take_all() {
            let _ = p.vm.stop().await;
            let _ = std::fs::remove_dir_all(&p.dir);
        }
    }

    async fn prepare(&self, t: &Template) -> Result<Prepared<D::Vm>, CreateError> {
        let name = format!("{POOL_PREFIX}{:08x}", rand::random::<u32>());
        let dir = self.data.sandbox(&name);
        std::fs::create_dir(&dir)?;
        let result = async {
            clone_file(&t.rootfs(), &dir.join(ROOTFS))?;
            let spec = VmSpec {
                id: name.clone(),
                vcpus: t.shape.vcpus,
                memory_mib: t.shape.memory_mib,
                kernel: t.kernel.clone(),
                rootfs: dir.join(ROOTFS),
                kernel_args: vec![],
                memory: Memory::PrivateFile(t.memory()),
                net: None,
                run_dir: dir.clone(),
            };
            Ok::<_, CreateError>(self.driver.prepare_restore(&spec).await?)
        }
        .await;
        match result {
            Ok(vm) => Ok(Prepared { dir, vm }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }
}
