//! The npm lockfile fast path of an app's install.
//!
//! Under TCG most of `npm ci`'s time is npm's own JavaScript, not the packages' scripts: a
//! request for each package's registry document when the lockfile has no `resolved` URLs (npm
//! 11 can write it so), then every tarball unpacked through JavaScript streams — 1,306
//! packages of a Create React App project took about 1,100 s in a 1-vCPU build VM. When the
//! lockfile pins every package by name, version and SHA-512 and all come from the npm
//! registry, the host does the part that runs nothing: it fetches the tarballs (each checked
//! against its hash, kept in a content-addressed cache shared by deploys) and repacks them
//! into one tarball laid out as the lockfile says (`node_modules/…`, with npm's hidden
//! lockfile). The VM unpacks it with `tar` and runs `npm rebuild` — the packages' install
//! scripts and bin links, in the VM as before — then the root package's own install scripts,
//! the ones `npm ci` runs.
//!
//! Anything the fast path does not take — a `.npmrc`, workspaces or links, a package from a
//! git or another registry, npm settings or `NODE_ENV` in the app's environment, a package
//! for another platform that is not optional — is left to `npm ci` in the VM, and the deploy
//! log says why ([`Lock::read`]). So is a failed download or a hash that does not match.

mod fetch;
mod install;
mod pack;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use serde_json::{Map, Value};

pub use fetch::{fetch, FetchStats};
pub(crate) use install::PACKED;
pub use pack::{pack, PackStats};

/// The registry the fast path fetches from (npm's default; an app that names another takes
/// the slow path).
pub const REGISTRY: &str = "https://registry.npmjs.org/";
/// Yarn's mirror of the npm registry, taken as the npm registry.
const YARN_REGISTRY: &str = "https://registry.yarnpkg.com/";
/// The lockfile the fast path reads.
pub const LOCKFILE: &str = "package-lock.json";
/// Largest lockfile read.
const MAX_LOCKFILE_BYTES: u64 = 64 << 20;
/// Most packages one lockfile may name.
const MAX_PACKAGES: usize = 20_000;
/// The root package's scripts `npm ci` runs after the install, in its order.
const ROOT_SCRIPTS: [&str; 7] = [
    "preinstall",
    "install",
    "postinstall",
    "prepublish",
    "preprepare",
    "prepare",
    "postprepare",
];
/// package.json's fields the lockfile's root entry must repeat.
const DEPENDENCY_FIELDS: [&str; 4] = [
    "dependencies",
    "devDependencies",
    "optionalDependencies",
    "peerDependencies",
];
/// The platform of the app image, as npm's `os`, `cpu` and `libc` fields name it.
const OS: &str = "linux";
const CPU: &str = "x64";
const LIBC: &str = "glibc";

/// Why the fast path cannot install a project, or failed to.
#[derive(Debug, thiserror::Error)]
pub enum FastPathError {
    /// The project needs something only npm does; `npm ci` installs it.
    #[error("{0}")]
    NotTaken(String),
    /// The lockfile could not be read.
    #[error("read {LOCKFILE}")]
    Read(#[source] std::io::Error),
    /// The lockfile is not JSON.
    #[error("{LOCKFILE} is not valid JSON")]
    Json(#[source] serde_json::Error),
    /// A tarball could not be fetched.
    #[error("fetch {url}: {reason}")]
    Fetch { url: String, reason: String },
    /// A tarball's bytes do not match the lockfile's SHA-512.
    #[error("{url}: its SHA-512 does not match the lockfile's integrity")]
    Integrity { url: String },
    /// The cache or the repacked tarball could not be written, or a tarball not read.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The packages unpack to more than the fast path takes.
    #[error("the packages unpack to more than {limit}")]
    TooLarge { limit: String },
}

impl FastPathError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        FastPathError::Io {
            what: what.into(),
            source,
        }
    }
}

fn not_taken(why: impl Into<String>) -> FastPathError {
    FastPathError::NotTaken(why.into())
}

/// One package to fetch and unpack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// Where it goes, relative to the project: `node_modules/a/node_modules/@s/b`.
    pub path: String,
    /// Its tarball in the registry.
    pub url: String,
    /// The SHA-512 of the tarball (from the lockfile's `integrity`).
    pub sha512: Vec<u8>,
}

impl Package {
    /// Its file in the tarball cache: the hash in hex.
    pub fn cache_name(&self) -> String {
        format!("{}.tgz", hex::encode(&self.sha512))
    }
}

/// What the fast path installs for one project.
#[derive(Debug, Clone)]
pub struct Lock {
    /// The packages to fetch, in the lockfile's order (a package before those nested in it).
    pub packages: Vec<Package>,
    /// npm's hidden lockfile (`node_modules/.package-lock.json`) for the installed tree: with
    /// it, `npm rebuild` reads the tree without opening every package.json.
    pub hidden_lockfile: Vec<u8>,
    /// The root package's install scripts, in the order `npm ci` runs them.
    pub root_scripts: Vec<String>,
    /// Optional packages left out because they are for another platform (`fsevents`).
    pub other_platform: Vec<String>,
}

impl Lock {
    /// Reads the lockfile of the project in `dir`, whose install runs with `env`; a
    /// [`FastPathError::NotTaken`] says why npm has to install it.
    pub fn read(dir: &Path, env: &BTreeMap<String, String>) -> Result<Lock, FastPathError> {
        if dir.join(".npmrc").exists() {
            return Err(not_taken(
                "the project has an .npmrc (its settings are npm's to apply)",
            ));
        }
        if let Some(k) = env.keys().find(|k| {
            let k = k.to_ascii_lowercase();
            k.starts_with("npm_config_") || k == "node_env"
        }) {
            return Err(not_taken(format!(
                "the app's environment sets {k}, which changes what npm installs"
            )));
        }
        let path = dir.join(LOCKFILE);
        let meta = std::fs::symlink_metadata(&path).map_err(FastPathError::Read)?;
        if !meta.is_file() {
            return Err(not_taken(format!("{LOCKFILE} is not a regular file")));
        }
        if meta.len() > MAX_LOCKFILE_BYTES {
            return Err(not_taken(format!("{LOCKFILE} is larger than 64 MiB")));
        }
        let bytes = std::fs::read(&path).map_err(FastPathError::Read)?;
        let lock: Value = serde_json::from_slice(&bytes).map_err(FastPathError::Json)?;
        // Detection has read it already: it parses.
        let manifest = std::fs::read(dir.join("package.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or(Value::Null);
        Self::from_json(&lock, &manifest)
    }

    /// The fast path's reading of a parsed lockfile and package.json.
    pub(crate) fn from_json(lock: &Value, manifest: &Value) -> Result<Lock, FastPathError> {
        let version = lock.get("lockfileVersion").and_then(Value::as_u64);
        if !matches!(version, Some(2 | 3)) {
            return Err(not_taken(format!(
                "{LOCKFILE} has lockfileVersion {}, not 2 or 3",
                version.map_or("(none)".into(), |v| v.to_string())
            )));
        }
        let Some(entries) = lock.get("packages").and_then(Value::as_object) else {
            return Err(not_taken(format!("{LOCKFILE} has no \"packages\"")));
        };
        if entries.len() > MAX_PACKAGES + 1 {
            return Err(not_taken(format!(
                "{LOCKFILE} names more than {MAX_PACKAGES} packages"
            )));
        }
        let root = entries.get("").unwrap_or(&Value::Null);
        if root.get("workspaces").is_some() || manifest.get("workspaces").is_some() {
            return Err(not_taken("the project has workspaces"));
        }
        // `npm ci` refuses a lockfile out of step with package.json (the plan's `npm install`
        // then resolves again); the lockfile's root entry repeats package.json's dependencies.
        for field in DEPENDENCY_FIELDS {
            let declared = |v: &Value| {
                v.get(field)
                    .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
                    .cloned()
            };
            if declared(manifest) != declared(root) {
                return Err(not_taken(format!(
                    "package.json's {field} differ from {LOCKFILE}'s (npm resolves them again)"
                )));
            }
        }
        let mut packages = Vec::new();
        let mut installed = Map::new();
        let mut other_platform = Vec::new();
        for (path, entry) in entries {
            if path.is_empty() {
                continue;
            }
            let dir_name = package_name(path)
                .ok_or_else(|| not_taken(format!("{path}: not a package under node_modules")))?;
            let flag = |f: &str| entry.get(f).and_then(Value::as_bool).unwrap_or(false);
            if flag("link") {
                return Err(not_taken(format!("{path} is a link")));
            }
            if !for_this_platform(entry) {
                if flag("optional") || flag("devOptional") {
                    other_platform.push(path.clone());
                    continue;
                }
                return Err(not_taken(format!(
                    "{path} is for another platform (npm refuses it)"
                )));
            }
            installed.insert(path.clone(), entry.clone());
            if flag("inBundle") {
                // Inside the tarball of the package that bundles it.
                continue;
            }
            packages.push(Package {
                path: path.clone(),
                url: tarball_url(path, entry, dir_name)?,
                sha512: sha512_of(path, entry)?,
            });
        }
        let mut hidden = Map::new();
        for k in ["name", "version"] {
            if let Some(v) = lock.get(k) {
                hidden.insert(k.into(), v.clone());
            }
        }
        hidden.insert("lockfileVersion".into(), Value::from(3));
        hidden.insert("requires".into(), Value::from(true));
        hidden.insert("packages".into(), Value::Object(installed));
        let hidden_lockfile =
            serde_json::to_vec_pretty(&Value::Object(hidden)).map_err(FastPathError::Json)?;
        let scripts = manifest.get("scripts");
        let root_scripts = ROOT_SCRIPTS
            .iter()
            .filter(|s| {
                scripts
                    .and_then(|m| m.get(**s))
                    .is_some_and(Value::is_string)
            })
            .map(|s| s.to_string())
            .collect();
        Ok(Lock {
            packages,
            hidden_lockfile,
            root_scripts,
            other_platform,
        })
    }

    /// What the VM runs once the packages are unpacked: `npm rebuild` (install scripts and
    /// bin links of every package), then each of the root package's install scripts.
    pub fn after_unpack(&self) -> String {
        let mut cmd = String::from("npm rebuild");
        for s in &self.root_scripts {
            // `--ignore-scripts`: the named script runs, its pre/post ones do not — `npm ci`
            // runs each of these events once, in this order.
            cmd.push_str(&format!(" && npm run --ignore-scripts {s}"));
        }
        cmd
    }
}

/// The package a lockfile path installs (`node_modules/a/node_modules/@s/b` → `@s/b`); `None`
/// for a path that is not `node_modules/<name>` repeated with valid names.
fn package_name(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    let mut last = None;
    let mut i = 0;
    while i < parts.len() {
        if parts[i] != "node_modules" {
            return None;
        }
        let first = *parts.get(i + 1)?;
        let name = if let Some(scope) = first.strip_prefix('@') {
            let second = *parts.get(i + 2)?;
            if !name_part(scope) || !name_part(second) {
                return None;
            }
            i += 3;
            format!("{first}/{second}")
        } else {
            if !name_part(first) {
                return None;
            }
            i += 2;
            first.to_owned()
        };
        last = Some(name);
    }
    last
}

/// A package name or scope (without `@`): npm's URL-safe characters, no `.`/`..`.
fn name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 214
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~'))
}

/// Whether npm installs `entry` on this platform (its `os`, `cpu` and `libc` lists).
fn for_this_platform(entry: &Value) -> bool {
    [("os", OS), ("cpu", CPU), ("libc", LIBC)]
        .iter()
        .all(|(field, ours)| match entry.get(*field) {
            Some(Value::Array(list)) => allows(list, ours),
            Some(Value::String(one)) => allows(&[Value::from(one.as_str())], ours),
            _ => true,
        })
}

/// npm's reading of an `os`/`cpu`/`libc` list: `!x` excludes x; if any plain entry is given,
/// one of them must match.
fn allows(list: &[Value], ours: &str) -> bool {
    let items: Vec<&str> = list.iter().filter_map(Value::as_str).collect();
    if items.iter().any(|i| i.strip_prefix('!') == Some(ours)) {
        return false;
    }
    let plain: Vec<&&str> = items.iter().filter(|i| !i.starts_with('!')).collect();
    plain.is_empty() || plain.iter().any(|i| **i == ours || **i == "any")
}

/// The registry URL of a package's tarball: its `resolved` when that is in [`REGISTRY`],
/// else the registry's layout for its name and version.
fn tarball_url(path: &str, entry: &Value, dir_name: String) -> Result<String, FastPathError> {
    if let Some(resolved) = entry.get("resolved").and_then(Value::as_str) {
        // Yarn's registry serves npm's tarballs (lockfiles converted from Yarn name it); the
        // hash makes sure the bytes are the ones locked.
        let rest = resolved
            .strip_prefix(REGISTRY)
            .or_else(|| resolved.strip_prefix(YARN_REGISTRY))
            .ok_or_else(|| {
                not_taken(format!(
                    "{path} comes from {resolved}, not the npm registry"
                ))
            })?;
        let safe = rest.ends_with(".tgz")
            && !rest.contains("..")
            && rest
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~@/%+".contains(c));
        if !safe {
            return Err(not_taken(format!(
                "{path}: unexpected registry URL {resolved}"
            )));
        }
        return Ok(format!("{REGISTRY}{rest}"));
    }
    // An alias (`"x": "npm:y@1"`) lives at node_modules/x but is package y.
    let name = match entry.get("name").and_then(Value::as_str) {
        Some(n) => n.to_owned(),
        None => dir_name,
    };
    let valid_name = match name.strip_prefix('@').and_then(|n| n.split_once('/')) {
        Some((scope, base)) => name_part(scope) && name_part(base),
        None => name_part(&name),
    };
    let version = entry.get("version").and_then(Value::as_str).unwrap_or("");
    let valid_version = !version.is_empty()
        && version.len() <= 256
        && version.starts_with(|c: char| c.is_ascii_digit())
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if !valid_name || !valid_version {
        return Err(not_taken(format!(
            "{path}: no registry version to fetch ({name}@{version})"
        )));
    }
    let base = name.rsplit('/').next().unwrap_or(&name);
    Ok(format!("{REGISTRY}{name}/-/{base}-{version}.tgz"))
}

/// The SHA-512 in a package's `integrity` (which may list several hashes).
fn sha512_of(path: &str, entry: &Value) -> Result<Vec<u8>, FastPathError> {
    let integrity = entry.get("integrity").and_then(Value::as_str).unwrap_or("");
    integrity
        .split_whitespace()
        .filter_map(|h| h.strip_prefix("sha512-"))
        .find_map(|b64| {
            let b64 = b64.split('?').next().unwrap_or(b64);
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .filter(|d| d.len() == 64)
        })
        .ok_or_else(|| not_taken(format!("{path} has no SHA-512 integrity in {LOCKFILE}")))
}
