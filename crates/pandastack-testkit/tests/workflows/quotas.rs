//! Workspace limits at their edges: the sandbox limit under concurrent creates, the create
//! rate (refused with a retry-after), the snapshot count, and a failed create giving its place
//! back.

use std::time::Duration;

use pandastack_api_types::CreateSandboxRequest;
use pandastack_control::ControlError;
use pandastack_host::HostError;
use pandastack_store::{StorageQuotas, StoreError};
use pandastack_testkit::script::Op;

use super::Env;

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_limit_holds_under_concurrent_creates() {
    let env = Env::with_limits(3, 100).await;
    // Slow creates: every request is past its checks before the first VM exists.
    env.host
        .delay_next(Op::Create, 10, Duration::from_millis(200));
    let req = CreateSandboxRequest::default();
    let results =
        futures::future::join_all((0..10).map(|_| env.control.sandboxes.create(&env.ws, &req)))
            .await;
    let mut made = 0;
    for r in results {
        match r {
            Ok(_) => made += 1,
            Err(ControlError::Store(StoreError::LimitReached { limit })) => assert_eq!(limit, 3),
            Err(e) => panic!("want LimitReached: {e:?}"),
        }
    }
    assert_eq!(made, 3);
    assert_eq!(env.host.vm_ids().len(), 3);
    assert_eq!(
        env.host.count(Op::Create),
        3,
        "no VM started past the limit"
    );
    assert_eq!(
        env.store.sandboxes().count_active(&env.ws).await.unwrap(),
        3
    );
}

#[tokio::test]
async fn the_create_rate_refuses_with_a_retry_after() {
    let env = Env::with_limits(20, 2).await;
    env.create(CreateSandboxRequest::default()).await;
    env.create(CreateSandboxRequest::default()).await;
    let e = env
        .control
        .sandboxes
        .create(&env.ws, &CreateSandboxRequest::default())
        .await
        .unwrap_err();
    match e {
        ControlError::Store(StoreError::RateLimited {
            limit,
            retry_after_secs,
        }) => {
            assert_eq!(limit, 2);
            assert!((55..=60).contains(&retry_after_secs), "{retry_after_secs}");
        }
        e => panic!("want RateLimited: {e:?}"),
    }
    assert_eq!(env.host.count(Op::Create), 2);
    assert_eq!(
        env.store.sandboxes().count_active(&env.ws).await.unwrap(),
        2
    );
}

#[tokio::test]
async fn the_snapshot_limit_refuses_the_next_snapshot() {
    let env = Env::new().await;
    env.store
        .quotas()
        .set_all(&StorageQuotas {
            max_snapshots: 1,
            ..env.store.quotas().get(&env.ws).await.unwrap()
        })
        .await
        .unwrap();
    let sb = env.create(CreateSandboxRequest::default()).await;
    let (sb, snap) = env
        .control
        .snapshots
        .snapshot(sb, &pandastack_store::new_id("snap-"))
        .await
        .unwrap();
    assert_eq!(snap.sandbox_id, sb.id);
    let e = env
        .control
        .snapshots
        .snapshot(sb, &pandastack_store::new_id("snap-"))
        .await
        .unwrap_err();
    match e {
        ControlError::Store(StoreError::CountLimit { what, limit }) => {
            assert_eq!((what, limit), ("snapshots", 1));
        }
        e => panic!("want CountLimit: {e:?}"),
    }
    assert_eq!(env.host.count(Op::Snapshot), 1, "the host was not asked");
    assert_eq!(env.host.snapshot_ids().len(), 1);
}

#[tokio::test]
async fn a_failed_create_gives_its_place_back() {
    let env = Env::with_limits(1, 100).await;
    env.host.fail_next(Op::Create, 1, |id| {
        HostError::failed("create", format!("scripted: {id} did not boot"))
    });
    let e = env
        .control
        .sandboxes
        .create(&env.ws, &CreateSandboxRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, ControlError::Host(HostError::Failed { .. })),
        "{e:?}"
    );
    assert_eq!(
        env.store.sandboxes().count_active(&env.ws).await.unwrap(),
        0
    );
    // The one place is free: the next create gets it.
    let sb = env.create(CreateSandboxRequest::default()).await;
    assert_eq!(
        env.host.vm_state(&sb.id),
        Some(pandastack_host::VmState::Running)
    );
}
