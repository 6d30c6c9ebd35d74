//! The web console (issue #40): sign-in exchanges a key for an HttpOnly, SameSite=Strict
//! session cookie and a CSRF token (a wrong key gets neither); the cookie authenticates `/v1`
//! as its key — reads freely, changes only with the token and from this origin, the key's
//! scopes still applying — until sign-out, the session's expiry or the key's revocation; the
//! audit log names the key. `GET /` is the app under a strict CSP, its assets at build-hash
//! URLs cached for good and gzipped when asked.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};
use tower::ServiceExt;

use super::as_key;

/// A request from a browser: the session cookie, and the CSRF token and `Origin` if given.
struct Browser<'a> {
    cookie: &'a str,
    csrf: Option<&'a str>,
    origin: Option<&'a str>,
}

impl Browser<'_> {
    async fn call(
        &self,
        s: &FakeStack,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "console.test:8080")
            .header(header::COOKIE, format!("theme=dark; {}", self.cookie));
        if let Some(t) = self.csrf {
            req = req.header("x-csrf-token", t);
        }
        if let Some(o) = self.origin {
            req = req.header(header::ORIGIN, o);
        }
        let body = match body {
            Some(b) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(b.to_string())
            }
            None => Body::empty(),
        };
        let resp = s
            .router
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }
}

/// Signs in with `key`: the answer's status, `Set-Cookie` and body.
async fn sign_in(s: &FakeStack, key: &str) -> (StatusCode, Option<String>, Value) {
    let req = Request::builder()
        .method("POST")
        .uri("/console/session")
        .header(header::HOST, "console.test:8080")
        .header(header::ORIGIN, "http://console.test:8080")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "api_key": key }).to_string()))
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let cookie = resp
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        cookie,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A signed-in browser's `name=value` cookie and CSRF token.
async fn session(s: &FakeStack, key: &str) -> (String, String) {
    let (st, cookie, v) = sign_in(s, key).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let cookie = cookie.expect("Set-Cookie");
    let pair = cookie.split(';').next().unwrap().trim().to_owned();
    (pair, v["csrf_token"].as_str().unwrap().to_owned())
}

async fn sandbox_count(s: &FakeStack) -> usize {
    let (st, v) = as_key(s, &s.key, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"].as_array().unwrap().len()
}

fn refused(r: &(StatusCode, Value), status: StatusCode, words: &str) {
    assert_eq!(r.0, status, "{}", r.1);
    let msg = r.1["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains(words), "{words:?} not in {msg:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_cookie_acts_as_its_key_with_csrf_and_origin_checks() {
    let s = fake_stack(Duration::from_secs(10)).await;

    // A wrong key: 401 in the envelope, no cookie.
    let (st, cookie, v) = sign_in(&s, "pds_0000").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized", "{v}");
    assert!(cookie.is_none(), "{cookie:?}");

    // Sign-in: the cookie is HttpOnly, SameSite=Strict, for the whole site, and expires.
    let (st, cookie, v) = sign_in(&s, &s.key).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let cookie = cookie.expect("Set-Cookie");
    for attr in [
        "ps_session=pss_",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attr), "{attr} not in {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let csrf = v["csrf_token"].as_str().unwrap().to_owned();
    assert_eq!(csrf.len(), 64, "{v}");
    assert!(v["workspace_id"].as_str().unwrap().starts_with("ws"), "{v}");
    assert!(v["expires_at"].is_string() && v["scopes"].is_array(), "{v}");
    assert!(
        !v.to_string().contains(&s.key),
        "the key is not echoed: {v}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();

    let plain = Browser {
        cookie: &pair,
        csrf: None,
        origin: None,
    };
    let good = Browser {
        cookie: &pair,
        csrf: Some(&csrf),
        origin: Some("http://console.test:8080"),
    };
    let wrong = Browser {
        cookie: &pair,
        csrf: Some("0123"),
        origin: None,
    };
    let cross = Browser {
        cookie: &pair,
        csrf: Some(&csrf),
        origin: Some("http://evil.test"),
    };

    // The cookie reads; the session answers the same as sign-in did.
    let (st, v) = plain.call(&s, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = plain.call(&s, "GET", "/console/session", None).await;
    assert_eq!(
        (st, v["csrf_token"].as_str()),
        (StatusCode::OK, Some(csrf.as_str())),
        "{v}"
    );

    // The browser's EventSource of the event stream is served by the cookie.
    let events = Request::builder()
        .uri("/v1/events")
        .header(header::HOST, "console.test:8080")
        .header(header::COOKIE, pair.clone())
        .header(header::ACCEPT, "text/event-stream")
        .body(Body::empty())
        .unwrap();
    let resp = s.router.clone().oneshot(events).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let ct = resp.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    drop(resp);

    // A change without the token, with a wrong one, or from another site is refused and makes
    // nothing.
    let body = || Some(json!({"template": "fake"}));
    refused(
        &plain.call(&s, "POST", "/v1/sandboxes", body()).await,
        StatusCode::FORBIDDEN,
        "X-CSRF-Token",
    );
    refused(
        &wrong.call(&s, "POST", "/v1/sandboxes", body()).await,
        StatusCode::FORBIDDEN,
        "X-CSRF-Token",
    );
    refused(
        &cross.call(&s, "POST", "/v1/sandboxes", body()).await,
        StatusCode::FORBIDDEN,
        "Origin",
    );
    refused(
        &cross.call(&s, "GET", "/v1/sandboxes", None).await,
        StatusCode::FORBIDDEN,
        "Origin",
    );
    assert_eq!(sandbox_count(&s).await, 0);

    // With the token (and this origin) it works, and the audit log names the key.
    let (st, v) = good.call(&s, "POST", "/v1/sandboxes", body()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(sandbox_count(&s).await, 1);
    s.app.audit.flush().await;
    let (_, log) = as_key(&s, &s.key, "GET", "/v1/audit", None).await;
    let key_id = s.store.keys().verify(&s.key).await.unwrap().unwrap().id;
    let row = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == format!("sandboxes/{id}").as_str())
        .unwrap_or_else(|| panic!("no audit row for {id}: {log}"));
    assert_eq!(row["key_id"], key_id.as_str(), "{row}");
    assert_eq!(row["status"], 201, "{row}");

    // A WebSocket upgrade by cookie needs this origin.
    let ws = |origin: Option<&str>| {
        let mut r = Request::builder()
            .uri(format!("/v1/sandboxes/{id}/pty"))
            .header(header::HOST, "console.test:8080")
            .header(header::COOKIE, pair.clone())
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, "websocket")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==");
        if let Some(o) = origin {
            r = r.header(header::ORIGIN, o);
        }
        r.body(Body::empty()).unwrap()
    };
    for origin in [None, Some("http://evil.test")] {
        let resp = s.router.clone().oneshot(ws(origin)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::FORBIDDEN, "{origin:?}");
    }

    // The token deletes too; sign-out needs it, then revokes the cookie.
    let (st, v) = good
        .call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    refused(
        &plain.call(&s, "DELETE", "/console/session", None).await,
        StatusCode::FORBIDDEN,
        "X-CSRF-Token",
    );
    let (st, v) = good.call(&s, "DELETE", "/console/session", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
    refused(
        &plain.call(&s, "GET", "/v1/sandboxes", None).await,
        StatusCode::UNAUTHORIZED,
        "sign in",
    );
    refused(
        &plain.call(&s, "GET", "/console/session", None).await,
        StatusCode::UNAUTHORIZED,
        "sign in",
    );
    // The key itself is untouched.
    assert_eq!(sandbox_count(&s).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_ends_with_its_expiry_or_its_key_and_keeps_its_keys_scopes() {
    let s = fake_stack(Duration::from_secs(10)).await;

    // Expired: a session made to last 1 ms.
    let key = s.store.keys().verify(&s.key).await.unwrap().unwrap();
    let (_, secret) = s
        .store
        .sessions()
        .create(&key.id, pandastack_store::now_ms(), 1)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let pair = format!("ps_session={secret}");
    let b = Browser {
        cookie: &pair,
        csrf: None,
        origin: None,
    };
    refused(
        &b.call(&s, "GET", "/v1/sandboxes", None).await,
        StatusCode::UNAUTHORIZED,
        "expired",
    );

    // A read-only key's session reads but cannot create, even with the token.
    let (st, v) = as_key(
        &s,
        &s.key,
        "POST",
        "/v1/keys",
        Some(json!({"name": "ro", "scopes": ["*:read"]})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (ro_id, ro) = (
        v["id"].as_str().unwrap().to_owned(),
        v["secret"].as_str().unwrap().to_owned(),
    );
    let (pair, csrf) = session(&s, &ro).await;
    let b = Browser {
        cookie: &pair,
        csrf: Some(&csrf),
        origin: None,
    };
    let (st, v) = b.call(&s, "GET", "/v1/sandboxes", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    refused(
        &b.call(
            &s,
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "fake"})),
        )
        .await,
        StatusCode::FORBIDDEN,
        "sandboxes:write",
    );
    assert_eq!(sandbox_count(&s).await, 0);

    // Its key revoked: the session is 401.
    let (st, v) = as_key(&s, &s.key, "DELETE", &format!("/v1/keys/{ro_id}"), None).await;
    assert!(st.is_success(), "{st} {v}");
    refused(
        &b.call(&s, "GET", "/v1/sandboxes", None).await,
        StatusCode::UNAUTHORIZED,
        "revoked",
    );
    refused(
        &b.call(&s, "GET", "/console/session", None).await,
        StatusCode::UNAUTHORIZED,
        "revoked",
    );
    // Behind an HTTPS proxy the cookie is Secure.
    let req = Request::builder()
        .method("POST")
        .uri("/console/session")
        .header("x-forwarded-proto", "https")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "api_key": s.key }).to_string()))
        .unwrap();
    let resp = s.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let cookie = resp.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");

    // A revoked key cannot sign in either.
    let (st, cookie, _) = sign_in(&s, &ro).await;
    assert_eq!((st, cookie), (StatusCode::UNAUTHORIZED, None));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_is_served_with_csp_hashed_assets_and_gzip() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let get = |path: String, gzip: bool| {
        let mut r = Request::builder().uri(path);
        if gzip {
            r = r.header(header::ACCEPT_ENCODING, "gzip, br");
        }
        s.router.clone().oneshot(r.body(Body::empty()).unwrap())
    };
    let resp = get("/".into(), false).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let h = resp.headers().clone();
    assert!(h[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert_eq!(h[header::CACHE_CONTROL], "no-cache");
    let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let page = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(!page.contains("<script>"), "no inline script: {page}");

    // Every asset the page names is at a build-hash URL, cached for good, gzipped when asked.
    let urls: Vec<String> = page
        .split(['"', '\''])
        .filter(|p| p.starts_with("/console/assets/"))
        .map(str::to_owned)
        .collect();
    assert!(urls.iter().any(|u| u.ends_with("/app.js")), "{page}");
    assert!(urls.iter().any(|u| u.ends_with("/app.css")), "{page}");
    for url in &urls {
        let build = url.split('/').nth(3).unwrap();
        assert!(
            build.len() >= 8 && build.bytes().all(|b| b.is_ascii_hexdigit()),
            "{url}"
        );
        let resp = get(url.clone(), true).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{url}");
        let h = resp.headers();
        assert_eq!(
            h[header::CACHE_CONTROL],
            "public, max-age=31536000, immutable",
            "{url}"
        );
        assert_eq!(h[header::CONTENT_ENCODING], "gzip", "{url}");
        assert!(h.contains_key(header::CONTENT_SECURITY_POLICY), "{url}");
        let want = if url.ends_with(".js") {
            "text/javascript"
        } else if url.ends_with(".svg") {
            "image/svg+xml"
        } else {
            "text/css"
        };
        assert!(
            h[header::CONTENT_TYPE].to_str().unwrap().starts_with(want),
            "{url}"
        );
        let zipped = resp.into_body().collect().await.unwrap().to_bytes();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&zipped[..]), &mut text)
            .unwrap();
        assert!(!text.is_empty(), "{url}");
        // Without Accept-Encoding: the plain file.
        let resp = get(url.clone(), false).await.unwrap();
        assert!(
            !resp.headers().contains_key(header::CONTENT_ENCODING),
            "{url}"
        );
    }
    // Every module the app imports is there, and so is every page its router names: walk the
    // import graph from app.js (static `from "./…"` and dynamic `import("./…")`), then the
    // router's table (`["pattern", "module"]` → pages/<module>.js). A missing file would be a
    // page that fails to load in the browser.
    let build = urls[0].split('/').nth(3).unwrap().to_owned();
    let fetch = |f: String| {
        let url = format!("/console/assets/{build}/{f}");
        let router = s.router.clone();
        async move {
            let resp = router
                .oneshot(Request::builder().uri(url).body(Body::empty()).unwrap())
                .await
                .unwrap();
            let status = resp.status();
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, String::from_utf8_lossy(&body).into_owned())
        }
    };
    let (_, app) = fetch("app.js".into()).await;
    // The router's table: lines `  ["pattern", "module"],`.
    let pages: Vec<String> = app
        .lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("[\"")?.strip_suffix("\"],")?;
            let (_, module) = l.split_once("\", \"")?;
            Some(format!("pages/{module}.js"))
        })
        .collect();
    assert!(pages.len() >= 9, "{pages:?}");
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec!["app.js".to_owned()];
    todo.extend(pages.iter().cloned());
    while let Some(f) = todo.pop() {
        if !seen.insert(f.clone()) {
            continue;
        }
        let (status, text) = fetch(f.clone()).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{f} (console/vendor/ comes from scripts/console-deps.sh)"
        );
        let dir = f.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        for spec in relative_imports(&text) {
            let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
            for seg in spec.split('/') {
                match seg {
                    "." => {}
                    ".." => {
                        parts.pop();
                    }
                    s => parts.push(s),
                }
            }
            todo.push(parts.join("/"));
        }
    }
    for f in [
        "ui.js",
        "events.js",
        "terminal.js",
        "vendor/xterm.mjs",
        "chart.js",
    ] {
        assert!(seen.contains(f), "{f} not reached: {seen:?}");
    }
    let resp = get(format!("/console/assets/{build}/nope.js"), false)
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

/// `--console-listen`: the API listener's router without the console answers `/` and the
/// console's routes `404`, and still serves `/v1`; the console listener's serves both.
#[tokio::test(flavor = "multi_thread")]
async fn a_listener_without_the_console_serves_the_api_only() {
    let s = fake_stack(Duration::from_secs(5)).await;
    let svc = tower::service_fn(|_req: axum::extract::Request| async {
        Ok::<_, std::convert::Infallible>(StatusCode::NO_CONTENT)
    });
    let get = |router: axum::Router, path: &'static str, key: Option<String>| async move {
        let mut req = Request::builder().uri(path);
        if let Some(k) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {k}"));
        }
        router
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap()
            .status()
    };
    let api_only = pandastack_api::listener_router(s.app.clone(), "/mcp", svc, false);
    let with_console = pandastack_api::listener_router(s.app.clone(), "/mcp", svc, true);
    let key = Some(s.key.clone());
    assert_eq!(
        get(api_only.clone(), "/", None).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(api_only.clone(), "/console/session", None).await,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(api_only.clone(), "/v1/sandboxes", key.clone()).await,
        StatusCode::OK
    );
    assert_eq!(get(with_console.clone(), "/", None).await, StatusCode::OK);
    assert_eq!(
        get(with_console.clone(), "/console/session", None).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        get(with_console, "/v1/sandboxes", key).await,
        StatusCode::OK
    );
}

/// The relative module specifiers of a script: `from "./x.js"` and `import("./x.js")` (a
/// specifier built at run time, with `${…}`, is left out).
fn relative_imports(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for opener in ["from \"", "import(\""] {
        let mut rest = text;
        while let Some(i) = rest.find(opener) {
            rest = &rest[i + opener.len()..];
            let Some(end) = rest.find('"') else { break };
            let spec = &rest[..end];
            if (spec.starts_with("./") || spec.starts_with("../")) && !spec.contains("${") {
                out.push(spec.to_owned());
            }
        }
    }
    out
}
