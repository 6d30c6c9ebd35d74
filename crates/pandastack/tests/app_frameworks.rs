//! Frameworks of the detection table deployed from a local git repository and answering at their
//! URL, with projects made by the frameworks' own generators from the npm registry on the host
//! (`create-vite`, `express-generator`) and a Python app on Flask from PyPI (a `src/` package of a
//! monorepo's subdirectory, declared by its pyproject.toml), all built in VMs of
//! the `app` template with sandbox networking, one after another. The Express project has an npm
//! lockfile and installs through the npm fast path (packages fetched on the host, unpacked in
//! the VM); Vite's has none, so npm resolves it in the VM (timings in docs/apps.md, "App
//! hosting"). What every framework is planned as is tested in-process
//! (`pandastack_control::apps::detect`); deploys of generated Next.js and Create React App
//! projects, which take 8–17 minutes each under TCG, are `pandastack bench apps --frameworks`
//! (bench/README.md), not part of the suite.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, GitDaemon, Server};
use pandastack_testkit::net::NetNames;
use pandastack_testkit::runtime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Longest one deploy may take (a cold Vite install and build under TCG takes minutes).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(1200);

fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .current_dir(dir)
        .args(args)
        .env("npm_config_yes", "true")
        .env("CI", "1")
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn git(dir: &Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@example.com"];
    all.extend_from_slice(args);
    run(dir, "git", &all);
}

/// Commits the project in `work` and pushes it to a new bare repository served by `daemon`;
/// its URL. A repository the generator made (`create-react-app` commits its project) is
/// replaced.
fn publish(work: &Path, daemon: &GitDaemon) -> String {
    let bare = work.with_extension("git");
    let own = work.join(".git");
    if own.exists() {
        std::fs::remove_dir_all(own).unwrap();
    }
    git(work, &["init", "--quiet", "--initial-branch=main"]);
    git(work, &["add", "-A"]);
    git(work, &["commit", "--quiet", "-m", "generated"]);
    run(
        work.parent().unwrap(),
        "git",
        &[
            "clone",
            "--quiet",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    daemon.url(&bare)
}

fn write(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir.to_owned()
}

/// A server over `data` that builds the `app` template from its spec, with sandbox networking on
/// namespaces named `net` and addresses from `base` (each test has its own: they run side by
/// side).
async fn app_server(data: &Path, net: &str, base: &str, daemon: &GitDaemon) -> Server {
    let specs = data.join("no-specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/app.toml");
    std::fs::copy(spec, specs.join("app.toml")).unwrap();
    let [allow, allowed] = daemon.allow_args();
    start_with(
        data,
        free_port(),
        &[
            "--pool-size",
            "0",
            "--network",
            "on",
            "--net-name",
            net,
            "--net-base",
            base,
            "--net-spare",
            "1",
            &allow,
            &allowed,
        ],
    )
    .await
}

/// A test's own server (network names `net`, addresses `base`) and a scratch directory for
/// the generated projects.
struct Site {
    _guard: pandastack_testkit::RuntimeGuard,
    names: NetNames,
    server: Server,
    /// Serves the repositories published under `tmp`.
    daemon: GitDaemon,
    tmp: tempfile::TempDir,
}

impl Site {
    async fn start(net: &str, base: &str) -> Self {
        let guard = runtime().await;
        let names = NetNames::new(net);
        names.clean();
        let tmp = tempfile::tempdir().unwrap();
        let daemon = GitDaemon::start(tmp.path());
        let server = app_server(guard.dir.path(), net, base, &daemon).await;
        Self {
            _guard: guard,
            names,
            server,
            daemon,
            tmp,
        }
    }

    fn api(&self) -> Api<'_> {
        Api {
            s: &self.server,
            c: Client::new(),
        }
    }

    fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// Stops the server and removes its network objects.
    fn finish(self) {
        let Site { names, server, .. } = self;
        drop(server);
        names.clean();
    }
}

/// One project to deploy.
struct Case {
    app: &'static str,
    project: PathBuf,
    /// More fields of the create request (`memory_mb`, `env`).
    extra: Value,
    /// The framework detection must pick.
    framework: &'static str,
    /// Text the page at `/` has (compared without spaces).
    marker: &'static str,
    /// Another path and text it has.
    also: Option<(&'static str, &'static str)>,
    /// Whether the project has an npm lockfile, which the host fetches (the deploy log says
    /// so) and the VM unpacks instead of `npm ci`.
    npm_lockfile: bool,
}

/// Publishes the project, deploys it as a new app, checks the plan's framework and the page
/// served through the proxy, and deletes the app (one app VM at a time).
async fn deploy_and_visit(api: &Api<'_>, daemon: &GitDaemon, case: Case) {
    let name = case.app;
    let url = publish(&case.project, daemon);
    let d = deploy(api, name, &url, case.extra).await;
    assert_eq!(d["plan"]["framework"], case.framework, "{name}: {d}");
    let log = deploy_log(api, name, d["id"].as_str().unwrap()).await;
    assert_eq!(
        log.contains("fetched on the host"),
        case.npm_lockfile,
        "{name}: {log}"
    );
    for (path, marker) in [("/", case.marker)].into_iter().chain(case.also) {
        let (st, body) = visit(api.s, name, path).await;
        assert_eq!(st, StatusCode::OK, "{name} {path}: {body}");
        assert!(
            body.replace(' ', "").contains(&marker.replace(' ', "")),
            "{name} {path}: {marker:?} not in {body}"
        );
    }
    let (st, v) = api.call("DELETE", &format!("/v1/apps/{name}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
}

/// Creates app `name` from `url` and waits for its first deploy; returns the live deploy.
async fn deploy(api: &Api<'_>, name: &str, url: &str, extra: Value) -> Value {
    let mut body = json!({"name": name, "git": {"url": url}, "min_instances": 1});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (st, v) = api.call("POST", "/v1/apps", Some(body)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (_, list) = api
        .call("GET", &format!("/v1/apps/{name}/deploys"), None)
        .await;
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let t = Instant::now();
    loop {
        let (_, d) = api
            .call("GET", &format!("/v1/apps/{name}/deploys/{id}"), None)
            .await;
        match d["state"].as_str().unwrap_or_default() {
            "live" => {
                eprintln!(
                    "{name}: live in {:.0} s, phases {}",
                    t.elapsed().as_secs_f64(),
                    d["phases_ms"]
                );
                return d;
            }
            state @ ("failed" | "superseded") => {
                let log = deploy_log(api, name, &id).await;
                panic!("{name}: deploy {state}: {}\n{log}", d["error"]);
            }
            state if t.elapsed() >= DEPLOY_TIMEOUT => {
                let log = deploy_log(api, name, &id).await;
                panic!("{name}: still {state:?} after {DEPLOY_TIMEOUT:?}\n{log}");
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The build and runtime log of deploy `id` of app `name`.
async fn deploy_log(api: &Api<'_>, name: &str, id: &str) -> String {
    api.c
        .get(format!("{}/v1/apps/{name}/deploys/{id}/logs", api.s.url))
        .bearer_auth(&api.s.key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn visit(s: &Server, name: &str, path: &str) -> (StatusCode, String) {
    let port = s.proxy.rsplit_once(':').unwrap().1;
    let r = Client::new()
        .get(format!("http://{}{path}", s.proxy))
        .header("Host", format!("{name}.localhost:{port}"))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .expect("request through the proxy");
    let st = r.status();
    (st, r.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn generated_projects_of_every_framework_deploy_and_answer() {
    let site = Site::start("tsfw", "10.204.64.0/24").await;
    let (api, root) = (site.api(), site.root());

    // Generated by the tools themselves, from the npm registry.
    run(
        root,
        "npm",
        &[
            "create",
            "-y",
            "vite@latest",
            "vite-app",
            "--",
            "--template",
            "react",
            "--no-interactive",
        ],
    );
    run(
        root,
        "npx",
        &["-y", "express-generator", "--no-view", "express-app"],
    );
    // The Express project gets a lockfile (the npm fast path: packages fetched on the host)
    // and a root postinstall script, which must still run in the VM; Vite's has none (`npm
    // install` resolves it in the VM).
    let express = root.join("express-app");
    let manifest = express.join("package.json");
    let mut pkg: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    pkg["scripts"]["postinstall"] = json!(
        "node -e \"require('fs').writeFileSync('public/postinstall.txt', 'postinstall ran in the VM')\""
    );
    std::fs::write(&manifest, serde_json::to_vec_pretty(&pkg).unwrap()).unwrap();
    run(
        &express,
        "npm",
        &["install", "--package-lock-only", "--no-audit", "--no-fund"],
    );
    // The Flask app as real projects lay it out: a package under `src/` declared by its
    // pyproject.toml (its dependencies there, no requirements.txt), the app object made in the
    // package's `__init__.py`, in a subdirectory of a monorepo (`root_dir`).
    let flask = write(
        &root.join("flask-app"),
        &[
            ("README.md", "A monorepo: the API is services/api.\n"),
            ("services/api/pyproject.toml", "[project]\nname = \"shop-api\"\nversion = \"0.1.0\"\ndependencies = [\"flask==3.*\"]\n\n[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n[tool.setuptools.packages.find]\nwhere = [\"src\"]\n"),
            ("services/api/src/shop_api/__init__.py", "from flask import Flask\napp = Flask(__name__)\n\n@app.get(\"/\")\ndef index():\n    return {\"hello\": \"flask\"}\n"),
        ],
    );

    let cases = [
        Case {
            app: "vite",
            project: root.join("vite-app"),
            extra: json!({}),
            framework: "vite",
            marker: "<div id=\"root\">",
            also: None,
            npm_lockfile: false,
        },
        Case {
            app: "flask",
            project: flask,
            extra: json!({"root_dir": "services/api"}),
            framework: "flask",
            marker: "\"hello\":\"flask\"",
            also: None,
            npm_lockfile: false,
        },
        Case {
            app: "express",
            project: express,
            extra: json!({}),
            framework: "node",
            marker: "Welcome to Express",
            also: Some(("/postinstall.txt", "postinstall ran in the VM")),
            npm_lockfile: true,
        },
    ];
    for case in cases {
        deploy_and_visit(&api, &site.daemon, case).await;
    }
    drop(api);
    site.finish();
}
