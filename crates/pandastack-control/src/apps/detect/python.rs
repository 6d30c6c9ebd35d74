//! Python projects: requirements.txt or pyproject.toml, the virtual environment they are
//! installed into, and the module that defines the app (Flask, FastAPI, Django, plain Python).

use std::collections::BTreeSet;

use super::files::Facts;
use super::{quote, BuildPlan, DetectError, Rule, Start, GUNICORN_NOTE};

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

/// Where a module defines its app: (module for `module:object`, object).
struct PyApp {
    file: &'static str,
    module: &'static str,
    object: String,
}

/// The first of `files` present, and the name bound to `ctor(` in it (else `fallback`).
fn find_app(
    f: &Facts,
    files: &[(&'static str, &'static str)],
    ctor: &str,
    factory: bool,
) -> Option<PyApp> {
    let (file, module) = files.iter().copied().find(|(file, _)| f.has(file))?;
    let text = f.read(file).map(|t| t.text).unwrap_or_default();
    let object = assigned_name(&text, ctor)
        .or_else(|| (factory && text.contains("def create_app(")).then(|| "create_app()".into()))
        .unwrap_or_else(|| "app".into());
    Some(PyApp {
        file,
        module,
        object,
    })
}

/// `app = Flask(__name__)` → `app` (also `app: Flask = Flask(…)`).
fn assigned_name(text: &str, ctor: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (before, _) = line.split_once(ctor)?;
        let before = before.trim_end().strip_suffix('=')?;
        let name = before.split(':').next()?.trim();
        let ident = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        ident.then(|| name.to_string())
    })
}

const FLASK_FILES: &[(&str, &str)] = &[
    ("app.py", "app"),
    ("main.py", "main"),
    ("wsgi.py", "wsgi"),
    ("application.py", "application"),
    ("server.py", "server"),
    ("app/__init__.py", "app"),
];

pub(super) fn flask_start(f: &Facts) -> Result<(String, String), DetectError> {
    let app = find_app(f, FLASK_FILES, "Flask(", true).ok_or(DetectError::NoEntry {
        framework: "flask",
        looked_for: "app.py, main.py, wsgi.py, application.py, server.py or app/__init__.py",
    })?;
    if f.requires("gunicorn") {
        let target = quote(&format!("{}:{}", app.module, app.object));
        let why = format!("{}; {GUNICORN_NOTE}", app.file);
        Ok((
            format!(".venv/bin/gunicorn --bind 0.0.0.0:$PORT {target}"),
            why,
        ))
    } else {
        let cmd = format!(
            ".venv/bin/python -m flask --app {} run --host 0.0.0.0 --port $PORT",
            app.module
        );
        let why = format!(
            "{}; Flask's development server: add gunicorn to the requirements for production",
            app.file
        );
        Ok((cmd, why))
    }
}

const FASTAPI_FILES: &[(&str, &str)] = &[
    ("main.py", "main"),
    ("app.py", "app"),
    ("app/main.py", "app.main"),
    ("api.py", "api"),
    ("server.py", "server"),
];

pub(super) fn fastapi_start(f: &Facts) -> Result<(String, String), DetectError> {
    let app = find_app(f, FASTAPI_FILES, "FastAPI(", false).ok_or(DetectError::NoEntry {
        framework: "fastapi",
        looked_for: "main.py, app.py, app/main.py, api.py or server.py",
    })?;
    let cmd = format!(
        ".venv/bin/uvicorn {}:{} --host 0.0.0.0 --port $PORT",
        app.module, app.object
    );
    Ok((cmd, app.file.into()))
}

pub(super) fn django_start(f: &Facts) -> Result<(String, String), DetectError> {
    let manage = f.read("manage.py").map(|t| t.text);
    let project = manage.as_deref().and_then(settings_package);
    let wsgi = project.filter(|p| f.has(&format!("{p}/wsgi.py")));
    match (wsgi, &manage) {
        (Some(project), _) if f.requires("gunicorn") => Ok((
            format!(".venv/bin/gunicorn --bind 0.0.0.0:$PORT {project}.wsgi"),
            format!("{project}/wsgi.py; {GUNICORN_NOTE}"),
        )),
        (_, Some(_)) => Ok((
            ".venv/bin/python manage.py runserver 0.0.0.0:$PORT".into(),
            "Django's development server: add gunicorn to the requirements for production".into(),
        )),
        (_, None) => Err(DetectError::NoEntry {
            framework: "django",
            looked_for: "manage.py",
        }),
    }
}

/// The project package in manage.py's `DJANGO_SETTINGS_MODULE`, `"mysite.settings"` → `mysite`.
fn settings_package(manage: &str) -> Option<String> {
    let line = manage
        .lines()
        .find(|l| l.contains("DJANGO_SETTINGS_MODULE"))?;
    let (_, after) = line.split_once("DJANGO_SETTINGS_MODULE")?;
    let after = after.trim_start_matches(['"', '\'']);
    let start = after.find(['"', '\''])?;
    let value = &after[start + 1..];
    let value = &value[..value.find(['"', '\''])?];
    let package = value.split('.').next()?;
    let ident = !package.is_empty()
        && !package.starts_with(|c: char| c.is_ascii_digit())
        && package
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then(|| package.to_string())
}

pub(super) fn python_start(f: &Facts) -> Result<(String, String), DetectError> {
    ["main.py", "app.py", "server.py"]
        .into_iter()
        .find(|file| f.has(file))
        .map(|file| (format!(".venv/bin/python {file}"), format!("file {file}")))
        .ok_or(DetectError::NoEntry {
            framework: "python",
            looked_for: "main.py, app.py or server.py",
        })
}
