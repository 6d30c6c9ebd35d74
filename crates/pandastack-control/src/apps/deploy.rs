//! One deploy, as its job runs it: fetch → plan → a VM of its own installs and builds it →
//! its server starts (bake) → health check → the traffic switches. Each phase's milliseconds go
//! into the row (`phases`) and every decision and command output into the deploy log.
//!
//! Each phase is one function ([`DeployPhase`]: clone, detect, boot, build, start, health,
//! snapshot, switch) returning a [`DeployError`]: the phase and a typed [`DeployCause`] whose
//! text is what the deploy's log and its row's `error` say.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::StreamExt;
use pandastack_api_types::{AppConfig, DeployState, OnTimeout, SandboxState};
use pandastack_host::{error_chain, ExecEvent, ExecSpec};
use pandastack_store::{now_ms, AppRow, DeployRow, JobRow, SandboxRow, StoreError};

use super::check::{until_healthy, Probe};
use super::detect::{self, BuildPlan, Overrides};
use super::shared::scaled;
use super::{
    app_env, config_of, deps, source, AppError, Apps, Shared, SharedError, APP_DIR, APP_LOG,
    APP_METADATA, APP_TEMPLATE, DEPLOY_METADATA, UPLOAD, UPLOAD_REF,
};
use crate::templates::BuildLog;
use crate::{Source, Verb};

/// The host's CA bundle (Debian's path) unless `SSL_CERT_FILE` names another.
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Where the host's CA bundle goes in an app's VM.
const VM_CA_BUNDLE: &str = "/usr/local/share/pandastack/host-ca.crt";
/// Proxy settings of the host passed on to builds and servers.
const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];

/// Port of a plan that names none (never, in practice: detection always sets one).
pub(crate) const DEFAULT_PORT: u16 = 3000;
/// Environment of every build step unless the app sets the variable itself (see `step`).
const NPM_QUIET: [(&str, &str); 3] = [
    ("npm_config_audit", "false"),
    ("npm_config_fund", "false"),
    ("npm_config_update_notifier", "false"),
];
/// Longest an install or a build may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(1800);
/// Longest a new version's server may take to listen on its port (`next start` took 122 s in a
/// 1-vCPU VM under TCG on a loaded host).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest a listening server may take to answer its health check with 2xx/3xx.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// Requests in flight on the old version get this long before its VM hibernates.
const DRAIN: Duration = Duration::from_secs(10);

/// How long a deploy waits for a new version and for the one it replaces
/// ([`crate::ControlConfig::deploy`]; the defaults are the server's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeployTimings {
    /// Longest a new version's server may take to listen on its port.
    pub listen: Duration,
    /// Longest a listening server may take to answer its health check with 2xx/3xx.
    pub check: Duration,
    /// How long requests in flight on the replaced version get before its VM hibernates.
    pub drain: Duration,
}

impl Default for DeployTimings {
    fn default() -> Self {
        Self {
            listen: LISTEN_TIMEOUT,
            check: CHECK_TIMEOUT,
            drain: DRAIN,
        }
    }
}
/// Standby versions whose VMs are kept for a rollback (older ones are removed).
const KEEP_STANDBY: usize = 3;

/// The port of a deploy's plan.
pub(crate) fn plan_port(d: &DeployRow) -> Option<u16> {
    d.plan
        .as_ref()?
        .get("port")?
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
}

/// Where a tarball waits in the VM until it is unpacked in [`APP_DIR`].
pub(super) const VM_UNPACK: &str = "/tmp/pandastack-unpack.tar.gz";

/// Drops the guest's page cache after a build (see the pipeline).
const RELEASE_BUILD_CACHE: &str = "sync && echo 3 > /proc/sys/vm/drop_caches";

/// The template of an app VM with `memory_mb` of memory.
fn app_template(memory_mb: u32) -> String {
    if memory_mb == pandastack_api_types::DEFAULT_APP_MEMORY_MB {
        APP_TEMPLATE.to_owned()
    } else {
        format!("{APP_TEMPLATE}-m{memory_mb}")
    }
}

/// The deploy a deploy job is for.
fn job_deploy(job: &JobRow) -> Result<String, String> {
    job.payload
        .get("deploy")
        .and_then(|d| d.as_str())
        .map(str::to_owned)
        .ok_or_else(|| "job payload names no deploy".to_owned())
}

/// Whether a deploy of `git_ref` builds an uploaded tarball (an app's upload, or a function's
/// inline files packed as one) rather than fetching git.
fn from_upload(git_ref: &str) -> bool {
    git_ref == UPLOAD_REF || git_ref == super::function::INLINE_REF
}

/// The last `n` characters of `s`.
fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

/// A phase of a deploy (what a [`DeployError`] failed in). The row's `phases` records their
/// milliseconds under finer names (`clone`, `vm`, `setup`, `install`, `build`, `bake`,
/// `check`, `snapshot`, `switch`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeployPhase {
    /// The source is fetched (git) or unpacked (an upload); state `cloning`.
    Clone,
    /// The build plan is made and the source packed for the VM; state `cloning`.
    Detect,
    /// The deploy's VM is made; state `building`.
    Boot,
    /// The source goes into the VM, and dependencies install and the app builds there;
    /// state `building`.
    Build,
    /// The server starts and listens on its port; state `baking`.
    Start,
    /// The health check; state `checking`.
    Health,
    /// A function's VM is snapshotted (its bake).
    Snapshot,
    /// The app's live deploy switches to this one.
    Switch,
}

impl DeployPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clone => "clone",
            Self::Detect => "detect",
            Self::Boot => "boot",
            Self::Build => "build",
            Self::Start => "start",
            Self::Health => "health",
            Self::Snapshot => "snapshot",
            Self::Switch => "switch",
        }
    }

    /// `cause` as this phase's error.
    fn error(self, cause: DeployCause) -> DeployError {
        DeployError {
            phase: self,
            source: cause,
        }
    }

    /// Runs one phase's work, its error tagged with the phase.
    async fn run<T>(
        self,
        work: impl std::future::Future<Output = Result<T, DeployCause>>,
    ) -> Result<T, DeployError> {
        work.await.map_err(|c| self.error(c))
    }
}

impl std::fmt::Display for DeployPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a deploy failed: the phase and what went wrong. It reads as its cause (the text the
/// deploy's log and its row's `error` carry), its `source()` is the cause's.
#[derive(Debug)]
pub struct DeployError {
    pub phase: DeployPhase,
    pub source: DeployCause,
}

impl std::fmt::Display for DeployError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for DeployError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.source)
    }
}

/// What went wrong in a deploy. Each reads exactly as the deploy's log and row say it (a
/// cause whose text already has its inner error's chain has no `source()`).
#[derive(Debug, thiserror::Error)]
pub enum DeployCause {
    /// Fetching the git source, unpacking an upload or packing the source for the VM.
    #[error("{}", error_chain(.0))]
    Source(source::SourceError),
    /// A blocking task of the deploy's that panicked or was cancelled.
    #[error("{0}")]
    Task(tokio::task::JoinError),
    /// The upload, taken by another replica, could not be fetched from the object store.
    #[error("{}", error_chain(.0))]
    Carry(super::SharedError),
    /// The app's SSH deploy key could not be made or read.
    #[error("{0}")]
    DeployKey(AppError),
    /// A function's runtime or dependency file could not be written into its source.
    #[error("{0}")]
    FunctionFiles(String),
    #[error("detect: {0}")]
    Detect(detect::DetectError),
    /// The build plan could not be stored.
    #[error("{0}")]
    Plan(serde_json::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The deploy's VM could not be made.
    #[error("VM of template {template}: {}", error_chain(.error))]
    Vm {
        template: String,
        error: crate::ControlError,
    },
    #[error("open the {what} tarball: {error}")]
    Tarball { what: String, error: std::io::Error },
    #[error("copy the {what} into the VM: {}", error_chain(.error))]
    Copy {
        what: String,
        error: pandastack_host::HostError,
    },
    /// Unpacking a tarball in the VM failed (`detail`: the exec's error, or tar's stderr).
    #[error("unpack the {what}: {detail}")]
    Unpack { what: String, detail: String },
    #[error("read the host's CA bundle {}: {error}", .path.display())]
    CaBundle {
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    #[error("copy the host's CA bundle: {}", error_chain(.0))]
    CopyCaBundle(pandastack_host::HostError),
    /// A command of `step` (`setup`, `install`, `build`, `start`, …) could not be run.
    #[error("{step}: {}", error_chain(.error))]
    Exec {
        step: String,
        error: pandastack_host::HostError,
    },
    #[error("{step} ({command}) timed out after {after:?}")]
    StepTimedOut {
        step: String,
        command: String,
        after: Duration,
    },
    /// A build step's command failed: its exit code and the end of its output.
    #[error(
        "{step} ({command}) failed with exit code {exit_code}; its output ends with:\n{output}"
    )]
    StepFailed {
        step: String,
        command: String,
        exit_code: i32,
        output: String,
    },
    #[error("{step}: the command's stream ended without an exit status")]
    NoExitStatus { step: String },
    /// The command starting the server failed (its stderr).
    #[error("start: {stderr}")]
    StartFailed { stderr: String },
    #[error("the handler could not be imported; the runtime's output ends with:\n{output}")]
    HandlerImport { output: String },
    #[error("nothing listened on port {port} within {after:?} of `{start}`; the app's output ends with:\n{output}")]
    NotListening {
        port: u16,
        start: String,
        after: Duration,
        output: String,
    },
    /// The health check did not pass in time (`probe`: what it last saw).
    #[error("health check GET {path} on port {port}: {probe} (within {within:?}); the app's output ends with:\n{output}")]
    Unhealthy {
        path: String,
        port: u16,
        probe: String,
        within: Duration,
        output: String,
    },
    #[error("snapshot the baked function: {}", error_chain(.0))]
    Snapshot(pandastack_host::HostError),
    #[error("store the baked function's snapshot for every host: {}", error_chain(.0))]
    StoreSnapshot(crate::ControlError),
}

/// Unpacks the uploaded source in deploy directory `dir` (the clone of an upload); the source
/// and how many links and special files were skipped.
async fn unpack_upload(dir: std::path::PathBuf) -> Result<(source::Fetched, usize), DeployCause> {
    tokio::task::spawn_blocking(move || source::unpack_upload(&dir.join(UPLOAD), &dir))
        .await
        .map_err(DeployCause::Task)?
        .map_err(DeployCause::Source)
}

/// A function's runtime (and its dependency file) written into its source in `dir`; its
/// start command and a line for the log. `None` for an app.
fn prepare_function(
    config: &AppConfig,
    git_ref: &str,
    dir: &std::path::Path,
) -> Result<Option<(String, String)>, DeployCause> {
    let Some(f) = &config.function else {
        return Ok(None);
    };
    // A tarball brings its own dependency file; inline files and git sources get the
    // request's `dependencies`.
    let deps = config
        .function_source
        .as_ref()
        .filter(|_| git_ref != UPLOAD_REF);
    super::function::prepare(dir, f, deps).map_err(DeployCause::FunctionFiles)?;
    Ok(Some((
        super::function::start_command(dir, f),
        format!(
            "function: {} runtime, handler {}",
            f.runtime.as_str(),
            f.handler
        ),
    )))
}

/// The build plan of the source in `dir` with `config`'s overrides.
fn make_plan(
    config: &AppConfig,
    start_command: Option<String>,
    dir: &std::path::Path,
) -> Result<BuildPlan, DeployCause> {
    let overrides = Overrides {
        build_command: config.build.command.clone(),
        output_dir: config.build.output_dir.clone(),
        start_command,
        port: config.start.port,
        root_dir: config.root_dir.clone(),
    };
    detect::plan(dir, &overrides).map_err(DeployCause::Detect)
}

/// How a build step whose command ended with `exit_code` (or `timed_out`) went; `output` is
/// what it printed (its end goes into the error).
fn step_result(
    step: &str,
    cmd: &str,
    exit_code: i32,
    timed_out: bool,
    output: &str,
) -> Result<(), DeployCause> {
    if timed_out {
        return Err(DeployCause::StepTimedOut {
            step: step.into(),
            command: cmd.into(),
            after: STEP_TIMEOUT,
        });
    }
    if exit_code != 0 {
        return Err(DeployCause::StepFailed {
            step: step.into(),
            command: cmd.into(),
            exit_code,
            output: tail(output, 1500),
        });
    }
    Ok(())
}

/// A deploy under way: its row, the app's configuration and its log.
pub(super) struct Run {
    pub(super) app: AppRow,
    pub(super) config: AppConfig,
    pub(super) row: DeployRow,
    pub(super) log: BuildLog,
    pub(super) phases: BTreeMap<String, u64>,
}

/// What the clone phase fetched, and what detection made of it.
struct Sourced {
    fetched: source::Fetched,
    plan: BuildPlan,
    /// The source packed for the VM.
    tarball: std::path::PathBuf,
}

impl Shared {
    /// Runs one deploy job (from the start, whatever an earlier attempt left).
    pub(crate) async fn run_job(&self, job: &JobRow) -> Result<(), String> {
        let shipper = match self.store.apps().deploy(&job_deploy(job)?).await {
            Ok(d) => self.ship_log(&d.workspace_id, &d.id),
            Err(_) => None,
        };
        let r = self.run_job_logged(job).await;
        if let Some(s) = shipper {
            s.finish().await;
        }
        r
    }

    async fn run_job_logged(&self, job: &JobRow) -> Result<(), String> {
        let id = job_deploy(job)?;
        let row = match self.store.apps().deploy(&id).await {
            Ok(r) if r.state.active() => r,
            Ok(_) | Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(format!("state store: {}", error_chain(&e))),
        };
        let app = match self.store.apps().by_id(&row.app_id).await {
            Ok(a) => a,
            Err(StoreError::NotFound) => return Ok(()),
            Err(e) => return Err(format!("state store: {}", error_chain(&e))),
        };
        let dir = self.deploy_dir(&row.id);
        let _ = std::fs::create_dir_all(&dir);
        let log = BuildLog::open(&self.log_path(&row.id));
        let mut run = Run {
            config: config_of(&app).map_err(|e| e.to_string())?,
            app,
            row,
            log,
            phases: BTreeMap::new(),
        };
        if job.attempts > 1 {
            run.log.line(&format!(
                "attempt {}: the previous one was cut off; starting over",
                job.attempts
            ));
            if let Err(e) = self.remove_vm(&run.row).await {
                tracing::warn!(deploy = %run.row.id, error = &e as &dyn std::error::Error, "remove a cut-off deploy's VM");
            }
            run.row.sandbox_id = None;
        }
        if self
            .store
            .apps()
            .newer_queued(&run.app.id, run.row.seq)
            .await
            .map_err(|e| e.to_string())?
        {
            run.log
                .line("superseded: a newer deploy of this app is queued");
            run.row.error = Some("superseded by a newer deploy".into());
            return self
                .set(&mut run, DeployState::Superseded)
                .await
                .map_err(|e| e.to_string());
        }
        let result = self.pipeline(&mut run).await;
        if from_upload(&run.row.git_ref) {
            self.drop_carried_upload(&run.app.workspace_id, &run.row.id)
                .await;
        }
        let _ = std::fs::remove_dir_all(dir.join("src"));
        let _ = std::fs::remove_file(dir.join("src.tar.gz"));
        let _ = std::fs::remove_file(dir.join(UPLOAD));
        let _ = std::fs::remove_file(dir.join(super::npm_lock::PACKED));
        // Written only for a fetch and removed after it; this is for a fetch cut off.
        let _ = std::fs::remove_file(dir.join(source::KEY_FILE));
        if let Err(e) = result {
            let message = e.to_string();
            run.log.line(&format!("failed: {message}"));
            tracing::info!(deploy = %run.row.id, app = %run.app.name, phase = %e.phase, error = &e as &dyn std::error::Error, "deploy failed");
            if let Err(e) = self.remove_vm(&run.row).await {
                tracing::warn!(deploy = %run.row.id, error = &e as &dyn std::error::Error, "remove a failed deploy's VM");
            }
            self.remove_bake(&run.row).await;
            run.row.sandbox_id = None;
            run.row.error = Some(message);
            self.set(&mut run, DeployState::Failed)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn set(&self, run: &mut Run, state: DeployState) -> Result<(), StoreError> {
        let was = run.row.state;
        run.row.state = state;
        run.row.updated_at = now_ms();
        run.row.phases = serde_json::to_value(&run.phases).unwrap_or_default();
        self.store.apps().update_deploy(&run.row).await?;
        if was != state {
            let (ty, data) = match state {
                DeployState::Failed => (
                    "deploy.failed",
                    serde_json::json!({"deploy_id": run.row.id, "error": run.row.error}),
                ),
                _ => (
                    "deploy.phase",
                    serde_json::json!({"deploy_id": run.row.id, "phase": state.as_str()}),
                ),
            };
            self.deploy_event(&run.app, ty, data).await;
        }
        Ok(())
    }

    /// An event of app (or function) `app`'s deploys.
    pub(crate) async fn deploy_event(
        &self,
        app: &AppRow,
        ty: &'static str,
        data: serde_json::Value,
    ) {
        let function = app
            .name
            .starts_with(pandastack_api_types::FUNCTION_HOST_PREFIX);
        let (kind, id) = if function {
            (
                crate::ResourceKind::Function,
                super::function::public_name(&app.name),
            )
        } else {
            (crate::ResourceKind::App, app.name.as_str())
        };
        self.sandboxes
            .events()
            .emit(&app.workspace_id, ty, kind, id, data)
            .await;
    }

    /// Records how long `phase` took and writes the row.
    pub(super) async fn phase_done(
        &self,
        run: &mut Run,
        phase: &str,
        started: Instant,
    ) -> Result<(), DeployCause> {
        let ms = started.elapsed().as_millis() as u64;
        run.phases.insert(phase.to_owned(), ms);
        run.log.line(&format!("{phase}: {ms} ms"));
        let state = run.row.state;
        Ok(self.set(run, state).await?)
    }

    /// The deploy, phase after phase; the first error ends it.
    async fn pipeline(&self, run: &mut Run) -> Result<(), DeployError> {
        let t = Instant::now();
        let fetched = self.clone_source(run).await?;
        let sourced = self.detect(run, fetched).await?;
        DeployPhase::Detect
            .run(self.phase_done(run, "clone", t))
            .await?;
        let sandbox = self.boot(run).await?;
        let env = self.build(run, &sandbox.id, &sourced).await?;
        self.start(run, &sandbox.id, &sourced.plan, &env).await?;
        self.health(run, &sandbox.id, &sourced.plan).await?;
        if run.config.function.is_some() {
            self.snapshot(run, &sandbox.id).await?;
        } else {
            self.checkpoint(run, &sandbox).await;
        }
        self.switch(run, sandbox).await
    }

    /// Clone: the row goes `cloning`, and the source is fetched (git) or the upload unpacked;
    /// the commit goes into the row.
    async fn clone_source(&self, run: &mut Run) -> Result<source::Fetched, DeployError> {
        DeployPhase::Clone
            .run(async {
                self.set(run, DeployState::Cloning).await?;
                run.log.line(&format!(
                    "deploy #{} of {}: {}",
                    run.row.seq,
                    run.app.name,
                    if from_upload(&run.row.git_ref) {
                        "from an uploaded tarball".to_owned()
                    } else {
                        format!("fetching {} at {}", run.config.git.url, run.row.git_ref)
                    }
                ));
                let dir = self.deploy_dir(&run.row.id);
                let fetched = if from_upload(&run.row.git_ref) {
                    self.fetch_upload(&run.app.workspace_id, &run.row.id, &dir)
                        .await
                        .map_err(DeployCause::Carry)?;
                    let d = dir.clone();
                    let (fetched, skipped) = unpack_upload(d).await?;
                    if skipped > 0 {
                        run.log.line(&format!(
                            "upload: {skipped} links and special files skipped (only files and directories are taken)"
                        ));
                    }
                    fetched
                } else {
                    let url = run.config.git.url.clone();
                    let known_hosts = self.known_hosts(&run.app.id);
                    let ssh = if pandastack_api_types::git_url_uses_ssh(&url) {
                        self.ensure_deploy_key(&mut run.app)
                            .await
                            .map_err(|e| DeployCause::DeployKey(e.into()))?;
                        let key = run.app.deploy_private_key.as_deref().unwrap_or_default();
                        run.log.line(&format!(
                            "ssh: with the app's deploy key ({}); host keys trusted on first use",
                            super::deploy_key_fingerprint(key)
                        ));
                        Some(source::SshAuth {
                            private_key: key,
                            known_hosts: &known_hosts,
                        })
                    } else {
                        None
                    };
                    source::fetch(&url, &run.row.git_ref, &dir, ssh, &self.outbound)
                        .await
                        .map_err(DeployCause::Source)?
                };
                run.row.commit_sha = Some(fetched.commit.clone());
                run.log.line(&format!("commit {}", fetched.commit));
                Ok(fetched)
            })
            .await
    }

    /// Detect: a function's runtime goes into its source, the build plan is made (into the row
    /// and the log) and the source packed for the VM.
    async fn detect(
        &self,
        run: &mut Run,
        mut fetched: source::Fetched,
    ) -> Result<Sourced, DeployError> {
        DeployPhase::Detect
            .run(async {
                // A monorepo's app: the subdirectory is all that is planned, packed and built.
                fetched.dir = detect::app_dir(&fetched.dir, run.config.root_dir.as_deref())
                    .map_err(DeployCause::Detect)?;
                let mut start_command = run.config.start.command.clone();
                if let Some((command, line)) =
                    prepare_function(&run.config, &run.row.git_ref, &fetched.dir)?
                {
                    start_command = Some(command);
                    run.log.line(&line);
                }
                let plan = make_plan(&run.config, start_command, &fetched.dir)?;
                for d in &plan.decisions {
                    run.log.line(&format!("plan: {d}"));
                }
                run.row.plan = Some(serde_json::to_value(&plan).map_err(DeployCause::Plan)?);
                let tarball = source::pack(&fetched.dir, &self.deploy_dir(&run.row.id))
                    .await
                    .map_err(DeployCause::Source)?;
                Ok(Sourced {
                    fetched,
                    plan,
                    tarball,
                })
            })
            .await
    }

    /// Boot: the row goes `building` and the deploy's VM is made (its id into the row).
    async fn boot(&self, run: &mut Run) -> Result<SandboxRow, DeployError> {
        DeployPhase::Boot
            .run(async {
                self.set(run, DeployState::Building).await?;
                let t = Instant::now();
                let sandbox = self.new_vm(run).await?;
                run.row.sandbox_id = Some(sandbox.id.clone());
                self.set(run, DeployState::Building).await?;
                run.log
                    .line(&format!("VM {} ({}) ready", sandbox.id, sandbox.template));
                self.phase_done(run, "vm", t).await?;
                Ok(sandbox)
            })
            .await
    }

    /// Build: the source goes into the VM, then the plan's setup, install (or the dependency
    /// cache) and build run there. Returns the environment of the build (the server's too).
    async fn build(
        &self,
        run: &mut Run,
        sandbox: &str,
        sourced: &Sourced,
    ) -> Result<BTreeMap<String, String>, DeployError> {
        let plan = &sourced.plan;
        DeployPhase::Build
            .run(async {
                let t = Instant::now();
                self.upload(sandbox, &sourced.tarball).await?;
                let mut env = app_env(&run.config, plan.port);
                env.extend(self.host_trust(sandbox).await?);
                if let Some(cmd) = plan.setup.as_deref() {
                    let t = Instant::now();
                    self.step(run, sandbox, "setup", cmd, &env).await?;
                    self.phase_done(run, "setup", t).await?;
                }
                let key = deps::key(plan, &sourced.fetched.dir);
                if !self.restore_deps(run, sandbox, key.as_deref()).await? {
                    if let Some(cmd) = plan.install.as_deref() {
                        let t = Instant::now();
                        let fast = self
                            .npm_fast_path(run, sandbox, plan, &sourced.fetched.dir, &env)
                            .await?;
                        let cmd = fast.as_deref().unwrap_or(cmd);
                        self.step(run, sandbox, "install", cmd, &env).await?;
                        self.phase_done(run, "install", t).await?;
                        if let Some(key) = &key {
                            self.save_deps(run, sandbox, key, plan).await;
                        }
                    }
                }
                if let Some(cmd) = plan.build.as_deref() {
                    let t = Instant::now();
                    self.step(run, sandbox, "build", cmd, &env).await?;
                    self.phase_done(run, "build", t).await?;
                }
                self.phase_done(run, "build_total", t).await?;
                // What the build read and wrote (sources, dependencies, compiler output) fills
                // the guest's page cache; the server needs little of it. Dropped, those pages
                // go back to the host (free-page reporting), so the VM's hibernation image —
                // read by every wake — and its memory on the host carry only what the server
                // uses.
                self.step(run, sandbox, "release", RELEASE_BUILD_CACHE, &env)
                    .await?;
                Ok(env)
            })
            .await
    }

    /// Start (the bake of an app): the row goes `baking`, the server starts and listens.
    async fn start(
        &self,
        run: &mut Run,
        sandbox: &str,
        plan: &BuildPlan,
        env: &BTreeMap<String, String>,
    ) -> Result<(), DeployError> {
        DeployPhase::Start
            .run(async {
                self.set(run, DeployState::Baking).await?;
                let t = Instant::now();
                self.start_server(run, sandbox, plan, env).await?;
                self.phase_done(run, "bake", t).await
            })
            .await
    }

    /// Health: the row goes `checking`, and the server must answer its health check.
    async fn health(
        &self,
        run: &mut Run,
        sandbox: &str,
        plan: &BuildPlan,
    ) -> Result<(), DeployError> {
        DeployPhase::Health
            .run(async {
                self.set(run, DeployState::Checking).await?;
                let t = Instant::now();
                let probe = until_healthy(
                    self.host.as_ref(),
                    sandbox,
                    plan.port,
                    &run.config.health_path,
                    &run.app.name,
                    self.timings.check,
                )
                .await;
                if !probe.healthy() {
                    return Err(DeployCause::Unhealthy {
                        path: run.config.health_path.clone(),
                        port: plan.port,
                        probe: probe.to_string(),
                        within: self.timings.check,
                        output: self.app_output(sandbox).await,
                    });
                }
                run.log.line(&format!(
                    "health check GET {}: {probe}",
                    run.config.health_path
                ));
                self.phase_done(run, "check", t).await
            })
            .await
    }

    /// In a cluster, an app's VM, its server answering, is checkpointed: restored from that
    /// snapshot on another host if its host is lost (`Sandboxes::checkpoint`). A failure is
    /// logged, and the deploy goes on (its VM is then `lost` with its host, as before).
    async fn checkpoint(&self, run: &mut Run, sandbox: &SandboxRow) {
        let t = Instant::now();
        match self.sandboxes.checkpoint(sandbox).await {
            Ok(false) => {}
            Ok(true) => {
                let ms = t.elapsed().as_millis() as u64;
                run.phases.insert("checkpoint".to_owned(), ms);
                run.log.line(&format!(
                    "checkpoint: {ms} ms (the VM is restored from it on another host if its host is lost)"
                ));
            }
            Err(e) => {
                tracing::warn!(deploy = %run.row.id, error = &e as &dyn std::error::Error, "checkpoint of an app's VM");
                run.log.line(&format!(
                    "checkpoint: not taken ({}); the VM is not restored elsewhere if its host is lost",
                    pandastack_host::error_chain(&e)
                ));
            }
        }
    }

    /// A function's bake: the VM, its handler imported, is snapshotted (instances are restored
    /// from it) and deleted.
    async fn snapshot(&self, run: &mut Run, sandbox: &str) -> Result<(), DeployError> {
        DeployPhase::Snapshot
            .run(async {
                let t = Instant::now();
                let snap = format!("fnsnap-{}", &run.row.id);
                self.host
                    .snapshot(sandbox, &snap)
                    .await
                    .map_err(DeployCause::Snapshot)?;
                // In a cluster, instances are restored on any host: each fetches it.
                let vm = self.store.sandboxes().by_id(sandbox).await?;
                let stored = self
                    .sandboxes
                    .store_platform_snapshot(&vm.host_id, &snap, &vm.workspace_id)
                    .await;
                match stored {
                    Ok(false) => {}
                    Ok(true) => run.log.line("baked: stored for every host"),
                    Err(e) => {
                        if !self.sandboxes.drop_platform_snapshot(&snap).await {
                            let _ = self.host.delete_snapshot(&snap).await;
                        }
                        return Err(DeployCause::StoreSnapshot(e));
                    }
                }
                super::function::set_bake_snapshot(&mut run.row.plan, &snap);
                run.log.line(&format!(
                    "baked: snapshot {snap} (instances are restored from it)"
                ));
                self.phase_done(run, "snapshot", t).await?;
                if let Err(e) = self.remove_vm(&run.row).await {
                    tracing::warn!(deploy = %run.row.id, error = &e as &dyn std::error::Error, "remove a function's build VM");
                }
                run.row.sandbox_id = None;
                Ok(())
            })
            .await
    }

    /// Switch: the deploy becomes the app's live one in one transaction, the last write of its
    /// row: a reader that finds it `live` finds every field (its `switch` time too), and nothing
    /// after it can fail the deploy. The previous one retires.
    async fn switch(&self, run: &mut Run, sandbox: SandboxRow) -> Result<(), DeployError> {
        DeployPhase::Switch
            .run(async {
                let t = Instant::now();
                let app = self.store.apps().by_id(&run.app.id).await?;
                let previous = app.live_deploy_id.clone();
                if run.config.function.is_none() {
                    self.store
                        .sandboxes()
                        .update(&scaled(sandbox, &run.config))
                        .await?;
                }
                // The `switch` time runs up to the transaction; it goes into the row before it.
                run.phases
                    .insert("switch".into(), t.elapsed().as_millis() as u64);
                let state = run.row.state;
                self.set(run, state).await?;
                let switched_at = now_ms();
                self.store
                    .apps()
                    .switch_live(&app.id, &run.row.id, previous.as_deref(), switched_at)
                    .await?;
                self.routes.invalidate(&app.name);
                run.row.state = DeployState::Live;
                if run.config.function.is_some() {
                    run.log.line(&format!(
                        "live: version {} of function {}",
                        run.row.seq,
                        super::function::public_name(&app.name)
                    ));
                } else {
                    run.log.line(&format!(
                        "live: {} now serves {}",
                        run.row.id,
                        self.address.url(&app.name)
                    ));
                }
                if run.config.function.is_some() {
                    self.function_went_live(&run.row, previous.as_deref()).await;
                }
                let (ty, data) = if run.config.function.is_some() {
                    (
                        "function.version_live",
                        serde_json::json!({"version": run.row.seq, "deploy_id": run.row.id}),
                    )
                } else {
                    (
                        "deploy.live",
                        serde_json::json!({"deploy_id": run.row.id, "previous": previous}),
                    )
                };
                self.deploy_event(&app, ty, data).await;
                if let Some(p) = previous.filter(|p| *p != run.row.id) {
                    self.retire(&app, p, switched_at);
                }
                Ok(())
            })
            .await
    }

    /// The host's CA bundle, copied into the VM, and its proxy settings, as the environment of
    /// the build and the server: package registries and other HTTPS services are reached the
    /// way the host reaches them (on hosts behind a TLS-inspecting proxy, its CA is in that
    /// bundle, as it is for the template builder).
    async fn host_trust(&self, sandbox: &str) -> Result<BTreeMap<String, String>, DeployCause> {
        let mut env: BTreeMap<String, String> = PROXY_VARS
            .iter()
            .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let bundle = std::env::var_os("SSL_CERT_FILE")
            .map(std::path::PathBuf::from)
            .into_iter()
            .chain([std::path::PathBuf::from(HOST_CA_BUNDLE)])
            .find(|p| p.is_file());
        if let Some(path) = bundle {
            let bytes = match tokio::fs::read(&path).await {
                Ok(b) => b,
                Err(error) => return Err(DeployCause::CaBundle { path, error }),
            };
            let body =
                futures::stream::once(async move { Ok::<_, String>(bytes::Bytes::from(bytes)) })
                    .boxed();
            self.host
                .write_file(sandbox, VM_CA_BUNDLE, body)
                .await
                .map_err(DeployCause::CopyCaBundle)?;
            for k in [
                "SSL_CERT_FILE",
                "REQUESTS_CA_BUNDLE",
                "PIP_CERT",
                "NODE_EXTRA_CA_CERTS",
                "CURL_CA_BUNDLE",
                "GIT_SSL_CAINFO",
            ] {
                env.insert(k.into(), VM_CA_BUNDLE.into());
            }
        }
        Ok(env)
    }

    /// Unpacks the app's dependency cache `key` into the VM; `false` when there is none (or
    /// it cannot be read: then the install runs).
    async fn restore_deps(
        &self,
        run: &mut Run,
        sandbox: &str,
        key: Option<&str>,
    ) -> Result<bool, DeployCause> {
        let Some(key) = key else {
            return Ok(false);
        };
        let t = Instant::now();
        let ws = run.app.workspace_id.clone();
        match deps::restore(
            &self.objects,
            self.host.as_ref(),
            &ws,
            &run.app.id,
            sandbox,
            key,
        )
        .await
        {
            Ok(true) => {
                run.log.line(&format!(
                    "dependencies: cache {} hit, install skipped",
                    &key[..12]
                ));
                self.phase_done(run, "deps_restore", t).await?;
                Ok(true)
            }
            Ok(false) => {
                run.log
                    .line(&format!("dependencies: no cache {} yet", &key[..12]));
                Ok(false)
            }
            Err(e) => {
                run.log
                    .line(&format!("dependencies: cache unusable ({e}); installing"));
                Ok(false)
            }
        }
    }

    /// Stores what the install made as the app's dependency cache `key` (a failure only logs).
    async fn save_deps(&self, run: &mut Run, sandbox: &str, key: &str, plan: &BuildPlan) {
        let t = Instant::now();
        let ws = run.app.workspace_id.clone();
        match deps::save(
            &self.objects,
            self.host.as_ref(),
            &ws,
            &run.app.id,
            sandbox,
            key,
            plan,
        )
        .await
        {
            Ok(Some(n)) => run.log.line(&format!(
                "dependencies: cached as {} ({:.1} MiB, {} ms)",
                &key[..12],
                n as f64 / 1048576.0,
                t.elapsed().as_millis()
            )),
            Ok(None) => run.log.line("dependencies: too large to cache"),
            Err(e) => run.log.line(&format!("dependencies: not cached: {e}")),
        }
    }

    /// A new VM for the deploy (no idle timeout while it builds). A function's VM gets its RAM
    /// in a file of its own, so its bake snapshot is that file (a reflink) and every instance
    /// maps it instead of loading the whole RAM. An app's VM keeps private RAM: it is never
    /// forked, and with its RAM in a shared file every write of the live app would go through
    /// the page cache to disk; its wake to first byte measured no faster that way (548 ms p50
    /// against 582 private in two runs on one afternoon, bench/README.md, "Apps").
    async fn new_vm(&self, run: &Run) -> Result<SandboxRow, DeployCause> {
        let template = app_template(run.config.memory_mb);
        let mut row = SandboxRow::service(
            &run.app.workspace_id,
            &self.host_id,
            &template,
            BTreeMap::from([
                (APP_METADATA.to_owned(), run.app.name.clone()),
                (DEPLOY_METADATA.to_owned(), run.row.id.clone()),
            ]),
        );
        row.on_timeout = OnTimeout::Hibernate;
        let source = if run.config.function.is_some() {
            Source::TemplateWithMemoryFile(template)
        } else {
            Source::Template(template)
        };
        self.sandboxes
            .launch(row, source)
            .await
            .map_err(|error| DeployCause::Vm {
                template: app_template(run.config.memory_mb),
                error,
            })
    }

    /// Puts the source tarball into the VM and unpacks it in [`APP_DIR`].
    async fn upload(&self, sandbox: &str, tarball: &std::path::Path) -> Result<(), DeployCause> {
        self.unpack_in_vm(sandbox, tarball, "source", "").await
    }

    /// Copies the gzip tarball `tarball` into the VM and unpacks it in [`APP_DIR`], after
    /// the shell command `before` (`what` names it in errors).
    pub(super) async fn unpack_in_vm(
        &self,
        sandbox: &str,
        tarball: &std::path::Path,
        what: &str,
        before: &str,
    ) -> Result<(), DeployCause> {
        let file = tokio::fs::File::open(tarball)
            .await
            .map_err(|error| DeployCause::Tarball {
                what: what.into(),
                error,
            })?;
        let body = file_stream(file);
        self.host
            .write_file(sandbox, VM_UNPACK, body)
            .await
            .map_err(|error| DeployCause::Copy {
                what: what.into(),
                error,
            })?;
        let out = self
            .host
            .exec(
                sandbox,
                ExecSpec {
                    shell: format!(
                        "{before}mkdir -p {APP_DIR} && tar -xzf {VM_UNPACK} -C {APP_DIR} && rm {VM_UNPACK}"
                    ),
                    timeout: Duration::from_secs(900),
                    max_output_bytes: 64 * 1024,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| DeployCause::Unpack {
                what: what.into(),
                detail: error_chain(&e),
            })?;
        if out.exit_code != 0 || out.timed_out {
            return Err(DeployCause::Unpack {
                what: what.into(),
                detail: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(())
    }

    /// Runs one build step in the VM, its output into the log; a non-zero exit fails it.
    async fn step(
        &self,
        run: &mut Run,
        sandbox: &str,
        phase: &str,
        cmd: &str,
        env: &BTreeMap<String, String>,
    ) -> Result<(), DeployCause> {
        run.log.line(&format!("{phase}: $ {cmd}"));
        let mut env: HashMap<String, String> = env.clone().into_iter().collect();
        env.insert("CI".into(), "1".into());
        // npm's post-install audit (a request, then a walk of the whole tree), funding notice
        // and update check are work nobody reads in a build log. The app's env can turn them
        // back on.
        for (k, v) in NPM_QUIET {
            env.entry(k.into()).or_insert_with(|| v.into());
        }
        let mut events = self
            .host
            .exec_stream(
                sandbox,
                ExecSpec {
                    shell: cmd.to_owned(),
                    env,
                    cwd: APP_DIR.into(),
                    timeout: STEP_TIMEOUT,
                    ..Default::default()
                },
            )
            .await
            .map_err(|error| DeployCause::Exec {
                step: phase.into(),
                error,
            })?;
        let mut partial = Vec::new();
        let mut last = String::new();
        while let Some(ev) = events.next().await {
            match ev.map_err(|error| DeployCause::Exec {
                step: phase.into(),
                error,
            })? {
                ExecEvent::Stdout(b) | ExecEvent::Stderr(b) => {
                    partial.extend_from_slice(&b);
                    while let Some(i) = partial.iter().position(|c| *c == b'\n') {
                        let line: Vec<u8> = partial.drain(..=i).collect();
                        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
                        run.log.line(&format!("  {text}"));
                        last.push_str(&text);
                        last.push('\n');
                        if last.len() > 8192 {
                            last = tail(&last, 4096);
                        }
                    }
                }
                ExecEvent::Exit {
                    exit_code,
                    timed_out,
                    ..
                } => {
                    if !partial.is_empty() {
                        let text = String::from_utf8_lossy(&partial).trim_end().to_owned();
                        run.log.line(&format!("  {text}"));
                        last.push_str(&text);
                    }
                    return step_result(phase, cmd, exit_code, timed_out, &last);
                }
            }
        }
        Err(DeployCause::NoExitStatus { step: phase.into() })
    }

    /// Starts the app's server in its own session (it outlives the exec that starts it),
    /// output to [`APP_LOG`], and waits until something listens on its port.
    async fn start_server(
        &self,
        run: &mut Run,
        sandbox: &str,
        plan: &BuildPlan,
        env: &BTreeMap<String, String>,
    ) -> Result<(), DeployCause> {
        run.log
            .line(&format!("start: $ {} (port {})", plan.start, plan.port));
        let mut env: HashMap<String, String> = env.clone().into_iter().collect();
        env.insert("NODE_ENV".into(), "production".into());
        env.insert("PS_START".into(), plan.start.clone());
        let out = self
            .host
            .exec(
                sandbox,
                ExecSpec {
                    shell: format!(
                        "setsid -f /bin/sh -c 'exec /bin/sh -c \"$PS_START\"' >>{APP_LOG} 2>&1 </dev/null"
                    ),
                    env,
                    cwd: APP_DIR.into(),
                    timeout: Duration::from_secs(30),
                    max_output_bytes: 64 * 1024,
                    ..Default::default()
                },
            )
            .await
            .map_err(|error| DeployCause::Exec {
                step: "start".into(),
                error,
            })?;
        if out.exit_code != 0 {
            return Err(DeployCause::StartFailed {
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        let listen = self.timings.listen;
        let deadline = Instant::now() + listen;
        let mut tries = 0u32;
        loop {
            tries += 1;
            // A function's runtime that cannot import the handler says so and exits: fail
            // now, naming the cause, rather than wait for a listener that will not come.
            if run.config.function.is_some()
                && tries.is_multiple_of(5)
                && self.import_failed(sandbox).await
            {
                return Err(DeployCause::HandlerImport {
                    output: self.app_output(sandbox).await,
                });
            }
            let p = super::check::probe(
                self.host.as_ref(),
                sandbox,
                plan.port,
                &run.config.health_path,
                &run.app.name,
            )
            .await;
            if p != Probe::NotListening {
                run.log.line(&format!("listening on port {}", plan.port));
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DeployCause::NotListening {
                    port: plan.port,
                    start: plan.start.clone(),
                    after: listen,
                    output: self.app_output(sandbox).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether a function's runtime reported that it could not import the handler.
    async fn import_failed(&self, sandbox: &str) -> bool {
        let probe = self
            .host
            .exec(
                sandbox,
                ExecSpec {
                    argv: vec![
                        "grep".into(),
                        "-q".into(),
                        "pandastack: cannot import the handler".into(),
                        APP_LOG.into(),
                    ],
                    timeout: Duration::from_secs(10),
                    max_output_bytes: 1024,
                    ..Default::default()
                },
            )
            .await;
        matches!(probe, Ok(o) if o.exit_code == 0)
    }

    /// The end of the app's own output in its VM.
    async fn app_output(&self, sandbox: &str) -> String {
        match self
            .host
            .exec(
                sandbox,
                ExecSpec {
                    argv: vec!["tail".into(), "-c".into(), "1500".into(), APP_LOG.into()],
                    timeout: Duration::from_secs(10),
                    max_output_bytes: 4096,
                    ..Default::default()
                },
            )
            .await
        {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => format!("(could not read it: {})", error_chain(&e)),
        }
    }

    /// After the drain pause, hibernates the VM of deploy `id` (replaced by the switch at
    /// `switched_at`, its row's `updated_at`) and removes the VMs of standby versions beyond the
    /// newest [`KEEP_STANDBY`].
    pub(crate) fn retire(&self, app: &AppRow, id: String, switched_at: i64) {
        let me = self.clone();
        let app_id = app.id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(me.timings.drain).await;
            match me.retire_now(&app_id, &id, switched_at).await {
                Ok(()) => {}
                // The app was deleted during the drain: its deletion removed the VMs.
                Err(_)
                    if matches!(
                        me.store.apps().by_id(&app_id).await,
                        Err(StoreError::NotFound)
                    ) =>
                {
                    tracing::debug!(deploy = %id, "app deleted before its previous version retired");
                }
                Err(e) => {
                    tracing::warn!(deploy = %id, error = &e as &dyn std::error::Error, "retire an app's previous version");
                }
            }
        });
    }

    async fn retire_now(
        &self,
        app_id: &str,
        id: &str,
        switched_at: i64,
    ) -> Result<(), SharedError> {
        let d = self.store.apps().deploy(id).await?;
        // Live again since, or live again and replaced again (its own drain, from that later
        // switch, hibernates it): left alone.
        if d.state == DeployState::Standby && d.updated_at <= switched_at {
            if let Some(sb) = &d.sandbox_id {
                if let Ok(mut s) = self.store.sandboxes().by_id(sb).await {
                    s.idle_timeout_seconds = None;
                    self.store.sandboxes().update(&s).await?;
                    if s.state != SandboxState::Hibernated {
                        self.sandboxes.lifecycle(s, Verb::Hibernate).await?;
                    }
                }
            }
        }
        let all = self.store.apps().deploys(app_id, None, 1000).await?;
        let standby: Vec<_> = all
            .into_iter()
            .filter(|d| {
                d.state == DeployState::Standby
                    && (d.sandbox_id.is_some() || super::function::bake_snapshot(d).is_some())
            })
            .collect();
        for mut old in standby.into_iter().skip(KEEP_STANDBY) {
            self.remove_vm(&old).await?;
            if super::function::bake_snapshot(&old).is_some() {
                self.remove_bake(&old).await;
                if let Some(p) = old.plan.as_mut().and_then(|p| p.as_object_mut()) {
                    p.remove("bake_snapshot");
                }
            }
            old.sandbox_id = None;
            old.updated_at = now_ms();
            self.store.apps().update_deploy(&old).await?;
        }
        Ok(())
    }
}

impl Apps {
    /// Makes `target` (a standby deploy) the live one: wakes and checks its VM, switches, and
    /// retires the current one.
    pub(crate) async fn go_live(
        &self,
        app: &AppRow,
        target: DeployRow,
    ) -> Result<DeployRow, AppError> {
        let config = config_of(app)?;
        let sb_id = target
            .sandbox_id
            .clone()
            .ok_or_else(|| AppError::Conflict(format!("deploy {} has no VM", target.id)))?;
        let sb = self.s.store.sandboxes().by_id(&sb_id).await?;
        let sb = self.s.sandboxes.awake(sb).await?;
        let port = plan_port(&target).unwrap_or(DEFAULT_PORT);
        let probe = until_healthy(
            self.s.host.as_ref(),
            &sb.id,
            port,
            &config.health_path,
            &app.name,
            self.s.timings.check,
        )
        .await;
        if !probe.healthy() {
            return Err(AppError::Conflict(format!(
                "deploy {} did not pass its health check after waking: {probe}",
                target.id
            )));
        }
        self.s.set_scaling(sb, &config).await?;
        let previous = app.live_deploy_id.clone();
        let switched_at = now_ms();
        self.s
            .store
            .apps()
            .switch_live(&app.id, &target.id, previous.as_deref(), switched_at)
            .await?;
        self.s.routes.invalidate(&app.name);
        let data = serde_json::json!({"deploy_id": target.id, "previous": previous});
        self.s.deploy_event(app, "deploy.rolled_back", data).await;
        if let Some(p) = previous.filter(|p| *p != target.id) {
            self.s.retire(app, p, switched_at);
        }
        Ok(self.s.store.apps().deploy(&target.id).await?)
    }
}

/// A file as a byte stream for [`pandastack_host::Host::write_file`].
fn file_stream(file: tokio::fs::File) -> pandastack_host::BoxStream<Result<bytes::Bytes, String>> {
    use tokio::io::AsyncReadExt;
    Box::pin(futures::stream::unfold(Some(file), |f| async move {
        let mut f = f?;
        let mut buf = vec![0u8; 256 * 1024];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), Some(f)))
            }
            Err(e) => Some((Err(e.to_string()), None)),
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pandastack_api_types::{AppGit, FunctionRuntime, FunctionSource};

    fn config() -> AppConfig {
        serde_json::from_value::<pandastack_api_types::CreateAppRequest>(serde_json::json!({
            "name": "web",
            "git": { "url": "https://example.com/a.git" },
        }))
        .unwrap()
        .config()
    }

    /// A failed build step keeps its exit code and reads as the log always said.
    #[test]
    fn failed_steps_are_typed_and_read_as_before() {
        assert!(step_result("build", "npm run build", 0, false, "ok\n").is_ok());
        let e = DeployPhase::Build.error(
            step_result("build", "npm run build", 2, false, "a\nERR! it broke\n").unwrap_err(),
        );
        assert_eq!(e.phase, DeployPhase::Build);
        match &e.source {
            DeployCause::StepFailed {
                step, exit_code, ..
            } => assert_eq!((step.as_str(), *exit_code), ("build", 2)),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "build (npm run build) failed with exit code 2; its output ends with:\na\nERR! it broke\n"
        );
        // The end of a long output only.
        let long = "x".repeat(5000);
        let DeployCause::StepFailed { output, .. } =
            step_result("install", "npm ci", 1, false, &long).unwrap_err()
        else {
            panic!("not a failed step")
        };
        assert_eq!(output.len(), 1500);
        // A timeout wins over the exit code.
        let e = step_result("install", "npm ci", 137, true, "").unwrap_err();
        assert!(matches!(e, DeployCause::StepTimedOut { .. }), "{e:?}");
        assert_eq!(e.to_string(), "install (npm ci) timed out after 1800s");
    }

    /// The texts of the causes a VM produces, unchanged from the strings they replace.
    #[test]
    fn causes_read_as_the_log_and_row_say() {
        let unhealthy = DeployCause::Unhealthy {
            path: "/health".into(),
            port: 3000,
            probe: "status 500".into(),
            within: CHECK_TIMEOUT,
            output: "boom".into(),
        };
        assert_eq!(
            unhealthy.to_string(),
            "health check GET /health on port 3000: status 500 (within 60s); the app's output ends with:\nboom"
        );
        let quiet = DeployCause::NotListening {
            port: 8080,
            start: "node server.js".into(),
            after: LISTEN_TIMEOUT,
            output: String::new(),
        };
        assert_eq!(
            quiet.to_string(),
            "nothing listened on port 8080 within 300s of `node server.js`; the app's output ends with:\n"
        );
        let exec = DeployCause::Exec {
            step: "setup".into(),
            error: pandastack_host::HostError::SandboxNotFound("sb-1".into()),
        };
        assert_eq!(
            exec.to_string(),
            format!(
                "setup: {}",
                pandastack_host::HostError::SandboxNotFound("sb-1".into())
            )
        );
        let unpack = DeployCause::Unpack {
            what: "source".into(),
            detail: "tar: short read".into(),
        };
        assert_eq!(unpack.to_string(), "unpack the source: tar: short read");
        // A cause that carries its error's chain in its text has no source of its own, so a
        // logged chain does not repeat it.
        let e = DeployPhase::Boot.error(exec);
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(error_chain(&e), e.to_string());
        // A store error reads as itself.
        let store = DeployPhase::Switch.error(StoreError::NotFound.into());
        assert_eq!(store.to_string(), StoreError::NotFound.to_string());
        assert_eq!(store.phase.as_str(), "switch");
    }

    /// The clone of an upload that is not a gzip tarball fails in the clone phase with the
    /// source's error.
    #[tokio::test]
    async fn a_broken_upload_fails_the_clone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(UPLOAD), b"not a tarball").unwrap();
        let e = DeployPhase::Clone
            .run(unpack_upload(dir.path().to_owned()))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e.phase, DeployPhase::Clone);
        let DeployCause::Source(inner) = &e.source else {
            panic!("{:?}", e.source)
        };
        assert_eq!(e.to_string(), error_chain(inner));
    }

    /// Detection that finds nothing to run fails in the detect phase, its text `detect: …`.
    #[test]
    fn an_empty_source_fails_detection() {
        let dir = tempfile::tempdir().unwrap();
        let e = DeployPhase::Detect.error(make_plan(&config(), None, dir.path()).unwrap_err());
        assert_eq!(e.phase, DeployPhase::Detect);
        let DeployCause::Detect(inner) = &e.source else {
            panic!("{:?}", e.source)
        };
        assert_eq!(e.to_string(), format!("detect: {inner}"));
    }

    /// A function's source gets its runtime and start command; an app's is left alone.
    #[test]
    fn functions_get_their_runtime() {
        let dir = tempfile::tempdir().unwrap();
        assert!(prepare_function(&config(), "main", dir.path())
            .unwrap()
            .is_none());
        let mut c = config();
        c.git = AppGit {
            url: "inline".into(),
            git_ref: Some(super::super::function::INLINE_REF.into()),
        };
        let req: pandastack_api_types::CreateFunctionRequest =
            serde_json::from_value(serde_json::json!({
                "name": "hello",
                "runtime": "python",
                "handler": "main.handler",
                "files": { "main.py": "def handler(event): return event\n" },
            }))
            .unwrap();
        c.function = Some(req.config());
        c.function_source = Some(FunctionSource {
            dependencies: Some("requests\n".into()),
            ..Default::default()
        });
        assert_eq!(
            c.function.as_ref().unwrap().runtime,
            FunctionRuntime::Python
        );
        let (start, line) = prepare_function(&c, "inline", dir.path()).unwrap().unwrap();
        assert!(!start.is_empty());
        assert_eq!(line, "function: python runtime, handler main.handler");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("requirements.txt")).unwrap(),
            "requests\n"
        );
    }
}
