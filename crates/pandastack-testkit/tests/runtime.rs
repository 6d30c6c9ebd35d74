//! The sandbox runtime with real guests: snapshot and fork of a running sandbox (also one whose
//! RAM is a file of its own, and restores from stand-by processes), hibernate and wake, the pool of pre-started VMs, re-attach after a restart, and cleanup on bad input.

use std::time::Duration;

use pandastack_qemu::QemuVm;
use pandastack_runtime::{Attached, CreateError, FoundState, Sandbox, SnapshotError};
use pandastack_testkit::{bake, exec, runtime, within};
use pandastack_vm::Vm;

const STEP: Duration = Duration::from_secs(120);

/// Starts a background counter in the guest: its value lives only in the shell's memory and is
/// mirrored to /tmp/counter (tmpfs, i.e. guest RAM; replaced by rename, so a reader never sees
/// it empty) every 100 ms.
async fn start_counter(sb: &Sandbox<QemuVm>) {
    let out = exec(
        &sb.agent,
        "(i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.1; done) >/dev/null 2>&1 & sleep 0.5; echo ok",
    )
    .await;
    assert_eq!(out.stdout, "ok\n", "stderr: {}", out.stderr);
}

async fn counter(sb: &Sandbox<QemuVm>) -> u64 {
    let out = exec(&sb.agent, "cat /tmp/counter").await;
    out.stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("counter in {}: {:?}", sb.id, out))
}

/// The counter keeps going (from at least `from`) in `sb`.
async fn assert_counting_from(sb: &Sandbox<QemuVm>, from: u64) {
    let a = counter(sb).await;
    assert!(a >= from, "{}: counter restarted: {a} < {from}", sb.id);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let b = counter(sb).await;
    assert!(b > a, "{}: counter stopped at {a}", sb.id);
}

async fn has(sb: &Sandbox<QemuVm>, path: &str) -> bool {
    exec(&sb.agent, &format!("test -e {path}")).await.exit_code == 0
}

async fn hostname(sb: &Sandbox<QemuVm>) -> String {
    exec(&sb.agent, "cat /proc/sys/kernel/hostname")
        .await
        .stdout
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_children_start_from_parent_state_and_diverge() {
    let rt = runtime().await;
    let t = bake(&rt, "fork").await;
    let parent = within(STEP, "create", rt.create(&t, "parent"))
        .await
        .unwrap();
    start_counter(&parent).await;
    let out = exec(
        &parent.agent,
        "echo disk > /root/before && echo ram > /dev/shm/before && sync && echo ok",
    )
    .await;
    assert_eq!(out.stdout, "ok\n");
    let at_fork = counter(&parent).await;

    let ids = vec!["child-a".to_owned(), "child-b".to_owned()];
    let fork = within(STEP, "fork", rt.fork(&parent, "snap-1", &ids))
        .await
        .expect("fork");
    eprintln!(
        "fork of 2 in {:?}; snapshot {} MiB, parent paused {} ms",
        fork.took,
        fork.snapshot.size_bytes >> 20,
        fork.snapshot.paused_ms
    );
    let [a, b]: [Sandbox<QemuVm>; 2] = fork.children.try_into().ok().expect("two children");

    // Every child has the parent's disk and memory as of the fork, and its processes run on.
    for child in [&a, &b] {
        assert!(has(child, "/root/before").await, "{}: disk file", child.id);
        assert!(
            has(child, "/dev/shm/before").await,
            "{}: ram file",
            child.id
        );
        assert_counting_from(child, at_fork).await;
    }
    assert_counting_from(&parent, at_fork).await;

    // Distinct identities.
    let names = [
        hostname(&parent).await,
        hostname(&a).await,
        hostname(&b).await,
    ];
    assert_eq!(names, ["parent", "child-a", "child-b"]);

    // Writes after the fork stay where they were made.
    exec(
        &a.agent,
        "echo a > /root/a-only; echo a > /dev/shm/a-only; sync",
    )
    .await;
    exec(&parent.agent, "echo p > /root/p-only; sync").await;
    assert!(has(&a, "/root/a-only").await);
    assert!(
        !has(&b, "/root/a-only").await,
        "sibling sees child's disk write"
    );
    assert!(
        !has(&b, "/dev/shm/a-only").await,
        "sibling sees child's ram write"
    );
    assert!(
        !has(&parent, "/root/a-only").await,
        "parent sees child's write"
    );
    assert!(
        !has(&a, "/root/p-only").await,
        "child sees parent's later write"
    );

    // The snapshot outlives its parent: a later restore still gets the fork-time state.
    let snap = fork.snapshot;
    rt.destroy(parent).await.unwrap();
    let late = within(STEP, "restore", rt.create_from_snapshot(&snap, "late"))
        .await
        .unwrap();
    assert!(has(&late, "/dev/shm/before").await);
    assert!(!has(&late, "/root/p-only").await);
    assert_counting_from(&late, at_fork).await;
    for sb in [a, b, late] {
        rt.destroy(sb).await.unwrap();
    }
    rt.delete_snapshot(&snap.id).unwrap();
    assert!(matches!(
        rt.get_snapshot(&snap.id),
        Err(SnapshotError::NotFound(_))
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn hibernate_then_wake_keeps_running_processes() {
    let rt = runtime().await;
    let t = bake(&rt, "hib").await;
    let sb = within(STEP, "create", rt.create(&t, "sleeper"))
        .await
        .unwrap();
    start_counter(&sb).await;
    exec(&sb.agent, "echo kept > /dev/shm/mem").await;
    let before = counter(&sb).await;
    let pid = sb.vm.pid();

    let h = match within(STEP, "hibernate", rt.hibernate(sb)).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate: {e:#}"),
    };
    assert!(!alive(pid), "vm process still alive after hibernate");
    assert!(h.state().is_file());
    let found = rt.scan().unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].state, FoundState::Hibernated);

    let sb = match within(STEP, "wake", rt.wake(h)).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake: {e:#}"),
    };
    assert_eq!(exec(&sb.agent, "cat /dev/shm/mem").await.stdout, "kept\n");
    assert_eq!(hostname(&sb).await, "sleeper");
    assert_counting_from(&sb, before).await;
    assert!(!sb.dir.join("hibernate.state").exists());

    // More round trips from a woken (anonymous-memory) VM: one whose session was used, then
    // one whose session, opened for the wake, never carried a call.
    let h = match rt.hibernate(sb).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate again: {e:#}"),
    };
    let sb = match rt.wake(h).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake again: {e:#}"),
    };
    let h = match rt.hibernate(sb).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate a third time: {e:#}"),
    };
    // Long enough asleep that a clock nobody stepped would be seconds behind.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sb = match rt.wake(h).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake a third time: {e:#}"),
    };
    let guest_ms: i64 = exec(&sb.agent, "date +%s%3N")
        .await
        .stdout
        .trim()
        .parse()
        .unwrap();
    let host_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (host_ms - guest_ms).abs() < 1500,
        "guest clock {guest_ms} ms vs host {host_ms} ms after the wake"
    );
    assert_counting_from(&sb, before).await;
    rt.destroy(sb).await.unwrap();
}

/// sha256 of a file, hex.
fn file_sha256(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_with_a_memory_file_snapshots_without_its_ram_and_children_map_it() {
    let rt = runtime().await;
    let t = bake(&rt, "memfile").await;
    let template_mem = file_sha256(&t.memory());
    let parent = within(STEP, "create", rt.create_with_memory_file(&t, "mf-parent"))
        .await
        .unwrap();
    assert!(parent.info.memory_file);
    assert!(
        parent.dir.join("mem").is_file(),
        "the sandbox's own RAM file"
    );
    start_counter(&parent).await;
    let out = exec(
        &parent.agent,
        "echo disk > /root/before && head -c 8000000 /dev/urandom > /dev/shm/before && sync && sha256sum /dev/shm/before | cut -d' ' -f1",
    )
    .await;
    let ram_sum = out.stdout.trim().to_owned();
    assert_eq!(ram_sum.len(), 64, "{out:?}");
    let at_fork = counter(&parent).await;

    let ids = vec!["mf-a".to_owned(), "mf-b".to_owned()];
    let fork = within(STEP, "fork", rt.fork(&parent, "mf-snap", &ids))
        .await
        .expect("fork");
    let snap = fork.snapshot;
    // The state file holds device state only; the RAM is the snapshot's reflinked file.
    assert!(snap.memory_file);
    let state_bytes = std::fs::metadata(snap.state()).unwrap().len();
    assert!(
        state_bytes < 8 << 20,
        "state file of {state_bytes} bytes: RAM was written into it"
    );
    assert!(snap.memory().is_file());
    eprintln!(
        "fork of 2 with a memory file in {:?}; state {} KiB, parent paused {} ms",
        fork.took,
        state_bytes >> 10,
        snap.paused_ms
    );
    let snap_mem = file_sha256(&snap.memory());
    let [a, b]: [Sandbox<QemuVm>; 2] = fork.children.try_into().ok().expect("two children");
    for child in [&a, &b] {
        assert!(
            !child.info.memory_file,
            "children map the snapshot's file privately"
        );
        assert!(has(child, "/root/before").await, "{}: disk file", child.id);
        let sum = exec(&child.agent, "sha256sum /dev/shm/before | cut -d' ' -f1").await;
        assert_eq!(sum.stdout.trim(), ram_sum, "{}: RAM content", child.id);
        assert_counting_from(child, at_fork).await;
    }
    assert_eq!(hostname(&a).await, "mf-a");

    // Writes after the fork stay where they were made: the parent writes its own RAM file,
    // children their private copies; neither reaches the snapshot's file.
    exec(&parent.agent, "echo p > /dev/shm/p-late").await;
    exec(
        &a.agent,
        "echo a > /dev/shm/a-only; head -c 64000000 /dev/zero > /dev/shm/fill; rm /dev/shm/fill; sync",
    )
    .await;
    assert!(
        !has(&b, "/dev/shm/a-only").await,
        "sibling sees child's RAM"
    );
    assert!(
        !has(&parent, "/dev/shm/a-only").await,
        "parent sees child's RAM"
    );
    assert!(
        !has(&a, "/dev/shm/p-late").await,
        "child sees parent's later RAM"
    );
    let late = within(STEP, "restore", rt.create_from_snapshot(&snap, "mf-late"))
        .await
        .unwrap();
    assert!(
        !has(&late, "/dev/shm/p-late").await,
        "snapshot took the parent's later write"
    );
    assert!(has(&late, "/dev/shm/before").await);
    assert_eq!(
        file_sha256(&snap.memory()),
        snap_mem,
        "the snapshot's RAM file changed"
    );

    // A stand-by process (started, disk cloned, waiting for the state) serves the next
    // restore, which is still a restore from the snapshot with its own identity.
    assert_eq!(rt.keep_standby(&snap, 1).await.unwrap(), 1);
    assert_eq!(rt.standby_count(&snap.id), 1);
    let stood = within(
        STEP,
        "restore",
        rt.create_from_snapshot(&snap, "mf-standby"),
    )
    .await
    .unwrap();
    assert_eq!(
        rt.standby_count(&snap.id),
        0,
        "the restore took the waiting process"
    );
    assert_eq!(hostname(&stood).await, "mf-standby");
    assert!(!has(&stood, "/dev/shm/p-late").await);
    assert_counting_from(&stood, at_fork).await;
    assert_eq!(rt.keep_standby(&snap, 1).await.unwrap(), 1);
    rt.drop_standby(&snap.id).await;
    assert_eq!(rt.standby_count(&snap.id), 0);

    // Hibernate saves device state only and wake maps the same file again.
    let pid = parent.vm.pid();
    let h = match within(STEP, "hibernate", rt.hibernate(parent)).await {
        Ok(h) => h,
        Err((e, _)) => panic!("hibernate: {e:#}"),
    };
    assert!(!alive(pid));
    let hib_bytes = std::fs::metadata(h.state()).unwrap().len();
    assert!(
        hib_bytes < 8 << 20,
        "hibernation image of {hib_bytes} bytes"
    );
    let parent = match within(STEP, "wake", rt.wake(h)).await {
        Ok(sb) => sb,
        Err((e, _)) => panic!("wake: {e:#}"),
    };
    assert!(has(&parent, "/dev/shm/p-late").await);
    let sum = exec(&parent.agent, "sha256sum /dev/shm/before | cut -d' ' -f1").await;
    assert_eq!(sum.stdout.trim(), ram_sum);
    assert_counting_from(&parent, at_fork).await;

    for sb in [parent, a, b, late, stood] {
        rt.destroy(sb).await.unwrap();
    }
    rt.delete_snapshot(&snap.id).unwrap();
    assert_eq!(
        file_sha256(&t.memory()),
        template_mem,
        "the template's RAM file changed"
    );
    assert!(no_qemu_under(rt.data().root()));
    let left: Vec<_> = std::fs::read_dir(rt.data().root().join("sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pooled_vm_serves_a_create_and_a_restart_reattaches() {
    let rt = runtime().await;
    let t = bake(&rt, "pool").await;
    assert_eq!(within(STEP, "fill", rt.fill_pool(&t, 1)).await.unwrap(), 1);
    let pooled = within(STEP, "create", rt.create(&t, "pooled"))
        .await
        .unwrap();
    assert_eq!(rt.pool_size(&t), 0, "the create took the pooled vm");
    assert_eq!(hostname(&pooled).await, "pooled");
    // A pooled VM that died while it waited is passed over: the create restores afresh.
    rt.fill_pool(&t, 1).await.unwrap();
    let pool_dirs = || -> Vec<std::path::PathBuf> {
        std::fs::read_dir(rt.data().root().join("sandboxes"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".pool-"))
            .map(|e| e.path())
            .collect()
    };
    let waiting = pool_dirs();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let pid: i32 = std::fs::read_to_string(waiting[0].join("qemu.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = within(STEP, "create past a dead pooled vm", rt.create(&t, "fresh"))
        .await
        .unwrap();
    assert_eq!(hostname(&fresh).await, "fresh");
    assert_eq!(rt.pool_size(&t), 0);
    assert!(
        pool_dirs().is_empty(),
        "the dead pooled vm's directory is gone"
    );
    rt.destroy(fresh).await.unwrap();
    start_counter(&pooled).await;
    let before = counter(&pooled).await;

    let doomed = within(STEP, "create", rt.create(&t, "doomed"))
        .await
        .unwrap();
    let sleeper = within(STEP, "create", rt.create(&t, "sleeper"))
        .await
        .unwrap();
    let h = rt.hibernate(sleeper).await.ok().expect("hibernate");
    // A create that died half-way: a directory without a manifest.
    std::fs::create_dir(rt.data().sandbox("half")).unwrap();
    // A pooled VM the old owner left behind.
    rt.fill_pool(&t, 1).await.unwrap();

    // The owner goes away without stopping anything; one VM dies meanwhile.
    let doomed_pid = doomed.vm.pid();
    drop((pooled, doomed, h));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(doomed_pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let rt2 = rt.reopen().await;
    let mut found: Vec<(String, FoundState)> = rt2
        .scan()
        .unwrap()
        .into_iter()
        .map(|f| (f.id, f.state))
        .collect();
    found.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        found,
        [
            ("doomed".to_owned(), FoundState::Broken),
            ("half".to_owned(), FoundState::Broken),
            ("pooled".to_owned(), FoundState::Running),
            ("sleeper".to_owned(), FoundState::Hibernated),
        ]
    );
    let report = rt2.reconcile(|_| true).await.unwrap();
    let mut removed = report.removed.clone();
    removed.sort();
    assert_eq!(removed, ["doomed", "half"]);
    assert_eq!(report.leftovers, 1, "the orphaned pooled vm");

    let Attached::Running(pooled) = rt2.attach("pooled").await.unwrap() else {
        panic!("pooled is running");
    };
    assert_counting_from(&pooled, before).await;
    let Attached::Hibernated(h) = rt2.attach("sleeper").await.unwrap() else {
        panic!("sleeper is hibernated");
    };
    let sleeper = rt2.wake(h).await.expect("wake after restart");
    assert_eq!(hostname(&sleeper).await, "sleeper");
    rt2.destroy(pooled).await.unwrap();
    rt2.destroy(sleeper).await.unwrap();
    rt.drain_pool().await;
    let left: Vec<_> = std::fs::read_dir(rt.data().root().join("sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Names of the guest's processes other than kernel threads (and this listing's shell), sorted.
async fn user_processes(sb: &Sandbox<QemuVm>) -> Vec<String> {
    // Builtins only, no pipeline: the listing adds nothing but its own shell.
    let list = r#"for d in /proc/[0-9]*; do n= p=; while read -r k v; do case $k in Name:) n=$v;; PPid:) p=$v;; esac; done < $d/status; [ "${d#/proc/}" = 2 ] || [ "$p" = 2 ] || [ "${d#/proc/}" = $$ ] || echo "$n"; done"#;
    let out = exec(&sb.agent, list).await;
    assert_eq!(out.exit_code, 0, "{out:?}");
    let mut names: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    names.sort();
    names
}

/// A pooled VM left waiting runs its warm-up command once, and the sandbox made from it sees
/// its own identity and none of the command's processes; a VM taken at once is not warmed.
#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_pooled_vm_is_warmed_and_a_taken_one_is_not() {
    let rt = runtime().await;
    let t = bake(&rt, "warm").await;
    assert_eq!(rt.pool_warmed(), 0);
    rt.fill_pool(&t, 1).await.unwrap();
    let taken = within(STEP, "create at once", rt.create(&t, "taken"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rt.pool_warmed(), 0, "a VM taken at once ran the warm-up");
    let procs_of_unwarmed = user_processes(&taken).await;
    rt.destroy(taken).await.unwrap();

    rt.fill_pool(&t, 1).await.unwrap();
    within(STEP, "warm-up", async {
        while rt.pool_warmed() == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let warmed = within(STEP, "create", rt.create(&t, "warmed"))
        .await
        .unwrap();
    assert_eq!(hostname(&warmed).await, "warmed");
    assert_eq!(
        user_processes(&warmed).await,
        procs_of_unwarmed,
        "the warm-up left processes behind"
    );
    assert_eq!(exec(&warmed.agent, "echo hi").await.stdout, "hi\n");
    assert_eq!(rt.pool_warmed(), 1, "a taken VM was warmed again");
    rt.destroy(warmed).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_snapshots_and_ids_leave_nothing_behind() {
    let rt = runtime().await;
    let t = bake(&rt, "bad").await;
    assert!(matches!(
        rt.template("nope"),
        Err(pandastack_runtime::BakeError::NotBaked(_))
    ));
    assert!(matches!(
        rt.get_snapshot("nope"),
        Err(SnapshotError::NotFound(_))
    ));
    assert!(matches!(
        rt.get_snapshot("../etc"),
        Err(SnapshotError::InvalidId(_))
    ));
    assert!(matches!(
        rt.create(&t, "a/b").await,
        Err(CreateError::InvalidId(_))
    ));

    let sb = within(STEP, "create", rt.create(&t, "src")).await.unwrap();
    let snap = within(STEP, "snapshot", rt.snapshot(&sb, "snap"))
        .await
        .unwrap();
    assert!(matches!(
        rt.snapshot(&sb, "snap").await,
        Err(SnapshotError::Exists(_))
    ));
    // The sandbox runs on after its snapshot.
    assert_eq!(exec(&sb.agent, "echo up").await.stdout, "up\n");
    assert!(matches!(
        rt.create(&t, "src").await,
        Err(CreateError::Exists(_))
    ));

    // Corrupt the snapshot's state: the restore fails cleanly.
    let len = std::fs::metadata(snap.state()).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(snap.state())
        .unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let err = within(STEP, "restore", rt.create_from_snapshot(&snap, "broken"))
        .await
        .err()
        .expect("restore of a truncated snapshot fails");
    eprintln!("corrupt snapshot: {}", pandastack_host::error_chain(&err));
    assert!(!rt.data().sandbox("broken").exists(), "sandbox dir left");
    let found = rt.scan().unwrap();
    assert_eq!(found.len(), 1, "only the source sandbox: {found:?}");
    rt.destroy(sb).await.unwrap();
    rt.delete_snapshot("snap").unwrap();
    assert!(no_qemu_under(rt.data().root()));
}

/// Whether `pid` runs (a zombie waiting to be reaped does not count).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(") ")
            .next()
            .is_some_and(|rest| !rest.starts_with('Z'))
    })
}

/// No QEMU process has a file under `root` open.
fn no_qemu_under(root: &std::path::Path) -> bool {
    let root = std::fs::canonicalize(root).unwrap();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(p.path().join("cmdline")) else {
            continue;
        };
        if !cmd.windows(4).any(|w| w == b"qemu") {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(&root)) {
                return false;
            }
        }
    }
    true
}
