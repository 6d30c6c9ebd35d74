//! `GET …/fs/list` a page at a time: a directory whose whole listing weighs more than one gRPC
//! message can carry (4 MiB), which a guest agent answering in one message could not list at
//! all, comes back page after page through `next_cursor`, every entry once and in path order;
//! a bad `limit` or `cursor` is the caller's error; a `pattern` searches by name.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use axum::http::StatusCode;
use pandastack_testkit::fake::{fake_stack, FakeStack};
use serde_json::Value;

use super::{call, create};

/// Files in the directory listed: with [`NAME_LEN`]-byte names, well over 4 MiB of entries.
const FILES: usize = 10_000;
/// Bytes of each file's name (a file name may have 255).
const NAME_LEN: usize = 250;
/// gRPC's default message limit, which one answer carrying the whole listing would pass.
const GRPC_MESSAGE_MAX: usize = 4 << 20;

/// Makes `FILES` empty files with long names in `dir`; returns their paths, sorted.
fn make_files(dir: &Path) -> Vec<String> {
    std::fs::create_dir_all(dir).unwrap();
    let mut paths = Vec::with_capacity(FILES);
    for i in 0..FILES {
        let name = format!("{i:06}-{}", "n".repeat(NAME_LEN - 7));
        let path = dir.join(&name);
        std::fs::File::create(&path).unwrap();
        paths.push(path.to_string_lossy().into_owned());
    }
    paths.sort();
    paths
}

/// Lists `dir` page after page (`limit` per page when given); returns every page's paths.
async fn pages(s: &FakeStack, id: &str, dir: &str, limit: Option<u32>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut uri = format!("/v1/sandboxes/{id}/fs/list?path={dir}");
        if let Some(l) = limit {
            uri.push_str(&format!("&limit={l}"));
        }
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={c}"));
        }
        let (st, v) = call(s, "GET", &uri, None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let page: Vec<String> = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["path"].as_str().unwrap().to_owned())
            .collect();
        out.push(page);
        match &v["next_cursor"] {
            Value::Null => return out,
            Value::String(c) => {
                assert!(out.len() <= FILES, "a listing that never ends");
                cursor = Some(c.clone());
            }
            other => panic!("next_cursor: {other}"),
        }
    }
}

/// The status and error code of listing `dir` with `query` appended.
async fn refused(s: &FakeStack, id: &str, dir: &str, query: &str) -> (StatusCode, String) {
    let uri = format!("/v1/sandboxes/{id}/fs/list?path={dir}&{query}");
    let (st, v) = call(s, "GET", &uri, None).await;
    let code = v["error"]["code"].as_str().unwrap_or_default().to_owned();
    (st, code)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directory_too_large_for_one_message_is_listed_page_by_page() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    // The fake VM's guest agent runs on this host: it sees the test's own directory.
    let dir = s.dir.path().join("big");
    let want = make_files(&dir);
    let dir = dir.to_string_lossy().into_owned();
    // Names and paths alone (a lower bound of the entries' encoded size) pass the limit.
    let weight: usize = want.iter().map(|p| p.len() + NAME_LEN).sum();
    assert!(
        weight > GRPC_MESSAGE_MAX,
        "{weight} bytes: too small to show anything"
    );

    // The default limit: 1,000 entries a page.
    let got = pages(&s, &id, &dir, None).await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![1000; FILES / 1000], "{sizes:?}");
    assert_eq!(got.concat(), want, "every file once, in path order");

    // The most a page may ask for: the guest's byte bound (2 MiB) cuts pages shorter.
    let got = pages(&s, &id, &dir, Some(5000)).await;
    assert!(got.len() > 2, "{} pages", got.len());
    assert!(got.iter().all(|p| !p.is_empty() && p.len() < 5000));
    let all = got.concat();
    assert_eq!(all.len(), all.iter().collect::<BTreeSet<_>>().len());
    assert_eq!(all, want, "every file once, in path order");

    // A limit that does not divide the listing: a short last page ends it.
    let got = pages(&s, &id, &dir, Some(3000)).await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [3000, 3000, 3000, 1000]);
    assert_eq!(got.concat(), want);

    for bad in ["limit=0", "limit=5001", "limit=x", "limit=-1"] {
        assert_eq!(
            refused(&s, &id, &dir, bad).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument".into()),
            "{bad}"
        );
    }
    // Not base64; base64 of bytes that are not text; a path outside the directory listed.
    for bad in ["cursor=!!!", "cursor=_w", "cursor=L2V0Yy9wYXNzd2Q"] {
        assert_eq!(
            refused(&s, &id, &dir, bad).await,
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument".into()),
            "{bad}"
        );
    }
}

/// A search by name: `pattern` keeps the entries whose name matches it at every depth listed
/// (directories are still descended, and listed only when they match), page after page; a
/// pattern that is not a glob of a name is the caller's error.
#[tokio::test(flavor = "multi_thread")]
async fn a_listing_with_a_pattern_finds_files_by_name_at_every_depth() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let (st, v) = create(&s).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let root = s.dir.path().join("tree");
    for f in [
        "a.py",
        "b.txt",
        "pkg/c.py",
        "pkg/sub/d.py",
        "pkg/sub/e.rs",
        "pkg.py/f.txt",
        "src/main.rs",
    ] {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "x").unwrap();
    }
    let dir = root.to_string_lossy().into_owned();
    let prefix = format!("{dir}/");
    let found = |query: &'static str| {
        let uri = format!("/v1/sandboxes/{id}/fs/list?path={dir}&{query}");
        let (s, prefix) = (&s, &prefix);
        async move {
            let (st, v) = call(s, "GET", &uri, None).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["next_cursor"], Value::Null, "{v}");
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let p = e["path"].as_str().unwrap();
                    p.strip_prefix(prefix.as_str()).unwrap().to_owned()
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        found("depth=10&pattern=*.py").await,
        ["a.py", "pkg.py", "pkg/c.py", "pkg/sub/d.py"]
    );
    assert_eq!(found("depth=1&pattern=*.py").await, ["a.py", "pkg.py"]);
    assert_eq!(
        found("depth=10&pattern=%5B!a-c%5D.*").await,
        ["pkg.py/f.txt", "pkg/sub/d.py", "pkg/sub/e.rs"]
    );
    assert_eq!(found("depth=10&pattern=?.rs").await, ["pkg/sub/e.rs"]);
    assert!(found("depth=10&pattern=*.go").await.is_empty());

    // Page after page, as without a pattern: every match once.
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut uri =
            format!("/v1/sandboxes/{id}/fs/list?path={dir}&depth=10&pattern=*.py&limit=1");
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={c}"));
        }
        let (st, v) = call(&s, "GET", &uri, None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        all.extend(
            v["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["name"].as_str().unwrap().to_owned()),
        );
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(all, ["a.py", "pkg.py", "c.py", "d.py"]);

    for bad in ["pattern=%5Babc", "pattern=a/b"] {
        let (st, code) = refused(&s, &id, &dir, bad).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "invalid_argument"),
            "{bad}"
        );
    }
}
