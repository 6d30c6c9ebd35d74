//! Python layouts real projects use: packages declared in pyproject.toml or setup.cfg, flat
//! and `src/` packages with the app in `__init__.py` or a submodule, Flask's factory, Django
//! with manage.py in a subdirectory, and the error when nothing says how to start.

use super::*;

const FLASK_INIT: &str = "from flask import Flask\n\napp = Flask(__name__)\n\n\n@app.get('/')\ndef index():\n    return 'hi'\n";

#[test]
fn a_flat_package_with_the_app_in_its_init_runs_it() {
    let p = plan_of(&[
        ("requirements.txt", "flask\ngunicorn\n"),
        ("shop/__init__.py", FLASK_INIT),
        ("shop/views.py", "from shop import app\n"),
        ("README.md", "# shop\n"),
    ]);
    assert_eq!(p.framework, "flask");
    assert_eq!(p.start, ".venv/bin/gunicorn --bind 0.0.0.0:$PORT shop:app");
    has_decision(
        &p,
        &format!(
            "start: `{}` (app object `app` in shop/__init__.py, package found at the top; {GUNICORN_NOTE})",
            p.start
        ),
    );
}

#[test]
fn a_src_layout_from_pyproject_puts_src_on_the_path() {
    let pyproject = "[project]\nname = \"my-shop\"\nversion = \"1.0\"\ndependencies = [\"flask>=3\", \"gunicorn\"]\n\n[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[tool.setuptools.packages.find]\nwhere = [\"src\"]\n";
    let files = [
        ("pyproject.toml", pyproject),
        ("src/my_shop/__init__.py", FLASK_INIT),
        // An unrelated app.py at the top does not make the app: the metadata comes first.
        ("tools/app.py", "print('tool')\n"),
    ];
    let p = plan_of(&files);
    assert_eq!(p.framework, "flask");
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install -e .")
    );
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT --pythonpath src my_shop:app"
    );
    has_decision(
        &p,
        &format!(
            "start: `{}` (app object `app` in src/my_shop/__init__.py, package from pyproject.toml; {GUNICORN_NOTE})",
            p.start
        ),
    );
    // Without gunicorn: Flask's own server, with src on PYTHONPATH.
    let no_gunicorn = pyproject.replace(", \"gunicorn\"", "");
    let p = plan_of(&[
        ("pyproject.toml", &no_gunicorn),
        ("src/my_shop/__init__.py", FLASK_INIT),
    ]);
    assert_eq!(
        p.start,
        "PYTHONPATH=src .venv/bin/python -m flask --app my_shop run --host 0.0.0.0 --port $PORT"
    );
}

#[test]
fn a_flask_factory_in_a_package_is_called() {
    let init = "from flask import Flask\n\n\ndef create_app(config=None):\n    app = Flask(__name__)\n    return app\n";
    let poetry = "[tool.poetry]\nname = \"blog\"\npackages = [{ include = \"blog\", from = \"src\" }]\n\n[tool.poetry.dependencies]\npython = \"^3.11\"\nflask = \"^3\"\ngunicorn = \"*\"\n";
    let p = plan_of(&[("pyproject.toml", poetry), ("src/blog/__init__.py", init)]);
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT --pythonpath src 'blog:create_app()'"
    );
    // The app made inside the factory is not taken for a module-level one.
    let p = plan_of(&[("requirements.txt", "flask\ngunicorn\n"), ("wsgi.py", init)]);
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT 'wsgi:create_app()'"
    );
}

#[test]
fn fastapi_in_a_submodule_of_a_package() {
    let p = plan_of(&[
        (
            "pyproject.toml",
            "[project]\nname = \"svc\"\ndependencies = [\"fastapi\", \"uvicorn\"]\n",
        ),
        ("pkg/__init__.py", ""),
        ("pkg/api/__init__.py", ""),
        ("pkg/api/routes.py", "router = APIRouter()\n"),
        (
            "pkg/api/main.py",
            "from fastapi import FastAPI\n\nservice = FastAPI(title='svc')\n",
        ),
        ("tests/test_api.py", "app = FastAPI()\n"),
    ]);
    assert_eq!(p.framework, "fastapi");
    assert_eq!(
        p.start,
        ".venv/bin/uvicorn pkg.api.main:service --host 0.0.0.0 --port $PORT"
    );
    has_decision(
        &p,
        "start: `.venv/bin/uvicorn pkg.api.main:service --host 0.0.0.0 --port $PORT` (app object `service` in pkg/api/main.py, package found at the top; uvicorn binds 0.0.0.0:$PORT)",
    );
}

#[test]
fn scripts_name_the_module_with_the_app() {
    let pyproject = "[project]\nname = \"api-server\"\ndependencies = [\"starlette\", \"uvicorn\"]\n\n[project.scripts]\nserve = \"api_core.web.server:main\"\n";
    let p = plan_of(&[
        ("pyproject.toml", pyproject),
        ("src/api_core/__init__.py", ""),
        ("src/api_core/web/__init__.py", ""),
        (
            "src/api_core/web/server.py",
            "from starlette.applications import Starlette\n\nweb = Starlette(routes=[])\n",
        ),
    ]);
    assert_eq!(p.framework, "starlette");
    assert_eq!(
        p.start,
        ".venv/bin/uvicorn api_core.web.server:web --host 0.0.0.0 --port $PORT --app-dir src"
    );
}

#[test]
fn a_setup_cfg_package_is_searched() {
    let cfg = "[metadata]\nname = storefront\n\n[options]\npackage_dir =\n    =lib\npackages = find:\ninstall_requires =\n    flask\n\n[options.packages.find]\nwhere = lib\n\n[options.entry_points]\nconsole_scripts =\n    store = store_app.cli:main\n";
    let p = plan_of(&[
        ("requirements.txt", "flask\ngunicorn\n"),
        ("setup.cfg", cfg),
        ("lib/store_app/__init__.py", ""),
        ("lib/store_app/cli.py", "def main():\n    pass\n"),
        ("lib/store_app/web.py", "application = Flask(__name__)\n"),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT --pythonpath lib store_app.web:application"
    );
    has_decision(
        &p,
        &format!(
            "start: `{}` (app object `application` in lib/store_app/web.py, package from setup.cfg; {GUNICORN_NOTE})",
            p.start
        ),
    );
}

#[test]
fn django_with_manage_py_in_a_subdirectory() {
    let manage = "#!/usr/bin/env python\nimport os, sys\n\nif __name__ == '__main__':\n    os.environ.setdefault(\"DJANGO_SETTINGS_MODULE\", \"config.settings.production\")\n";
    let settings = "from .base import *\n\nWSGI_APPLICATION = 'config.wsgi.application'\n";
    let files = [
        ("requirements.txt", "django\ngunicorn\n"),
        ("backend/manage.py", manage),
        ("backend/config/__init__.py", ""),
        ("backend/config/settings/__init__.py", ""),
        ("backend/config/settings/production.py", settings),
        ("backend/config/wsgi.py", ""),
        ("frontend/index.html", ""),
    ];
    let p = plan_of(&files);
    assert_eq!(p.framework, "django");
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT --chdir backend config.wsgi"
    );
    has_decision(
        &p,
        &format!(
            "start: `{}` (backend/manage.py, settings config.settings.production, WSGI_APPLICATION config.wsgi.application in config.settings.production; {GUNICORN_NOTE})",
            p.start
        ),
    );
    // Without gunicorn: runserver through that manage.py.
    let p = plan_of(&[
        ("requirements.txt", "django\n"),
        ("backend/manage.py", manage),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/python backend/manage.py runserver 0.0.0.0:$PORT"
    );
    // Beside the settings when they name nothing.
    let p = plan_of(&[
        ("requirements.txt", "django\ngunicorn\n"),
        ("site/manage.py", manage),
        ("site/config/settings/production.py", "DEBUG = False\n"),
        ("site/config/wsgi.py", ""),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT --chdir site config.wsgi"
    );
}

#[test]
fn when_nothing_says_how_to_start_the_error_names_what_was_read_and_the_field() {
    let pyproject = "[project]\nname = \"mystery\"\ndependencies = [\"flask\"]\n";
    let e = error_of(&[
        ("pyproject.toml", pyproject),
        ("src/mystery/__init__.py", "VERSION = '1'\n"),
        ("src/mystery/util.py", "def helper():\n    pass\n"),
    ]);
    assert!(
        matches!(
            e,
            DetectError::NoEntry {
                framework: "flask",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "flask app, but not how to start it: looked at pyproject.toml ([project] name `mystery`); \
             the modules of packages src/mystery; app.py, main.py, wsgi.py, application.py, \
             server.py, app/__init__.py (for `Flask(` or `def create_app(` at a module's top \
             level); {SET_START}"
        )
    );
    let e = error_of(&[("requirements.txt", "django\n"), ("README.md", "")]);
    assert!(
        e.to_string().starts_with(
            "django app, but not how to start it: looked at manage.py at the top and 3 directories down"
        ),
        "{e}"
    );
    assert!(e.to_string().ends_with(SET_START), "{e}");
}

#[test]
fn bad_metadata_is_noted_and_the_search_is_bounded() {
    let p = plan_of(&[
        ("requirements.txt", "flask\n"),
        ("pyproject.toml", "[project\nname = "),
        ("web/__init__.py", FLASK_INIT),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/python -m flask --app web run --host 0.0.0.0 --port $PORT"
    );
    assert!(
        p.decisions
            .iter()
            .any(|d| d.starts_with("pyproject.toml: not valid TOML")),
        "{:#?}",
        p.decisions
    );
    // Too deep: five levels under the package is past the search.
    let e = error_of(&[
        ("requirements.txt", "flask\n"),
        ("deep/__init__.py", ""),
        ("deep/a/b/c/d/e/app_module.py", FLASK_INIT),
    ]);
    assert!(matches!(e, DetectError::NoEntry { .. }), "{e}");
}

#[test]
fn a_monorepo_deploys_its_root_dir() {
    let web = r#"{"name": "web", "scripts": {"start": "node server.js"}}"#;
    let root = r#"{"name": "mono", "private": true, "workspaces": ["apps/*", "packages/*"]}"#;
    let dir = repo(&[
        ("package.json", root),
        ("apps/web/package.json", web),
        ("apps/web/server.js", ""),
        ("apps/api/requirements.txt", "fastapi\n"),
        ("apps/api/main.py", "app = FastAPI()\n"),
    ]);
    // The root names no app: the error says so, and what to set.
    let e = plan(dir.path(), &Overrides::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "package.json declares workspaces (apps/*, packages/*) and is no app itself: set the \
         app's `root_dir` (`--root-dir` in the CLI) to the workspace to deploy"
    );
    let o = Overrides {
        root_dir: Some("apps/web".into()),
        ..Overrides::default()
    };
    let app = app_dir(dir.path(), o.root_dir.as_deref()).unwrap();
    assert_eq!(app, dir.path().join("apps/web"));
    let p = plan(&app, &o).unwrap();
    assert_eq!(
        (p.framework.as_str(), p.start.as_str()),
        ("node", "npm start")
    );
    assert_eq!(p.root_dir.as_deref(), Some("apps/web"));
    assert_eq!(p.decisions[0], "root_dir: apps/web (from the request)");
    let api = app_dir(dir.path(), Some("apps/api/")).unwrap();
    let p = plan(&api, &Overrides::default()).unwrap();
    assert_eq!(p.framework, "fastapi");
    // Not a directory, leaving the repository, or through a symlink: refused.
    std::os::unix::fs::symlink(dir.path().join("apps/web"), dir.path().join("web")).unwrap();
    for bad in [
        "apps/nope",
        "../x",
        "apps/../apps/web",
        "web",
        "apps/web/server.js",
        "/",
    ] {
        let e = app_dir(dir.path(), Some(bad)).unwrap_err();
        assert!(matches!(e, DetectError::BadRootDir(_)), "{bad}: {e}");
    }
}
