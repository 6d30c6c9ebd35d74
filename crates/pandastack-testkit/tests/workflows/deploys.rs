//! Apps' deploys from an uploaded tarball (no network): the phases a deploy goes through and
//! where it fails, the blue-green switch to a new version (a row complete from the moment it
//! reads `live`), rollback, and what becomes of the replaced version: its VM drains for
//! [`DRAIN`], then hibernates and waits for a rollback (the newest three do). The commands the
//! pipeline runs in the deploy's VM are scripted to succeed unless a test says otherwise; the server
//! "listens" when its port is scripted ([`ScriptedHost::on_port`]).

use std::time::Duration;

use pandastack_api_types::{CreateAppRequest, DeployState, RollbackRequest, SandboxState};
use pandastack_host::VmState;
use pandastack_store::DeployRow;
use pandastack_testkit::script::{Op, Reply, ScriptedHost};

use super::{events_of, eventually, Env, DRAIN};

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

/// Uploads the project as a deploy of `web`; the queued row.
async fn upload(env: &Env) -> DeployRow {
    let body = futures::stream::once(async { Ok::<_, std::io::Error>(project()) });
    env.control
        .apps
        .deploy_upload(&env.ws, "web", body)
        .await
        .unwrap()
}

/// Uploads the project as a deploy of `web` and waits for its job to end; its final row.
async fn deploy(env: &Env) -> DeployRow {
    let queued = upload(env).await;
    job_ended(env, &queued.id).await
}

/// Waits for the job of deploy `id` to end; the deploy's final row.
async fn job_ended(env: &Env, id: &str) -> DeployRow {
    eventually(Duration::from_secs(15), "the deploy's job ends", || async {
        let job = env
            .store
            .jobs()
            .incomplete(&format!("deploy:{id}"))
            .await
            .unwrap();
        job.is_none().then_some(())
    })
    .await;
    env.store.apps().deploy(id).await.unwrap()
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

/// Rolls `web` back to deploy `id` (`None`: the newest standby one); the deploy now live.
async fn rollback(env: &Env, id: Option<&str>) -> DeployRow {
    env.control
        .apps
        .rollback(
            &env.ws,
            "web",
            &RollbackRequest {
                deploy_id: id.map(str::to_owned),
            },
        )
        .await
        .unwrap()
}

/// How many calls of `op` the host had for sandbox `sb`.
fn calls_on(env: &Env, op: Op, sb: &str) -> usize {
    env.host
        .calls()
        .iter()
        .filter(|(o, id)| *o == op && id == sb)
        .count()
}

/// Waits for sandbox `sb` to hibernate; when it did (its row's last activity, which the
/// hibernation sets, in ms since the epoch).
async fn hibernated_at(env: &Env, sb: &str) -> i64 {
    eventually(
        DRAIN + Duration::from_secs(10),
        &format!("{sb} hibernates"),
        || async {
            let row = env.row(sb).await?;
            (row.state == SandboxState::Hibernated).then_some(row.last_activity_at)
        },
    )
    .await
}

/// Deploy `id`, which must be on standby, and how long after it was replaced (its row's
/// `updated_at`, which the switch sets) sandbox `sb` hibernated, `at`.
async fn drained(env: &Env, id: &str, at: i64) -> (DeployRow, Duration) {
    let d = env.store.apps().deploy(id).await.unwrap();
    assert_eq!(d.state, DeployState::Standby, "{d:?}");
    let ms = u64::try_from(at - d.updated_at).unwrap_or_else(|_| {
        panic!(
            "{id} hibernated {} ms before it was replaced",
            d.updated_at - at
        )
    });
    (d, Duration::from_millis(ms))
}

/// Whether the host ran `command` (exactly) in sandbox `sb`.
fn ran(env: &Env, sb: &str, command: &str) -> bool {
    env.host
        .exec_log()
        .iter()
        .any(|(s, c)| s == sb && c == command)
}

/// An app deployed twice: the second version live, the first on standby.
struct TwoVersions {
    env: Env,
    first: DeployRow,
    second: DeployRow,
    /// The first version's VM.
    old_vm: String,
    /// The second version's VM.
    new_vm: String,
}

async fn two_versions() -> TwoVersions {
    let env = app_env().await;
    create_app(&env).await;
    let first = deploy(&env).await;
    let second = deploy(&env).await;
    TwoVersions {
        old_vm: first.sandbox_id.clone().unwrap(),
        new_vm: second.sandbox_id.clone().unwrap(),
        env,
        first,
        second,
    }
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
    // Each phase it entered, then live: events of the app.
    let events = events_of(&env.control.events, &env.ws, "web").await;
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|(t, d)| (t.as_str(), d["phase"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        seen,
        [
            ("deploy.phase", "cloning"),
            ("deploy.phase", "building"),
            ("deploy.phase", "baking"),
            ("deploy.phase", "checking"),
            ("deploy.live", ""),
        ]
    );
    assert_eq!(events[4].1["deploy_id"], d.id.as_str());
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
    let events = events_of(&env.control.events, &env.ws, "web").await;
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "deploy.failed");
    assert!(
        data["error"].as_str().unwrap().contains("exit code 2"),
        "{data}"
    );
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
    let events = events_of(&env.control.events, &env.ws, "web").await;
    let (last, data) = events.last().unwrap();
    assert_eq!(last, "deploy.rolled_back");
    assert_eq!(
        (data["deploy_id"].as_str(), data["previous"].as_str()),
        (Some(first.id.as_str()), Some(second.id.as_str()))
    );
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

/// After a switch the replaced version keeps its VM, running for the drain so requests in
/// flight finish, then hibernated (once, not destroyed, its idle timeout off: it waits for a
/// rollback); the live version's VM is left alone.
#[tokio::test(flavor = "multi_thread")]
async fn the_replaced_version_hibernates_after_the_drain_and_not_before() {
    let TwoVersions {
        env,
        first,
        second,
        old_vm,
        new_vm,
    } = two_versions().await;
    assert_eq!(second.state, DeployState::Live, "{:?}", second.error);

    let at = hibernated_at(&env, &old_vm).await;
    let (first, after) = drained(&env, &first.id, at).await;
    assert!(after >= DRAIN, "hibernated {after:?} after the switch");
    assert_eq!(first.sandbox_id.as_deref(), Some(old_vm.as_str()));
    assert_eq!(env.host.vm_state(&old_vm), Some(VmState::Hibernated));
    assert_eq!(calls_on(&env, Op::Hibernate, &old_vm), 1);
    assert_eq!(calls_on(&env, Op::Destroy, &old_vm), 0);
    assert_eq!(env.row(&old_vm).await.unwrap().idle_timeout_seconds, None);

    assert_eq!(live(&env).await.as_deref(), Some(second.id.as_str()));
    assert_eq!(env.host.vm_state(&new_vm), Some(VmState::Running));
    assert_eq!(calls_on(&env, Op::Hibernate, &new_vm), 0);
}

/// A rollback to a hibernated version wakes its VM and switches back to it; the version it
/// replaces drains and hibernates the same way, and the woken one stays running.
#[tokio::test(flavor = "multi_thread")]
async fn rollback_wakes_the_hibernated_version_and_the_replaced_one_drains() {
    let TwoVersions {
        env,
        first,
        second,
        old_vm,
        new_vm,
    } = two_versions().await;
    hibernated_at(&env, &old_vm).await;
    assert_eq!(calls_on(&env, Op::Wake, &old_vm), 0);

    let back = rollback(&env, None).await;
    assert_eq!(
        (back.id.as_str(), back.state),
        (first.id.as_str(), DeployState::Live)
    );
    assert_eq!(live(&env).await.as_deref(), Some(first.id.as_str()));
    assert_eq!(calls_on(&env, Op::Wake, &old_vm), 1);
    assert_eq!(env.host.vm_state(&old_vm), Some(VmState::Running));
    let woken = env.row(&old_vm).await.unwrap();
    assert_eq!(woken.state, SandboxState::Running);
    assert!(
        woken.idle_timeout_seconds.is_some(),
        "a live app's VM scales to zero when idle"
    );

    let at = hibernated_at(&env, &new_vm).await;
    let (_, after) = drained(&env, &second.id, at).await;
    assert!(after >= DRAIN, "hibernated {after:?} after the rollback");
    assert_eq!(calls_on(&env, Op::Hibernate, &new_vm), 1);
    assert_eq!(env.host.vm_state(&old_vm), Some(VmState::Running));
    assert_eq!(
        calls_on(&env, Op::Hibernate, &old_vm),
        1,
        "only its first drain"
    );
}

/// A rollback within the drain returns to a VM still running (nothing to wake), and the
/// drain's end, when it comes, leaves the version that is live again alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_within_the_drain_keeps_the_version_it_returns_to_running() {
    let TwoVersions {
        env,
        first,
        second,
        old_vm,
        new_vm,
    } = two_versions().await;
    assert_eq!(
        calls_on(&env, Op::Hibernate, &old_vm),
        0,
        "the test came to its rollback after the drain"
    );

    let back = rollback(&env, None).await;
    assert_eq!(back.id, first.id);
    assert_eq!(calls_on(&env, Op::Wake, &old_vm), 0);
    // The second version's drain ends after the first's would have.
    let at = hibernated_at(&env, &new_vm).await;
    let (_, after) = drained(&env, &second.id, at).await;
    assert!(after >= DRAIN, "hibernated {after:?} after the rollback");
    assert_eq!(calls_on(&env, Op::Hibernate, &old_vm), 0);
    assert_eq!(env.host.vm_state(&old_vm), Some(VmState::Running));
    assert_eq!(live(&env).await.as_deref(), Some(first.id.as_str()));
}

/// A version replaced, live again and replaced again within one drain gets a whole drain from
/// its last replacement: the end of the first drain does not hibernate it under the requests
/// it took meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_replaced_twice_within_a_drain_drains_from_the_last_switch() {
    let TwoVersions {
        env,
        first,
        second,
        old_vm,
        ..
    } = two_versions().await;
    assert_eq!(rollback(&env, None).await.id, first.id);
    tokio::time::sleep(DRAIN / 2).await;
    assert_eq!(
        calls_on(&env, Op::Hibernate, &old_vm),
        0,
        "the test came to its second switch after the first drain"
    );
    assert_eq!(rollback(&env, Some(&second.id)).await.id, second.id);

    let at = hibernated_at(&env, &old_vm).await;
    let (_, after) = drained(&env, &first.id, at).await;
    assert!(
        after >= DRAIN,
        "hibernated {after:?} after its last replacement"
    );
    assert_eq!(calls_on(&env, Op::Hibernate, &old_vm), 1);
}

/// Standby versions keep their (hibernated) VMs for a rollback, the newest three of them: an
/// older one's VM is removed and its row says it has none.
#[tokio::test(flavor = "multi_thread")]
async fn only_the_three_newest_standby_versions_keep_their_vms() {
    let env = app_env().await;
    create_app(&env).await;
    let mut deploys = Vec::new();
    for _ in 0..5 {
        let d = deploy(&env).await;
        assert_eq!(d.state, DeployState::Live, "{:?}", d.error);
        deploys.push(d);
    }
    let vms: Vec<String> = deploys
        .iter()
        .map(|d| d.sandbox_id.clone().unwrap())
        .collect();
    eventually(
        DRAIN + Duration::from_secs(10),
        "the oldest version's VM is removed",
        || async { env.host.vm(&vms[0]).is_none().then_some(()) },
    )
    .await;
    for vm in &vms[1..4] {
        hibernated_at(&env, vm).await;
    }
    let oldest = eventually(
        Duration::from_secs(5),
        "the oldest version's row has no VM",
        || async {
            let d = env.store.apps().deploy(&deploys[0].id).await.unwrap();
            d.sandbox_id.is_none().then_some(d)
        },
    )
    .await;
    assert_eq!(oldest.state, DeployState::Standby);
    assert!(env.row(&vms[0]).await.is_none());
    assert_eq!(calls_on(&env, Op::Destroy, &vms[0]), 1);
    for (d, vm) in deploys[1..4].iter().zip(&vms[1..4]) {
        let d = env.store.apps().deploy(&d.id).await.unwrap();
        assert_eq!(d.state, DeployState::Standby);
        assert_eq!(d.sandbox_id.as_deref(), Some(vm.as_str()));
        assert_eq!(env.host.vm_state(vm), Some(VmState::Hibernated));
    }
    assert_eq!(env.host.vm_state(&vms[4]), Some(VmState::Running));
    assert_eq!(env.host.vm_ids().len(), 4, "{:?}", env.host.vm_ids());
}

/// A reader that finds a deploy `live` finds its row complete: the switch's transaction is the
/// pipeline's last write of it, so the `switch` time (and every other field) is there from the
/// first read that says `live`. Each of three deploys is read as fast as the control plane
/// answers from the moment it is queued (the window, when there was one, was a few
/// milliseconds: one deploy in four slipped through it).
#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_read_the_moment_it_turns_live_is_complete() {
    let env = app_env().await;
    create_app(&env).await;
    for _ in 0..3 {
        let queued = upload(&env).await;
        let started = std::time::Instant::now();
        let first_live = loop {
            let (_, d) = env
                .control
                .apps
                .deploy_row(&env.ws, "web", &queued.id)
                .await
                .unwrap();
            if d.state == DeployState::Live {
                break d;
            }
            assert!(
                d.state.active(),
                "the deploy ended {:?}: {:?}",
                d.state,
                d.error
            );
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the deploy is still {:?}",
                d.state
            );
            tokio::task::yield_now().await;
        };
        assert!(
            first_live.phases.get("switch").is_some_and(|v| v.is_u64()),
            "read live without its switch time: {}",
            first_live.phases
        );
        let last = job_ended(&env, &queued.id).await;
        assert_eq!(first_live.phases, last.phases);
        assert_eq!(first_live.plan, last.plan);
        assert_eq!(first_live.commit_sha, last.commit_sha);
        assert_eq!(first_live.sandbox_id, last.sandbox_id);
    }
}
