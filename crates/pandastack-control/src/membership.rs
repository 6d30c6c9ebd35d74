//! Membership: the lease reaper every control-plane replica runs.
//!
//! Hosts whose agents stream to a replica hold leases that the replica renews
//! ([`pandastack_store::Hosts::renew`]); [`pandastack_store::Hosts::reap`] marks a host whose
//! lease lapsed `dead` and bumps its epoch, in one statement, so every replica may run it and
//! each host is reaped once. No replica leads.
//!
//! A store outage is not a host death. While PostgreSQL is unreachable no replica can renew
//! anything, so when it comes back every lease may have lapsed. [`LeaseReaper`] therefore reaps
//! only once the store has answered continuously for a whole lease: a tick the store does not
//! answer (or a start, or a gap between ticks longer than half a lease — the replica was stalled
//! and saw nothing) starts a hold, during which the reaper only checks that the store answers.
//! Meanwhile the agents' renewals resume, so a lease that lapsed only because of the outage is
//! renewed before the hold ends; a host whose agent does not come back within the lease is
//! reaped at the hold's end.
//!
//! ```text
//!   start ──► holding ──(answered for a whole lease)──► reaping ──┐
//!               ▲  │                                              │
//!               │  └──(no answer / stalled)──┐                    │
//!               └────────────────────────────┴──(no answer / stalled)
//! ```
//!
//! Agents' joins, the batched renewals of their streams and what their heartbeats say changed
//! (capacity, templates) reach the store through [`StoreMembers`], the
//! [`pandastack_agent_link::Members`] a replica's [`pandastack_agent_link::MembershipService`]
//! is built over. A reap marks the dead hosts' sandboxes that held a VM `lost` (see
//! [`pandastack_store::Hosts::reap`]).
//!
//! Not started by the single-node server: its in-process host holds no lease (it is never
//! reaped) and no agent joins it; no replica mode runs the membership service yet.

use std::future::Future;
use std::time::Duration;

use pandastack_agent_link::membership::{Capacity, HostUpdate, Joined, Renewal};
use pandastack_agent_link::{HostReport, Members, MembersError};
use pandastack_store::{HostCapacity, Joining, Reaped, Store, StoreError};

/// The lease a replica gives the hosts streaming to it; with [`REAP_EVERY`], a host whose
/// renewals stop is reaped within 9 s.
pub const LEASE: Duration = Duration::from_secs(8);

/// How often a replica's [`LeaseReaper`] ticks.
pub const REAP_EVERY: Duration = Duration::from_secs(1);

/// What the reaper needs of the store: the store itself, or a test's stand-in. Any error
/// counts as the store not answering.
pub trait LeaseStore: Send + Sync {
    type Error: std::error::Error + Send + Sync + 'static;
    /// `Ok` if the store answers.
    fn ping(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// [`pandastack_store::Hosts::reap`].
    fn reap(&self, now: i64) -> impl Future<Output = Result<Vec<Reaped>, Self::Error>> + Send;
}

impl LeaseStore for Store {
    type Error = StoreError;

    async fn ping(&self) -> Result<(), StoreError> {
        Store::ping(self).await
    }

    async fn reap(&self, now: i64) -> Result<Vec<Reaped>, StoreError> {
        self.hosts().reap(now).await
    }
}

/// Membership over the state store: a join is [`pandastack_store::Hosts::join`], a batch of
/// heartbeats one [`pandastack_store::Hosts::renew`], each with a lease of `lease` from the
/// replica's clock; what heartbeats say changed is [`pandastack_store::Hosts::report`] per
/// host (a fenced one is logged and dropped: its agent is told by the renewal and joins again).
///
/// Not stored: a host's creates in flight (the store counts the rows of creates under way).
#[derive(Clone)]
pub struct StoreMembers {
    store: Store,
    lease: Duration,
}

impl StoreMembers {
    /// Leases of [`LEASE`].
    pub fn new(store: Store) -> Self {
        Self::with_lease(store, LEASE)
    }

    pub fn with_lease(store: Store, lease: Duration) -> Self {
        Self { store, lease }
    }

    fn lease_ms(&self) -> i64 {
        self.lease.as_millis() as i64
    }
}

#[async_trait::async_trait]
impl Members for StoreMembers {
    async fn join(&self, report: HostReport) -> Result<Joined, MembersError> {
        let joining = Joining {
            id: report.host_id,
            name: report.name,
            address: report.address,
            capacity: stored(report.capacity),
            compat_key: report.compat_key,
            templates: report.templates,
        };
        let row = self
            .store
            .hosts()
            .join(&joining, self.lease_ms(), pandastack_store::now_ms())
            .await
            .map_err(MembersError::new)?;
        Ok(Joined {
            epoch: row.epoch,
            lease_ms: self.lease_ms() as u64,
        })
    }

    async fn renew(&self, hosts: &[(String, i64)]) -> Result<Renewal, MembersError> {
        let lease_until = pandastack_store::now_ms() + self.lease_ms();
        let r = self
            .store
            .hosts()
            .renew(hosts, lease_until)
            .await
            .map_err(MembersError::new)?;
        Ok(Renewal {
            lease_until,
            renewed: r.renewed,
            fenced: r.fenced,
        })
    }

    async fn report(&self, reports: &[HostUpdate]) -> Result<(), MembersError> {
        for u in reports {
            let capacity = stored(u.capacity);
            match self
                .store
                .hosts()
                .report(&u.host_id, u.epoch, &capacity, &u.templates)
                .await
            {
                Ok(()) => {}
                Err(StoreError::Fenced { host, epoch }) => {
                    tracing::info!(host, epoch, "membership: a fenced host's report dropped");
                }
                Err(e) => return Err(MembersError::new(e)),
            }
        }
        Ok(())
    }
}

/// The part of an agent's capacity the `hosts` row keeps.
fn stored(c: Capacity) -> HostCapacity {
    HostCapacity {
        vcpus: c.vcpus,
        memory_mib: c.memory_mib,
        disk_bytes: c.disk_bytes,
        free_slots: c.free_slots,
        creates_in_flight: c.creates_in_flight,
        slots: c.slots,
    }
}

/// What one tick did.
#[derive(Debug)]
pub enum Tick<E = StoreError> {
    /// The store had answered for a whole lease; these hosts were reaped (often none), their
    /// sandboxes that held a VM marked `lost`.
    Reaped(Vec<Reaped>),
    /// The store answers, but not yet for a whole lease: nothing is reaped before `until`.
    Holding { until: i64 },
    /// The store did not answer: nothing reaped, and a new hold starts at its next answer.
    Unreachable(E),
}

/// The reaper's decision: whether this tick may reap (see the module doc).
pub struct LeaseReaper<S> {
    store: S,
    lease_ms: i64,
    /// Since when (unix ms) the store has answered every tick; `None`: it did not answer the
    /// last one, or the reaper has not ticked, or it was stalled.
    answering_since: Option<i64>,
    last_tick: Option<i64>,
}

impl<S: LeaseStore> LeaseReaper<S> {
    pub fn new(store: S, lease: Duration) -> Self {
        Self {
            store,
            lease_ms: lease.as_millis() as i64,
            answering_since: None,
            last_tick: None,
        }
    }

    /// One tick at `now` (unix ms, the clock leases are written in).
    pub async fn tick(&mut self, now: i64) -> Tick<S::Error> {
        let stalled = self
            .last_tick
            .is_some_and(|last| now - last > self.lease_ms / 2);
        self.last_tick = Some(now);
        if stalled {
            self.answering_since = None;
        }
        match self.answering_since {
            Some(since) if now - since >= self.lease_ms => match self.store.reap(now).await {
                Ok(ids) => Tick::Reaped(ids),
                Err(e) => {
                    self.answering_since = None;
                    Tick::Unreachable(e)
                }
            },
            _ => match self.store.ping().await {
                Ok(()) => Tick::Holding {
                    until: *self.answering_since.get_or_insert(now) + self.lease_ms,
                },
                Err(e) => {
                    self.answering_since = None;
                    Tick::Unreachable(e)
                }
            },
        }
    }

    /// Ticks every `every`, reading the time from `clock`, until the task is dropped; logs what
    /// it reaps and when the store stops and starts answering.
    pub async fn run(mut self, every: Duration, clock: impl Fn() -> i64 + Send) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reachable = true;
        loop {
            interval.tick().await;
            match self.tick(clock()).await {
                Tick::Reaped(reaped) => {
                    reachable = true;
                    for r in reaped {
                        tracing::warn!(
                            host = r.host_id,
                            lost_sandboxes = r.lost,
                            "host dead: its lease lapsed; its sandboxes that held a VM are lost"
                        );
                    }
                }
                Tick::Holding { until } => {
                    if !reachable {
                        tracing::info!(
                            until,
                            "state store answers again; no host is reaped for one lease"
                        );
                    }
                    reachable = true;
                }
                Tick::Unreachable(e) => {
                    if reachable {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            "state store unreachable: reaping hosts stops"
                        );
                    }
                    reachable = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use pandastack_store::{HostCapacity, Joining};

    use super::*;

    const T0: i64 = 1_700_000_000_000;
    const LEASE_MS: i64 = 8_000;

    /// A real store behind a switch: while `down`, every call fails as an unreachable
    /// PostgreSQL would. Counts the reaps that reached the store.
    struct Flaky {
        store: Store,
        down: AtomicBool,
        reaps: AtomicUsize,
    }

    #[derive(Debug, thiserror::Error)]
    enum FlakyError {
        #[error("state store unreachable")]
        Down,
        #[error("state store")]
        Store(#[from] StoreError),
    }

    impl Flaky {
        fn check(&self) -> Result<(), FlakyError> {
            if self.down.load(Ordering::SeqCst) {
                return Err(FlakyError::Down);
            }
            Ok(())
        }
    }

    impl LeaseStore for &Flaky {
        type Error = FlakyError;

        async fn ping(&self) -> Result<(), FlakyError> {
            self.check()?;
            Ok(self.store.ping().await?)
        }

        async fn reap(&self, now: i64) -> Result<Vec<Reaped>, FlakyError> {
            self.check()?;
            self.reaps.fetch_add(1, Ordering::SeqCst);
            Ok(self.store.hosts().reap(now).await?)
        }
    }

    async fn flaky() -> (Flaky, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        let flaky = Flaky {
            store,
            down: AtomicBool::new(false),
            reaps: AtomicUsize::new(0),
        };
        (flaky, dir)
    }

    fn joining(id: &str) -> Joining {
        Joining {
            id: id.into(),
            name: id.into(),
            address: format!("{id}:7443"),
            capacity: HostCapacity::default(),
            compat_key: "k".into(),
            templates: Vec::new(),
        }
    }

    fn ids(reaped: &[Reaped]) -> Vec<&str> {
        reaped.iter().map(|r| r.host_id.as_str()).collect()
    }

    /// Ticks once a second over `[from, to)`; every tick must hold.
    async fn holds(reaper: &mut LeaseReaper<&Flaky>, from: i64, to: i64) {
        for now in (from..to).step_by(1_000) {
            match reaper.tick(now).await {
                Tick::Holding { .. } => {}
                t => panic!("at T0{:+}: {t:?}", now - T0),
            }
        }
    }

    /// 200 hosts' leases lapse during a store outage. Nothing is reaped during it nor for a whole
    /// lease after it, while the agents' renewals resume (one batched call for 199 of them);
    /// then only the host whose agent never came back is reaped.
    #[tokio::test]
    async fn no_reap_during_or_right_after_a_store_outage() {
        let (store, _dir) = flaky().await;
        let mut hosts = Vec::new();
        for i in 0..200 {
            let h = store
                .store
                .hosts()
                .join(&joining(&format!("h-{i:03}")), LEASE_MS, T0)
                .await
                .unwrap();
            hosts.push((h.id, h.epoch));
        }
        let mut reaper = LeaseReaper::new(&store, Duration::from_millis(LEASE_MS as u64));
        holds(&mut reaper, T0, T0 + 1_000).await;

        // Down from T0+1 s to T0+20 s: every lease lapses at T0+8 s.
        store.down.store(true, Ordering::SeqCst);
        for now in (T0 + 1_000..T0 + 20_000).step_by(1_000) {
            assert!(matches!(reaper.tick(now).await, Tick::Unreachable(_)));
        }
        store.down.store(false, Ordering::SeqCst);
        // Back: a whole lease of holding, while the agents come back and renew.
        holds(&mut reaper, T0 + 20_000, T0 + 21_000).await;
        let back = &hosts[..199];
        let r = store
            .store
            .hosts()
            .renew(back, T0 + 21_000 + LEASE_MS)
            .await
            .unwrap();
        assert_eq!(r.renewed.len(), 199);
        holds(&mut reaper, T0 + 21_000, T0 + 28_000).await;
        assert_eq!(
            store.reaps.load(Ordering::SeqCst),
            0,
            "reaped during the hold"
        );

        match reaper.tick(T0 + 28_000).await {
            Tick::Reaped(r) => assert_eq!(ids(&r), ["h-199"]),
            t => panic!("{t:?}"),
        }
        match reaper.tick(T0 + 29_000).await {
            Tick::Reaped(ids) => assert!(ids.is_empty()),
            t => panic!("{t:?}"),
        }
    }

    /// A reaper holds for one lease from its start; a tick the store does not answer in the
    /// middle starts the hold again, and a stalled replica (a gap of more than half a lease
    /// between ticks) holds again too.
    #[tokio::test]
    async fn reaping_resumes_only_after_a_full_lease_of_answers() {
        let (store, _dir) = flaky().await;
        store
            .store
            .hosts()
            .join(&joining("h-gone"), 1_000, T0)
            .await
            .unwrap();
        let mut reaper = LeaseReaper::new(&store, Duration::from_millis(LEASE_MS as u64));
        match reaper.tick(T0).await {
            Tick::Holding { until } => assert_eq!(until, T0 + LEASE_MS),
            t => panic!("{t:?}"),
        }
        holds(&mut reaper, T0 + 1_000, T0 + 5_000).await;
        store.down.store(true, Ordering::SeqCst);
        assert!(matches!(
            reaper.tick(T0 + 5_000).await,
            Tick::Unreachable(_)
        ));
        store.down.store(false, Ordering::SeqCst);
        // The hold counts from the first answer after the failure, not from the start.
        match reaper.tick(T0 + 6_000).await {
            Tick::Holding { until } => assert_eq!(until, T0 + 6_000 + LEASE_MS),
            t => panic!("{t:?}"),
        }
        holds(&mut reaper, T0 + 7_000, T0 + 14_000).await;
        match reaper.tick(T0 + 14_000).await {
            Tick::Reaped(r) => assert_eq!(ids(&r), ["h-gone"]),
            t => panic!("{t:?}"),
        }

        // Stalled for 5 s (more than half a lease): hold again.
        store
            .store
            .hosts()
            .join(&joining("h-late"), 1_000, T0 + 14_000)
            .await
            .unwrap();
        match reaper.tick(T0 + 19_000).await {
            Tick::Holding { until } => assert_eq!(until, T0 + 19_000 + LEASE_MS),
            t => panic!("{t:?}"),
        }
        holds(&mut reaper, T0 + 20_000, T0 + 27_000).await;
        match reaper.tick(T0 + 27_000).await {
            Tick::Reaped(r) => assert_eq!(ids(&r), ["h-late"]),
            t => panic!("{t:?}"),
        }
        assert_eq!(store.reaps.load(Ordering::SeqCst), 2);
    }

    /// `run` on a task: a clock that moves a second per tick, ticks 5 ms apart; the host whose
    /// lease lapsed is dead once the first lease of answers is over.
    #[tokio::test]
    async fn run_reaps_on_its_own_task() {
        use std::sync::atomic::AtomicI64;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        store
            .hosts()
            .join(&joining("h-gone"), 1_000, T0)
            .await
            .unwrap();
        let clock = std::sync::Arc::new(AtomicI64::new(T0));
        let reaper = LeaseReaper::new(store.clone(), LEASE);
        let ticks = clock.clone();
        let task = tokio::spawn(reaper.run(Duration::from_millis(5), move || {
            ticks.fetch_add(1_000, Ordering::SeqCst)
        }));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.hosts().get("h-gone").await.unwrap().state != pandastack_store::HostState::Dead
        {
            assert!(std::time::Instant::now() < deadline, "not reaped");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        task.abort();
        // Not before a whole lease of answers (8 ticks of 1 s from the first).
        assert!(clock.load(Ordering::SeqCst) > T0 + LEASE.as_millis() as i64);
    }

    /// A failing reap is an outage too: the next tick holds.
    #[tokio::test]
    async fn a_failed_reap_starts_a_hold() {
        let (store, _dir) = flaky().await;
        let mut reaper = LeaseReaper::new(&store, Duration::from_millis(LEASE_MS as u64));
        holds(&mut reaper, T0, T0 + 8_000).await;
        assert!(matches!(reaper.tick(T0 + 8_000).await, Tick::Reaped(_)));
        store.down.store(true, Ordering::SeqCst);
        assert!(matches!(
            reaper.tick(T0 + 9_000).await,
            Tick::Unreachable(_)
        ));
        store.down.store(false, Ordering::SeqCst);
        holds(&mut reaper, T0 + 10_000, T0 + 18_000).await;
        assert!(matches!(reaper.tick(T0 + 18_000).await, Tick::Reaped(_)));
    }
}
