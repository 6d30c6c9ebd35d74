//! The console's files: `console/` of the repository, embedded at build time by `rust-embed`.
//!
//! Cache busting: every file is served under `/console/assets/<build>/<path>`, where `<build>`
//! is a hash of all the files' contents, so a file's URL changes whenever any file does (ES
//! modules import each other by relative paths, which stay under the same `<build>`). Those
//! answers are cached for a year (`immutable`); `index.html` — served at `/`, where
//! `{{assets}}` becomes `/console/assets/<build>` — is `no-cache` (revalidated by its ETag).
//! Text files are also kept gzipped (made once, on first use) for clients that accept it. Every
//! answer carries a strict Content-Security-Policy: only this origin's scripts, styles and
//! connections, no inline script, no framing.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use pandastack_api_types::ErrorCode;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

#[derive(rust_embed::RustEmbed)]
#[folder = "../../console/"]
#[exclude = "node_modules/*"]
#[exclude = "package.json"]
#[exclude = "package-lock.json"]
struct Files;

/// Set to a `console/` directory, the console is read from there on every request instead of
/// from the binary: for working on the console without rebuilding the server. Never set in
/// production (nothing is cached and nothing is compressed).
const DEV_DIR_ENV: &str = "PANDASTACK_CONSOLE_DIR";

/// The policy of every console answer. No inline script, and no inline style but an empty one: xterm.js (the terminal) inserts
/// `<style>` elements empty and then writes its theme and cell sizes into them;
/// `console/terminal.js` moves that text into constructed stylesheets (which the policy
/// allows), so the elements stay empty, and the hash below is the SHA-256 of the empty string.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self' 'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; object-src 'none'; \
     base-uri 'none'; frame-ancestors 'none'; form-action 'self'";

/// One file, ready to serve.
struct Asset {
    body: Bytes,
    /// The gzipped body, when that is smaller.
    gzip: Option<Bytes>,
    content_type: &'static str,
    etag: String,
}

impl Asset {
    fn new(path: &str, body: Vec<u8>, compress: bool) -> Self {
        let content_type = content_type(path);
        let etag = format!("\"{}\"", &hex::encode(Sha256::digest(&body))[..32]);
        let textual = content_type.starts_with("text/")
            || content_type == "image/svg+xml"
            || content_type == "application/json";
        let gzip = (compress && textual)
            .then(|| gzip(&body))
            .flatten()
            .filter(|z| z.len() < body.len())
            .map(Bytes::from);
        Self {
            body: Bytes::from(body),
            gzip,
            content_type,
            etag,
        }
    }
}

/// Every file, by path, and the build hash they are served under.
struct Bundle {
    build: String,
    files: HashMap<String, Asset>,
    index: Asset,
}

static BUNDLE: LazyLock<Arc<Bundle>> = LazyLock::new(|| {
    let files = Files::iter().filter_map(|p| {
        let f = Files::get(&p)?;
        Some((p.into_owned(), f.data.into_owned()))
    });
    Arc::new(Bundle::new(files.collect(), true))
});

impl Bundle {
    /// The bundle of `files` (path, contents); `compress` keeps gzipped copies of text files.
    fn new(mut files: Vec<(String, Vec<u8>)>, compress: bool) -> Self {
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut h = Sha256::new();
        for (p, body) in &files {
            h.update(p.as_bytes());
            h.update([0]);
            h.update(Sha256::digest(body));
        }
        let build = hex::encode(h.finalize())[..16].to_owned();
        let mut map = HashMap::new();
        let mut index = None;
        for (p, body) in files {
            if p == "index.html" {
                let text = String::from_utf8_lossy(&body)
                    .replace("{{assets}}", &format!("/console/assets/{build}"));
                index = Some(Asset::new(&p, text.into_bytes(), compress));
            } else {
                let a = Asset::new(&p, body, compress);
                map.insert(p, a);
            }
        }
        let index = index.unwrap_or_else(|| {
            Asset::new(
                "index.html",
                b"<!doctype html><title>PandaStack</title><p>This build has no console.</p>"
                    .to_vec(),
                false,
            )
        });
        Bundle {
            build,
            files: map,
            index,
        }
    }

    /// The console as it is in `dir` now (see [`DEV_DIR_ENV`]).
    fn from_dir(dir: &std::path::Path) -> Self {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                let Ok(rel) = path.strip_prefix(dir) else {
                    continue;
                };
                let rel = rel.to_string_lossy().into_owned();
                if rel == "node_modules" || rel.starts_with("package") {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else if let Ok(body) = std::fs::read(&path) {
                    files.push((rel, body));
                }
            }
        }
        Self::new(files, false)
    }
}

/// The bundle to serve: the embedded one, or the development directory's as it is now.
fn bundle() -> Arc<Bundle> {
    match std::env::var_os(DEV_DIR_ENV) {
        Some(dir) if !dir.is_empty() => Arc::new(Bundle::from_dir(std::path::Path::new(&dir))),
        _ => BUNDLE.clone(),
    }
}

/// `GET /`: the app's page.
pub(super) async fn index(headers: HeaderMap) -> Response {
    serve(&bundle().index, &headers, "no-cache")
}

/// `GET /console/assets/{build}/{*path}`: a file. One of an older build (a page loaded before
/// the server was upgraded) gets today's file, not cached, rather than a broken page.
pub(super) async fn asset(
    Path((build, path)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let bundle = bundle();
    let Some(a) = bundle.files.get(&path) else {
        return ApiError::new(ErrorCode::NotFound, "no such console file").into_response();
    };
    let cache = if build == bundle.build {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    serve(a, &headers, cache)
}

fn serve(a: &Asset, req: &HeaderMap, cache: &'static str) -> Response {
    let mut resp = if req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == a.etag))
    {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        match &a.gzip {
            Some(z) if accepts_gzip(req) => {
                let mut r = z.clone().into_response();
                r.headers_mut()
                    .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                r
            }
            _ => a.body.clone().into_response(),
        }
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Ok(v) = HeaderValue::from_str(&a.etag) {
        h.insert(header::ETAG, v);
    }
    security_headers(h);
    resp
}

/// The headers every console answer carries.
pub(crate) fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

/// Whether `Accept-Encoding` lists gzip with a non-zero weight.
fn accepts_gzip(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let q = parts
                .find_map(|p| p.strip_prefix("q="))
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && q > 0.0
        })
}

fn gzip(body: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(body).ok()?;
    z.finish().ok()
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, e)| e) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_taken_when_accepted_with_a_weight() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip, deflate, br")));
        assert!(accepts_gzip(&h("br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&h("*")));
        assert!(!accepts_gzip(&h("gzip;q=0")));
        assert!(!accepts_gzip(&h("br, deflate")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_page_names_its_assets_by_build() {
        let page = String::from_utf8_lossy(&BUNDLE.index.body).into_owned();
        assert!(!page.contains("{{assets}}"), "{page}");
        assert!(page.contains(&format!("/console/assets/{}/app.js", BUNDLE.build)));
        assert!(BUNDLE.files.contains_key("app.js"));
        assert!(BUNDLE.files.contains_key("app.css"));
    }
}
