//! How a Django project starts: its `manage.py` (at the top, else the shallowest within
//! [`MAX_DEPTH`] directories), the settings module manage.py names
//! (`DJANGO_SETTINGS_MODULE`), and the WSGI (or ASGI) module the settings name
//! (`WSGI_APPLICATION`, `ASGI_APPLICATION`) or that sits beside them (`wsgi.py`, `asgi.py`).

use std::collections::VecDeque;

use super::files::{Facts, Kind};
use super::pylayout::SKIP_DIRS;
use super::python::is_ident;
use super::{quote, DetectError, GUNICORN_NOTE, SET_START};

/// How deep manage.py is looked for.
const MAX_DEPTH: usize = 3;
/// The most directories listed looking for it.
const MAX_DIRS: usize = 64;

/// A project: where manage.py is and what it names.
struct Project {
    /// The directory of manage.py ("" for the top).
    dir: String,
    /// `mysite.settings`, if manage.py names it.
    settings: Option<String>,
}

impl Project {
    /// `dir/rel`, or `rel` at the top.
    fn path(&self, rel: &str) -> String {
        if self.dir.is_empty() {
            rel.to_string()
        } else {
            format!("{}/{rel}", self.dir)
        }
    }
}

/// A server module: `mysite.wsgi` and its callable, and why.
struct Server {
    module: String,
    object: String,
    why: String,
}

pub(super) fn django_start(f: &Facts) -> Result<(String, String), DetectError> {
    let Some(manage) = find_manage(f) else {
        return Err(DetectError::NoEntry {
            framework: "django",
            looked_at: format!(
                "manage.py at the top and {MAX_DEPTH} directories down (not in {})",
                SKIP_DIRS.join(", ")
            ),
            advice: SET_START,
        });
    };
    let text = f.read(&manage.path("manage.py")).map(|t| t.text);
    let project = Project {
        settings: text.as_deref().and_then(settings_module),
        dir: manage.dir,
    };
    let manage_py = project.path("manage.py");
    let settings = project.settings.as_deref().unwrap_or("(not named)");
    let chdir = match project.dir.as_str() {
        "" => String::new(),
        dir => format!(" --chdir {}", quote(dir)),
    };
    if f.requires("gunicorn") {
        if let Some(s) = server(f, &project, "WSGI_APPLICATION", "wsgi") {
            let target = if s.object == "application" {
                s.module
            } else {
                format!("{}:{}", s.module, s.object)
            };
            return Ok((
                format!(
                    ".venv/bin/gunicorn --bind 0.0.0.0:$PORT{chdir} {}",
                    quote(&target)
                ),
                format!(
                    "{manage_py}, settings {settings}, {}; {GUNICORN_NOTE}",
                    s.why
                ),
            ));
        }
    }
    if f.requires("uvicorn") {
        if let Some(s) = server(f, &project, "ASGI_APPLICATION", "asgi") {
            let dir = match project.dir.as_str() {
                "" => String::new(),
                dir => format!(" --app-dir {}", quote(dir)),
            };
            return Ok((
                format!(
                    ".venv/bin/uvicorn {}:{} --host 0.0.0.0 --port $PORT{dir}",
                    s.module, s.object
                ),
                format!(
                    "{manage_py}, settings {settings}, {}; uvicorn binds 0.0.0.0:$PORT",
                    s.why
                ),
            ));
        }
    }
    Ok((
        format!(
            ".venv/bin/python {} runserver 0.0.0.0:$PORT",
            quote(&manage_py)
        ),
        format!(
            "{manage_py}; Django's development server: add gunicorn to the requirements for \
             production"
        ),
    ))
}

/// manage.py at the top, else the shallowest one (breadth first, names in order).
fn find_manage(f: &Facts) -> Option<Project> {
    let mut dirs = VecDeque::from([(String::new(), 0)]);
    let mut listed = 0;
    while let Some((dir, depth)) = dirs.pop_front() {
        let project = Project {
            dir,
            settings: None,
        };
        if f.has(&project.path("manage.py")) {
            return Some(project);
        }
        if depth == MAX_DEPTH || listed == MAX_DIRS {
            continue;
        }
        listed += 1;
        for (name, kind) in f.list(&project.dir) {
            if kind == Kind::Dir && !SKIP_DIRS.contains(&name.as_str()) {
                dirs.push_back((project.path(&name), depth + 1));
            }
        }
    }
    None
}

/// The WSGI or ASGI module: the one the settings name (`WSGI_APPLICATION =
/// 'mysite.wsgi.application'`), else `wsgi.py` beside the settings (or a package up).
fn server(f: &Facts, p: &Project, setting: &str, file: &str) -> Option<Server> {
    let settings = p.settings.as_deref()?;
    let settings_file = [
        format!("{}.py", settings.replace('.', "/")),
        format!("{}/__init__.py", settings.replace('.', "/")),
    ]
    .into_iter()
    .map(|rel| p.path(&rel))
    .find(|path| f.has(path));
    let named = settings_file
        .as_deref()
        .and_then(|path| f.read(path))
        .and_then(|t| string_setting(&t.text, setting));
    if let Some(value) = named {
        if let Some((module, object)) = value.rsplit_once('.') {
            let dotted = module.split('.').all(is_ident) && is_ident(object);
            if dotted && f.has(&p.path(&format!("{}.py", module.replace('.', "/")))) {
                return Some(Server {
                    module: module.into(),
                    object: object.into(),
                    why: format!("{setting} {value} in {settings}"),
                });
            }
        }
    }
    // Beside the settings: `mysite.settings` → mysite/wsgi.py; `config.settings.prod` →
    // config/settings/wsgi.py, then config/wsgi.py.
    let mut parts: Vec<&str> = settings.split('.').collect();
    while parts.len() > 1 {
        parts.pop();
        let module = format!("{}.{file}", parts.join("."));
        let rel = format!("{}.py", module.replace('.', "/"));
        if f.has(&p.path(&rel)) {
            return Some(Server {
                module,
                object: "application".into(),
                why: p.path(&rel),
            });
        }
    }
    None
}

/// manage.py's `DJANGO_SETTINGS_MODULE`: `"mysite.settings"`.
fn settings_module(manage: &str) -> Option<String> {
    let line = manage
        .lines()
        .find(|l| l.contains("DJANGO_SETTINGS_MODULE"))?;
    let (_, after) = line.split_once("DJANGO_SETTINGS_MODULE")?;
    let value = first_string(after.trim_start_matches(['"', '\'']))?;
    value.split('.').all(is_ident).then(|| value.to_string())
}

/// A top-level `NAME = 'value'` of a settings module.
fn string_setting(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.trim_start().strip_prefix('=')?;
        first_string(rest).map(String::from)
    })
}

/// The first quoted string in `s`.
fn first_string(s: &str) -> Option<&str> {
    let start = s.find(['"', '\''])?;
    let quote = s[start..].chars().next()?;
    let value = &s[start + 1..];
    Some(&value[..value.find(quote)?])
}
