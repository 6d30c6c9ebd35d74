//! The usage meter: every few seconds it reads what the hosts sampled of each VM since the last
//! reading already counted (the VM's cursor, in the store) and adds it to the hour rows of the
//! VM's resource; and it adds what every workspace keeps (volumes, snapshots, hibernation
//! images, backups, template builds) times the time since the last pass.
//!
//! ```text
//!   tick ──► sandboxes with a VM ──► host.metrics(id, cursor) ──► integrate ──┐
//!                                                                            ▼
//!             store: add the hours' figures + move the cursor (one transaction, compare-and-set)
//! ```
//!
//! Between two readings `a → b` of one VM process the VM ran `b.at − a.at`: that many ms, times
//! its vCPUs and its configured memory, split at hour edges; its network counters grew by
//! `b − a`. A reading of a new process (`run` changed: a wake, a restart) starts its counters
//! from zero and the time between the two processes is not counted. Because the figures and the
//! cursor commit together and the cursor moves only from where the pass read it, a restart of
//! the server (or of a VM) neither counts a reading twice nor loses one the host still has.
//! A delete counts its VM's last readings first ([`count_vm`]); function invocations are added
//! when they finish ([`record_invocation`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pandastack_api_types::SandboxState;
use pandastack_host::{Host, HostError, MetricSample};
use pandastack_store::{
    now_ms, Advanced, Metered, SandboxRow, Store, StoreError, UsageKey, VmCursor,
};

/// One hour in ms: the rows' resolution.
pub const HOUR_MS: i64 = 3_600_000;

/// Readings of one run further apart than this are not taken as one stretch of running: the
/// hosts read every 5 s (one a minute after an hour), so such a gap is a host that started its
/// readings again (its run numbers too) or that moved the VM.
pub const MAX_GAP_MS: i64 = 600_000;

/// How often the meter runs when the server is not told otherwise.
pub const DEFAULT_METER_INTERVAL: Duration = Duration::from_secs(15);

/// The meter's settings (the server's `--meter-interval-ms`).
#[derive(Debug, Clone, Copy)]
pub struct MeterSettings {
    /// Time between passes.
    pub interval: Duration,
}

impl Default for MeterSettings {
    fn default() -> Self {
        Self {
            interval: DEFAULT_METER_INTERVAL,
        }
    }
}

/// Why one VM's or the storage's part of a pass failed (logged; the next pass tries again
/// from the same cursor).
#[derive(Debug, thiserror::Error)]
pub enum MeterError {
    #[error("state store")]
    Store(#[from] StoreError),
    #[error("host readings")]
    Host(#[from] HostError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MeterReport {
    /// VMs whose new readings were counted.
    pub vms: usize,
    /// Readings counted.
    pub readings: usize,
    /// VMs another pass had counted first (nothing added).
    pub stale: usize,
    /// VMs (or the storage) whose part failed.
    pub failed: usize,
}

/// The usage meter of one control plane.
#[derive(Clone)]
pub struct Meter {
    store: Store,
    host: Arc<dyn Host>,
    /// The host whose sandboxes are metered; `None`: every host (a cluster's control plane).
    host_id: Option<String>,
    settings: MeterSettings,
    /// Hibernated sandboxes whose readings are all counted: not asked again while they stay
    /// hibernated (a wake makes them running, and they are read again).
    settled: Arc<Mutex<HashSet<String>>>,
    /// One pass at a time in this process.
    pass: Arc<tokio::sync::Mutex<()>>,
}

impl Meter {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        host_id: Option<String>,
        settings: MeterSettings,
    ) -> Self {
        Self {
            store,
            host,
            host_id,
            settings,
            settled: Arc::default(),
            pass: Arc::default(),
        }
    }

    /// Runs a pass every interval until the task is dropped.
    pub async fn run(self) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let t = std::time::Instant::now();
            let r = self.once().await;
            let m = pandastack_telemetry::metrics();
            m.meter_pass_seconds.observe(t.elapsed().as_secs_f64());
            m.meter_readings.inc_by(r.readings as u64);
            m.meter_failures.inc_by(r.failed as u64);
            tracing::debug!(
                vms = r.vms,
                readings = r.readings,
                stale = r.stale,
                failed = r.failed,
                "meter pass"
            );
        }
    }

    /// One pass over every VM and the storage; each failure is logged and retried by the next
    /// pass from the same cursor.
    pub async fn once(&self) -> MeterReport {
        let _one = self.pass.lock().await;
        let mut report = MeterReport::default();
        let rows = match self
            .store
            .sandboxes()
            .with_vms(self.host_id.as_deref())
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = &e as &dyn std::error::Error, "meter: sandbox rows");
                report.failed += 1;
                return report;
            }
        };
        let settled = self
            .settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut still = HashSet::new();
        for row in &rows {
            let hibernated = row.state == SandboxState::Hibernated;
            if hibernated && settled.contains(&row.id) {
                still.insert(row.id.clone());
                continue;
            }
            match self.vm(row).await {
                Ok(Counted::Readings(n)) => {
                    report.vms += 1;
                    report.readings += n;
                }
                Ok(Counted::Nothing) => {
                    if hibernated {
                        still.insert(row.id.clone());
                    }
                }
                Ok(Counted::Stale) => report.stale += 1,
                Err(e) => {
                    report.failed += 1;
                    tracing::warn!(sandbox = %row.id, error = &e as &dyn std::error::Error, "meter: a VM's readings");
                }
            }
        }
        *self.settled.lock().unwrap_or_else(|p| p.into_inner()) = still;
        if let Err(e) = self.storage().await {
            report.failed += 1;
            tracing::warn!(error = &e as &dyn std::error::Error, "meter: storage");
        }
        if let Err(e) = self.store.usage().forget_gone().await {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "meter: cursors of deleted sandboxes"
            );
        }
        report
    }

    /// Counts the readings of `row`'s VM newer than its cursor.
    async fn vm(&self, row: &SandboxRow) -> Result<Counted, MeterError> {
        count_vm(&self.store, &*self.host, row).await
    }

    /// Adds what every workspace keeps now times the time since the last storage pass. The
    /// first pass only starts the clock.
    async fn storage(&self) -> Result<(), MeterError> {
        let usage = self.store.usage();
        let seen = usage.storage_cursor().await?;
        let now = now_ms();
        let Some(from) = seen else {
            usage.advance_storage(None, now, &[]).await?;
            return Ok(());
        };
        if now <= from {
            return Ok(());
        }
        let kept = usage.kept().await?;
        let pieces = split(from, now);
        let mut rows = Vec::with_capacity(kept.len() * pieces.len());
        for k in &kept {
            for &(hour, ms) in &pieces {
                let kib_ms = i128::from(k.bytes) * i128::from(ms) / 1024;
                let m = Metered {
                    storage_kib_ms: i64::try_from(kib_ms).unwrap_or(i64::MAX),
                    ..Metered::default()
                };
                let key = UsageKey {
                    workspace_id: k.workspace_id.clone(),
                    kind: k.kind.to_owned(),
                    resource_id: k.resource_id.clone(),
                    hour,
                };
                rows.push((key, m));
            }
        }
        usage.advance_storage(Some(from), now, &rows).await?;
        Ok(())
    }
}

/// Counts the readings of `row`'s VM newer than its cursor: what a pass does for each VM, and
/// what a delete does first (the host forgets a VM's readings with it).
pub(crate) async fn count_vm(
    store: &Store,
    host: &dyn Host,
    row: &SandboxRow,
) -> Result<Counted, MeterError> {
    let usage = store.usage();
    let seen = usage.cursor(&row.id).await?;
    let since = seen.map_or(0, |c| c.at_ms);
    let samples = match host.metrics(&row.id, since).await {
        Ok(v) => v,
        Err(HostError::SandboxNotFound(_)) => return Ok(Counted::Nothing),
        Err(e) => return Err(e.into()),
    };
    let Some((to, n, hours)) = integrate(seen.as_ref(), &samples, row.memory_mib) else {
        return Ok(Counted::Nothing);
    };
    let (kind, id) = resource_of(row);
    let rows: Vec<(UsageKey, Metered)> = hours
        .into_iter()
        .map(|(hour, m)| {
            let key = UsageKey {
                workspace_id: row.workspace_id.clone(),
                kind: kind.to_owned(),
                resource_id: id.clone(),
                hour,
            };
            (key, m)
        })
        .collect();
    Ok(
        match usage.advance_vm(&row.id, seen.as_ref(), &to, &rows).await? {
            Advanced::Done => Counted::Readings(n),
            Advanced::Stale => Counted::Stale,
        },
    )
}

/// What counting one VM came to.
pub(crate) enum Counted {
    Readings(usize),
    Nothing,
    Stale,
}

/// The resource a sandbox's VM is billed to: a database's, an app's or a function's VMs are
/// theirs (by the metadata their service gives them); any other sandbox is itself.
pub fn resource_of(row: &SandboxRow) -> (&'static str, String) {
    let m = &row.metadata;
    if let Some(id) = m.get(crate::DATABASE_METADATA) {
        return ("database", id.clone());
    }
    if let Some(name) = m.get(crate::apps::instances::INSTANCE_METADATA) {
        return (
            "function",
            crate::apps::function::public_name(name).to_owned(),
        );
    }
    if let Some(name) = m.get(crate::apps::APP_METADATA) {
        return ("app", name.clone());
    }
    ("sandbox", row.id.clone())
}

/// The start of the hour `t_ms` is in.
pub fn hour_of(t_ms: i64) -> i64 {
    t_ms.div_euclid(HOUR_MS) * HOUR_MS
}

/// `[from, to)` cut at hour edges: (hour start, ms of it), in order.
pub fn split(from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let h = hour_of(t);
        let end = (h + HOUR_MS).min(to);
        out.push((h, end - t));
        t = end;
    }
    out
}

/// What readings newer than `seen` add, hour by hour, and the cursor after them (with how
/// many readings were counted); `None` when there is no newer reading. `memory_mib` is the
/// VM's configured memory (the guest's own total when the row has none).
pub fn integrate(
    seen: Option<&VmCursor>,
    samples: &[MetricSample],
    memory_mib: i64,
) -> Option<(VmCursor, usize, BTreeMap<i64, Metered>)> {
    let mut prev = seen.copied();
    let mut hours: BTreeMap<i64, Metered> = BTreeMap::new();
    let mut n = 0;
    for s in samples {
        if prev.is_some_and(|p| s.at_ms <= p.at_ms) {
            continue;
        }
        let run = i64::from(s.run);
        let before = prev.filter(|p| p.run == run);
        if let Some(p) = before.filter(|p| s.at_ms - p.at_ms <= MAX_GAP_MS) {
            let memory = if memory_mib > 0 {
                memory_mib
            } else {
                s.mem_total_bytes.map_or(0, |b| (b >> 20) as i64)
            };
            for (hour, ms) in split(p.at_ms, s.at_ms) {
                let m = hours.entry(hour).or_default();
                m.vm_ms += ms;
                m.vcpu_ms += ms * i64::from(s.vcpus);
                m.memory_mib_ms += ms * memory;
            }
        }
        // A new process's counters start from zero: all they say is new. So do counters that
        // went down (a host that started its readings again numbers runs from 1 again).
        let grew = |now: Option<u64>, then: Option<i64>| -> i64 {
            let now = now.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
            match then {
                Some(t) if t <= now => now - t,
                _ => now,
            }
        };
        let m = hours.entry(hour_of(s.at_ms)).or_default();
        m.egress_bytes += grew(s.net_tx_bytes, before.and_then(|p| p.net_tx));
        m.ingress_bytes += grew(s.net_rx_bytes, before.and_then(|p| p.net_rx));
        prev = Some(VmCursor {
            at_ms: s.at_ms,
            run,
            net_rx: s.net_rx_bytes.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
            net_tx: s.net_tx_bytes.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        });
        n += 1;
    }
    hours.retain(|_, m| !m.is_zero());
    match prev {
        Some(to) if n > 0 => Some((to, n, hours)),
        _ => None,
    }
}

/// Adds one finished invocation of function `name` of workspace `ws` that ran `ms` at `at_ms`.
pub async fn record_invocation(
    store: &Store,
    ws: &str,
    name: &str,
    at_ms: i64,
    ms: i64,
) -> Result<(), StoreError> {
    let key = UsageKey {
        workspace_id: ws.to_owned(),
        kind: "function".to_owned(),
        resource_id: name.to_owned(),
        hour: hour_of(at_ms),
    };
    let m = Metered {
        invocations: 1,
        invocation_ms: ms.max(0),
        ..Metered::default()
    };
    store.usage().add(&[(key, m)]).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: i64, run: u32, tx: u64) -> MetricSample {
        MetricSample {
            at_ms,
            run,
            vcpus: 2,
            net_tx_bytes: Some(tx),
            net_rx_bytes: Some(tx / 2),
            ..Default::default()
        }
    }

    #[test]
    fn time_splits_at_hour_edges() {
        let t = 10 * HOUR_MS - 2_000;
        let (to, n, h) = integrate(None, &[s(t, 1, 0), s(t + 5_000, 1, 100)], 1024).unwrap();
        assert_eq!((to.at_ms, n), (t + 5_000, 2));
        let before = h[&(9 * HOUR_MS)];
        let after = h[&(10 * HOUR_MS)];
        assert_eq!((before.vm_ms, after.vm_ms), (2_000, 3_000));
        assert_eq!(after.vcpu_ms, 6_000);
        assert_eq!(before.memory_mib_ms, 2_000 * 1024);
        assert_eq!(after.egress_bytes, 100);
        assert_eq!(after.ingress_bytes, 50);
    }

    #[test]
    fn a_second_pass_over_the_same_readings_adds_nothing() {
        let v = [s(0, 1, 0), s(5_000, 1, 10), s(10_000, 1, 30)];
        let (to, _, _) = integrate(None, &v, 512).unwrap();
        assert!(integrate(Some(&to), &v, 512).is_none());
        // Only what is newer than the cursor counts.
        let mid = integrate(None, &v[..2], 512).unwrap().0;
        let (_, n, h) = integrate(Some(&mid), &v, 512).unwrap();
        assert_eq!(n, 1);
        assert_eq!(h[&0].vm_ms, 5_000);
        assert_eq!(h[&0].egress_bytes, 20);
    }

    #[test]
    fn a_new_process_counts_from_zero_and_not_the_gap() {
        let v = [
            s(0, 1, 500),
            s(5_000, 1, 900),
            s(60_000, 2, 40),
            s(65_000, 2, 70),
        ];
        let (_, _, h) = integrate(None, &v, 256).unwrap();
        // 5 s of run 1 and 5 s of run 2; the 55 s between them are not counted.
        assert_eq!(h[&0].vm_ms, 10_000);
        // 500 (run 1 from zero) + 400 + 40 (run 2 from zero) + 30.
        assert_eq!(h[&0].egress_bytes, 970);
    }

    #[test]
    fn a_host_that_started_again_does_not_bill_its_gap() {
        // The host's readings started again: run 1 again, 20 minutes later, counters low.
        let v = [
            s(0, 1, 500),
            s(5_000, 1, 900),
            s(1_205_000, 1, 40),
            s(1_210_000, 1, 70),
        ];
        let (_, _, h) = integrate(None, &v, 256).unwrap();
        assert_eq!(h[&0].vm_ms, 10_000);
        assert_eq!(h[&0].egress_bytes, 970);
    }
}
