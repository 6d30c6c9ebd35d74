//! The host agent with real guests: auto-wake on use, fork through the agent, and a restart that
//! re-attaches running and hibernated sandboxes while removing what nobody claims.

use std::sync::Arc;
use std::time::Duration;

use pandastack_agent::{AgentConfig, AgentError, HostAgent, VmState};
use pandastack_qemu::QemuDriver;
use pandastack_testkit::{bake, exec, runtime, within, RuntimeGuard};

const STEP: Duration = Duration::from_secs(120);

fn config() -> AgentConfig {
    AgentConfig {
        // No specs: templates must be baked already (the tests bake them directly).
        templates_dir: "/nonexistent".into(),
        guest_agent: "/nonexistent".into(),
        pool_size: 1,
        volume_slots: 0,
        objects: None,
    }
}

async fn start(guard: &RuntimeGuard, keep_all: bool) -> Arc<HostAgent<QemuDriver>> {
    let rt = guard.reopen().await;
    let (agent, report) = HostAgent::start(rt, config(), |_| keep_all).await.unwrap();
    eprintln!("reconcile: {report:?}");
    Arc::new(agent)
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_auto_wake_fork_and_restart() {
    let guard = runtime().await;
    bake(&guard, "agent").await;
    let agent = start(&guard, true).await;

    assert!(matches!(
        agent.create("missing", "x").await,
        Err(AgentError::TemplateNotFound(_))
    ));
    let v = within(STEP, "create", agent.create("agent", "one"))
        .await
        .unwrap();
    assert_eq!(v.state, VmState::Running);
    let ch = agent.channel("one").await.unwrap();
    exec(&ch, "echo hi > /dev/shm/x").await;

    // Hibernate, then any use wakes it.
    let v = within(STEP, "hibernate", agent.hibernate("one"))
        .await
        .unwrap();
    assert_eq!(v.state, VmState::Hibernated);
    assert_eq!(agent.get("one").await.unwrap().state, VmState::Hibernated);
    let ch = within(STEP, "auto-wake", agent.channel("one"))
        .await
        .unwrap();
    assert_eq!(exec(&ch, "cat /dev/shm/x").await.stdout, "hi\n");
    assert_eq!(agent.get("one").await.unwrap().state, VmState::Running);

    // Pause refuses guest calls with a clear state error; resume restores them.
    agent.pause("one").await.unwrap();
    assert!(matches!(
        agent.channel("one").await,
        Err(AgentError::InvalidState { .. })
    ));
    agent.resume("one").await.unwrap();

    let (snap, kids) = within(
        STEP,
        "fork",
        agent.fork("one", "snap-one", &["kid-1".into(), "kid-2".into()]),
    )
    .await
    .unwrap();
    assert_eq!(kids.len(), 2);
    assert_eq!(snap.sandbox_id, "one");
    let kid = agent.channel("kid-2").await.unwrap();
    assert_eq!(
        exec(&kid, "cat /dev/shm/x; hostname").await.stdout,
        "hi\nkid-2\n"
    );
    agent.hibernate("kid-1").await.unwrap();

    // Restart: running and hibernated sandboxes come back.
    agent.shutdown().await;
    drop((ch, kid));
    drop(agent);
    let agent = start(&guard, true).await;
    let states: Vec<(String, VmState)> = agent
        .list()
        .await
        .into_iter()
        .map(|v| (v.id, v.state))
        .collect();
    assert_eq!(
        states,
        [
            ("kid-1".to_owned(), VmState::Hibernated),
            ("kid-2".to_owned(), VmState::Running),
            ("one".to_owned(), VmState::Running),
        ]
    );
    let ch = agent.channel("one").await.unwrap();
    assert_eq!(exec(&ch, "cat /dev/shm/x").await.stdout, "hi\n");
    let ch = within(STEP, "wake after restart", agent.channel("kid-1"))
        .await
        .unwrap();
    assert_eq!(exec(&ch, "hostname").await.stdout, "kid-1\n");
    agent.destroy("kid-1").await.unwrap();
    assert!(matches!(
        agent.get("kid-1").await,
        Err(AgentError::SandboxNotFound(_))
    ));
    agent.shutdown().await;
    drop(agent);

    // A restart that claims nothing removes everything.
    let agent = start(&guard, false).await;
    assert!(agent.list().await.is_empty());
    let left: Vec<_> = std::fs::read_dir(guard.data().root().join("sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    agent.delete_snapshot("snap-one").await.unwrap();
}

/// A template whose memory image was changed after its bake (here: a hole punched into it, as a
/// clone's free-page report did before clones mapped it read-only), and one baked before bakes
/// recorded seals, are found when the agent starts, taken out of service and baked again; an
/// intact one is left alone without its memory being read.
#[tokio::test(flavor = "multi_thread")]
async fn damaged_and_unsealed_templates_are_baked_again_at_start() {
    use pandastack_runtime::TemplateCheck;

    let guard = runtime().await;
    let intact = bake(&guard, "intact").await;
    let damaged = bake(&guard, "damaged").await;
    let unsealed = bake(&guard, "unsealed").await;
    for t in [&intact, &damaged, &unsealed] {
        assert_eq!(
            guard.check_template(&t.name).await.unwrap(),
            TemplateCheck::Intact
        );
    }

    // Damage: punch a hole where the image holds data (root ignores the file's 0444 mode).
    let mem = damaged.memory();
    let f = std::fs::OpenOptions::new().write(true).open(&mem).unwrap();
    let data_at = nix::unistd::lseek(
        std::os::fd::AsFd::as_fd(&f),
        1 << 20,
        nix::unistd::Whence::SeekData,
    )
    .unwrap();
    nix::fcntl::fallocate(
        &f,
        nix::fcntl::FallocateFlags::FALLOC_FL_PUNCH_HOLE
            | nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE,
        data_at,
        1 << 16,
    )
    .unwrap();
    drop(f);
    assert!(matches!(
        guard.check_template("damaged").await.unwrap(),
        TemplateCheck::Damaged(_)
    ));
    // Unsealed: the manifest of a bake made before seals existed.
    let manifest = unsealed.dir.join("template.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("seals");
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(
        guard.check_template("unsealed").await.unwrap(),
        TemplateCheck::Unsealed
    );

    let agent = start(&guard, true).await;
    let found = agent.verify_templates(|_| None).await.unwrap();
    let mut names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    names.sort();
    assert_eq!(names, ["damaged", "unsealed"], "{found:?}");

    // A create waits for the new bake and gets a working sandbox; the new bake is sealed.
    for name in ["damaged", "unsealed"] {
        let v = within(Duration::from_secs(300), "create", agent.create(name, name))
            .await
            .unwrap();
        assert_eq!(v.state, VmState::Running);
        let ch = agent.channel(name).await.unwrap();
        assert_eq!(exec(&ch, "echo ok").await.stdout, "ok\n");
        let t = guard.template(name).unwrap();
        let old_id = if name == "damaged" {
            &damaged.bake_id
        } else {
            &unsealed.bake_id
        };
        assert_ne!(&t.bake_id, old_id, "{name} was not baked again");
        assert_eq!(
            guard.check_template(name).await.unwrap(),
            TemplateCheck::Intact
        );
    }
    assert_eq!(
        guard.template("intact").unwrap().bake_id,
        intact.bake_id,
        "an intact template was baked again"
    );
    agent.shutdown().await;
}
