//! Guest activity for the idle timeout: a sandbox whose VM keeps a CPU busy (a build, a training
//! run, a long test suite) is not idle just because nobody called the API. The reaper samples each
//! running VM's CPU time and, when the VM used more than [`BUSY_SHARE`] of one CPU since the last
//! sample, records activity as an API call would.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use pandastack_host::{Host, VmState};
use pandastack_store::{now_ms, Store};

/// Share of one CPU above which a VM counts as active. An idle guest under TCG uses a few
/// percent (timer ticks, the agent's idle wake-ups); a guest doing work uses most of a core.
pub const BUSY_SHARE: f64 = 0.25;

/// The last CPU-time sample of each running VM. Sampled on every reaper tick (2 s): a new
/// sandbox has its baseline after one tick, so a guest is seen as busy from about two ticks after
/// its create, and an idle timeout shorter than that is decided by API activity alone.
#[derive(Default)]
pub struct Activity {
    last: HashMap<String, (Duration, Instant)>,
}

/// Whether `cpu` CPU time used over `wall` is more than [`BUSY_SHARE`] of one CPU.
pub fn busy(cpu: Duration, wall: Duration) -> bool {
    !wall.is_zero() && cpu.as_secs_f64() > BUSY_SHARE * wall.as_secs_f64()
}

impl Activity {
    /// Samples every running VM and touches the sandboxes whose guest was busy since the
    /// previous sample.
    pub async fn sample(&mut self, store: &Store, host: &dyn Host) {
        let now = Instant::now();
        let mut seen = HashMap::new();
        for v in host.list().await {
            if v.state != VmState::Running {
                continue;
            }
            let Ok(Some(stats)) = host.stats(&v.id).await else {
                continue;
            };
            if let Some((cpu, at)) = self.last.get(&v.id) {
                if busy(stats.cpu_time.saturating_sub(*cpu), now.duration_since(*at)) {
                    if let Err(e) = store.sandboxes().touch(&v.id, now_ms()).await {
                        tracing::warn!(sandbox = %v.id, error = &e as &dyn std::error::Error, "record guest activity");
                    }
                }
            }
            seen.insert(v.id, (stats.cpu_time, now));
        }
        self.last = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_means_a_real_share_of_a_cpu() {
        let s = Duration::from_secs;
        assert!(!busy(Duration::from_millis(300), s(10)));
        assert!(busy(s(9), s(10)));
        assert!(!busy(s(1), Duration::ZERO));
    }
}
