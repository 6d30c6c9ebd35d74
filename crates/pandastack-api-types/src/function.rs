//! Functions: a handler in Python or Node.js, built with its dependencies in a VM of the `app`
//! template, baked with the handler already imported (a VM snapshot), and invoked over HTTP:
//! a warm instance answers at once, a new one is restored from the baked snapshot.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, AppGit, FieldError};

/// Default per-call time limit, seconds.
pub const DEFAULT_FUNCTION_TIMEOUT_SECONDS: u64 = 60;
/// Longest per-call time limit, seconds.
pub const MAX_FUNCTION_TIMEOUT_SECONDS: u64 = 900;
/// Default memory of a function instance, MiB.
pub const DEFAULT_FUNCTION_MEMORY_MB: u32 = 1024;
/// Default calls one instance serves at once.
pub const DEFAULT_FUNCTION_CONCURRENCY: u32 = 1;
/// Default most instances of a function at once (on its host).
pub const DEFAULT_FUNCTION_MAX_INSTANCES: u32 = 4;
/// Default seconds an instance stays warm without calls before it is removed.
pub const DEFAULT_FUNCTION_IDLE_SECONDS: u64 = 300;
/// Most bytes of inline source (all files together).
pub const MAX_FUNCTION_SOURCE_BYTES: usize = 4 << 20;
/// Most bytes of an invoke's payload.
pub const MAX_INVOKE_PAYLOAD_BYTES: usize = 6 << 20;
/// Default retries of an asynchronous invocation that fails or times out.
pub const DEFAULT_ASYNC_RETRIES: u32 = 2;
/// The host name prefix of a function's public endpoint: `fn-<name>.<domain>`.
pub const FUNCTION_HOST_PREFIX: &str = "fn-";

/// The language a function's handler is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FunctionRuntime {
    /// Python 3 (the `app` image's, 3.13): `handler` is `module.function`.
    Python,
    /// Node.js 20: `handler` is `file.export` (`index.handler` → `index.js`/`index.mjs`).
    Node,
}

impl FunctionRuntime {
    pub fn as_str(self) -> &'static str {
        match self {
            FunctionRuntime::Python => "python",
            FunctionRuntime::Node => "node",
        }
    }
}

/// A function name: 1-40 of `[a-z0-9-]`, starting with a letter, not ending with `-`.
pub fn validate_function_name(field: &str, name: &str) -> Result<(), FieldError> {
    // Its endpoint is `fn-<name>.<domain>`: the app rules with three characters fewer.
    crate::validate_app_name(field, name)?;
    if name.len() > 37 {
        return Err(field_error(field, "at most 37 characters"));
    }
    Ok(())
}

/// `handler`: `module.function` (Python) or `file.export` (Node.js); the module may be in a
/// subdirectory (`pkg/mod.handler`).
pub fn validate_handler(field: &str, h: &str) -> Result<(), FieldError> {
    let Some((module, func)) = h.rsplit_once('.') else {
        return Err(field_error(field, "`module.function`, e.g. `main.handler`"));
    };
    let ident = |s: &str| {
        let mut b = s.bytes();
        matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
            && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
    };
    let module_ok = !module.is_empty()
        && module.split('/').all(|c| {
            ident(c)
                || c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    && !c.is_empty()
                    && c != ".."
        });
    if !module_ok || !ident(func) || h.len() > 200 {
        return Err(field_error(field, "`module.function`, e.g. `main.handler`"));
    }
    Ok(())
}

fn validate_files(files: &BTreeMap<String, String>) -> Result<(), FieldError> {
    let mut total = 0usize;
    for (path, body) in files {
        let ok = !path.is_empty()
            && path.len() <= 255
            && !path.starts_with('/')
            && !path.starts_with(".pandastack")
            && path
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..")
            && !path.contains('\0');
        if !ok {
            return Err(field_error(
                format!("files.{path}"),
                "a relative path without `.` or `..` components, not under .pandastack/",
            ));
        }
        total += path.len() + body.len();
    }
    if total > MAX_FUNCTION_SOURCE_BYTES {
        return Err(field_error("files", "at most 4 MiB in all"));
    }
    Ok(())
}

fn validate_limits(
    memory_mb: Option<u32>,
    timeout_seconds: Option<u64>,
    concurrency: Option<u32>,
    max_instances: Option<u32>,
    idle_seconds: Option<u64>,
) -> Result<(), FieldError> {
    if let Some(m) = memory_mb {
        if !crate::APP_MEMORY_MB.contains(&m) || m % 256 != 0 {
            return Err(field_error(
                "memory_mb",
                "a multiple of 256 from 256 to 16384",
            ));
        }
    }
    if let Some(t) = timeout_seconds {
        if !(1..=MAX_FUNCTION_TIMEOUT_SECONDS).contains(&t) {
            return Err(field_error("timeout_seconds", "from 1 to 900"));
        }
    }
    if let Some(c) = concurrency {
        if !(1..=64).contains(&c) {
            return Err(field_error("concurrency", "from 1 to 64"));
        }
    }
    if let Some(c) = max_instances {
        if !(1..=64).contains(&c) {
            return Err(field_error("max_instances", "from 1 to 64"));
        }
    }
    if let Some(s) = idle_seconds {
        if !(1..=604_800).contains(&s) {
            return Err(field_error("idle_seconds", "from 1 to 604800"));
        }
    }
    Ok(())
}

/// The source of a function version: inline files, or a git repository (stored with the
/// function, so a new version without source builds the same again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSource {
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub git: Option<AppGit>,
    #[serde(default)]
    pub dependencies: Option<String>,
}

impl FunctionSource {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_files(&self.files)?;
        if self.files.is_empty() && self.git.is_none() {
            return Err(field_error(
                "files",
                "give the handler's files or a git source",
            ));
        }
        if self.git.is_some() && !self.files.is_empty() {
            return Err(field_error("git", "either files or git, not both"));
        }
        if let Some(g) = &self.git {
            crate::app::validate_git(g)?;
        }
        if self
            .dependencies
            .as_ref()
            .is_some_and(|d| d.len() > 1 << 20)
        {
            return Err(field_error("dependencies", "at most 1 MiB"));
        }
        Ok(())
    }
}

/// `POST /v1/functions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFunctionRequest {
    /// 1-37 of `[a-z0-9-]`, starting with a letter; its endpoint is `fn-<name>.<domain>`.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,35}[a-z0-9])?$")]
    pub name: String,
    pub runtime: FunctionRuntime,
    /// `module.function` (Python: `main.handler` is `handler` in `main.py`; Node.js:
    /// `index.handler` is the export `handler` of `index.js` or `index.mjs`).
    pub handler: String,
    /// Files by relative path (UTF-8 text), e.g. `{"main.py": "def handler(event): …"}`.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// A repository instead of files: cloned at `ref` like an app's.
    #[serde(default)]
    pub git: Option<AppGit>,
    /// `requirements.txt` (Python) or `package.json` (Node.js) contents; installed in the
    /// build VM and cached per function.
    #[serde(default)]
    pub dependencies: Option<String>,
    /// Environment of the build and of every call.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Like `env`, never shown by the API.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    /// Memory of an instance, MiB (default 1024; multiples of 256).
    #[serde(default)]
    #[schema(minimum = 256, maximum = 16384, multiple_of = 256)]
    pub memory_mb: Option<u32>,
    /// Per-call time limit (default 60, at most 900): a call past it ends with status
    /// `timeout` and its instance is discarded.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 900)]
    pub timeout_seconds: Option<u64>,
    /// Calls one instance serves at once (default 1: every call has an instance to itself).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub concurrency: Option<u32>,
    /// Most instances at once (default 4); calls beyond `concurrency × max_instances` wait.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub max_instances: Option<u32>,
    /// Seconds a warm instance is kept without calls (default 300).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_seconds: Option<u64>,
    /// Serve `fn-<name>.<domain>` to anyone (default false: only `POST …/invoke` with a key).
    #[serde(default)]
    pub public: bool,
}

impl CreateFunctionRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_function_name("name", &self.name)?;
        validate_handler("handler", &self.handler)?;
        self.source().validate()?;
        crate::app::validate_env("env", &self.env)?;
        crate::app::validate_env("secrets", &self.secrets)?;
        validate_limits(
            self.memory_mb,
            self.timeout_seconds,
            self.concurrency,
            self.max_instances,
            self.idle_seconds,
        )
    }

    /// The source it names.
    pub fn source(&self) -> FunctionSource {
        FunctionSource {
            files: self.files.clone(),
            git: self.git.clone(),
            dependencies: self.dependencies.clone(),
        }
    }

    /// The configuration to store, defaults filled in.
    pub fn config(&self) -> FunctionConfig {
        FunctionConfig {
            runtime: self.runtime,
            handler: self.handler.clone(),
            timeout_seconds: self
                .timeout_seconds
                .unwrap_or(DEFAULT_FUNCTION_TIMEOUT_SECONDS),
            concurrency: self.concurrency.unwrap_or(DEFAULT_FUNCTION_CONCURRENCY),
            max_instances: self.max_instances.unwrap_or(DEFAULT_FUNCTION_MAX_INSTANCES),
            public: self.public,
        }
    }
}

/// `POST /v1/functions/{name}/versions`: a new version (the fields given replace the
/// function's; the others stay). It goes live once built and its handler imports.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVersionRequest {
    #[serde(default)]
    pub handler: Option<String>,
    /// New files (with `dependencies`, or without: none); without files or git, the
    /// previous version's source is built again.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    #[serde(default)]
    pub git: Option<AppGit>,
    #[serde(default)]
    pub dependencies: Option<String>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub secrets: Option<BTreeMap<String, String>>,
}

impl CreateVersionRequest {
    /// The new source, if it gives one.
    pub fn source(&self) -> Option<FunctionSource> {
        (!self.files.is_empty() || self.git.is_some() || self.dependencies.is_some()).then(|| {
            FunctionSource {
                files: self.files.clone(),
                git: self.git.clone(),
                dependencies: self.dependencies.clone(),
            }
        })
    }

    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(h) = &self.handler {
            validate_handler("handler", h)?;
        }
        if let Some(s) = self.source() {
            s.validate()?;
        }
        if let Some(e) = &self.env {
            crate::app::validate_env("env", e)?;
        }
        if let Some(e) = &self.secrets {
            crate::app::validate_env("secrets", e)?;
        }
        Ok(())
    }
}

/// `PATCH /v1/functions/{name}`: limits and visibility (they apply to the next instance and
/// call; no rebuild).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateFunctionRequest {
    #[serde(default)]
    #[schema(minimum = 1, maximum = 900)]
    pub timeout_seconds: Option<u64>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub concurrency: Option<u32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 64)]
    pub max_instances: Option<u32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_seconds: Option<u64>,
    #[serde(default)]
    pub public: Option<bool>,
}

impl UpdateFunctionRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_limits(
            None,
            self.timeout_seconds,
            self.concurrency,
            self.max_instances,
            self.idle_seconds,
        )
    }
}

/// What makes a function more than an app (stored inside the app configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionConfig {
    pub runtime: FunctionRuntime,
    pub handler: String,
    pub timeout_seconds: u64,
    pub concurrency: u32,
    pub max_instances: u32,
    pub public: bool,
}

/// A function resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Function {
    pub id: String,
    pub name: String,
    pub runtime: FunctionRuntime,
    pub handler: String,
    /// Its public endpoint, `fn-<name>.<domain>` (answers only when `public`).
    pub url: String,
    pub public: bool,
    pub env: BTreeMap<String, String>,
    pub secret_names: Vec<String>,
    pub memory_mb: u32,
    pub timeout_seconds: u64,
    pub concurrency: u32,
    pub max_instances: u32,
    pub idle_seconds: u64,
    /// The version calls go to (alias `live`; `None` until one is built).
    pub live_version: Option<u64>,
    /// Instances warm on its host now.
    pub warm_instances: u32,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
}

/// A version of a function: one build. Its `state` is a deploy's (`queued → cloning →
/// building → baking → checking → live | failed`, `standby` once replaced).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FunctionVersion {
    pub id: String,
    pub function: String,
    /// 1, 2, 3… per function.
    pub version: u64,
    pub state: crate::DeployState,
    /// Why the build failed (the handler's import error, a dependency that did not install…).
    pub error: Option<String>,
    pub handler: Option<String>,
    /// Milliseconds per phase (`install`, `bake`, `snapshot`…).
    pub phases_ms: BTreeMap<String, u64>,
    pub created_at: String,
    pub updated_at: String,
}

/// `POST /v1/functions/{name}/rollback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FunctionRollbackRequest {
    /// The version to make live (default: the one before the live one).
    #[serde(default)]
    pub version: Option<u64>,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvocationStatus {
    /// Asynchronous, not started yet.
    Queued,
    /// Asynchronous, under way.
    Running,
    /// The handler returned (`result`).
    Ok,
    /// The handler raised (`error`).
    Error,
    /// The handler ran past `timeout_seconds`; its instance was discarded.
    Timeout,
}

impl InvocationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InvocationStatus::Queued => "queued",
            InvocationStatus::Running => "running",
            InvocationStatus::Ok => "ok",
            InvocationStatus::Error => "error",
            InvocationStatus::Timeout => "timeout",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => InvocationStatus::Queued,
            "running" => InvocationStatus::Running,
            "ok" => InvocationStatus::Ok,
            "error" => InvocationStatus::Error,
            "timeout" => InvocationStatus::Timeout,
            _ => return None,
        })
    }

    pub fn finished(self) -> bool {
        !matches!(self, InvocationStatus::Queued | InvocationStatus::Running)
    }
}

/// An exception the handler raised, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InvocationError {
    /// The exception's class (`ValueError`, `TypeError`…), or `Timeout`.
    #[serde(rename = "type")]
    pub kind: String,
    pub message: String,
    /// The traceback / stack, as the runtime prints it.
    pub traceback: String,
}

/// The outcome of a call (`POST …/invoke`, or an asynchronous invocation once finished).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Invocation {
    /// Set for asynchronous invocations (fetch with `GET …/invocations/{id}`).
    pub id: Option<String>,
    pub function: String,
    pub status: InvocationStatus,
    /// The handler's return value (JSON).
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    pub error: Option<InvocationError>,
    /// What the call printed (each at most 64 KiB, the end kept).
    pub stdout: String,
    pub stderr: String,
    /// The version that ran it.
    pub version: Option<u64>,
    /// Time in the handler.
    pub duration_ms: Option<f64>,
    /// `true` when the call needed a new instance (restored from the baked snapshot).
    pub cold: bool,
    /// Asynchronous: tries made so far.
    pub attempts: u32,
    /// RFC 3339 (asynchronous invocations).
    pub created_at: Option<String>,
    pub finished_at: Option<String>,
}

impl Invocation {
    /// An outcome of function `function` with `status` and nothing else yet.
    pub fn new(function: &str, status: InvocationStatus) -> Self {
        Self {
            id: None,
            function: function.to_owned(),
            status,
            result: None,
            error: None,
            stdout: String::new(),
            stderr: String::new(),
            version: None,
            duration_ms: None,
            cold: false,
            attempts: 0,
            created_at: None,
            finished_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers() {
        assert!(validate_handler("h", "main.handler").is_ok());
        assert!(validate_handler("h", "pkg/mod.run").is_ok());
        assert!(validate_handler("h", "main").is_err());
        assert!(validate_handler("h", "main.").is_err());
        assert!(validate_handler("h", "../x.handler").is_err());
        assert!(validate_handler("h", "main.1x").is_err());
    }

    #[test]
    fn create_request() {
        let r: CreateFunctionRequest = serde_json::from_value(serde_json::json!({
            "name": "hello", "runtime": "python", "handler": "main.handler",
            "files": {"main.py": "def handler(e): return e"},
            "dependencies": "numpy\n"
        }))
        .unwrap();
        assert!(r.validate().is_ok());
        assert_eq!(r.dependencies.as_deref(), Some("numpy\n"));
        let mut bad = r.clone();
        bad.files.insert("../x".into(), String::new());
        assert!(bad.validate().is_err());
        let mut empty = r.clone();
        empty.files.clear();
        assert_eq!(empty.validate().unwrap_err().field, "files");
        let mut long = r;
        long.name = "a".repeat(38);
        assert!(long.validate().is_err());
        assert!(
            serde_json::from_value::<CreateFunctionRequest>(serde_json::json!({
                "name": "x", "runtime": "ruby", "handler": "a.b", "files": {}
            }))
            .is_err()
        );
    }
}
