//! A scriptable, in-memory [`Host`]: no processes, no VMs, no files on disk (but a build's own
//! directory). Sandboxes are entries of a map with a state (running, paused, hibernated,
//! exited); snapshots, volumes and volume snapshots are entries too; each sandbox has an
//! in-memory file tree. What the control plane asks of it is answered at once unless a test
//! scripted otherwise:
//!
//! - **exec outcomes** by command ([`ScriptedHost::on_exec`], [`ScriptedHost::on_exec_prefix`])
//!   or by an environment variable ([`ScriptedHost::on_exec_env`]: one script run in several
//!   modes): exit code, stdout, stderr, an optional delay, or a hang ([`Reply`]). A command
//!   nobody scripted exits 127 with a message on stderr (a test sees it, nothing passes by
//!   accident).
//! - **build results** by spec text ([`ScriptedHost::on_build`]): a built image (its env, size)
//!   or a [`HostError::BuildFailed`], after an optional delay.
//! - **ports** ([`ScriptedHost::on_port`]): a port of every sandbox that answers each
//!   connection with a canned HTTP status (an app's server listening, for the deploy's health
//!   check), over an in-memory stream; a port nobody scripted is not listened on.
//! - **faults** ([`ScriptedHost::fail_next`], [`ScriptedHost::hang_next`],
//!   [`ScriptedHost::delay_next`]): the next N calls of an [`Op`] fail with a chosen
//!   [`HostError`], never return, or take a while.
//!
//! Every call is recorded ([`ScriptedHost::calls`], [`ScriptedHost::count`]) so a test can
//! assert on what the control plane really did.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, ExecEvent, ExecInput, ExecOutcome,
    ExecSpec, FileInfo, FileKind, GuestErrorKind, Host, HostError, HostResult, ListPage, LogChunk,
    LogPos, MetricSample, PortIo, SessionStart, Shape, SnapshotView, SpecRefused, SpecSummary,
    TemplateView, VmState, VmStats, VmView, VolumeHolder, VolumeMount, VolumeSnapshotView,
    VolumeUpload, VolumeView,
};

/// The host operations a fault can be scripted for, and the names [`ScriptedHost::calls`]
/// records them by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Every create: from a template (with volumes, disk limits or a memory file) or a snapshot.
    Create,
    Pause,
    Resume,
    Hibernate,
    /// `wake` and the wake of a hibernated sandbox by `awake` or a data-plane call.
    Wake,
    Destroy,
    Snapshot,
    Fork,
    DeleteSnapshot,
    /// `exec`, `exec_stream` and `exec_session`.
    Exec,
    CreateVolume,
    DeleteVolume,
    SnapshotVolume,
    BuildImage,
    BakeImage,
    RemoveTemplate,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Pause => "pause",
            Op::Resume => "resume",
            Op::Hibernate => "hibernate",
            Op::Wake => "wake",
            Op::Destroy => "destroy",
            Op::Snapshot => "snapshot",
            Op::Fork => "fork",
            Op::DeleteSnapshot => "delete_snapshot",
            Op::Exec => "exec",
            Op::CreateVolume => "create_volume",
            Op::DeleteVolume => "delete_volume",
            Op::SnapshotVolume => "snapshot_volume",
            Op::BuildImage => "build_image",
            Op::BakeImage => "bake_image",
            Op::RemoveTemplate => "remove_template",
        }
    }
}

/// Makes the error of a scripted failure (given the id the call named).
pub type ErrorFn = Arc<dyn Fn(&str) -> HostError + Send + Sync>;

/// What the next calls of an [`Op`] do instead of their work.
#[derive(Clone)]
enum FaultKind {
    Fail(ErrorFn),
    Hang,
    Delay(Duration),
}

struct Fault {
    left: usize,
    kind: FaultKind,
}

/// How a scripted command ends.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Taken before the command ends.
    pub delay: Option<Duration>,
    /// The command never ends (a caller's timeout or a dropped stream ends the wait).
    pub hang: bool,
}

impl Reply {
    /// Exit 0 with `stdout`.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Self {
        Self {
            stdout: stdout.into(),
            ..Self::default()
        }
    }
    /// Exit `code`, no output.
    pub fn exit(code: i32) -> Self {
        Self {
            exit_code: code,
            ..Self::default()
        }
    }
    /// A command that never ends.
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::default()
        }
    }
    pub fn stderr(mut self, stderr: impl Into<Vec<u8>>) -> Self {
        self.stderr = stderr.into();
        self
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = Some(d);
        self
    }
}

/// How a scripted build ends.
#[derive(Debug, Clone)]
pub struct BuildReply {
    /// `Err(message)`: [`HostError::BuildFailed`] with it.
    pub result: Result<Vec<String>, String>,
    pub disk_mb: u32,
    pub delay: Duration,
}

impl BuildReply {
    /// A built image whose OCI config had `env`.
    pub fn ok(env: &[&str]) -> Self {
        Self {
            result: Ok(env.iter().map(|s| s.to_string()).collect()),
            disk_mb: 64,
            delay: Duration::ZERO,
        }
    }
    /// A build that fails with `message`.
    pub fn fail(message: &str) -> Self {
        Self {
            result: Err(message.into()),
            disk_mb: 0,
            delay: Duration::ZERO,
        }
    }
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
}

enum Pattern {
    Exact(String),
    Prefix(String),
}

impl Pattern {
    fn matches(&self, s: &str) -> bool {
        match self {
            Pattern::Exact(p) => s == p,
            Pattern::Prefix(p) => s.starts_with(p.as_str()),
        }
    }
}

/// What a scripted command is recognised by: its command line, and one variable of its
/// environment if the script names one.
struct ExecMatch {
    command: Pattern,
    env: Option<(String, String)>,
}

impl ExecMatch {
    fn matches(&self, command: &str, env: &HashMap<String, String>) -> bool {
        self.command.matches(command)
            && self
                .env
                .as_ref()
                .is_none_or(|(k, v)| env.get(k).is_some_and(|have| have == v))
    }
}

/// One sandbox as the scripted host keeps it.
#[derive(Debug, Clone)]
pub struct ScriptedVm {
    pub view: VmView,
    /// What it was created with: the volumes in its slots.
    pub mounts: Vec<VolumeMount>,
    /// Its file tree: files (path → bytes) and directories.
    pub files: BTreeMap<String, Bytes>,
    pub dirs: BTreeSet<String>,
    /// CPU time [`Host::stats`] reports (a test raises it to make a guest look busy).
    pub cpu_time: Duration,
    /// The readings [`Host::metrics`] reports (a test sets them with
    /// [`ScriptedHost::record_samples`]).
    pub samples: Vec<MetricSample>,
}

#[derive(Default)]
struct State {
    vms: BTreeMap<String, ScriptedVm>,
    snapshots: BTreeMap<String, SnapshotView>,
    volumes: BTreeMap<String, VolumeView>,
    volume_snapshots: BTreeMap<String, VolumeSnapshotView>,
    /// Templates baked by `bake_image` (catalog ones are always there).
    baked: BTreeSet<String>,
    execs: Vec<(ExecMatch, Reply)>,
    /// Ports listened on in every sandbox: the HTTP status each connection is answered with.
    ports: HashMap<u16, u16>,
    builds: Vec<(Pattern, BuildReply)>,
    faults: HashMap<Op, Vec<Fault>>,
    calls: Vec<(Op, String)>,
    /// Commands run, in order: (sandbox, command, environment).
    exec_log: Vec<(String, String, HashMap<String, String>)>,
    /// Names of each build's directory entries when it started.
    build_dirs: Vec<Vec<String>>,
    /// Builds and bakes running now, and the most at once.
    busy: usize,
    most_busy: usize,
}

/// An in-memory [`Host`] a test scripts (see the module's documentation).
pub struct ScriptedHost {
    state: Mutex<State>,
    catalog: Vec<TemplateView>,
    /// Volume slots of every template.
    pub volume_slots: usize,
    /// Host disk a hibernated sandbox takes.
    pub hibernated_bytes: u64,
    /// How long a build and a bake take when not scripted otherwise.
    pub build_time: Duration,
}

impl Default for ScriptedHost {
    fn default() -> Self {
        Self::new()
    }
}

const SHAPE: Shape = Shape {
    vcpus: 1,
    memory_mib: 256,
    disk: None,
};

/// The error of a call on a sandbox the host does not have.
fn no_vm(id: &str) -> HostError {
    HostError::SandboxNotFound(id.to_owned())
}

fn parent_of(path: &str) -> String {
    match path.rfind('/') {
        Some(0) | None => "/".into(),
        Some(i) => path[..i].to_owned(),
    }
}

fn name_of(path: &str) -> String {
    path.rsplit('/').next().unwrap_or_default().to_owned()
}

impl ScriptedHost {
    /// A host whose catalog has `base` and `minimal` (1 vCPU, 256 MiB), three volume slots per
    /// template, 64 MiB per hibernated sandbox, and builds and bakes that take 50 ms.
    pub fn new() -> Self {
        Self::with_catalog(&["base", "minimal"])
    }

    /// A host whose catalog has `names`.
    pub fn with_catalog(names: &[&str]) -> Self {
        Self {
            state: Mutex::default(),
            catalog: names
                .iter()
                .map(|n| TemplateView {
                    name: (*n).into(),
                    description: format!("scripted {n}"),
                    shape: SHAPE,
                    disk_mb: 1024,
                    bake_ms: Some(1),
                })
                .collect(),
            volume_slots: 3,
            hibernated_bytes: 64 << 20,
            build_time: Duration::from_millis(50),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ---- scripting ---------------------------------------------------------------------------

    /// A command exactly `command` (the shell string, else argv joined by spaces) replies
    /// `reply`. Later scripts win over earlier ones.
    pub fn on_exec(&self, command: &str, reply: Reply) {
        self.script_exec(Pattern::Exact(command.into()), None, reply);
    }

    /// A command starting with `prefix` replies `reply`.
    pub fn on_exec_prefix(&self, prefix: &str, reply: Reply) {
        self.script_exec(Pattern::Prefix(prefix.into()), None, reply);
    }

    /// Any command whose environment has `key` set to `value` replies `reply`: one script run
    /// in several modes told apart by a variable (the database bootstrap's `PS_MODE`).
    pub fn on_exec_env(&self, key: &str, value: &str, reply: Reply) {
        self.script_exec(
            Pattern::Prefix(String::new()),
            Some((key.into(), value.into())),
            reply,
        );
    }

    fn script_exec(&self, command: Pattern, env: Option<(String, String)>, reply: Reply) {
        self.lock().execs.push((ExecMatch { command, env }, reply));
    }

    /// Port `port` of every sandbox listens from now on (`None`: stops listening): each
    /// connection ([`Host::connect_port`]) reads the request's head and is answered `HTTP/1.1
    /// <status>` with a two-byte body, then closed. Unscripted ports refuse connections
    /// ([`GuestErrorKind::Unavailable`]).
    pub fn on_port(&self, port: u16, status: Option<u16>) {
        let mut s = self.lock();
        match status {
            Some(st) => s.ports.insert(port, st),
            None => s.ports.remove(&port),
        };
    }

    /// A spec build whose text starts with `spec_prefix` (an OCI build: the text `oci`) ends
    /// as `reply` says. Unscripted builds succeed with no env.
    pub fn on_build(&self, spec_prefix: &str, reply: BuildReply) {
        self.lock()
            .builds
            .push((Pattern::Prefix(spec_prefix.into()), reply));
    }

    /// The next `n` calls of `op` fail with the error `error` makes (from the id they named).
    pub fn fail_next(
        &self,
        op: Op,
        n: usize,
        error: impl Fn(&str) -> HostError + Send + Sync + 'static,
    ) {
        self.fault(op, n, FaultKind::Fail(Arc::new(error)));
    }

    /// Every call of `op` from now on fails with the error `error` makes.
    pub fn fail_always(&self, op: Op, error: impl Fn(&str) -> HostError + Send + Sync + 'static) {
        self.fail_next(op, usize::MAX, error);
    }

    /// The next `n` calls of `op` never return.
    pub fn hang_next(&self, op: Op, n: usize) {
        self.fault(op, n, FaultKind::Hang);
    }

    /// The next `n` calls of `op` take `d` longer.
    pub fn delay_next(&self, op: Op, n: usize, d: Duration) {
        self.fault(op, n, FaultKind::Delay(d));
    }

    /// Removes every fault scripted for `op`.
    pub fn clear_faults(&self, op: Op) {
        self.lock().faults.remove(&op);
    }

    fn fault(&self, op: Op, n: usize, kind: FaultKind) {
        self.lock()
            .faults
            .entry(op)
            .or_default()
            .push(Fault { left: n, kind });
    }

    // ---- looking -----------------------------------------------------------------------------

    /// Every call so far, in order, as `(op, the id it named)`.
    pub fn calls(&self) -> Vec<(Op, String)> {
        self.lock().calls.clone()
    }

    /// How many calls of `op` were made (failed ones included).
    pub fn count(&self, op: Op) -> usize {
        self.lock().calls.iter().filter(|(o, _)| *o == op).count()
    }

    /// Commands run so far: (sandbox, command).
    pub fn exec_log(&self) -> Vec<(String, String)> {
        self.lock()
            .exec_log
            .iter()
            .map(|(sb, command, _)| (sb.clone(), command.clone()))
            .collect()
    }

    /// The environments of the commands run so far, in order: (sandbox, environment).
    pub fn exec_envs(&self) -> Vec<(String, HashMap<String, String>)> {
        self.lock()
            .exec_log
            .iter()
            .map(|(sb, _, env)| (sb.clone(), env.clone()))
            .collect()
    }

    /// One sandbox as the host keeps it.
    pub fn vm(&self, id: &str) -> Option<ScriptedVm> {
        self.lock().vms.get(id).cloned()
    }

    /// The state of sandbox `id` (`None`: the host has no such sandbox).
    pub fn vm_state(&self, id: &str) -> Option<VmState> {
        self.lock().vms.get(id).map(|v| v.view.state)
    }

    /// Ids of the sandboxes the host has.
    pub fn vm_ids(&self) -> Vec<String> {
        self.lock().vms.keys().cloned().collect()
    }

    /// Sets sandbox `id`'s state from outside (e.g. [`VmState::Exited`]: its VM died).
    pub fn set_vm_state(&self, id: &str, state: VmState) {
        if let Some(v) = self.lock().vms.get_mut(id) {
            v.view.state = state;
        }
    }

    /// Adds `d` to the CPU time sandbox `id` reports (a busy guest).
    pub fn burn_cpu(&self, id: &str, d: Duration) {
        if let Some(v) = self.lock().vms.get_mut(id) {
            v.cpu_time += d;
        }
    }

    /// Adds readings of sandbox `id`'s VM, as a real host's sampler would have taken them.
    pub fn record_samples(&self, id: &str, samples: impl IntoIterator<Item = MetricSample>) {
        if let Some(v) = self.lock().vms.get_mut(id) {
            v.samples.extend(samples);
        }
    }

    /// Ids of the snapshots the host has.
    pub fn snapshot_ids(&self) -> Vec<String> {
        self.lock().snapshots.keys().cloned().collect()
    }

    /// What each build found in its directory when it started (entry names, sorted).
    pub fn build_dirs(&self) -> Vec<Vec<String>> {
        self.lock().build_dirs.clone()
    }

    /// The most builds and bakes that ran at once.
    pub fn most_builds_at_once(&self) -> usize {
        self.lock().most_busy
    }

    // ---- inside ------------------------------------------------------------------------------

    /// Records a call of `op` on `id` and applies a scripted fault, if any.
    async fn enter(&self, op: Op, id: &str) -> HostResult<()> {
        let fault = {
            let mut s = self.lock();
            s.calls.push((op, id.to_owned()));
            let faults = s.faults.entry(op).or_default();
            let kind = faults.first_mut().map(|f| {
                f.left = f.left.saturating_sub(1);
                f.kind.clone()
            });
            faults.retain(|f| f.left > 0);
            kind
        };
        match fault {
            None => Ok(()),
            Some(FaultKind::Fail(e)) => Err(e(id)),
            Some(FaultKind::Hang) => futures::future::pending().await,
            Some(FaultKind::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(())
            }
        }
    }

    fn knows_template(&self, s: &State, name: &str) -> bool {
        self.is_catalog(name) || s.baked.contains(name)
    }

    fn shape_of(&self, template: &str) -> Shape {
        self.catalog
            .iter()
            .find(|t| t.name == template)
            .map_or(SHAPE, |t| t.shape)
    }

    /// Adds a running sandbox (refused when the id is taken).
    fn add_vm(
        &self,
        s: &mut State,
        id: &str,
        template: &str,
        mounts: Vec<VolumeMount>,
        files: BTreeMap<String, Bytes>,
    ) -> HostResult<VmView> {
        if s.vms.contains_key(id) {
            return Err(HostError::failed("create", format!("sandbox {id} exists")));
        }
        let view = VmView {
            id: id.to_owned(),
            state: VmState::Running,
            template: template.to_owned(),
            shape: self.shape_of(template),
            ready_ms: 1,
            image_bytes: 0,
        };
        let mut dirs: BTreeSet<String> = ["/".to_owned(), "/root".to_owned(), "/tmp".to_owned()]
            .into_iter()
            .collect();
        dirs.extend(mounts.iter().map(|m| m.path.clone()));
        s.vms.insert(
            id.to_owned(),
            ScriptedVm {
                view: view.clone(),
                mounts,
                files,
                dirs,
                cpu_time: Duration::ZERO,
                samples: Vec::new(),
            },
        );
        Ok(view)
    }

    /// Sandbox `id` ready for a data-plane call: woken when hibernated, refused while paused or
    /// exited.
    async fn data_plane(&self, id: &str, op: &'static str) -> HostResult<()> {
        let state = self.lock().vms.get(id).map(|v| v.view.state);
        match state {
            None => Err(no_vm(id)),
            Some(VmState::Running) => Ok(()),
            Some(VmState::Hibernated) => self.wake(id).await.map(|_| ()),
            Some(VmState::Exited) => Err(HostError::VmExited(id.to_owned())),
            Some(state @ VmState::Paused) => Err(HostError::InvalidState {
                id: id.to_owned(),
                state,
                op,
            }),
        }
    }

    fn set_state(
        &self,
        id: &str,
        from: &[VmState],
        to: VmState,
        op: &'static str,
    ) -> HostResult<VmView> {
        let mut s = self.lock();
        let hibernated_bytes = self.hibernated_bytes;
        let v = s.vms.get_mut(id).ok_or_else(|| no_vm(id))?;
        if v.view.state == to {
            return Ok(v.view.clone());
        }
        if !from.contains(&v.view.state) {
            return Err(HostError::InvalidState {
                id: id.to_owned(),
                state: v.view.state,
                op,
            });
        }
        v.view.state = to;
        v.view.image_bytes = if to == VmState::Hibernated {
            hibernated_bytes
        } else {
            0
        };
        Ok(v.view.clone())
    }

    fn command_of(spec: &ExecSpec) -> String {
        if spec.shell.is_empty() {
            spec.argv.join(" ")
        } else {
            spec.shell.clone()
        }
    }

    /// Runs a scripted command: the reply of the latest script that matches it.
    async fn run(&self, id: &str, spec: &ExecSpec) -> HostResult<ExecOutcome> {
        self.enter(Op::Exec, id).await?;
        self.data_plane(id, "exec").await?;
        let command = Self::command_of(spec);
        let reply = {
            let mut s = self.lock();
            s.exec_log
                .push((id.to_owned(), command.clone(), spec.env.clone()));
            s.execs
                .iter()
                .rev()
                .find(|(m, _)| m.matches(&command, &spec.env))
                .map(|(_, r)| r.clone())
        };
        let reply = reply.unwrap_or_else(|| {
            Reply::exit(127).stderr(format!("scripted host: no script for {command:?}"))
        });
        let started = std::time::Instant::now();
        if reply.hang {
            if spec.timeout.is_zero() {
                futures::future::pending::<()>().await;
            }
            tokio::time::sleep(spec.timeout).await;
            return Ok(ExecOutcome {
                exit_code: -1,
                timed_out: true,
                duration_ms: started.elapsed().as_millis() as u64,
                ..ExecOutcome::default()
            });
        }
        if let Some(d) = reply.delay {
            if !spec.timeout.is_zero() && d > spec.timeout {
                tokio::time::sleep(spec.timeout).await;
                return Ok(ExecOutcome {
                    exit_code: -1,
                    timed_out: true,
                    duration_ms: started.elapsed().as_millis() as u64,
                    ..ExecOutcome::default()
                });
            }
            tokio::time::sleep(d).await;
        }
        // The sandbox may have gone meanwhile (deleted, hibernated).
        match self.vm_state(id) {
            Some(VmState::Running) => {}
            Some(state) => {
                return Err(HostError::CutOff {
                    id: id.into(),
                    state,
                })
            }
            None => return Err(no_vm(id)),
        }
        Ok(ExecOutcome {
            stdout: reply.stdout,
            stderr: reply.stderr,
            exit_code: reply.exit_code,
            timed_out: false,
            truncated: false,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }

    fn events(out: ExecOutcome) -> BoxStream<HostResult<ExecEvent>> {
        let mut ev = Vec::new();
        if !out.stdout.is_empty() {
            ev.push(Ok(ExecEvent::Stdout(out.stdout.into())));
        }
        if !out.stderr.is_empty() {
            ev.push(Ok(ExecEvent::Stderr(out.stderr.into())));
        }
        ev.push(Ok(ExecEvent::Exit {
            exit_code: out.exit_code,
            timed_out: out.timed_out,
            truncated: out.truncated,
            duration_ms: out.duration_ms,
        }));
        futures::stream::iter(ev).boxed()
    }

    async fn busy(&self, d: Duration) {
        {
            let mut s = self.lock();
            s.busy += 1;
            s.most_busy = s.most_busy.max(s.busy);
        }
        tokio::time::sleep(d).await;
        self.lock().busy -= 1;
    }

    fn with_vm<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut ScriptedVm) -> HostResult<T>,
    ) -> HostResult<T> {
        let mut s = self.lock();
        let v = s.vms.get_mut(id).ok_or_else(|| no_vm(id))?;
        f(v)
    }
}

fn not_found(path: &str) -> HostError {
    HostError::guest(
        GuestErrorKind::NotFound,
        format!("{path}: no such file or directory"),
    )
}

fn info(path: &str, kind: FileKind, size: u64) -> FileInfo {
    FileInfo {
        name: name_of(path),
        path: path.to_owned(),
        kind,
        size,
        mode: if kind == FileKind::Dir { 0o755 } else { 0o644 },
        mtime_ms: 0,
        symlink_target: None,
    }
}

#[async_trait::async_trait]
impl Host for ScriptedHost {
    async fn list(&self) -> Vec<VmView> {
        self.lock().vms.values().map(|v| v.view.clone()).collect()
    }

    async fn get(&self, id: &str) -> HostResult<VmView> {
        self.lock()
            .vms
            .get(id)
            .map(|v| v.view.clone())
            .ok_or_else(|| no_vm(id))
    }

    async fn create(&self, template: &str, id: &str) -> HostResult<VmView> {
        self.create_with_volumes(template, id, Vec::new()).await
    }

    async fn create_with_volumes(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
    ) -> HostResult<VmView> {
        self.enter(Op::Create, id).await?;
        let mut s = self.lock();
        if !self.knows_template(&s, template) {
            return Err(HostError::TemplateNotFound(template.into()));
        }
        if volumes.len() > self.volume_slots {
            return Err(HostError::TooManyVolumes {
                template: template.into(),
                slots: self.volume_slots,
                wanted: volumes.len(),
            });
        }
        if let Some(m) = volumes
            .iter()
            .find(|m| !s.volumes.contains_key(&m.volume_id))
        {
            return Err(HostError::VolumeNotFound(m.volume_id.clone()));
        }
        self.add_vm(&mut s, id, template, volumes, BTreeMap::new())
    }

    async fn create_with_disk(
        &self,
        template: &str,
        id: &str,
        volumes: Vec<VolumeMount>,
        disk: pandastack_host::DiskRequest,
    ) -> HostResult<VmView> {
        let mut view = self.create_with_volumes(template, id, volumes).await?;
        if !disk.is_empty() {
            let limits = pandastack_host::DiskLimits {
                bytes_per_sec: disk.mbps.unwrap_or(0) << 20,
                iops: disk.iops.unwrap_or(0),
            };
            view.shape.disk = Some(limits);
            if let Some(v) = self.lock().vms.get_mut(id) {
                v.view.shape.disk = Some(limits);
            }
        }
        Ok(view)
    }

    async fn create_with_memory_file(&self, template: &str, id: &str) -> HostResult<VmView> {
        self.create_with_volumes(template, id, Vec::new()).await
    }

    async fn create_from_snapshot(&self, snapshot: &str, id: &str) -> HostResult<VmView> {
        self.enter(Op::Create, id).await?;
        let mut s = self.lock();
        let snap = s
            .snapshots
            .get(snapshot)
            .cloned()
            .ok_or_else(|| HostError::SnapshotNotFound(snapshot.into()))?;
        let files = s
            .vms
            .get(&snap.sandbox_id)
            .map(|v| v.files.clone())
            .unwrap_or_default();
        self.add_vm(&mut s, id, &snap.template, Vec::new(), files)
    }

    async fn pause(&self, id: &str) -> HostResult<VmView> {
        self.enter(Op::Pause, id).await?;
        if self.vm_state(id) == Some(VmState::Hibernated) {
            self.wake(id).await?;
        }
        self.set_state(id, &[VmState::Running], VmState::Paused, "pause")
    }

    async fn resume(&self, id: &str) -> HostResult<VmView> {
        self.enter(Op::Resume, id).await?;
        self.set_state(
            id,
            &[VmState::Paused, VmState::Hibernated],
            VmState::Running,
            "resume",
        )
    }

    async fn hibernate(&self, id: &str) -> HostResult<VmView> {
        self.enter(Op::Hibernate, id).await?;
        self.set_state(
            id,
            &[VmState::Running, VmState::Paused],
            VmState::Hibernated,
            "hibernate",
        )
    }

    async fn wake(&self, id: &str) -> HostResult<VmView> {
        self.enter(Op::Wake, id).await?;
        self.set_state(id, &[VmState::Hibernated], VmState::Running, "wake")
    }

    async fn awake(&self, id: &str) -> HostResult<VmView> {
        self.data_plane(id, "awake").await?;
        self.get(id).await
    }

    async fn destroy(&self, id: &str) -> HostResult<()> {
        self.enter(Op::Destroy, id).await?;
        match self.lock().vms.remove(id) {
            Some(_) => Ok(()),
            None => Err(no_vm(id)),
        }
    }

    async fn metrics(&self, id: &str, since_ms: i64) -> HostResult<Vec<MetricSample>> {
        let s = self.lock();
        let v = s.vms.get(id).ok_or_else(|| no_vm(id))?;
        Ok(v.samples
            .iter()
            .filter(|x| x.at_ms >= since_ms)
            .copied()
            .collect())
    }

    async fn stats(&self, id: &str) -> HostResult<Option<VmStats>> {
        let s = self.lock();
        let v = s.vms.get(id).ok_or_else(|| no_vm(id))?;
        Ok(match v.view.state {
            VmState::Running | VmState::Paused => Some(VmStats {
                pid: 1,
                rss_bytes: u64::from(v.view.shape.memory_mib) << 20,
                pss_bytes: u64::from(v.view.shape.memory_mib) << 19,
                cpu_time: v.cpu_time,
            }),
            _ => None,
        })
    }

    async fn console(&self, id: &str, _: Option<LogPos>, _: usize) -> HostResult<LogChunk> {
        self.get(id).await?;
        Ok(LogChunk::default())
    }

    async fn snapshot(&self, id: &str, snapshot_id: &str) -> HostResult<SnapshotView> {
        self.enter(Op::Snapshot, id).await?;
        self.data_plane(id, "snapshot").await?;
        let mut s = self.lock();
        let template = s
            .vms
            .get(id)
            .ok_or_else(|| no_vm(id))?
            .view
            .template
            .clone();
        let snap = SnapshotView {
            id: snapshot_id.to_owned(),
            sandbox_id: id.to_owned(),
            template,
            size_bytes: 32 << 20,
        };
        s.snapshots.insert(snapshot_id.to_owned(), snap.clone());
        Ok(snap)
    }

    async fn fork(
        &self,
        id: &str,
        snapshot_id: &str,
        child_ids: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        self.enter(Op::Fork, id).await?;
        self.data_plane(id, "fork").await?;
        let mut s = self.lock();
        let parent = s.vms.get(id).cloned().ok_or_else(|| no_vm(id))?;
        let snap = SnapshotView {
            id: snapshot_id.to_owned(),
            sandbox_id: id.to_owned(),
            template: parent.view.template.clone(),
            size_bytes: 32 << 20,
        };
        s.snapshots.insert(snapshot_id.to_owned(), snap.clone());
        let mut views = Vec::new();
        for c in child_ids {
            views.push(self.add_vm(
                &mut s,
                c,
                &parent.view.template,
                Vec::new(),
                parent.files.clone(),
            )?);
        }
        Ok((snap, views))
    }

    async fn store_hibernated(&self, id: &str, _: &str) -> HostResult<String> {
        Err(HostError::failed(
            "store hibernated sandbox",
            format!("the scripted host has no object store ({id})"),
        ))
    }

    async fn store_snapshot(&self, snapshot_id: &str, _: &str) -> HostResult<()> {
        Err(HostError::failed(
            "store snapshot",
            format!("the scripted host has no object store ({snapshot_id})"),
        ))
    }

    async fn fetch_snapshot(
        &self,
        snapshot_id: &str,
        _: &str,
        _: Option<&pandastack_host::Origin>,
    ) -> HostResult<()> {
        Err(HostError::failed(
            "fetch snapshot",
            format!("the scripted host has no object store ({snapshot_id})"),
        ))
    }

    async fn leave(&self, id: &str) -> HostResult<String> {
        Err(HostError::failed(
            "move a sandbox",
            format!("the scripted host moves nothing ({id})"),
        ))
    }

    async fn adopt_from(
        &self,
        id: &str,
        _: &str,
        _: &pandastack_host::Origin,
    ) -> HostResult<VmView> {
        Err(HostError::failed(
            "adopt a sandbox from another host",
            format!("the scripted host moves nothing ({id})"),
        ))
    }

    async fn store_durable(&self, id: &str, _: &str) -> HostResult<String> {
        Err(HostError::failed(
            "store a durable copy of a hibernated sandbox",
            format!("the scripted host has no object store ({id})"),
        ))
    }

    async fn adopt_stored(&self, id: &str, _: &str, _: &str) -> HostResult<VmView> {
        Err(HostError::failed(
            "adopt stored sandbox",
            format!("the scripted host has no object store ({id})"),
        ))
    }

    async fn forget_stored(&self, _: &str, _: &str, _: &str) -> HostResult<()> {
        Ok(())
    }

    async fn delete_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        self.enter(Op::DeleteSnapshot, snapshot_id).await?;
        self.lock().snapshots.remove(snapshot_id);
        Ok(())
    }

    async fn keep_standby(&self, snapshot_id: &str, _: usize) -> HostResult<usize> {
        if !self.lock().snapshots.contains_key(snapshot_id) {
            return Err(HostError::SnapshotNotFound(snapshot_id.into()));
        }
        Ok(0)
    }

    async fn create_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        self.enter(Op::CreateVolume, id).await?;
        let v = VolumeView {
            id: id.to_owned(),
            size_bytes,
            allocated_bytes: 0,
        };
        self.lock().volumes.insert(id.to_owned(), v.clone());
        Ok(v)
    }

    async fn volume(&self, id: &str) -> HostResult<VolumeView> {
        self.lock()
            .volumes
            .get(id)
            .cloned()
            .ok_or_else(|| HostError::VolumeNotFound(id.into()))
    }

    async fn grow_volume(&self, id: &str, size_bytes: u64) -> HostResult<VolumeView> {
        let mut s = self.lock();
        let v = s
            .volumes
            .get_mut(id)
            .ok_or_else(|| HostError::VolumeNotFound(id.into()))?;
        v.size_bytes = v.size_bytes.max(size_bytes);
        Ok(v.clone())
    }

    async fn delete_volume(&self, id: &str) -> HostResult<()> {
        self.enter(Op::DeleteVolume, id).await?;
        self.lock().volumes.remove(id);
        Ok(())
    }

    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        Ok(self.lock().volumes.keys().cloned().collect())
    }

    async fn snapshot_volume(
        &self,
        id: &str,
        snapshot_id: &str,
        holder: Option<VolumeHolder>,
    ) -> HostResult<VolumeSnapshotView> {
        self.enter(Op::SnapshotVolume, id).await?;
        let mut s = self.lock();
        let size = s
            .volumes
            .get(id)
            .ok_or_else(|| HostError::VolumeNotFound(id.into()))?
            .size_bytes;
        let frozen = holder.is_some_and(|h| {
            s.vms
                .get(&h.sandbox_id)
                .is_some_and(|v| v.view.state == VmState::Running)
        });
        let v = VolumeSnapshotView {
            id: snapshot_id.to_owned(),
            size_bytes: size,
            copy_ms: 0,
            frozen,
        };
        s.volume_snapshots.insert(snapshot_id.to_owned(), v.clone());
        Ok(v)
    }

    async fn delete_volume_snapshot(&self, snapshot_id: &str) -> HostResult<()> {
        self.lock().volume_snapshots.remove(snapshot_id);
        Ok(())
    }

    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        Ok(self.lock().volume_snapshots.keys().cloned().collect())
    }

    async fn volume_from_snapshot(
        &self,
        snapshot_id: &str,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        let size = self
            .lock()
            .volume_snapshots
            .get(snapshot_id)
            .map(|v| v.size_bytes)
            .ok_or_else(|| HostError::VolumeSnapshotNotFound(snapshot_id.into()))?;
        self.create_volume(id, size.max(size_bytes)).await
    }

    async fn upload_volume_snapshot(&self, snapshot_id: &str, _: &str) -> HostResult<VolumeUpload> {
        Err(HostError::failed(
            "upload volume snapshot",
            format!("the scripted host has no object store ({snapshot_id})"),
        ))
    }

    /// An empty volume of the manifest's length (at least `size_bytes`): the scripted host
    /// keeps no data, so a volume restored from a backup is only the right size.
    async fn volume_from_manifest(
        &self,
        _: &str,
        manifest: &pandastack_objects::Manifest,
        id: &str,
        size_bytes: u64,
    ) -> HostResult<VolumeView> {
        self.create_volume(id, manifest.length.max(size_bytes))
            .await
    }

    async fn exec(&self, id: &str, spec: ExecSpec) -> HostResult<ExecOutcome> {
        self.run(id, &spec).await
    }

    async fn exec_stream(
        &self,
        id: &str,
        spec: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        Ok(Self::events(self.run(id, &spec).await?))
    }

    async fn exec_session(
        &self,
        id: &str,
        start: SessionStart,
        _: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        Ok(Self::events(self.run(id, &start.spec).await?))
    }

    async fn read_file(&self, id: &str, path: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        self.data_plane(id, "read a file").await?;
        let data = self.with_vm(id, |v| {
            v.files.get(path).cloned().ok_or_else(|| not_found(path))
        })?;
        Ok(futures::stream::iter([Ok(data)]).boxed())
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        mut body: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        self.data_plane(id, "write a file").await?;
        let mut data = Vec::new();
        while let Some(chunk) = body.next().await {
            match chunk {
                Ok(b) => data.extend_from_slice(&b),
                Err(m) => return Err(HostError::guest(GuestErrorKind::Unavailable, m)),
            }
        }
        let n = data.len() as u64;
        self.with_vm(id, |v| {
            let mut dir = parent_of(path);
            while dir != "/" {
                v.dirs.insert(dir.clone());
                dir = parent_of(&dir);
            }
            v.files.insert(path.to_owned(), data.into());
            Ok(n)
        })
    }

    async fn stat(&self, id: &str, path: &str) -> HostResult<FileInfo> {
        self.data_plane(id, "stat").await?;
        self.with_vm(id, |v| {
            if let Some(f) = v.files.get(path) {
                Ok(info(path, FileKind::File, f.len() as u64))
            } else if v.dirs.contains(path) {
                Ok(info(path, FileKind::Dir, 0))
            } else {
                Err(not_found(path))
            }
        })
    }

    /// Scripted guests have no file system to watch (the fake VM driver's real guest agent
    /// does).
    async fn watch(
        &self,
        id: &str,
        _path: &str,
        _recursive: bool,
    ) -> HostResult<BoxStream<HostResult<Vec<pandastack_host::WatchEvent>>>> {
        self.data_plane(id, "watch").await?;
        Err(HostError::guest(
            GuestErrorKind::InvalidArgument,
            "a scripted host does not watch files",
        ))
    }

    async fn list_dir(
        &self,
        id: &str,
        path: &str,
        depth: u32,
        page: ListPage,
    ) -> HostResult<DirPage> {
        self.data_plane(id, "list").await?;
        self.with_vm(id, |v| {
            if !v.dirs.contains(path) {
                return Err(not_found(path));
            }
            let base = path.trim_end_matches('/');
            let within = |p: &str| {
                p.strip_prefix(base)
                    .and_then(|r| r.strip_prefix('/'))
                    .is_some_and(|r| !r.is_empty() && r.split('/').count() <= depth.max(1) as usize)
            };
            let mut entries: Vec<FileInfo> = v
                .files
                .iter()
                .filter(|(p, _)| within(p))
                .map(|(p, d)| info(p, FileKind::File, d.len() as u64))
                .chain(
                    v.dirs
                        .iter()
                        .filter(|p| within(p))
                        .map(|p| info(p, FileKind::Dir, 0)),
                )
                .filter(|e| page.after.as_ref().is_none_or(|a| e.path > *a))
                .collect();
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            let more = entries.len() > page.limit as usize;
            entries.truncate(page.limit as usize);
            let next_after = if more {
                entries.last().map(|e| e.path.clone())
            } else {
                None
            };
            Ok(DirPage {
                entries,
                next_after,
            })
        })
    }

    async fn mkdir(&self, id: &str, path: &str, parents: bool) -> HostResult<()> {
        self.data_plane(id, "mkdir").await?;
        self.with_vm(id, |v| {
            if !parents && !v.dirs.contains(&parent_of(path)) {
                return Err(not_found(&parent_of(path)));
            }
            let mut dir = path.to_owned();
            while dir != "/" {
                v.dirs.insert(dir.clone());
                dir = parent_of(&dir);
            }
            Ok(())
        })
    }

    async fn remove(&self, id: &str, path: &str, recursive: bool) -> HostResult<()> {
        self.data_plane(id, "remove").await?;
        self.with_vm(id, |v| {
            if v.files.remove(path).is_some() {
                return Ok(());
            }
            if !v.dirs.contains(path) {
                return Err(not_found(path));
            }
            let under = format!("{}/", path.trim_end_matches('/'));
            let has_children = v.files.keys().any(|p| p.starts_with(&under))
                || v.dirs.iter().any(|p| p.starts_with(&under));
            if has_children && !recursive {
                return Err(HostError::guest(
                    GuestErrorKind::InvalidArgument,
                    format!("{path}: directory not empty"),
                ));
            }
            v.files.retain(|p, _| !p.starts_with(&under));
            v.dirs.retain(|p| !p.starts_with(&under) && p != path);
            Ok(())
        })
    }

    async fn rename(&self, id: &str, from: &str, to: &str, overwrite: bool) -> HostResult<()> {
        self.data_plane(id, "rename").await?;
        self.with_vm(id, |v| {
            if !overwrite && (v.files.contains_key(to) || v.dirs.contains(to)) {
                return Err(HostError::guest(
                    GuestErrorKind::AlreadyExists,
                    format!("{to}: exists"),
                ));
            }
            let data = v.files.remove(from).ok_or_else(|| not_found(from))?;
            v.files.insert(to.to_owned(), data);
            Ok(())
        })
    }

    async fn connect_port(&self, id: &str, port: u16) -> HostResult<Box<dyn PortIo>> {
        self.data_plane(id, "connect").await?;
        let Some(status) = self.lock().ports.get(&port).copied() else {
            return Err(HostError::guest(
                GuestErrorKind::Unavailable,
                format!("nothing listens on port {port} (scripted host)"),
            ));
        };
        let (client, mut server) = tokio::io::duplex(16 * 1024);
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match server.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let answer = format!(
                "HTTP/1.1 {status} Scripted\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            );
            let _ = server.write_all(answer.as_bytes()).await;
            let _ = server.shutdown().await;
        });
        Ok(Box::new(client))
    }

    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        Ok(self.catalog.clone())
    }

    fn is_catalog(&self, name: &str) -> bool {
        self.catalog.iter().any(|t| t.name == name)
    }

    async fn rebake(&self, name: &str) -> HostResult<()> {
        if !self.is_catalog(name) {
            return Err(HostError::TemplateNotFound(name.into()));
        }
        Ok(())
    }

    async fn remove_template(&self, name: &str) -> HostResult<()> {
        self.enter(Op::RemoveTemplate, name).await?;
        self.lock().baked.remove(name);
        Ok(())
    }

    /// A spec is `name=<name>` (a test's shorthand, not TOML).
    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        let name = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("name="))
            .ok_or_else(|| SpecRefused::Parse("want name=<name>".into()))?;
        Ok(SpecSummary {
            name: name.trim().to_owned(),
            description: String::new(),
            shape: SHAPE,
            disk_mb: 64,
        })
    }

    async fn build_image(
        &self,
        build_id: &str,
        source: BuildSource,
        dir: PathBuf,
        mut log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        self.enter(Op::BuildImage, build_id).await?;
        let mut seen: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        seen.sort();
        let key = match &source {
            BuildSource::Spec(text) => text.clone(),
            BuildSource::Oci { .. } | BuildSource::OciStored { .. } => "oci".into(),
        };
        let reply = {
            let mut s = self.lock();
            s.build_dirs.push(seen);
            s.builds
                .iter()
                .rev()
                .find(|(p, _)| p.matches(&key))
                .map(|(_, r)| r.clone())
        };
        let reply = reply.unwrap_or_else(|| BuildReply::ok(&[]).delay(self.build_time));
        log("scripted build step");
        self.busy(reply.delay).await;
        let env = reply.result.map_err(HostError::BuildFailed)?;
        let image = dir.join("rootfs.ext4");
        std::fs::write(&image, b"scripted image")
            .map_err(|e| HostError::failed("write the image", e))?;
        Ok(BuiltImage {
            image,
            shape: None,
            disk_mb: reply.disk_mb,
            env,
        })
    }

    async fn bake_image(&self, name: &str, _: &Path, _: Shape) -> HostResult<u64> {
        self.enter(Op::BakeImage, name).await?;
        self.busy(self.build_time).await;
        self.lock().baked.insert(name.to_owned());
        Ok(7)
    }
}
