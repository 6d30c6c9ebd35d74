//! Where a Python project keeps its code, from its own metadata: pyproject.toml (`[project]`
//! name, scripts and entry points, `[tool.setuptools]`, `[tool.poetry]`, `[tool.hatch]`
//! packages) and setup.cfg (`[metadata] name`, `[options] packages` and `package_dir`,
//! `[options.packages.find] where`, `[options.entry_points]`), then packages found by their
//! `__init__.py` at the top and under `src/`.

use std::collections::BTreeMap;

use toml::{Table, Value};

use super::files::{Facts, Kind};
use super::python::is_ident;

/// A package to search for the app: `name` imported with `root` on the path ("" or "src").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Package {
    pub(super) root: String,
    /// Dotted: `myapp`, `myapp.web`.
    pub(super) name: String,
    /// Where it was found, for the plan: "package from pyproject.toml", "package found under
    /// src/", ….
    pub(super) from: &'static str,
}

impl Package {
    /// The package's directory in the repository: `src/myapp`.
    pub(super) fn dir(&self) -> String {
        let path = self.name.replace('.', "/");
        if self.root.is_empty() {
            path
        } else {
            format!("{}/{path}", self.root)
        }
    }
}

/// What the project's metadata and layout say.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// Packages the metadata declares (or names: the project's name, scripts' modules).
    pub(super) packages: Vec<Package>,
    /// Packages found by their `__init__.py`, not declared.
    pub(super) found: Vec<Package>,
    /// Modules that scripts and entry points name (`myapp.server`), each with its source.
    pub(super) entry_modules: Vec<(String, &'static str)>,
    /// What was read, for the error when nothing is found: `pyproject.toml ([project] name
    /// `shop`)`.
    pub(super) looked_at: Vec<String>,
    /// Why the metadata was not read, for the plan.
    pub(super) notes: Vec<String>,
}

/// The import roots tried for a declared name.
const ROOTS: [&str; 2] = ["src", ""];

impl Layout {
    pub(super) fn load(f: &Facts) -> Layout {
        let mut l = Layout::default();
        if let Some(t) = f.read("pyproject.toml") {
            match t.text.parse::<Table>() {
                Ok(table) => l.pyproject(f, &table),
                Err(e) => l.notes.push(format!(
                    "pyproject.toml: not valid TOML ({}); its packages are not read",
                    first_line(&e.to_string())
                )),
            }
        }
        if let Some(t) = f.read("setup.cfg") {
            l.setup_cfg(f, &ini(&t.text));
        }
        l.scan(f);
        l
    }

    /// A declared package, if its directory is there (under one of `roots`).
    fn declare(&mut self, f: &Facts, roots: &[&str], name: &str, from: &'static str) {
        let name = name.trim().trim_end_matches(".*");
        if !name.split('.').all(is_ident) {
            return;
        }
        for root in roots {
            let p = Package {
                root: root.trim_matches('/').to_string(),
                name: name.to_string(),
                from,
            };
            if f.is_dir(&p.dir()) && !self.packages.iter().any(|q| q.dir() == p.dir()) {
                self.packages.push(p);
                return;
            }
        }
    }

    fn entry_module(&mut self, target: &str, from: &'static str) {
        let module = target.split(':').next().unwrap_or("").trim();
        if module.split('.').all(is_ident) && !self.entry_modules.iter().any(|(m, _)| m == module) {
            self.entry_modules.push((module.to_string(), from));
        }
    }

    fn pyproject(&mut self, f: &Facts, doc: &Table) {
        const FROM: &str = "package from pyproject.toml";
        let mut read = Vec::new();
        let project = doc.get("project").and_then(Value::as_table);
        let tool = doc.get("tool").and_then(Value::as_table);
        let setuptools = tool
            .and_then(|t| t.get("setuptools"))
            .and_then(Value::as_table);
        let poetry = tool.and_then(|t| t.get("poetry")).and_then(Value::as_table);
        // Where setuptools looks: `package-dir = {"" = "src"}`, `packages.find.where`.
        let mut roots: Vec<String> = Vec::new();
        if let Some(st) = setuptools {
            if let Some(dir) = st
                .get("package-dir")
                .and_then(|d| d.get(""))
                .and_then(Value::as_str)
            {
                roots.push(dir.into());
            }
            let find = st.get("packages").and_then(|p| p.get("find"));
            roots.extend(strings(find.and_then(|f| f.get("where"))));
        }
        roots.extend(ROOTS.map(String::from));
        let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
        if let Some(st) = setuptools {
            let listed = strings(st.get("packages"));
            if !listed.is_empty() {
                read.push(format!("[tool.setuptools] packages {}", listed.join(", ")));
            }
            for name in listed {
                self.declare(f, &roots, &name, FROM);
            }
        }
        // Poetry: `packages = [{ include = "myapp", from = "src" }]`.
        if let Some(list) = poetry
            .and_then(|p| p.get("packages"))
            .and_then(Value::as_array)
        {
            read.push("[tool.poetry] packages".into());
            for p in list {
                let Some(include) = p.get("include").and_then(Value::as_str) else {
                    continue;
                };
                let from = p.get("from").and_then(Value::as_str).unwrap_or("");
                self.declare(f, &[from], include, FROM);
            }
        }
        // Hatch: `[tool.hatch.build.targets.wheel] packages = ["src/myapp"]`.
        let hatch = tool
            .and_then(|t| t.get("hatch"))
            .and_then(|h| h.get("build"))
            .and_then(|b| b.get("targets"))
            .and_then(|t| t.get("wheel"))
            .and_then(|w| w.get("packages"));
        for path in strings(hatch) {
            read.push(format!("[tool.hatch] package {path}"));
            let path = path.trim_matches('/');
            let (root, name) = path.rsplit_once('/').unwrap_or(("", path));
            self.declare(f, &[root], name, FROM);
        }
        let name = project
            .and_then(|p| p.get("name"))
            .or_else(|| poetry.and_then(|p| p.get("name")))
            .and_then(Value::as_str);
        if let Some(name) = name {
            read.push(format!("[project] name `{}`", super::clip(name)));
            self.declare(f, &roots, &import_name(name), FROM);
        }
        // Scripts and entry points name the modules that start the project.
        let mut targets: Vec<String> = Vec::new();
        if let Some(p) = project {
            targets.extend(table_strings(p.get("scripts")));
            if let Some(groups) = p.get("entry-points").and_then(Value::as_table) {
                groups
                    .values()
                    .for_each(|g| targets.extend(table_strings(Some(g))));
            }
        }
        targets.extend(table_strings(poetry.and_then(|p| p.get("scripts"))));
        if !targets.is_empty() {
            read.push("scripts and entry points".into());
        }
        for t in &targets {
            self.entry_module(t, FROM);
            let top = t.split(['.', ':']).next().unwrap_or("");
            self.declare(f, &roots, top, FROM);
        }
        self.looked_at.push(if read.is_empty() {
            "pyproject.toml".into()
        } else {
            format!("pyproject.toml ({})", read.join(", "))
        });
    }

    fn setup_cfg(&mut self, f: &Facts, cfg: &BTreeMap<String, BTreeMap<String, String>>) {
        const FROM: &str = "package from setup.cfg";
        let mut read = Vec::new();
        let get = |section: &str, key: &str| cfg.get(section).and_then(|s| s.get(key));
        let mut roots: Vec<String> = Vec::new();
        // `package_dir = =src` (the root package's directory).
        if let Some(dirs) = get("options", "package_dir") {
            for line in dirs.lines() {
                if let Some((pkg, dir)) = line.split_once('=') {
                    if pkg.trim().is_empty() {
                        roots.push(dir.trim().to_string());
                    }
                }
            }
        }
        if let Some(w) = get("options.packages.find", "where") {
            roots.push(w.trim().to_string());
        }
        roots.extend(ROOTS.map(String::from));
        let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
        if let Some(packages) = get("options", "packages") {
            read.push("[options] packages".to_string());
            for name in packages.split([',', '\n']) {
                let name = name.trim();
                if !name.starts_with("find") {
                    self.declare(f, &roots, name, FROM);
                }
            }
        }
        if let Some(name) = get("metadata", "name") {
            read.push(format!("[metadata] name `{}`", super::clip(name)));
            self.declare(f, &roots, &import_name(name), FROM);
        }
        if let Some(points) = cfg.get("options.entry_points") {
            read.push("[options.entry_points]".into());
            for line in points.values().flat_map(|v| v.lines()) {
                if let Some((_, target)) = line.split_once('=') {
                    self.entry_module(target, FROM);
                    let top = target.trim().split(['.', ':']).next().unwrap_or("");
                    self.declare(f, &roots, top, FROM);
                }
            }
        }
        self.looked_at.push(if read.is_empty() {
            "setup.cfg".into()
        } else {
            format!("setup.cfg ({})", read.join(", "))
        });
    }

    /// Packages found by their `__init__.py`, under `src/` first, then at the top.
    fn scan(&mut self, f: &Facts) {
        for (root, from) in [
            ("src", "package found under src/"),
            ("", "package found at the top"),
        ] {
            if !f.is_dir(root) {
                continue;
            }
            for (name, kind) in f.list(root) {
                let p = Package {
                    root: root.into(),
                    name,
                    from,
                };
                let skip = kind != Kind::Dir
                    || !is_ident(&p.name)
                    || SKIP_DIRS.contains(&p.name.as_str())
                    || self.packages.iter().any(|q| q.dir() == p.dir());
                if !skip && f.has(&format!("{}/__init__.py", p.dir())) {
                    self.found.push(p);
                }
            }
        }
        let all: Vec<String> = self
            .packages
            .iter()
            .chain(&self.found)
            .map(Package::dir)
            .collect();
        self.looked_at.push(if all.is_empty() {
            "packages (none declared, no */__init__.py or src/*/__init__.py)".into()
        } else {
            format!("the modules of packages {}", all.join(", "))
        });
    }
}

/// Directories that hold no app code.
pub(super) const SKIP_DIRS: &[&str] = &[
    "tests",
    "test",
    "docs",
    "migrations",
    "node_modules",
    "venv",
    "env",
    "site-packages",
    "__pycache__",
    "build",
    "dist",
];

/// A distribution name as a module name: `My-App.web` → `my_app_web`.
fn import_name(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c == '-' || c == '.' {
                '_'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

/// A string or an array of strings.
fn strings(v: Option<&Value>) -> Vec<String> {
    match v {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The string values of a table (`[project.scripts]`).
fn table_strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_table)
        .map(|t| {
            t.values()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

fn first_line(s: &str) -> String {
    super::clip(s.lines().next().unwrap_or(""))
}

/// An INI file as setuptools reads setup.cfg: sections of `key = value`, a value continued
/// on indented lines, `#` and `;` comments.
fn ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut section = String::new();
    let mut key: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with(['#', ';']) {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some(k) = &key {
                let value = out.entry(section.clone()).or_default().entry(k.clone());
                let value = value.or_default();
                if !value.is_empty() {
                    value.push('\n');
                }
                value.push_str(trimmed);
            }
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = name.trim().to_string();
            key = None;
            continue;
        }
        if let Some((k, v)) = trimmed.split_once('=') {
            let k = k.trim().to_string();
            out.entry(section.clone())
                .or_default()
                .insert(k.clone(), v.trim().to_string());
            key = Some(k);
        }
    }
    out
}
