//! Python frameworks and project files.

use super::*;

#[test]
fn flask_with_gunicorn_runs_gunicorn() {
    let app = "from flask import Flask\n\napplication = Flask(__name__)\n\n@application.route('/')\ndef hi():\n    return 'hi'\n";
    let p = plan_of(&[
        ("requirements.txt", "Flask==3.0.3\ngunicorn>=22  # server\n"),
        ("app.py", app),
    ]);
    assert_eq!(p.framework, "flask");
    assert_eq!(p.runtime, ServedBy::Python);
    assert_eq!(p.package_manager.as_deref(), Some("pip"));
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")
    );
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT app:application"
    );
    assert_eq!(p.port, 8000);
    assert_eq!(p.cache_files, ["requirements.txt"]);
    assert_eq!(p.cache_dirs, [".venv"]);
    assert_eq!(p.build, None);
}

#[test]
fn flask_without_gunicorn_runs_flask_run() {
    let p = plan_of(&[
        ("requirements.txt", "flask\n"),
        ("main.py", "def create_app():\n    ...\n"),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/python -m flask --app main run --host 0.0.0.0 --port $PORT"
    );
    let p = plan_of(&[
        ("requirements.txt", "flask\ngunicorn\n"),
        ("wsgi.py", "def create_app():\n    ...\n"),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT 'wsgi:create_app()'"
    );
    let e = error_of(&[("requirements.txt", "flask\n")]);
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
}

#[test]
fn fastapi_runs_uvicorn_and_installs_it_when_missing() {
    let main = "from fastapi import FastAPI\n\napi = FastAPI()\n";
    let p = plan_of(&[
        ("requirements.txt", "fastapi>=0.110\npydantic\n"),
        ("app/main.py", main),
    ]);
    assert_eq!(p.framework, "fastapi");
    assert_eq!(
        p.start,
        ".venv/bin/uvicorn app.main:api --host 0.0.0.0 --port $PORT"
    );
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && .venv/bin/pip install uvicorn")
    );
    let p = plan_of(&[
        ("requirements.txt", "fastapi\nuvicorn[standard]\n"),
        ("main.py", "app = FastAPI()\n"),
    ]);
    assert_eq!(
        p.start,
        ".venv/bin/uvicorn main:app --host 0.0.0.0 --port $PORT"
    );
    assert!(!p.install.unwrap().contains("pip install uvicorn"));
}

#[test]
fn django_runs_gunicorn_on_its_wsgi_module() {
    let manage = "import os\nimport sys\n\ndef main():\n    os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'mysite.settings')\n";
    let files = [
        ("requirements.txt", "Django>=5\ngunicorn\n"),
        ("manage.py", manage),
        ("mysite/wsgi.py", ""),
    ];
    let p = plan_of(&files);
    assert_eq!(p.framework, "django");
    assert_eq!(
        p.start,
        ".venv/bin/gunicorn --bind 0.0.0.0:$PORT mysite.wsgi"
    );
    let p = plan_of(&[("requirements.txt", "django\n"), ("manage.py", manage)]);
    assert_eq!(
        p.start,
        ".venv/bin/python manage.py runserver 0.0.0.0:$PORT"
    );
}

#[test]
fn plain_python_runs_its_main() {
    let p = plan_of(&[
        ("requirements.txt", "requests\n"),
        ("main.py", "import http.server\n"),
    ]);
    assert_eq!(p.framework, "python");
    assert_eq!(p.start, ".venv/bin/python main.py");
    has_decision(
        &p,
        &format!("start: `.venv/bin/python main.py` (file main.py; {ALL_INTERFACES})"),
    );
}

#[test]
fn pyproject_dependencies_are_installed_into_the_venv() {
    let uv = "[project]\nname = \"svc\"\nversion = \"0.1.0\"\ndependencies = [\n    \"fastapi[standard]>=0.115\",  # web\n    'httpx',\n]\n\n[tool.uv]\ndev-dependencies = [\"pytest\"]\n";
    let p = plan_of(&[("pyproject.toml", uv), ("main.py", "app = FastAPI()\n")]);
    assert_eq!(p.framework, "fastapi");
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install 'fastapi[standard]>=0.115' httpx && .venv/bin/pip install uvicorn")
    );
    assert_eq!(p.cache_files, ["pyproject.toml"]);
    let poetry = "[tool.poetry]\nname = \"x\"\n\n[tool.poetry.dependencies]\npython = \"^3.12\"\nFlask = \"^3.0\"\n\n[build-system]\nrequires = [\"poetry-core\"]\nbuild-backend = \"poetry.core.masonry.api\"\n";
    let p = plan_of(&[
        ("pyproject.toml", poetry),
        ("app.py", "app = Flask(__name__)\n"),
    ]);
    assert_eq!(p.framework, "flask");
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install -e .")
    );
}
