//! Signed file URLs through the real routes: a URL signed for `PUT` uploads without an API key
//! and one signed for `GET` downloads; each opens only the sandbox, method and path it was
//! signed for, and nothing once it expired or its sandbox is gone; bad requests are refused.

use super::*;

/// `method` on `url` with no API key; status and body.
async fn bare(s: &FakeStack, method: &str, url: &str, body: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Body::from(body.to_owned()))
        .unwrap();
    answer(s, req).await
}

async fn sign(s: &FakeStack, id: &str, req: Value) -> (StatusCode, Value) {
    call(
        s,
        "POST",
        &format!("/v1/sandboxes/{id}/files/url"),
        Some(req),
    )
    .await
}

/// `url` with query parameter `name` set to `value`.
fn with_param(url: &str, name: &str, value: &str) -> String {
    let (base, query) = url.split_once('?').unwrap();
    let query: Vec<String> = query
        .split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k == name => format!("{k}={value}"),
            _ => kv.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_url_opens_one_file_one_way_until_it_expires() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let dir = format!("/tmp/pandastack-fast-{id}");
    let path = format!("{dir}/up load.txt");

    let (st, put) = sign(
        &s,
        &id,
        json!({"path": path, "method": "PUT", "expires_in": 60}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{put}");
    assert_eq!(
        (put["method"].as_str(), put["path"].as_str()),
        (Some("PUT"), Some(path.as_str()))
    );
    assert!(put["expires_at"].as_str().unwrap().ends_with('Z'), "{put}");
    let put_url = put["url"].as_str().unwrap().to_owned();
    assert!(
        put_url.starts_with(&format!("/v1/sandboxes/{id}/files/signed?")),
        "{put_url}"
    );
    // The path stays readable: only what a query value must escape is escaped.
    let readable = format!("path={dir}/up%20load.txt&");
    assert!(put_url.contains(&readable), "{put_url}");
    let (st, v) = bare(&s, "PUT", &put_url, "from a signed url").await;
    assert_eq!(
        (st, v["bytes_written"].as_u64()),
        (StatusCode::OK, Some(17)),
        "{v}"
    );

    let (st, get) = sign(&s, &id, json!({"path": path})).await;
    assert_eq!(
        (st, get["method"].as_str()),
        (StatusCode::OK, Some("GET")),
        "{get}"
    );
    let get_url = get["url"].as_str().unwrap().to_owned();
    let (st, v) = bare(&s, "GET", &get_url, "").await;
    assert_eq!(
        (st, v),
        (StatusCode::OK, Value::String("from a signed url".into()))
    );

    // Only what it was signed for.
    let forbidden = |(st, v): (StatusCode, Value)| {
        assert_eq!(
            (st, v["error"]["code"].as_str()),
            (StatusCode::FORBIDDEN, Some("forbidden")),
            "{v}"
        );
    };
    forbidden(bare(&s, "PUT", &get_url, "x").await);
    forbidden(bare(&s, "GET", &put_url, "").await);
    forbidden(
        bare(
            &s,
            "GET",
            &with_param(&get_url, "path", "%2Fetc%2Fpasswd"),
            "",
        )
        .await,
    );
    forbidden(
        bare(
            &s,
            "GET",
            &with_param(&get_url, "expires", "99999999999"),
            "",
        )
        .await,
    );
    forbidden(bare(&s, "GET", &with_param(&get_url, "signature", "00"), "").await);
    let other = get_url.replace(&id, "sb-0000000000000000");
    forbidden(bare(&s, "GET", &other, "").await);
    // Expired: refused with that reason.
    let (_, short) = sign(&s, &id, json!({"path": path, "expires_in": 1})).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (st, v) = bare(&s, "GET", short["url"].as_str().unwrap(), "").await;
    assert_eq!(st, StatusCode::FORBIDDEN, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("expired"),
        "{v}"
    );

    // Bad requests, each naming its field.
    for (req, field) in [
        (json!({"path": "relative"}), "path"),
        (json!({"path": "/a/../b"}), "path"),
        (json!({"path": "/a", "expires_in": 0}), "expires_in"),
        (json!({"path": "/a", "expires_in": 604801}), "expires_in"),
        (
            json!({"path": "/a", "method": "DELETE"}),
            "expected `GET` or `PUT`",
        ),
    ] {
        let (st, v) = sign(&s, &id, req.clone()).await;
        assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{req}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(field),
            "{req}: {v}"
        );
    }

    // Its sandbox gone: the URL opens nothing.
    let (st, _) = call(&s, "DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    forbidden(bare(&s, "GET", &get_url, "").await);
    let _ = std::fs::remove_dir_all(dir);
}
