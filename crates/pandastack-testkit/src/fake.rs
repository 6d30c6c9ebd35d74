//! A fake VM driver for fast tests of everything above the driver (runtime, host agent, API):
//! each "VM" is the real guest agent, `pandastack-guest serve --unix <run dir>/agent.sock`,
//! running on this host in UTS and mount namespaces of its own (the hostname and the `/etc`
//! files a post-restore writes are its own; outside a VM the agent leaves the clock alone). A
//! create, exec or delete then takes milliseconds instead of a QEMU restore under TCG.
//!
//! What is fake: memory. A snapshot writes the files of the VM's own [`MEMORY`] directory into
//! its state file, and a restore starts a fresh agent with those files back in place: so files
//! a test keeps in [`MEMORY`] travel through snapshot, fork, hibernate and moves between hosts
//! as a real VM's memory does, while processes, and files of `/tmp` (this host's, shared by
//! every fake VM), do not. Commands run on this host (as root): tests should run harmless ones. Volume disks are
//! only checked to exist (a start fails without them); the fake guest never sees them.
//!
//! Faults ([`Faults`]) make the next restores fail (the driver reports an error), hang (the
//! agent process is stopped, so the guest never answers and the runtime's bound decides) or slow.
//! [`FakeStack::end_vm`] ends a running VM's process from outside, as a guest power-off does.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use pandastack_vm::{Accel, Memory, RunState, Vm, VmDriver, VmError, VmSpec, VmStats, VolumeDisk};

const PID_FILE: &str = "fake.pid";
const SOCKET: &str = "agent.sock";
const CONSOLE: &str = "console.log";
/// The run dir's directory mounted at [`MEMORY`] in the VM.
const MEMORY_DIR: &str = "fake-memory";

/// The directory of a fake VM that its snapshots carry, as a real VM's memory (see the module
/// docs): private to each VM (a run dir's directory mounted there in its mount namespace).
pub const MEMORY: &str = "/srv";

/// Faults to inject into the next restores.
#[derive(Debug, Default)]
pub struct Faults {
    /// Restores fail with a driver error.
    pub fail_restore: AtomicBool,
    /// Restored guests never answer (the agent process is stopped).
    pub hang_restore: AtomicBool,
    /// Restores take this many milliseconds longer (a slow host).
    pub restore_delay_ms: AtomicU64,
    /// The disk limits of each VM started, by spec id, in start order (not a fault: what a
    /// test checks the runtime asked of the driver).
    pub disk_limits: std::sync::Mutex<Vec<(String, Option<pandastack_vm::DiskLimits>)>>,
}

/// The fake driver (see the module docs).
#[derive(Clone)]
pub struct FakeDriver {
    agent: PathBuf,
    pub faults: Arc<Faults>,
}

impl FakeDriver {
    /// Runs `agent` (a `pandastack-guest` binary) as each VM.
    pub fn new(agent: PathBuf) -> Self {
        Self {
            agent,
            faults: Arc::new(Faults::default()),
        }
    }

    /// Starts the agent for `spec` (stopped if `stopped`) and waits for its socket.
    async fn spawn(&self, spec: &VmSpec, stopped: bool) -> Result<FakeVm, VmError> {
        self.faults
            .disk_limits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((spec.id.clone(), spec.disk_limits));
        for disk in std::iter::once(&spec.rootfs).chain(spec.volumes.iter().map(|v| &v.path)) {
            if !disk.is_file() {
                return Err(VmError::MissingFile(disk.clone()));
            }
        }
        if !spec.run_dir.is_dir() {
            return Err(VmError::InvalidSpec(format!(
                "run dir {} does not exist",
                spec.run_dir.display()
            )));
        }
        if let Memory::SharedFile(p) = &spec.memory {
            if !p.exists() {
                let f = std::fs::File::create(p)?;
                f.set_len(u64::from(spec.memory_mib) << 20)?;
            }
        }
        let dir = &spec.run_dir;
        let socket = dir.join(SOCKET);
        let _ = std::fs::remove_file(&socket);
        // The /etc files a post-restore writes, private to this "VM".
        let etc = dir.join("fake-etc");
        std::fs::create_dir_all(&etc)?;
        let mut binds = String::new();
        for f in ["hostname", "hosts", "machine-id"] {
            let copy = etc.join(f);
            if !copy.exists() {
                std::fs::write(
                    &copy,
                    std::fs::read(Path::new("/etc").join(f)).unwrap_or_default(),
                )?;
            }
            binds.push_str(&format!(
                "mount --bind '{}' /etc/{f} || exit 98\n",
                copy.display()
            ));
        }
        let memory = dir.join(MEMORY_DIR);
        std::fs::create_dir_all(&memory)?;
        binds.push_str(&format!(
            "mkdir -p {MEMORY} && mount --bind '{}' {MEMORY} || exit 98\n",
            memory.display()
        ));
        let script = format!(
            "{binds}exec '{}' serve --unix '{}'\n",
            self.agent.display(),
            socket.display()
        );
        let console = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(CONSOLE))?;
        let child = tokio::process::Command::new("unshare")
            .args(["--uts", "--mount", "--propagation", "private", "sh", "-c"])
            .arg(script)
            .stdin(Stdio::null())
            .stdout(console.try_clone()?)
            .stderr(console)
            .process_group(0)
            .spawn()
            .map_err(VmError::Spawn)?;
        let pid = child
            .id()
            .ok_or_else(|| VmError::Exited("fake vm exited at once".into()))?;
        // Dropped: tokio reaps it when it exits.
        drop(child);
        std::fs::write(dir.join(PID_FILE), pid.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            if !alive(pid) {
                let log = std::fs::read_to_string(dir.join(CONSOLE)).unwrap_or_default();
                return Err(VmError::Exited(format!("fake vm: {}", log.trim())));
            }
            if Instant::now() > deadline {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                return Err(VmError::Timeout {
                    op: "fake vm start",
                    after: Duration::from_secs(20),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let vm = FakeVm {
            id: spec.id.clone(),
            run_dir: Mutex::new(dir.clone()),
            pid,
        };
        if stopped {
            vm.signal(Signal::SIGSTOP)?;
        }
        Ok(vm)
    }
}

/// What a fake VM's state file holds: the files of its [`MEMORY`] directory (regular files at
/// its top level), by name.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct FakeState {
    memory: std::collections::BTreeMap<String, Vec<u8>>,
}

/// Writes the files of `memory` into the state file `state`.
fn save_memory(memory: &Path, state: &Path) -> Result<(), VmError> {
    let mut saved = FakeState::default();
    for entry in std::fs::read_dir(memory)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            saved.memory.insert(name, std::fs::read(entry.path())?);
        }
    }
    let bytes = serde_json::to_vec(&saved).map_err(std::io::Error::other)?;
    std::fs::write(state, bytes)?;
    Ok(())
}

/// Puts the files saved in the state file `state` into `memory`.
fn load_memory(state: &Path, memory: &Path) -> std::io::Result<()> {
    let saved: FakeState =
        serde_json::from_slice(&std::fs::read(state)?).map_err(std::io::Error::other)?;
    for (name, bytes) in saved.memory {
        std::fs::write(memory.join(name), bytes)?;
    }
    Ok(())
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => proc_state(&s) != Some('Z'),
        Err(_) => false,
    }
}

/// The state letter of a `/proc/<pid>/stat` line.
fn proc_state(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn read_pid(run_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(run_dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn kill_and_wait(pid: u32) {
    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A fake VM: one agent process.
pub struct FakeVm {
    id: String,
    run_dir: Mutex<PathBuf>,
    pid: u32,
}

impl FakeVm {
    fn dir(&self) -> PathBuf {
        self.run_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn signal(&self, s: Signal) -> Result<(), VmError> {
        kill(Pid::from_raw(self.pid as i32), s).map_err(|e| VmError::Command {
            op: "signal",
            message: e.to_string(),
        })
    }

    /// utime + stime of the process.
    fn times(&self) -> Result<Duration, VmError> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map_err(|_| VmError::Exited(format!("fake vm {} is gone", self.id)))?;
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // Fields after the command: state is 0, utime 11, stime 12; clock ticks of 10 ms.
        Ok(Duration::from_millis((ticks(11) + ticks(12)) * 10))
    }
}

impl Vm for FakeVm {
    fn id(&self) -> &str {
        &self.id
    }

    fn agent_socket(&self) -> PathBuf {
        self.dir().join(SOCKET)
    }

    fn console_log(&self) -> PathBuf {
        self.dir().join(CONSOLE)
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn has_exited(&self) -> bool {
        matches!(
            kill(Pid::from_raw(self.pid as i32), None),
            Err(nix::errno::Errno::ESRCH)
        )
    }

    async fn pause(&self) -> Result<(), VmError> {
        self.signal(Signal::SIGSTOP)
    }

    async fn resume(&self) -> Result<(), VmError> {
        self.signal(Signal::SIGCONT)
    }

    async fn state(&self) -> Result<RunState, VmError> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        Ok(match proc_state(&stat) {
            None | Some('Z') | Some('X') => RunState::Shutdown,
            Some('T') | Some('t') => RunState::Paused,
            Some(_) => RunState::Running,
        })
    }

    async fn save_state(&self, state: &Path) -> Result<(), VmError> {
        save_memory(&self.dir().join(MEMORY_DIR), state)
    }

    async fn agent_disconnected(&self, _timeout: Duration) -> Result<(), VmError> {
        Ok(())
    }

    async fn refresh_volume(&self, _slot: usize, disk: &VolumeDisk) -> Result<(), VmError> {
        // No guest kernel to tell; the disk must still be there.
        std::fs::metadata(self.dir().join(&disk.path))?;
        Ok(())
    }

    fn relocate(&mut self, run_dir: PathBuf) {
        *self.run_dir.lock().unwrap_or_else(|p| p.into_inner()) = run_dir;
    }

    fn stats(&self) -> Result<VmStats, VmError> {
        let statm =
            std::fs::read_to_string(format!("/proc/{}/statm", self.pid)).unwrap_or_default();
        let rss_pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        Ok(VmStats {
            pid: self.pid,
            rss_bytes: rss_pages * 4096,
            pss_bytes: rss_pages * 4096,
            cpu_time: self.times()?,
        })
    }

    fn cpu_time(&self) -> Result<Duration, VmError> {
        self.times()
    }

    async fn stop(&self) -> Result<(), VmError> {
        kill_and_wait(self.pid).await;
        Ok(())
    }
}

impl VmDriver for FakeDriver {
    type Vm = FakeVm;

    fn accel(&self) -> Accel {
        Accel::Kvm
    }

    async fn boot(&self, spec: &VmSpec) -> Result<FakeVm, VmError> {
        self.spawn(spec, false).await
    }

    async fn restore(&self, spec: &VmSpec, state: &Path) -> Result<FakeVm, VmError> {
        let vm = self.prepare_restore(spec).await?;
        self.finish_restore(&vm, state).await?;
        Ok(vm)
    }

    async fn prepare_restore(&self, spec: &VmSpec) -> Result<FakeVm, VmError> {
        // Waiting for state, as a VM process started ahead of demand does.
        self.spawn(spec, true).await
    }

    async fn finish_restore(&self, vm: &FakeVm, state: &Path) -> Result<(), VmError> {
        let fail = |message: String| async move {
            kill_and_wait(vm.pid).await;
            Err(VmError::Command {
                op: "restore",
                message,
            })
        };
        if !state.is_file() {
            kill_and_wait(vm.pid).await;
            return Err(VmError::MissingFile(state.to_owned()));
        }
        if self.faults.fail_restore.load(Ordering::SeqCst) {
            return fail("injected failure".into()).await;
        }
        let delay = self.faults.restore_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if let Err(e) = load_memory(state, &vm.dir().join(MEMORY_DIR)) {
            return fail(format!("state {}: {e}", state.display())).await;
        }
        if self.faults.hang_restore.load(Ordering::SeqCst) {
            // Stays stopped: the guest never answers.
            return Ok(());
        }
        vm.signal(Signal::SIGCONT)
    }

    fn is_running(&self, run_dir: &Path) -> bool {
        read_pid(run_dir).is_some_and(alive)
    }

    async fn attach(&self, run_dir: &Path) -> Result<FakeVm, VmError> {
        let pid = read_pid(run_dir)
            .filter(|p| alive(*p))
            .ok_or_else(|| VmError::Exited(format!("no fake vm in {}", run_dir.display())))?;
        Ok(FakeVm {
            id: run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            run_dir: Mutex::new(run_dir.to_owned()),
            pid,
        })
    }

    async fn kill_in(&self, run_dir: &Path) -> Result<(), VmError> {
        if let Some(pid) = read_pid(run_dir).filter(|p| alive(*p)) {
            kill_and_wait(pid).await;
        }
        Ok(())
    }
}

/// The control plane, host agent and runtime over [`FakeDriver`] in this process, with the API
/// router to call in-process (`tower::ServiceExt::oneshot`): template `fake` is baked, and `key`
/// is an API key of the only workspace. Dropping it kills every fake VM it started.
pub struct FakeStack {
    pub router: axum::Router,
    pub proxy: axum::Router,
    pub app: Arc<pandastack_api::ApiState>,
    /// The control plane the API hands work to (its workers running).
    pub control: pandastack_control::ControlPlane,
    /// The host behind it (the host agent over [`FakeDriver`]).
    pub host: Arc<dyn pandastack_host::Host>,
    pub agent: Arc<pandastack_agent::HostAgent<FakeDriver>>,
    pub faults: Arc<Faults>,
    pub store: pandastack_store::Store,
    pub key: String,
    pub dir: tempfile::TempDir,
}

impl FakeStack {
    /// Ends sandbox `id`'s VM process from outside, as a guest that powers itself off (the
    /// agent's console watch then stops its process) or a crash does: SIGKILL, then waits until
    /// it is gone. The host agent is not told.
    pub async fn end_vm(&self, id: &str) {
        let stats = self
            .agent
            .stats(id)
            .await
            .expect("the sandbox is on this host")
            .expect("the sandbox has a VM process");
        kill_and_wait(stats.pid).await;
    }
}

impl Drop for FakeStack {
    fn drop(&mut self) {
        kill_fakes_under(self.dir.path());
    }
}

/// Kills, when dropped, the code kernels whose environment names `dir`. Kernels run in sessions
/// of their own, so they outlive a fake VM (a real VM takes them along when it stops), and
/// outside a VM `/run/pandastack-kernel` would be this host's, shared by every fake sandbox: each
/// test gives its sandboxes a kernel directory of their own (`PANDASTACK_KERNEL_DIR`).
pub struct Kernels(pub PathBuf);

impl Drop for Kernels {
    fn drop(&mut self) {
        let var = format!("PANDASTACK_KERNEL_DIR={}", self.0.display());
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if env.split(|&b| b == 0).any(|v| v == var.as_bytes()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// SIGKILLs every live process named by a fake VM's pid file below `dir`: the fake VMs a
/// process that is gone left running (a fake-driver agent killed by a test).
pub fn kill_fakes_under(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            kill_fakes_under(&path);
        } else if path.file_name().is_some_and(|n| n == PID_FILE) {
            if let Some(pid) = path.parent().and_then(read_pid).filter(|p| alive(*p)) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

/// The guest agent binary fake VMs run: `PANDASTACK_GUEST_AGENT` (scripts/test.sh sets it).
pub fn guest_agent() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("PANDASTACK_GUEST_AGENT").expect(
        "PANDASTACK_GUEST_AGENT is not set: run the test suite with scripts/test.sh, which builds it",
    ));
    assert!(
        p.is_file(),
        "PANDASTACK_GUEST_AGENT={} does not exist",
        p.display()
    );
    p
}

/// The control plane of a fake stack over `store` and `host`, its files under `dir` (builds, the
/// object store): what [`fake_stack`] runs, and what a test that restarts the server builds
/// again over the same store.
pub fn fake_control(
    store: pandastack_store::Store,
    host: Arc<dyn pandastack_host::Host>,
    dir: &std::path::Path,
) -> pandastack_control::ControlPlane {
    fake_control_with(store, host, dir, |_| {})
}

/// [`fake_control`] with `edit` applied to its configuration.
pub fn fake_control_with(
    store: pandastack_store::Store,
    host: Arc<dyn pandastack_host::Host>,
    dir: &std::path::Path,
    edit: impl FnOnce(&mut pandastack_control::ControlConfig),
) -> pandastack_control::ControlPlane {
    let objects =
        pandastack_objects::Objects::open(&format!("file://{}", dir.join("objects").display()))
            .expect("object store");
    let mut config = test_config("host-fake", &dir.join("builds"));
    edit(&mut config);
    pandastack_control::ControlPlane::new(store, host, objects, config)
}

/// A control plane's configuration for tests: host `host_id`, template builds in `builds`
/// (deploys beside them), apps at `http://<name>.localhost:8081`, databases at
/// `db.localhost:5432`, every other setting the server's default.
pub fn test_config(host_id: &str, builds: &std::path::Path) -> pandastack_control::ControlConfig {
    let preview = preview();
    pandastack_control::ControlConfig {
        host_id: host_id.into(),
        builds: pandastack_control::BuildConfig {
            dir: builds.to_owned(),
            max_upload_bytes: 1 << 20,
        },
        apps: pandastack_control::AppAddress {
            scheme: preview.scheme.clone(),
            domain: preview.domain.clone(),
            port: preview.port,
        },
        databases: pandastack_control::DatabaseAddress {
            domain: "db.localhost".into(),
            port: 5432,
            api_url: "http://127.0.0.1:8080".into(),
        },
        archive: Default::default(),
        outbound: Default::default(),
        certificates: None,
        disk_max: Default::default(),
        deploy: Default::default(),
        place: pandastack_control::PlaceMode::ThisHost,
        webhooks: test_webhooks(),
        meter: Default::default(),
    }
}

/// Webhook delivery for tests: retries after 100, 200, 400, 800 and 1600 ms (six attempts
/// in about 3 s instead of the server's day), 5 s per attempt.
pub fn test_webhooks() -> pandastack_control::WebhookSettings {
    pandastack_control::WebhookSettings {
        retry_delays: [100, 200, 400, 800, 1600]
            .into_iter()
            .map(Duration::from_millis)
            .collect(),
        attempt_timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// The API state of a fake stack over `control` (see [`fake_control`]).
pub fn fake_api(control: pandastack_control::ControlPlane) -> pandastack_api::ApiState {
    pandastack_api::ApiState::new(control, "fake-host".into(), preview())
}

fn preview() -> pandastack_api::PreviewConfig {
    pandastack_api::PreviewConfig::from_base_url("http://localhost:8081", Duration::from_secs(5))
        .expect("preview config")
}

/// Builds a [`FakeStack`] whose control plane runs its workers (builds, deploys, the scheduler,
/// the reaper, ...) as a server's does; a restored guest that does not answer fails its create
/// after `restore_timeout`.
pub async fn fake_stack(restore_timeout: Duration) -> FakeStack {
    build_stack(restore_timeout, true, |_| {}).await
}

/// [`fake_stack`] whose control plane's configuration `edit` changes (an outbound policy
/// that allows loopback, for a webhook receiver in the test).
pub async fn fake_stack_with(
    restore_timeout: Duration,
    edit: impl FnOnce(&mut pandastack_control::ControlConfig),
) -> FakeStack {
    build_stack(restore_timeout, true, edit).await
}

/// A [`FakeStack`] whose control plane starts no workers: nothing changes but what the test's
/// requests change (a deploy or a schedule stays queued).
pub async fn fake_stack_without_workers(restore_timeout: Duration) -> FakeStack {
    build_stack(restore_timeout, false, |_| {}).await
}

async fn build_stack(
    restore_timeout: Duration,
    workers: bool,
    edit: impl FnOnce(&mut pandastack_control::ControlConfig),
) -> FakeStack {
    use pandastack_agent::{AgentConfig, HostAgent, LocalHost};
    use pandastack_runtime::{DataDir, Runtime, Shape};

    let dir = tempfile::Builder::new()
        .prefix("fake-")
        .tempdir()
        .expect("temp dir");
    let agent_bin = guest_agent();
    let driver = FakeDriver::new(agent_bin.clone());
    let faults = Arc::clone(&driver.faults);
    let data = DataDir::open(dir.path().join("data")).expect("data dir");
    // The fake ignores the kernel and reads no image: any file will do.
    let image = dir.path().join("image.ext4");
    std::fs::write(&image, vec![0u8; 1 << 20]).expect("image");
    let rt = Runtime::new(driver, data, image.clone()).with_restore_timeout(restore_timeout);
    rt.bake(
        "fake",
        &image,
        Shape {
            vcpus: 1,
            memory_mib: 64,
            disk: None,
        },
    )
    .await
    .expect("bake the fake template");
    let templates = dir.path().join("no-specs");
    std::fs::create_dir_all(&templates).expect("templates dir");
    let cfg = AgentConfig {
        templates_dir: templates,
        guest_agent: agent_bin,
        pool_size: 0,
        volume_slots: 0,
        objects: None,
    };
    let (agent, _) = HostAgent::start(rt, cfg, |_| false)
        .await
        .expect("start the host agent");
    let agent = Arc::new(agent);
    let store = pandastack_store::Store::open(&dir.path().join("state.db"))
        .await
        .expect("store");
    let (_, _, key) = store
        .keys()
        .create_workspace_with_key("fast", 50, 1000)
        .await
        .expect("workspace");
    let host: Arc<dyn pandastack_host::Host> = Arc::new(LocalHost(Arc::clone(&agent)));
    // The same front door as the server's: recovered, then its workers running.
    let control = fake_control_with(store.clone(), Arc::clone(&host), dir.path(), edit);
    control.recover().await.expect("recover");
    if workers {
        control.start();
    }
    let app = Arc::new(fake_api(control.clone()));
    FakeStack {
        control,
        host,
        router: pandastack_api::router(Arc::clone(&app)),
        proxy: pandastack_api::proxy_router(Arc::clone(&app)),
        app,
        agent,
        faults,
        store,
        key,
        dir,
    }
}
