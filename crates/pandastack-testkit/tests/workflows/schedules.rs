//! The scheduler: each due time of a cron schedule fires once — across a restart (a control
//! plane shut down and a new one over the same store) and with two schedulers of one host
//! running side by side. The schedules here are due every second (`* * * * * *`).

use std::collections::BTreeMap;
use std::time::Duration;

use pandastack_api_types::{ConcurrencyPolicy, RunState, RunTrigger};
use pandastack_store::RunRow;
use pandastack_testkit::script::Reply;

use super::{eventually, schedule, Env};

const EVERY_SECOND: &str = "* * * * * *";

async fn runs(env: &Env, name: &str) -> Vec<RunRow> {
    let (_, mut runs) = env
        .control
        .schedules
        .runs(&env.ws, name, None, 500)
        .await
        .unwrap();
    runs.sort_by_key(|r| r.due_at);
    runs
}

/// Every due time from the first run's to the last one's has exactly one run row (run,
/// missed or skipped, none twice) and each is on a whole second.
fn one_run_per_due_time(runs: &[RunRow]) {
    let mut by_due: BTreeMap<i64, Vec<&RunRow>> = BTreeMap::new();
    for r in runs {
        assert_eq!(r.trigger, RunTrigger::Scheduled);
        by_due.entry(r.due_at).or_default().push(r);
    }
    let twice: Vec<_> = by_due.iter().filter(|(_, v)| v.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "due times fired more than once: {twice:?}"
    );
    let dues: Vec<i64> = by_due.keys().copied().collect();
    for d in &dues {
        assert_eq!(d % 1000, 0, "due time {d} is not on a second");
    }
    for w in dues.windows(2) {
        assert_eq!(
            w[1] - w[0],
            1000,
            "a due time between {} and {} has no run",
            w[0],
            w[1]
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cron_fires_each_due_time_once_across_a_restart() {
    let env = Env::new().await;
    env.host.on_exec("tick", Reply::ok("tock\n"));
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("tick", EVERY_SECOND, "tick", ConcurrencyPolicy::Allow),
        )
        .await
        .unwrap();
    env.control.recover().await.unwrap();
    env.control.start();
    eventually(
        Duration::from_secs(10),
        "two runs before the restart",
        || async {
            let ok = runs(&env, "tick")
                .await
                .iter()
                .filter(|r| r.state == RunState::Succeeded)
                .count();
            (ok >= 2).then_some(())
        },
    )
    .await;
    env.control.shutdown(false).await;
    let before = runs(&env, "tick").await;
    let last_before = before.last().unwrap().due_at;

    // Down for a while: due times pass with no scheduler.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let restarted = env.another_plane();
    restarted.recover().await.unwrap();
    restarted.start();
    let all = eventually(
        Duration::from_secs(10),
        "two runs after the restart",
        || async {
            let all = runs(&env, "tick").await;
            let after = all
                .iter()
                .filter(|r| r.due_at > last_before + 3000 && r.state == RunState::Succeeded)
                .count();
            (after >= 2).then_some(all)
        },
    )
    .await;
    restarted.shutdown(false).await;
    let all_now = runs(&env, "tick").await;
    assert!(all_now.len() >= all.len());
    one_run_per_due_time(&all_now);
    // The due times missed while down: the latest of them ran, the older are recorded missed.
    let missed: Vec<_> = all_now
        .iter()
        .filter(|r| r.state == RunState::Missed)
        .collect();
    assert!(
        !missed.is_empty(),
        "no missed due time recorded: {all_now:?}"
    );
    for m in &missed {
        assert!(m.due_at > last_before, "{m:?}");
        assert_eq!(
            m.error.as_deref(),
            Some("missed: a later due time was due too (the server was not running)")
        );
    }
    // Runs before the restart kept their rows: none fired again.
    for b in &before {
        assert!(all_now.iter().any(|r| r.id == b.id));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_schedulers_of_one_host_fire_each_due_time_once() {
    let env = Env::new().await;
    env.host.on_exec("tick", Reply::ok(""));
    env.control
        .schedules
        .create(
            &env.ws,
            &schedule("both", EVERY_SECOND, "tick", ConcurrencyPolicy::Allow),
        )
        .await
        .unwrap();
    let second = env.another_plane();
    env.control.start();
    second.start();
    let fired = eventually(Duration::from_secs(10), "four due times", || async {
        let r = runs(&env, "both").await;
        (r.len() >= 4).then_some(r)
    })
    .await;
    env.control.shutdown(false).await;
    second.shutdown(false).await;
    assert!(fired.len() >= 4);
    one_run_per_due_time(&runs(&env, "both").await);
}
