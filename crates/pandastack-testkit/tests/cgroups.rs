//! Every VM process in its own cgroup with memory, CPU and pids limits from its shape, joined
//! before QEMU runs, removed when the VM stops. Needs root and cgroup controllers (v2, or v1 as
//! on hybrid hosts).

use std::path::Path;
use std::time::Duration;

use pandastack_qemu::{Cgroups, QemuDriver};
use pandastack_testkit::{agent, copy_rootfs, driver, exec, fixtures, spec, vm_dir, within};
use pandastack_vm::{Memory, Vm, VmDriver};

fn procs(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The test driver with per-VM cgroups on.
async fn limited_driver() -> (Cgroups, QemuDriver) {
    let cgroups = Cgroups::detect().expect("cgroup controllers memory, cpu, pids");
    let mut cfg = driver().await.config().clone();
    cfg.cgroups = Some(cgroups.clone());
    (cgroups, QemuDriver::new(cfg))
}

/// The memory limit of the VM cgroup whose memory directory is `dir`, bytes.
fn memory_limit(cgroups: &Cgroups, dir: &Path) -> u64 {
    let file = match cgroups.version() {
        "v2" => "memory.max",
        _ => "memory.limit_in_bytes",
    };
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn vm_process_runs_in_its_own_limited_cgroup() {
    let (cgroups, d) = limited_driver().await;

    let dir = vm_dir();
    let rootfs = copy_rootfs(&fixtures().rootfs, dir.path());
    let spec = spec(
        dir.path(),
        Memory::SharedFile(dir.path().join("mem")),
        rootfs,
    );
    let vm = within(Duration::from_secs(60), "boot", d.boot(&spec))
        .await
        .expect("boot");
    let name = vm.cgroup().expect("vm has a cgroup").to_owned();
    let mem = cgroups.memory_dir(&name);
    let pid = vm.stats().expect("stats").pid;
    assert_eq!(
        procs(&mem),
        vec![pid],
        "QEMU (and only it) is in its cgroup"
    );
    let limit = memory_limit(&cgroups, &mem);
    let cache = u64::from(d.config().translation_cache_mib());
    assert_eq!(
        limit,
        (256 + cache + 352) << 20,
        "guest RAM + translation cache + QEMU overhead"
    );

    // The guest works under the limits.
    let ch = agent(&vm, Duration::from_secs(120)).await;
    assert_eq!(exec(&ch, "echo ok").await.stdout, "ok\n");
    drop(ch);

    // A re-attached VM (QMP takes one client: let go of the first handle) knows its cgroup and
    // removes it on stop.
    drop(vm);
    let again = d.attach(dir.path()).await.expect("attach");
    assert_eq!(again.cgroup(), Some(name.as_str()));
    again.stop().await.expect("stop");
    assert!(!mem.exists(), "cgroup removed after stop");
}

/// Threads of `pid` and the threads listed in a cgroup directory (v1 `tasks`, v2
/// `cgroup.threads`).
fn threads(pid: u32, dir: &Path) -> (Vec<u32>, Vec<u32>) {
    let mut of_process: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let file = if dir.join("tasks").exists() {
        "tasks"
    } else {
        "cgroup.threads"
    };
    let mut listed: Vec<u32> = std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    of_process.sort_unstable();
    listed.sort_unstable();
    (of_process, listed)
}

/// A restoring QEMU is moved into its cgroup while it starts, not before exec; by the time
/// `restore` returns (the state loaded, the guest running) it and every thread it has are in
/// their cgroup, under the same limits as a booted VM's.
#[tokio::test(flavor = "multi_thread")]
async fn a_restored_vm_is_in_its_cgroup_before_its_guest_runs() {
    let (cgroups, d) = limited_driver().await;

    // A state to restore: a booted VM's, saved while paused (RAM stays in its shared file).
    let base = vm_dir();
    let rootfs = copy_rootfs(&fixtures().rootfs, base.path());
    let mem = base.path().join("mem");
    let booted = within(
        Duration::from_secs(60),
        "boot",
        d.boot(&spec(base.path(), Memory::SharedFile(mem.clone()), rootfs)),
    )
    .await
    .expect("boot");
    tokio::time::sleep(Duration::from_millis(500)).await;
    booted.pause().await.unwrap();
    let state = base.path().join("state");
    booted.save_state(&state).await.expect("save state");
    booted.stop().await.unwrap();

    let dir = vm_dir();
    let rootfs = copy_rootfs(&base.path().join("rootfs.ext4"), dir.path());
    let spec = spec(dir.path(), Memory::PrivateFile(mem), rootfs);
    let vm = within(Duration::from_secs(60), "restore", d.restore(&spec, &state))
        .await
        .expect("restore");
    let name = vm.cgroup().expect("vm has a cgroup").to_owned();
    let mem_dir = cgroups.memory_dir(&name);
    let pid = vm.stats().expect("stats").pid;
    assert_eq!(
        procs(&mem_dir),
        vec![pid],
        "QEMU (and only it) is in its cgroup"
    );
    let (of_process, listed) = threads(pid, &mem_dir);
    assert_eq!(listed, of_process, "every QEMU thread is in the cgroup");
    let limit = memory_limit(&cgroups, &mem_dir);
    let cache = u64::from(d.config().translation_cache_mib());
    assert_eq!(limit, (256 + cache + 352) << 20);

    let ch = agent(&vm, Duration::from_secs(120)).await;
    assert_eq!(exec(&ch, "echo ok").await.stdout, "ok\n");
    drop(ch);
    vm.stop().await.expect("stop");
    assert!(!mem_dir.exists(), "cgroup removed after stop");
}
