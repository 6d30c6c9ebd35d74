//! Functions through the real server and real guests (the `app` template): a Python function
//! with a dependency installed from PyPI over the sandbox network, built and baked with its
//! handler imported, then invoked — cold (restored from the baked snapshot) and warm, JSON and
//! text events, the handler's exception as data with its traceback, a call past its time
//! limit discarding the instance, fresh randomness in each restored instance, the public
//! endpoint through the proxy; builds that fail naming the cause (a syntax error, a handler
//! that does not exist); a second version, a rollback, a Node.js function, and delete leaving
//! no instance behind. One test in named steps ([`common::step`]): they share the server and
//! the first function's build; the refusals that need no VM are fast tests in
//! `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, start_with, step, Api, Server};
use pandastack_testkit::net::NetNames;
use pandastack_testkit::runtime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Longest a build may take here: the first one builds and bakes the `app` template.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1500);

/// Waits until version `v` of `name` leaves the building states; returns it.
async fn settled(api: &Api<'_>, name: &str, v: u64) -> Value {
    let t = Instant::now();
    loop {
        let (st, body) = api
            .call("GET", &format!("/v1/functions/{name}/versions/{v}"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{body}");
        let state = body["state"].as_str().unwrap().to_owned();
        if !["queued", "cloning", "building", "baking", "checking"].contains(&state.as_str()) {
            return body;
        }
        assert!(
            t.elapsed() < BUILD_TIMEOUT,
            "version {v} of {name} still {state}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn build_log(api: &Api<'_>, name: &str, v: u64) -> String {
    api.c
        .get(format!(
            "{}/v1/functions/{name}/versions/{v}/logs",
            api.s.url
        ))
        .bearer_auth(&api.s.key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn live(api: &Api<'_>, name: &str, v: u64) -> Value {
    let body = settled(api, name, v).await;
    if body["state"] != "live" {
        panic!(
            "version {v} of {name} is {}: {}\n{}",
            body["state"],
            body["error"],
            build_log(api, name, v).await
        );
    }
    body
}

/// A gzip tarball of `files`.
fn tarball(files: &[(&str, &str)]) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for (path, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, path, body.as_bytes()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// Waits for asynchronous call `id` to finish; returns it.
async fn until_finished(api: &Api<'_>, name: &str, id: &str) -> Value {
    let t = Instant::now();
    loop {
        let (st, v) = api
            .call(
                "GET",
                &format!("/v1/functions/{name}/invocations/{id}"),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        if !["queued", "running"].contains(&v["status"].as_str().unwrap()) {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "invocation {id}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn invoke(api: &Api<'_>, name: &str, event: Value) -> Value {
    let (st, v) = api
        .call("POST", &format!("/v1/functions/{name}/invoke"), Some(event))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

/// Sandboxes of the workspace that are instances of function `name`.
/// The metered calls of function `name` this month: (invocations, invocation seconds).
async fn metered_calls(api: &Api<'_>, name: &str) -> (u64, f64) {
    let (st, v) = api.call("GET", "/v1/usage?group_by=resource", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["metered"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"] == "function" && g["resource_id"] == name)
        .map_or((0, 0.0), |g| {
            (
                g["usage"]["invocations"].as_u64().unwrap(),
                g["usage"]["invocation_seconds"].as_f64().unwrap(),
            )
        })
}

/// Waits (metering is off the call's path) until function `name` has `want` metered calls.
async fn metered_calls_reach(api: &Api<'_>, name: &str, want: u64) -> (u64, f64) {
    let start = Instant::now();
    loop {
        let got = metered_calls(api, name).await;
        if got.0 >= want || start.elapsed() > Duration::from_secs(10) {
            assert_eq!(got.0, want, "metered invocations of {name}");
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn instances(api: &Api<'_>, name: &str) -> usize {
    let (st, v) = api.call("GET", "/v1/sandboxes?limit=1000", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["metadata"]["pandastack.function"] == name)
        .count()
}

const MAIN_PY: &str = r#"import random
import time

import six

STATE = {"calls": 0}


def handler(event, context):
    STATE["calls"] += 1
    print("got", event)
    if isinstance(event, dict) and event.get("fail"):
        raise ValueError("asked to fail")
    if isinstance(event, dict) and event.get("nan"):
        return {"x": float("nan")}
    if isinstance(event, dict) and event.get("sleep"):
        time.sleep(event["sleep"])
    return {
        "echo": event,
        "calls": STATE["calls"],
        "rand": random.random(),
        "six": six.__version__,
        "version": "v1",
    }
"#;

const NODE_INDEX: &str = r#"export async function handler(event) {
  console.log('node got', JSON.stringify(event));
  if (event.sleep) await new Promise((r) => setTimeout(r, event.sleep * 1000));
  return { sum: event.a + event.b, rand: Math.random() };
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn functions_end_to_end() {
    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "app");
    let names = NetNames::new("tsfn");
    names.clean();
    let port = free_port();
    let server: Server = start_with(
        data,
        port,
        &[
            "--pool-size",
            "0",
            "--network",
            "on",
            "--net-name",
            "tsfn",
            "--net-base",
            "10.204.68.0/24",
            "--net-spare",
            "1",
        ],
    )
    .await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };

    // Bad input (a refusal, nothing made) needs no VM: see
    // `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.

    step(
        "a Python function with a PyPI dependency builds and goes live, no instance yet",
        async {
            // A Python function with a dependency from PyPI.
            let (st, f) = api
                .call(
                    "POST",
                    "/v1/functions",
                    Some(json!({
                        "name": "hello",
                        "runtime": "python",
                        "handler": "main.handler",
                        "files": {"main.py": MAIN_PY},
                        "dependencies": "six\n",
                        "timeout_seconds": 5,
                        "public": true,
                    })),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{f}");
            assert_eq!(f["name"], "hello");
            assert!(f["url"].as_str().unwrap().contains("fn-hello."), "{f}");
            let v1 = live(&api, "hello", 1).await;
            assert!(v1["phases_ms"]["snapshot"].as_u64().is_some(), "{v1}");
            let log = build_log(&api, "hello", 1).await;
            assert!(log.contains("handler main.handler"), "{log}");
            let (_, f) = api.call("GET", "/v1/functions/hello", None).await;
            assert_eq!(f["live_version"], 1, "{f}");
            // The build VM is gone: instances come from the snapshot.
            assert_eq!(instances(&api, "hello").await, 0);
        },
    )
    .await;
    let first = step(
        "cold, then warm: the warm instance keeps its module state",
        async {
            // Cold, then warm: the warm instance keeps its module state.
            let first = invoke(&api, "hello", json!({"x": 1})).await;
            assert_eq!(first["status"], "ok", "{first}");
            assert_eq!(first["cold"], true, "{first}");
            assert_eq!(first["result"]["echo"], json!({"x": 1}));
            assert_eq!(first["result"]["calls"], 1);
            assert_eq!(first["version"], 1);
            assert!(first["result"]["six"].as_str().is_some(), "{first}");
            assert!(
                first["stdout"].as_str().unwrap().contains("got {'x': 1}"),
                "{first}"
            );
            let second = invoke(&api, "hello", json!({"x": 2})).await;
            assert_eq!(second["cold"], false, "{second}");
            assert_eq!(second["result"]["calls"], 2, "{second}");
            assert_eq!(instances(&api, "hello").await, 1);

            first
        },
    )
    .await;
    step(
        "text and JSON events, bad JSON a 400, the handler's exceptions as data",
        async {
            // Text events, bad JSON, the handler's exception as data.
            let r = api
                .c
                .post(format!("{}/v1/functions/hello/invoke", server.url))
                .bearer_auth(&server.key)
                .header("Content-Type", "text/plain")
                .body("plain words")
                .send()
                .await
                .unwrap();
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["result"]["echo"], "plain words", "{v}");
            let r = api
                .c
                .post(format!("{}/v1/functions/hello/invoke", server.url))
                .bearer_auth(&server.key)
                .header("Content-Type", "application/json")
                .body("{not json")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::BAD_REQUEST);
            let failed = invoke(&api, "hello", json!({"fail": true})).await;
            assert_eq!(failed["status"], "error", "{failed}");
            assert_eq!(failed["error"]["type"], "ValueError", "{failed}");
            assert!(failed["error"]["traceback"]
                .as_str()
                .unwrap()
                .contains("asked to fail"));
            assert!(failed["error"]["traceback"]
                .as_str()
                .unwrap()
                .contains("main.py"));
            // A value JSON cannot carry is the handler's error, not a broken answer.
            let nan = invoke(&api, "hello", json!({"nan": true})).await;
            assert_eq!(nan["status"], "error", "{nan}");
            assert_eq!(nan["error"]["type"], "ValueError", "{nan}");
        },
    )
    .await;
    step(
        "past its time limit: a timeout, then a fresh instance with its own randomness",
        async {
            // Past the time limit: a timeout result, the instance discarded; the next call restores
            // a fresh one (module state from the bake) with randomness of its own.
            let t = Instant::now();
            let slow = invoke(&api, "hello", json!({"sleep": 30})).await;
            assert_eq!(slow["status"], "timeout", "{slow}");
            assert!(t.elapsed() < Duration::from_secs(25), "{:?}", t.elapsed());
            let fresh = invoke(&api, "hello", json!({"x": 3})).await;
            assert_eq!(fresh["status"], "ok", "{fresh}");
            assert_eq!(fresh["cold"], true, "{fresh}");
            assert_eq!(fresh["result"]["calls"], 1, "{fresh}");
            assert_ne!(
                fresh["result"]["rand"], first["result"]["rand"],
                "two instances restored from one snapshot drew the same random number"
            );
        },
    )
    .await;
    step(
        "the public endpoint answers through the proxy, not once it is private",
        async {
            // Every call so far that ran is a metered invocation with its time — the seven
            // above (first, second, plain words, fail, nan, slow, fresh; the bad JSON never
            // ran) — and so is one through the public endpoint.
            let before = 7;
            let (_, secs) = metered_calls_reach(&api, "hello", before).await;
            assert!(secs > 0.0, "{secs} s");
            // The public endpoint: an HTTP-style call through the proxy.
            let proxy_port = server.proxy.rsplit_once(':').unwrap().1;
            let r = Client::new()
                .get(format!("http://{}/some/path?q=1", server.proxy))
                .header("Host", format!("fn-hello.localhost:{proxy_port}"))
                .timeout(Duration::from_secs(120))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["echo"]["path"], "/some/path", "{v}");
            assert_eq!(v["echo"]["query"]["q"], "1", "{v}");
            metered_calls_reach(&api, "hello", before + 1).await;
            // Private again: the endpoint no longer answers.
            let (st, _) = api
                .call(
                    "PATCH",
                    "/v1/functions/hello",
                    Some(json!({"public": false})),
                )
                .await;
            assert_eq!(st, StatusCode::OK);
            let r = Client::new()
                .get(format!("http://{}/", server.proxy))
                .header("Host", format!("fn-hello.localhost:{proxy_port}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::NOT_FOUND);
        },
    )
    .await;
    step(
        "async invocations run later and are retried; an unknown one is not found",
        async {
            // Asynchronous: queued at once, run by the host's job runner, fetched later; a failing
            // call is tried again `retries` times.
            let (st, queued) = api
                .call(
                    "POST",
                    "/v1/functions/hello/invoke?async=1",
                    Some(json!({"x": "later"})),
                )
                .await;
            assert_eq!(st, StatusCode::ACCEPTED, "{queued}");
            let id = queued["id"].as_str().unwrap().to_owned();
            let done = until_finished(&api, "hello", &id).await;
            assert_eq!(done["status"], "ok", "{done}");
            assert_eq!(done["result"]["echo"], json!({"x": "later"}), "{done}");
            assert_eq!(done["attempts"], 1, "{done}");
            let (st, queued) = api
                .call(
                    "POST",
                    "/v1/functions/hello/invoke?async=1&retries=1",
                    Some(json!({"fail": true})),
                )
                .await;
            assert_eq!(st, StatusCode::ACCEPTED, "{queued}");
            let done = until_finished(&api, "hello", queued["id"].as_str().unwrap()).await;
            assert_eq!(done["status"], "error", "{done}");
            assert_eq!(done["attempts"], 2, "{done}");
            assert_eq!(done["error"]["type"], "ValueError", "{done}");
            let (st, _) = api
                .call("GET", "/v1/functions/hello/invocations/inv-nope", None)
                .await;
            assert_eq!(st, StatusCode::NOT_FOUND);
        },
    )
    .await;
    step(
        "cron: a schedule invokes the function with its payload",
        async {
            // Cron: a schedule whose target is the function, the payload its event.
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/schedules",
                    Some(json!({"name": "tick", "cron": "*/2 * * * * *",
                        "target": {"type": "function", "name": "hello"},
                        "payload": {"from": "cron"}})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            let t = Instant::now();
            let runs = loop {
                let (st, v) = api
                    .call("GET", "/v1/schedules/tick/runs?limit=100", None)
                    .await;
                assert_eq!(st, StatusCode::OK, "{v}");
                let ok: Vec<Value> = v["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r["state"] == "succeeded")
                    .cloned()
                    .collect();
                if ok.len() >= 2 {
                    break ok;
                }
                assert!(t.elapsed() < Duration::from_secs(120), "runs: {v}");
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            assert!(
                runs[0]["output"]
                    .as_str()
                    .unwrap()
                    .contains(r#""from":"cron""#),
                "{runs:?}"
            );
            let (st, _) = api.call("DELETE", "/v1/schedules/tick", None).await;
            assert_eq!(st, StatusCode::NO_CONTENT);
        },
    )
    .await;
    step(
        "failing builds name the cause and leave the live version alone",
        async {
            // Builds that fail name the cause and leave the live version alone.
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/functions/hello/versions",
                    Some(json!({"files": {"main.py": "def handler(event:\n"}})),
                )
                .await;
            assert_eq!(st, StatusCode::ACCEPTED, "{v}");
            let bad = settled(&api, "hello", 2).await;
            assert_eq!(bad["state"], "failed", "{bad}");
            assert!(
                bad["error"].as_str().unwrap().contains("SyntaxError"),
                "{bad}"
            );
            let (st, _) = api
                .call(
                    "POST",
                    "/v1/functions",
                    Some(
                        json!({"name": "nohandler", "runtime": "python", "handler": "main.nope",
                        "files": {"main.py": "def handler(e):\n    return e\n"}}),
                    ),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED);
            let bad = settled(&api, "nohandler", 1).await;
            assert_eq!(bad["state"], "failed", "{bad}");
            assert!(bad["error"].as_str().unwrap().contains("nope"), "{bad}");
            let (st, v) = api
                .call("POST", "/v1/functions/nohandler/invoke", Some(json!({})))
                .await;
            assert_eq!(st, StatusCode::CONFLICT, "{v}");
        },
    )
    .await;
    step(
        "a second version goes live; rollback brings the first back",
        async {
            // A good second version goes live; rollback brings the first back.
            let (st, _) = api
                .call(
                    "POST",
                    "/v1/functions/hello/versions",
                    Some(
                        json!({"files": {"main.py": MAIN_PY.replace("\"v1\"", "\"v2\"")},
                        "dependencies": "six\n"}),
                    ),
                )
                .await;
            assert_eq!(st, StatusCode::ACCEPTED);
            live(&api, "hello", 3).await;
            let v = invoke(&api, "hello", json!(null)).await;
            assert_eq!(v["result"]["version"], "v2", "{v}");
            assert_eq!(v["version"], 3);
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/functions/hello/rollback",
                    Some(json!({"version": 1})),
                )
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            let v = invoke(&api, "hello", json!(null)).await;
            assert_eq!(v["result"]["version"], "v1", "{v}");
            let (_, versions) = api.call("GET", "/v1/functions/hello/versions", None).await;
            let states: Vec<&str> = versions["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["state"].as_str().unwrap())
                .collect();
            assert_eq!(states, ["standby", "failed", "live"], "{versions}");
        },
    )
    .await;
    step("a version from a tarball goes live", async {
        // A version from a tarball of the function's files.
        let r = api
            .c
            .post(format!("{}/v1/functions/hello/versions", server.url))
            .bearer_auth(&server.key)
            .header("Content-Type", "application/gzip")
            .body(tarball(&[
                ("main.py", &MAIN_PY.replace("\"v1\"", "\"v4\"")),
                ("requirements.txt", "six\n"),
            ]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        live(&api, "hello", 4).await;
        let v = invoke(&api, "hello", json!(null)).await;
        assert_eq!(v["result"]["version"], "v4", "{v}");
    })
    .await;
    step(
        "a dependency that does not install fails the build, naming it",
        async {
            // A dependency that does not install fails the build, naming it.
            let (st, _) = api
                .call(
                    "POST",
                    "/v1/functions",
                    Some(
                        json!({"name": "baddeps", "runtime": "python", "handler": "main.handler",
                        "files": {"main.py": "def handler(e):\n    return e\n"},
                        "dependencies": "pandastack-no-such-package-xyz\n"}),
                    ),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED);
            let bad = settled(&api, "baddeps", 1).await;
            assert_eq!(bad["state"], "failed", "{bad}");
            assert!(
                bad["error"]
                    .as_str()
                    .unwrap()
                    .contains("pandastack-no-such-package-xyz"),
                "{bad}"
            );
        },
    )
    .await;
    step(
        "Node.js: a function runs; a restored second instance has its own Math.random",
        async {
            // Node.js.
            let (st, v) = api
                .call(
                    "POST",
                    "/v1/functions",
                    Some(json!({
                        "name": "nodefn",
                        "runtime": "node",
                        "handler": "index.handler",
                        "files": {"index.mjs": NODE_INDEX},
                        "timeout_seconds": 3,
                    })),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            live(&api, "nodefn", 1).await;
            let v = invoke(&api, "nodefn", json!({"a": 2, "b": 3})).await;
            assert_eq!(v["status"], "ok", "{v}");
            assert_eq!(v["cold"], true, "{v}");
            assert_eq!(v["result"]["sum"], 5, "{v}");
            assert!(v["stdout"].as_str().unwrap().contains("node got"), "{v}");
            // Math.random of a second instance restored from the same snapshot differs (V8's own
            // state, cloned with the process, would repeat the first instance's numbers).
            let slow = invoke(&api, "nodefn", json!({"a": 0, "b": 0, "sleep": 20})).await;
            assert_eq!(slow["status"], "timeout", "{slow}");
            let other = invoke(&api, "nodefn", json!({"a": 1, "b": 1})).await;
            assert_eq!(other["cold"], true, "{other}");
            assert_ne!(other["result"]["rand"], v["result"]["rand"], "{other} {v}");
        },
    )
    .await;
    step("delete removes instances, versions and the row", async {
        // Delete: instances, versions and the row go.
        for name in ["hello", "nohandler", "nodefn", "baddeps"] {
            let (st, v) = api
                .call("DELETE", &format!("/v1/functions/{name}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT, "{name}: {v}");
            let (st, _) = api
                .call("GET", &format!("/v1/functions/{name}"), None)
                .await;
            assert_eq!(st, StatusCode::NOT_FOUND);
        }
        assert_eq!(instances(&api, "hello").await, 0);
        assert_eq!(instances(&api, "nodefn").await, 0);
        let (_, list) = api.call("GET", "/v1/functions", None).await;
        assert_eq!(list["data"], json!([]));
    })
    .await;
    drop(server);
    names.clean();
}
