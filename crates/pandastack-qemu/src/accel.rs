//! Which accelerator to use, decided by booting: `/dev/kvm` existing proves nothing (a PVM host
//! exposes one that cannot run unmodified guests), so KVM is used only if a kernel actually boots
//! with it. Otherwise TCG.

use std::path::Path;
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
