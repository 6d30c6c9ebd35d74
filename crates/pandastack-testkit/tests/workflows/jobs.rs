//! Durable jobs: a job is claimed by one runner however many race for it, and a newer run of a
//! schedule supersedes (replaces) one still queued or running.

use std::time::Duration;

use pandastack_api_types::{ConcurrencyPolicy, RunState};
use pandastack_store::{NewJob, StoreError};
use pandastack_testkit::script::{Op, Reply};

use super::{eventually, schedule, Env, HOST_ID, NEVER};

fn job(resource: &str) -> NewJob {
    NewJob {
        kind: "test_job".into(),
        resource: resource.into(),
        host_id: Some(HOST_ID.into()),
        payload: serde_json::json!({}),
        max_attempts: 1,
        run_after: 0,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_queued_job_is_claimed_by_one_of_many_racing_runners() {
    let env = Env::new().await;
    let queued = env.store.jobs().enqueue(&job("thing:1")).await.unwrap();
    let claims = futures::future::join_all((0..8).map(|i| {
        let store = env.store.clone();
        async move {
            store
                .jobs()
                .claim_kind(HOST_ID, &format!("runner-{i}"), 30_000, "test_job")
                .await
                .unwrap()
        }
    }))
    .await;
    let won: Vec<_> = claims.into_iter().flatten().collect();
    assert_eq!(won.len(), 1, "claimed by {won:?}");
    assert_eq!(won[0].id, queued.id);
    // One incomplete job per resource: a second one waits for the first to end.
    assert!(matches!(
        env.store.jobs().enqueue(&job("thing:1")).await,
        Err(StoreError::Conflict)
    ));
    // Another host's runner does not take this host's job.
    env.store.jobs().enqueue(&job("thing:2")).await.unwrap();
    let other = env
        .store
        .jobs()
        .claim_kind("host-b", "runner-b", 30_000, "test_job")
        .await
        .unwrap();
    assert!(other.is_none(), "{other:?}");
    env.store
        .jobs()
        .complete(
            &won[0].id,
            won[0].lease_owner.as_deref().unwrap_or_default(),
        )
        .await
        .unwrap();
    env.store.jobs().enqueue(&job("thing:1")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_control_planes_carry_out_a_run_once() {
    let env = Env::new().await;
    env.host.on_exec("echo hello", Reply::ok("hello\n"));
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("once", NEVER, "echo hello", ConcurrencyPolicy::Allow),
        )
        .await
        .unwrap();
    let second = env.another_plane();
    env.control.start();
    second.start();
    let run = env
        .control
        .schedules
        .run_now(&env.ws, "once")
        .await
        .unwrap();
    let done = run_reaches(
        &env,
        "once",
        &run.id,
        RunState::Succeeded,
        Duration::from_secs(10),
        "the run succeeds",
    )
    .await;
    // Give a second runner time to (wrongly) carry it out too.
    tokio::time::sleep(Duration::from_millis(700)).await;
    env.control.shutdown(false).await;
    second.shutdown(false).await;
    assert_eq!(done.output.as_deref(), Some("hello\n"));
    assert_eq!(done.exit_code, Some(0));
    assert_eq!(done.attempt, 1);
    let ran: Vec<_> = env
        .host
        .exec_log()
        .into_iter()
        .filter(|(_, c)| c == "echo hello")
        .collect();
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert_eq!(env.host.count(Op::Create), 1);
    // Its sandbox is gone, row and VM.
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
    assert!(env.row(&ran[0].0).await.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_run_supersedes_a_queued_one() {
    let env = Env::new().await;
    env.host.on_exec("date", Reply::ok("now\n"));
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("latest", NEVER, "date", ConcurrencyPolicy::Replace),
        )
        .await
        .unwrap();
    // No workers yet: the first run stays queued when the second comes.
    let first = env
        .control
        .schedules
        .run_now(&env.ws, "latest")
        .await
        .unwrap();
    let second = env
        .control
        .schedules
        .run_now(&env.ws, "latest")
        .await
        .unwrap();
    let (_, r) = env
        .control
        .schedules
        .run(&env.ws, "latest", &first.id)
        .await
        .unwrap();
    assert_eq!(r.state, RunState::Cancelled);
    assert_eq!(
        r.error.as_deref(),
        Some(format!("replaced by run {}", second.id).as_str())
    );
    env.control.start();
    eventually(
        Duration::from_secs(10),
        "the newer run succeeds",
        || async {
            let (_, r) = env
                .control
                .schedules
                .run(&env.ws, "latest", &second.id)
                .await
                .ok()?;
            (r.state == RunState::Succeeded).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    env.control.shutdown(false).await;
    // The superseded run's job ended without a sandbox or a command.
    assert_eq!(env.host.count(Op::Create), 1);
    assert_eq!(env.host.exec_log().len(), 1);
    let (_, r) = env
        .control
        .schedules
        .run(&env.ws, "latest", &first.id)
        .await
        .unwrap();
    assert_eq!(r.state, RunState::Cancelled, "stays cancelled");
    assert!(r.sandbox_id.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_run_replaces_a_running_one_and_its_sandbox_goes() {
    let env = Env::new().await;
    env.host.on_exec("work", Reply::ok("done\n"));
    // The first attempt's command never ends.
    env.host.hang_next(Op::Exec, 1);
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("long", NEVER, "work", ConcurrencyPolicy::Replace),
        )
        .await
        .unwrap();
    env.control.start();
    let first = env
        .control
        .schedules
        .run_now(&env.ws, "long")
        .await
        .unwrap();
    let sandbox = eventually(Duration::from_secs(10), "the first run runs", || async {
        let (_, r) = env
            .control
            .schedules
            .run(&env.ws, "long", &first.id)
            .await
            .ok()?;
        let sb = r.sandbox_id.filter(|_| r.state == RunState::Running)?;
        (env.host.count(Op::Exec) == 1).then_some(sb)
    })
    .await;
    assert!(env.host.vm_state(&sandbox).is_some());
    let second = env
        .control
        .schedules
        .run_now(&env.ws, "long")
        .await
        .unwrap();
    let (_, r) = env
        .control
        .schedules
        .run(&env.ws, "long", &first.id)
        .await
        .unwrap();
    assert_eq!(r.state, RunState::Cancelled);
    // The replaced run's sandbox is deleted with it, VM and row.
    assert!(env.host.vm_state(&sandbox).is_none());
    assert!(env.row(&sandbox).await.is_none());
    eventually(
        Duration::from_secs(10),
        "the newer run succeeds",
        || async {
            let (_, r) = env
                .control
                .schedules
                .run(&env.ws, "long", &second.id)
                .await
                .ok()?;
            (r.state == RunState::Succeeded).then_some(())
        },
    )
    .await;
    env.control.shutdown(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn forbid_skips_a_run_while_one_is_under_way() {
    let env = Env::new().await;
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("single", NEVER, "true", ConcurrencyPolicy::Forbid),
        )
        .await
        .unwrap();
    let first = env
        .control
        .schedules
        .run_now(&env.ws, "single")
        .await
        .unwrap();
    let second = env
        .control
        .schedules
        .run_now(&env.ws, "single")
        .await
        .unwrap();
    assert_eq!(first.state, RunState::Queued);
    assert_eq!(second.state, RunState::Skipped);
    assert_eq!(
        second.error.as_deref(),
        Some(format!("skipped: run {} is still queued", first.id).as_str())
    );
    // A skipped run queues no job: only the first one's is there.
    let job = env
        .store
        .jobs()
        .claim_kind(
            HOST_ID,
            "t",
            30_000,
            pandastack_control::schedules::RUN_JOB_KIND,
        )
        .await
        .unwrap()
        .expect("the first run's job");
    assert_eq!(job.payload["run"], first.id.as_str());
    let none = env
        .store
        .jobs()
        .claim_kind(
            HOST_ID,
            "t",
            30_000,
            pandastack_control::schedules::RUN_JOB_KIND,
        )
        .await
        .unwrap();
    assert!(none.is_none(), "{none:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_attempted_again_while_it_has_retries() {
    let env = Env::new().await;
    env.host.on_exec("flaky", Reply::exit(3).stderr("boom\n"));
    let mut req = schedule("retry", NEVER, "flaky", ConcurrencyPolicy::Allow);
    req.retries = Some(1);
    env.control.schedules.create(&env.ws, &req).await.unwrap();
    env.control.start();
    let run = env
        .control
        .schedules
        .run_now(&env.ws, "retry")
        .await
        .unwrap();
    let r = run_reaches(
        &env,
        "retry",
        &run.id,
        RunState::Failed,
        Duration::from_secs(15),
        "the run fails",
    )
    .await;
    // The result is kept first, then the attempt's sandbox goes (see schedules/run.rs).
    eventually(
        Duration::from_secs(10),
        "each attempt's sandbox deleted",
        || async { env.host.vm_ids().is_empty().then_some(()) },
    )
    .await;
    env.control.shutdown(false).await;
    assert_eq!(r.attempt, 2);
    assert_eq!(r.exit_code, Some(3));
    assert_eq!(r.error.as_deref(), Some("exit code 3"));
    assert_eq!(r.output.as_deref(), Some("boom\n"));
    assert_eq!(env.host.exec_log().len(), 2, "one attempt and one retry");
    assert_eq!(env.host.count(Op::Create), 2);
    // Fired once (the manual run), failed once (on its last attempt, not the first).
    let events = super::events_of(&env.control.events, &env.ws, "retry").await;
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["schedule.fired", "schedule.failed"]);
    assert_eq!(events[1].1["attempt"], 2);
    assert_eq!(events[1].1["run_id"], run.id.as_str());
}

/// Run `id` of schedule `name` once it is in `state` (`what` names the wait in a failure).
async fn run_reaches(
    env: &Env,
    name: &str,
    id: &str,
    state: RunState,
    limit: Duration,
    what: &str,
) -> pandastack_store::RunRow {
    eventually(limit, what, || async {
        let (_, r) = env.control.schedules.run(&env.ws, name, id).await.ok()?;
        (r.state == state).then_some(r)
    })
    .await
}
