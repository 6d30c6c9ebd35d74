//! Schedule rows: one firing per due time, whatever the number of processes racing for it.
//! Runs on SQLite, and on PostgreSQL too when `PANDASTACK_TEST_POSTGRES` names a server.

use pandastack_api_types::{ConcurrencyPolicy, RunState, RunTrigger};
use pandastack_store::{Firing, NewJob, RunRow, ScheduleRow, Store};

/// Two connections (two "processes") to one fresh database per backend.
async fn pairs() -> Vec<(Store, Store, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut out = vec![(
        Store::open(&path).await.unwrap(),
        Store::open(&path).await.unwrap(),
        Some(dir),
    )];
    if let Ok(admin) = std::env::var("PANDASTACK_TEST_POSTGRES") {
        if admin != "skip" {
            use sqlx::Connection;
            let name = format!("t_{:016x}", rand::random::<u64>());
            let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
            let url = format!("{base}/{name}");
            out.push((
                Store::connect(&url).await.unwrap(),
                Store::connect(&url).await.unwrap(),
                None,
            ));
        }
    }
    out
}

async fn schedule(s: &Store, next: i64) -> ScheduleRow {
    let ws = s.keys().create_workspace("w", 10, 60).await.unwrap();
    let row = ScheduleRow {
        id: pandastack_store::new_id("sch-"),
        workspace_id: ws.id,
        name: "tick".into(),
        host_id: "h1".into(),
        spec: serde_json::json!({}),
        paused: false,
        next_due_at: Some(next),
        created_at: 1,
        updated_at: 1,
    };
    s.schedules().insert(&row).await.unwrap();
    row
}

fn firing(row: &ScheduleRow, due: i64, next: i64, policy: ConcurrencyPolicy) -> Firing {
    let run = RunRow::new(
        pandastack_store::new_id("run-"),
        row,
        due,
        RunTrigger::Scheduled,
        RunState::Queued,
        due,
    );
    let job = NewJob {
        kind: "schedule_run".into(),
        resource: format!("schedule_run:{}", run.id),
        host_id: Some("h1".into()),
        payload: serde_json::json!({ "run": run.id }),
        max_attempts: 1,
        run_after: 0,
    };
    Firing {
        schedule_id: row.id.clone(),
        advance: Some((due, Some(next))),
        missed: Vec::new(),
        run: Some((run, job)),
        policy,
    }
}

#[tokio::test]
async fn a_due_time_fires_once_across_processes() {
    for (a, b, _dir) in pairs().await {
        let row = schedule(&a, 1_000).await;
        // Eight firings of one due time from two "processes" at once: one run, one job.
        let mut tasks = Vec::new();
        for i in 0..8 {
            let s = if i % 2 == 0 { a.clone() } else { b.clone() };
            let f = firing(&row, 1_000, 2_000, ConcurrencyPolicy::Allow);
            tasks.push(tokio::spawn(async move {
                s.schedules().fire(&f).await.unwrap()
            }));
        }
        let mut fired = 0;
        for t in tasks {
            if t.await.unwrap().run.is_some() {
                fired += 1;
            }
        }
        assert_eq!(fired, 1, "{:?}", a.backend());
        let runs = a.schedules().runs(&row.id, None, 100).await.unwrap();
        assert_eq!(runs.len(), 1);
        let job = a
            .jobs()
            .incomplete(&format!("schedule_run:{}", runs[0].id))
            .await
            .unwrap();
        assert!(job.is_some(), "the run's job is written with it");
        assert_eq!(
            a.schedules().by_id(&row.id).await.unwrap().next_due_at,
            Some(2_000)
        );

        // A restarted process that had not seen the advance (it read next_due_at = 1000)
        // writes nothing; one that read 2000 but loses the race to a row already there for
        // that due time makes no second run either.
        let stale = a
            .schedules()
            .fire(&firing(&row, 1_000, 2_000, ConcurrencyPolicy::Allow))
            .await
            .unwrap();
        assert!(!stale.advanced && stale.run.is_none());
        let mut manual = firing(&row, 1_000, 3_000, ConcurrencyPolicy::Allow);
        manual.advance = None;
        let dup = a.schedules().fire(&manual).await.unwrap();
        assert!(dup.run.is_none(), "due time 1000 already has its run");
    }
}

#[tokio::test]
async fn policies_and_missed_runs() {
    for (a, _b, _dir) in pairs().await {
        let row = schedule(&a, 1_000).await;
        let first = a
            .schedules()
            .fire(&firing(&row, 1_000, 2_000, ConcurrencyPolicy::Forbid))
            .await
            .unwrap()
            .run
            .unwrap();
        assert!(a.schedules().start_run(&first.id, 1, 1_001).await.unwrap());
        // forbid: the next due time is recorded skipped, no job.
        let skipped = a
            .schedules()
            .fire(&firing(&row, 2_000, 3_000, ConcurrencyPolicy::Forbid))
            .await
            .unwrap()
            .run
            .unwrap();
        assert_eq!(skipped.state, RunState::Skipped);
        assert!(a
            .jobs()
            .incomplete(&format!("schedule_run:{}", skipped.id))
            .await
            .unwrap()
            .is_none());
        // replace: the running one is cancelled, and its end is not overwritten after.
        let mut f = firing(&row, 3_000, 9_000, ConcurrencyPolicy::Replace);
        f.missed = (4..6)
            .map(|i| {
                RunRow::new(
                    pandastack_store::new_id("run-"),
                    &row,
                    i * 100,
                    RunTrigger::Scheduled,
                    RunState::Missed,
                    3_000,
                )
            })
            .collect();
        let replaced = a.schedules().fire(&f).await.unwrap();
        assert_eq!(replaced.cancelled.len(), 1);
        assert_eq!(replaced.cancelled[0].id, first.id);
        assert!(!a
            .schedules()
            .finish_run(&first.id, RunState::Succeeded, Some(0), None, None, 3_100)
            .await
            .unwrap());
        assert_eq!(
            a.schedules().run(&first.id).await.unwrap().state,
            RunState::Cancelled
        );
        let runs = a.schedules().runs(&row.id, None, 100).await.unwrap();
        let states: Vec<_> = runs.iter().map(|r| (r.due_at, r.state)).collect();
        assert_eq!(
            states,
            vec![
                (3_000, RunState::Queued),
                (2_000, RunState::Skipped),
                (1_000, RunState::Cancelled),
                (500, RunState::Missed),
                (400, RunState::Missed),
            ]
        );
        // Pages, newest first.
        let page = a.schedules().runs(&row.id, Some(2_000), 1).await.unwrap();
        assert_eq!(page[0].due_at, 1_000);
        a.schedules().delete(&row.id).await.unwrap();
        assert!(a.schedules().run(&first.id).await.is_err());
    }
}
