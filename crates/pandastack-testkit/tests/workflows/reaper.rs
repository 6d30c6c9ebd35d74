//! The reaper (it ticks every 2 s): a TTL that runs out kills, an idle timeout hibernates, a
//! hibernation the workspace's quota has no room for waits until it has, and one the host
//! fails is tried again.

use std::time::Duration;

use pandastack_api_types::{CreateSandboxRequest, OnTimeout, SandboxState};
use pandastack_host::{ExecSpec, HostError, VmState};
use pandastack_store::StorageQuotas;
use pandastack_testkit::script::{Op, Reply};

use super::{eventually, Env};

const REAP: Duration = Duration::from_secs(8);

#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_that_runs_out_kills_the_sandbox() {
    let env = Env::new().await;
    let doomed = env
        .create(CreateSandboxRequest {
            ttl_seconds: Some(1),
            ..Default::default()
        })
        .await;
    let kept = env.create(CreateSandboxRequest::default()).await;
    env.control.start();
    eventually(REAP, "the expired sandbox is deleted", || async {
        env.row(&doomed.id).await.is_none().then_some(())
    })
    .await;
    // Its event is written just after the row goes (not in the same transaction).
    let events = eventually(REAP, "the killed sandbox's event", || async {
        let e = super::events_of(&env.control.events, &env.ws, &doomed.id).await;
        e.iter().any(|(t, _)| t == "sandbox.killed").then_some(e)
    })
    .await;
    env.control.shutdown(false).await;
    assert_eq!(env.host.vm_state(&doomed.id), None, "its VM is gone too");
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        ["sandbox.created", "sandbox.expired", "sandbox.killed"]
    );
    assert_eq!(events[1].1["reason"], "ttl");
    assert_eq!(env.host.vm_state(&kept.id), Some(VmState::Running));
    assert_eq!(
        env.row(&kept.id).await.map(|r| r.state),
        Some(SandboxState::Running)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_timeout_hibernates_the_sandbox() {
    let env = Env::new().await;
    let idle = env
        .create(CreateSandboxRequest {
            idle_timeout_seconds: Some(1),
            on_timeout: OnTimeout::Hibernate,
            ..Default::default()
        })
        .await;
    env.control.start();
    let row = eventually(REAP, "the idle sandbox is hibernated", || async {
        let r = env.row(&idle.id).await?;
        (r.state == SandboxState::Hibernated).then_some(r)
    })
    .await;
    let events = eventually(REAP, "the hibernated sandbox's event", || async {
        let e = super::events_of(&env.control.events, &env.ws, &idle.id).await;
        e.iter()
            .any(|(t, _)| t == "sandbox.hibernated")
            .then_some(e)
    })
    .await;
    env.control.shutdown(false).await;
    assert_eq!(env.host.vm_state(&idle.id), Some(VmState::Hibernated));
    assert_eq!(env.host.count(Op::Hibernate), 1);
    assert_eq!(row.on_timeout, OnTimeout::Hibernate);
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        ["sandbox.created", "sandbox.expired", "sandbox.hibernated"]
    );
    assert_eq!(events[1].1["reason"], "idle");
    let used = env.store.quotas().used(&env.ws).await.unwrap();
    assert_eq!(used.hibernated, 1);
    assert_eq!(used.hibernated_bytes, env.host.hibernated_bytes as i64);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_in_flight_keeps_an_idle_sandbox_awake_and_its_end_restarts_the_clock() {
    let env = Env::new().await;
    // A command that uses no CPU and lasts well past the idle timeout and two reaper ticks.
    env.host
        .on_exec("sleep 6", Reply::ok("slept").delay(Duration::from_secs(6)));
    let idle = env
        .create(CreateSandboxRequest {
            idle_timeout_seconds: Some(1),
            on_timeout: OnTimeout::Hibernate,
            ..Default::default()
        })
        .await;
    env.control.start();
    let spec = ExecSpec {
        shell: "sleep 6".into(),
        ..Default::default()
    };
    let out = env.control.host().exec(&idle.id, spec).await.unwrap();
    assert_eq!(out.stdout, b"slept");
    assert_eq!(
        env.host.count(Op::Hibernate),
        0,
        "not hibernated during the call"
    );
    let row = env.row(&idle.id).await.unwrap();
    assert_eq!(row.state, SandboxState::Running);
    let ended = pandastack_store::now_ms();
    assert!(
        row.last_activity_at >= ended - 1500,
        "the call's end counts as activity: {} vs {ended}",
        row.last_activity_at
    );
    // Idle once the call is over.
    eventually(REAP, "the sandbox is hibernated after the call", || async {
        let r = env.row(&idle.id).await?;
        (r.state == SandboxState::Hibernated).then_some(())
    })
    .await;
    env.control.shutdown(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hibernation_the_quota_refuses_waits_for_room() {
    let env = Env::new().await;
    let full = StorageQuotas {
        max_hibernated: 0,
        ..env.store.quotas().get(&env.ws).await.unwrap()
    };
    env.store.quotas().set_all(&full).await.unwrap();
    let idle = env
        .create(CreateSandboxRequest {
            idle_timeout_seconds: Some(1),
            on_timeout: OnTimeout::Hibernate,
            ..Default::default()
        })
        .await;
    env.control.start();
    // Past its idle timeout and two reaper ticks: deferred, still running, the host not asked.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(env.host.count(Op::Hibernate), 0);
    assert_eq!(env.host.vm_state(&idle.id), Some(VmState::Running));
    assert_eq!(
        env.row(&idle.id).await.map(|r| r.state),
        Some(SandboxState::Running)
    );
    // Room again: the deferred hibernation happens.
    env.store
        .quotas()
        .set_all(&StorageQuotas {
            max_hibernated: 1,
            ..full
        })
        .await
        .unwrap();
    eventually(REAP, "hibernated once there is room", || async {
        let r = env.row(&idle.id).await?;
        (r.state == SandboxState::Hibernated).then_some(())
    })
    .await;
    env.control.shutdown(false).await;
    assert_eq!(env.host.vm_state(&idle.id), Some(VmState::Hibernated));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hibernation_the_host_fails_is_tried_again() {
    let env = Env::new().await;
    env.host.fail_next(Op::Hibernate, 1, |id| {
        HostError::failed("hibernate", format!("scripted: {id} would not save"))
    });
    let idle = env
        .create(CreateSandboxRequest {
            idle_timeout_seconds: Some(1),
            on_timeout: OnTimeout::Hibernate,
            ..Default::default()
        })
        .await;
    env.control.start();
    eventually(
        Duration::from_secs(10),
        "hibernated on a later tick",
        || async {
            let r = env.row(&idle.id).await?;
            (r.state == SandboxState::Hibernated).then_some(())
        },
    )
    .await;
    env.control.shutdown(false).await;
    assert_eq!(env.host.count(Op::Hibernate), 2, "one failure, one success");
    assert_eq!(env.host.vm_state(&idle.id), Some(VmState::Hibernated));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vm_that_exits_on_its_own_marks_its_sandbox_failed() {
    let env = Env::new().await;
    let sb = env.create(CreateSandboxRequest::default()).await;
    env.control.start();
    env.host.set_vm_state(&sb.id, VmState::Exited);
    eventually(REAP, "the row says failed", || async {
        let r = env.row(&sb.id).await?;
        (r.state == SandboxState::Failed).then_some(())
    })
    .await;
    env.control.shutdown(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_busy_on_its_cpu_is_not_idle() {
    let env = Env::new().await;
    let busy = env
        .create(CreateSandboxRequest {
            idle_timeout_seconds: Some(1),
            on_timeout: OnTimeout::Hibernate,
            ..Default::default()
        })
        .await;
    env.control.start();
    // The guest uses a whole CPU (as the reaper's samples of its CPU time see it) for 4.5 s:
    // past its idle timeout and two ticks, no API call, yet not idle.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(4500) {
        env.host.burn_cpu(&busy.id, Duration::from_millis(100));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.host.count(Op::Hibernate), 0);
    assert_eq!(
        env.row(&busy.id).await.map(|r| r.state),
        Some(SandboxState::Running)
    );
    // Quiet again: idle, hibernated.
    eventually(REAP, "hibernated once quiet", || async {
        let r = env.row(&busy.id).await?;
        (r.state == SandboxState::Hibernated).then_some(())
    })
    .await;
    env.control.shutdown(false).await;
}
