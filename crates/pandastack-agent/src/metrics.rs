//! The host's readings of its sandboxes' VMs: one every few seconds per running VM, kept per
//! sandbox for [`RECENT`] at full resolution and one a minute for [`OLDER`] before that.
//!
//! Each reading is the VM process's CPU time and memory from `/proc`, the bytes through its
//! network slot's host veth, and what the guest says of its memory and root filesystem (the
//! guest agent's `Stats`, bounded by [`GUEST_TIMEOUT`]; a guest that does not answer only
//! leaves those fields out). A sandbox busy in an operation (a snapshot, a hibernation) is
//! skipped for that round rather than waited for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use pandastack_host::MetricSample;
use pandastack_vm::{Vm, VmDriver};

use crate::entry::{Entry, SandboxVm};
use crate::HostAgent;

/// How long readings are kept at full resolution.
pub const RECENT: Duration = Duration::from_secs(3600);
/// How long one reading a minute is kept after that.
pub const OLDER: Duration = Duration::from_secs(5 * 3600);
const OLDER_STEP_MS: i64 = 60_000;
/// How long a round waits for one guest's figures.
const GUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Guests asked at once in a round.
const AT_ONCE: usize = 8;

/// The readings of one sandbox.
#[derive(Debug, Default)]
pub(crate) struct History {
    recent: VecDeque<MetricSample>,
    older: VecDeque<MetricSample>,
    /// The VM process the counters belong to, the run number given to it, and the veth's
    /// counters when it was first seen (a slot's veth outlives the sandboxes that use it).
    current: Option<Run>,
    runs: u32,
}

#[derive(Debug, Clone, Copy)]
struct Run {
    pid: u32,
    veth: Option<(u64, u64)>,
    run: u32,
}

impl History {
    /// Adds a reading, moving what falls out of [`RECENT`] to the minute readings and dropping
    /// what falls out of those.
    fn push(&mut self, s: MetricSample) {
        let recent_from = s.at_ms - RECENT.as_millis() as i64;
        while self.recent.front().is_some_and(|f| f.at_ms < recent_from) {
            let Some(old) = self.recent.pop_front() else {
                break;
            };
            if self
                .older
                .back()
                .is_none_or(|b| old.at_ms - b.at_ms >= OLDER_STEP_MS)
            {
                self.older.push_back(old);
            }
        }
        let older_from = recent_from - OLDER.as_millis() as i64;
        while self.older.front().is_some_and(|f| f.at_ms < older_from) {
            self.older.pop_front();
        }
        self.recent.push_back(s);
    }

    /// The readings at or after `since_ms`, oldest first.
    pub(crate) fn since(&self, since_ms: i64) -> Vec<MetricSample> {
        self.older
            .iter()
            .chain(self.recent.iter())
            .filter(|s| s.at_ms >= since_ms)
            .copied()
            .collect()
    }

    /// The run number of process `pid` and the veth counters the network counters start
    /// from, a new run when `pid` is not the last one seen.
    fn run_of(&mut self, pid: u32, veth: Option<(u64, u64)>) -> Run {
        match self.current {
            Some(r) if r.pid == pid => r,
            _ => {
                self.runs = self.runs.wrapping_add(1);
                let r = Run {
                    pid,
                    veth,
                    run: self.runs,
                };
                self.current = Some(r);
                r
            }
        }
    }
}

/// What a round reads of one sandbox while holding its lock (briefly).
struct Taken {
    pid: u32,
    vcpus: u32,
    cpu_time_ms: u64,
    rss_bytes: u64,
    pss_bytes: u64,
    veth: Option<String>,
    /// The guest's channel, when the VM runs (a paused one would not answer).
    guest: Option<tonic::transport::Channel>,
}

/// `(rx, tx)` byte counters of host interface `name`, from sysfs.
fn veth_counters(name: &str) -> Option<(u64, u64)> {
    let read = |what: &str| -> Option<u64> {
        std::fs::read_to_string(format!("/sys/class/net/{name}/statistics/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some((read("rx_bytes")?, read("tx_bytes")?))
}

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Takes a reading of every running or paused sandbox every `interval`, forever.
    pub async fn sample_forever(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sample_once().await;
        }
    }

    /// One round of readings (see the module's notes).
    pub async fn sample_once(&self) {
        let t = std::time::Instant::now();
        let entries: Vec<Arc<Entry<D::Vm>>> =
            self.sandboxes.read().await.values().cloned().collect();
        let seen = std::sync::atomic::AtomicI64::new(0);
        let seen = &seen;
        futures::stream::iter(entries)
            .for_each_concurrent(AT_ONCE, |e| async move {
                if let Some(taken) = self.take(&e) {
                    seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let pid = taken.pid;
                    let (veth, sample) = read(taken).await;
                    let mut h = e.history.lock().unwrap_or_else(|p| p.into_inner());
                    let run = h.run_of(pid, veth);
                    h.push(with_run(sample, run, veth));
                }
            })
            .await;
        let m = pandastack_telemetry::metrics();
        m.sample_round_seconds.observe(t.elapsed().as_secs_f64());
        m.sampled_vms
            .set(seen.load(std::sync::atomic::Ordering::Relaxed));
        m.pool_vms.set(self.runtime().pooled() as i64);
    }

    /// Reads the VM process's figures of `e` with its lock held, if it is free and the VM
    /// runs or is paused.
    fn take(&self, e: &Entry<D::Vm>) -> Option<Taken> {
        let slot = e.slot.try_lock().ok()?;
        let (sb, running) = match &*slot {
            SandboxVm::Running(sb) => (sb, true),
            SandboxVm::Paused(sb) => (sb, false),
            _ => return None,
        };
        let stats = sb.vm.stats().ok()?;
        let veth = sb.info.net_slot.and_then(|i| {
            self.runtime()
                .network()
                .and_then(|pool| pool.slot(i))
                .map(|s| s.host_veth)
        });
        Some(Taken {
            pid: stats.pid,
            vcpus: sb.info.shape.vcpus,
            cpu_time_ms: stats.cpu_time.as_millis() as u64,
            rss_bytes: stats.rss_bytes,
            pss_bytes: stats.pss_bytes,
            veth,
            guest: running.then(|| sb.agent.clone()),
        })
    }

    /// The readings of sandbox `id` at or after `since_ms`.
    pub async fn metrics(
        &self,
        id: &str,
        since_ms: i64,
    ) -> Result<Vec<MetricSample>, crate::AgentError> {
        let e = self.entry(id).await?;
        let h = e.history.lock().unwrap_or_else(|p| p.into_inner());
        Ok(h.since(since_ms))
    }
}

/// The reading of what was taken, with the guest's figures, and the veth's raw counters (see
/// [`with_run`]).
async fn read(t: Taken) -> (Option<(u64, u64)>, MetricSample) {
    let veth = t.veth.as_deref().and_then(veth_counters);
    let guest = match t.guest {
        Some(ch) => tokio::time::timeout(GUEST_TIMEOUT, AgentClient::new(ch).stats(v1::Empty {}))
            .await
            .ok()
            .and_then(Result::ok)
            .map(tonic::Response::into_inner),
        None => None,
    };
    let g = |f: fn(&v1::StatsResponse) -> u64| guest.as_ref().map(f);
    let sample = MetricSample {
        at_ms: crate::shared_templates::now_ms(),
        run: 0,
        vcpus: t.vcpus,
        cpu_time_ms: t.cpu_time_ms,
        rss_bytes: t.rss_bytes,
        pss_bytes: t.pss_bytes,
        mem_total_bytes: g(|s| s.mem_total_bytes),
        mem_available_bytes: g(|s| s.mem_available_bytes),
        disk_total_bytes: g(|s| s.disk_total_bytes),
        disk_used_bytes: g(|s| s.disk_used_bytes),
        net_rx_bytes: None,
        net_tx_bytes: None,
    };
    (veth, sample)
}

/// `sample` with its run number and network counters relative to the run's start. The host
/// end of the veth receives what the guest sends: its `tx` is the guest's `rx`.
fn with_run(mut sample: MetricSample, run: Run, veth_now: Option<(u64, u64)>) -> MetricSample {
    sample.run = run.run;
    if let (Some((rx0, tx0)), Some((rx, tx))) = (run.veth, veth_now) {
        sample.net_rx_bytes = Some(tx.saturating_sub(tx0));
        sample.net_tx_bytes = Some(rx.saturating_sub(rx0));
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> MetricSample {
        MetricSample {
            at_ms: ms,
            ..Default::default()
        }
    }

    #[test]
    fn an_hour_is_kept_whole_and_a_reading_a_minute_before_it() {
        let mut h = History::default();
        let step = 5_000;
        let hours = 8;
        for i in 0..(hours * 3600 * 1000 / step) {
            h.push(at(i * step));
        }
        let end = (hours * 3600 * 1000 / step - 1) * step;
        let all = h.since(0);
        // Five hours of minute readings and one of five-second ones, nothing older.
        assert_eq!(h.recent.len() as i64, 3600 * 1000 / step + 1);
        assert!((299..=301).contains(&h.older.len()), "{}", h.older.len());
        assert!(all.first().unwrap().at_ms >= end - 6 * 3600 * 1000 - 60_000);
        assert!(all.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
        assert!(h
            .older
            .iter()
            .zip(h.older.iter().skip(1))
            .all(|(a, b)| b.at_ms - a.at_ms == 60_000));
        assert_eq!(h.since(end - 10_000).len(), 3);
    }

    #[test]
    fn a_new_process_starts_a_new_run_and_its_own_network_counters() {
        let mut h = History::default();
        let r1 = h.run_of(100, Some((1_000, 5_000)));
        assert_eq!(h.run_of(100, Some((9_999, 9_999))).run, r1.run);
        let s = with_run(at(0), r1, Some((1_500, 5_100)));
        assert_eq!((s.net_rx_bytes, s.net_tx_bytes), (Some(100), Some(500)));
        let r2 = h.run_of(200, Some((1_500, 5_100)));
        assert_ne!(r2.run, r1.run);
        let s = with_run(at(0), r2, Some((1_500, 5_100)));
        assert_eq!((s.net_rx_bytes, s.net_tx_bytes), (Some(0), Some(0)));
        // Without a NIC there are no network figures.
        let s = with_run(at(0), h.run_of(300, None), None);
        assert_eq!(s.net_rx_bytes, None);
    }
}
