//! What `pandastack agent` says about its host: at join, everything (name, capacity, templates,
//! compatibility key); with each heartbeat, its capacity. Measured once at start where it does
//! not change (vCPUs, memory, slots, the compatibility key), read again at each report where it
//! does (free disk, baked templates, running sandboxes — the last counted every second, since a
//! report is taken synchronously).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pandastack_agent::HostAgent;
use pandastack_agent_link::membership::Capacity;
use pandastack_agent_link::HostReport;
use pandastack_host::VmState;
use pandastack_qemu::QemuDriver;
use pandastack_vm::Accel;
use sha2::{Digest, Sha256};

use super::local_host::StartedHost;

/// A host's facts (see the module doc).
pub struct HostFacts {
    name: String,
    vcpus: i64,
    memory_mib: i64,
    data_dir: PathBuf,
    /// Sandboxes the host can run at once.
    slots: i64,
    compat_key: String,
    agent: Arc<HostAgent<QemuDriver>>,
    /// Sandboxes with a VM (running or paused), as last counted.
    running: AtomicI64,
}

impl HostFacts {
    /// Measures `started`: memory is the machine's less `reserve_memory_mib`; slots are the
    /// network pool's size, or `max_sandboxes` without networking; the compatibility key reads
    /// QEMU's version, hashes the guest kernel and reads the CPU model.
    pub async fn measure(
        started: &StartedHost,
        data_dir: &Path,
        reserve_memory_mib: u64,
        max_sandboxes: u32,
    ) -> anyhow::Result<Arc<Self>> {
        let name = nix::unistd::gethostname()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "localhost".into());
        let vcpus = std::thread::available_parallelism().map_or(1, |n| n.get() as i64);
        let total = mem_total_mib().context("the machine's memory (/proc/meminfo MemTotal)")?;
        let slots = match started.agent.runtime().network() {
            Some(pool) => i64::from(pool.config().capacity()),
            None => i64::from(max_sandboxes),
        };
        let kernel = started.kernel.clone();
        let kernel_sha256 = tokio::task::spawn_blocking(move || sha256_file(&kernel))
            .await?
            .with_context(|| format!("hash the guest kernel {}", started.kernel.display()))?;
        let qemu = qemu_version(Path::new("qemu-system-x86_64")).await?;
        let cpu = cpu_model();
        let compat_key = compat_key(&qemu, &kernel_sha256, started.accel, &cpu);
        tracing::info!(
            compat_key,
            qemu,
            kernel_sha256,
            accel = %started.accel,
            cpu,
            "compatibility key"
        );
        Ok(Arc::new(Self {
            name,
            vcpus,
            memory_mib: total.saturating_sub(reserve_memory_mib) as i64,
            data_dir: data_dir.to_owned(),
            slots,
            compat_key,
            agent: Arc::clone(&started.agent),
            running: AtomicI64::new(0),
        }))
    }

    /// What the host says now (its host id and address are the agent link's to fill).
    /// What a memory image restores on: QEMU, the guest kernel, the accelerator, the CPU.
    pub fn compat_key(&self) -> &str {
        &self.compat_key
    }

    pub fn report(&self) -> HostReport {
        let templates = self.agent.runtime().baked_templates().unwrap_or_else(|e| {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "listing baked templates"
            );
            Vec::new()
        });
        HostReport {
            name: self.name.clone(),
            capacity: Capacity {
                vcpus: self.vcpus,
                memory_mib: self.memory_mib,
                disk_bytes: free_bytes(&self.data_dir),
                free_slots: (self.slots - self.running.load(Ordering::Relaxed)).max(0),
                // Filled in by `run_agent`, which counts the creates its service runs.
                creates_in_flight: 0,
                slots: self.slots,
            },
            templates,
            compat_key: self.compat_key.clone(),
            ..HostReport::default()
        }
    }

    /// Counts the sandboxes with a VM every second, for [`HostFacts::report`].
    pub async fn count_running_forever(self: Arc<Self>) {
        loop {
            let n = self
                .agent
                .list()
                .await
                .iter()
                .filter(|s| matches!(s.state, VmState::Running | VmState::Paused))
                .count();
            self.running.store(n as i64, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The compatibility key: what a snapshot taken on one host needs of another to be restored
/// there. A memory image restores only into the same QEMU (its device state format), the same
/// guest kernel (the memory holds it), the same accelerator and the same CPU (the features the
/// guest saw at boot). The key is the first 8 bytes, in hex, of the SHA-256 of the four, one a
/// line: QEMU's `--version` line, the kernel file's SHA-256 (hex), `kvm` or `tcg`, and
/// `/proc/cpuinfo`'s model name. Hosts with equal keys can take each other's snapshots.
pub fn compat_key(
    qemu_version: &str,
    kernel_sha256: &str,
    accel: Accel,
    cpu_model: &str,
) -> String {
    let digest = Sha256::digest(format!(
        "{qemu_version}\n{kernel_sha256}\n{accel}\n{cpu_model}\n"
    ));
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file, in hex.
fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    std::io::copy(&mut file, &mut hash)?;
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// The first line of `qemu --version`.
async fn qemu_version(qemu: &Path) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(qemu)
        .arg("--version")
        .output()
        .await
        .with_context(|| format!("run {} --version", qemu.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next().map(str::trim) {
        Some(line) if out.status.success() && !line.is_empty() => Ok(line.to_owned()),
        _ => anyhow::bail!("{} --version said nothing ({})", qemu.display(), out.status),
    }
}

/// The CPU's model name in `/proc/cpuinfo` (empty if it has none, as on some ARM machines).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default()
}

/// `MemTotal` in `/proc/meminfo`, MiB.
fn mem_total_mib() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    let kib = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .context("no MemTotal line")?;
    Ok(kib / 1024)
}

/// Bytes free to an unprivileged user on `dir`'s file system (0 if it cannot be read).
fn free_bytes(dir: &Path) -> i64 {
    match nix::sys::statvfs::statvfs(dir) {
        Ok(s) => (s.blocks_available() as i64).saturating_mul(s.fragment_size() as i64),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = &e as &dyn std::error::Error, "statvfs");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compatibility_key_changes_with_each_part() {
        let base = compat_key("QEMU 10.0.2", "ab", Accel::Kvm, "EPYC");
        assert_eq!(base.len(), 16);
        assert!(base.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(base, compat_key("QEMU 10.0.2", "ab", Accel::Kvm, "EPYC"));
        for other in [
            compat_key("QEMU 9.2.0", "ab", Accel::Kvm, "EPYC"),
            compat_key("QEMU 10.0.2", "cd", Accel::Kvm, "EPYC"),
            compat_key("QEMU 10.0.2", "ab", Accel::Tcg, "EPYC"),
            compat_key("QEMU 10.0.2", "ab", Accel::Kvm, "Xeon"),
        ] {
            assert_ne!(base, other);
        }
    }
}
