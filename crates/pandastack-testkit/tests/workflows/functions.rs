//! Functions' versions from inline files (no network): a new version is baked (its VM
//! snapshotted and removed) and goes live, a version whose handler cannot be imported leaves
//! the previous one live, and rollback to a version by its number.

use std::time::Duration;

use pandastack_api_types::{
    CreateFunctionRequest, CreateVersionRequest, DeployState, FunctionRollbackRequest,
};
use pandastack_control::apps::function::FUNCTION_PORT;
use pandastack_store::DeployRow;
use pandastack_testkit::script::{Op, Reply};

use super::deploys::app_env;
use super::{eventually, Env};

/// Creates function `hello` (Python, inline) and waits for version 1 to end.
async fn create(env: &Env) -> DeployRow {
    let req: CreateFunctionRequest = serde_json::from_value(serde_json::json!({
        "name": "hello",
        "runtime": "python",
        "handler": "main.handler",
        "files": { "main.py": "def handler(event):\n    return event\n" },
    }))
    .unwrap();
    let (_, d) = env
        .control
        .functions
        .create_function(&env.ws, &req)
        .await
        .unwrap();
    ended(env, d).await
}

/// Queues a new version of `hello` with `handler` and waits for it to end.
async fn new_version(env: &Env, handler: &str) -> DeployRow {
    let req: CreateVersionRequest = serde_json::from_value(serde_json::json!({
        "handler": handler,
        "files": { "main.py": "def handler(event):\n    return event\n" },
    }))
    .unwrap();
    let d = env
        .control
        .functions
        .create_version(&env.ws, "hello", &req)
        .await
        .unwrap();
    ended(env, d).await
}

/// Waits for version `d`'s job to end (see `deploys::deploy`); its final row.
async fn ended(env: &Env, d: DeployRow) -> DeployRow {
    eventually(
        Duration::from_secs(15),
        "the version's job ends",
        || async {
            let job = env
                .store
                .jobs()
                .incomplete(&format!("deploy:{}", d.id))
                .await
                .unwrap();
            job.is_none().then_some(())
        },
    )
    .await;
    env.store.apps().deploy(&d.id).await.unwrap()
}

/// The live version of `hello`.
async fn live_version(env: &Env) -> Option<u64> {
    env.control
        .functions
        .function(&env.ws, "hello")
        .await
        .unwrap()
        .live_version
}

/// An environment whose function runtime listens on its port.
async fn fn_env() -> Env {
    let env = app_env().await;
    env.host.on_port(FUNCTION_PORT, Some(200));
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_is_baked_and_goes_live() {
    let env = fn_env().await;
    let v1 = create(&env).await;
    assert_eq!(v1.state, DeployState::Live, "{:?}", v1.error);
    assert_eq!(live_version(&env).await, Some(1));
    let v2 = new_version(&env, "main.handler").await;
    assert_eq!(v2.state, DeployState::Live, "{:?}", v2.error);
    assert_eq!(live_version(&env).await, Some(2));
    let v1 = env.store.apps().deploy(&v1.id).await.unwrap();
    assert_eq!(v1.state, DeployState::Standby);
    // Each version is a snapshot; its build VM is gone.
    let snaps = env.host.snapshot_ids();
    for v in [&v1, &v2] {
        assert!(snaps.contains(&format!("fnsnap-{}", v.id)), "{snaps:?}");
        assert_eq!(v.sandbox_id, None);
        assert!(v.phases.get("snapshot").is_some(), "{}", v.phases);
    }
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
    assert_eq!(env.host.count(Op::Snapshot), 2);
    let live: Vec<_> = super::events_of(&env.control.events, &env.ws, "hello")
        .await
        .into_iter()
        .filter(|(t, _)| t == "function.version_live")
        .map(|(_, d)| d["version"].as_i64().unwrap())
        .collect();
    assert_eq!(live, [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_version_whose_handler_fails_to_import_leaves_the_previous_live() {
    let env = fn_env().await;
    let v1 = create(&env).await;
    assert_eq!(v1.state, DeployState::Live, "{:?}", v1.error);
    // The runtime of the next version says it cannot import the handler and never listens.
    env.host.on_port(FUNCTION_PORT, None);
    env.host
        .on_exec_prefix("grep -q pandastack: cannot import", Reply::exit(0));
    env.host.on_exec_prefix(
        "tail -c",
        Reply::ok("pandastack: cannot import the handler main.nope\n"),
    );
    let v2 = new_version(&env, "main.nope").await;
    assert_eq!(v2.state, DeployState::Failed);
    let error = v2.error.unwrap_or_default();
    assert!(
        error.starts_with("the handler could not be imported"),
        "{error}"
    );
    assert!(error.contains("main.nope"), "{error}");
    assert_eq!(live_version(&env).await, Some(1));
    assert_eq!(
        env.store.apps().deploy(&v1.id).await.unwrap().state,
        DeployState::Live
    );
    assert!(!env
        .host
        .snapshot_ids()
        .contains(&format!("fnsnap-{}", v2.id)));
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
}

#[tokio::test(flavor = "multi_thread")]
async fn rollback_to_version_one_makes_it_live_again() {
    let env = fn_env().await;
    let v1 = create(&env).await;
    new_version(&env, "main.handler").await;
    let v3 = new_version(&env, "main.handler").await;
    assert_eq!(live_version(&env).await, Some(3));
    let back = env
        .control
        .functions
        .rollback_function(
            &env.ws,
            "hello",
            &FunctionRollbackRequest { version: Some(1) },
        )
        .await
        .unwrap();
    assert_eq!(back.id, v1.id);
    assert_eq!(back.state, DeployState::Live);
    assert_eq!(live_version(&env).await, Some(1));
    let events = super::events_of(&env.control.events, &env.ws, "hello").await;
    let tail: Vec<(&str, i64)> = events[events.len() - 2..]
        .iter()
        .map(|(t, d)| (t.as_str(), d["version"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        tail,
        [("deploy.rolled_back", 1), ("function.version_live", 1)]
    );
    assert_eq!(
        env.store.apps().deploy(&v3.id).await.unwrap().state,
        DeployState::Standby
    );
    // Nothing was rebuilt: still three versions, three bakes.
    assert_eq!(env.host.count(Op::Snapshot), 3);
    let versions = env
        .control
        .functions
        .versions(&env.ws, "hello", None, 10)
        .await
        .unwrap();
    assert_eq!(versions.len(), 3);
}
