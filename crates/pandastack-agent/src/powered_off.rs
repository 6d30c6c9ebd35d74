//! Guests that power themselves off. `-M microvm,acpi=off` has no power-off device: a guest
//! kernel asked to power off (or halt) prints `reboot: Power off not available: System halted
//! instead` (or `reboot: System halted`) on its console and stops its CPUs for good, while the VM process runs on — a sandbox that looks
//! alive and answers nothing. (A reboot ends the process itself: `-no-reboot`; so does a guest
//! whose PID 1 dies: `panic=-1` makes that a reboot.) Every second the agent looks at the end
//! of each running VM's console and stops the VM process of a guest that said those words; the
//! VM has then exited like any other (`VmState::Exited`). A guest that writes them itself ends
//! only its own sandbox.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pandastack_vm::{Vm, VmDriver};

use crate::entry::SandboxVm;
use crate::HostAgent;

/// What a guest kernel prints last before it stops for good (`kernel/reboot.c`,
/// `arch/x86/kernel/reboot.c`): a power-off without a power-off device, a halt, and a power-off
/// that worked (were one ever configured).
const LAST_WORDS: [&str; 3] = [
    "reboot: Power off not available: System halted instead",
    "reboot: System halted",
    "reboot: Power down",
];

/// Bytes read from the end of a console.
const TAIL: u64 = 256;

/// How often the consoles are looked at.
pub const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Whether the last line of a console's end `tail` is a guest kernel's last words.
pub(crate) fn said_last_words(tail: &[u8]) -> bool {
    let text = String::from_utf8_lossy(tail);
    let last = text.trim_end().rsplit('\n').next().unwrap_or_default();
    LAST_WORDS.iter().any(|w| last.trim_end().ends_with(w))
}

/// The last [`TAIL`] bytes of the file at `path`.
fn tail_of(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(TAIL)))?;
    let mut buf = Vec::with_capacity(TAIL as usize);
    f.take(TAIL).read_to_end(&mut buf)?;
    Ok(buf)
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Stops the VM process of every running guest that powered itself off, every
    /// [`WATCH_EVERY`], for as long as the agent lives. Sandboxes busy with an operation are
    /// looked at on a later tick.
    pub async fn stop_powered_off_forever(self: Arc<Self>) {
        let mut tick = tokio::time::interval(WATCH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let entries: Vec<_> = self.sandboxes.read().await.values().cloned().collect();
            for e in entries {
                let Ok(slot) = e.slot.try_lock() else {
                    continue;
                };
                let SandboxVm::Running(sb) = &*slot else {
                    continue;
                };
                // A few hundred bytes of a file the VM just wrote: page cache, microseconds.
                if !tail_of(&sb.vm.console_log()).is_ok_and(|t| said_last_words(&t)) {
                    continue;
                }
                tracing::warn!(sandbox = %sb.id, "the guest powered itself off: stopping its VM process");
                if let Err(err) = sb.vm.stop().await {
                    tracing::warn!(sandbox = %sb.id, error = &err as &dyn std::error::Error, "stop a powered-off VM");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::said_last_words;

    #[test]
    fn only_the_last_line_counts() {
        assert!(said_last_words(
            b"[    2.390866] reboot: Power off not available: System halted instead\r\n"
        ));
        assert!(said_last_words(b"[   12.345678] reboot: Power down\r\n"));
        assert!(said_last_words(b"...\nreboot: System halted\n\n"));
        assert!(!said_last_words(b"reboot: Power down\nstill here\n"));
        assert!(!said_last_words(b""));
        assert!(!said_last_words(b"reboot: Restarting system\n"));
    }
}
