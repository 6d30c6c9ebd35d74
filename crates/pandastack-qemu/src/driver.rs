//! [`QemuDriver`]: the [`VmDriver`] implementation on `qemu-system-x86_64 -M microvm`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pandastack_vm::{Accel, Memory, RunState, Vm, VmDriver, VmError, VmSpec, VmStats, VolumeDisk};
use tokio::time::Instant;

use crate::argv::{
    self, QemuConfig, StartMode, AGENT_SOCKET, CONSOLE_LOG, PID_FILE, QEMU_LOG, QMP_SOCKET,
};
use crate::cgroup::{self, Cgroups, Limits};
use crate::confine;
use crate::process::{self, Process};
use crate::qmp::{self, Qmp, QmpError};

/// How long QEMU may take to open its QMP socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on ordinary QMP commands.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on loading or saving device state (RAM too, for private memory).
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(300);

fn control(e: QmpError) -> VmError {
    VmError::Control(Box::new(e))
}

/// The QEMU microvm driver.
#[derive(Debug, Clone)]
pub struct QemuDriver {
    cfg: QemuConfig,
}

impl QemuDriver {
    pub fn new(cfg: QemuConfig) -> Self {
        Self { cfg }
    }

    pub fn config(&self) -> &QemuConfig {
        &self.cfg
    }

    async fn start(&self, spec: &VmSpec, mode: StartMode) -> Result<QemuVm, VmError> {
        validate(spec, mode)?;
        for f in [QMP_SOCKET, AGENT_SOCKET, PID_FILE] {
            let _ = std::fs::remove_file(spec.run_dir.join(f));
        }
        // The uid is claimed first: its lock goes to the process, or is dropped with an error.
        let claim = self
            .cfg
            .identities
            .as_ref()
            .map(|ids| ids.claim())
            .transpose()?;
        // A KVM guest needs /dev/kvm, which a process that starts as its uid opens through its
        // group; where only root may, the VM process starts as root and drops itself instead.
        let kvm_group = match self.cfg.accel {
            Accel::Kvm => confine::kvm_group(),
            Accel::Tcg => None,
        };
        let landlocked = self.cfg.identities.as_ref().is_some_and(|i| i.landlock())
            && (self.cfg.accel == Accel::Tcg || kvm_group.is_some());
        let mut rules = match landlocked {
            true => Some(confine::base_rules(&spec.run_dir, &self.cfg.binary)?),
            false => None,
        };
        let (confined, held) = match &claim {
            Some(c) => {
                let landlock = rules.as_mut().map(|rules| confine::Landlock {
                    boot: mode == StartMode::Boot,
                    rules,
                });
                let (confined, held) = confine::prepare(spec, c.uid, landlock)?;
                (Some(confined), held)
            }
            None => (None, Vec::new()),
        };
        let inherit = claim.as_ref().map(|c| process::Confinement {
            inherit: std::iter::once(&c.lock)
                .chain(&held)
                .map(std::os::fd::AsRawFd::as_raw_fd)
                .collect(),
            drop_to: rules.as_ref().map(|r| (c.uid, r.fd())),
            extra_group: kvm_group.filter(|_| landlocked),
        });
        let args = argv::build(&self.cfg, spec, mode, confined.as_ref());
        let qemu_log = spec.run_dir.join(QEMU_LOG);
        let netns = spec.net.as_ref().and_then(|n| n.netns.as_deref());
        let (cgroup, procs) = match &self.cfg.cgroups {
            Some(c) => {
                let name = cgroup::new_name();
                let procs = c
                    .create(
                        &name,
                        Limits::for_vm(
                            spec.vcpus,
                            spec.memory_mib,
                            self.cfg.translation_cache_mib(),
                        ),
                    )
                    .map_err(|e| VmError::Spawn(std::io::Error::other(e)))?;
                if let Err(e) = cgroup::record(&spec.run_dir, &name) {
                    c.remove(&name);
                    return Err(e.into());
                }
                (Some((c.clone(), name)), procs)
            }
            None => (None, Vec::new()),
        };
        let release = |cgroup: &Option<(Cgroups, String)>| {
            if let Some((c, name)) = cgroup {
                c.remove(name);
            }
        };
        // A booting QEMU joins its cgroups before exec; one about to load a VM's state is moved
        // into them while it starts, and the state is loaded only after (cgroup.rs).
        let (join_now, join_beside) = match mode {
            StartMode::Boot => (procs, Vec::new()),
            StartMode::Incoming => (Vec::new(), procs),
        };
        let spawned = Process::spawn(
            &self.cfg.binary,
            &args,
            &spec.run_dir,
            &qemu_log,
            netns,
            join_now,
            inherit,
        );
        // The process holds its own copies now (or there is none).
        drop(held);
        let process = match spawned {
            Ok(p) => p,
            Err(e) => {
                release(&cgroup);
                return Err(e);
            }
        };
        let pid = process.pid();
        if let Err(e) = write_pid_file(&spec.run_dir, pid) {
            let _ = process.kill();
            process.wait_timeout(Duration::from_secs(5)).await;
            release(&cgroup);
            return Err(e.into());
        }
        let joining = (!join_beside.is_empty())
            .then(|| tokio::task::spawn_blocking(move || cgroup::join(&join_beside, pid)));
        let connected = connect_qmp(&process, &spec.run_dir, &qemu_log).await;
        let joined = match joining {
            Some(task) => match task.await {
                Ok(r) => r.map_err(VmError::Spawn),
                Err(e) => Err(VmError::Spawn(std::io::Error::other(e))),
            },
            None => Ok(()),
        };
        // QEMU's own error (its log) first: a move fails too when QEMU is gone.
        match connected.and_then(|qmp| joined.map(|()| qmp)) {
            Ok(qmp) => Ok(QemuVm {
                id: spec.id.clone(),
                run_dir: spec.run_dir.clone(),
                process,
                qmp,
                cgroup,
                given_memory: match (&spec.memory, claim.is_some() && landlocked) {
                    (Memory::SharedFile(p), true) => Some(p.clone()),
                    _ => None,
                },
                uid: claim.map(|c| c.uid),
            }),
            Err(e) => {
                // Never leave a half-started process behind.
                let _ = process.kill();
                process.wait_timeout(Duration::from_secs(5)).await;
                release(&cgroup);
                Err(e)
            }
        }
    }
}

/// Records `pid` as the VM process of `run_dir` (replacing the file whole), where
/// [`process::live_pid`] finds it after a restart.
fn write_pid_file(run_dir: &Path, pid: u32) -> std::io::Result<()> {
    let tmp = run_dir.join(".qemu.pid.partial");
    std::fs::write(&tmp, format!("{pid}\n"))?;
    std::fs::rename(&tmp, run_dir.join(PID_FILE))
}

fn validate(spec: &VmSpec, mode: StartMode) -> Result<(), VmError> {
    if spec.vcpus == 0 || spec.vcpus > 64 {
        return Err(VmError::InvalidSpec(format!(
            "vcpus {} not in 1..=64",
            spec.vcpus
        )));
    }
    if spec.memory_mib < 64 {
        return Err(VmError::InvalidSpec(format!(
            "memory {} MiB below 64",
            spec.memory_mib
        )));
    }
    if !spec.run_dir.is_dir() {
        return Err(VmError::MissingFile(spec.run_dir.clone()));
    }
    // sun_path holds 108 bytes including the terminating NUL.
    let longest = spec.run_dir.join(QMP_SOCKET).as_os_str().len();
    if longest > 107 {
        return Err(VmError::InvalidSpec(format!(
            "run dir {} too long for unix sockets",
            spec.run_dir.display()
        )));
    }
    if spec.volumes.len() > argv::MAX_VOLUME_SLOTS {
        return Err(VmError::InvalidSpec(format!(
            "{} volume slots, at most {}",
            spec.volumes.len(),
            argv::MAX_VOLUME_SLOTS
        )));
    }
    if let Some(v) = spec.volumes.iter().find(|v| v.path.to_str().is_none()) {
        return Err(VmError::InvalidSpec(format!(
            "volume path {} is not UTF-8",
            v.path.display()
        )));
    }
    let mut needed: Vec<&Path> = vec![&spec.rootfs];
    needed.extend(spec.volumes.iter().map(|v| v.path.as_path()));
    if mode == StartMode::Boot {
        needed.push(&spec.kernel);
    }
    if let Memory::PrivateFile(p) = &spec.memory {
        needed.push(p);
    }
    if mode == StartMode::Boot && spec.memory == Memory::Anonymous {
        // Not a limitation of QEMU: a cold-booted VM is baked, and a bake needs its RAM in a file.
        return Err(VmError::InvalidSpec(
            "cold boot needs file-backed memory".into(),
        ));
    }
    for p in needed {
        if !p.is_file() {
            return Err(VmError::MissingFile(p.to_owned()));
        }
    }
    Ok(())
}

async fn connect_qmp(process: &Process, run_dir: &Path, qemu_log: &Path) -> Result<Qmp, VmError> {
    let socket = run_dir.join(QMP_SOCKET);
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if !process.alive() {
            return Err(VmError::Exited(last_lines(qemu_log, 5)));
        }
        if socket.exists() {
            match Qmp::connect(&socket, QMP_TIMEOUT).await {
                Ok(q) => return Ok(q),
                Err(QmpError::Connect(_)) => {}
                Err(e) => return Err(control(e)),
            }
        }
        if Instant::now() >= deadline {
            return Err(VmError::Timeout {
                op: "qemu start",
                after: START_TIMEOUT,
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The size `qemu.log` is kept near by default (see [`VmDriver::bounded_logs`]).
pub const QEMU_LOG_MAX: u64 = 256 << 10;

/// How much of the end of `qemu.log` an error message looks at.
const TAIL_BYTES: u64 = 16 << 10;

/// The last `n` non-empty lines QEMU wrote to its log, joined with `; ` (read from the end of
/// the file by seeking: the log may be large).
fn last_lines(qemu_log: &Path, n: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(qemu_log) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let start = len.saturating_sub(TAIL_BYTES);
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let mut buf = Vec::new();
            let _ = f.take(TAIL_BYTES).read_to_end(&mut buf);
            text = String::from_utf8_lossy(&buf).into_owned();
        }
    }
    let last: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(n)
        .collect();
    let msg = last.into_iter().rev().collect::<Vec<_>>().join("; ");
    if msg.is_empty() {
        "no output".into()
    } else {
        msg
    }
}

/// The last lines QEMU wrote to its log, for error messages.
fn log_tail(qemu_log: &Path) -> String {
    last_lines(qemu_log, 3)
}

/// Waits for a migration (save or load) to end; `Ok` when it completed.
async fn wait_migration(
    vm: &QemuVm,
    events: &mut tokio::sync::broadcast::Receiver<qmp::Event>,
    op: &'static str,
) -> Result<(), VmError> {
    let deadline = Instant::now() + MIGRATE_TIMEOUT;
    loop {
        // Events may be missed while lagging; the status query is the source of truth.
        let info = vm
            .qmp
            .execute(&qmp::QueryMigrate {})
            .await
            .map_err(control)?;
        match info.status.as_deref() {
            Some("completed") => return Ok(()),
            Some("failed") | Some("cancelled") => {
                return Err(VmError::Command {
                    op,
                    message: info.error_desc.unwrap_or_else(|| "migration failed".into()),
                })
            }
            _ => {}
        }
        let wait = tokio::time::timeout_at(deadline, async {
            tokio::select! {
                _ = events.recv() => {},
                _ = vm.process.exited() => {},
                _ = tokio::time::sleep(Duration::from_millis(20)) => {},
            }
        });
        if wait.await.is_err() {
            return Err(VmError::Timeout {
                op,
                after: MIGRATE_TIMEOUT,
            });
        }
        if !vm.process.alive() {
            return Err(VmError::Exited(format!("during {op}")));
        }
    }
}

/// No bandwidth cap (state goes to a local file), and RAM in shared files is not copied: the
/// file already holds it.
async fn set_migration_options(qmp: &Qmp) -> Result<(), VmError> {
    qmp.execute(&qmp::MigrateSetCapabilities {
        capabilities: vec![qmp::MigrationCapability {
            capability: "x-ignore-shared",
            state: true,
        }],
    })
    .await
    .map_err(control)?;
    qmp.execute(&qmp::MigrateSetParameters {
        max_bandwidth: UNTHROTTLED,
    })
    .await
    .map_err(control)?;
    Ok(())
}

/// Migration bandwidth cap meaning "as fast as the disk goes" (1 TiB/s).
const UNTHROTTLED: u64 = 1 << 40;

impl VmDriver for QemuDriver {
    type Vm = QemuVm;

    fn accel(&self) -> Accel {
        self.cfg.accel
    }

    async fn boot(&self, spec: &VmSpec) -> Result<QemuVm, VmError> {
        self.start(spec, StartMode::Boot).await
    }

    async fn restore(&self, spec: &VmSpec, state: &Path) -> Result<QemuVm, VmError> {
        if !state.is_file() {
            return Err(VmError::MissingFile(state.to_owned()));
        }
        let vm = self.prepare_restore(spec).await?;
        self.finish_restore(&vm, state).await?;
        Ok(vm)
    }

    async fn prepare_restore(&self, spec: &VmSpec) -> Result<QemuVm, VmError> {
        let vm = self.start(spec, StartMode::Incoming).await?;
        if let Err(e) = set_migration_options(&vm.qmp).await {
            let _ = vm.kill_and_wait().await;
            return Err(e);
        }
        Ok(vm)
    }

    async fn finish_restore(&self, vm: &QemuVm, state: &Path) -> Result<(), VmError> {
        let mut link = None;
        let linked = &mut link;
        let result = async {
            if !state.is_file() {
                return Err(VmError::MissingFile(state.to_owned()));
            }
            let uri = match vm.uid {
                Some(_) => {
                    let (name, link) = confine::loadable(&vm.run_dir, state)?;
                    *linked = link;
                    format!("file:{name}")
                }
                None => file_uri(state)?,
            };
            let mut events = vm.qmp.events();
            vm.qmp
                .execute(&qmp::MigrateIncoming {
                    uri,
                    exit_on_error: false,
                })
                .await
                .map_err(control)?;
            wait_migration(vm, &mut events, "restore").await?;
            // Without -S the VM runs as soon as the state is loaded; make sure it did.
            let status = vm
                .qmp
                .execute(&qmp::QueryStatus {})
                .await
                .map_err(control)?;
            if !status.running {
                vm.qmp.execute(&qmp::Cont {}).await.map_err(control)?;
            }
            Ok(())
        }
        .await;
        if let Some(link) = link {
            let _ = std::fs::remove_file(link);
        }
        if let Err(e) = result {
            // A QEMU that died says why in its log; that beats "connection closed".
            let e = if vm.process.alive() {
                e
            } else {
                VmError::Exited(log_tail(&vm.run_dir.join(QEMU_LOG)))
            };
            let _ = vm.kill_and_wait().await;
            return Err(e);
        }
        Ok(())
    }

    fn is_running(&self, run_dir: &Path) -> bool {
        process::live_pid(run_dir, &run_dir.join(PID_FILE), CONSOLE_LOG).is_some()
    }

    /// QEMU's stderr: it reports there, once per refusal, every free page a guest reports that
    /// cannot be given back (a VM whose RAM is a private mapping of a read-only snapshot file),
    /// 45-69 KiB a minute from an ordinary allocate/free loop.
    fn bounded_logs(&self) -> Vec<(&'static str, u64)> {
        vec![(QEMU_LOG, self.cfg.log_max_bytes)]
    }

    async fn kill_in(&self, run_dir: &Path) -> Result<(), VmError> {
        let Some(pid) = process::live_pid(run_dir, &run_dir.join(PID_FILE), CONSOLE_LOG) else {
            return Ok(());
        };
        let process = Process::from_pid(pid)?;
        process.kill()?;
        if !process.wait_timeout(Duration::from_secs(10)).await {
            return Err(VmError::Exited(format!(
                "vm process {pid} did not exit after SIGKILL"
            )));
        }
        if let Some((c, name)) = self.cfg.cgroups.clone().zip(cgroup::recorded(run_dir)) {
            c.remove(&name);
        }
        Ok(())
    }

    async fn attach(&self, run_dir: &Path) -> Result<QemuVm, VmError> {
        let pid = process::live_pid(run_dir, &run_dir.join(PID_FILE), CONSOLE_LOG)
            .ok_or_else(|| VmError::Exited(format!("no running vm in {}", run_dir.display())))?;
        let process = Process::from_pid(pid)?;
        let qmp = Qmp::connect(&run_dir.join(QMP_SOCKET), QMP_TIMEOUT)
            .await
            .map_err(control)?;
        let id = run_dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cgroup = self.cfg.cgroups.clone().zip(cgroup::recorded(run_dir));
        Ok(QemuVm {
            id,
            run_dir: run_dir.to_owned(),
            process,
            qmp,
            cgroup,
            uid: confine::uid_of(pid).filter(|&u| u != 0),
            // Not known here (the spec is not): the file stays its uid's until it is given to
            // the next process that runs the VM.
            given_memory: None,
        })
    }
}

fn file_uri(path: &Path) -> Result<String, VmError> {
    let s = path
        .to_str()
        .filter(|s| !s.contains(','))
        .ok_or_else(|| VmError::InvalidSpec(format!("unusable state path {}", path.display())))?;
    Ok(format!("file:{s}"))
}

/// A VM run by a QEMU process.
pub struct QemuVm {
    id: String,
    run_dir: PathBuf,
    process: Process,
    qmp: Qmp,
    /// Its cgroup, removed once the process has exited.
    cgroup: Option<(Cgroups, String)>,
    /// The uid it runs as when confined.
    uid: Option<u32>,
    /// The memory file it writes through, given to its uid for as long as it runs (a
    /// Landlock-confined process opens it as that uid), taken back for root once it has exited.
    given_memory: Option<PathBuf>,
}

impl QemuVm {
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The QMP session (for driver-internal extensions and tests).
    pub fn qmp(&self) -> &Qmp {
        &self.qmp
    }

    /// Waits until the QEMU process exits (crash, guest poweroff, stop).
    pub async fn exited(&self) {
        self.process.exited().await
    }

    pub fn alive(&self) -> bool {
        self.process.alive()
    }

    async fn kill_and_wait(&self) -> Result<(), VmError> {
        self.process.kill()?;
        if !self.process.wait_timeout(Duration::from_secs(10)).await {
            return Err(VmError::Timeout {
                op: "kill",
                after: Duration::from_secs(10),
            });
        }
        self.after_exit();
        Ok(())
    }

    /// Releases what the process held once it has exited: its cgroup, and the memory file
    /// given to its uid (root's again, so a later process of that uid could not write it
    /// even if it could reach it).
    fn after_exit(&self) {
        if let Some((c, name)) = &self.cgroup {
            c.remove(name);
        }
        if let Some(memory) = &self.given_memory {
            if let Err(e) = confine::take_back(memory) {
                tracing::warn!(file = %memory.display(), error = &e as &dyn std::error::Error, "memory file not taken back");
            }
        }
    }

    /// The VM's cgroup name, when it has one.
    pub fn cgroup(&self) -> Option<&str> {
        self.cgroup.as_ref().map(|(_, n)| n.as_str())
    }
}

impl Vm for QemuVm {
    fn id(&self) -> &str {
        &self.id
    }

    fn agent_socket(&self) -> PathBuf {
        self.run_dir.join(AGENT_SOCKET)
    }

    fn console_log(&self) -> PathBuf {
        self.run_dir.join(CONSOLE_LOG)
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    fn has_exited(&self) -> bool {
        !self.process.alive()
    }

    async fn pause(&self) -> Result<(), VmError> {
        self.qmp.execute(&qmp::Stop {}).await.map_err(control)?;
        Ok(())
    }

    async fn resume(&self) -> Result<(), VmError> {
        self.qmp.execute(&qmp::Cont {}).await.map_err(control)?;
        Ok(())
    }

    async fn state(&self) -> Result<RunState, VmError> {
        if !self.process.alive() {
            return Ok(RunState::Shutdown);
        }
        let s = self
            .qmp
            .execute(&qmp::QueryStatus {})
            .await
            .map_err(control)?;
        Ok(match s.status.as_str() {
            "running" => RunState::Running,
            "paused" | "postmigrate" | "finish-migrate" | "prelaunch" | "suspended" => {
                RunState::Paused
            }
            "inmigrate" => RunState::Incoming,
            "shutdown" | "guest-panicked" => RunState::Shutdown,
            _ => RunState::Other,
        })
    }

    async fn save_state(&self, state: &Path) -> Result<(), VmError> {
        // A confined VM writes into a file of its own in its run directory, which becomes
        // root's, readable but not writable by VM processes, once complete.
        let (tmp, uri) = match self.uid {
            Some(uid) => {
                let tmp = self.run_dir.join(confine::SAVING);
                let _ = std::fs::remove_file(&tmp);
                std::fs::File::create(&tmp)?;
                confine::give(&tmp, uid)?;
                // Relative to its run directory, its working directory (chrooted or not).
                (tmp, format!("file:{}", confine::SAVING))
            }
            None => {
                let tmp = state.with_extension("partial");
                let _ = std::fs::remove_file(&tmp);
                let uri = file_uri(&tmp)?;
                (tmp, uri)
            }
        };
        let result = async {
            set_migration_options(&self.qmp).await?;
            let mut events = self.qmp.events();
            self.qmp
                .execute(&qmp::Migrate { uri })
                .await
                .map_err(control)?;
            wait_migration(self, &mut events, "snapshot").await?;
            confine::move_file(&tmp, state)?;
            if self.uid.is_some() {
                confine::take_back(state)?;
            }
            Ok(())
        }
        .await;
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    async fn agent_disconnected(&self, timeout: Duration) -> Result<(), VmError> {
        let deadline = Instant::now() + timeout;
        loop {
            let devs = self
                .qmp
                .execute(&qmp::QueryChardev {})
                .await
                .map_err(control)?;
            let connected = devs
                .iter()
                .any(|d| d.label == "agent" && !d.filename.starts_with("disconnected"));
            if !connected {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(VmError::Timeout {
                    op: "agent channel close",
                    after: timeout,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn refresh_volume(&self, slot: usize, disk: &VolumeDisk) -> Result<(), VmError> {
        let path = self.run_dir.join(&disk.path);
        let size = std::fs::metadata(&path)?.len();
        if !size.is_multiple_of(512) {
            return Err(VmError::InvalidSpec(format!(
                "volume {} is {size} bytes, not a whole number of 512-byte sectors",
                path.display()
            )));
        }
        let resize = qmp::BlockResize {
            node_name: argv::volume_node(slot),
            size,
        };
        if !disk.read_only {
            // The file already has this size: nothing in it changes, the guest is told.
            return self.qmp.execute(&resize).await.map(drop).map_err(control);
        }
        // A read-only node cannot be resized. With the vCPUs stopped (no request reaches the
        // disk meanwhile) it is reopened writable for the resize, which changes no byte of the
        // file (its mtime, though), and read-only again before the guest runs.
        let running = self
            .qmp
            .execute(&qmp::QueryStatus {})
            .await
            .map_err(control)?
            .running;
        if running {
            self.qmp.execute(&qmp::Stop {}).await.map_err(control)?;
        }
        let named = match self.uid {
            Some(_) if !confine::inside(&self.run_dir, &disk.path) => argv::fdset_path(slot),
            _ => argv::relative_to(&self.run_dir, &disk.path),
        };
        let reopen = |read_only| qmp::BlockdevReopen {
            options: argv::volume_nodes(slot, &named, read_only).into(),
        };
        let resized = async {
            self.qmp.execute(&reopen(false)).await?;
            self.qmp.execute(&resize).await
        }
        .await;
        // Read-only again whatever happened; a VM whose disk stays writable is not resumed.
        self.qmp.execute(&reopen(true)).await.map_err(control)?;
        resized.map_err(control)?;
        if running {
            self.qmp.execute(&qmp::Cont {}).await.map_err(control)?;
        }
        Ok(())
    }

    fn relocate(&mut self, run_dir: PathBuf) {
        self.run_dir = run_dir;
    }

    fn stats(&self) -> Result<VmStats, VmError> {
        self.process.stats()
    }

    fn cpu_time(&self) -> Result<Duration, VmError> {
        self.process.cpu_time()
    }

    async fn stop(&self) -> Result<(), VmError> {
        if self.process.alive() {
            // A polite quit first; QEMU flushes its block devices on the way out.
            let _ = self
                .qmp
                .execute_with_timeout(&qmp::Quit {}, Duration::from_secs(2))
                .await;
            if !self.process.wait_timeout(Duration::from_secs(3)).await {
                self.kill_and_wait().await?;
            }
        }
        self.after_exit();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large log is read from its end: the last lines, whatever came before.
    #[test]
    fn tails_are_read_from_the_end() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join(QEMU_LOG);
        let mut text = "x".repeat(4 << 20);
        text.push_str("\nfirst\n\nsecond\nthird\n");
        std::fs::write(&log, text).unwrap();
        assert_eq!(log_tail(&log), "first; second; third");
        std::fs::write(&log, "").unwrap();
        assert_eq!(log_tail(&log), "no output");
        assert_eq!(log_tail(&d.path().join("none")), "no output");
    }
}
