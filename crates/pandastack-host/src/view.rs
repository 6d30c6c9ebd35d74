//! What a host reports about the things it runs: plain data, no handles.

use std::time::Duration;

/// Where a sandbox's VM is, as its host sees it (the control plane's row adds its own states:
/// starting, stopped, failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmState {
    Running,
    Paused,
    Hibernated,
    /// Its VM process ended without being stopped: the guest powered off, rebooted or lost
    /// its PID 1 (`-no-reboot`, `panic=-1`), or the process was killed from outside. Nothing
    /// runs; exec, files, fork and snapshot are refused; a delete releases everything.
    Exited,
}

impl VmState {
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Running => "running",
            VmState::Paused => "paused",
            VmState::Hibernated => "hibernated",
            VmState::Exited => "exited",
        }
    }
}

/// vCPUs and memory of a VM, and how fast it may use its disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub vcpus: u32,
    pub memory_mib: u32,
    /// A sandbox's: the limits its VM runs with. A template's: those its spec names (`None`:
    /// the host's default).
    pub disk: Option<DiskLimits>,
}

/// How fast one VM may use its disks, the root disk and every volume together. Each total
/// counts reads and writes; 0 leaves it unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiskLimits {
    pub bytes_per_sec: u64,
    pub iops: u64,
}

impl DiskLimits {
    pub const UNLIMITED: Self = Self {
        bytes_per_sec: 0,
        iops: 0,
    };

    /// The byte rate in whole MiB/s (rounded down; 0: unlimited).
    pub fn mbps(&self) -> u64 {
        self.bytes_per_sec >> 20
    }
}

/// Disk limits a create asks for, each `None` to keep the template's (else the host's
/// default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskRequest {
    /// MiB/s, reads and writes together.
    pub mbps: Option<u64>,
    /// I/O operations per second, reads and writes together.
    pub iops: Option<u64>,
}

impl DiskRequest {
    pub fn is_empty(&self) -> bool {
        self.mbps.is_none() && self.iops.is_none()
    }
}

/// One sandbox as its host sees it.
#[derive(Debug, Clone)]
pub struct VmView {
    pub id: String,
    pub state: VmState,
    /// Template it descends from (directly or through snapshots).
    pub template: String,
    pub shape: Shape,
    /// Milliseconds the last create or wake took to exec-ready.
    pub ready_ms: u64,
    /// Host disk the sandbox's files take while it is hibernated (0 otherwise).
    pub image_bytes: u64,
}

/// A snapshot the host keeps.
#[derive(Debug, Clone)]
pub struct SnapshotView {
    pub id: String,
    pub sandbox_id: String,
    pub template: String,
    /// Disk space the snapshot's own files take.
    pub size_bytes: u64,
}

/// Host-side resource use of a running sandbox's VM.
#[derive(Debug, Clone, Copy)]
pub struct VmStats {
    pub pid: u32,
    pub rss_bytes: u64,
    /// Proportional set size: shared pages divided among their users.
    pub pss_bytes: u64,
    /// User + system CPU time of the VM process.
    pub cpu_time: Duration,
}

/// One reading of a sandbox's VM, taken by its host every few seconds while the VM runs (see
/// [`crate::Host::metrics`]). `cpu_time_ms`, `net_rx_bytes` and `net_tx_bytes` count up from
/// the start of the VM process; a new process (a wake, a restart of the VM) starts them again
/// and has another `run`. The rest are the values at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricSample {
    /// Unix time of the reading, in ms.
    pub at_ms: i64,
    /// Which VM process the counters belong to: changes whenever they start again.
    pub run: u32,
    pub vcpus: u32,
    /// User + system CPU time of the VM process.
    pub cpu_time_ms: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    /// What the guest says of its memory (`None`: it did not answer, or its agent predates the
    /// call).
    pub mem_total_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
    /// What the guest says of its root filesystem.
    pub disk_total_bytes: Option<u64>,
    pub disk_used_bytes: Option<u64>,
    /// Bytes the guest received and sent over its network (`None`: it has no NIC).
    pub net_rx_bytes: Option<u64>,
    pub net_tx_bytes: Option<u64>,
}

/// A catalog template the host can create sandboxes of.
#[derive(Debug, Clone)]
pub struct TemplateView {
    pub name: String,
    pub description: String,
    pub shape: Shape,
    pub disk_mb: u32,
    /// Milliseconds the bake took, once baked on this host (until then the first create bakes
    /// it).
    pub bake_ms: Option<u64>,
}
