//! Build plans for git-deployed apps (issue #17): from the files of a cloned repository, how to
//! install, build and start it in a VM of the `app` template (Debian trixie: Node.js 20 with
//! npm, Python 3 with venv and pip). Pure: it reads at most 1 MiB of a few files near the top
//! of the repository, never through a symlink, and runs nothing.
//!
//! The rules are one table (`RULES`), tried in order; the first whose condition holds names the
//! framework, the runtime, the build, the start, the output directory and the port. Around it:
//! the package manager (`packageManager` in package.json, else the lockfile), the Node.js
//! version the app asks for (the image has only [`NODE_MAJOR`]), a Procfile `web:` line, and
//! the caller's [`Overrides`], which beat everything. Every choice is one line of
//! [`BuildPlan::decisions`], for the deploy log.
//!
//! By concern: `files` reads the repository (bounded, no symlinks), `node` and `python`
//! read their ecosystems' manifests, `pylayout` reads where a Python project's packages are
//! (pyproject.toml, setup.cfg, `src/`), `pyapp` finds the app object in them, `pystart` and
//! `django` make the Python starts, `semver` checks `engines.node` ranges, `procfile` reads a
//! Procfile, and `commands` turns the rule and the overrides into the build and start commands.

mod commands;
mod django;
mod files;
mod node;
mod procfile;
mod pyapp;
mod pylayout;
mod pystart;
mod python;
mod semver;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use files::Facts;
pub(crate) use node::NPM_CI;
use node::{node_install, PackageJson};
use python::python_install;
use semver::Version;

/// The Node.js major version of the app image (Debian trixie's `nodejs`).
pub const NODE_MAJOR: u32 = 20;
/// The image's full Node.js version, which `engines.node` ranges are checked against.
const NODE_VERSION: Version = Version(20, 19, 2);
/// Where the app image keeps the static file server (`templates/app.toml`).
pub const STATIC_SERVER: &str = "/usr/local/lib/pandastack/static-server.mjs";

/// What the deploy request chose; each one that is set beats what the files say.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// Replaces the build command (run in `/app` after the install).
    pub build_command: Option<String>,
    /// A directory to serve with the static server (relative to the repository).
    pub output_dir: Option<String>,
    /// Replaces the start command; it must serve HTTP on `$PORT`.
    pub start_command: Option<String>,
    /// The port the app listens on (`$PORT`).
    pub port: Option<u16>,
    /// The subdirectory that is the app (the plan is made in it: see [`app_dir`]).
    pub root_dir: Option<String>,
}

/// What serves the app once it is built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServedBy {
    /// A Node.js process.
    Node,
    /// A Python process from the app's `.venv`.
    Python,
    /// The static file server over [`BuildPlan::output_dir`].
    Static,
}

impl ServedBy {
    fn default_port(&self) -> u16 {
        match self {
            ServedBy::Node => 3000,
            ServedBy::Python => 8000,
            ServedBy::Static => 8080,
        }
    }
}

/// How to install, build and start one app. Commands are shell command lines run in `/app`.
#[derive(Debug, Clone, Serialize)]
pub struct BuildPlan {
    /// The rule that matched: "next", "vite", "cra", "node", "static", "flask", "fastapi",
    /// "starlette", "django", "python", "procfile", … ("custom" when only the request said how to start).
    pub framework: String,
    /// What serves the app.
    pub runtime: ServedBy,
    /// "npm", "pnpm", "yarn", "bun" or "pip"; None when nothing is installed.
    pub package_manager: Option<String>,
    /// The Node.js major the app asked for (engines.node, .nvmrc, .node-version), if it asked.
    pub node_major: Option<u32>,
    /// Installs the package manager itself, when it is not npm: `npm install -g pnpm@9`.
    pub setup: Option<String>,
    /// Installs the dependencies: `npm ci` (then `npm install` if it fails),
    /// `pnpm install --frozen-lockfile`,
    /// `python3 -m venv .venv && .venv/bin/pip install -r requirements.txt`.
    pub install: Option<String>,
    /// Builds the app: `npm run build`.
    pub build: Option<String>,
    /// Serves HTTP on `$PORT` (set to [`BuildPlan::port`]) on all interfaces.
    pub start: String,
    /// The port: 3000 for Node.js, 8000 for Python, 8080 for static sites, unless overridden.
    pub port: u16,
    /// The directory the static server serves (`dist`, `build`, `out`, `.`), if it is used.
    pub output_dir: Option<String>,
    /// The subdirectory of the repository that is the app (a monorepo's), if one was asked
    /// for: what goes into the VM's `/app`.
    pub root_dir: Option<String>,
    /// Files whose content keys the dependency cache (present files only).
    pub cache_files: Vec<String>,
    /// What the dependency cache holds: `node_modules` or `.venv`.
    pub cache_dirs: Vec<String>,
    /// One line per decision, for the deploy log.
    pub decisions: Vec<String>,
}

/// Why no plan could be made.
#[derive(Debug, thiserror::Error)]
pub enum DetectError {
    /// The repository path is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// No rule matched and the request did not say how to start the app.
    #[error("nothing says how to build or start this app: looked for {looked_for}; {SET_START}")]
    NothingRecognised { looked_for: String },
    /// package.json does not parse.
    #[error("package.json is not valid JSON: {source}")]
    BadPackageJson {
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    /// package.json is JSON but not an object.
    #[error("package.json is not a JSON object")]
    PackageJsonNotObject,
    /// package.json is over the read limit.
    #[error("package.json is larger than 1 MiB")]
    PackageJsonTooLarge,
    /// The app asks for a Node.js major the image does not have.
    #[error(
        "{from} asks for Node.js {wanted:?}, but the app image has Node.js {major} ({version}): \
         ask for a range that includes {major}, such as \">=18\" or \"20.x\"",
        major = NODE_MAJOR,
        version = NODE_VERSION
    )]
    NodeVersion { from: &'static str, wanted: String },
    /// A Procfile without a `web:` line is the only thing that could start the app.
    #[error("the Procfile has no `web:` line, and nothing else says how to start the app")]
    ProcfileWithoutWeb,
    /// The framework is known but its entry point is not there.
    #[error("{framework} app, but not how to start it: looked at {looked_at}; {advice}")]
    NoEntry {
        framework: &'static str,
        /// The files and metadata read.
        looked_at: String,
        /// The one field to set.
        advice: &'static str,
    },
    /// The framework is known but needs a change to the project to be hosted.
    #[error("{framework} app that cannot be hosted as it is: {advice}")]
    Unsupported {
        framework: &'static str,
        advice: &'static str,
    },
    /// The requested output directory leaves the repository.
    #[error("output_dir {0:?} must be a relative path inside the repository")]
    BadOutputDir(String),
    /// A monorepo's root, whose apps are its workspaces.
    #[error(
        "package.json declares workspaces ({workspaces}) and is no app itself: set the app's \
         `root_dir` (`--root-dir` in the CLI) to the workspace to deploy"
    )]
    Workspaces { workspaces: String },
    /// The requested root directory is not a directory of the repository.
    #[error("root_dir {0:?} is not a directory of the repository (reached without symlinks)")]
    BadRootDir(String),
}

// ---------------------------------------------------------------------------------------------
// The rules

/// One row of the rule table.
struct Rule {
    name: &'static str,
    runtime: ServedBy,
    when: When,
    build: Build,
    start: Start,
    /// What the static server serves (static rules).
    output_dir: Option<&'static str>,
    port: u16,
    /// Why the start listens where it must, for the deploy log.
    note: &'static str,
}

/// A condition on the repository's files.
enum When {
    /// `dependencies` or `devDependencies` in package.json names this package.
    Dep(&'static str),
    /// package.json has this script.
    Script(&'static str),
    /// package.json's `start` script runs this command.
    StartRuns(&'static str),
    /// package.json has a `main`.
    Main,
    /// This file is in the repository.
    File(&'static str),
    /// One of these files contains the text (compared without spaces and quotes).
    FileContains(&'static [&'static str], &'static str),
    /// requirements.txt or pyproject.toml names this Python package.
    Requirement(&'static str),
    /// requirements.txt or pyproject.toml is there.
    PythonProject,
    All(&'static [When]),
    Any(&'static [When]),
    Not(&'static When),
}

/// The build of a rule.
enum Build {
    None,
    /// `<pm> run build` for a `build` script, else this binary through the package manager's
    /// exec (`npx vite build`), if any.
    Script(Option<&'static str>),
}

/// The start of a rule.
enum Start {
    /// The static server over the output directory.
    Static,
    /// A package's binary through the package manager's exec: `npx next start -p $PORT`.
    Exec(&'static str),
    /// A command as it stands.
    Shell(&'static str),
    /// `<pm> start` for a `start` script, else `node` on `main`, server.js or index.js.
    Node,
    Flask,
    /// uvicorn on a FastAPI or Starlette app.
    FastApi,
    Django,
    /// `.venv/bin/python` on main.py, app.py or server.py.
    Python,
    /// The Procfile's `web:` line.
    Procfile,
    /// Refused, with advice.
    Refuse(&'static str),
}

const NEXT_CONFIGS: &[&str] = &[
    "next.config.js",
    "next.config.mjs",
    "next.config.ts",
    "next.config.cjs",
];
const ALL_INTERFACES: &str = "the app must read $PORT and listen on all interfaces";
const STATIC_NOTE: &str = "the static server reads $PORT and listens on all interfaces";
const GUNICORN_NOTE: &str = "gunicorn binds 0.0.0.0:$PORT";
/// The one field that decides when detection cannot.
const SET_START: &str = "set the app's `start.command` (`--start-command` in the CLI) to a \
     command that serves HTTP on $PORT";

/// The rules, tried in order; the first whose condition holds wins.
const RULES: &[Rule] = &[
    Rule {
        name: "next-static",
        runtime: ServedBy::Static,
        when: When::All(&[
            When::Dep("next"),
            When::FileContains(NEXT_CONFIGS, "output:export"),
        ]),
        build: Build::Script(Some("next build")),
        start: Start::Static,
        output_dir: Some("out"),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "next",
        runtime: ServedBy::Node,
        when: When::Dep("next"),
        build: Build::Script(Some("next build")),
        start: Start::Exec("next start -p $PORT"),
        output_dir: None,
        port: 3000,
        note: "next start listens on all interfaces",
    },
    Rule {
        name: "nuxt",
        runtime: ServedBy::Node,
        when: When::Dep("nuxt"),
        build: Build::Script(Some("nuxt build")),
        start: Start::Shell("node .output/server/index.mjs"),
        output_dir: None,
        port: 3000,
        note: "Nitro reads $PORT and listens on all interfaces",
    },
    Rule {
        name: "sveltekit",
        runtime: ServedBy::Node,
        when: When::All(&[
            When::Dep("@sveltejs/kit"),
            When::Dep("@sveltejs/adapter-node"),
        ]),
        build: Build::Script(Some("vite build")),
        start: Start::Shell("node build"),
        output_dir: None,
        port: 3000,
        note: "adapter-node reads $PORT and listens on 0.0.0.0",
    },
    Rule {
        name: "sveltekit-static",
        runtime: ServedBy::Static,
        when: When::All(&[
            When::Dep("@sveltejs/kit"),
            When::Dep("@sveltejs/adapter-static"),
        ]),
        build: Build::Script(Some("vite build")),
        start: Start::Static,
        output_dir: Some("build"),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "sveltekit",
        runtime: ServedBy::Node,
        when: When::Dep("@sveltejs/kit"),
        build: Build::None,
        start: Start::Refuse(
            "use @sveltejs/adapter-node (a server) or @sveltejs/adapter-static (a static site)",
        ),
        output_dir: None,
        port: 3000,
        note: "",
    },
    Rule {
        name: "remix",
        runtime: ServedBy::Node,
        when: When::Any(&[
            When::Dep("@remix-run/serve"),
            When::Dep("@react-router/serve"),
        ]),
        build: Build::Script(None),
        start: Start::Node,
        output_dir: None,
        port: 3000,
        note: "remix-serve and react-router-serve read $PORT and listen on all interfaces",
    },
    Rule {
        name: "astro-node",
        runtime: ServedBy::Node,
        when: When::All(&[When::Dep("astro"), When::Dep("@astrojs/node")]),
        build: Build::Script(Some("astro build")),
        start: Start::Shell("HOST=0.0.0.0 node dist/server/entry.mjs"),
        output_dir: None,
        port: 3000,
        note: "the standalone server reads $PORT, and HOST=0.0.0.0 opens it to all interfaces",
    },
    Rule {
        name: "astro",
        runtime: ServedBy::Static,
        when: When::Dep("astro"),
        build: Build::Script(Some("astro build")),
        start: Start::Static,
        output_dir: Some("dist"),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "vite",
        runtime: ServedBy::Static,
        // A `start` script other than `vite …` means the project has its own server.
        when: When::All(&[
            When::Dep("vite"),
            When::Any(&[When::Not(&When::Script("start")), When::StartRuns("vite")]),
        ]),
        build: Build::Script(Some("vite build")),
        start: Start::Static,
        output_dir: Some("dist"),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "cra",
        runtime: ServedBy::Static,
        when: When::Dep("react-scripts"),
        build: Build::Script(Some("react-scripts build")),
        start: Start::Static,
        output_dir: Some("build"),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "node",
        runtime: ServedBy::Node,
        when: When::All(&[
            When::File("package.json"),
            When::Any(&[
                When::Script("start"),
                When::Main,
                When::File("server.js"),
                When::File("index.js"),
            ]),
        ]),
        build: Build::Script(None),
        start: Start::Node,
        output_dir: None,
        port: 3000,
        note: ALL_INTERFACES,
    },
    Rule {
        name: "django",
        runtime: ServedBy::Python,
        when: When::Requirement("django"),
        build: Build::None,
        start: Start::Django,
        output_dir: None,
        port: 8000,
        note: "",
    },
    Rule {
        name: "fastapi",
        runtime: ServedBy::Python,
        when: When::Requirement("fastapi"),
        build: Build::None,
        start: Start::FastApi,
        output_dir: None,
        port: 8000,
        note: "uvicorn binds 0.0.0.0:$PORT",
    },
    Rule {
        name: "starlette",
        runtime: ServedBy::Python,
        when: When::Requirement("starlette"),
        build: Build::None,
        start: Start::FastApi,
        output_dir: None,
        port: 8000,
        note: "uvicorn binds 0.0.0.0:$PORT",
    },
    Rule {
        name: "flask",
        runtime: ServedBy::Python,
        when: When::Requirement("flask"),
        build: Build::None,
        start: Start::Flask,
        output_dir: None,
        port: 8000,
        note: "",
    },
    Rule {
        name: "python",
        runtime: ServedBy::Python,
        when: When::All(&[
            When::PythonProject,
            When::Any(&[
                When::File("main.py"),
                When::File("app.py"),
                When::File("server.py"),
            ]),
        ]),
        build: Build::None,
        start: Start::Python,
        output_dir: None,
        port: 8000,
        note: ALL_INTERFACES,
    },
    Rule {
        name: "static",
        runtime: ServedBy::Static,
        when: When::File("index.html"),
        build: Build::Script(None),
        start: Start::Static,
        output_dir: Some("."),
        port: 8080,
        note: STATIC_NOTE,
    },
    Rule {
        name: "procfile",
        runtime: ServedBy::Node,
        when: When::File("Procfile"),
        build: Build::Script(None),
        start: Start::Procfile,
        output_dir: None,
        port: 3000,
        note: "",
    },
];

/// The rule when none matched but the request says how to start the app.
const CUSTOM: Rule = Rule {
    name: "custom",
    runtime: ServedBy::Node,
    when: When::All(&[]),
    build: Build::Script(None),
    start: Start::Procfile,
    output_dir: None,
    port: 3000,
    note: "",
};

impl Rule {
    /// Whether the runtime follows the repository's files rather than the rule.
    fn flexible(&self) -> bool {
        matches!(self.start, Start::Procfile)
    }
}

impl When {
    /// Why the condition holds, or None if it does not.
    fn check(&self, f: &Facts) -> Option<String> {
        match self {
            When::Dep(name) => f
                .pkg()?
                .has_dep(name)
                .then(|| format!("dependency `{name}`")),
            When::Script(name) => f.pkg()?.script(name).map(|_| format!("script `{name}`")),
            When::StartRuns(cmd) => {
                let start = f.pkg()?.script("start")?;
                (start.split_whitespace().next() == Some(*cmd))
                    .then(|| format!("`start` script runs {cmd}"))
            }
            When::Main => f.pkg()?.main().map(|m| format!("main {:?}", clip(m))),
            When::File(name) => f.has(name).then(|| format!("file {name}")),
            When::FileContains(files, text) => files.iter().find_map(|file| {
                let t = f.read(file)?;
                squeeze(&t.text)
                    .contains(text)
                    .then(|| format!("{text} in {file}"))
            }),
            When::Requirement(name) => {
                let py = f.python.as_ref()?;
                py.names
                    .contains(*name)
                    .then(|| format!("requirement `{name}` in {}", py.file))
            }
            When::PythonProject => f.python.as_ref().map(|py| py.file.to_string()),
            When::All(all) => {
                let why: Option<Vec<String>> = all.iter().map(|w| w.check(f)).collect();
                Some(why?.join(" and "))
            }
            When::Any(any) => any.iter().find_map(|w| w.check(f)),
            When::Not(w) => match w.check(f) {
                Some(_) => None,
                None => Some(format!("no {}", w.describe())),
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            When::Dep(name) => format!("dependency `{name}`"),
            When::Script(name) => format!("script `{name}`"),
            When::StartRuns(cmd) => format!("`start` script running {cmd}"),
            When::Main => "main".into(),
            When::File(name) => format!("file {name}"),
            When::FileContains(files, text) => format!("{text} in {}", files.join(" or ")),
            When::Requirement(name) => format!("requirement `{name}`"),
            When::PythonProject => "requirements.txt or pyproject.toml".into(),
            When::All(all) => all
                .iter()
                .map(When::describe)
                .collect::<Vec<_>>()
                .join(" and "),
            When::Any(any) => any
                .iter()
                .map(When::describe)
                .collect::<Vec<_>>()
                .join(" or "),
            When::Not(w) => format!("no {}", w.describe()),
        }
    }

    /// The package names the condition asks for (not under `Not`).
    fn names(&self, deps: &mut Vec<&'static str>, reqs: &mut Vec<&'static str>) {
        match self {
            When::Dep(name) => deps.push(name),
            When::Requirement(name) => reqs.push(name),
            When::All(ws) | When::Any(ws) => ws.iter().for_each(|w| w.names(deps, reqs)),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Planning

/// Works out how to install, build and start the repository checked out at `root`.
pub fn plan(root: &Path, o: &Overrides) -> Result<BuildPlan, DetectError> {
    let f = Facts::load(root)?;
    let (rule, why) = match RULES
        .iter()
        .find_map(|r| r.when.check(&f).map(|why| (r, why)))
    {
        Some(found) => found,
        None if o.start_command.is_some() || o.output_dir.is_some() => (
            &CUSTOM,
            "no rule matched; the request says how to start".into(),
        ),
        None => return Err(nothing_found(&f)),
    };
    let mut plan = BuildPlan {
        framework: rule.name.into(),
        runtime: rule.runtime.clone(),
        package_manager: None,
        node_major: None,
        setup: None,
        install: None,
        build: None,
        start: String::new(),
        port: rule.port,
        output_dir: None,
        root_dir: o.root_dir.clone(),
        cache_files: Vec::new(),
        cache_dirs: Vec::new(),
        decisions: Vec::new(),
    };
    if let Some(dir) = &o.root_dir {
        plan.decisions
            .push(format!("root_dir: {dir} (from the request)"));
    }
    plan.decisions.extend(f.notes.iter().cloned());
    plan.decisions
        .push(format!("framework: {} ({why})", rule.name));

    let eco = ecosystem(&f, rule);
    let pm = match (&eco, f.pkg(), &f.python) {
        (Some(ServedBy::Node), Some(pkg), _) => Some(node_install(&f, pkg, &mut plan)?),
        (Some(ServedBy::Python), _, Some(py)) => {
            python_install(py, rule, &mut plan);
            None
        }
        _ => None,
    };
    plan.build = commands::build(o, rule, f.pkg(), pm.as_ref(), &mut plan.decisions);
    commands::start(&f, o, rule, pm.as_ref(), eco, &mut plan)?;
    plan.port = match o.port {
        Some(port) => {
            plan.decisions
                .push(format!("port: {port} (override from the request)"));
            port
        }
        None if plan.runtime == rule.runtime => rule.port,
        None => plan.runtime.default_port(),
    };
    Ok(plan)
}

/// The directory of the app in the repository checked out at `repo`: `root_dir` below it,
/// a directory reached through directories only (no symlinks, no `..`).
pub fn app_dir(repo: &Path, root_dir: Option<&str>) -> Result<PathBuf, DetectError> {
    match root_dir {
        None => Ok(repo.to_path_buf()),
        Some(dir) => files::within_dir(repo, dir.trim_end_matches('/'))
            .ok_or_else(|| DetectError::BadRootDir(clip(dir))),
    }
}

/// Whose dependencies are installed: Node's when there is a package.json (unless the rule is a
/// Python one), Python's for Python rules, either for a Procfile.
fn ecosystem(f: &Facts, rule: &Rule) -> Option<ServedBy> {
    match rule.runtime {
        ServedBy::Python => Some(ServedBy::Python),
        _ if f.package.is_some() => Some(ServedBy::Node),
        _ if rule.flexible() && f.python.is_some() => Some(ServedBy::Python),
        _ => None,
    }
}

fn nothing_found(f: &Facts) -> DetectError {
    let workspaces = f.pkg().map(PackageJson::workspaces).unwrap_or_default();
    if !workspaces.is_empty() {
        let list: Vec<String> = workspaces.iter().take(10).map(|w| clip(w)).collect();
        return DetectError::Workspaces {
            workspaces: list.join(", "),
        };
    }
    let (mut deps, mut reqs) = (Vec::new(), Vec::new());
    RULES
        .iter()
        .for_each(|r| r.when.names(&mut deps, &mut reqs));
    let mut seen = BTreeSet::new();
    deps.retain(|d| seen.insert(*d));
    let procfile = "or a Procfile with a `web:` line";
    let looked_for = if f.package.is_some() {
        format!(
            "a dependency on {} in package.json, a `start` script, `main`, server.js or \
             index.js, {procfile}",
            deps.join(", ")
        )
    } else if let Some(py) = &f.python {
        format!(
            "a requirement on {} in {}, main.py, app.py or server.py, {procfile}",
            reqs.join(", "),
            py.file
        )
    } else {
        "package.json, requirements.txt, pyproject.toml, index.html or a Procfile".into()
    };
    DetectError::NothingRecognised { looked_for }
}

// ---------------------------------------------------------------------------------------------
// Text for messages and commands

/// Text without whitespace and quotes, for loose matching.
fn squeeze(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && !matches!(c, '\'' | '"' | '`'))
        .collect()
}

/// At most 100 characters of a value from the repository, for messages.
fn clip(s: &str) -> String {
    s.chars().take(100).collect()
}

/// A word for `sh`: as it is when it is plain, else single-quoted.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}
