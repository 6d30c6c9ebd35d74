//! The MCP server (`pandastack-mcp`) against the real API of a fake stack (real routes, real
//! guest agents, no QEMU), served on a loopback port as `pandastack server` serves it:
//! - the handler over an in-process stdio-like transport (what `pandastack mcp` runs), driven by
//!   rmcp's client: tools listed with their schemas, a sandbox created, a command run (output
//!   capped and the truncation said), a file written and read back, bad arguments and API
//!   failures as tool errors carrying the API's code and message;
//! - `/mcp` on the API listener: refused (401, error envelope) without a valid key before any
//!   MCP handling; with one, a streamable-HTTP session whose tool calls use that key.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_client::{Client, Config};
use pandastack_mcp::PandaStackMcp;
use pandastack_testkit::fake::{fake_stack, FakeStack, Kernels};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ContentBlock};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Value};
use tower::ServiceExt as _;

/// The fake stack's API with `/mcp` mounted, served on a loopback port: the router (to call
/// in-process) and its base URL (what the MCP handler calls).
async fn serve(s: &FakeStack) -> (axum::Router, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let base = Client::new(Config::new(&url, None)).unwrap();
    let mcp = pandastack_mcp::http_service(base, tokio_util::sync::CancellationToken::new());
    let router = pandastack_api::router_with_service(s.app.clone(), "/mcp", mcp);
    let served = router.clone();
    tokio::spawn(async move { axum::serve(listener, served).await });
    (router, url)
}

/// An rmcp client session with the handler over an in-memory pipe, the handler calling `url`
/// with `key`.
async fn session(url: &str, key: &str) -> RunningService<RoleClient, ClientConfig> {
    let client = Client::new(Config::new(url, Some(key.to_owned()))).unwrap();
    let (server_end, client_end) = tokio::io::duplex(1 << 20);
    tokio::spawn(async move {
        let running = PandaStackMcp::new(client).serve(server_end).await?;
        running.waiting().await.map_err(std::io::Error::other)?;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    });
    ClientConfig::default().serve(client_end).await.unwrap()
}

async fn call(
    peer: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        peer.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)),
    )
    .await
    .expect("the tool call answers")
    .expect("a tool result, not a protocol error")
}

/// All the text of a result.
fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ok(r: CallToolResult) -> Value {
    assert_ne!(r.is_error, Some(true), "tool error: {}", text(&r));
    r.structured_content.expect("structured content")
}

#[tokio::test]
async fn handler_runs_the_tools_against_the_api() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (router, url) = serve(&s).await;
    let peer = session(&url, &s.key).await;

    let tools = peer.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for want in [
        "create_sandbox",
        "run_command",
        "run_code",
        "write_file",
        "fork_sandbox",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let run = tools.iter().find(|t| t.name == "run_command").unwrap();
    assert_eq!(
        run.input_schema["required"],
        json!(["sandbox_id", "command"])
    );

    // The code kernels of this sandbox keep to a directory of their own, killed at the end
    // (outside a VM they would outlive it and share this host's /run).
    let kernels = Kernels(s.dir.path().join("kernels"));
    let sb = ok(call(
        &peer,
        "create_sandbox",
        json!({"template": "fake", "ttl_seconds": 600, "env": {"PANDASTACK_KERNEL_DIR": kernels.0}}),
    )
    .await);
    let id = sb["id"].as_str().unwrap().to_owned();
    assert_eq!(sb["state"], "running");

    let r = ok(call(
        &peer,
        "run_command",
        json!({"sandbox_id": id, "command": "echo out; echo err >&2; exit 3"}),
    )
    .await);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["truncated"], false);

    // Output past the bound keeps both ends and says what was cut.
    let cut = call(
        &peer,
        "run_command",
        json!({"sandbox_id": id, "command": "printf 'a%.0s' $(seq 100); printf 'z%.0s' $(seq 100)", "max_output_bytes": 20}),
    )
    .await;
    let note = text(&cut);
    let r = ok(cut);
    assert_eq!(r["truncated"], true);
    let out = r["stdout"].as_str().unwrap();
    assert!(
        out.starts_with("aaaaaaaaaa[…") && out.ends_with("…]zzzzzzzzzz"),
        "{out}"
    );
    assert!(note.contains("stdout truncated: 200 bytes"), "{note}");

    // Files: written through the API, read back through it (the fake guest shares this host's
    // /tmp, so the path is the sandbox's own).
    let path = format!("/tmp/pandastack-mcp-{id}.txt");
    let w = ok(call(
        &peer,
        "write_file",
        json!({"sandbox_id": id, "path": path, "content": "héllo\n"}),
    )
    .await);
    assert_eq!(w["bytes_written"], 7);
    let r = ok(call(&peer, "read_file", json!({"sandbox_id": id, "path": path})).await);
    assert_eq!(r["content"], "héllo\n");
    assert_eq!(r["truncated"], false);
    let r = ok(call(
        &peer,
        "run_command",
        json!({"sandbox_id": id, "command": format!("cat {path}")}),
    )
    .await);
    assert_eq!(r["stdout"], "héllo\n");
    // Found by name: a glob over the names of /tmp's entries.
    let r = ok(call(
        &peer,
        "list_files",
        json!({"sandbox_id": id, "path": "/tmp", "pattern": format!("pandastack-mcp-{id}.*")}),
    )
    .await);
    assert_eq!(
        (&r["entries"][0]["path"], &r["total"]),
        (&json!(path), &json!(1)),
        "{r}"
    );
    // A signed URL for it works with no key, for that file only.
    let u = ok(call(
        &peer,
        "get_file_url",
        json!({"sandbox_id": id, "path": path, "expires_in_seconds": 60}),
    )
    .await);
    assert_eq!(
        (&u["method"], &u["path"]),
        (&json!("GET"), &json!(path)),
        "{u}"
    );
    let signed = u["url"]
        .as_str()
        .unwrap()
        .strip_prefix(&url)
        .unwrap()
        .to_owned();
    let get = |uri: String| {
        let req = Request::get(uri).body(Body::empty()).unwrap();
        router.clone().oneshot(req)
    };
    let got = get(signed.clone()).await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    let body = got.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], "héllo\n".as_bytes());
    let other = signed.replace(&path, "/etc/passwd");
    assert_eq!(get(other).await.unwrap().status(), StatusCode::FORBIDDEN);
    let _ = std::fs::remove_file(&path);

    // Code in the sandbox's persistent context: a variable survives to the next call.
    let r = ok(call(
        &peer,
        "run_code",
        json!({"sandbox_id": id, "code": "x = 6 * 7"}),
    )
    .await);
    assert_eq!(r["error"], Value::Null, "{r}");
    let r = ok(call(&peer, "run_code", json!({"sandbox_id": id, "code": "x"})).await);
    assert_eq!(r["results"][0]["text"], "42", "{r}");
    // The other languages, each in its own default context.
    for (language, first, then, want) in [
        (
            "javascript",
            "const y = await Promise.resolve(7)",
            "y * 6",
            "42",
        ),
        ("typescript", "const z: number = 40", "z + 2", "42"),
        ("bash", "N=42", "echo $N", ""),
    ] {
        let r = ok(call(
            &peer,
            "run_code",
            json!({"sandbox_id": id, "code": first, "language": language}),
        )
        .await);
        assert_eq!(r["error"], Value::Null, "{language}: {r}");
        let r = ok(call(
            &peer,
            "run_code",
            json!({"sandbox_id": id, "code": then, "language": language}),
        )
        .await);
        if language == "bash" {
            assert_eq!(r["stdout"], "42\n", "{r}");
        } else {
            assert_eq!(r["results"][0]["text"], want, "{language}: {r}");
        }
    }
    let bad = call(
        &peer,
        "run_code",
        json!({"sandbox_id": id, "code": "1", "language": "cobol"}),
    )
    .await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).contains("unknown variant `cobol`"),
        "{}",
        text(&bad)
    );

    // Bad arguments are tool errors the model can read, not protocol errors.
    let bad = call(&peer, "create_sandbox", json!({"template": 5})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).starts_with("error invalid_argument:"),
        "{}",
        text(&bad)
    );
    let bad = call(
        &peer,
        "run_command",
        json!({"sandbox_id": id, "command": "true", "shell": "zsh"}),
    )
    .await;
    assert_eq!(bad.is_error, Some(true));
    assert!(
        text(&bad).contains("unknown field `shell`"),
        "{}",
        text(&bad)
    );
    let bad = call(
        &peer,
        "read_file",
        json!({"sandbox_id": id, "path": "relative.txt"}),
    )
    .await;
    assert!(text(&bad).contains("not absolute"), "{}", text(&bad));

    // An API failure carries the API's code and message.
    let gone = call(
        &peer,
        "kill_sandbox",
        json!({"sandbox_id": "sb_doesnotexist"}),
    )
    .await;
    assert_eq!(gone.is_error, Some(true));
    let t = text(&gone);
    assert!(
        t.starts_with("error sandbox_not_found: ") && t.contains("HTTP 404"),
        "{t}"
    );
    let e = gone.structured_content.unwrap();
    assert_eq!(e["error"]["code"], "sandbox_not_found");
    assert_eq!(e["error"]["status"], 404);

    ok(call(&peer, "kill_sandbox", json!({"sandbox_id": id})).await);
    let listed = ok(call(&peer, "list_sandboxes", json!({"state": "running"})).await);
    assert!(
        listed["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["id"] != id.as_str()),
        "{listed}"
    );
    peer.cancel().await.unwrap();
}

/// A request to `/mcp`, with `key` as its bearer key if given.
fn mcp_request(key: Option<&str>, session: Option<&str>, body: Value) -> Request<Body> {
    // `Host` as every HTTP/1.1 request has it (rmcp refuses a request without one).
    let mut req = Request::post("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    if let Some(s) = session {
        req = req
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    req.body(Body::from(body.to_string())).unwrap()
}

/// The JSON-RPC message answering request `id` in a response (JSON, or an SSE stream read until
/// that message arrives).
async fn rpc_answer(resp: axum::response::Response, id: u64) -> Value {
    let mut body = resp.into_body();
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        for line in buf.lines() {
            let data = line.strip_prefix("data:").unwrap_or(line).trim();
            if let Ok(v) = serde_json::from_str::<Value>(data) {
                if v["id"] == id {
                    return v;
                }
            }
        }
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("an answer within 30 s")
            .expect("the stream has the answer")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buf.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

#[tokio::test]
async fn http_endpoint_needs_a_key_and_calls_with_it() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (router, _) = serve(&s).await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "mcp_fast", "version": "0"}}});

    // No key, or a wrong one: 401 in the API's envelope, before any MCP handling.
    for key in [None, Some("pds_not_a_key")] {
        let resp = router
            .clone()
            .oneshot(mcp_request(key, None, init.clone()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
        assert!(resp.headers().contains_key("x-request-id"));
        let body: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    }

    // With the key: a session, whose tool calls reach the API with that key.
    let resp = router
        .clone()
        .oneshot(mcp_request(Some(&s.key), None, init))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer = rpc_answer(resp, 1).await;
    assert_eq!(
        answer["result"]["serverInfo"]["name"], "pandastack",
        "{answer}"
    );
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let resp = router
        .clone()
        .oneshot(mcp_request(Some(&s.key), Some(&session), note))
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "list_sandboxes", "arguments": {}}});
    let resp = router
        .clone()
        .oneshot(mcp_request(Some(&s.key), Some(&session), list))
        .await
        .unwrap();
    let answer = rpc_answer(resp, 2).await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["sandboxes"],
        json!([]),
        "{answer}"
    );

    let kill = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "kill_sandbox", "arguments": {"sandbox_id": "sb_nope"}}});
    let resp = router
        .clone()
        .oneshot(mcp_request(Some(&s.key), Some(&session), kill))
        .await
        .unwrap();
    let answer = rpc_answer(resp, 3).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["error"]["code"], "sandbox_not_found",
        "{answer}"
    );

    // The session does not outlive the key: a request of it without the key is refused.
    let again = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"});
    let resp = router
        .clone()
        .oneshot(mcp_request(None, Some(&session), again))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
}
