//! Python projects: requirements.txt or pyproject.toml and the virtual environment they are
//! installed into. Where the code is: `pylayout`; the app object: `pyapp`; the start:
//! `pystart` and `django`.

use std::collections::BTreeSet;

use super::files::Facts;
use super::{quote, BuildPlan, Rule, Start};

/// A virtual environment in `.venv` with the requirements (and uvicorn for FastAPI).
pub(super) fn python_install(py: &Python, rule: &Rule, plan: &mut BuildPlan) {
    let mut extra = Vec::new();
    if matches!(rule.start, Start::FastApi) && !py.names.contains("uvicorn") {
        extra.push("uvicorn");
        plan.decisions
            .push("install: adding uvicorn (not a requirement; it serves FastAPI)".into());
    }
    let install = py.install(&extra);
    plan.decisions.push(format!("install: `{install}`"));
    plan.package_manager = Some("pip".into());
    plan.install = Some(install);
    plan.cache_files = vec![py.file.into()];
    plan.cache_dirs = vec![".venv".into()];
}

/// A Python project: where its requirements come from and the names they list.
pub(super) struct Python {
    /// requirements.txt or pyproject.toml.
    pub(super) file: &'static str,
    /// Normalised names (PEP 503) from requirements.txt and pyproject.toml.
    pub(super) names: BTreeSet<String>,
    install: PyInstall,
}

enum PyInstall {
    /// `pip install -r requirements.txt`.
    Requirements,
    /// `pip install -e .`: pyproject.toml with a `[build-system]`.
    Project,
    /// `pip install <these>`: `[project].dependencies` of a pyproject.toml without one.
    Deps(Vec<String>),
}

impl Python {
    pub(super) fn load(f: &Facts) -> Option<Python> {
        let requirements = f.read("requirements.txt");
        let pyproject = f.read("pyproject.toml").map(|t| pyproject(&t.text));
        let mut names: BTreeSet<String> = requirements
            .iter()
            .flat_map(|t| t.text.lines())
            .filter_map(|line| requirement_name(line.split(" #").next().unwrap_or("")))
            .collect();
        if let Some(p) = &pyproject {
            names.extend(p.names.iter().cloned());
        }
        match (requirements, pyproject) {
            (Some(_), _) => Some(Python {
                file: "requirements.txt",
                names,
                install: PyInstall::Requirements,
            }),
            (None, Some(p)) => Some(Python {
                file: "pyproject.toml",
                names,
                install: if p.build_system {
                    PyInstall::Project
                } else {
                    PyInstall::Deps(p.deps)
                },
            }),
            (None, None) => None,
        }
    }

    fn install(&self, extra: &[&str]) -> String {
        let mut cmd = "python3 -m venv .venv".to_string();
        match &self.install {
            PyInstall::Requirements => cmd += " && .venv/bin/pip install -r requirements.txt",
            PyInstall::Project => cmd += " && .venv/bin/pip install -e .",
            PyInstall::Deps(deps) if !deps.is_empty() => {
                let deps: Vec<String> = deps.iter().map(|d| quote(d)).collect();
                cmd += &format!(" && .venv/bin/pip install {}", deps.join(" "));
            }
            PyInstall::Deps(_) => {}
        }
        if !extra.is_empty() {
            cmd += &format!(" && .venv/bin/pip install {}", extra.join(" "));
        }
        cmd
    }
}

/// The normalised name of a requirement line (`Flask_Login[extra]>=1 ; …` → `flask-login`).
fn requirement_name(spec: &str) -> Option<String> {
    let spec = spec.trim();
    if spec.starts_with(['-', '#']) {
        return None;
    }
    let end = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(spec.len());
    let mut name = String::new();
    for c in spec[..end].chars() {
        let c = if matches!(c, '_' | '.') { '-' } else { c };
        if !(c == '-' && name.ends_with('-')) {
            name.push(c.to_ascii_lowercase());
        }
    }
    (!name.is_empty()).then_some(name)
}

/// What a pyproject.toml says, read line by line (enough for the common layouts).
struct Pyproject {
    build_system: bool,
    /// `[project].dependencies`, as written.
    deps: Vec<String>,
    /// Normalised names of those and of `[tool.poetry.dependencies]`.
    names: Vec<String>,
}

fn pyproject(text: &str) -> Pyproject {
    let mut p = Pyproject {
        build_system: false,
        deps: Vec::new(),
        names: Vec::new(),
    };
    let mut table = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.trim_matches(['[', ']']).trim().to_string();
            p.build_system |= table == "build-system";
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches(['"', '\'']);
        match table.as_str() {
            "project" if key == "dependencies" && value.trim_start().starts_with('[') => {
                p.deps = toml_strings(value, &mut lines);
                p.deps.retain(|d| !d.starts_with('-'));
                let names = p.deps.iter().filter_map(|d| requirement_name(d));
                p.names.extend(names);
            }
            "tool.poetry.dependencies" if key != "python" => {
                p.names.extend(requirement_name(key));
            }
            _ => {}
        }
    }
    p
}

/// The strings of a TOML array starting in `first`, read on over `more` to its `]`.
fn toml_strings<'t>(first: &'t str, more: &mut impl Iterator<Item = &'t str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = Some(first);
    while let Some(l) = line {
        let mut quote: Option<char> = None;
        let mut current = String::new();
        for c in l.chars() {
            match quote {
                Some(q) if c == q => {
                    out.push(std::mem::take(&mut current));
                    quote = None;
                }
                Some(_) => current.push(c),
                None if c == '"' || c == '\'' => quote = Some(c),
                None if c == '#' => break,
                None if c == ']' => return out,
                None => {}
            }
        }
        line = more.next();
    }
    out
}

/// A Python identifier (ASCII): a module or object name safe in a command.
pub(super) fn is_ident(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
