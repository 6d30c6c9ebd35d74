use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

pub const MAX_TTL_SECONDS: u64 = 7 * 24 * 3600;
pub const MAX_METADATA_KEYS: usize = 32;
pub const MAX_METADATA_KEY: usize = 64;
pub const MAX_METADATA_VALUE: usize = 512;
pub const MAX_FORK: u32 = 16;
pub const MAX_EXEC_TIMEOUT_SECONDS: u64 = 3600;
pub const DEFAULT_EXEC_TIMEOUT_SECONDS: u64 = 60;

/// What happens when a sandbox's TTL or idle timeout expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    #[default]
    Kill,
    Hibernate,
}

impl OnTimeout {
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Kill => "kill",
            OnTimeout::Hibernate => "hibernate",
        }
    }
}

/// What becomes of a running sandbox when its host is lost (declared dead in a cluster).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnHostLoss {
    /// It becomes `lost` and stays so until its host comes back (it can be deleted).
    #[default]
    Lost,
    /// It is restored on another host, with its id, metadata and preview URL: from its newest
    /// snapshot whose files are durable in the object store (memory, processes and files as
    /// then), else started again from its template.
    Restore,
}

impl OnHostLoss {
    pub fn as_str(self) -> &'static str {
        match self {
            OnHostLoss::Lost => "lost",
            OnHostLoss::Restore => "restore",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "lost" => Some(OnHostLoss::Lost),
            "restore" => Some(OnHostLoss::Restore),
            _ => None,
        }
    }
}

fn default_template() -> String {
    "base".into()
}

/// `POST /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    #[serde(default = "default_template")]
    #[schema(default = "base", pattern = "^[A-Za-z0-9_-]{1,40}$")]
    pub template: String,
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9_-]{1,32}$")]
    pub snapshot_id: Option<String>,
    /// Absolute lifetime from now.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub ttl_seconds: Option<u64>,
    /// Idle time before `on_timeout`: idle means no API calls on the sandbox *and* no guest
    /// work (a VM using more than a quarter of a CPU counts as active).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub on_timeout: OnTimeout,
    /// What becomes of it if its host is lost (a cluster's host declared dead).
    #[serde(default)]
    pub on_host_loss: OnHostLoss,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Volumes to mount before the create returns (not with `snapshot_id`: a sandbox snapshot
    /// brings copies of the volumes it had).
    #[serde(default)]
    #[schema(max_items = 3)]
    pub volumes: Vec<crate::SandboxVolume>,
    /// Disk rate limit of its VM in MiB/s, reads and writes of the root disk and every volume
    /// together (default: the template's, else the server's `--vm-disk-mbps`; at most the
    /// server's `--vm-disk-mbps-max`). Not with `snapshot_id`: a sandbox from a snapshot, like
    /// a fork, has the limits of the sandbox the snapshot was taken of.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub disk_mbps: Option<u64>,
    /// Disk I/O operations per second of its VM, reads and writes together (default: the
    /// template's, else the server's `--vm-disk-iops`; at most its `--vm-disk-iops-max`).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub disk_iops: Option<u64>,
}

impl Default for CreateSandboxRequest {
    fn default() -> Self {
        Self {
            template: default_template(),
            snapshot_id: None,
            ttl_seconds: None,
            idle_timeout_seconds: None,
            on_timeout: OnTimeout::Kill,
            on_host_loss: OnHostLoss::Lost,
            metadata: BTreeMap::new(),
            env: BTreeMap::new(),
            volumes: Vec::new(),
            disk_mbps: None,
            disk_iops: None,
        }
    }
}

pub fn validate_metadata(m: &BTreeMap<String, String>) -> Result<(), FieldError> {
    if m.len() > MAX_METADATA_KEYS {
        return Err(field_error(
            "metadata",
            format!("at most {MAX_METADATA_KEYS} keys"),
        ));
    }
    for (k, v) in m {
        if k.is_empty() || k.len() > MAX_METADATA_KEY {
            return Err(field_error(
                "metadata",
                format!("keys are 1-{MAX_METADATA_KEY} bytes"),
            ));
        }
        // Keys end up in logs, list filters and labels: no NUL, newline or other control
        // character (the message quotes the key escaped, the field cannot name it as is).
        if k.chars().any(char::is_control) {
            return Err(field_error(
                "metadata",
                format!("key {k:?} contains a control character"),
            ));
        }
        if v.len() > MAX_METADATA_VALUE {
            return Err(field_error(
                format!("metadata.{k}"),
                format!("at most {MAX_METADATA_VALUE} bytes"),
            ));
        }
        if v.contains('\0') {
            return Err(field_error(format!("metadata.{k}"), "contains a NUL byte"));
        }
    }
    Ok(())
}

fn validate_ttl(field: &str, v: Option<u64>) -> Result<(), FieldError> {
    match v {
        Some(s) if s == 0 || s > MAX_TTL_SECONDS => Err(field_error(
            field,
            format!("between 1 and {MAX_TTL_SECONDS} seconds"),
        )),
        _ => Ok(()),
    }
}

/// Names usable as ids and template names: 1-64 of `[A-Za-z0-9_-]`.
pub fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn valid_env_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn validate_env(env: &BTreeMap<String, String>) -> Result<(), FieldError> {
    for (k, v) in env {
        if !valid_env_name(k) {
            return Err(field_error(
                format!("env.{k}"),
                "names are [A-Za-z_][A-Za-z0-9_]*",
            ));
        }
        if v.contains('\0') {
            return Err(field_error(format!("env.{k}"), "contains a NUL byte"));
        }
    }
    Ok(())
}

impl CreateSandboxRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if !valid_name(&self.template, 40) {
            return Err(field_error("template", "1-40 of [a-z0-9-]"));
        }
        if let Some(s) = &self.snapshot_id {
            if !valid_name(s, 32) {
                return Err(field_error("snapshot_id", "not a snapshot id"));
            }
        }
        validate_ttl("ttl_seconds", self.ttl_seconds)?;
        validate_ttl("idle_timeout_seconds", self.idle_timeout_seconds)?;
        validate_metadata(&self.metadata)?;
        validate_env(&self.env)?;
        if self.snapshot_id.is_some() && !self.volumes.is_empty() {
            return Err(field_error(
                "volumes",
                "cannot be combined with snapshot_id (a snapshot brings its own copies)",
            ));
        }
        if self.on_host_loss == OnHostLoss::Restore && !self.volumes.is_empty() {
            return Err(field_error(
                "on_host_loss",
                "`restore` cannot be combined with volumes (a volume stays on its host)",
            ));
        }
        for (field, v) in [("disk_mbps", self.disk_mbps), ("disk_iops", self.disk_iops)] {
            if v == Some(0) {
                return Err(field_error(field, "a positive integer"));
            }
            if v.is_some() && self.snapshot_id.is_some() {
                return Err(field_error(
                    field,
                    "cannot be combined with snapshot_id (a sandbox from a snapshot has the \
                     limits of the sandbox it was taken of)",
                ));
            }
        }
        crate::validate_sandbox_volumes(&self.volumes)
    }
}

/// Sandbox lifecycle states on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Starting,
    Running,
    Paused,
    Hibernated,
    Stopped,
    Failed,
    /// The host it ran on was declared dead (its agent stopped renewing its lease); it returns
    /// to `running` if that host comes back with its VM. Work inside it is refused meanwhile;
    /// it can be deleted.
    Lost,
}

impl SandboxState {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Starting => "starting",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Hibernated => "hibernated",
            SandboxState::Stopped => "stopped",
            SandboxState::Failed => "failed",
            SandboxState::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "starting" => SandboxState::Starting,
            "running" => SandboxState::Running,
            "paused" => SandboxState::Paused,
            "hibernated" => SandboxState::Hibernated,
            "stopped" => SandboxState::Stopped,
            "failed" => SandboxState::Failed,
            "lost" => SandboxState::Lost,
            _ => return None,
        })
    }
}

/// A sandbox resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Sandbox {
    pub id: String,
    pub template: String,
    pub state: SandboxState,
    pub cpu: u32,
    pub memory_mb: u32,
    /// Disk rate limit its VM runs with, MiB/s (root disk and volumes, reads and writes
    /// together; 0: unlimited).
    #[serde(default)]
    pub disk_mbps: u64,
    /// Disk I/O operations per second its VM runs with (0: unlimited).
    #[serde(default)]
    pub disk_iops: u64,
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339.
    pub created_at: String,
    pub expires_at: Option<String>,
    pub ttl_seconds: Option<u64>,
    pub idle_timeout_seconds: Option<u64>,
    pub on_timeout: OnTimeout,
    /// What becomes of it if its host is lost.
    #[serde(default)]
    pub on_host_loss: OnHostLoss,
    pub boot_ms: u64,
    /// `restore` (from a template bake or snapshot) or `cold`.
    pub boot_mode: String,
    pub snapshot_id: Option<String>,
    pub host: String,
    /// Volumes mounted in it (from its create).
    #[serde(default)]
    pub volumes: Vec<crate::SandboxVolume>,
}

/// `PATCH /v1/sandboxes/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchSandboxRequest {
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub ttl_seconds: Option<u64>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

impl PatchSandboxRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_ttl("ttl_seconds", self.ttl_seconds)?;
        validate_ttl("idle_timeout_seconds", self.idle_timeout_seconds)?;
        if let Some(m) = &self.metadata {
            validate_metadata(m)?;
        }
        Ok(())
    }
}

/// `POST /v1/sandboxes/{id}/exec` (and `/exec/stream`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cmd": "echo hello; echo oops >&2", "timeout_seconds": 30}))]
pub struct ExecRequest {
    /// A shell command line (`/bin/sh -c`).
    #[serde(default)]
    pub cmd: Option<String>,
    /// Program and arguments, no shell.
    #[serde(default)]
    pub argv: Option<Vec<String>>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// Bytes for the command's standard input (UTF-8 text).
    #[serde(default)]
    pub stdin: Option<String>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 3600)]
    pub timeout_seconds: Option<u64>,
}

impl ExecRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        match (&self.cmd, &self.argv) {
            (Some(_), Some(_)) => return Err(field_error("cmd", "give cmd or argv, not both")),
            (None, None) => return Err(field_error("cmd", "cmd or argv is required")),
            (Some(c), None) if c.trim().is_empty() => {
                return Err(field_error("cmd", "must not be empty"))
            }
            (None, Some(a)) if a.is_empty() || a[0].is_empty() => {
                return Err(field_error("argv", "needs a program name"))
            }
            _ => {}
        }
        let nul = |s: &str| s.contains('\0');
        if self.cmd.as_deref().is_some_and(nul) || self.argv.iter().flatten().any(|a| nul(a)) {
            return Err(field_error("cmd", "contains a NUL byte"));
        }
        if let Some(t) = self.timeout_seconds {
            if t == 0 || t > MAX_EXEC_TIMEOUT_SECONDS {
                return Err(field_error(
                    "timeout_seconds",
                    format!("between 1 and {MAX_EXEC_TIMEOUT_SECONDS}"),
                ));
            }
        }
        if let Some(cwd) = &self.cwd {
            if !cwd.starts_with('/') {
                return Err(field_error("cwd", "must be an absolute path"));
            }
        }
        validate_env(&self.env)
    }
}

/// Result of a blocking exec. A non-zero exit is data, not an error.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecResult {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    pub timed_out: bool,
    /// Output was cut at the server's limit.
    pub truncated: bool,
    pub duration_ms: u64,
}

/// A snapshot resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    pub id: String,
    pub sandbox_id: String,
    pub template: String,
    pub created_at: String,
    pub size_bytes: u64,
    /// In a cluster, when its files became durable in the object store (RFC 3339): from then
    /// on a create from it runs on another host when its own has no room, and it outlives its
    /// host. `null` until then (the upload runs in the background after the snapshot call), and
    /// always on a single-node server.
    #[serde(default)]
    pub durable_at: Option<String>,
}

/// `POST /v1/sandboxes/{id}/migrate`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrateRequest {
    /// The host to move it to (a host id, as `GET /v1/hosts` lists them). By default,
    /// placement chooses among the hosts that can restore its memory (the same compatibility
    /// key as its host's) and have room for it.
    #[serde(default)]
    pub host: Option<String>,
}

impl MigrateRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        match &self.host {
            Some(h) if !valid_name(h, 63) => Err(field_error(
                "host",
                "a host id: 1 to 63 letters, digits, '-' or '_'",
            )),
            _ => Ok(()),
        }
    }
}

/// `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    #[serde(default = "one")]
    #[schema(default = 1, minimum = 1, maximum = 16)]
    pub count: u32,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Keep the snapshot the fork takes (`snapshot_id` in the response) until it is deleted
    /// with `DELETE /v1/snapshots/{id}`. By default (`false`) it is deleted, row and files, with
    /// the last sandbox restored from it: the last of the children, or of the sandboxes created
    /// from it since (`POST /v1/sandboxes` with `snapshot_id`). It counts toward the
    /// workspace's snapshot and storage quotas while it exists.
    #[serde(default)]
    pub keep_snapshot: bool,
    /// In a cluster, put the children on other hosts than the parent's (hosts with its
    /// compatibility key and room; different hosts while there are enough). The parent's
    /// snapshot is stored in the object store and each child restored from it where it goes;
    /// a child no other host can take runs on the parent's host (its `host` says where each
    /// went). Without it, children go beside the parent, or elsewhere the same way when the
    /// parent's host has no room for them. A single-host server ignores it.
    #[serde(default)]
    pub spread: bool,
}

fn one() -> u32 {
    1
}

impl Default for ForkRequest {
    fn default() -> Self {
        Self {
            count: 1,
            metadata: BTreeMap::new(),
            keep_snapshot: false,
            spread: false,
        }
    }
}

impl ForkRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.count == 0 || self.count > MAX_FORK {
            return Err(field_error("count", format!("between 1 and {MAX_FORK}")));
        }
        validate_metadata(&self.metadata)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ForkResponse {
    pub parent_id: String,
    /// The snapshot the fork took, which the children were restored from (their
    /// `snapshot_id`).
    pub snapshot_id: String,
    /// Whether that snapshot is kept (the request's `keep_snapshot`): `true`, until
    /// `DELETE /v1/snapshots/{id}`; `false`, it is deleted with the last sandbox restored from
    /// it.
    #[serde(default)]
    #[schema(required = true)]
    pub keep_snapshot: bool,
    pub children: Vec<Sandbox>,
}

/// A template this server can create sandboxes from: from the catalog (a spec on the server,
/// shared by every workspace) or built by this workspace (`POST /v1/templates`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Template {
    pub name: String,
    pub description: String,
    pub cpu: u32,
    pub memory_mb: u32,
    pub disk_mb: u32,
    /// Catalog: `ready` once baked, `available` before first use. Built: the newest build's
    /// status, `queued`, `building`, `baking`, `ready` or `failed`.
    pub state: String,
    pub bake_ms: Option<u64>,
    /// `catalog`, `spec` or `oci`.
    #[serde(default = "catalog")]
    pub source: String,
    /// Built templates: the newest build's version (1, 2, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Built templates: the version new sandboxes get (the newest `ready` one), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_version: Option<u32>,
    /// Why the newest build failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_ms: Option<u64>,
    /// Size of the built root filesystem image (allocated bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

fn catalog() -> String {
    "catalog".into()
}

/// Names of built templates: 1 to 24 of `a-z`, `0-9` and `-`, starting with a letter.
pub const MAX_TEMPLATE_NAME: usize = 24;

/// Checks a built template's name.
pub fn validate_template_name(name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TEMPLATE_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            "name",
            format!(
                "1-{MAX_TEMPLATE_NAME} of a-z, 0-9 and '-', starting with a letter, not ending with '-'"
            ),
        ))
    }
}

/// `POST /v1/templates` with a JSON body: build from a spec (the catalog's TOML format, see
/// templates/README.md). An OCI image tarball is sent as the body instead, with
/// `Content-Type: application/x-tar` and the fields below as query parameters.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTemplateRequest {
    /// Default: the spec's `name`.
    #[serde(default)]
    pub name: Option<String>,
    /// The spec as TOML text; its `name` must equal `name` when both are given.
    pub spec: String,
}

/// Query parameters of `POST /v1/templates` with an OCI image tarball body.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OciTemplateParams {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// vCPUs (1-16, default 1).
    #[serde(default)]
    pub cpu: Option<u32>,
    /// Memory (128-65536, default 512).
    #[serde(default)]
    pub memory_mb: Option<u32>,
    /// Root filesystem size; default: the image's size plus room to grow.
    #[serde(default)]
    pub disk_mb: Option<u32>,
}

/// `POST /v1/keys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    #[serde(default)]
    pub name: String,
    /// What the key may do: `*`, or `<kind>:<action>` with `*` for either part (actions:
    /// `read`, `write`, `exec`); default: the calling key's own. Only scopes the calling key's
    /// cover are granted.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// When it stops working (RFC 3339, in the future); default: never, or the calling key's
    /// own expiry if it has one (a key cannot outlive the key that made it).
    #[serde(default)]
    pub expires_at: Option<String>,
    /// The workspace member the key is for (it can do no more than the member's role allows);
    /// only an owner or admin names another member. Default: the calling key's member, if any.
    #[serde(default)]
    pub member_id: Option<String>,
}

/// An API key as listed (never with its secret).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Key {
    pub id: String,
    pub name: String,
    /// First characters of the secret, to tell keys apart.
    pub prefix: String,
    pub created_at: String,
    pub revoked: bool,
    /// An operator's key: it may also call the operator routes (`/v1/hosts`). Made only on the
    /// server (`pandastack keys create --admin`), never through the API.
    pub admin: bool,
    /// What it may do (see `CreateKeyRequest::scopes`).
    pub scopes: Vec<String>,
    pub expires_at: Option<String>,
    /// When it was last used (to within a minute); `null`: never.
    pub last_used_at: Option<String>,
    /// The member it belongs to (`null`: a workspace key, limited by its scopes only).
    pub member_id: Option<String>,
    /// That member's role.
    pub role: Option<crate::Role>,
}

/// A key just created: the secret is shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub key: Key,
    pub secret: String,
}

/// `POST …/fs/mkdir`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    #[schema(pattern = "^/")]
    pub path: String,
    #[serde(default = "yes")]
    #[schema(default = true)]
    pub parents: bool,
}

fn yes() -> bool {
    true
}

/// `POST …/fs/rename`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameRequest {
    #[schema(pattern = "^/")]
    pub from: String,
    #[schema(pattern = "^/")]
    pub to: String,
    #[serde(default)]
    pub overwrite: bool,
}

/// What a signed file URL does: `GET` downloads the file, `PUT` uploads it (replacing it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum FileUrlMethod {
    #[default]
    Get,
    Put,
}

/// Longest a signed file URL lives, in seconds (7 days).
pub const MAX_FILE_URL_SECONDS: u64 = 7 * 24 * 3600;

fn hour() -> u64 {
    3600
}

/// `POST /v1/sandboxes/{id}/files/url`: a URL that downloads or uploads one file of the
/// sandbox without an API key, until it expires.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FileUrlRequest {
    /// Absolute guest path (no `..`).
    #[schema(pattern = "^/")]
    pub path: String,
    /// `GET` (download, the default) or `PUT` (upload).
    #[serde(default)]
    pub method: FileUrlMethod,
    /// Seconds until it expires: 1 to 604800 (7 days); default 3600.
    #[serde(default = "hour")]
    #[schema(minimum = 1, maximum = 604800, default = 3600)]
    pub expires_in: u64,
}

impl FileUrlRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_guest_path("path", &self.path)?;
        if !(1..=MAX_FILE_URL_SECONDS).contains(&self.expires_in) {
            return Err(field_error(
                "expires_in",
                format!("must be 1 to {MAX_FILE_URL_SECONDS} seconds (7 days)"),
            ));
        }
        Ok(())
    }
}

/// A signed file URL.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileUrl {
    /// The URL, relative to the API's base URL (`/v1/sandboxes/{id}/files/signed?…`): the
    /// SDKs return it absolute. Call it with `method`, no API key.
    pub url: String,
    pub method: FileUrlMethod,
    pub path: String,
    /// RFC 3339: from then on the URL is refused.
    pub expires_at: String,
}

/// A guest file's metadata.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileInfo {
    pub name: String,
    pub path: String,
    /// `file`, `dir`, `symlink` or `other`.
    #[serde(rename = "type")]
    pub kind: String,
    pub size: u64,
    pub mode: u32,
    pub mtime_ms: i64,
    pub symlink_target: Option<String>,
}

/// Guest paths in the file API: absolute, no NUL, no `..` component, bounded length.
pub fn validate_guest_path(field: &str, p: &str) -> Result<(), FieldError> {
    if !p.starts_with('/') {
        return Err(field_error(field, "must be an absolute path"));
    }
    if p.len() > 4096 || p.contains('\0') {
        return Err(field_error(field, "invalid path"));
    }
    if p.split('/').any(|c| c == "..") {
        return Err(field_error(field, "must not contain '..'"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(json: &str) -> Result<CreateSandboxRequest, String> {
        let r: CreateSandboxRequest = serde_json::from_str(json).map_err(|e| e.to_string())?;
        r.validate().map_err(|e| e.to_string())?;
        Ok(r)
    }

    #[test]
    fn create_requests() {
        let r = create("{}").unwrap();
        assert_eq!(r.template, "base");
        assert_eq!(r.on_timeout, OnTimeout::Kill);
        assert!(create(r#"{"template":"x","bogus":1}"#)
            .unwrap_err()
            .contains("bogus"));
        assert!(create(r#"{"ttl_seconds":0}"#)
            .unwrap_err()
            .starts_with("ttl_seconds"));
        assert!(create(r#"{"template":"../x"}"#)
            .unwrap_err()
            .starts_with("template"));
        assert!(create(r#"{"env":{"1A":"x"}}"#)
            .unwrap_err()
            .starts_with("env.1A"));
        assert!(create(r#"{"on_timeout":"explode"}"#).is_err());
        assert!(create(r#"{"on_host_loss":"migrate"}"#).is_err());
        let r = create(r#"{"on_host_loss":"restore"}"#).unwrap();
        assert_eq!(r.on_host_loss, OnHostLoss::Restore);
        assert!(
            create(r#"{"on_host_loss":"restore","volumes":[{"name":"data","path":"/data"}]}"#)
                .unwrap_err()
                .starts_with("on_host_loss")
        );
        let big: BTreeMap<String, String> =
            (0..40).map(|i| (format!("k{i}"), "v".into())).collect();
        let r = CreateSandboxRequest {
            metadata: big,
            ..Default::default()
        };
        assert_eq!(r.validate().unwrap_err().field, "metadata");
    }

    #[test]
    fn metadata_refuses_control_characters_in_keys_and_nul_in_values() {
        let check = |k: &str, v: &str| {
            validate_metadata(&BTreeMap::from([(k.to_owned(), v.to_owned())])).map_err(|e| e.field)
        };
        for k in ["a\0b", "a\nb", "a\rb", "\tx", "x\u{7f}", "x\u{85}"] {
            assert_eq!(check(k, "v").unwrap_err(), "metadata", "{k:?}");
        }
        assert_eq!(check("k", "a\0b").unwrap_err(), "metadata.k");
        assert!(check("team-a.b/c é", "line 1\nline 2\ttab").is_ok());
        let patch: PatchSandboxRequest =
            serde_json::from_str(r#"{"metadata":{"a\nb":"v"}}"#).unwrap();
        assert!(patch.validate().unwrap_err().message.contains(r#""a\nb""#));
    }

    #[test]
    fn exec_requests() {
        let ok = |j: &str| {
            serde_json::from_str::<ExecRequest>(j)
                .map_err(|e| e.to_string())
                .and_then(|r| r.validate().map_err(|e| e.field))
        };
        assert!(ok(r#"{"cmd":"echo hi"}"#).is_ok());
        assert!(ok(r#"{"argv":["true"]}"#).is_ok());
        assert_eq!(ok(r#"{}"#).unwrap_err(), "cmd");
        assert_eq!(ok(r#"{"cmd":"x","argv":["y"]}"#).unwrap_err(), "cmd");
        assert_eq!(ok(r#"{"argv":[]}"#).unwrap_err(), "argv");
        assert_eq!(
            ok(r#"{"cmd":"x","timeout_seconds":0}"#).unwrap_err(),
            "timeout_seconds"
        );
        assert_eq!(ok(r#"{"cmd":"x","cwd":"rel"}"#).unwrap_err(), "cwd");
    }

    #[test]
    fn fork_and_paths() {
        assert!(ForkRequest::default().validate().is_ok());
        let f: ForkRequest = serde_json::from_str(r#"{"count":17}"#).unwrap();
        assert_eq!(f.validate().unwrap_err().field, "count");
        assert!(!f.keep_snapshot);
        let f: ForkRequest = serde_json::from_str(r#"{"keep_snapshot":true}"#).unwrap();
        assert!(f.keep_snapshot && f.count == 1);
        assert!(validate_guest_path("path", "/tmp/x").is_ok());
        assert!(validate_guest_path("path", "tmp/x").is_err());
        assert!(validate_guest_path("path", "/tmp/../etc/shadow").is_err());
        assert!(validate_guest_path("path", "/a\0b").is_err());
    }
}
