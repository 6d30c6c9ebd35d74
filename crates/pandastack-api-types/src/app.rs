//! Apps deployed from git: a repository is cloned, its framework detected, built in a VM and
//! served at `<name>.<domain>` through the proxy; new versions are health-checked before the
//! traffic switches, and the previous one stays hibernated for an instant rollback.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// Default memory of an app's VM, MiB (the `app` template's own size).
pub const DEFAULT_APP_MEMORY_MB: u32 = 1024;
/// Memory sizes an app's VM can have, MiB (multiples of 256).
pub const APP_MEMORY_MB: std::ops::RangeInclusive<u32> = 256..=16_384;
/// Default idle time before an app with `min_instances: 0` hibernates, seconds.
pub const DEFAULT_APP_IDLE_SECONDS: u64 = 300;
/// Default branch deployed when a request names none.
pub const DEFAULT_APP_REF: &str = "main";
/// Default path of the health check.
pub const DEFAULT_HEALTH_PATH: &str = "/";
/// Most env and secret entries an app can have (each).
const MAX_ENV: usize = 256;
/// Most custom domains an app can have.
pub const MAX_APP_DOMAINS: usize = 20;

/// An app name: 1-40 of `[a-z0-9-]`, starting with a letter, not ending with `-`. It is the
/// app's host name (`<name>.<domain>`), so names are unique across workspaces.
pub fn validate_app_name(field: &str, name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.as_bytes()[0].is_ascii_lowercase()
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "1-40 of [a-z0-9-], starting with a letter and not ending with '-'",
        ))
    }
}

/// A git ref as `git` accepts it (a branch, tag or commit), checked for what would let it be
/// taken for an option or reach outside the refs namespace.
pub fn validate_git_ref(field: &str, r: &str) -> Result<(), FieldError> {
    let ok = !r.is_empty()
        && r.len() <= 200
        && !r.starts_with('-')
        && !r.contains("..")
        && !r.ends_with('/')
        && !r.ends_with(".lock")
        && r.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'+' | b'@')
        });
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "a branch, tag or commit: 1-200 of [A-Za-z0-9/_.+@-], not starting with '-', no '..'",
        ))
    }
}

/// A custom domain: a DNS name of 2 to 127 labels of `[a-z0-9-]` (1-63 each, not starting or
/// ending with `-`), at most 253 characters, lower case, without a trailing dot (IDNs in their
/// `xn--` form), not an IP address.
pub fn validate_domain(field: &str, d: &str) -> Result<(), FieldError> {
    let labels: Vec<&str> = d.split('.').collect();
    let ok = !d.is_empty()
        && d.len() <= 253
        && labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
        // The last label of a name is never all digits: that is an IPv4 address.
        && !labels[labels.len() - 1].bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "a lower-case DNS name such as shop.example.com: labels of 1-63 [a-z0-9-], \
             at most 253 characters, no trailing dot (IDNs as xn--)",
        ))
    }
}

fn validate_domains(domains: &[String]) -> Result<(), FieldError> {
    if domains.len() > MAX_APP_DOMAINS {
        return Err(field_error(
            "domains",
            format!("at most {MAX_APP_DOMAINS} domains"),
        ));
    }
    for (i, d) in domains.iter().enumerate() {
        validate_domain(&format!("domains[{i}]"), d)?;
        if domains[..i].contains(d) {
            return Err(field_error(format!("domains[{i}]"), "listed twice"));
        }
    }
    Ok(())
}

/// Where an app's code comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppGit {
    /// A repository the server fetches over the network: `https://…`, `http://…`, `git://…`,
    /// `ssh://…` or scp-like `git@host:path` (fetched with the app's `deploy_key`). Never a
    /// path or `file://` on the server, nor an address on its loopback, link-local, private,
    /// CGNAT or metadata ranges unless the operator allowed it (`--allow-internal-fetch`);
    /// deploy a local directory by uploading it.
    pub url: String,
    /// Branch, tag or commit to deploy (default `main`); pushes to this branch deploy.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
}

/// How to build an app (overrides what detection chose).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppBuild {
    /// Shell command run in the app's directory after the install.
    #[serde(default)]
    pub command: Option<String>,
    /// Directory of a static build's output, served as files.
    #[serde(default)]
    pub output_dir: Option<String>,
}

/// How to start an app (overrides what detection chose).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppStart {
    /// Shell command that serves HTTP on `$PORT`.
    #[serde(default)]
    pub command: Option<String>,
    /// The port it listens on (also in `$PORT`).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 65535)]
    pub port: Option<u16>,
}

/// `POST /v1/apps`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAppRequest {
    /// The app's name and host name: 1-40 of `[a-z0-9-]`, starting with a letter.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$")]
    pub name: String,
    pub git: AppGit,
    /// Environment of the build and of the running app.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Like `env`, but never shown by the API (only their names).
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub build: Option<AppBuild>,
    #[serde(default)]
    pub start: Option<AppStart>,
    /// A subdirectory of the repository that is the app (a monorepo's `apps/web`): detection,
    /// install, build and start run there, and only it goes into the VM. Relative, without
    /// `..`, at most 256 bytes; `.` (the default) is the whole repository.
    #[serde(default)]
    pub root_dir: Option<String>,
    /// Memory of the app's VM, MiB (default 1024; a multiple of 256 from 256 to 16384).
    #[serde(default)]
    #[schema(minimum = 256, maximum = 16384, multiple_of = 256)]
    pub memory_mb: Option<u32>,
    /// `0` (default): hibernate after `idle_seconds` without requests, wake on the next;
    /// `1`: always running.
    #[serde(default)]
    #[schema(maximum = 1)]
    pub min_instances: Option<u32>,
    /// Seconds without requests before an app with `min_instances: 0` hibernates (default 300).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_seconds: Option<u64>,
    /// Path the health check asks for (default `/`); 2xx or 3xx is healthy.
    #[serde(default)]
    pub health_path: Option<String>,
    /// Deploy at once (default true).
    #[serde(default)]
    pub deploy: Option<bool>,
    /// Extra host names the app answers at, besides `<name>.<domain>` (point their DNS at
    /// the proxy). With TLS on the proxy, each gets a certificate from the certificate
    /// directory or, failing that, from ACME.
    #[serde(default)]
    #[schema(max_items = 20)]
    pub domains: Vec<String>,
}

/// `PATCH /v1/apps/{name}`: the fields given replace the app's; the next deploy uses them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateAppRequest {
    #[serde(default)]
    pub git: Option<AppGit>,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub secrets: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub build: Option<AppBuild>,
    #[serde(default)]
    pub start: Option<AppStart>,
    /// Replaces the app's `root_dir` (`.`: the whole repository).
    #[serde(default)]
    pub root_dir: Option<String>,
    #[serde(default)]
    #[schema(minimum = 256, maximum = 16384, multiple_of = 256)]
    pub memory_mb: Option<u32>,
    #[serde(default)]
    #[schema(maximum = 1)]
    pub min_instances: Option<u32>,
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604800)]
    pub idle_seconds: Option<u64>,
    #[serde(default)]
    pub health_path: Option<String>,
    /// Replaces the app's custom domains (`[]` removes them all).
    #[serde(default)]
    #[schema(max_items = 20)]
    pub domains: Option<Vec<String>>,
}

/// What an app is configured as (stored; the API shows it without secret values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppConfig {
    pub git: AppGit,
    pub env: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    pub build: AppBuild,
    pub start: AppStart,
    /// The subdirectory that is the app (None: the whole repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_dir: Option<String>,
    pub memory_mb: u32,
    pub min_instances: u32,
    pub idle_seconds: u64,
    pub health_path: String,
    /// Set for a function: its runtime, handler and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<crate::FunctionConfig>,
    /// A function's source (its files travel with it; each version builds from them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_source: Option<crate::FunctionSource>,
}

impl AppConfig {
    /// The branch, tag or commit deployed.
    pub fn git_ref(&self) -> &str {
        self.git.git_ref.as_deref().unwrap_or(DEFAULT_APP_REF)
    }
}

pub(crate) fn validate_env(field: &str, env: &BTreeMap<String, String>) -> Result<(), FieldError> {
    if env.len() > MAX_ENV {
        return Err(field_error(field, format!("at most {MAX_ENV} entries")));
    }
    for (k, v) in env {
        let ok = !k.is_empty()
            && k.len() <= 128
            && !k.as_bytes()[0].is_ascii_digit()
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(field_error(
                format!("{field}.{k}"),
                "names are 1-128 of [A-Za-z0-9_], not starting with a digit",
            ));
        }
        if v.len() > 32 * 1024 || v.contains('\0') {
            return Err(field_error(
                format!("{field}.{k}"),
                "values are at most 32 KiB, without NUL",
            ));
        }
    }
    Ok(())
}

/// git's scp-like syntax, `[user@]host:path` (`git@github.com:org/repo.git`): a colon before
/// any slash and no `://` (git's own rule for telling it from a local path); its `user@host`
/// and path. A bracketed IPv6 host (`git@[::1]:repo`) is one too.
pub fn scp_like_git_url(u: &str) -> Option<(&str, &str)> {
    if u.contains("://") || u.starts_with('/') {
        return None;
    }
    // The colon that ends the host: after a bracketed host's `]`, else the first one.
    let colon = match (u.find('['), u.find(']')) {
        (Some(open), Some(close)) if open < close && !u[..open].contains(['/', ':']) => {
            close + u[close..].find(':')?
        }
        _ => u.find(':')?,
    };
    let (host, path) = (&u[..colon], &u[colon + 1..]);
    if host.contains('/') {
        return None;
    }
    Some((host, path))
}

/// Whether git reaches the repository at `url` over SSH: an `ssh://` URL or an scp-like one
/// (`[user@]host:path`). Those are fetched with the app's deploy key.
pub fn git_url_uses_ssh(url: &str) -> bool {
    url.starts_with("ssh://") || scp_like_git_url(url).is_some()
}

/// The `[user@]host` of an SSH URL, checked for what `ssh` could take for an option or that
/// is no host name: user and host not starting with `-`, of `[A-Za-z0-9._~-]` (the host also
/// `[…]` around an IPv6 address; the user also `%+`).
fn ssh_authority_ok(authority: &str) -> bool {
    let (user, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let user_ok = user.is_none_or(|u| {
        !u.is_empty()
            && !u.starts_with('-')
            && u.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'~' | b'%' | b'+')
            })
    });
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => {
            !v6.is_empty()
                && v6
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'))
        }
        None => {
            !host.is_empty()
                && !host.starts_with('-')
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        }
    };
    user_ok && host_ok
}

/// `[user@]host` of `[user@]host[:port]` (`None`: a port that is not one).
fn without_port(authority: &str) -> Option<&str> {
    // A bracketed IPv6 host has colons of its own: the port's is after its `]`.
    let host_end = authority.rfind(']').map_or(0, |i| i + 1);
    match authority[host_end..].rfind(':') {
        None => Some(authority),
        Some(i) => {
            let (head, port) = authority.split_at(host_end + i);
            port[1..].parse::<u16>().ok().map(|_| head)
        }
    }
}

pub(crate) fn validate_git(git: &AppGit) -> Result<(), FieldError> {
    let u = git.url.as_str();
    let bad = || {
        field_error(
            "git.url",
            "an https://, http://, ssh:// or git:// URL, or an scp-like user@host:path",
        )
    };
    if u.is_empty() || u.len() > 2048 || u.starts_with('-') || u.chars().any(char::is_control) {
        return Err(bad());
    }
    let lower = u.to_ascii_lowercase();
    if lower.starts_with("file:") || u.starts_with('/') || u.starts_with('.') || u.starts_with('~')
    {
        return Err(field_error(
            "git.url",
            "a path or file:// URL on the server is not fetched: sources come over the network \
             (https://, http://, ssh://, git:// or user@host:path); upload a directory instead",
        ));
    }
    if ["https://", "http://", "git://"]
        .iter()
        .any(|s| lower.starts_with(s))
    {
        // As before: git parses these; `--` ends its options.
    } else if let Some(rest) = u.strip_prefix("ssh://") {
        // `ssh://[user@]host[:port]/path`: the part `ssh` sees is checked.
        let authority = rest.split('/').next().unwrap_or_default();
        let ok = !u.chars().any(char::is_whitespace)
            && rest.contains('/')
            && without_port(authority).is_some_and(ssh_authority_ok);
        if !ok {
            return Err(bad());
        }
    } else if let Some((authority, path)) = scp_like_git_url(u) {
        // `name::address` would be git's remote-helper syntax (`ext::…`), not a host.
        let ok = !path.is_empty()
            && !path.starts_with(':')
            && !u.chars().any(char::is_whitespace)
            && ssh_authority_ok(authority);
        if !ok {
            return Err(bad());
        }
    } else {
        return Err(bad());
    }
    if let Some(r) = &git.git_ref {
        validate_git_ref("git.ref", r)?;
    }
    Ok(())
}

fn validate_sizes(
    memory_mb: Option<u32>,
    min_instances: Option<u32>,
    idle_seconds: Option<u64>,
    health_path: Option<&str>,
) -> Result<(), FieldError> {
    if let Some(mb) = memory_mb {
        if !APP_MEMORY_MB.contains(&mb) || mb % 256 != 0 {
            return Err(field_error(
                "memory_mb",
                "a multiple of 256 from 256 to 16384",
            ));
        }
    }
    if min_instances.is_some_and(|n| n > 1) {
        return Err(field_error("min_instances", "0 or 1"));
    }
    if idle_seconds.is_some_and(|s| s == 0 || s > 604_800) {
        return Err(field_error("idle_seconds", "from 1 to 604800"));
    }
    if let Some(p) = health_path {
        if !p.starts_with('/') || p.len() > 1024 || p.chars().any(|c| c.is_control() || c == ' ') {
            return Err(field_error(
                "health_path",
                "a path starting with '/', without spaces",
            ));
        }
    }
    Ok(())
}

fn validate_overrides(
    build: Option<&AppBuild>,
    start: Option<&AppStart>,
) -> Result<(), FieldError> {
    if let Some(d) = build.and_then(|b| b.output_dir.as_deref()) {
        if d.is_empty() || d.starts_with('/') || d.split('/').any(|c| c == "..") {
            return Err(field_error(
                "build.output_dir",
                "a relative path inside the repository",
            ));
        }
    }
    if start.and_then(|s| s.port) == Some(0) {
        return Err(field_error("start.port", "from 1 to 65535"));
    }
    Ok(())
}

/// A subdirectory of the repository: relative, of plain names (`.` alone for the top).
fn validate_root_dir(dir: Option<&str>) -> Result<(), FieldError> {
    let Some(dir) = dir else { return Ok(()) };
    let ok = dir == "."
        || (!dir.is_empty()
            && dir.len() <= 256
            && !dir.starts_with('/')
            && dir.trim_end_matches('/').split('/').all(|c| {
                !c.is_empty()
                    && c != "."
                    && c != ".."
                    && !c.chars().any(|ch| ch.is_control() || ch == '\\')
            }));
    if ok {
        Ok(())
    } else {
        Err(field_error(
            "root_dir",
            "a relative path inside the repository, without `..` (at most 256 bytes)",
        ))
    }
}

/// A valid `root_dir` as stored: `None` for the top.
fn stored_root_dir(dir: Option<&str>) -> Option<String> {
    dir.filter(|d| *d != ".")
        .map(|d| d.trim_end_matches('/').to_owned())
}

impl CreateAppRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_app_name("name", &self.name)?;
        validate_git(&self.git)?;
        validate_env("env", &self.env)?;
        validate_env("secrets", &self.secrets)?;
        validate_overrides(self.build.as_ref(), self.start.as_ref())?;
        validate_root_dir(self.root_dir.as_deref())?;
        validate_domains(&self.domains)?;
        validate_sizes(
            self.memory_mb,
            self.min_instances,
            self.idle_seconds,
            self.health_path.as_deref(),
        )
    }

    /// The configuration to store, defaults filled in.
    pub fn config(&self) -> AppConfig {
        AppConfig {
            git: self.git.clone(),
            env: self.env.clone(),
            secrets: self.secrets.clone(),
            build: self.build.clone().unwrap_or_default(),
            start: self.start.clone().unwrap_or_default(),
            root_dir: stored_root_dir(self.root_dir.as_deref()),
            memory_mb: self.memory_mb.unwrap_or(DEFAULT_APP_MEMORY_MB),
            min_instances: self.min_instances.unwrap_or(0),
            idle_seconds: self.idle_seconds.unwrap_or(DEFAULT_APP_IDLE_SECONDS),
            health_path: self
                .health_path
                .clone()
                .unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_owned()),
            function: None,
            function_source: None,
        }
    }
}

impl UpdateAppRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(g) = &self.git {
            validate_git(g)?;
        }
        if let Some(e) = &self.env {
            validate_env("env", e)?;
        }
        if let Some(s) = &self.secrets {
            validate_env("secrets", s)?;
        }
        validate_overrides(self.build.as_ref(), self.start.as_ref())?;
        validate_root_dir(self.root_dir.as_deref())?;
        if let Some(d) = &self.domains {
            validate_domains(d)?;
        }
        validate_sizes(
            self.memory_mb,
            self.min_instances,
            self.idle_seconds,
            self.health_path.as_deref(),
        )
    }

    /// `config` with this request's fields in place of its own.
    pub fn apply(&self, mut config: AppConfig) -> AppConfig {
        if let Some(g) = &self.git {
            config.git = g.clone();
        }
        if let Some(e) = &self.env {
            config.env = e.clone();
        }
        if let Some(s) = &self.secrets {
            config.secrets = s.clone();
        }
        if let Some(b) = &self.build {
            config.build = b.clone();
        }
        if let Some(s) = &self.start {
            config.start = s.clone();
        }
        if let Some(d) = &self.root_dir {
            config.root_dir = stored_root_dir(Some(d));
        }
        if let Some(m) = self.memory_mb {
            config.memory_mb = m;
        }
        if let Some(n) = self.min_instances {
            config.min_instances = n;
        }
        if let Some(s) = self.idle_seconds {
            config.idle_seconds = s;
        }
        if let Some(p) = &self.health_path {
            config.health_path = p.clone();
        }
        config
    }
}

/// Where a deploy is: `queued → cloning → building → baking → checking → live`, or `failed`
/// at any step. A live deploy that a newer one replaced is `standby` (hibernated, ready for a
/// rollback); `superseded` is a queued deploy a newer one replaced before it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeployState {
    Queued,
    Cloning,
    Building,
    Baking,
    Checking,
    Live,
    Standby,
    Failed,
    Superseded,
}

impl DeployState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeployState::Queued => "queued",
            DeployState::Cloning => "cloning",
            DeployState::Building => "building",
            DeployState::Baking => "baking",
            DeployState::Checking => "checking",
            DeployState::Live => "live",
            DeployState::Standby => "standby",
            DeployState::Failed => "failed",
            DeployState::Superseded => "superseded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => DeployState::Queued,
            "cloning" => DeployState::Cloning,
            "building" => DeployState::Building,
            "baking" => DeployState::Baking,
            "checking" => DeployState::Checking,
            "live" => DeployState::Live,
            "standby" => DeployState::Standby,
            "failed" => DeployState::Failed,
            "superseded" => DeployState::Superseded,
            _ => return None,
        })
    }

    /// Still on its way (queued or running).
    pub fn active(self) -> bool {
        matches!(
            self,
            DeployState::Queued
                | DeployState::Cloning
                | DeployState::Building
                | DeployState::Baking
                | DeployState::Checking
        )
    }
}

/// An app resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct App {
    pub id: String,
    pub name: String,
    /// Where the app answers.
    pub url: String,
    pub git: AppGit,
    pub env: BTreeMap<String, String>,
    /// Names of its secrets (values are never shown).
    pub secret_names: Vec<String>,
    pub build: AppBuild,
    pub start: AppStart,
    /// The subdirectory of the repository that is the app (`null`: the whole repository).
    pub root_dir: Option<String>,
    pub memory_mb: u32,
    pub min_instances: u32,
    pub idle_seconds: u64,
    pub health_path: String,
    /// Signs webhook deliveries (`X-Hub-Signature-256`: HMAC-SHA256 of the body).
    pub webhook_secret: String,
    /// The public half of the app's own SSH deploy key (ed25519, one OpenSSH
    /// `authorized_keys` line with the comment `pandastack-app-<name>`): add this as a
    /// read-only deploy key on the repository, and the server fetches an `ssh://` or
    /// `git@host:path` URL with it. The private half never leaves the server;
    /// `POST /v1/apps/{name}/deploy-key` replaces the pair.
    #[schema(read_only)]
    pub deploy_key: String,
    /// The deploy serving traffic (`None` until one passes its health check).
    pub live_deploy: Option<String>,
    /// The state of the live deploy's VM (`running`, `hibernated`…), if there is one.
    pub instance_state: Option<crate::SandboxState>,
    /// Custom domains and their TLS certificates.
    pub domains: Vec<AppDomain>,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
}

/// Where a custom domain's TLS certificate comes from, or why it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DomainTls {
    /// The proxy serves no TLS, or nothing provides a certificate for the name.
    None,
    /// A certificate from the server's certificate directory.
    Files,
    /// An ACME order is under way.
    Pending,
    /// Issued by ACME (renewed before it ends).
    Issued,
    /// The last ACME order failed (`tls_error`); retried later.
    Failed,
}

/// A custom domain of an app.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AppDomain {
    pub name: String,
    pub tls: DomainTls,
    /// End of the certificate's validity (RFC 3339), when known.
    pub tls_expires_at: Option<String>,
    /// Why the last ACME order failed.
    pub tls_error: Option<String>,
}

/// A deploy resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Deploy {
    pub id: String,
    pub app: String,
    /// 1, 2, 3… per app.
    pub number: u64,
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The commit built (once cloned).
    pub commit: Option<String>,
    pub state: DeployState,
    /// Why it failed.
    pub error: Option<String>,
    /// What detection decided (framework, package manager, commands, port).
    #[schema(value_type = Option<Object>)]
    pub plan: Option<serde_json::Value>,
    /// Milliseconds spent in each phase (`clone`, `install`, `build`, `bake`, `check`, `switch`).
    pub phases_ms: BTreeMap<String, u64>,
    /// The VM that built and serves this version.
    pub sandbox_id: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    pub updated_at: String,
}

/// `POST /v1/apps/{name}/deploys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDeployRequest {
    /// Branch, tag or commit (default: the app's `git.ref`).
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
}

impl CreateDeployRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        match &self.git_ref {
            Some(r) => validate_git_ref("ref", r),
            None => Ok(()),
        }
    }
}

/// `POST /v1/apps/{name}/rollback`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {
    /// The deploy to go back to (default: the newest `standby` one).
    #[serde(default)]
    pub deploy_id: Option<String>,
}

/// Answer of a webhook delivery.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WebhookResult {
    /// `deployed`, `duplicate` (this delivery was seen) or `ignored` (not the tracked branch,
    /// or not a push).
    pub status: String,
    /// The deploy it queued (or queued before, for a duplicate).
    pub deploy_id: Option<String>,
    pub reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_dirs_are_relative_and_stay_inside() {
        for ok in ["apps/web", "backend", "apps/web/", "."] {
            assert!(validate_root_dir(Some(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/srv",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            "a\\b",
            &"a".repeat(257),
        ] {
            assert!(validate_root_dir(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(stored_root_dir(Some(".")), None);
        assert_eq!(
            stored_root_dir(Some("apps/web/")).as_deref(),
            Some("apps/web")
        );
        let req: CreateAppRequest = serde_json::from_value(serde_json::json!({
            "name": "web", "git": {"url": "https://example.com/m.git"}, "root_dir": "apps/web"
        }))
        .unwrap();
        assert_eq!(req.config().root_dir.as_deref(), Some("apps/web"));
        let cleared = UpdateAppRequest {
            root_dir: Some(".".into()),
            ..UpdateAppRequest::default()
        };
        assert_eq!(cleared.apply(req.config()).root_dir, None);
    }

    #[test]
    fn names_and_refs() {
        assert!(validate_app_name("n", "my-app2").is_ok());
        for bad in ["", "2app", "app-", "App", "a_b", &"a".repeat(41)] {
            assert!(validate_app_name("n", bad).is_err(), "{bad}");
        }
        assert!(validate_git_ref("r", "feature/x-1").is_ok());
        for bad in ["", "-x", "a..b", "a b", "x.lock", "a/"] {
            assert!(validate_git_ref("r", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn domains() {
        for ok in [
            "shop.example.com",
            "a.b",
            "xn--bcher-kva.example",
            "1.example.com",
        ] {
            assert!(validate_domain("d", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "localhost",
            "Shop.example.com",
            "shop.example.com.",
            "-a.example.com",
            "a-.example.com",
            "a..example.com",
            "*.example.com",
            "10.0.0.1",
            "a_b.example.com",
            &format!("{}.com", "a".repeat(64)),
        ] {
            assert!(validate_domain("d", bad).is_err(), "{bad}");
        }
        let twice = vec!["a.example.com".to_owned(), "a.example.com".to_owned()];
        assert_eq!(validate_domains(&twice).unwrap_err().field, "domains[1]");
        let many: Vec<String> = (0..21).map(|i| format!("d{i}.example.com")).collect();
        assert_eq!(validate_domains(&many).unwrap_err().field, "domains");
    }

    #[test]
    fn ssh_urls() {
        let git = |url: &str| AppGit {
            url: url.into(),
            git_ref: None,
        };
        for ok in [
            "git@github.com:org/repo.git",
            "github.com:repo",
            "deploy@10.0.0.2:/srv/repo.git",
            "git@[::1]:repo.git",
            "ssh://git@example.com/org/repo.git",
            "ssh://git@example.com:2222/srv/repo.git",
            "ssh://[::1]:22/repo",
            "https://example.com/a b.git",
        ] {
            assert!(validate_git(&git(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "-oProxyCommand=x:repo",
            "git@-oProxyCommand=x:repo",
            "-x@host:repo",
            "git@host:",
            "git@host:a b",
            "git@ho st:repo",
            "git@host:a\tb",
            "ssh://-oProxyCommand=x/repo",
            "ssh://git@-host/repo",
            "ssh://host:notaport/repo",
            "ssh://host",
            "/srv/my repo.git",
            "ssh://git@host/a b",
            "relative/path",
            "ext::sh -c x",
            "ext::sh",
            "fd::3",
            "host:repo\n",
        ] {
            assert!(validate_git(&git(bad)).is_err(), "{bad}");
        }
        assert!(git_url_uses_ssh("git@github.com:org/repo.git"));
        assert!(git_url_uses_ssh("ssh://h/r"));
        for not in ["/srv/a:b", "file:///x", "https://h/r", "./a:b"] {
            assert!(!git_url_uses_ssh(not), "{not}");
        }
        assert_eq!(
            scp_like_git_url("git@[::1]:r.git"),
            Some(("git@[::1]", "r.git"))
        );
    }

    #[test]
    fn create_defaults_and_refusals() {
        let mut r: CreateAppRequest = serde_json::from_str(
            r#"{"name":"web","git":{"url":"https://git.example.com/web.git"}}"#,
        )
        .unwrap();
        r.validate().unwrap();
        let c = r.config();
        assert_eq!(
            (c.git_ref(), c.min_instances, c.memory_mb),
            ("main", 0, 1024)
        );
        r.git.url = "--upload-pack=evil".into();
        assert_eq!(r.validate().unwrap_err().field, "git.url");
        for local in [
            "file:///srv/x",
            "FILE:///srv/x",
            "/srv/web.git",
            "./web",
            "~/web",
        ] {
            r.git.url = local.into();
            let e = r.validate().unwrap_err();
            assert!(
                e.field == "git.url" && e.message.contains("upload"),
                "{local}: {e:?}"
            );
        }
        r.git.url = "https://git.example.com/web.git".into();
        r.env.insert("1X".into(), "v".into());
        assert_eq!(r.validate().unwrap_err().field, "env.1X");
        assert!(serde_json::from_str::<CreateAppRequest>(
            r#"{"name":"web","git":{"url":"/x"},"bogus":1}"#
        )
        .is_err());
    }
}
