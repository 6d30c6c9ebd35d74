//! Node.js projects: package.json, the package manager (`packageManager`, else the
//! lockfile) and how to get it, and the Node.js version the app asks for (`engines.node`,
//! .nvmrc, .node-version) against the image's.

use serde_json::Value;

use super::files::Facts;
use super::semver::Range;
use super::{clip, quote, BuildPlan, DetectError, NODE_MAJOR, NODE_VERSION};

/// Package manager, Node.js version, setup and install for a package.json.
pub(super) fn node_install(
    f: &Facts,
    pkg: &PackageJson,
    plan: &mut BuildPlan,
) -> Result<Manager, DetectError> {
    let m = Manager::detect(f, pkg, &mut plan.decisions);
    plan.node_major = node_version(f, pkg, &mut plan.decisions)?;
    plan.package_manager = Some(m.pm.name().into());
    plan.setup = m.setup();
    if let Some(setup) = &plan.setup {
        plan.decisions.push(format!("setup: `{setup}`"));
    }
    let install = m.install();
    plan.decisions.push(format!("install: `{install}`"));
    plan.install = Some(install);
    plan.cache_files = vec![m.lockfile.unwrap_or("package.json").into()];
    plan.cache_dirs = vec!["node_modules".into()];
    Ok(m)
}

/// The fields of package.json this reads; values of unexpected types read as absent.
pub(super) struct PackageJson {
    scripts: Value,
    dependencies: Value,
    dev_dependencies: Value,
    main: Value,
    engines: Value,
    package_manager: Value,
    workspaces: Value,
}

impl PackageJson {
    pub(super) fn parse(text: &str) -> Result<PackageJson, DetectError> {
        let value = serde_json::from_str(text).map_err(|e| DetectError::BadPackageJson {
            line: e.line(),
            column: e.column(),
            source: e,
        })?;
        let Value::Object(mut map) = value else {
            return Err(DetectError::PackageJsonNotObject);
        };
        let mut take = |key: &str| map.remove(key).unwrap_or_default();
        Ok(PackageJson {
            scripts: take("scripts"),
            dependencies: take("dependencies"),
            dev_dependencies: take("devDependencies"),
            main: take("main"),
            engines: take("engines"),
            package_manager: take("packageManager"),
            workspaces: take("workspaces"),
        })
    }

    pub(super) fn script(&self, name: &str) -> Option<&str> {
        self.scripts.get(name)?.as_str()
    }

    pub(super) fn has_dep(&self, name: &str) -> bool {
        self.dependencies.get(name).is_some() || self.dev_dependencies.get(name).is_some()
    }

    /// The workspace patterns of a monorepo's root (`["apps/*"]`, or Yarn's
    /// `{"packages": [...]}`).
    pub(super) fn workspaces(&self) -> Vec<&str> {
        let list = match &self.workspaces {
            Value::Object(o) => o.get("packages"),
            v => Some(v),
        };
        list.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    pub(super) fn main(&self) -> Option<&str> {
        self.main.as_str().filter(|m| !m.trim().is_empty())
    }
}

/// `npm start` for a `start` script, else `node` on `main`, server.js or index.js.
pub(super) fn node_start(f: &Facts, m: Option<&Manager>) -> Result<(String, String), DetectError> {
    let pkg = f.pkg();
    if let (Some(_), Some(m)) = (pkg.and_then(|p| p.script("start")), m) {
        return Ok((m.start(), "script `start`".into()));
    }
    if let Some(main) = pkg.and_then(PackageJson::main) {
        let path = if main.starts_with('/') || main.starts_with('.') {
            main.to_string()
        } else {
            format!("./{main}")
        };
        return Ok((format!("node {}", quote(&path)), "`main`".into()));
    }
    for file in ["server.js", "index.js"] {
        if f.has(file) {
            return Ok((format!("node {file}"), format!("file {file}")));
        }
    }
    Err(DetectError::NoEntry {
        framework: "node",
        looked_at: "package.json (a `start` script, `main`), server.js and index.js".into(),
        advice: super::SET_START,
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Pm {
    Npm,
    Pnpm,
    Yarn,
    Bun,
}

impl Pm {
    fn name(self) -> &'static str {
        match self {
            Pm::Npm => "npm",
            Pm::Pnpm => "pnpm",
            Pm::Yarn => "yarn",
            Pm::Bun => "bun",
        }
    }

    fn parse(name: &str) -> Option<Pm> {
        [Pm::Npm, Pm::Pnpm, Pm::Yarn, Pm::Bun]
            .into_iter()
            .find(|pm| pm.name() == name)
    }

    /// Runs a package's binary.
    pub(super) fn exec(self) -> &'static str {
        match self {
            Pm::Npm => "npx",
            Pm::Pnpm => "pnpm exec",
            Pm::Yarn => "yarn",
            Pm::Bun => "bunx",
        }
    }
}

/// Lockfiles, in the order they are preferred when there are several.
const LOCKFILES: &[(&str, Pm)] = &[
    ("pnpm-lock.yaml", Pm::Pnpm),
    ("yarn.lock", Pm::Yarn),
    ("bun.lock", Pm::Bun),
    ("bun.lockb", Pm::Bun),
    ("npm-shrinkwrap.json", Pm::Npm),
    ("package-lock.json", Pm::Npm),
];

/// The package manager of a project and how to get it.
pub(super) struct Manager {
    pub(super) pm: Pm,
    lockfile: Option<&'static str>,
    /// From `packageManager`, checked to be a plain version.
    version: Option<String>,
    /// Yarn 2 or later.
    berry: bool,
    /// The pnpm to install without a `packageManager` version (from the lockfile's version).
    pnpm_major: &'static str,
}

impl Manager {
    fn detect(f: &Facts, pkg: &PackageJson, d: &mut Vec<String>) -> Manager {
        let found: Vec<(&'static str, Pm)> = LOCKFILES
            .iter()
            .copied()
            .filter(|(name, _)| f.has(name))
            .collect();
        let field = pkg.package_manager.as_str();
        let named = field.and_then(|s| {
            let (name, version) = s.split_once('@').unwrap_or((s, ""));
            Some((Pm::parse(name.trim())?, plain_version(version)))
        });
        let (pm, version, why) = match (named, found.first()) {
            (Some((pm, version)), _) => {
                let why = format!(
                    "packageManager {:?} in package.json",
                    clip(field.unwrap_or(""))
                );
                (pm, version, why)
            }
            (None, Some((name, pm))) => (*pm, None, name.to_string()),
            (None, None) => (Pm::Npm, None, "no lockfile".into()),
        };
        let lockfile = found.iter().find(|(_, p)| *p == pm).map(|(name, _)| *name);
        let ignored: Vec<&str> = found
            .iter()
            .filter(|(_, p)| *p != pm)
            .map(|(name, _)| *name)
            .collect();
        let mut line = format!("package manager: {} ({why})", pm.name());
        if !ignored.is_empty() {
            line += &format!("; {} ignored", ignored.join(", "));
        }
        d.push(line);
        if let (Pm::Npm, Some(v)) = (pm, &version) {
            d.push(format!(
                "npm: the image's npm (packageManager asks for npm@{v})"
            ));
        }
        // pnpm's and Yarn's lockfiles say which major wrote them.
        let lock = lockfile
            .filter(|_| matches!(pm, Pm::Pnpm | Pm::Yarn))
            .and_then(|name| f.read(name))
            .map(|t| t.text);
        let lock = lock.as_deref().unwrap_or("");
        let major = version
            .as_deref()
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
        Manager {
            pm,
            lockfile,
            berry: pm == Pm::Yarn
                && (major.is_some_and(|m| m >= 2) || lock.contains("__metadata:")),
            pnpm_major: pnpm_for_lockfile(lock),
            version,
        }
    }

    pub(super) fn run(&self, script: &str) -> String {
        format!("{} run {script}", self.pm.name())
    }

    fn start(&self) -> String {
        match self.pm {
            Pm::Bun => "bun run start".into(),
            pm => format!("{} start", pm.name()),
        }
    }

    /// Installs the package manager (npm is in the image).
    fn setup(&self) -> Option<String> {
        let v = self.version.as_deref();
        match self.pm {
            Pm::Npm => None,
            Pm::Pnpm => Some(format!(
                "npm install -g pnpm@{}",
                v.unwrap_or(self.pnpm_major)
            )),
            // Yarn 2+ comes through corepack, at the version packageManager names.
            Pm::Yarn => Some(match v {
                Some(v) if self.berry => format!(
                    "npm install -g corepack && corepack enable yarn && \
                     COREPACK_ENABLE_DOWNLOAD_PROMPT=0 corepack install -g yarn@{v}"
                ),
                // Yarn 1 hands over to a checked-in Yarn 2+ (`yarnPath` in .yarnrc.yml).
                _ => format!("npm install -g yarn@{}", v.unwrap_or("1")),
            }),
            Pm::Bun => Some(match v {
                Some(v) => format!("npm install -g bun@{v}"),
                None => "npm install -g bun".into(),
            }),
        }
    }

    fn install(&self) -> String {
        let locked = self.lockfile.is_some();
        match self.pm {
            Pm::Npm if locked => NPM_CI.into(),
            Pm::Pnpm if locked => "pnpm install --frozen-lockfile".into(),
            Pm::Yarn if locked && self.berry => "yarn install --immutable".into(),
            Pm::Yarn if locked => "yarn install --frozen-lockfile".into(),
            Pm::Bun if locked => "bun install --frozen-lockfile".into(),
            pm => format!("{} install", pm.name()),
        }
    }
}

/// The install of an npm project with a lockfile: `npm ci`, and `npm install` if it fails.
/// npm versions disagree on which optional peer dependencies a lockfile lists (a lockfile that
/// npm 11 writes can lack one that npm 9 and 10 want: `create-react-app`'s lacks tailwindcss's
/// `yaml@2`), and `npm ci` refuses a lockfile it finds incomplete ("Missing: yaml@2.9.1 from
/// lock file"), so the image's npm 9 would refuse projects locked with a newer npm. `npm
/// install` keeps the locked versions and adds what this npm finds missing.
pub(crate) const NPM_CI: &str = concat!(
    "npm ci || { echo 'npm ci failed (a lockfile from another npm version can lack optional ",
    "peers this one wants); installing with npm install'; npm install; }"
);

/// A version from `packageManager` (`9.1.0+sha512.…` → `9.1.0`) if it is safe in a command.
fn plain_version(v: &str) -> Option<String> {
    let v = v.split('+').next().unwrap_or("");
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
    ok.then(|| v.to_string())
}

/// The pnpm major that writes a lockfile: `lockfileVersion: '9.0'` → 9, 6.x → 8, 5.x → 7.
fn pnpm_for_lockfile(lock: &str) -> &'static str {
    let version = lock
        .lines()
        .find_map(|l| l.trim().strip_prefix("lockfileVersion:"))
        .map(|v| v.trim().trim_matches(['\'', '"']));
    match version.and_then(|v| v.split('.').next()) {
        Some("6") => "8",
        Some("5") => "7",
        _ => "9",
    }
}

/// Checks what the app asks of Node.js against the image's; the major asked for, if any.
fn node_version(
    f: &Facts,
    pkg: &PackageJson,
    d: &mut Vec<String>,
) -> Result<Option<u32>, DetectError> {
    let mut asked = false;
    if let Some(wanted) = pkg.engines.get("node").and_then(Value::as_str) {
        asked = true;
        let from = "engines.node";
        match Range::parse(wanted) {
            None => d.push(format!(
                "node: {NODE_MAJOR} ({from} {:?} is not a range this reads; ignored)",
                clip(wanted)
            )),
            Some(r) if r.admits(NODE_VERSION) => {
                d.push(format!("node: {NODE_MAJOR} ({from} {:?})", clip(wanted)))
            }
            Some(r) if r.meets_major(NODE_MAJOR.into()) => d.push(format!(
                "node: {NODE_MAJOR} ({from} {:?}; the image has {NODE_VERSION}, outside it)",
                clip(wanted)
            )),
            Some(_) => {
                return Err(DetectError::NodeVersion {
                    from,
                    wanted: clip(wanted),
                })
            }
        }
    }
    for from in [".nvmrc", ".node-version"] {
        let Some(text) = f.read(from) else { continue };
        let wanted = text.text.lines().map(str::trim).find(|l| !l.is_empty());
        let Some(wanted) = wanted else { continue };
        asked = true;
        match nvm_major(wanted) {
            NodeAsk::Major(m) if m == NODE_MAJOR => {
                d.push(format!("node: {NODE_MAJOR} ({from} {:?})", clip(wanted)))
            }
            NodeAsk::Major(_) => {
                return Err(DetectError::NodeVersion {
                    from,
                    wanted: clip(wanted),
                })
            }
            NodeAsk::Newest => d.push(format!(
                "node: {NODE_MAJOR} ({from} {:?}: the image's only Node.js)",
                clip(wanted)
            )),
            NodeAsk::Unknown => d.push(format!(
                "node: {NODE_MAJOR} ({from} {:?} is not a version this reads; ignored)",
                clip(wanted)
            )),
        }
    }
    Ok(asked.then_some(NODE_MAJOR))
}

enum NodeAsk {
    Major(u32),
    /// `node`, `lts/*` and the like: whatever is newest.
    Newest,
    Unknown,
}

/// What an .nvmrc or .node-version line asks for: `20`, `v20.11.1`, `lts/iron`, `lts/*`.
fn nvm_major(line: &str) -> NodeAsk {
    let s = line
        .split('#')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let s = s.strip_prefix('v').unwrap_or(&s);
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    if let Ok(major) = digits.parse() {
        return NodeAsk::Major(major);
    }
    const LTS: &[(&str, u32)] = &[
        ("argon", 4),
        ("boron", 6),
        ("carbon", 8),
        ("dubnium", 10),
        ("erbium", 12),
        ("fermium", 14),
        ("gallium", 16),
        ("hydrogen", 18),
        ("iron", 20),
        ("jod", 22),
        ("krypton", 24),
    ];
    match s {
        "node" | "stable" | "latest" | "current" | "lts" | "lts/*" | "*" => NodeAsk::Newest,
        _ => s
            .strip_prefix("lts/")
            .and_then(|name| LTS.iter().find(|(n, _)| *n == name))
            .map_or(NodeAsk::Unknown, |(_, major)| NodeAsk::Major(*major)),
    }
}
