//! Fixtures for tests that boot real guests: where the guest kernel and test image are, which
//! accelerator works here, a guard that kills a VM however the test ends, and helpers to talk to
//! the guest agent. Test-only: nothing in a shipping crate may depend on this one.

pub mod cluster;
pub mod cluster_kit;
pub mod fake;
pub mod net;
pub mod script;

use std::path::{Path, PathBuf};
use std::time::Duration;

use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use pandastack_qemu::{accel, QemuConfig, QemuDriver, QemuVm};
use pandastack_runtime::{DataDir, Runtime, Shape, Template};
use pandastack_vm::{Memory, Vm, VmSpec};
use tokio::sync::OnceCell;
use tonic::transport::Channel;

/// Paths to the guest kernel and the test rootfs (the `minimal` template with the agent).
#[derive(Debug, Clone)]
pub struct Fixtures {
    pub kernel: PathBuf,
    pub rootfs: PathBuf,
}

fn env_file(var: &str) -> PathBuf {
    let v = std::env::var_os(var).unwrap_or_else(|| {
        panic!("{var} is not set: run the test suite with scripts/test.sh, which builds the guest kernel and image and sets it")
    });
    let p = PathBuf::from(v);
    assert!(p.is_file(), "{var}={} does not exist", p.display());
    p
}

/// The kernel (`PANDASTACK_KERNEL`) and test image (`PANDASTACK_TEST_ROOTFS`).
pub fn fixtures() -> Fixtures {
    Fixtures {
        kernel: env_file("PANDASTACK_KERNEL"),
        rootfs: env_file("PANDASTACK_TEST_ROOTFS"),
    }
}

static DRIVER: OnceCell<QemuDriver> = OnceCell::const_new();

/// The QEMU driver with the accelerator that really boots here (probed once per test binary).
pub async fn driver() -> &'static QemuDriver {
    DRIVER
        .get_or_init(|| async {
            let f = fixtures();
            let choice = accel::detect(Path::new("qemu-system-x86_64"), &f.kernel).await;
            eprintln!("accelerator: {} ({})", choice.accel, choice.reason);
            QemuDriver::new(QemuConfig::new(choice.accel))
        })
        .await
}

/// A VM that is killed when the guard drops (test failure, panic or success alike), with its run
/// directory and disk in a temporary directory removed afterwards.
pub struct VmGuard {
    /// Declared first so the process dies before its directory is removed.
    pub kill: KillOnDrop,
    pub vm: QemuVm,
    pub dir: tempfile::TempDir,
}

impl VmGuard {
    pub fn new(vm: QemuVm, dir: tempfile::TempDir) -> Self {
        Self {
            kill: KillOnDrop(vm.pid()),
            vm,
            dir,
        }
    }
}

/// Sends SIGKILL to a process when dropped.
pub struct KillOnDrop(pub u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

impl std::ops::Deref for VmGuard {
    type Target = QemuVm;
    fn deref(&self) -> &QemuVm {
        &self.vm
    }
}

/// A fresh temporary directory for one VM (short path: unix sockets live in it).
pub fn vm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ps-")
        .tempdir_in("/tmp")
        .expect("temp dir")
}

/// Copies the test rootfs into `dir` (sparse), returning the copy's path.
pub fn copy_rootfs(src: &Path, dir: &Path) -> PathBuf {
    let dst = dir.join("rootfs.ext4");
    let status = std::process::Command::new("cp")
        .args(["--reflink=auto", "--sparse=always"])
        .arg(src)
        .arg(&dst)
        .status()
        .expect("run cp");
    assert!(status.success(), "copy rootfs");
    dst
}

/// A spec for the test image in `dir` with `memory`.
pub fn spec(dir: &Path, memory: Memory, rootfs: PathBuf) -> VmSpec {
    let f = fixtures();
    VmSpec {
        id: dir.file_name().unwrap().to_string_lossy().into_owned(),
        vcpus: 1,
        memory_mib: 256,
        kernel: f.kernel,
        rootfs,
        kernel_args: vec![],
        memory,
        net: None,
        volumes: vec![],
        disk_limits: None,
        run_dir: dir.to_owned(),
    }
}

/// Cold-boots the test image with its RAM in a shared file inside the VM's directory.
pub async fn boot() -> VmGuard {
    let f = fixtures();
    let dir = vm_dir();
    let rootfs = copy_rootfs(&f.rootfs, dir.path());
    let spec = spec(
        dir.path(),
        Memory::SharedFile(dir.path().join("mem")),
        rootfs,
    );
    let vm = pandastack_vm::VmDriver::boot(driver().await, &spec)
        .await
        .expect("boot vm");
    VmGuard::new(vm, dir)
}

/// A [`Runtime`] on a temporary data directory. Dropping it kills every VM process started under
/// that directory (sandboxes, pooled VMs, bakes) and removes the directory.
pub struct RuntimeGuard {
    pub rt: Runtime<QemuDriver>,
    pub dir: tempfile::TempDir,
}

impl std::ops::Deref for RuntimeGuard {
    type Target = Runtime<QemuDriver>;
    fn deref(&self) -> &Runtime<QemuDriver> {
        &self.rt
    }
}

impl RuntimeGuard {
    /// A second runtime on the same data directory, as after a restart of its owner.
    pub async fn reopen(&self) -> Runtime<QemuDriver> {
        let data = DataDir::open(self.dir.path()).expect("data dir");
        Runtime::new(driver().await.clone(), data, fixtures().kernel)
    }
}

impl Drop for RuntimeGuard {
    fn drop(&mut self) {
        kill_vms_under(self.dir.path());
    }
}

/// SIGKILLs every live process named by a `qemu.pid` file below `dir`.
fn kill_vms_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            kill_vms_under(&path);
        } else if path.file_name().is_some_and(|n| n == "qemu.pid") {
            let pid: Option<i32> = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse().ok());
            let is_qemu = pid.is_some_and(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.windows(4).any(|w| w == b"qemu"))
            });
            if let (Some(pid), true) = (pid, is_qemu) {
                drop(KillOnDrop(pid as u32));
            }
        }
    }
}

/// Where runtime tests keep their data directories: `PANDASTACK_TEST_DATA_DIR` (scripts/test.sh
/// points it at the reflink-capable XFS data dir), else `/tmp` (copies instead of reflinks).
fn test_data_root() -> PathBuf {
    let root = std::env::var_os("PANDASTACK_TEST_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    std::fs::create_dir_all(&root).expect("test data root");
    root
}

/// A runtime on a fresh temporary data directory.
pub async fn runtime() -> RuntimeGuard {
    runtime_in(None).await
}

/// A runtime on a fresh temporary data directory whose VMs get network slots from `net`.
pub async fn runtime_with_network(net: &net::NetGuard) -> RuntimeGuard {
    runtime_in(Some(std::sync::Arc::clone(&net.pool))).await
}

async fn runtime_in(net: Option<std::sync::Arc<pandastack_net::NetPool>>) -> RuntimeGuard {
    let dir = tempfile::Builder::new()
        .prefix("rt-")
        .tempdir_in(test_data_root())
        .expect("temp data dir");
    let data = DataDir::open(dir.path()).expect("data dir");
    let mut rt = Runtime::new(driver().await.clone(), data, fixtures().kernel);
    if let Some(pool) = net {
        rt = rt.with_network(pool);
    }
    RuntimeGuard { rt, dir }
}

/// The shape tests bake templates with: small, to keep TCG guests quick.
pub const TEST_SHAPE: Shape = Shape {
    vcpus: 1,
    memory_mib: 256,
    disk: None,
};

/// Bakes the test image as template `name` in `rt`.
pub async fn bake(rt: &Runtime<QemuDriver>, name: &str) -> Template {
    within(
        Duration::from_secs(240),
        "bake",
        rt.bake(name, &fixtures().rootfs, TEST_SHAPE),
    )
    .await
    .expect("bake template")
}

/// Bakes the test image as template `name` in `rt` with `slots` volume slots.
pub async fn bake_with_slots(rt: &Runtime<QemuDriver>, name: &str, slots: u32) -> Template {
    let t = within(
        Duration::from_secs(240),
        "bake",
        rt.bake_with(
            name,
            &fixtures().rootfs,
            TEST_SHAPE,
            pandastack_runtime::DeviceProfile {
                volume_slots: slots,
            },
        ),
    )
    .await
    .expect("bake template with volume slots");
    assert_eq!(t.volume_slots, slots);
    t
}

/// Opens a guest agent session (waits for the agent to come up).
pub async fn agent(vm: &QemuVm, timeout: Duration) -> Channel {
    match pandastack_guest_proto::host::connect(vm.agent_socket(), timeout).await {
        Ok(c) => c,
        Err(e) => {
            let console = std::fs::read_to_string(vm.console_log()).unwrap_or_default();
            panic!("guest agent not reachable: {e:#}\n--- console ---\n{console}");
        }
    }
}

/// Restores a clone of a baked VM — its memory file `mem` mapped privately, device state
/// `state`, its own copy of `disk` — and gives it a new identity (`name` as hostname, fresh
/// machine id, entropy and clock), as a create does — free-page reporting off too, as a create
/// sends it for a private mapping. Bounds are generous: guests run under TCG and tests run side
/// by side.
pub async fn restore_clone(
    mem: &Path,
    state: &Path,
    disk: &Path,
    name: &str,
) -> (VmGuard, Channel) {
    restore_clone_reporting(mem, state, disk, name, v1::FreePageReporting::Off).await
}

/// [`restore_clone`] with free-page reporting set to `reporting` (`On` makes the guest report
/// into the read-only mapping, as a guest that rebinds its balloon driver itself would).
pub async fn restore_clone_reporting(
    mem: &Path,
    state: &Path,
    disk: &Path,
    name: &str,
    reporting: v1::FreePageReporting,
) -> (VmGuard, Channel) {
    use pandastack_vm::VmDriver;
    let dir = vm_dir();
    let rootfs = copy_rootfs(disk, dir.path());
    let spec = spec(dir.path(), Memory::PrivateFile(mem.to_owned()), rootfs);
    let vm = driver()
        .await
        .restore(&spec, state)
        .await
        .expect("restore clone");
    let guard = VmGuard::new(vm, dir);
    let ch = agent(&guard, Duration::from_secs(120)).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let mut entropy = vec![0u8; 64];
    rand::fill(&mut entropy[..]);
    within(
        Duration::from_secs(120),
        "post_restore",
        v1::agent_client::AgentClient::new(ch.clone()).post_restore(v1::PostRestoreRequest {
            unix_time_ns: now.as_nanos() as i64,
            entropy,
            hostname: name.into(),
            machine_id: format!("{:032x}", rand::random::<u128>()),
            network: None,
            free_page_reporting: reporting.into(),
        }),
    )
    .await
    .expect("post_restore");
    (guard, ch)
}

/// Result of [`exec`].
#[derive(Debug, Default)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
}

/// Bound on one [`exec`] in tests: a hang becomes a failure with a message, not a stuck CI run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(90);

/// Runs `fut`, failing the test if it takes longer than `limit`.
pub async fn within<T>(
    limit: Duration,
    what: &str,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {limit:?}"),
    }
}

/// Runs `sh -c cmd` in the guest and collects its output (bounded by [`EXEC_TIMEOUT`]).
pub async fn exec(ch: &Channel, cmd: &str) -> Output {
    within(
        EXEC_TIMEOUT,
        &format!("exec {cmd:?}"),
        exec_unbounded(ch, cmd),
    )
    .await
}

/// Runs `sh -c cmd` in the guest as `user` (name or numeric uid), like [`exec`].
pub async fn exec_as(ch: &Channel, user: &str, cmd: &str) -> Output {
    within(
        EXEC_TIMEOUT,
        &format!("exec {cmd:?} as {user}"),
        exec_unbounded_as(ch, user, cmd),
    )
    .await
}

async fn exec_unbounded(ch: &Channel, cmd: &str) -> Output {
    exec_unbounded_as(ch, "", cmd).await
}

async fn exec_unbounded_as(ch: &Channel, user: &str, cmd: &str) -> Output {
    let start = v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(v1::ExecStart {
            shell: cmd.into(),
            user: user.into(),
            ..Default::default()
        })),
    };
    let mut stream = ProcessClient::new(ch.clone())
        .exec(once_then_pending(start))
        .await
        .expect("exec call")
        .into_inner();
    let mut out = Output::default();
    while let Some(msg) = stream.message().await.expect("exec stream") {
        match msg.output {
            Some(v1::exec_output::Output::Stdout(b)) => {
                out.stdout.push_str(&String::from_utf8_lossy(&b))
            }
            Some(v1::exec_output::Output::Stderr(b)) => {
                out.stderr.push_str(&String::from_utf8_lossy(&b))
            }
            Some(v1::exec_output::Output::Exit(e)) => {
                out.exit_code = e.exit_code;
                return out;
            }
            _ => {}
        }
    }
    panic!("exec stream ended without exit: {out:?}");
}

/// A request stream with one message that then stays open: closing stdin-side input early is
/// fine for the agent, but an open stream mirrors how the host agent drives interactive execs.
fn once_then_pending<T: Send + 'static>(first: T) -> impl futures::Stream<Item = T> + Send {
    use futures::StreamExt;
    futures::stream::once(async move { first }).chain(futures::stream::pending())
}
