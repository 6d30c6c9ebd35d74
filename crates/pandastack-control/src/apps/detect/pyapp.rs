//! The app object in a Python project's packages: `X = Flask(`, `X = FastAPI(`,
//! `X = Starlette(` at a module's top level, or Flask's factory `def create_app(`; searched in
//! the modules that scripts and entry points name, then in each package's `__init__.py` and
//! its submodules (at most [`MAX_DEPTH`] levels and [`MAX_MODULES`] modules in all).

use std::collections::VecDeque;

use super::files::{Facts, Kind};
use super::pylayout::{Package, SKIP_DIRS};

/// How deep below a package's directory modules are searched.
const MAX_DEPTH: usize = 3;
/// The most modules read in one search.
pub(super) const MAX_MODULES: usize = 200;

/// Module names tried first in each package directory, after `__init__.py`.
const FIRST: &[&str] = &[
    "app.py",
    "main.py",
    "wsgi.py",
    "asgi.py",
    "server.py",
    "api.py",
    "application.py",
];

/// What to look for.
pub(super) struct Wanted {
    /// Constructors, `Flask(`.
    pub(super) ctors: &'static [&'static str],
    /// Also a factory `def create_app(` (Flask).
    pub(super) factory: bool,
}

/// An app object found in a module.
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The file: `src/myapp/__init__.py`.
    pub(super) file: String,
    /// The import root ("" or `src`).
    pub(super) root: String,
    /// Dotted module: `myapp`, `myapp.api.main`.
    pub(super) module: String,
    /// `app`, or `create_app()` for a factory.
    pub(super) object: String,
    /// Where the package came from: "package from pyproject.toml", … ("" for a usual file at
    /// the top).
    pub(super) from: &'static str,
}

/// The first app object in `entry_modules` (named by scripts and entry points), then in
/// `packages`; `budget` is how many more modules may be read.
pub(super) fn search(
    f: &Facts,
    entry_modules: &[(String, &'static str)],
    packages: &[Package],
    wanted: &Wanted,
    budget: &mut usize,
) -> Option<Found> {
    for (module, from) in entry_modules {
        for root in ["src", ""] {
            let path = module.replace('.', "/");
            let path = if root.is_empty() {
                path
            } else {
                format!("{root}/{path}")
            };
            for file in [format!("{path}.py"), format!("{path}/__init__.py")] {
                if *budget == 0 {
                    return None;
                }
                if let Some(found) = check(f, &file, root, wanted, from, budget) {
                    return Some(found);
                }
            }
        }
    }
    packages
        .iter()
        .find_map(|p| search_package(f, p, wanted, budget))
}

/// A package's `__init__.py` and its submodules, breadth first.
fn search_package(f: &Facts, p: &Package, wanted: &Wanted, budget: &mut usize) -> Option<Found> {
    let mut dirs = VecDeque::from([(p.dir(), 0)]);
    while let Some((dir, depth)) = dirs.pop_front() {
        let entries = f.list(&dir);
        let mut files: Vec<&str> = entries
            .iter()
            .filter(|(n, k)| *k == Kind::File && n.ends_with(".py"))
            .map(|(n, _)| n.as_str())
            .collect();
        files.sort_by_key(|n| {
            let rank = match *n {
                "__init__.py" => 0,
                n => 1 + FIRST.iter().position(|x| *x == n).unwrap_or(FIRST.len()),
            };
            (rank, *n)
        });
        for name in files {
            if *budget == 0 {
                return None;
            }
            let file = format!("{dir}/{name}");
            if let Some(found) = check(f, &file, &p.root, wanted, p.from, budget) {
                return Some(found);
            }
        }
        if depth < MAX_DEPTH {
            for (name, kind) in &entries {
                if *kind == Kind::Dir && !SKIP_DIRS.contains(&name.as_str()) {
                    dirs.push_back((format!("{dir}/{name}"), depth + 1));
                }
            }
        }
    }
    None
}

/// The app object in `file`, if it is there and has one.
fn check(
    f: &Facts,
    file: &str,
    root: &str,
    wanted: &Wanted,
    from: &'static str,
    budget: &mut usize,
) -> Option<Found> {
    let text = f.read(file)?.text;
    *budget -= 1;
    let object = wanted
        .ctors
        .iter()
        .find_map(|ctor| top_level_name(&text, ctor))
        .or_else(|| (wanted.factory && has_factory(&text)).then(|| "create_app()".into()))?;
    Some(Found {
        file: file.to_string(),
        root: root.to_string(),
        module: module_of(file, root)?,
        object,
        from,
    })
}

/// `src/myapp/api/main.py` under `src` → `myapp.api.main`; `myapp/__init__.py` → `myapp`.
fn module_of(file: &str, root: &str) -> Option<String> {
    let rel = if root.is_empty() {
        file
    } else {
        file.strip_prefix(root)?.strip_prefix('/')?
    };
    let rel = rel.strip_suffix(".py")?;
    let rel = rel.strip_suffix("/__init__").unwrap_or(rel);
    let module = rel.replace('/', ".");
    module
        .split('.')
        .all(super::python::is_ident)
        .then_some(module)
}

/// A top-level `def create_app(`.
fn has_factory(text: &str) -> bool {
    text.lines().any(|l| l.starts_with("def create_app("))
}

/// `app = Flask(__name__)` at a module's top level → `app` (also `app: Flask = Flask(…)`).
pub(super) fn top_level_name(text: &str, ctor: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with([' ', '\t']))
        .find_map(|line| assigned(line, ctor))
}

/// The name a line binds to `ctor(…)`.
pub(super) fn assigned(line: &str, ctor: &str) -> Option<String> {
    let (before, _) = line.split_once(ctor)?;
    let before = before.trim_end().strip_suffix('=')?;
    let name = before.split(':').next()?.trim();
    super::python::is_ident(name).then(|| name.to_string())
}
