//! The scheduler: one loop per host that fires this host's due schedules.
//!
//! It sleeps until the earliest `next_due_at` of its unpaused schedules (or until a schedule
//! changes, or [`MAX_SLEEP`] to see changes made by other processes), then fires each due
//! schedule in one transaction ([`pandastack_store::ScheduleRepo::fire`]).
//!
//! **Catch-up.** The due times in `[next_due_at, now]` are the ones not fired (normally one;
//! more after the server was down). The latest runs if it is within `starting_deadline_seconds`
//! of now (always, when the schedule has no deadline); the older ones — and the latest too when
//! past the deadline — are recorded `missed` (the newest [`super::MISSED_KEPT`] of them).

use std::time::Duration;

use pandastack_api_types::{RunState, RunTrigger};
use pandastack_store::{now_ms, Firing, ScheduleRow};

use super::{cron, spec_of, ScheduleError, Schedules, MISSED_KEPT};

/// Longest sleep of the scheduler: how soon a change made by another process is seen.
const MAX_SLEEP: Duration = Duration::from_secs(5);

impl Schedules {
    /// Runs the scheduler for the life of the process.
    pub(super) async fn scheduler(self) {
        loop {
            let now = now_ms();
            match self.store.schedules().due(&self.host_id, now).await {
                Ok(rows) => {
                    for row in rows {
                        if let Err(e) = self.fire_due(&row, now).await {
                            tracing::warn!(schedule = %row.id, error = &e as &dyn std::error::Error, "fire a schedule");
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = &e as &dyn std::error::Error, "read due schedules")
                }
            }
            let next = match self.store.schedules().next_due(&self.host_id).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = &e as &dyn std::error::Error, "read next due time");
                    None
                }
            };
            let sleep = match next {
                Some(t) => Duration::from_millis((t - now_ms()).max(0) as u64).min(MAX_SLEEP),
                None => MAX_SLEEP,
            };
            if !sleep.is_zero() {
                let _ = tokio::time::timeout(sleep, self.tick.notified()).await;
            }
        }
    }

    /// Fires `row`'s due times up to `now` (see the module's catch-up rule).
    async fn fire_due(&self, row: &ScheduleRow, now: i64) -> Result<(), ScheduleError> {
        let Some(from) = row.next_due_at else {
            return Ok(());
        };
        let spec = spec_of(row)?;
        let cron = match cron::parse(&spec.cron, &spec.timezone) {
            Ok(c) => c,
            Err(e) => {
                // Checked when stored; a stored one this version cannot read stops here rather
                // than being retried in a hot loop.
                tracing::error!(schedule = %row.id, error = &e as &dyn std::error::Error, "stored cron expression refused; schedule paused");
                let mut paused = row.clone();
                paused.paused = true;
                paused.next_due_at = None;
                self.store.schedules().update(&paused).await?;
                return Ok(());
            }
        };
        let mut due = cron.due_between(from - 1, now, MISSED_KEPT + 1);
        let next = cron.next_after(now);
        let latest = due.pop();
        let fire = latest.filter(|t| match spec.starting_deadline_seconds {
            Some(d) => now - t <= i64::try_from(d).unwrap_or(i64::MAX).saturating_mul(1000),
            None => true,
        });
        let mut missed: Vec<_> = due
            .iter()
            .map(|&t| {
                (
                    t,
                    "a later due time was due too (the server was not running)",
                )
            })
            .collect();
        if let (Some(t), None) = (latest, fire) {
            missed.push((
                t,
                "found past starting_deadline_seconds (the server was not running)",
            ));
        }
        let missed = missed
            .into_iter()
            .map(|(t, why)| {
                let mut r = self.new_run(row, t, RunTrigger::Scheduled, RunState::Missed);
                r.error = Some(format!("missed: {why}"));
                r
            })
            .collect::<Vec<_>>();
        let run = fire.map(|t| {
            let r = self.new_run(row, t, RunTrigger::Scheduled, RunState::Queued);
            let job = self.run_job(row, &spec, &r.id);
            (r, job)
        });
        let fired = self
            .store
            .schedules()
            .fire(&Firing {
                schedule_id: row.id.clone(),
                advance: Some((from, next)),
                missed,
                run,
                policy: spec.concurrency_policy,
            })
            .await?;
        if let Some(r) = &fired.run {
            tracing::debug!(schedule = %row.name, run = %r.id, due_at = r.due_at, late_ms = r.created_at - r.due_at, state = r.state.as_str(), "fired");
            self.fired_event(row, r).await;
        }
        self.after_firing(&fired.cancelled).await;
        Ok(())
    }
}
