use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use base64::Engine;
use serde_json::{json, Value};
use sha2::{Digest, Sha512};

use super::fetch::trim;
use super::*;

fn integrity(bytes: &[u8]) -> String {
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(Sha512::digest(bytes))
    )
}

const SOME_SHA: &str = "sha512-QNhWdt7nrgVWWQG58QuGsAR3jv3Hbe4mb4vz7w2csnHavciZJgda1CPNaldF6eVxv90ud3jUXpKlHL69gO38yw==";

fn lock(packages: Value) -> Value {
    json!({"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
           "packages": packages})
}

fn not_taken(r: Result<Lock, FastPathError>) -> String {
    match r {
        Err(FastPathError::NotTaken(why)) => why,
        other => panic!("expected NotTaken, got {other:?}"),
    }
}

#[test]
fn urls_come_from_the_registry_layout_or_resolved() {
    let l = Lock::from_json(
        &lock(json!({
            "": {"name": "app", "dependencies": {"react": "^19"}},
            "node_modules/react": {"version": "19.3.1", "integrity": SOME_SHA},
            "node_modules/@babel/core": {"version": "7.29.13", "integrity": SOME_SHA},
            "node_modules/a/node_modules/@s/b": {"version": "1.0.0-rc.1+x", "integrity": SOME_SHA},
            "node_modules/alias": {"name": "real", "version": "2.0.0", "integrity": SOME_SHA},
            "node_modules/r": {"version": "1.0.0", "integrity": SOME_SHA,
                               "resolved": "https://registry.npmjs.org/r/-/r-1.0.0.tgz"},
            "node_modules/y": {"version": "1.0.0", "integrity": SOME_SHA,
                               "resolved": "https://registry.yarnpkg.com/y/-/y-1.0.0.tgz"},
        })),
        &json!({"dependencies": {"react": "^19"}}),
    )
    .unwrap();
    let urls: Vec<(&str, &str)> = l
        .packages
        .iter()
        .map(|p| (p.path.as_str(), p.url.as_str()))
        .collect();
    assert_eq!(
        urls,
        [
            (
                "node_modules/@babel/core",
                "https://registry.npmjs.org/@babel/core/-/core-7.29.13.tgz"
            ),
            (
                "node_modules/a/node_modules/@s/b",
                "https://registry.npmjs.org/@s/b/-/b-1.0.0-rc.1+x.tgz"
            ),
            (
                "node_modules/alias",
                "https://registry.npmjs.org/real/-/real-2.0.0.tgz"
            ),
            (
                "node_modules/r",
                "https://registry.npmjs.org/r/-/r-1.0.0.tgz"
            ),
            (
                "node_modules/react",
                "https://registry.npmjs.org/react/-/react-19.3.1.tgz"
            ),
            (
                "node_modules/y",
                "https://registry.npmjs.org/y/-/y-1.0.0.tgz"
            ),
        ]
    );
    assert_eq!(l.packages[0].sha512.len(), 64);
    assert!(l.root_scripts.is_empty());
    assert_eq!(l.after_unpack(), "npm rebuild");
}

#[test]
fn other_platforms_bundles_and_scripts() {
    let l = Lock::from_json(
        &lock(json!({
            "": {"name": "app"},
            "node_modules/fsevents": {"version": "2.3.3", "integrity": SOME_SHA,
                                      "optional": true, "os": ["darwin"]},
            "node_modules/esbuild-linux": {"version": "1.0.0", "integrity": SOME_SHA,
                                           "optional": true, "os": ["linux"], "cpu": ["x64"]},
            "node_modules/esbuild-arm": {"version": "1.0.0", "integrity": SOME_SHA,
                                         "optional": true, "os": ["linux"], "cpu": ["arm64"]},
            "node_modules/musl-only": {"version": "1.0.0", "integrity": SOME_SHA,
                                       "optional": true, "libc": ["musl"]},
            "node_modules/not-win": {"version": "1.0.0", "integrity": SOME_SHA, "os": ["!win32"]},
            "node_modules/p": {"version": "1.0.0", "integrity": SOME_SHA},
            "node_modules/p/node_modules/bundled": {"version": "1.0.0", "inBundle": true},
        })),
        &json!({"scripts": {"postinstall": "node x.js", "prepare": "husky",
                            "build": "vite build", "install": 3}}),
    )
    .unwrap();
    let paths: Vec<&str> = l.packages.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "node_modules/esbuild-linux",
            "node_modules/not-win",
            "node_modules/p"
        ]
    );
    assert_eq!(
        l.other_platform,
        [
            "node_modules/esbuild-arm",
            "node_modules/fsevents",
            "node_modules/musl-only"
        ]
    );
    // The hidden lockfile lists what is installed, bundled packages too, and no root entry.
    let hidden: Value = serde_json::from_slice(&l.hidden_lockfile).unwrap();
    let listed: Vec<&String> = hidden["packages"].as_object().unwrap().keys().collect();
    assert_eq!(
        listed,
        [
            "node_modules/esbuild-linux",
            "node_modules/not-win",
            "node_modules/p",
            "node_modules/p/node_modules/bundled"
        ]
    );
    assert_eq!(hidden["lockfileVersion"], 3);
    assert_eq!(hidden["name"], "app");
    assert_eq!(
        l.after_unpack(),
        "npm rebuild && npm run --ignore-scripts postinstall && npm run --ignore-scripts prepare"
    );
}

#[test]
fn what_only_npm_can_install_is_left_to_it() {
    let cases = [
        (
            json!({"node_modules/x": {"version": "1.0.0", "integrity": SOME_SHA,
                                   "resolved": "https://npm.example.com/x/-/x-1.0.0.tgz"}}),
            "not the npm registry",
        ),
        (
            json!({"node_modules/x": {"version": "git+ssh://git@github.com/a/x.git#abc",
                                   "integrity": SOME_SHA}}),
            "no registry version",
        ),
        (
            json!({"node_modules/x": {"version": "1.0.0"}}),
            "no SHA-512",
        ),
        (
            json!({"node_modules/x": {"version": "1.0.0",
                                   "integrity": "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk="}}),
            "no SHA-512",
        ),
        (
            json!({"node_modules/x": {"resolved": "packages/x", "link": true}}),
            "is a link",
        ),
        (
            json!({"packages/x": {"version": "1.0.0", "integrity": SOME_SHA}}),
            "not a package under node_modules",
        ),
        (
            json!({"node_modules/../../etc": {"version": "1.0.0", "integrity": SOME_SHA}}),
            "not a package under node_modules",
        ),
        (
            json!({"node_modules/x/../y": {"version": "1.0.0", "integrity": SOME_SHA}}),
            "not a package under node_modules",
        ),
        (
            json!({"node_modules/x": {"version": "1.0.0/../../y", "integrity": SOME_SHA}}),
            "no registry version",
        ),
        (
            json!({"node_modules/x": {"version": "1.0.0", "integrity": SOME_SHA,
                                   "os": ["darwin"]}}),
            "another platform",
        ),
        (json!({"": {"workspaces": ["packages/*"]}}), "workspaces"),
    ];
    for (packages, why) in cases {
        let got = not_taken(Lock::from_json(&lock(packages.clone()), &Value::Null));
        assert!(got.contains(why), "{packages}: {got}");
    }
    let v1 = json!({"lockfileVersion": 1, "dependencies": {}});
    assert!(not_taken(Lock::from_json(&v1, &Value::Null)).contains("lockfileVersion 1"));
    // package.json and the lockfile out of step: `npm ci` would refuse it.
    let root = json!({"": {"dependencies": {"a": "^1"}},
                      "node_modules/a": {"version": "1.0.0", "integrity": SOME_SHA}});
    let added = json!({"dependencies": {"a": "^1", "b": "^2"}});
    let why = not_taken(Lock::from_json(&lock(root.clone()), &added));
    assert!(why.contains("dependencies differ"), "{why}");
    let dev = json!({"dependencies": {"a": "^1"}, "devDependencies": {"c": "1"}});
    let why = not_taken(Lock::from_json(&lock(root.clone()), &dev));
    assert!(why.contains("devDependencies"), "{why}");
    let same = json!({"dependencies": {"a": "^1"}, "devDependencies": {}});
    assert!(Lock::from_json(&lock(root), &same).is_ok());
}

#[test]
fn an_npmrc_or_npm_settings_in_the_env_leave_it_to_npm() {
    let dir = tempfile::tempdir().unwrap();
    let l = lock(json!({"": {"dependencies": {"x": "1"}},
                        "node_modules/x": {"version": "1.0.0", "integrity": SOME_SHA}}));
    std::fs::write(dir.path().join(LOCKFILE), l.to_string()).unwrap();
    std::fs::write(
        dir.path().join("package.json"),
        r#"{"scripts":{"prepare":"x"},"dependencies":{"x":"1"}}"#,
    )
    .unwrap();
    let none = BTreeMap::new();
    let taken = Lock::read(dir.path(), &none).unwrap();
    assert_eq!(taken.root_scripts, ["prepare"]);
    for k in ["NODE_ENV", "npm_config_omit", "NPM_CONFIG_REGISTRY"] {
        let env = BTreeMap::from([(k.to_owned(), "x".to_owned())]);
        assert!(not_taken(Lock::read(dir.path(), &env)).contains(k));
    }
    std::fs::write(
        dir.path().join(".npmrc"),
        "registry=https://npm.example.com/\n",
    )
    .unwrap();
    assert!(not_taken(Lock::read(dir.path(), &none)).contains(".npmrc"));
    std::fs::remove_file(dir.path().join(".npmrc")).unwrap();
    std::fs::write(dir.path().join(LOCKFILE), "{not json").unwrap();
    assert!(matches!(
        Lock::read(dir.path(), &none),
        Err(FastPathError::Json(_))
    ));
}

/// A gzip npm-style tarball with these entries: (path, type, mode, data).
fn tgz(entries: &[(&str, tar::EntryType, u32, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    for (path, kind, mode, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_mode(*mode);
        h.set_size(data.len() as u64);
        if *kind == tar::EntryType::Symlink {
            h.set_link_name("/etc/passwd").unwrap();
        }
        // Raw names: `append_data` refuses `..`, a hostile tarball does not.
        let name = h.as_old_mut().name.as_mut();
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// Path → (type, mode, mtime, data) of a packed gzip tarball, in order.
fn unpacked(path: &Path) -> Vec<(String, tar::EntryType, u32, u64, Vec<u8>)> {
    let f = std::fs::File::open(path).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            let h = e.header();
            (
                e.path().unwrap().to_string_lossy().into_owned(),
                h.entry_type(),
                h.mode().unwrap(),
                h.mtime().unwrap(),
                data,
            )
        })
        .collect()
}

#[test]
fn packing_lays_packages_out_as_the_lockfile_says_and_only_files_and_dirs() {
    use tar::EntryType::{Directory, Regular, Symlink};
    let a = tgz(&[
        ("package/", Directory, 0o755, b""),
        ("package/package.json", Regular, 0o644, br#"{"name":"a"}"#),
        (
            "package/bin/cli.js",
            Regular,
            0o700,
            b"#!/usr/bin/env node\n",
        ),
        ("package/../../escape", Regular, 0o644, b"x"),
        ("package/link", Symlink, 0o777, b""),
        ("package/.gitignore", Regular, 0o644, b"git"),
        ("package/stubs/.npmignore", Regular, 0o644, b"npm"),
        ("package/stubs/.gitignore", Regular, 0o644, b"dropped"),
    ]);
    let b = tgz(&[("b-1.0.0/index.js", Regular, 0o600, b"module.exports = 1;\n")]);
    let cache = tempfile::tempdir().unwrap();
    let lock = Lock::from_json(
        &lock(json!({
            "node_modules/a": {"version": "1.0.0", "integrity": integrity(&a)},
            "node_modules/a/node_modules/@s/b": {"version": "1.0.0", "integrity": integrity(&b)},
        })),
        &Value::Null,
    )
    .unwrap();
    std::fs::write(cache.path().join(lock.packages[0].cache_name()), &a).unwrap();
    std::fs::write(cache.path().join(lock.packages[1].cache_name()), &b).unwrap();
    let out = cache.path().join("out.tar.gz");
    let stats = pack(&lock, cache.path(), &out).unwrap();
    assert_eq!(
        stats,
        PackStats {
            files: 5,
            bytes: 12 + 20 + 3 + 3 + 20,
            skipped: 2
        }
    );
    let entries = unpacked(&out);
    let listing: Vec<(&str, tar::EntryType, u32)> = entries
        .iter()
        .map(|(p, k, m, _, _)| (p.as_str(), *k, *m))
        .collect();
    assert_eq!(
        listing,
        [
            ("node_modules/", Directory, 0o755),
            ("node_modules/a/", Directory, 0o755),
            ("node_modules/a/package.json", Regular, 0o644),
            ("node_modules/a/bin/", Directory, 0o755),
            ("node_modules/a/bin/cli.js", Regular, 0o755),
            ("node_modules/a/.npmignore", Regular, 0o644),
            ("node_modules/a/stubs/", Directory, 0o755),
            ("node_modules/a/stubs/.npmignore", Regular, 0o644),
            ("node_modules/a/node_modules/", Directory, 0o755),
            ("node_modules/a/node_modules/@s/", Directory, 0o755),
            ("node_modules/a/node_modules/@s/b/", Directory, 0o755),
            ("node_modules/a/node_modules/@s/b/index.js", Regular, 0o644),
            ("node_modules/.package-lock.json", Regular, 0o644),
        ]
    );
    let (_, _, _, hidden_mtime, hidden) = entries.last().unwrap();
    assert_eq!(hidden, &lock.hidden_lockfile);
    // Every directory is older than the hidden lockfile, so npm trusts it.
    assert!(entries[..entries.len() - 1]
        .iter()
        .all(|(_, _, _, mtime, _)| mtime < hidden_mtime));
}

#[test]
fn a_missing_tarball_fails_the_pack() {
    let cache = tempfile::tempdir().unwrap();
    let lock = Lock::from_json(
        &lock(json!({"node_modules/a": {"version": "1.0.0", "integrity": SOME_SHA}})),
        &Value::Null,
    )
    .unwrap();
    let err = pack(&lock, cache.path(), &cache.path().join("out.tgz")).unwrap_err();
    assert!(matches!(err, FastPathError::Io { .. }), "{err:?}");
}

#[test]
fn the_cache_is_trimmed_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now();
    for (i, name) in ["old.tgz", "mid.tgz", "new.tgz"].iter().enumerate() {
        let p = dir.path().join(name);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(&[0u8; 100])
            .unwrap();
        let t = now - std::time::Duration::from_secs(100 * (3 - i as u64));
        std::fs::File::options()
            .append(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    trim(dir.path(), 200).unwrap();
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["mid.tgz", "new.tgz"]);
}

/// Serves `body` for every request (HTTP/1.0, one request per connection), counting them.
async fn serve(body: Vec<u8>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/x/-/x-1.0.0.tgz", l.local_addr().unwrap());
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            h.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body).await;
            });
        }
    });
    (url, hits)
}

#[tokio::test]
async fn fetch_checks_the_hash_and_caches_what_matched() {
    use std::sync::atomic::Ordering;
    let body = b"tarball bytes".to_vec();
    let (url, hits) = serve(body.clone()).await;
    let cache = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let good = Package {
        path: "node_modules/x".into(),
        url: url.clone(),
        sha512: Sha512::digest(&body).to_vec(),
    };
    let got = fetch(&client, std::slice::from_ref(&good), cache.path())
        .await
        .unwrap();
    assert_eq!(
        got,
        FetchStats {
            downloaded: 1,
            bytes: body.len() as u64,
            cached: 0
        }
    );
    assert_eq!(
        std::fs::read(cache.path().join(good.cache_name())).unwrap(),
        body
    );
    let again = fetch(&client, std::slice::from_ref(&good), cache.path())
        .await
        .unwrap();
    assert_eq!(again.cached, 1);
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "a cached tarball is not fetched again"
    );

    let bad = Package {
        sha512: Sha512::digest(b"other bytes").to_vec(),
        ..good
    };
    let err = fetch(&client, std::slice::from_ref(&bad), cache.path())
        .await
        .unwrap_err();
    assert!(matches!(err, FastPathError::Integrity { .. }), "{err:?}");
    let files: Vec<_> = std::fs::read_dir(cache.path()).unwrap().collect();
    assert_eq!(files.len(), 1, "nothing of the bad download is left");
}
