//! One cgroup per VM process with memory, CPU and pids limits.
//!
//! cgroup v2 is used when its unified hierarchy offers the `memory`, `cpu` and `pids`
//! controllers; otherwise the v1 hierarchies of those controllers (hosts still booted in hybrid
//! mode, like this project's development machines). Every VM gets `pandastack/vm-<random>` in
//! each hierarchy; the name is written to the VM's run directory (`cgroup`) so that a VM found
//! again after a restart is cleaned up the same way.
//!
//! A booting QEMU joins its cgroups between fork and exec (the child writes `0` — "the calling
//! process" — to each `cgroup.procs`), so its guest never runs unlimited. A QEMU that restores
//! a VM is moved by the parent instead ([`join`]), while it starts: a move waits out an RCU
//! grace period on the host (the cgroup core's threadgroup lock; 11–15 ms measured on this
//! project's development machines, v1 and v2 alike), which would otherwise be added to every
//! restore, wake and fork. Its guest does not run before its state is loaded, and the driver
//! loads it only once the move is done; what QEMU allocates in its first milliseconds stays
//! charged to the parent's memory cgroup.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File in the run directory naming the VM's cgroup.
pub(crate) const CGROUP_FILE: &str = "cgroup";
/// Parent cgroup of every VM, in every hierarchy used.
const PARENT: &str = "pandastack";
/// Memory a VM process may use beyond its guest RAM and its translation cache: QEMU itself,
/// page tables, device buffers.
const OVERHEAD_MIB: u64 = 352;
/// Tasks per VM process (vCPU threads, I/O and RCU threads, migration).
const PIDS_MAX: u32 = 256;
const CPU_PERIOD_US: u64 = 100_000;

/// Where the controllers live on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayout {
    /// One unified hierarchy with memory, cpu and pids.
    V2 { root: PathBuf },
    /// Separate v1 hierarchies.
    V1 {
        memory: PathBuf,
        cpu: PathBuf,
        pids: PathBuf,
    },
}

/// Limits of one VM process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory_bytes: u64,
    /// CPU time per period, in µs (vCPUs × period).
    pub cpu_quota_us: u64,
    pub pids_max: u32,
}

impl Limits {
    /// Limits for a VM of `vcpus` and `memory_mib` guest RAM whose QEMU translates guest code
    /// into a cache of up to `translation_cache_mib` (0 under KVM).
    pub fn for_vm(vcpus: u32, memory_mib: u32, translation_cache_mib: u32) -> Self {
        let memory_mib = u64::from(memory_mib) + u64::from(translation_cache_mib) + OVERHEAD_MIB;
        Self {
            memory_bytes: memory_mib << 20,
            cpu_quota_us: u64::from(vcpus.max(1)) * CPU_PERIOD_US,
            pids_max: PIDS_MAX,
        }
    }
}

/// Errors creating or filling a cgroup.
#[derive(Debug, thiserror::Error)]
#[error("cgroup {path}")]
pub struct CgroupError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

fn err(path: &Path, source: std::io::Error) -> CgroupError {
    CgroupError {
        path: path.to_owned(),
        source,
    }
}

/// The VM cgroups of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroups {
    pub layout: CgroupLayout,
}

impl Cgroups {
    /// Finds usable controllers under `/sys/fs/cgroup`; `None` when memory, cpu and pids are
    /// not all available in one of the two layouts.
    pub fn detect() -> Option<Self> {
        Self::detect_in(Path::new("/sys/fs/cgroup"))
    }

    fn detect_in(base: &Path) -> Option<Self> {
        let has_all = |root: &Path| {
            std::fs::read_to_string(root.join("cgroup.controllers")).is_ok_and(|c| {
                let c: Vec<&str> = c.split_whitespace().collect();
                ["memory", "cpu", "pids"].iter().all(|k| c.contains(k))
            })
        };
        for root in [base.to_owned(), base.join("unified")] {
            if has_all(&root) {
                return Some(Self {
                    layout: CgroupLayout::V2 { root },
                });
            }
        }
        let v1 = |name: &str| {
            let p = base.join(name);
            p.join("cgroup.procs").is_file().then_some(p)
        };
        Some(Self {
            layout: CgroupLayout::V1 {
                memory: v1("memory")?,
                cpu: v1("cpu").or_else(|| v1("cpu,cpuacct"))?,
                pids: v1("pids")?,
            },
        })
    }

    /// `v2` or `v1`, for logs and `doctor`.
    pub fn version(&self) -> &'static str {
        match self.layout {
            CgroupLayout::V2 { .. } => "v2",
            CgroupLayout::V1 { .. } => "v1",
        }
    }

    fn parents(&self) -> Vec<PathBuf> {
        match &self.layout {
            CgroupLayout::V2 { root } => vec![root.join(PARENT)],
            CgroupLayout::V1 { memory, cpu, pids } => {
                vec![memory.join(PARENT), cpu.join(PARENT), pids.join(PARENT)]
            }
        }
    }

    /// Creates cgroup `name` with `limits` and returns its `cgroup.procs` files, open for
    /// writing, for the child to join before exec or the parent to move it into ([`join`]).
    pub fn create(&self, name: &str, limits: Limits) -> Result<Vec<File>, CgroupError> {
        let made = self.create_inner(name, limits);
        if made.is_err() {
            self.remove(name);
        }
        made
    }

    fn create_inner(&self, name: &str, limits: Limits) -> Result<Vec<File>, CgroupError> {
        let write = |dir: &Path, file: &str, value: String| {
            let p = dir.join(file);
            std::fs::write(&p, value).map_err(|e| err(&p, e))
        };
        let mkdir = |p: &Path| match std::fs::create_dir(p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(err(p, e)),
        };
        let mut procs = Vec::new();
        match &self.layout {
            CgroupLayout::V2 { root } => {
                let parent = root.join(PARENT);
                mkdir(&parent)?;
                // Controllers must be enabled on the way down to the VM's cgroup.
                for dir in [root.as_path(), parent.as_path()] {
                    write(dir, "cgroup.subtree_control", "+memory +cpu +pids".into())?;
                }
                let dir = parent.join(name);
                mkdir(&dir)?;
                write(&dir, "memory.max", limits.memory_bytes.to_string())?;
                write(
                    &dir,
                    "cpu.max",
                    format!("{} {CPU_PERIOD_US}", limits.cpu_quota_us),
                )?;
                write(&dir, "pids.max", limits.pids_max.to_string())?;
                procs.push(dir.join("cgroup.procs"));
            }
            CgroupLayout::V1 { memory, cpu, pids } => {
                for root in [memory, cpu, pids] {
                    mkdir(&root.join(PARENT))?;
                    mkdir(&root.join(PARENT).join(name))?;
                }
                let m = memory.join(PARENT).join(name);
                write(&m, "memory.limit_in_bytes", limits.memory_bytes.to_string())?;
                let c = cpu.join(PARENT).join(name);
                write(&c, "cpu.cfs_period_us", CPU_PERIOD_US.to_string())?;
                write(&c, "cpu.cfs_quota_us", limits.cpu_quota_us.to_string())?;
                let p = pids.join(PARENT).join(name);
                write(&p, "pids.max", limits.pids_max.to_string())?;
                procs.extend([m, c, p].map(|d| d.join("cgroup.procs")));
            }
        }
        procs
            .iter()
            .map(|p| {
                OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map_err(|e| err(p, e))
            })
            .collect()
    }

    /// Removes cgroup `name` (once its process has exited; a cgroup with tasks stays).
    pub fn remove(&self, name: &str) {
        for parent in self.parents() {
            let _ = std::fs::remove_dir(parent.join(name));
        }
    }

    /// Removes every empty VM cgroup (left by VMs that died while nobody watched) that is older
    /// than a minute: a younger one may belong to a VM another process is just starting.
    pub fn sweep(&self) -> usize {
        let old = |e: &std::fs::DirEntry| {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|a| a.as_secs() > 60))
        };
        let mut removed = 0;
        for parent in self.parents() {
            let Ok(entries) = std::fs::read_dir(&parent) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with("vm-")
                    && old(&e)
                    && std::fs::remove_dir(e.path()).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    /// The memory cgroup directory of VM cgroup `name` (for usage figures and tests).
    pub fn memory_dir(&self, name: &str) -> PathBuf {
        match &self.layout {
            CgroupLayout::V2 { root } => root.join(PARENT).join(name),
            CgroupLayout::V1 { memory, .. } => memory.join(PARENT).join(name),
        }
    }
}

/// Moves process `pid` (all its threads) into the cgroups whose `cgroup.procs` files are given.
/// Blocks for as long as the host's cgroup core takes (see the module's docs).
pub(crate) fn join(procs: &[File], pid: u32) -> std::io::Result<()> {
    let pid = pid.to_string();
    for mut f in procs {
        f.write_all(pid.as_bytes())?;
    }
    Ok(())
}

/// A fresh VM cgroup name.
pub(crate) fn new_name() -> String {
    format!("vm-{:016x}", rand_u64())
}

fn rand_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    // /dev/urandom does not fail in practice; a time-based fallback keeps names unique enough.
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id());
    }
    u64::from_ne_bytes(b)
}

/// Records the VM's cgroup name in its run directory.
pub(crate) fn record(run_dir: &Path, name: &str) -> std::io::Result<()> {
    let mut f = File::create(run_dir.join(CGROUP_FILE))?;
    f.write_all(name.as_bytes())
}

/// The cgroup name recorded in `run_dir`, if any.
pub(crate) fn recorded(run_dir: &Path) -> Option<String> {
    std::fs::read_to_string(run_dir.join(CGROUP_FILE))
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| s.starts_with("vm-") && s.len() <= 40 && !s.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_scale_with_shape() {
        let l = Limits::for_vm(2, 512, 256);
        assert_eq!(l.memory_bytes, (512 + 256 + OVERHEAD_MIB) << 20);
        assert_eq!(l.cpu_quota_us, 200_000);
    }

    #[test]
    fn detects_v2_then_v1() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Cgroups::detect_in(d.path()), None);
        for c in ["memory", "cpu", "pids"] {
            std::fs::create_dir(d.path().join(c)).unwrap();
            std::fs::write(d.path().join(c).join("cgroup.procs"), "").unwrap();
        }
        assert_eq!(Cgroups::detect_in(d.path()).unwrap().version(), "v1");
        std::fs::create_dir(d.path().join("unified")).unwrap();
        std::fs::write(
            d.path().join("unified/cgroup.controllers"),
            "cpuset cpu io memory pids\n",
        )
        .unwrap();
        assert_eq!(Cgroups::detect_in(d.path()).unwrap().version(), "v2");
    }

    #[test]
    fn recorded_names_are_checked() {
        let d = tempfile::tempdir().unwrap();
        record(d.path(), "vm-0123").unwrap();
        assert_eq!(recorded(d.path()).as_deref(), Some("vm-0123"));
        record(d.path(), "../../etc").unwrap();
        assert_eq!(recorded(d.path()), None);
    }
}
