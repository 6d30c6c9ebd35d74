//! How a Flask, FastAPI, Starlette or plain Python app starts: the app object is looked for
//! in the project's declared packages and entry points first (pyproject.toml, setup.cfg),
//! then in the usual files at the top (app.py, main.py, …), then in packages found by their
//! `__init__.py` (at the top and under `src/`).

use super::files::Facts;
use super::pyapp::{search, top_level_name, Found, Wanted, MAX_MODULES};
use super::pylayout::Layout;
use super::{quote, DetectError, GUNICORN_NOTE, SET_START};

/// Flask: `X = Flask(` or a factory `def create_app(`.
const FLASK: Wanted = Wanted {
    ctors: &["Flask("],
    factory: true,
};
/// FastAPI and Starlette (both ASGI, served by uvicorn).
const ASGI: Wanted = Wanted {
    ctors: &["FastAPI(", "Starlette("],
    factory: false,
};

/// The usual files at the top: (file, module).
const FLASK_FILES: &[(&str, &str)] = &[
    ("app.py", "app"),
    ("main.py", "main"),
    ("wsgi.py", "wsgi"),
    ("application.py", "application"),
    ("server.py", "server"),
    ("app/__init__.py", "app"),
];
const ASGI_FILES: &[(&str, &str)] = &[
    ("main.py", "main"),
    ("app.py", "app"),
    ("app/main.py", "app.main"),
    ("api.py", "api"),
    ("server.py", "server"),
];

pub(super) fn flask_start(f: &Facts, d: &mut Vec<String>) -> Result<(String, String), DetectError> {
    let app = find(f, &FLASK, FLASK_FILES, "flask", d)?;
    let why = describe(&app);
    let target = format!("{}:{}", app.module, app.object);
    if f.requires("gunicorn") {
        let path = match app.root.as_str() {
            "" => String::new(),
            root => format!(" --pythonpath {}", quote(root)),
        };
        Ok((
            format!(
                ".venv/bin/gunicorn --bind 0.0.0.0:$PORT{path} {}",
                quote(&target)
            ),
            format!("{why}; {GUNICORN_NOTE}"),
        ))
    } else {
        // `flask --app module` finds `app`, `application` or `create_app()` itself.
        let app_arg = if matches!(app.object.as_str(), "app" | "application" | "create_app()") {
            app.module.clone()
        } else {
            target
        };
        let env = match app.root.as_str() {
            "" => String::new(),
            root => format!("PYTHONPATH={} ", quote(root)),
        };
        let cmd = format!(
            "{env}.venv/bin/python -m flask --app {} run --host 0.0.0.0 --port $PORT",
            quote(&app_arg)
        );
        let why = format!(
            "{why}; Flask's development server: add gunicorn to the requirements for production"
        );
        Ok((cmd, why))
    }
}

/// FastAPI and Starlette: uvicorn on the app object.
pub(super) fn asgi_start(
    f: &Facts,
    framework: &'static str,
    d: &mut Vec<String>,
) -> Result<(String, String), DetectError> {
    let app = find(f, &ASGI, ASGI_FILES, framework, d)?;
    let dir = match app.root.as_str() {
        "" => String::new(),
        root => format!(" --app-dir {}", quote(root)),
    };
    let cmd = format!(
        ".venv/bin/uvicorn {}:{} --host 0.0.0.0 --port $PORT{dir}",
        app.module, app.object
    );
    Ok((cmd, describe(&app)))
}

pub(super) fn python_start(f: &Facts) -> Result<(String, String), DetectError> {
    ["main.py", "app.py", "server.py"]
        .into_iter()
        .find(|file| f.has(file))
        .map(|file| (format!(".venv/bin/python {file}"), format!("file {file}")))
        .ok_or_else(|| DetectError::NoEntry {
            framework: "python",
            looked_at: "main.py, app.py or server.py".into(),
            advice: SET_START,
        })
}

/// The app object: in the declared packages and entry points, then in the usual files at the
/// top (one that makes the app), then in the packages found, then the first usual file there
/// is (which may import the app from elsewhere).
fn find(
    f: &Facts,
    wanted: &Wanted,
    files: &[(&'static str, &'static str)],
    framework: &'static str,
    d: &mut Vec<String>,
) -> Result<Found, DetectError> {
    let layout = Layout::load(f);
    d.extend(layout.notes.iter().cloned());
    let mut budget = MAX_MODULES;
    if let Some(found) = search(
        f,
        &layout.entry_modules,
        &layout.packages,
        wanted,
        &mut budget,
    ) {
        return Ok(found);
    }
    let at_top = |file: &str, module: &str, object: String| Found {
        file: file.into(),
        root: String::new(),
        module: module.into(),
        object,
        from: "",
    };
    for (file, module) in files {
        let Some(text) = f.read(file) else { continue };
        let object = wanted
            .ctors
            .iter()
            .find_map(|ctor| top_level_name(&text.text, ctor))
            .or_else(|| {
                (wanted.factory && text.text.contains("def create_app("))
                    .then(|| "create_app()".into())
            });
        if let Some(object) = object {
            return Ok(at_top(file, module, object));
        }
    }
    if let Some(found) = search(f, &[], &layout.found, wanted, &mut budget) {
        return Ok(found);
    }
    if let Some((file, module)) = files.iter().find(|(file, _)| f.has(file)) {
        return Ok(at_top(file, module, "app".into()));
    }
    let mut looked_at = layout.looked_at;
    let names: Vec<&str> = files.iter().map(|(file, _)| *file).collect();
    looked_at.push(names.join(", "));
    let ctors = wanted.ctors.join(" or ");
    let factory = if wanted.factory {
        " or `def create_app(`"
    } else {
        ""
    };
    Err(DetectError::NoEntry {
        framework,
        looked_at: format!(
            "{} (for `{ctors}`{factory} at a module's top level)",
            looked_at.join("; ")
        ),
        advice: SET_START,
    })
}

/// Where the app object is, for the plan: "app object `app` in src/shop/__init__.py, package
/// from pyproject.toml".
fn describe(app: &Found) -> String {
    if app.from.is_empty() {
        return app.file.clone();
    }
    format!("app object `{}` in {}, {}", app.object, app.file, app.from)
}
