//! Which accelerator to use, decided by booting: `/dev/kvm` existing proves nothing (a PVM host
//! exposes one that cannot run unmodified guests), so KVM is used only if a kernel actually boots
//! with it. Otherwise TCG.
//!
//! A probe that finds KVM unable to boot waits out its whole bound (20 s), so its answer is kept
//! for the rest of the host's boot ([`CACHE_DIR`]): keyed by the boot, the QEMU binary, the
//! kernel and `/dev/kvm` itself (a reloaded module makes a new node), so any change probes
//! again. A server restart, and every test that starts one, then decides at once.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use pandastack_vm::Accel;
use tokio::io::AsyncReadExt;

/// The accelerator chosen and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccelChoice {
    pub accel: Accel,
    pub reason: String,
}

/// Markers the probe kernel prints once it has booted far enough to look for a root filesystem.
const BOOTED_MARKERS: &[&str] = &[
    "VFS: Unable to mount root",
    "VFS: Cannot open root device",
    "Kernel panic",
];
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Where probes' answers are kept until the host reboots (`/run` is emptied at boot; the key
/// names the boot too, for hosts where it is not).
pub const CACHE_DIR: &str = "/run/pandastack/accel";

/// Decides between KVM and TCG. `PANDASTACK_ACCEL=kvm|tcg` forces a choice.
pub async fn detect(qemu: &Path, kernel: &Path) -> AccelChoice {
    match std::env::var("PANDASTACK_ACCEL").ok().as_deref() {
        Some("tcg") => {
            return AccelChoice {
                accel: Accel::Tcg,
                reason: "forced by PANDASTACK_ACCEL".into(),
            }
        }
        Some("kvm") => {
            return AccelChoice {
                accel: Accel::Kvm,
                reason: "forced by PANDASTACK_ACCEL".into(),
            }
        }
        _ => {}
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return AccelChoice {
            accel: Accel::Tcg,
            reason: format!("/dev/kvm unusable ({e}); using TCG"),
        };
    }
    let cached = probe_key(qemu, kernel).map(|k| Path::new(CACHE_DIR).join(k));
    if let Some(choice) = cached.as_deref().and_then(read_cached) {
        return choice;
    }
    let choice = probe(qemu, kernel).await;
    if let Some(path) = &cached {
        if let Err(e) = write_cached(path, &choice) {
            tracing::debug!(path = %path.display(), error = &e as &dyn std::error::Error, "accelerator choice not kept");
        }
    }
    choice
}

/// The probe's answer.
async fn probe(qemu: &Path, kernel: &Path) -> AccelChoice {
    match probe_kvm(qemu, kernel).await {
        Ok(()) => AccelChoice {
            accel: Accel::Kvm,
            reason: "a guest kernel booted under KVM".into(),
        },
        Err(why) => AccelChoice {
            accel: Accel::Tcg,
            reason: format!(
                "/dev/kvm exists but a guest kernel did not boot under it ({why}); using TCG"
            ),
        },
    }
}

/// The name a probe of `kernel` by `qemu` is kept under: a hash of the boot's id, each file's
/// path, size, modification time and inode, and `/dev/kvm`'s inode and change time. `None`
/// when one of them cannot be read (then nothing is kept).
fn probe_key(qemu: &Path, kernel: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let qemu = crate::process::resolve(qemu).ok()?;
    let mut key = boot.trim().to_owned();
    for path in [qemu.as_path(), kernel, Path::new("/dev/kvm")] {
        let m = std::fs::metadata(path).ok()?;
        key.push_str(&format!(
            "|{}:{}:{}:{}:{}:{}",
            path.display(),
            m.len(),
            m.mtime(),
            m.ino(),
            m.ctime(),
            m.ctime_nsec()
        ));
    }
    Some(format!("{:016x}", fnv1a(key.as_bytes())))
}

/// FNV-1a, 64 bits: a stable hash of a cache key (not a secret).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A kept answer: `kvm` or `tcg` on the first line, the reason on the second.
fn read_cached(path: &Path) -> Option<AccelChoice> {
    let text = std::fs::read_to_string(path).ok()?;
    let (accel, reason) = text.split_once('\n')?;
    let accel = match accel {
        "kvm" => Accel::Kvm,
        "tcg" => Accel::Tcg,
        _ => return None,
    };
    Some(AccelChoice {
        accel,
        reason: format!(
            "{} (probed earlier this boot; kept in {})",
            reason.trim_end(),
            path.display()
        ),
    })
}

fn write_cached(path: &Path, choice: &AccelChoice) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let accel = match choice.accel {
        Accel::Kvm => "kvm",
        Accel::Tcg => "tcg",
    };
    // Written whole under another name, then renamed: a reader never sees half of it.
    let tmp: PathBuf = dir.join(format!(".{}.tmp", std::process::id()));
    std::fs::write(&tmp, format!("{accel}\n{}\n", choice.reason))?;
    std::fs::rename(&tmp, path)
}

/// Boots `kernel` with no root disk under KVM and waits for it to reach the root mount.
async fn probe_kvm(qemu: &Path, kernel: &Path) -> Result<(), String> {
    let mut child = tokio::process::Command::new(qemu)
        .args([
            "-M",
            "microvm,acpi=off,x-option-roms=off",
            "-accel",
            "kvm",
            "-cpu",
            "host",
        ])
        .args([
            "-m",
            "128M",
            "-smp",
            "1",
            "-nodefaults",
            "-no-user-config",
            "-nographic",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(kernel)
        .args(["-append", "console=ttyS0 reboot=t panic=-1 8250.nr_uarts=1"])
        .args(["-serial", "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", qemu.display()))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let mut seen = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let n = out.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return false;
            }
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if BOOTED_MARKERS.iter().any(|m| text.contains(m)) {
                return true;
            }
        }
    };
    let booted = tokio::time::timeout(PROBE_TIMEOUT, read)
        .await
        .unwrap_or(false);
    let _ = child.kill().await;
    if booted {
        return Ok(());
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err).await;
    }
    let last = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no boot output");
    Err(last.chars().take(200).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_answer_reads_back_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("0123456789abcdef");
        let choice = AccelChoice {
            accel: Accel::Tcg,
            reason: "/dev/kvm exists but a guest kernel did not boot under it (no boot output); using TCG".into(),
        };
        write_cached(&path, &choice).unwrap();
        let back = read_cached(&path).unwrap();
        assert_eq!(back.accel, Accel::Tcg);
        assert!(back.reason.starts_with(&choice.reason), "{}", back.reason);
        assert!(
            back.reason.contains("probed earlier this boot"),
            "{}",
            back.reason
        );
        std::fs::write(&path, "maybe\nwho knows\n").unwrap();
        assert_eq!(read_cached(&path), None);
    }

    #[test]
    fn the_key_changes_with_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinux");
        std::fs::write(&kernel, b"one").unwrap();
        let sh = Path::new("/bin/sh");
        let Some(first) = probe_key(sh, &kernel) else {
            // No /dev/kvm here: nothing is ever kept.
            assert!(!Path::new("/dev/kvm").exists());
            return;
        };
        assert_eq!(probe_key(sh, &kernel).as_deref(), Some(first.as_str()));
        std::fs::write(&kernel, b"another kernel").unwrap();
        assert_ne!(probe_key(sh, &kernel), Some(first));
    }
}
