//! The host-side sandbox runtime, generic over a [`pandastack_vm::VmDriver`]: bakes a template
//! (cold boot, wait for the guest agent, snapshot), creates sandboxes by restoring that snapshot
//! copy-on-write (reflinked disk, private mapping of the template memory), snapshots and forks
//! running sandboxes, hibernates and wakes them, keeps a pool of pre-started VM processes, and
//! finds its VMs again after a restart of the process that owns it. Templates may be baked with
//! volume slots, extra disks bound to files at each restore ([`volumes`]).
//!
//! It owns files under the data directory, the VM processes it starts and, when given a network
//! pool, which network slot each VM holds; nothing else: no HTTP, no database. Callers serialise operations on one sandbox (one owner per
//! sandbox); operations on different sandboxes may run concurrently.

mod attach;
pub mod files;
mod hibernate;
mod identity;
pub mod integrity;
mod layout;
mod net;
mod pool;
mod sandbox;
mod snapshot;
mod standby;
mod template;
pub mod volumes;

pub use attach::{kill_processes_working_in, Attached, Found, FoundState, ReconcileReport};
pub use hibernate::{HibernateError, Hibernated, MOVING_FILES};
pub use layout::DataDir;
pub use net::SlotError;
pub use pool::WARM_AFTER as POOL_WARM_AFTER;
pub use sandbox::{CreateError, Sandbox, SandboxInfo};
pub use snapshot::{Fork, Snapshot, SnapshotError, SNAPSHOT_FILES};
pub use template::{BakeError, DeviceProfile, Shape, Template, TemplateCheck, TemplateSeals};
pub use volumes::{create_volume_file, FreezeError, MountError, SlotSource, SnapshotVolume};

pub use pandastack_vm::VolumeDisk;

use std::path::PathBuf;
use std::time::Duration;

use pandastack_vm::VmDriver;

/// How long a cold-booted guest may take to bring its agent up (TCG is slow).
pub const COLD_BOOT_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a restored guest may take to answer.
pub const RESTORE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bakes templates and creates sandboxes with one driver and one guest kernel.
pub struct Runtime<D: VmDriver> {
    driver: D,
    data: DataDir,
    kernel: PathBuf,
    pool: pool::Pool<D::Vm>,
    standbys: standby::Standbys<D::Vm>,
    net: Option<std::sync::Arc<pandastack_net::NetPool>>,
    /// How long a restored guest may take to answer ([`RESTORE_TIMEOUT`] unless set).
    restore_timeout: Duration,
    /// How long a pooled VM waits untaken before its warm-up command; `None`: never.
    pool_warm_up: Option<Duration>,
    /// Disk limits of a sandbox whose shape has none of its own (see [`Runtime::disk_limits`]).
    disk_default: pandastack_vm::DiskLimits,
}

impl<D: VmDriver> Runtime<D> {
    pub fn new(driver: D, data: DataDir, kernel: PathBuf) -> Self {
        Self {
            driver,
            data,
            kernel,
            pool: pool::Pool::default(),
            standbys: standby::Standbys::default(),
            net: None,
            restore_timeout: RESTORE_TIMEOUT,
            pool_warm_up: Some(POOL_WARM_AFTER),
            disk_default: pandastack_vm::DiskLimits::DEFAULT,
        }
    }

    /// The disk limits a sandbox gets when neither its template nor its create names any
    /// ([`pandastack_vm::DiskLimits::DEFAULT`] unless set; the server passes its
    /// `--vm-disk-mbps` and `--vm-disk-iops`, as it does to its driver).
    pub fn with_disk_limits(mut self, limits: pandastack_vm::DiskLimits) -> Self {
        self.disk_default = limits;
        self
    }

    /// The disk limits a VM of `shape` runs with: its own, else the runtime's default.
    pub fn disk_limits(&self, shape: Shape) -> pandastack_vm::DiskLimits {
        shape.disk.unwrap_or(self.disk_default)
    }

    /// Bounds how long a restored guest may take to answer (tests with fake VMs use a short
    /// one).
    pub fn with_restore_timeout(mut self, t: Duration) -> Self {
        self.restore_timeout = t;
        self
    }

    /// How long a pooled VM waits untaken before it runs its warm-up command
    /// ([`POOL_WARM_AFTER`] unless set; `None`: pooled VMs are never warmed). See the pool's
    /// documentation in `pool.rs`.
    pub fn with_pool_warm_up(mut self, after: Option<Duration>) -> Self {
        self.pool_warm_up = after;
        self
    }

    pub fn driver(&self) -> &D {
        &self.driver
    }

    pub fn data(&self) -> &DataDir {
        &self.data
    }

    /// Whether `sb`'s VM process is still alive (a cheap check, no control connection).
    pub fn is_alive(&self, sb: &Sandbox<D::Vm>) -> bool {
        self.driver.is_running(&sb.dir)
    }

    pub fn kernel(&self) -> &std::path::Path {
        &self.kernel
    }
}

/// Sandbox and snapshot ids: 1–32 characters of `[A-Za-z0-9_-]` (they name directories).
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 32
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids() {
        assert!(super::valid_id("sb-1a2b"));
        assert!(super::valid_id("snap_01"));
        assert!(!super::valid_id("../etc"));
        assert!(!super::valid_id(".pool-1"));
        assert!(!super::valid_id(""));
        assert!(!super::valid_id(&"a".repeat(33)));
    }
}
