//! Functions (issue #18): apps of kind `function`, stored as the app `fn-<name>` (which is
//! also the host name of their public endpoint). A version is a deploy: its source (inline
//! files as an uploaded tarball, or git) gets the runtime of its language
//! (`runtime/python.py`, `runtime/node.mjs`) in `.pandastack/`, its dependencies are
//! installed by the app pipeline, the runtime starts and imports the handler, the health
//! check passes only once it has, and then the VM is snapshotted (the bake) and deleted: every
//! instance, the first one too, is restored from that snapshot ([`super::instances`]).
//! Rollback makes an earlier version's snapshot the live one.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use pandastack_api_types::{
    AppBuild, AppConfig, AppGit, AppStart, CreateFunctionRequest, CreateVersionRequest,
    DeployState, FunctionConfig, FunctionRollbackRequest, FunctionRuntime, FunctionSource,
    Invocation, InvocationError, InvocationStatus, UpdateFunctionRequest, FUNCTION_HOST_PREFIX,
};
use pandastack_store::{new_id, now_ms, AppRow, DeployRow, StoreError};

use super::instances::{Lease, LeaseError, Limits};
use super::{config_of, Shared, SharedError, UPLOAD};

/// `kind` of a function's app row.
pub const FUNCTION_KIND: &str = "function";
/// The port the runtime listens on in the VM.
pub const FUNCTION_PORT: u16 = 8000;
/// The runtime's health path (answers once the handler is imported).
pub const FUNCTION_HEALTH: &str = "/__pandastack/health";
const INVOKE_PATH: &str = "/__pandastack/invoke";
const PY_RUNTIME: &str = include_str!("runtime/python.py");
const NODE_RUNTIME: &str = include_str!("runtime/node.mjs");
/// Where the runtime goes in the function's directory.
const RUNTIME_DIR: &str = ".pandastack";
/// `ref` of a version built from the function's inline files (packed like an upload).
pub const INLINE_REF: &str = "inline";
/// Key of a version's baked snapshot in its deploy's `plan`.
const BAKE_KEY: &str = "bake_snapshot";
/// Extra time past `timeout_seconds` before the host gives up on a call (the runtime's own
/// answer of a handler that just made it should win).
const TIMEOUT_GRACE: Duration = Duration::from_secs(1);
/// Longest a call waits for a free instance.
const WAIT_FOR_ROOM: Duration = Duration::from_secs(60);

/// Why a function operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FunctionError {
    /// No function of that name (the message names it as the app row it is).
    #[error("app function {0} not found")]
    NotFound(String),
    #[error("deploy version {version} of {name} not found")]
    VersionNotFound { name: String, version: u64 },
    #[error("deploy invocation {0} not found")]
    InvocationNotFound(String),
    #[error("app name function {0} is taken")]
    Exists(String),
    /// A request that cannot be carried out in the function's present state.
    #[error("{0}")]
    Conflict(String),
    /// Every instance of the function is busy and none could be added in time.
    #[error("{0}")]
    Busy(String),
    /// An invoke's event the runtime refused (not JSON).
    #[error("{0}")]
    BadEvent(String),
    /// What apps and functions share: the store, the host, an upload, a deploy key, a source.
    #[error(transparent)]
    Shared(#[from] SharedError),
}

super::shared::from_shared_causes!(FunctionError);

/// Functions of one host: their rows, versions (deploys, run by the shared deploy worker),
/// instances ([`super::instances`]) and calls ([`super::invocations`]).
#[derive(Clone)]
pub struct Functions {
    pub(crate) s: Shared,
    /// Wakes the runners of asynchronous calls.
    pub(crate) invoke_wake: std::sync::Arc<tokio::sync::Notify>,
}

/// The app row name of function `name`.
pub fn stored_name(name: &str) -> String {
    format!("{FUNCTION_HOST_PREFIX}{name}")
}

/// The function name of app row name `stored`.
pub fn public_name(stored: &str) -> &str {
    stored.strip_prefix(FUNCTION_HOST_PREFIX).unwrap_or(stored)
}

/// A function with its configuration and where its versions stand.
#[derive(Debug, Clone)]
pub struct FunctionInfo {
    pub row: AppRow,
    pub config: AppConfig,
    pub function: FunctionConfig,
    pub live_version: Option<u64>,
    pub warm_instances: u32,
}

/// The baked snapshot of a version, if it has one.
pub(crate) fn bake_snapshot(d: &DeployRow) -> Option<&str> {
    d.plan.as_ref()?.get(BAKE_KEY)?.as_str()
}

/// Records `snapshot` as the bake of the version whose plan is `plan`.
pub(crate) fn set_bake_snapshot(plan: &mut Option<serde_json::Value>, snapshot: &str) {
    let p = plan.get_or_insert_with(|| serde_json::json!({}));
    if let Some(o) = p.as_object_mut() {
        o.insert(BAKE_KEY.into(), snapshot.into());
    }
}

/// Writes the runtime (and the dependencies file, when the source gives one) into a
/// fetched source tree.
pub(crate) fn prepare(
    dir: &Path,
    f: &FunctionConfig,
    src: Option<&FunctionSource>,
) -> Result<(), String> {
    let rt = dir.join(RUNTIME_DIR);
    std::fs::create_dir_all(&rt).map_err(|e| format!("write the runtime: {e}"))?;
    let (file, body, deps) = match f.runtime {
        FunctionRuntime::Python => ("runtime.py", PY_RUNTIME, "requirements.txt"),
        FunctionRuntime::Node => ("runtime.mjs", NODE_RUNTIME, "package.json"),
    };
    std::fs::write(rt.join(file), body).map_err(|e| format!("write the runtime: {e}"))?;
    if let Some(d) = src.and_then(|s| s.dependencies.as_deref()) {
        std::fs::write(dir.join(deps), d).map_err(|e| format!("write {deps}: {e}"))?;
    }
    Ok(())
}

/// How the runtime starts in `dir` (the handler's name is checked to be a safe word).
pub(crate) fn start_command(dir: &Path, f: &FunctionConfig) -> String {
    match f.runtime {
        FunctionRuntime::Python => {
            let py =
                if dir.join("requirements.txt").is_file() || dir.join("pyproject.toml").is_file() {
                    ".venv/bin/python"
                } else {
                    "python3"
                };
            format!(
                "PANDASTACK_HANDLER={} exec {py} -u {RUNTIME_DIR}/runtime.py",
                f.handler
            )
        }
        FunctionRuntime::Node => {
            format!(
                "PANDASTACK_HANDLER={} exec node {RUNTIME_DIR}/runtime.mjs",
                f.handler
            )
        }
    }
}

/// A gzip tarball of inline `files`.
fn pack_files(files: &BTreeMap<String, String>, to: &Path) -> Result<(), std::io::Error> {
    let out = std::fs::File::create(to)?;
    let gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, path, body.as_bytes())?;
    }
    tar.into_inner()?.finish()?.sync_all()
}

fn limits_of(config: &AppConfig, f: &FunctionConfig) -> Limits {
    Limits {
        concurrency: f.concurrency,
        max_instances: f.max_instances,
        idle: Duration::from_secs(config.idle_seconds),
        wait: WAIT_FOR_ROOM,
    }
}

impl Functions {
    pub(crate) fn new(s: Shared) -> Self {
        Self {
            s,
            invoke_wake: Default::default(),
        }
    }

    /// Where functions' public endpoints answer (`fn-<name>.<domain>`).
    pub fn address(&self) -> &super::AppAddress {
        &self.s.address
    }

    pub(crate) async fn fn_row(&self, ws: &str, name: &str) -> Result<AppRow, FunctionError> {
        match self.s.store.apps().get(ws, &stored_name(name)).await {
            Ok(r) if r.kind == FUNCTION_KIND => Ok(r),
            Ok(_) | Err(StoreError::NotFound) => Err(FunctionError::NotFound(name.into())),
            Err(e) => Err(e.into()),
        }
    }

    async fn fn_info(&self, row: AppRow) -> Result<FunctionInfo, FunctionError> {
        let config = config_of(&row)?;
        let function = config
            .function
            .clone()
            .ok_or_else(|| FunctionError::Conflict(format!("{} is not a function", row.name)))?;
        let live_version = match &row.live_deploy_id {
            Some(d) => match self.s.store.apps().deploy(d).await {
                Ok(d) => Some(d.seq as u64),
                Err(StoreError::NotFound) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let warm_instances = self.s.instances.warm(&row.id);
        Ok(FunctionInfo {
            row,
            config,
            function,
            live_version,
            warm_instances,
        })
    }

    pub async fn function(&self, ws: &str, name: &str) -> Result<FunctionInfo, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        self.fn_info(row).await
    }

    /// A page of a workspace's functions by name (one more than `limit` when there are more);
    /// `after` is a function name.
    pub async fn functions(
        &self,
        ws: &str,
        after: Option<String>,
        limit: u32,
    ) -> Result<Vec<FunctionInfo>, FunctionError> {
        let rows = self
            .s
            .store
            .apps()
            .list(ws, FUNCTION_KIND, after.map(|a| stored_name(&a)), limit)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(self.fn_info(r).await?);
        }
        Ok(out)
    }

    /// Creates a function and queues the build of its first version.
    pub async fn create_function(
        &self,
        ws: &str,
        req: &CreateFunctionRequest,
    ) -> Result<(FunctionInfo, DeployRow), FunctionError> {
        let source = req.source();
        if let Some(git) = &source.git {
            self.s.check_source(git)?;
        }
        let function = req.config();
        let config = AppConfig {
            git: source.git.clone().unwrap_or(AppGit {
                url: "inline".into(),
                git_ref: Some(INLINE_REF.into()),
            }),
            env: req.env.clone(),
            secrets: req.secrets.clone(),
            build: AppBuild::default(),
            start: AppStart {
                command: None,
                port: Some(FUNCTION_PORT),
            },
            root_dir: None,
            memory_mb: req
                .memory_mb
                .unwrap_or(pandastack_api_types::DEFAULT_FUNCTION_MEMORY_MB),
            min_instances: 0,
            idle_seconds: req
                .idle_seconds
                .unwrap_or(pandastack_api_types::DEFAULT_FUNCTION_IDLE_SECONDS),
            health_path: FUNCTION_HEALTH.into(),
            function: Some(function),
            function_source: Some(source),
        };
        let now = now_ms();
        let name = stored_name(&req.name);
        let private_key = super::new_deploy_key(&name)?;
        let row = AppRow {
            id: new_id("fn-"),
            workspace_id: ws.to_owned(),
            name: name.clone(),
            host_id: self.s.host_id.clone(),
            config: serde_json::to_value(&config)?,
            webhook_secret: super::new_secret(),
            deploy_private_key: Some(private_key),
            live_deploy_id: None,
            created_at: now,
            updated_at: now,
            kind: FUNCTION_KIND.into(),
        };
        match self.s.store.apps().insert(&row).await {
            Ok(()) => {}
            Err(StoreError::Conflict) => return Err(FunctionError::Exists(req.name.clone())),
            Err(e) => return Err(e.into()),
        }
        let d = match self.queue_version(&row, &config).await {
            Ok(d) => d,
            Err(e) => {
                self.s.store.apps().delete(&row.id).await?;
                return Err(e);
            }
        };
        Ok((self.fn_info(row).await?, d))
    }

    /// Queues the build of a version from `config`'s source.
    async fn queue_version(
        &self,
        row: &AppRow,
        config: &AppConfig,
    ) -> Result<DeployRow, FunctionError> {
        let source = config.function_source.clone().unwrap_or_default();
        if source.git.is_some() {
            return Ok(self.s.queue(row, config.git_ref(), None).await?);
        }
        let id = new_id("dep-");
        let dir = self.s.deploy_dir(&id);
        let files = source.files.clone();
        let d = dir.clone();
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&d)?;
            pack_files(&files, &d.join(UPLOAD))
        })
        .await
        .map_err(|e| SharedError::Upload(e.to_string()))?
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&dir);
            SharedError::Upload(format!("pack the function's files: {e}"))
        })?;
        let queued = match self.s.carry_upload(&row.workspace_id, &id).await {
            Ok(()) => self.s.queue_as(id.clone(), row, INLINE_REF, None).await,
            Err(e) => Err(e),
        };
        match queued {
            Ok(d) => Ok(d),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                self.s.drop_carried_upload(&row.workspace_id, &id).await;
                Err(e.into())
            }
        }
    }

    /// `POST …/versions`: the request's fields replace the function's; a new version builds.
    pub async fn create_version(
        &self,
        ws: &str,
        name: &str,
        req: &CreateVersionRequest,
    ) -> Result<DeployRow, FunctionError> {
        if let Some(git) = req.source().and_then(|s| s.git) {
            self.s.check_source(&git)?;
        }
        let row = self.fn_row(ws, name).await?;
        let mut config = config_of(&row)?;
        if let Some(f) = config.function.as_mut() {
            if let Some(h) = &req.handler {
                f.handler.clone_from(h);
            }
        }
        if let Some(s) = req.source() {
            config.git = s.git.clone().unwrap_or(AppGit {
                url: "inline".into(),
                git_ref: Some(INLINE_REF.into()),
            });
            config.function_source = Some(s);
        }
        if let Some(e) = &req.env {
            config.env.clone_from(e);
        }
        if let Some(s) = &req.secrets {
            config.secrets.clone_from(s);
        }
        self.s
            .store
            .apps()
            .set_config(&row.id, &serde_json::to_value(&config)?, now_ms())
            .await?;
        self.queue_version(&row, &config).await
    }

    /// `POST …/versions` with a gzip tarball of the function's files: a version built from
    /// it (the function's handler and environment as they are). A later version without a
    /// source builds the last source given as JSON, not the tarball.
    pub async fn create_version_upload<S, E>(
        &self,
        ws: &str,
        name: &str,
        upload: S,
    ) -> Result<DeployRow, FunctionError>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let row = match self.fn_row(ws, name).await {
            Ok(r) => r,
            Err(e) => {
                crate::drain_upload(upload).await;
                return Err(e);
            }
        };
        Ok(self.s.queue_upload(&row, upload).await?)
    }

    /// `PATCH /v1/functions/{name}`.
    pub async fn update_function(
        &self,
        ws: &str,
        name: &str,
        req: &UpdateFunctionRequest,
    ) -> Result<FunctionInfo, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        let mut config = config_of(&row)?;
        if let Some(f) = config.function.as_mut() {
            if let Some(t) = req.timeout_seconds {
                f.timeout_seconds = t;
            }
            if let Some(c) = req.concurrency {
                f.concurrency = c;
            }
            if let Some(m) = req.max_instances {
                f.max_instances = m;
            }
            if let Some(p) = req.public {
                f.public = p;
            }
        }
        if let Some(s) = req.idle_seconds {
            config.idle_seconds = s;
        }
        self.s
            .store
            .apps()
            .set_config(&row.id, &serde_json::to_value(&config)?, now_ms())
            .await?;
        self.function(ws, name).await
    }

    /// Deletes a function: its instances, its versions' snapshots and builds, its rows.
    pub async fn delete_function(&self, ws: &str, name: &str) -> Result<(), FunctionError> {
        let row = self.fn_row(ws, name).await?;
        self.drop_instances(&row.id).await;
        let deploys = self
            .s
            .store
            .apps()
            .deploys(&row.id, None, u32::MAX - 1)
            .await?;
        for d in &deploys {
            self.s.remove_vm(d).await?;
            self.s.remove_bake(d).await;
        }
        self.s.store.apps().delete(&row.id).await?;
        if let Err(e) = super::deps::forget(&self.s.objects, ws, &row.id).await {
            tracing::warn!(function = %row.id, error = &e as &dyn std::error::Error, "remove a function's dependency caches");
        }
        for d in &deploys {
            self.s.forget_deploy(ws, &d.id).await;
        }
        Ok(())
    }

    /// A page of a function's versions, newest first.
    pub async fn versions(
        &self,
        ws: &str,
        name: &str,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Vec<DeployRow>, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        Ok(self.s.store.apps().deploys(&row.id, before, limit).await?)
    }

    /// Version `version` (its number) of a function.
    pub async fn version(
        &self,
        ws: &str,
        name: &str,
        version: u64,
    ) -> Result<DeployRow, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        self.version_of(&row, name, version).await
    }

    async fn version_of(
        &self,
        row: &AppRow,
        name: &str,
        version: u64,
    ) -> Result<DeployRow, FunctionError> {
        let seq = i64::try_from(version).unwrap_or(i64::MAX);
        match self.s.store.apps().deploy_by_seq(&row.id, seq).await {
            Ok(d) => Ok(d),
            Err(StoreError::NotFound) => Err(FunctionError::VersionNotFound {
                name: name.into(),
                version,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// `POST …/rollback`: makes an earlier built version live (default: the newest standby
    /// one); nothing is rebuilt.
    pub async fn rollback_function(
        &self,
        ws: &str,
        name: &str,
        req: &FunctionRollbackRequest,
    ) -> Result<DeployRow, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        let target = match req.version {
            Some(v) => self.version_of(&row, name, v).await?,
            None => self
                .s
                .store
                .apps()
                .deploys(&row.id, None, 1000)
                .await?
                .into_iter()
                .find(|d| d.state == DeployState::Standby && bake_snapshot(d).is_some())
                .ok_or_else(|| {
                    FunctionError::Conflict(format!(
                        "function {name} has no earlier version to roll back to"
                    ))
                })?,
        };
        if row.live_deploy_id.as_deref() == Some(target.id.as_str()) {
            return Ok(target);
        }
        if !matches!(target.state, DeployState::Standby) || bake_snapshot(&target).is_none() {
            return Err(FunctionError::Conflict(format!(
                "version {} is {} and cannot go live (only a built, standby version can)",
                target.seq,
                target.state.as_str()
            )));
        }
        self.s
            .store
            .apps()
            .switch_live(&row.id, &target.id, row.live_deploy_id.as_deref(), now_ms())
            .await?;
        self.s
            .function_went_live(&target, row.live_deploy_id.as_deref())
            .await;
        let data = serde_json::json!({
            "version": target.seq,
            "deploy_id": target.id,
            "previous": row.live_deploy_id,
        });
        self.s
            .deploy_event(&row, "deploy.rolled_back", data.clone())
            .await;
        self.s
            .deploy_event(&row, "function.version_live", data)
            .await;
        Ok(self.s.store.apps().deploy(&target.id).await?)
    }

    /// The live version of a function and its snapshot.
    async fn live(&self, row: &AppRow) -> Result<(DeployRow, String), FunctionError> {
        let name = public_name(&row.name);
        let Some(live) = &row.live_deploy_id else {
            return Err(FunctionError::Conflict(format!(
                "function {name} has no built version yet"
            )));
        };
        let d = self.s.store.apps().deploy(live).await?;
        let snap = bake_snapshot(&d)
            .ok_or_else(|| {
                FunctionError::Conflict(format!(
                    "function {name}: its live version has no snapshot"
                ))
            })?
            .to_owned();
        Ok((d, snap))
    }

    /// Calls function `name` of workspace `ws` with `event` (JSON).
    pub async fn invoke(
        &self,
        ws: &str,
        name: &str,
        event: Bytes,
        invocation_id: Option<&str>,
    ) -> Result<Invocation, FunctionError> {
        let row = self.fn_row(ws, name).await?;
        self.invoke_row(&row, event, invocation_id).await
    }

    /// Calls function `row` with `event`; a call that ran (whatever its outcome) is added to
    /// the workspace's metered usage, with the handler's duration (the time the call took when
    /// the runtime did not say).
    pub(crate) async fn invoke_row(
        &self,
        row: &AppRow,
        event: Bytes,
        invocation_id: Option<&str>,
    ) -> Result<Invocation, FunctionError> {
        let t = Instant::now();
        let inv = self.call_row(row, event, invocation_id).await?;
        let ms = inv
            .duration_ms
            .unwrap_or_else(|| t.elapsed().as_secs_f64() * 1e3)
            .round() as i64;
        self.meter(&row.workspace_id, public_name(&row.name), ms);
        Ok(inv)
    }

    async fn call_row(
        &self,
        row: &AppRow,
        event: Bytes,
        invocation_id: Option<&str>,
    ) -> Result<Invocation, FunctionError> {
        let config = config_of(row)?;
        let f = config
            .function
            .clone()
            .ok_or_else(|| FunctionError::Conflict(format!("{} is not a function", row.name)))?;
        let (d, snap) = self.live(row).await?;
        let name = public_name(&row.name).to_owned();
        let mut inv = Invocation::new(&name, InvocationStatus::Ok);
        inv.id = invocation_id.map(str::to_owned);
        inv.version = Some(d.seq as u64);
        inv.attempts = 1;
        let mut lease = match self.lease(row, &d.id, &snap, &limits_of(&config, &f)).await {
            Ok(l) => l,
            Err(e @ LeaseError::Busy(..)) => return Err(FunctionError::Busy(e.to_string())),
            Err(e) => return Err(FunctionError::Conflict(e.to_string())),
        };
        inv.cold = lease.cold;
        let req = hyper::Request::post(INVOKE_PATH)
            .header(hyper::header::HOST, "function")
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header("x-pandastack-invocation", invocation_id.unwrap_or(""))
            .body(Full::new(event))
            .map_err(|e| FunctionError::Conflict(e.to_string()))?;
        let limit = Duration::from_secs(f.timeout_seconds) + TIMEOUT_GRACE;
        let t = Instant::now();
        let answer =
            tokio::time::timeout(limit, self.runtime_request(&mut lease, FUNCTION_PORT, req)).await;
        match answer {
            Err(_) => {
                self.release(lease, false).await;
                inv.status = InvocationStatus::Timeout;
                inv.duration_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                inv.error = Some(InvocationError {
                    kind: "Timeout".into(),
                    message: format!(
                        "the handler ran past {} s; its instance was discarded",
                        f.timeout_seconds
                    ),
                    traceback: String::new(),
                });
            }
            Ok(Err(e)) => {
                // The runtime is gone or broken: nothing else should use this instance.
                self.release(lease, false).await;
                inv.status = InvocationStatus::Error;
                inv.error = Some(InvocationError {
                    kind: "RuntimeError".into(),
                    message: format!("the function's runtime did not answer: {e}"),
                    traceback: String::new(),
                });
            }
            Ok(Ok(resp)) => {
                self.release(lease, true).await;
                if resp.status() == hyper::StatusCode::BAD_REQUEST {
                    return Err(FunctionError::BadEvent(
                        String::from_utf8_lossy(resp.body()).into_owned(),
                    ));
                }
                let v: serde_json::Value = match serde_json::from_slice(resp.body()) {
                    Ok(v) => v,
                    Err(e) => {
                        inv.status = InvocationStatus::Error;
                        inv.error = Some(InvocationError {
                            kind: "RuntimeError".into(),
                            message: format!("the runtime's answer is not JSON: {e}"),
                            traceback: String::new(),
                        });
                        return Ok(inv);
                    }
                };
                inv.status = match v.get("status").and_then(|s| s.as_str()) {
                    Some("ok") => InvocationStatus::Ok,
                    _ => InvocationStatus::Error,
                };
                inv.result = v.get("result").cloned().filter(|r| !r.is_null());
                inv.error = v
                    .get("error")
                    .filter(|e| !e.is_null())
                    .and_then(|e| serde_json::from_value(e.clone()).ok());
                inv.stdout = v
                    .get("stdout")
                    .and_then(|s| s.as_str())
                    .unwrap_or("")
                    .to_owned();
                inv.stderr = v
                    .get("stderr")
                    .and_then(|s| s.as_str())
                    .unwrap_or("")
                    .to_owned();
                inv.duration_ms = v.get("duration_ms").and_then(|d| d.as_f64());
            }
        }
        Ok(inv)
    }

    /// Adds a call of function `name` that ran for `ms` to workspace `ws`'s metered usage, off
    /// the caller's path (a failure is logged).
    fn meter(&self, ws: &str, name: &str, ms: i64) {
        let (store, ws, name) = (self.s.store.clone(), ws.to_owned(), name.to_owned());
        tokio::spawn(async move {
            let at = pandastack_store::now_ms();
            if let Err(e) = crate::meter::record_invocation(&store, &ws, &name, at, ms).await {
                tracing::warn!(function = %name, error = &e as &dyn std::error::Error, "meter: an invocation");
            }
        });
    }

    /// For the proxy: an instance of public function `stored` (`fn-<name>`) to send one
    /// HTTP request to. `Ok(None)`: no such function, or it is not public.
    pub async fn function_lease(
        &self,
        stored: &str,
    ) -> Result<Option<(FunctionLease, u16)>, FunctionError> {
        let row = match self.s.store.apps().by_name(stored).await {
            Ok(r) if r.kind == FUNCTION_KIND => r,
            Ok(_) | Err(StoreError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let config = config_of(&row)?;
        let Some(f) = config.function.clone().filter(|f| f.public) else {
            return Ok(None);
        };
        let (d, snap) = self.live(&row).await?;
        let lease = match self
            .lease(&row, &d.id, &snap, &limits_of(&config, &f))
            .await
        {
            Ok(l) => l,
            Err(e @ LeaseError::Busy(..)) => return Err(FunctionError::Busy(e.to_string())),
            Err(e) => return Err(FunctionError::Conflict(e.to_string())),
        };
        Ok(Some((
            FunctionLease {
                lease: Some(lease),
                functions: self.clone(),
                timeout: Duration::from_secs(f.timeout_seconds) + TIMEOUT_GRACE,
                workspace_id: row.workspace_id.clone(),
                name: public_name(&row.name).to_owned(),
                started: Instant::now(),
            },
            FUNCTION_PORT,
        )))
    }
}

/// The deploy pipeline's side of functions: a version's snapshot, and the instance pool
/// following the live version.
impl Shared {
    pub(crate) async fn remove_bake(&self, d: &DeployRow) {
        if let Some(s) = bake_snapshot(d) {
            if self.sandboxes.drop_platform_snapshot(s).await {
                return;
            }
            match self.host.delete_snapshot(s).await {
                Ok(()) | Err(pandastack_host::HostError::SnapshotNotFound(_)) => {}
                Err(e) => {
                    tracing::warn!(snapshot = %s, error = &e as &dyn std::error::Error, "delete a function version's snapshot")
                }
            }
        }
    }

    /// Version `live` of a function went live in place of `previous`: its snapshot gets a
    /// stand-by process, the previous one's is stopped.
    pub(crate) async fn function_went_live(&self, live: &DeployRow, previous: Option<&str>) {
        if let Some(s) = bake_snapshot(live) {
            self.keep_standby(s, 1);
        }
        let Some(p) = previous.filter(|p| *p != live.id) else {
            return;
        };
        if let Ok(d) = self.store.apps().deploy(p).await {
            if let Some(s) = bake_snapshot(&d) {
                self.keep_standby(s, 0);
            }
        }
    }
}

/// An instance the proxy holds for one request; released when dropped.
pub struct FunctionLease {
    lease: Option<Lease>,
    functions: Functions,
    /// The function's per-call limit.
    pub timeout: Duration,
    /// Whose function, and its name: the call is metered as an invocation when the lease ends.
    workspace_id: String,
    name: String,
    started: Instant,
}

impl FunctionLease {
    pub fn sandbox(&self) -> &pandastack_store::SandboxRow {
        &self.lease.as_ref().expect("held until dropped").sandbox
    }

    /// The call ran past its limit: the instance is discarded.
    pub async fn discard(mut self) {
        if let Some(l) = self.lease.take() {
            self.meter();
            self.functions.release(l, false).await;
        }
    }
}

impl FunctionLease {
    /// Meters the request this lease served (an HTTP request to a public function is an
    /// invocation): its time from the lease to its end.
    fn meter(&self) {
        let ms = self.started.elapsed().as_millis() as i64;
        self.functions.meter(&self.workspace_id, &self.name, ms);
    }
}

impl Drop for FunctionLease {
    fn drop(&mut self) {
        if let Some(l) = self.lease.take() {
            self.meter();
            let functions = self.functions.clone();
            tokio::spawn(async move { functions.release(l, true).await });
        }
    }
}
