//! Frameworks of the detection table deployed from a local git repository and answering at their
//! URL, with projects made by the frameworks' own generators from the npm registry
//! (`create-vite`, `express-generator`) and Python apps on Flask and FastAPI from PyPI, all built
//! in VMs of the `app` template with sandbox networking. Slow by nature (npm and pip under TCG):
//! one server, one deploy after another. Next.js is not here yet: a `create-next-app` project
//! deploys (by hand, on this machine) but its cold deploy takes over ten minutes under TCG
//! (docs/ARCHITECTURE.md, "App hosting").

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::net::NetNames;
use pandastack_testkit::runtime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Longest one deploy may take (a cold Next.js build under TCG takes minutes).
const DEPLOY_TIMEOUT: Duration = Duration::from_secs(1800);

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

/// Commits the project in `work` and pushes it to a new bare repository; its `file://` URL.
fn publish(work: &Path) -> String {
    let bare = work.with_extension("git");
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
    format!("file://{}", bare.display())
}

fn write(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir.to_owned()
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
            "failed" | "superseded" => {
                let log = api
                    .c
                    .get(format!("{}/v1/apps/{name}/deploys/{id}/logs", api.s.url))
                    .bearer_auth(&api.s.key)
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                panic!("{name}: deploy {}: {}\n{log}", d["state"], d["error"]);
            }
            _ => {}
        }
        assert!(t.elapsed() < DEPLOY_TIMEOUT, "{name}: still {}", d["state"]);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
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
    let guard = runtime().await;
    let data = guard.dir.path();
    let specs = data.join("no-specs");
    std::fs::create_dir_all(&specs).unwrap();
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/app.toml");
    std::fs::copy(spec, specs.join("app.toml")).unwrap();
    let names = NetNames::new("tsfw");
    names.clean();
    let server = start_with(
        data,
        free_port(),
        &[
            "--pool-size",
            "0",
            "--network",
            "on",
            "--net-name",
            "tsfw",
            "--net-base",
            "10.204.64.0/24",
            "--net-spare",
            "1",
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();

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
    let flask = write(
        &root.join("flask-app"),
        &[
            ("app.py", "from flask import Flask\napp = Flask(__name__)\n\n@app.get(\"/\")\ndef index():\n    return {\"hello\": \"flask\"}\n"),
            ("requirements.txt", "flask==3.*\n"),
        ],
    );
    let fastapi = write(
        &root.join("fastapi-app"),
        &[
            ("main.py", "from fastapi import FastAPI\napp = FastAPI()\n\n@app.get(\"/\")\ndef index():\n    return {\"hello\": \"fastapi\"}\n"),
            ("requirements.txt", "fastapi\nuvicorn\n"),
        ],
    );

    // (app, project, extra request fields, framework detection must pick, text the page has)
    let cases: Vec<(&str, PathBuf, Value, &str, &str)> = vec![
        (
            "vite",
            root.join("vite-app"),
            json!({}),
            "vite",
            "<div id=\"root\">",
        ),
        ("flask", flask, json!({}), "flask", "\"hello\":\"flask\""),
        (
            "fastapi",
            fastapi,
            json!({}),
            "fastapi",
            "\"hello\":\"fastapi\"",
        ),
        (
            "express",
            root.join("express-app"),
            json!({}),
            "node",
            "Welcome to Express",
        ),
    ];
    for (name, dir, extra, framework, marker) in cases {
        let url = publish(&dir);
        let d = deploy(&api, name, &url, extra).await;
        assert_eq!(d["plan"]["framework"], framework, "{name}: {d}");
        let (st, body) = visit(&server, name, "/").await;
        assert_eq!(st, StatusCode::OK, "{name}: {body}");
        assert!(
            body.replace(' ', "").contains(&marker.replace(' ', "")),
            "{name}: {marker:?} not in {body}"
        );
        // One VM per app at a time: this one is done.
        let (st, v) = api.call("DELETE", &format!("/v1/apps/{name}"), None).await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    }
    drop(server);
    names.clean();
}
