//! Bounded console logs. A VM process appends everything its guest writes to the serial console
//! to `console.log` in its run directory; a guest that floods its console (20 MB a minute from
//! one `minimal` guest under TCG) would fill the host's disk. The trimmer keeps every run
//! directory's log near a configured size, cutting the oldest part in place while the VM keeps
//! writing (see [`pandastack_host::trim_log`]), so `GET …/logs` returns the newest part.

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
/// to about `max` bytes. Returns the bytes cut.
pub fn trim_consoles(dir: &Path, max: u64) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut cut = 0;
    for e in entries.flatten() {
        let log = e.path().join(CONSOLE_LOG);
        match pandastack_host::trim_log(&log, max) {
            Ok(n) => cut += n,
            Err(err) => {
                tracing::warn!(log = %log.display(), error = &err as &dyn std::error::Error, "trim console log")
            }
        }
    }
    cut
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Keeps the console logs of this host's VMs near `max` bytes, every [`TRIM_EVERY`], for as
    /// long as the agent lives. `max` 0 leaves them unbounded.
    pub async fn trim_consoles_forever(self: Arc<Self>, max: u64) {
        if max == 0 {
            return;
        }
        let dir = self.rt.data().root().join("sandboxes");
        let mut tick = tokio::time::interval(TRIM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let dir = dir.clone();
            let cut = tokio::task::spawn_blocking(move || trim_consoles(&dir, max))
                .await
                .unwrap_or(0);
            if cut > 0 {
                tracing::debug!(cut, "console logs trimmed");
            }
        }
    }
}
