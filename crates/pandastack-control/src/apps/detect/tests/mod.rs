//! Plans for small repositories written to temporary directories; the Node.js and Python
//! frameworks have their own files.

mod layouts;
mod node;
mod python;

use std::fs;
use std::path::Path;

use super::files::MAX_READ;
use super::*;

/// A repository with these files (paths may name subdirectories).
fn repo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    dir
}

fn plan_with(files: &[(&str, &str)], o: &Overrides) -> BuildPlan {
    let dir = repo(files);
    plan(dir.path(), o).unwrap_or_else(|e| panic!("{e}"))
}

fn plan_of(files: &[(&str, &str)]) -> BuildPlan {
    plan_with(files, &Overrides::default())
}

fn error_of(files: &[(&str, &str)]) -> DetectError {
    let dir = repo(files);
    match plan(dir.path(), &Overrides::default()) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    }
}

fn has_decision(p: &BuildPlan, line: &str) {
    assert!(
        p.decisions.iter().any(|d| d == line),
        "no decision {line:?} in {:#?}",
        p.decisions
    );
}

const VITE_REACT: &str = r#"{
  "name": "vite-project", "private": true, "version": "0.0.0", "type": "module",
  "scripts": { "dev": "vite", "build": "tsc -b && vite build", "lint": "eslint .", "preview": "vite preview" },
  "dependencies": { "react": "^18.3.1", "react-dom": "^18.3.1" },
  "devDependencies": { "@vitejs/plugin-react": "^4.3.1", "typescript": "^5.5.3", "vite": "^5.4.1" }
}"#;
const NEXT: &str = r#"{
  "name": "my-app", "version": "0.1.0", "private": true,
  "scripts": { "dev": "next dev", "build": "next build", "start": "next start", "lint": "next lint" },
  "dependencies": { "next": "14.2.5", "react": "^18", "react-dom": "^18" },
  "devDependencies": { "typescript": "^5", "eslint-config-next": "14.2.5" }
}"#;
const CRA: &str = r#"{
  "name": "cra-app", "version": "0.1.0", "private": true,
  "dependencies": { "react": "^18.2.0", "react-dom": "^18.2.0", "react-scripts": "5.0.1" },
  "scripts": { "start": "react-scripts start", "build": "react-scripts build", "test": "react-scripts test" }
}"#;
const EXPRESS: &str = r#"{
  "name": "api", "version": "1.0.0", "main": "index.js",
  "scripts": { "start": "node server.js" },
  "dependencies": { "express": "^4.19.2" }
}"#;

fn with_engines(range: &str) -> String {
    format!(r#"{{"scripts": {{"start": "node index.js"}}, "engines": {{"node": {range:?}}}}}"#)
}

#[test]
fn a_plain_index_html_is_served_as_it_is() {
    let p = plan_of(&[
        ("index.html", "<!doctype html><h1>hi</h1>"),
        ("style.css", "h1{}"),
    ]);
    assert_eq!(p.framework, "static");
    assert_eq!(p.runtime, ServedBy::Static);
    assert_eq!(p.output_dir.as_deref(), Some("."));
    assert_eq!(p.start, format!("node {STATIC_SERVER} ."));
    assert_eq!(
        (p.install.as_deref(), p.build.as_deref(), p.setup.as_deref()),
        (None, None, None)
    );
    assert_eq!(p.package_manager, None);
    assert_eq!(p.port, 8080);
    assert!(p.cache_files.is_empty() && p.cache_dirs.is_empty());
}

#[test]
fn a_procfile_web_line_is_the_start() {
    let files = [
        ("requirements.txt", "gunicorn\nrequests\n"),
        (
            "Procfile",
            "release: ./migrate\nweb: gunicorn hello:app --bind 0.0.0.0:$PORT\n",
        ),
    ];
    let p = plan_of(&files);
    assert_eq!(p.framework, "procfile");
    assert_eq!(p.runtime, ServedBy::Python);
    assert_eq!(
        p.start,
        "export PATH=\"$PWD/.venv/bin:$PATH\"; gunicorn hello:app --bind 0.0.0.0:$PORT"
    );
    assert_eq!(p.port, 8000);
    assert_eq!(
        p.install.as_deref(),
        Some("python3 -m venv .venv && .venv/bin/pip install -r requirements.txt")
    );
    has_decision(&p, "start: Procfile web line");
}

#[test]
fn a_procfile_web_line_beats_the_rule() {
    let p = plan_of(&[
        ("package.json", EXPRESS),
        ("Procfile", "web: node dist/main.js\n"),
    ]);
    assert_eq!(p.framework, "node");
    assert_eq!(
        p.start,
        "export PATH=\"$PWD/node_modules/.bin:$PATH\"; node dist/main.js"
    );
    let p = plan_of(&[
        ("package.json", VITE_REACT),
        ("Procfile", "web: vite preview --port $PORT --host\n"),
    ]);
    assert_eq!(p.runtime, ServedBy::Node);
    assert_eq!(p.output_dir, None);
    assert_eq!(p.port, 3000);
}

#[test]
fn a_procfile_without_web_is_an_error_only_when_nothing_else_starts() {
    let e = error_of(&[("Procfile", "worker: python worker.py\n")]);
    assert!(matches!(e, DetectError::ProcfileWithoutWeb), "{e}");
    let p = plan_of(&[
        ("package.json", EXPRESS),
        ("Procfile", "worker: node worker.js\n"),
    ]);
    assert_eq!(p.start, "npm start");
    has_decision(&p, "Procfile: no `web:` line; ignored");
}

#[test]
fn overrides_beat_everything_and_are_recorded() {
    let o = Overrides {
        build_command: Some("make site".into()),
        output_dir: None,
        start_command: Some("node srv.mjs".into()),
        port: Some(4321),
        root_dir: None,
    };
    let p = plan_with(
        &[("package.json", VITE_REACT), ("Procfile", "web: x\n")],
        &o,
    );
    assert_eq!(p.build.as_deref(), Some("make site"));
    assert_eq!(p.start, "node srv.mjs");
    assert_eq!(p.port, 4321);
    assert_eq!(p.runtime, ServedBy::Node);
    has_decision(&p, "build: `make site` (override from the request)");
    has_decision(&p, "start: `node srv.mjs` (override from the request)");
    has_decision(&p, "port: 4321 (override from the request)");
}

#[test]
fn an_output_dir_override_serves_that_directory() {
    let o = Overrides {
        output_dir: Some("_site".into()),
        ..Overrides::default()
    };
    let pkg = r#"{"scripts": {"build": "eleventy"}, "devDependencies": {"@11ty/eleventy": "^2"}}"#;
    let p = plan_with(&[("package.json", pkg)], &o);
    assert_eq!(p.framework, "custom");
    assert_eq!(p.runtime, ServedBy::Static);
    assert_eq!(p.build.as_deref(), Some("npm run build"));
    assert_eq!(p.output_dir.as_deref(), Some("_site"));
    assert_eq!(p.start, format!("node {STATIC_SERVER} _site"));
    assert_eq!(p.port, 8080);
    has_decision(&p, "output: _site (override from the request)");
    let p = plan_with(&[("package.json", VITE_REACT)], &o);
    assert_eq!(
        (p.framework.as_str(), p.output_dir.as_deref()),
        ("vite", Some("_site"))
    );
    for bad in ["../etc", "/", "", "a/../../b"] {
        let o = Overrides {
            output_dir: Some(bad.into()),
            ..Overrides::default()
        };
        let e = plan(repo(&[("index.html", "")]).path(), &o).unwrap_err();
        assert!(matches!(e, DetectError::BadOutputDir(_)), "{bad}: {e}");
    }
}

#[test]
fn malformed_package_json_is_an_error_with_its_position() {
    let e = error_of(&[("package.json", "{\n  \"name\": \"x\",\n  \"scripts\": {\n}")]);
    assert!(
        matches!(e, DetectError::BadPackageJson { line: 4, .. }),
        "{e:?}"
    );
    assert!(std::error::Error::source(&e).is_some());
    // The deploy log shows the message only, so it says why (serde's text has the position).
    assert_eq!(
        e.to_string(),
        "package.json is not valid JSON: EOF while parsing an object at line 4 column 1"
    );
    let e = error_of(&[("package.json", "[1, 2]")]);
    assert!(matches!(e, DetectError::PackageJsonNotObject), "{e:?}");
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(MAX_READ as usize));
    assert!(matches!(
        error_of(&[("package.json", &big)]),
        DetectError::PackageJsonTooLarge
    ));
}

#[test]
fn an_empty_repository_is_an_error_saying_what_was_looked_for() {
    let e = error_of(&[("README.md", "# hello\n")]);
    assert_eq!(
        e.to_string(),
        format!("nothing says how to build or start this app: looked for package.json, requirements.txt, pyproject.toml, index.html or a Procfile; {SET_START}")
    );
    let e = error_of(&[("package.json", r#"{"devDependencies": {"prettier": "^3"}}"#)]);
    let text = e.to_string();
    assert!(
        text.contains("next, nuxt")
            && text.contains("react-scripts")
            && text.contains("`start` script"),
        "{text}"
    );
    let e = plan(Path::new("/nonexistent/repo"), &Overrides::default()).unwrap_err();
    assert!(matches!(e, DetectError::NotADirectory(_)), "{e}");
}

#[test]
fn odd_files_do_not_break_detection() {
    let dir = repo(&[("app.py", "app = Flask(__name__)\n")]);
    let mut requirements = b"flask\n\xff\xfe garbage\n".to_vec();
    requirements.extend(std::iter::repeat_n(b'#', 2 << 20));
    fs::write(dir.path().join("requirements.txt"), requirements).unwrap();
    let p = plan(dir.path(), &Overrides::default()).unwrap();
    assert_eq!(p.framework, "flask");
    has_decision(
        &p,
        "requirements.txt: larger than 1 MiB; read the first 1 MiB",
    );
    // A package.json with a BOM and fields of unexpected types.
    let pkg = "\u{feff}{\"scripts\": 7, \"main\": [1], \"engines\": \"node\", \"dependencies\": {\"express\": null}}";
    let p = plan_of(&[("package.json", pkg), ("index.js", "")]);
    assert_eq!(p.start, "node index.js");
    assert_eq!(p.node_major, None);
    let p = plan_of(&[("package.json", &with_engines("not a range"))]);
    has_decision(
        &p,
        "node: 20 (engines.node \"not a range\" is not a range this reads; ignored)",
    );
}

#[test]
fn symlinks_are_not_followed() {
    let outside = repo(&[("package.json", NEXT)]);
    let dir = repo(&[("index.html", "")]);
    std::os::unix::fs::symlink(
        outside.path().join("package.json"),
        dir.path().join("package.json"),
    )
    .unwrap();
    let p = plan(dir.path(), &Overrides::default()).unwrap();
    assert_eq!(p.framework, "static");
}

#[test]
fn static_rules_name_an_output_and_ports_follow_the_runtime() {
    for rule in RULES {
        let static_start = matches!(rule.start, Start::Static);
        assert_eq!(
            static_start,
            rule.runtime == ServedBy::Static,
            "{}",
            rule.name
        );
        assert_eq!(static_start, rule.output_dir.is_some(), "{}", rule.name);
        assert_eq!(rule.port, rule.runtime.default_port(), "{}", rule.name);
    }
}

#[test]
fn the_app_template_carries_this_static_server() {
    // Paths from this file: tests/ → detect/ → apps/, and up to the workspace root.
    let server = include_str!("../../static-server.mjs");
    let spec = include_str!("../../../../../../templates/app.toml");
    let entry = format!("dest = \"{STATIC_SERVER}\"\ncontent = '''\n");
    let start = spec
        .find(&entry)
        .expect("app.toml installs the static server")
        + entry.len();
    let end = start + spec[start..].find("'''").expect("the content ends");
    assert!(
        spec[start..end] == *server,
        "templates/app.toml's copy of static-server.mjs differs from it"
    );
}
