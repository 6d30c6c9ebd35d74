//! The code interpreter over HTTP against a real server and guest: a persistent kernel per
//! context (state survives calls, timeouts and forks), rich results, errors as data, SSE, and
//! bad input. Runs on `minimal` (Python 3, no scientific stack): images come from `_repr_png_`;
//! JavaScript, TypeScript and Bash on `app` (Node.js 20).

mod common;

use base64::Engine;
use common::{free_port, start, Api};
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

async fn run(api: &Api<'_>, id: &str, body: Value) -> Value {
    let (st, v) = api
        .call("POST", &format!("/v1/sandboxes/{id}/code"), Some(body))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

async fn code(api: &Api<'_>, id: &str, code: &str) -> Value {
    run(api, id, json!({ "code": code })).await
}

#[tokio::test(flavor = "multi_thread")]
async fn code_runs_in_a_persistent_kernel() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start(guard.dir.path(), free_port()).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "minimal"})).await;

    // Output, the final expression's value, and state that stays for the next call.
    let v = code(&api, &id, "x = 21\nprint('hi')\nx * 2").await;
    assert_eq!(v["stdout"], "hi\n", "{v}");
    assert_eq!(v["results"][0]["text"], "42", "{v}");
    assert!(v["error"].is_null(), "{v}");
    let v = code(&api, &id, "x + 1").await;
    assert_eq!(v["results"][0]["text"], "22", "{v}");
    // Output of child processes and of stderr is captured too.
    let v = code(
        &api,
        &id,
        "import os, sys\nos.system('echo from-shell')\nprint('oops', file=sys.stderr)",
    )
    .await;
    assert!(
        v["stdout"].as_str().unwrap().contains("from-shell\n"),
        "{v}"
    );
    assert_eq!(v["stderr"], "oops\n", "{v}");

    // An exception is data, with the user's frames only.
    let v = code(&api, &id, "def f():\n    return 1/0\nf()").await;
    assert_eq!(v["error"]["name"], "ZeroDivisionError", "{v}");
    let tb = v["error"]["traceback"].as_str().unwrap();
    assert!(
        tb.contains("return 1/0") && !tb.contains("pandastack-kernel"),
        "{tb}"
    );
    let v = code(&api, &id, "def broken(:").await;
    assert_eq!(v["error"]["name"], "SyntaxError", "{v}");

    // A run over its bound is interrupted; the kernel and its variables stay.
    let v = run(
        &api,
        &id,
        json!({"code": "while True:\n    pass", "timeout_seconds": 2}),
    )
    .await;
    assert_eq!(v["error"]["name"], "TimeoutError", "{v}");
    assert_eq!(code(&api, &id, "x").await["results"][0]["text"], "21");

    // Rich results: an object's PNG (base64) and HTML next to its text.
    let v = code(
        &api,
        &id,
        "class Chart:\n    def _repr_png_(self): return b'\\x89PNG\\r\\n\\x1a\\nfake'\n    def _repr_html_(self): return '<b>chart</b>'\nChart()",
    )
    .await;
    let r = &v["results"][0];
    assert_eq!(r["html"], "<b>chart</b>", "{v}");
    let png = base64::engine::general_purpose::STANDARD
        .decode(r["png"].as_str().unwrap())
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{v}");
    let v = code(&api, &id, "display('a', 2)").await;
    assert_eq!(v["results"].as_array().unwrap().len(), 2, "{v}");

    // Contexts are separate kernels.
    let (st, ctx) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/code/contexts"),
            Some(json!({})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{ctx}");
    let ctx = ctx["id"].as_str().unwrap().to_owned();
    let v = run(
        &api,
        &id,
        json!({"code": "x = 'other'\nx", "context_id": ctx}),
    )
    .await;
    assert_eq!(v["results"][0]["text"], "'other'", "{v}");
    assert_eq!(code(&api, &id, "x").await["results"][0]["text"], "21");
    let (st, _) = api
        .call(
            "DELETE",
            &format!("/v1/sandboxes/{id}/code/contexts/{ctx}"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    let (st, v) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/code"),
            Some(json!({"code": "x", "context_id": ctx})),
        )
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");

    // Streaming: output, result and the end as SSE events.
    let body = server_sse(&api, &id, json!({"code": "print('streamed')\n6 * 7"})).await;
    let (out, res, done) = (
        body.find("event: stdout").unwrap(),
        body.find("event: result").unwrap(),
        body.find("event: done").unwrap(),
    );
    assert!(out < res && res < done, "{body}");
    assert!(
        body.contains("streamed") && body.contains("\"42\""),
        "{body}"
    );

    // A fork child starts with the parent's kernel and variables, then diverges.
    code(&api, &id, "branch = 'parent'").await;
    let (st, v) = api
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({"count": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let child = v["children"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        code(&api, &child, "branch").await["results"][0]["text"],
        "'parent'"
    );
    code(&api, &child, "branch = 'child'").await;
    assert_eq!(
        code(&api, &id, "branch").await["results"][0]["text"],
        "'parent'"
    );

    // Bad input: named fields, no 5xx.
    for (body, field) in [
        (json!({"code": "1", "language": "cobol"}), "language"),
        (json!({"code": "1", "context_id": "../x"}), "context_id"),
        (
            json!({"code": "1", "timeout_seconds": 0}),
            "timeout_seconds",
        ),
        (json!({"cod": "1"}), "cod"),
    ] {
        let (st, v) = api
            .call("POST", &format!("/v1/sandboxes/{id}/code"), Some(body))
            .await;
        assert!(st.is_client_error(), "{st} {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{v}"
        );
    }
    for sb in [&child, &id] {
        let (st, _) = api
            .call("DELETE", &format!("/v1/sandboxes/{sb}"), None)
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
}

async fn server_sse(api: &Api<'_>, id: &str, body: Value) -> String {
    let resp = api
        .c
        .post(format!("{}/v1/sandboxes/{id}/code/stream", api.s.url))
        .bearer_auth(&api.s.key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    resp.text().await.unwrap()
}

/// JavaScript, TypeScript and Bash in a real guest of the `app` template (Debian trixie:
/// Node.js 20 with Debian's acorn and TypeScript): each language's default context keeps its
/// state, JavaScript awaits and imports at the top level and returns its final value,
/// TypeScript's types are removed, Bash keeps its working directory and variables, and a
/// hibernated sandbox wakes with every kernel's state.
#[tokio::test(flavor = "multi_thread")]
async fn javascript_typescript_and_bash_keep_their_state_in_a_guest() {
    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "app");
    let server = start(data, free_port()).await;
    let api = Api {
        s: &server,
        c: Client::new(),
    };
    let id = api.create(json!({"template": "app"})).await;
    let lang = |language: &str, code: &str| json!({"code": code, "language": language});

    let v = run(
        &api,
        &id,
        lang(
            "javascript",
            "import os from \"node:os\";\nconst n = await Promise.resolve(41);\nconsole.log(\"on\", os.platform());\n({ n: n + 1 })",
        ),
    )
    .await;
    assert_eq!(
        (&v["stdout"], &v["results"][0]["json"], &v["error"]),
        (&json!("on linux\n"), &json!({"n": 42}), &Value::Null),
        "{v}"
    );
    let v = run(
        &api,
        &id,
        lang(
            "typescript",
            "interface Box { v: number }\nconst b: Box = { v: 7 };\nb.v * 6",
        ),
    )
    .await;
    assert_eq!(v["results"][0]["text"], "42", "{v}");
    let v = run(&api, &id, lang("bash", "cd /tmp && MARK=kept")).await;
    assert!(v["error"].is_null(), "{v}");

    // Hibernated and woken: each kernel is a guest process, its memory restored.
    api.hibernate(&id).await;
    let v = run(&api, &id, lang("javascript", "n")).await;
    assert_eq!(v["results"][0]["text"], "41", "{v}");
    let v = run(&api, &id, lang("typescript", "b.v")).await;
    assert_eq!(v["results"][0]["text"], "7", "{v}");
    let v = run(&api, &id, lang("bash", "echo \"$PWD $MARK\"")).await;
    assert_eq!(v["stdout"], "/tmp kept\n", "{v}");

    let (st, _) = api
        .call("DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT);
}
