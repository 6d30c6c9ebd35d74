//! Members and the audit log (issue #42).
//!
//! Members: a member's key can do no more than the member's role allows whatever its scopes
//! say, and the refusal names the role and the scope; a role change applies to the member's
//! keys at once; removing a member revokes its keys; only an owner touches an owner; the last
//! owner stays; members see only their own keys.
//!
//! Audit: every state-changing call of a key is a row (who, what, which resource, result,
//! source, when) — refused ones too — reads are not; no secret of a request or a response
//! reaches the log; only keys that may read the audit log read it, a page at a time, and
//! another workspace's rows are never seen.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::{json, Value};

use super::answer;

/// A call with `key`, from `from` (as the server's listener would say).
async fn as_key_from(
    s: &FakeStack,
    key: &str,
    from: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = super::keyed(key, method, path, body);
    let peer: SocketAddr = format!("{from}:40000").parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    answer(s, req).await
}

async fn as_key(
    s: &FakeStack,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    as_key_from(s, key, "192.0.2.7", method, path, body).await
}

fn ok(r: &(StatusCode, Value), want: StatusCode) -> Value {
    assert_eq!(r.0, want, "{}", r.1);
    r.1.clone()
}

fn refused(r: &(StatusCode, Value), words: &[&str]) {
    assert_eq!(r.0, StatusCode::FORBIDDEN, "{}", r.1);
    let msg = r.1["error"]["message"].as_str().unwrap();
    for w in words {
        assert!(msg.contains(w), "{w:?} not in {msg}");
    }
}

/// A member with `role` and a key for it made by `maker`; (member id, key secret).
async fn member_with_key(s: &FakeStack, maker: &str, email: &str, role: &str) -> (String, String) {
    let m = ok(
        &as_key(
            s,
            maker,
            "POST",
            "/v1/members",
            Some(json!({"name": email, "email": email, "role": role})),
        )
        .await,
        StatusCode::CREATED,
    );
    let id = m["id"].as_str().unwrap().to_owned();
    let k = ok(
        &as_key(
            s,
            maker,
            "POST",
            "/v1/keys",
            Some(json!({"name": format!("{role} key"), "member_id": id})),
        )
        .await,
        StatusCode::CREATED,
    );
    assert_eq!(k["member_id"], id.as_str(), "{k}");
    assert_eq!(k["role"], role, "{k}");
    (id, k["secret"].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_members_keys_do_what_the_role_allows() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (viewer, viewer_key) = member_with_key(&s, &s.key, "vi@example.org", "viewer").await;
    let (_dev, dev_key) = member_with_key(&s, &s.key, "dev@example.org", "developer").await;

    // A viewer reads and is refused a create, naming the role and the scope; nothing is made.
    ok(
        &as_key(&s, &viewer_key, "GET", "/v1/sandboxes", None).await,
        StatusCode::OK,
    );
    let create = json!({"template": "fake"});
    refused(
        &as_key(
            &s,
            &viewer_key,
            "POST",
            "/v1/sandboxes",
            Some(create.clone()),
        )
        .await,
        &["viewer", "sandboxes:write"],
    );
    let list = ok(
        &as_key(&s, &s.key, "GET", "/v1/sandboxes", None).await,
        StatusCode::OK,
    );
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");

    // A developer creates and runs, but neither manages members nor reads the audit log.
    let sb = ok(
        &as_key(&s, &dev_key, "POST", "/v1/sandboxes", Some(create.clone())).await,
        StatusCode::CREATED,
    );
    let id = sb["id"].as_str().unwrap();
    let run = ok(
        &as_key(
            &s,
            &dev_key,
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "echo hi"})),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(run["stdout"], "hi\n", "{run}");
    refused(
        &as_key(&s, &dev_key, "GET", "/v1/audit", None).await,
        &["developer", "audit:read"],
    );
    refused(
        &as_key(
            &s,
            &dev_key,
            "POST",
            "/v1/members",
            Some(json!({"name": "x", "email": "x@example.org", "role": "viewer"})),
        )
        .await,
        &["members:write"],
    );
    // ... nor makes keys for another member; its own keys are the only ones it sees.
    refused(
        &as_key(
            &s,
            &dev_key,
            "POST",
            "/v1/keys",
            Some(json!({"name": "k", "member_id": viewer})),
        )
        .await,
        &["member_id"],
    );
    let own = ok(
        &as_key(
            &s,
            &dev_key,
            "POST",
            "/v1/keys",
            Some(json!({"name": "mine"})),
        )
        .await,
        StatusCode::CREATED,
    );
    assert_eq!(
        own["role"], "developer",
        "a key inherits its maker's member: {own}"
    );
    let keys = ok(
        &as_key(&s, &dev_key, "GET", "/v1/keys", None).await,
        StatusCode::OK,
    );
    let names: Vec<&str> = keys["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["developer key", "mine"], "{keys}");
    let all = ok(
        &as_key(&s, &s.key, "GET", "/v1/keys", None).await,
        StatusCode::OK,
    );
    let viewer_key_id = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "viewer key")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        as_key(
            &s,
            &dev_key,
            "DELETE",
            &format!("/v1/keys/{viewer_key_id}"),
            None
        )
        .await
        .0,
        StatusCode::NOT_FOUND,
        "a developer cannot revoke another member's key"
    );

    // A role change applies to the member's keys at once.
    let m = ok(
        &as_key(
            &s,
            &s.key,
            "PATCH",
            &format!("/v1/members/{viewer}"),
            Some(json!({"role": "developer"})),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(m["role"], "developer");
    assert_eq!(m["active_keys"], 1);
    let sb2 = ok(
        &as_key(&s, &viewer_key, "POST", "/v1/sandboxes", Some(create)).await,
        StatusCode::CREATED,
    );

    // Removing the member revokes its keys.
    assert_eq!(
        as_key(&s, &s.key, "DELETE", &format!("/v1/members/{viewer}"), None)
            .await
            .0,
        StatusCode::NO_CONTENT
    );
    let gone = as_key(&s, &viewer_key, "GET", "/v1/sandboxes", None).await;
    assert_eq!(gone.0, StatusCode::UNAUTHORIZED, "{}", gone.1);
    for sb in [&sb, &sb2] {
        let id = sb["id"].as_str().unwrap();
        ok(
            &as_key(&s, &s.key, "DELETE", &format!("/v1/sandboxes/{id}"), None).await,
            StatusCode::NO_CONTENT,
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_an_owner_touches_an_owner_and_the_last_one_stays() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (owner, owner_key) = member_with_key(&s, &s.key, "own@example.org", "owner").await;
    let (admin, admin_key) = member_with_key(&s, &owner_key, "adm@example.org", "admin").await;

    // An admin manages members and reads the audit log, but makes, changes or removes no owner.
    ok(
        &as_key(&s, &admin_key, "GET", "/v1/audit", None).await,
        StatusCode::OK,
    );
    let (dev, _) = member_with_key(&s, &admin_key, "d@example.org", "developer").await;
    refused(
        &as_key(
            &s,
            &admin_key,
            "POST",
            "/v1/members",
            Some(json!({"name": "o2", "email": "o2@example.org", "role": "owner"})),
        )
        .await,
        &["owner"],
    );
    refused(
        &as_key(
            &s,
            &admin_key,
            "PATCH",
            &format!("/v1/members/{dev}"),
            Some(json!({"role": "owner"})),
        )
        .await,
        &["owner"],
    );
    refused(
        &as_key(
            &s,
            &admin_key,
            "DELETE",
            &format!("/v1/members/{owner}"),
            None,
        )
        .await,
        &["owner"],
    );
    refused(
        &as_key(
            &s,
            &admin_key,
            "POST",
            "/v1/keys",
            Some(json!({"name": "k", "member_id": owner})),
        )
        .await,
        &["owner"],
    );
    // An admin may rename a member without touching roles.
    ok(
        &as_key(
            &s,
            &admin_key,
            "PATCH",
            &format!("/v1/members/{dev}"),
            Some(json!({"name": "Dee"})),
        )
        .await,
        StatusCode::OK,
    );

    // The last owner keeps the role and stays; with a second owner it can go.
    let last = as_key(
        &s,
        &owner_key,
        "PATCH",
        &format!("/v1/members/{owner}"),
        Some(json!({"role": "admin"})),
    )
    .await;
    assert_eq!(last.0, StatusCode::CONFLICT, "{}", last.1);
    assert_eq!(
        as_key(
            &s,
            &owner_key,
            "DELETE",
            &format!("/v1/members/{owner}"),
            None
        )
        .await
        .0,
        StatusCode::CONFLICT
    );
    ok(
        &as_key(
            &s,
            &owner_key,
            "PATCH",
            &format!("/v1/members/{admin}"),
            Some(json!({"role": "owner"})),
        )
        .await,
        StatusCode::OK,
    );
    assert_eq!(
        as_key(
            &s,
            &admin_key,
            "DELETE",
            &format!("/v1/members/{owner}"),
            None
        )
        .await
        .0,
        StatusCode::NO_CONTENT
    );

    // Bad input is the caller's error, naming the field; an email is taken once.
    for (body, field) in [
        (
            json!({"name": "x", "email": "nope", "role": "viewer"}),
            "email",
        ),
        (
            json!({"name": "", "email": "a@b.org", "role": "viewer"}),
            "name",
        ),
        (
            json!({"name": "x", "email": "a@b.org", "role": "boss"}),
            "`boss`",
        ),
    ] {
        let r = as_key(&s, &s.key, "POST", "/v1/members", Some(body)).await;
        assert_eq!(r.0, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.1);
        assert!(
            r.1["error"]["message"].as_str().unwrap().contains(field),
            "{}",
            r.1
        );
    }
    let dup = as_key(
        &s,
        &s.key,
        "POST",
        "/v1/members",
        Some(json!({"name": "again", "email": "D@Example.org", "role": "viewer"})),
    )
    .await;
    assert_eq!(dup.0, StatusCode::CONFLICT, "{}", dup.1);
    let missing = as_key(
        &s,
        &s.key,
        "PATCH",
        "/v1/members/mem-nope",
        Some(json!({"name": "x"})),
    )
    .await;
    assert_eq!(missing.0, StatusCode::NOT_FOUND, "{}", missing.1);
}

/// Every row of the workspace's audit log, newest first, read with `key` a page of 2 at a time.
async fn audit_rows(s: &FakeStack, key: &str, query: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/audit?limit=2{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = ok(&as_key(s, key, "GET", &path, None).await, StatusCode::OK);
        out.extend(page["data"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return out,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_change_is_audited_and_no_secret_is() {
    let s = fake_stack(Duration::from_secs(10)).await;
    // A key with a secret in its answer, a refused create, a create with an env secret, a
    // patch, an exec and a delete; reads in between.
    let made = ok(
        &as_key(
            &s,
            &s.key,
            "POST",
            "/v1/keys",
            Some(json!({"name": "reader", "scopes": ["sandboxes:read"]})),
        )
        .await,
        StatusCode::CREATED,
    );
    let reader = made["secret"].as_str().unwrap().to_owned();
    let reader_id = made["id"].as_str().unwrap().to_owned();
    let create = json!({"template": "fake", "env": {"TOKEN": "hunter2-env-secret"}});
    refused(
        &as_key_from(
            &s,
            &reader,
            "198.51.100.9",
            "POST",
            "/v1/sandboxes",
            Some(create.clone()),
        )
        .await,
        &["sandboxes:write"],
    );
    let sb = ok(
        &as_key(&s, &s.key, "POST", "/v1/sandboxes", Some(create)).await,
        StatusCode::CREATED,
    );
    let id = sb["id"].as_str().unwrap().to_owned();
    ok(
        &as_key(&s, &s.key, "GET", &format!("/v1/sandboxes/{id}"), None).await,
        StatusCode::OK,
    );
    ok(
        &as_key(
            &s,
            &s.key,
            "PATCH",
            &format!("/v1/sandboxes/{id}"),
            Some(json!({"metadata": {"task": "audit"}})),
        )
        .await,
        StatusCode::OK,
    );
    ok(
        &as_key(
            &s,
            &s.key,
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"cmd": "echo hunter2-cmd-secret"})),
        )
        .await,
        StatusCode::OK,
    );
    let missing = as_key(&s, &s.key, "DELETE", "/v1/sandboxes/sb-nope", None).await;
    assert_eq!(missing.0, StatusCode::NOT_FOUND);
    ok(
        &as_key(&s, &s.key, "DELETE", &format!("/v1/sandboxes/{id}"), None).await,
        StatusCode::NO_CONTENT,
    );

    // A key that may read sandboxes only may not read the audit log: that needs audit:read.
    refused(
        &as_key(&s, &reader, "GET", "/v1/audit", None).await,
        &["audit:read"],
    );

    let rows = audit_rows(&s, &s.key, "").await;
    let seen: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap().to_owned(),
                r["resource"].as_str().unwrap().to_owned(),
                r["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        ("delete_sandbox", format!("sandboxes/{id}"), "ok"),
        (
            "delete_sandbox",
            "sandboxes/sb-nope".to_owned(),
            "sandbox_not_found",
        ),
        ("exec", format!("sandboxes/{id}"), "ok"),
        ("update_sandbox", format!("sandboxes/{id}"), "ok"),
        ("create_sandbox", format!("sandboxes/{id}"), "ok"),
        ("create_sandbox", "sandboxes".to_owned(), "forbidden"),
        ("create_key", format!("keys/{reader_id}"), "ok"),
    ]
    .into_iter()
    .map(|(a, r, x)| (a.to_owned(), r, x.to_owned()))
    .collect();
    // Operation ids as the document names them.
    let doc = ok(
        &as_key(&s, &s.key, "GET", "/v1/openapi.json", None).await,
        StatusCode::OK,
    );
    for (action, _, _) in &want {
        assert!(
            doc.to_string()
                .contains(&format!("\"operationId\":\"{action}\"")),
            "{action} is not an operation of the document"
        );
    }
    assert_eq!(seen, want, "{rows:#?}");
    let refused_row = &rows[5];
    assert_eq!(refused_row["key_id"], reader_id.as_str());
    assert_eq!(refused_row["key_name"], "reader");
    assert_eq!(refused_row["source"], "198.51.100.9");
    assert_eq!(refused_row["status"], 403);
    assert_eq!(rows[0]["source"], "192.0.2.7");
    assert_eq!(rows[0]["method"], "DELETE");
    assert_eq!(rows[0]["route"], "/v1/sandboxes/{id}");
    assert!(rows[0]["request_id"].as_str().unwrap().starts_with("req_"));
    let text = serde_json::to_string(&rows).unwrap();
    for secret in ["hunter2", &reader, &made["prefix"].as_str().unwrap()[4..]] {
        assert!(
            !text.contains(secret),
            "{secret} reached the audit log: {text}"
        );
    }

    // Filters narrow it.
    let by_key = audit_rows(&s, &s.key, &format!("&key_id={reader_id}")).await;
    assert_eq!(by_key.len(), 1);
    let by_action = audit_rows(&s, &s.key, "&action=create_sandbox").await;
    assert_eq!(by_action.len(), 2);
    let by_resource = audit_rows(&s, &s.key, &format!("&resource_id={id}")).await;
    assert_eq!(by_resource.len(), 4);
    let later = audit_rows(&s, &s.key, "&since=2999-01-01T00:00:00Z").await;
    assert!(later.is_empty());
    for bad in ["?since=yesterday", "?cursor=nope", "?limit=0"] {
        let r = as_key(&s, &s.key, "GET", &format!("/v1/audit{bad}"), None).await;
        assert_eq!(r.0, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", r.1);
    }

    // Another workspace sees none of it.
    let (_, _, other) = s
        .store
        .keys()
        .create_workspace_with_key("other", 10, 60)
        .await
        .unwrap();
    assert!(audit_rows(&s, &other, "").await.is_empty());

    // Rows past the retention go.
    let pruned = s
        .store
        .audit()
        .prune(pandastack_store::now_ms() + 1)
        .await
        .unwrap();
    assert_eq!(pruned, rows.len() as u64);
}
