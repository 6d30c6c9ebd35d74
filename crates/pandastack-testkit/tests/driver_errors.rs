//! Failure paths of the QEMU driver with real QEMU processes: bad input gives a clear error and
//! leaves no process behind; a killed VM is noticed.

use std::path::Path;
use std::time::Duration;

use pandastack_testkit::{boot, copy_rootfs, driver, fixtures, spec, vm_dir, VmGuard};
use pandastack_vm::{Memory, RunState, Vm, VmDriver, VmError};

/// True if any process's command line mentions `dir` (a QEMU started for it).
fn qemu_running_for(dir: &Path) -> bool {
    let needle = dir.as_os_str().as_encoded_bytes().to_vec();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c.windows(needle.len()).any(|w| w == needle.as_slice()))
                .unwrap_or(false)
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_kernel_is_reported_before_starting_anything() {
    let dir = vm_dir();
    let rootfs = copy_rootfs(&fixtures().rootfs, dir.path());
    let mut s = spec(
        dir.path(),
        Memory::SharedFile(dir.path().join("mem")),
        rootfs,
    );
    s.kernel = dir.path().join("no-such-vmlinux");
    let err = driver().await.boot(&s).await.err().expect("boot must fail");
    assert!(
        matches!(&err, VmError::MissingFile(p) if p.ends_with("no-such-vmlinux")),
        "{err:?}"
    );
    assert!(!qemu_running_for(dir.path()));
    assert!(
        !dir.path().join("mem").exists(),
        "no memory file may be left behind"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupt_snapshot_fails_restore_and_leaves_no_process() {
    let dir = vm_dir();
    let rootfs = copy_rootfs(&fixtures().rootfs, dir.path());
    let mem = dir.path().join("mem");
    std::fs::File::create(&mem)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let state = dir.path().join("state");
    std::fs::write(&state, b"QEVM garbage, not a migration stream").unwrap();
    let s = spec(dir.path(), Memory::PrivateFile(mem), rootfs);
    let err = driver()
        .await
        .restore(&s, &state)
        .await
        .err()
        .expect("restore must fail");
    let msg = format!("{err}");
    assert!(
        matches!(
            err,
            VmError::Command { op: "restore", .. } | VmError::Exited(_)
        ),
        "{msg}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !qemu_running_for(dir.path()),
        "qemu left running after failed restore"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_snapshot_file_is_a_clear_error() {
    let dir = vm_dir();
    let rootfs = copy_rootfs(&fixtures().rootfs, dir.path());
    let mem = dir.path().join("mem");
    std::fs::File::create(&mem)
        .unwrap()
        .set_len(256 << 20)
        .unwrap();
    let s = spec(dir.path(), Memory::PrivateFile(mem), rootfs);
    let err = driver()
        .await
        .restore(&s, &dir.path().join("nope"))
        .await
        .err()
        .expect("must fail");
    assert!(
        matches!(&err, VmError::MissingFile(p) if p.ends_with("nope")),
        "{err:?}"
    );
    assert!(!qemu_running_for(dir.path()));
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_qemu_is_detected_and_attach_finds_live_vms_only() {
    let VmGuard {
        kill: _kill,
        vm: first,
        dir: _dir,
    } = boot().await;
    assert_eq!(first.state().await.unwrap(), RunState::Running);
    let run_dir = first.run_dir().to_owned();
    // The handle goes away as if the host agent died; the VM keeps running.
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let vm = driver()
        .await
        .attach(&run_dir)
        .await
        .expect("attach to running vm");
    assert_eq!(vm.state().await.unwrap(), RunState::Running);
    // QMP takes one client at a time: a second attach while one is connected must fail cleanly.
    assert!(driver().await.attach(&run_dir).await.is_err());
    drop(vm);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let vm = driver().await.attach(&run_dir).await.expect("attach again");
    let again = &vm;
    vm.pause().await.unwrap();
    assert_eq!(again.state().await.unwrap(), RunState::Paused);
    again.resume().await.unwrap();
    assert_eq!(vm.state().await.unwrap(), RunState::Running);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(vm.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), vm.exited())
        .await
        .expect("exit noticed");
    assert_eq!(vm.state().await.unwrap(), RunState::Shutdown);
    let err = driver()
        .await
        .attach(vm.run_dir())
        .await
        .err()
        .expect("nothing to attach to");
    assert!(matches!(err, VmError::Exited(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn save_state_then_restore_resumes_the_guest() {
    let base = boot().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    base.pause().await.unwrap();
    let state = base.dir.path().join("state");
    base.save_state(&state).await.expect("save state");
    // Device state only: RAM stays in the shared memory file.
    let size = std::fs::metadata(&state).unwrap().len();
    assert!(size > 0 && size < 4 << 20, "state file is {size} bytes");
    base.stop().await.unwrap();

    let dir = vm_dir();
    let rootfs = copy_rootfs(&base.dir.path().join("rootfs.ext4"), dir.path());
    let s = spec(
        dir.path(),
        Memory::PrivateFile(base.dir.path().join("mem")),
        rootfs,
    );
    let vm = VmGuard::new(
        driver().await.restore(&s, &state).await.expect("restore"),
        dir,
    );
    assert_eq!(vm.state().await.unwrap(), RunState::Running);
    vm.stop().await.unwrap();
    assert!(!vm.alive());
}
