//! Bounded console logs. A VM process appends everything its guest writes to the serial console
//! to `console.log` in its run directory; a guest that floods its console (20 MB a minute from
//! one `minimal` guest under TCG) would fill the host's disk. The trimmer keeps every run
//! directory's log near a configured size, cutting the oldest part in place while the VM keeps
//! writing (see [`pandastack_host::trim_log`]), so `GET …/logs` returns the newest part. The
//! VM process's own logs ([`VmDriver::bounded_logs`], QEMU's stderr) are trimmed the same way
//! to the driver's bound, whatever the console bound is.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pandastack_vm::VmDriver;

use crate::HostAgent;

/// The file name of a VM's console log in its run directory.
pub(crate) const CONSOLE_LOG: &str = "console.log";

/// How often the trimmer looks at the logs. A guest writes its serial console at a few hundred
/// KiB/s at most under TCG, so a log overshoots its bound by about that much before a trim.
pub const TRIM_EVERY: Duration = Duration::from_secs(1);

/// Trims every `console.log` directly under `dir`'s subdirectories (sandboxes and pooled VMs)
/// to about `max` bytes (0: left alone), and each of the VM process's own `logs` (file name,
/// bound) to its bound. Returns the bytes cut.
pub fn trim_consoles(dir: &Path, max: u64, logs: &[(&str, u64)]) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let console = (max > 0).then_some((CONSOLE_LOG, max));
    let mut cut = 0;
    for e in entries.flatten() {
        for (name, bound) in console.iter().chain(logs) {
            let log = e.path().join(name);
            match pandastack_host::trim_log(&log, *bound) {
                Ok(n) => cut += n,
                Err(err) => {
                    tracing::warn!(log = %log.display(), error = &err as &dyn std::error::Error, "trim a VM's log")
                }
            }
        }
    }
    cut
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Keeps the console logs of this host's VMs near `max` bytes (0: unbounded), and the VM
    /// processes' own logs near the driver's bounds, every [`TRIM_EVERY`], for as long as the
    /// agent lives.
    pub async fn trim_consoles_forever(self: Arc<Self>, max: u64) {
        let logs = self.rt.driver().bounded_logs();
        if max == 0 && logs.is_empty() {
            return;
        }
        let dir = self.rt.data().root().join("sandboxes");
        let mut tick = tokio::time::interval(TRIM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let dir = dir.clone();
            let logs = logs.clone();
            let cut = tokio::task::spawn_blocking(move || trim_consoles(&dir, max, &logs))
                .await
                .unwrap_or(0);
            if cut > 0 {
                tracing::debug!(cut, "console logs trimmed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The VM process's own log is kept near its bound even when console logs are unbounded;
    /// the console log is then left alone.
    #[test]
    fn driver_logs_are_bounded_whatever_the_console_bound() {
        let d = tempfile::tempdir().unwrap();
        let vm = d.path().join("sb-1");
        std::fs::create_dir_all(&vm).unwrap();
        std::fs::write(vm.join(CONSOLE_LOG), vec![b'c'; 1 << 20]).unwrap();
        std::fs::write(vm.join("qemu.log"), vec![b'q'; 1 << 20]).unwrap();
        let cut = trim_consoles(d.path(), 0, &[("qemu.log", 64 << 10)]);
        assert!(cut > 0);
        let len = |n: &str| std::fs::metadata(vm.join(n)).unwrap().len();
        assert!(len("qemu.log") <= 64 << 10, "{}", len("qemu.log"));
        assert_eq!(len(CONSOLE_LOG), 1 << 20);
        trim_consoles(d.path(), 128 << 10, &[]);
        assert!(len(CONSOLE_LOG) <= 128 << 10, "{}", len(CONSOLE_LOG));
    }
}
