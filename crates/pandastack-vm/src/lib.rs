//! The driver boundary between the host agent and a hypervisor.
//!
//! Everything above this crate (host agent, API) talks about VMs only in these words: a [`VmSpec`]
//! to boot or restore, a [`Vm`] handle with lifecycle operations, [`SnapshotFiles`] on disk. No
//! QEMU (or Firecracker) vocabulary may appear here; a driver crate implements [`VmDriver`] and
//! only the binary wires a concrete driver in.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How guest instructions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualisation (Linux KVM).
    Kvm,
    /// Software emulation (QEMU TCG): slower, but works where KVM cannot run guests.
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

impl std::fmt::Display for Accel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where guest RAM lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Memory {
    /// RAM is this file, mapped shared: every guest write lands in the file, so a snapshot needs
    /// only the device state. Used for baking and for VMs that will be forked or hibernated.
    SharedFile(PathBuf),
    /// RAM is a private copy-on-write mapping of this (snapshot) file: clean pages are shared
    /// with every other VM restored from it, writes stay in this VM.
    PrivateFile(PathBuf),
    /// RAM is anonymous memory of the VM process: a snapshot writes all of it to the state file,
    /// and a restore reads it back from there. Used for VMs restored from a full snapshot.
    Anonymous,
}

impl Memory {
    /// The backing file, if RAM is file-backed.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Memory::SharedFile(p) | Memory::PrivateFile(p) => Some(p),
            Memory::Anonymous => None,
        }
    }

    /// Whether a snapshot must write guest RAM into the state file (it is not already a file
    /// the snapshot can reuse).
    pub fn snapshot_includes_ram(&self) -> bool {
        !matches!(self, Memory::SharedFile(_))
    }
}

/// Guest network attachment: a TAP device the VM's NIC is plugged into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetAttach {
    /// TAP device name (in `netns` when set, else in the caller's namespace).
    pub tap: String,
    /// Guest NIC MAC, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Network namespace (a `/run/netns/<name>` path) the VM process is started in, so that it
    /// opens the TAP there and has no route to the host's own network itself.
    #[serde(default)]
    pub netns: Option<PathBuf>,
}

/// The disk behind one volume slot: an extra raw disk after the root disk. A VM's slots are
/// fixed when its state is first saved (the device set is part of the saved state); what backs
/// each slot may change from one start to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeDisk {
    /// Raw disk image (an ext4 file system for volumes; an empty file for an unbound slot).
    pub path: PathBuf,
    /// The VM may only read it.
    #[serde(default)]
    pub read_only: bool,
}

/// The serial number every driver gives the disk of volume slot `slot`, so the guest can find
/// it (`/sys/block/vdX/serial`) whatever name its kernel gave the disk.
pub fn volume_serial(slot: usize) -> String {
    format!("pandastack-vol{slot}")
}

/// How fast one VM may use its disks, the root disk and every volume together. Each total
/// counts reads and writes; 0 leaves it unlimited. Not part of the device state a restore
/// loads: a VM may be restored with limits other than those it was saved with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskLimits {
    pub bytes_per_sec: u64,
    pub iops: u64,
}

impl DiskLimits {
    /// What a VM gets unless the operator says otherwise (`pandastack server --vm-disk-mbps`,
    /// `--vm-disk-iops`): enough for installs and builds, short of what one guest's
    /// `O_DIRECT` stream takes from its neighbours' synchronous writes (docs/isolation.md,
    /// "Disk rate per VM").
    pub const DEFAULT: Self = Self {
        bytes_per_sec: 128 << 20,
        iops: 4096,
    };
    pub const UNLIMITED: Self = Self {
        bytes_per_sec: 0,
        iops: 0,
    };

    /// These limits with a rate in MiB/s and an IOPS total where given (as a template spec or
    /// a create names them).
    pub fn with(self, mbps: Option<u64>, iops: Option<u64>) -> Self {
        Self {
            bytes_per_sec: mbps.map_or(self.bytes_per_sec, |m| m.saturating_mul(1 << 20)),
            iops: iops.unwrap_or(self.iops),
        }
    }

    /// The byte rate in whole MiB/s (rounded down; 0: unlimited).
    pub fn mbps(&self) -> u64 {
        self.bytes_per_sec >> 20
    }
}

/// Everything needed to start one VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSpec {
    /// Stable id (also names the runtime directory's contents in logs).
    pub id: String,
    pub vcpus: u32,
    pub memory_mib: u32,
    pub kernel: PathBuf,
    /// Root disk image (raw ext4); the VM writes to it.
    pub rootfs: PathBuf,
    /// Extra kernel command line arguments (cold boot only).
    pub kernel_args: Vec<String>,
    pub memory: Memory,
    pub net: Option<NetAttach>,
    /// Volume slots in slot order (slot 0 first), each with its disk. Every start of a VM
    /// restored from saved state must have as many slots as the VM that saved it.
    #[serde(default)]
    pub volumes: Vec<VolumeDisk>,
    /// Disk limits of this VM (`None`: the driver's default).
    #[serde(default)]
    pub disk_limits: Option<DiskLimits>,
    /// Directory for this VM's sockets, console log and pid file. Must exist; short path
    /// (unix socket paths are limited to 107 bytes).
    pub run_dir: PathBuf,
}

/// The files a snapshot consists of. `memory` is `None` when RAM is a shared file that the caller
/// owns and copies itself (then `memory_source` names it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFiles {
    /// Device state (CPU registers, device models); small.
    pub state: PathBuf,
    /// Guest RAM image.
    pub memory: PathBuf,
}

/// Coarse VM state as the hypervisor sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    Running,
    Paused,
    /// Waiting for state to be loaded (a restore in progress).
    Incoming,
    Shutdown,
    Other,
}

/// Host-side resource use of one VM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStats {
    pub pid: u32,
    pub rss_bytes: u64,
    /// Proportional set size: shared pages divided among their users.
    pub pss_bytes: u64,
    /// User + system CPU time of the VM process.
    pub cpu_time: Duration,
}

/// Errors of driver operations. Messages are short; causes are kept as sources.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("invalid vm spec: {0}")]
    InvalidSpec(String),
    #[error("missing file {0}")]
    MissingFile(PathBuf),
    #[error("start hypervisor process")]
    Spawn(#[source] std::io::Error),
    #[error("hypervisor exited: {0}")]
    Exited(String),
    #[error("hypervisor control channel")]
    Control(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("{op} failed: {message}")]
    Command { op: &'static str, message: String },
    #[error("{op} timed out after {after:?}")]
    Timeout { op: &'static str, after: Duration },
    #[error("vm i/o")]
    Io(#[from] std::io::Error),
}

/// A running (or paused) VM. Dropping the handle does not stop the VM: VMs outlive the process
/// that started them; call [`Vm::stop`] to end one.
pub trait Vm: Send + Sync {
    fn id(&self) -> &str;
    /// Unix socket of the guest agent channel.
    fn agent_socket(&self) -> PathBuf;
    /// Console (serial) log file.
    fn console_log(&self) -> PathBuf;
    fn pid(&self) -> u32;
    /// True once the VM process has exited (crashed, killed, or its guest powered off).
    fn has_exited(&self) -> bool;
    fn pause(&self) -> impl Future<Output = Result<(), VmError>> + Send;
    fn resume(&self) -> impl Future<Output = Result<(), VmError>> + Send;
    fn state(&self) -> impl Future<Output = Result<RunState, VmError>> + Send;
    /// Writes the VM state to `state`: device state, plus guest RAM unless RAM is a
    /// [`Memory::SharedFile`] (then the file itself holds it). The VM must be paused first and
    /// stays paused; [`Vm::resume`] lets it continue.
    fn save_state(&self, state: &Path) -> impl Future<Output = Result<(), VmError>> + Send;
    /// Waits until the hypervisor has seen the host side of the agent channel close (after the
    /// host dropped its session). A snapshot taken before that would capture the channel half
    /// closed, and clones restored from it could not be reached.
    fn agent_disconnected(
        &self,
        timeout: std::time::Duration,
    ) -> impl Future<Output = Result<(), VmError>> + Send;
    /// Makes the guest see the current size of the disk behind volume slot `slot` (`disk`, as in
    /// the spec the VM was started with). A guest keeps the disk sizes it saw when its state was
    /// saved; after a restore with another disk in a slot, the guest sees the new size only once
    /// this was called. The disk's content is not changed.
    fn refresh_volume(
        &self,
        slot: usize,
        disk: &VolumeDisk,
    ) -> impl Future<Output = Result<(), VmError>> + Send;
    /// The caller renamed the VM's run directory to `run_dir` (sockets and logs moved with it).
    fn relocate(&mut self, run_dir: PathBuf);
    fn stats(&self) -> Result<VmStats, VmError>;
    /// User + system CPU time of the VM process only (cheap: no memory accounting walk).
    fn cpu_time(&self) -> Result<std::time::Duration, VmError>;
    /// Stops the VM process and waits for it to go away.
    fn stop(&self) -> impl Future<Output = Result<(), VmError>> + Send;
}

/// A hypervisor.
pub trait VmDriver: Send + Sync {
    type Vm: Vm;
    fn accel(&self) -> Accel;
    /// Cold-boots `spec` (kernel, rootfs, fresh RAM).
    fn boot(&self, spec: &VmSpec) -> impl Future<Output = Result<Self::Vm, VmError>> + Send;
    /// Restores `spec` from a state file written by [`Vm::save_state`]; RAM comes from
    /// `spec.memory` (or the state file for [`Memory::Anonymous`]). Returns once the guest runs.
    fn restore(
        &self,
        spec: &VmSpec,
        state: &Path,
    ) -> impl Future<Output = Result<Self::Vm, VmError>> + Send;
    /// First half of [`VmDriver::restore`]: starts the VM process for `spec`, waiting for state.
    /// Such processes can be started ahead of demand (a pool) to take process start off the
    /// restore path.
    fn prepare_restore(
        &self,
        spec: &VmSpec,
    ) -> impl Future<Output = Result<Self::Vm, VmError>> + Send;
    /// Second half of [`VmDriver::restore`]: loads `state` into a prepared VM and runs it. On
    /// failure the VM process is stopped.
    fn finish_restore(
        &self,
        vm: &Self::Vm,
        state: &Path,
    ) -> impl Future<Output = Result<(), VmError>> + Send;
    /// Whether a VM process started for `run_dir` is alive (cheap; no control connection).
    fn is_running(&self, run_dir: &Path) -> bool;
    /// Finds a VM started earlier (possibly by another process) from its run directory.
    fn attach(&self, run_dir: &Path) -> impl Future<Output = Result<Self::Vm, VmError>> + Send;
    /// Kills the VM process of `run_dir`, if there is one, without a control connection (for a
    /// VM that cannot be attached, e.g. one cut off while it was starting) and waits until it
    /// has exited.
    fn kill_in(&self, run_dir: &Path) -> impl Future<Output = Result<(), VmError>> + Send;
    /// Files the VM process itself appends to in its run directory (its own diagnostics, not
    /// the guest's console), each with the size the host keeps it near: the host trims them as
    /// it trims console logs, since a long-lived VM's process can write to them without end.
    fn bounded_logs(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
