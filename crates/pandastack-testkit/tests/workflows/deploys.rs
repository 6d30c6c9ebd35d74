//! Apps' deploys from an uploaded tarball (no network): the phases a deploy goes through and
//! where it fails, the blue-green switch to a new version, and rollback. The commands the
//! pipeline runs in the deploy's VM are scripted to succeed unless a test says otherwise; the server
//! "listens" when its port is scripted ([`ScriptedHost::on_port`]).

use std::time::Duration;

use pandastack_api_types::{CreateAppRequest, DeployState, RollbackRequest};
use pandastack_store::DeployRow;
use pandastack_testkit::script::{Reply, ScriptedHost};

use super::{eventually, Env};

/// The app's server port (the request names it).
const PORT: u16 = 3000;
/// The app's build command (the request names it).
const BUILD: &str = "npm run build";

/// An environment whose host has the `app` template, the VM commands of a deploy succeeding
/// (others, such as the dependency cache's packing, exit 127: only logged), the app's port
/// answering `200` (the environment's control plane gives a new server 2 s to listen and 2 s
/// to be healthy).
pub(super) async fn app_env() -> Env {
    let env = Env::with_host(20, 100, ScriptedHost::with_catalog(&["base", "app"])).await;
    for command in [
        // The source unpacked in the VM.
        "mkdir -p /app && tar -xzf ",
        // Install (a project without a lockfile), the build, the page cache dropped.
        "npm install",
        BUILD,
        "sync && echo 3 > /proc/sys/vm/drop_caches",
        // The server started in its own session, and the end of its log read.
        "setsid -f /bin/sh -c ",
        "tail -c 1500 ",
    ] {
        env.host.on_exec_prefix(command, Reply::ok(""));
    }
    // A function's runtime that could not import its handler would say so in its log.
    env.host
        .on_exec_prefix("grep -q pandastack: cannot import", Reply::exit(1));
    env.host.on_port(PORT, Some(200));
    env.control.start();
    env
}

/// Creates app `web` (no deploy yet).
async fn create_app(env: &Env) {
    let req: CreateAppRequest = serde_json::from_value(serde_json::json!({
        "name": "web",
        "git": { "url": "https://example.com/web.git" },
        "build": { "command": BUILD },
        "start": { "command": "node server.js", "port": PORT },
        "deploy": false,
    }))
    .unwrap();
    env.control.apps.create(&env.ws, &req).await.unwrap();
}

/// A gzip tarball of a small Node project.
fn project() -> bytes::Bytes {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(
        src.join("package.json"),
        r#"{"name":"web","version":"1.0.0","scripts":{"build":"echo built","start":"node server.js"}}"#,
    )
    .unwrap();
    std::fs::write(
        src.join("server.js"),
        "require('http').createServer((q, s) => s.end('hi')).listen(3000);\n",
    )
    .unwrap();
    let tarball = dir.path().join("upload.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar: {status}");
    std::fs::read(&tarball).unwrap().into()
}

/// Uploads the project as a deploy of `web` and waits for it to end; its final row.
/// (Its job's end, not `deploy_ended`: the row reads `live` from the switch's transaction, a
/// moment before the pipeline's last write of it, its `switch` time.)
async fn deploy(env: &Env) -> DeployRow {
    let body = futures::stream::once(async { Ok::<_, std::io::Error>(project()) });
    let queued = env
        .control
        .apps
        .deploy_upload(&env.ws, "web", body)
        .await
        .unwrap();
    eventually(Duration::from_secs(15), "the deploy's job ends", || async {
        let job = env
            .store
            .jobs()
            .incomplete(&format!("deploy:{}", queued.id))
            .await
            .unwrap();
        job.is_none().then_some(())
    })
    .await;
    env.store.apps().deploy(&queued.id).await.unwrap()
}

/// The id of `web`'s live deploy.
async fn live(env: &Env) -> Option<String> {
    let (app, _) = env
        .control
        .apps
        .deploys(&env.ws, "web", None, 1)
        .await
        .unwrap();
    app.live_deploy_id
}

/// Whether the host ran `command` (exactly) in sandbox `sb`.
fn ran(env: &Env, sb: &str, command: &str) -> bool {
    env.host
        .exec_log()
        .iter()
        .any(|(s, c)| s == sb && c == command)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_deploy_goes_live_with_every_phase_timed() {
    let env = app_env().await;
    create_app(&env).await;
    let d = deploy(&env).await;
    assert_eq!(d.state, DeployState::Live, "{:?}", d.error);
    assert_eq!(live(&env).await.as_deref(), Some(d.id.as_str()));
    let sb = d.sandbox_id.clone().expect("the live deploy keeps its VM");
    assert!(env.host.vm(&sb).is_some(), "VM {sb} is not on the host");
    for step in ["npm install", BUILD] {
        assert!(ran(&env, &sb, step), "{:?}", env.host.exec_log());
    }
    for phase in [
        "clone",
        "vm",
        "build",
        "build_total",
        "bake",
        "check",
        "switch",
    ] {
        assert!(
            d.phases.get(phase).is_some_and(|v| v.is_u64()),
            "no {phase} in {}",
            d.phases
        );
    }
    assert_eq!(d.plan.as_ref().unwrap()["port"], PORT);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_build_fails_the_deploy_in_the_build_phase_and_removes_its_vm() {
    let env = app_env().await;
    env.host
        .on_exec(BUILD, Reply::exit(2).stderr("ERR! it broke\n"));
    create_app(&env).await;
    let d = deploy(&env).await;
    assert_eq!(d.state, DeployState::Failed);
    let error = d.error.unwrap_or_default();
    assert!(
        error.starts_with(&format!("build ({BUILD}) failed with exit code 2")),
        "{error}"
    );
    assert!(error.contains("ERR! it broke"), "{error}");
    assert_eq!(d.sandbox_id, None);
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
    // It never got to start its server.
    assert!(
        !d.phases.as_object().unwrap().contains_key("bake"),
        "{}",
        d.phases
    );
    assert_eq!(live(&env).await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_never_listens_fails_the_start_phase() {
    let env = app_env().await;
    env.host.on_port(PORT, None);
    env.host
        .on_exec_prefix("tail -c", Reply::ok("server crashed\n"));
    create_app(&env).await;
    let d = deploy(&env).await;
    assert_eq!(d.state, DeployState::Failed);
    let error = d.error.unwrap_or_default();
    assert!(
        error.starts_with(&format!("nothing listened on port {PORT} within 2s")),
        "{error}"
    );
    assert!(error.ends_with("server crashed\n"), "{error}");
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
    assert_eq!(live(&env).await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unhealthy_server_fails_the_health_phase() {
    let env = app_env().await;
    env.host.on_port(PORT, Some(500));
    create_app(&env).await;
    let d = deploy(&env).await;
    assert_eq!(d.state, DeployState::Failed);
    let error = d.error.unwrap_or_default();
    assert!(
        error.starts_with(&format!("health check GET / on port {PORT}: HTTP 500")),
        "{error}"
    );
    // It started (bake timed), then failed its check.
    assert!(d.phases.get("bake").is_some(), "{}", d.phases);
    assert!(d.phases.get("check").is_none(), "{}", d.phases);
    assert!(env.host.vm_ids().is_empty(), "{:?}", env.host.vm_ids());
    assert_eq!(live(&env).await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_deploy_replaces_the_first_which_stays_on_standby() {
    let env = app_env().await;
    create_app(&env).await;
    let first = deploy(&env).await;
    let second = deploy(&env).await;
    assert_eq!(second.state, DeployState::Live, "{:?}", second.error);
    assert_eq!(live(&env).await.as_deref(), Some(second.id.as_str()));
    let first = env.store.apps().deploy(&first.id).await.unwrap();
    // The previous version is kept (its VM hibernates after a drain) for a rollback.
    assert_eq!(first.state, DeployState::Standby);
    let old_vm = first.sandbox_id.expect("a standby version keeps its VM");
    assert!(env.host.vm(&old_vm).is_some(), "{:?}", env.host.vm_ids());
    assert_ne!(Some(old_vm), second.sandbox_id);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_second_deploy_leaves_the_first_live() {
    let env = app_env().await;
    create_app(&env).await;
    let first = deploy(&env).await;
    assert_eq!(first.state, DeployState::Live, "{:?}", first.error);
    env.host.on_exec(BUILD, Reply::exit(1));
    let second = deploy(&env).await;
    assert_eq!(second.state, DeployState::Failed);
    assert_eq!(live(&env).await.as_deref(), Some(first.id.as_str()));
    let first_now = env.store.apps().deploy(&first.id).await.unwrap();
    assert_eq!(first_now.state, DeployState::Live);
    assert_eq!(env.host.vm_ids(), vec![first.sandbox_id.unwrap()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn rollback_makes_the_previous_deploy_live_again() {
    let env = app_env().await;
    create_app(&env).await;
    let first = deploy(&env).await;
    let second = deploy(&env).await;
    assert_eq!(live(&env).await.as_deref(), Some(second.id.as_str()));
    let back = env
        .control
        .apps
        .rollback(&env.ws, "web", &RollbackRequest { deploy_id: None })
        .await
        .unwrap();
    assert_eq!(back.id, first.id);
    assert_eq!(back.state, DeployState::Live);
    assert_eq!(live(&env).await.as_deref(), Some(first.id.as_str()));
    let second = env.store.apps().deploy(&second.id).await.unwrap();
    assert_eq!(second.state, DeployState::Standby);
    // The rolled-back-to VM serves again; nothing was rebuilt.
    assert!(env.host.vm(first.sandbox_id.as_deref().unwrap()).is_some());
    let (_, all) = env
        .control
        .apps
        .deploys(&env.ws, "web", None, 10)
        .await
        .unwrap();
    assert_eq!(all.len(), 2);
}
