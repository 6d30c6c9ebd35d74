//! Request extractors whose rejections use the error envelope: JSON bodies (strict, naming the
//! bad field), the caller's workspace from the API key or a web console session's cookie (and,
//! for the operator routes, that the key is an admin's), WebSocket upgrades, and strict boolean
//! query parameters.

use std::collections::BTreeMap;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use pandastack_api_types::ErrorCode;
use pandastack_store::KeyRow;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::ApiState;

/// A JSON body; an empty body (no bytes at all) counts as `{}`. Whitespace alone is not JSON
/// (a JSON text is a value between optional whitespace), so it is `invalid_json` like any other
/// malformed body — the fuzzer's `\t` had made a code context.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| {
                if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(ErrorCode::PayloadTooLarge, "request body too large")
                } else {
                    ApiError::new(ErrorCode::InvalidJson, e.body_text())
                }
            })?;
        let text: &[u8] = if bytes.is_empty() { b"{}" } else { &bytes };
        json(text).map(Body)
    }
}

/// Decodes a JSON request body, always an object: malformed JSON is `invalid_json`, a
/// well-formed body that is not an object or has a bad or unknown field `invalid_argument` (the
/// message names it). serde would read a struct from an array of its fields in order too
/// (`[null, null]` as a patch); the document says object, so arrays are refused here.
pub(crate) fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                Ok(_) => ApiError::new(
                    ErrorCode::InvalidArgument,
                    "request body: expected a JSON object, not an array",
                ),
                Err(e) => ApiError::new(ErrorCode::InvalidJson, format!("request body: {e}")),
            },
        );
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let code = if e.is_data() {
            ErrorCode::InvalidArgument
        } else {
            ErrorCode::InvalidJson
        };
        ApiError::new(code, format!("request body: {e}"))
    })
}

/// A boolean query parameter: `true`/`1` or `false`/`0` (`false` when absent). Anything else is
/// `invalid_argument`: the document types these `boolean`, and a typo must not silently mean
/// `false`.
pub(crate) fn bool_param(q: &BTreeMap<String, String>, name: &str) -> Result<bool, ApiError> {
    match q.get(name).map(String::as_str) {
        None => Ok(false),
        Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v == "0" || v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("{name}: true or false (or 1 or 0), not {v:?}"),
        )),
    }
}

/// The authenticated caller.
#[derive(Clone)]
pub struct Caller {
    pub key: KeyRow,
}

impl Caller {
    pub fn ws(&self) -> &str {
        &self.key.workspace_id
    }

    /// The role of the member the key belongs to (`None`: a workspace key, limited by its
    /// scopes only).
    pub fn role(&self) -> Option<pandastack_api_types::Role> {
        role_of(&self.key)
    }

    /// Whether the caller manages the workspace: a workspace key, or an owner's or admin's.
    pub fn manages(&self) -> bool {
        self.role().is_none_or(pandastack_api_types::Role::manages)
    }

    /// Whether the caller may do what an owner alone may (make, change and remove owners): a
    /// workspace key, or an owner's.
    pub fn owns(&self) -> bool {
        self.role()
            .is_none_or(|r| r == pandastack_api_types::Role::Owner)
    }

    /// Whether the key is an operator's (`pandastack keys create --admin`): it may call the
    /// operator routes ([`Admin`]).
    pub fn is_admin(&self) -> bool {
        self.key.admin
    }
}

impl FromRequestParts<std::sync::Arc<ApiState>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &std::sync::Arc<ApiState>,
    ) -> Result<Self, ApiError> {
        let secret = bearer(&parts.headers).or_else(|| query_key(parts));
        // Without a key, a web console session's cookie stands for the key it was made with.
        let (key, session) = match secret {
            Some(secret) => match app.store.keys().verify(secret).await? {
                Some(key) => (key, None),
                None => return Err(ApiError::new(ErrorCode::Unauthorized, "invalid API key")),
            },
            None => match crate::console::session::resolve(&parts.headers, app).await? {
                Some((session, key)) => (key, Some(session)),
                None => {
                    return Err(ApiError::new(
                        ErrorCode::Unauthorized,
                        "missing API key: send Authorization: Bearer pds_…",
                    ))
                }
            },
        };
        // The audit log attributes the call to this key from here on, refused or not.
        if let Some(who) = parts.extensions.get::<crate::audit::Who>() {
            who.set(&key);
        }
        let now = pandastack_store::now_ms();
        if let Some(at) = key.expires_at.filter(|at| *at <= now) {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                format!("this API key expired at {}", crate::rfc3339(at)),
            ));
        }
        if let Some(session) = &session {
            crate::console::session::check_browser(
                &parts.method,
                &parts.headers,
                session,
                app.console.public_url.as_deref(),
            )?;
        }
        let route = parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map(|p| p.as_str().to_owned());
        if let Some((kind, action)) = route
            .as_deref()
            .and_then(|r| pandastack_api_types::needed(parts.method.as_str(), r))
        {
            check_scope(&key, &kind, action)?;
        }
        note_use(app, &key, now);
        Ok(Caller { key })
    }
}

/// Refuses a key whose scopes do not allow `action` on `kind`, naming the scope it needs.
fn check_scope(
    key: &KeyRow,
    kind: &str,
    action: pandastack_api_types::Action,
) -> Result<(), ApiError> {
    // Scopes were checked when the key was made; one that no longer parses grants nothing.
    let held: Vec<pandastack_api_types::Scope> = key
        .scopes
        .iter()
        .filter_map(|s| pandastack_api_types::Scope::parse(s).ok())
        .collect();
    if pandastack_api_types::allows(&held, kind, action) {
        if let Some(role) = role_of(key) {
            if !role.allows(kind, action) {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "this key's member is a {role}: a {role} may not {} {kind} (it needs the scope {kind}:{})",
                        action.as_str(),
                        action.as_str(),
                    ),
                ));
            }
        }
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::Forbidden,
        format!(
            "this key may not {} {kind}: it needs the scope {kind}:{} (it has {})",
            action.as_str(),
            action.as_str(),
            key.scopes.join(", ")
        ),
    ))
}

/// The role of the member a key belongs to. A member whose role no longer parses (or a key
/// whose member is gone) may do the least: viewer.
fn role_of(key: &KeyRow) -> Option<pandastack_api_types::Role> {
    key.member_id.as_ref()?;
    Some(
        key.role
            .as_deref()
            .and_then(|r| pandastack_api_types::Role::parse(r).ok())
            .unwrap_or(pandastack_api_types::Role::Viewer),
    )
}

/// When this process last wrote each key's `last_used_at` (unix ms).
static LAST_WRITTEN: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, i64>>> =
    std::sync::LazyLock::new(Default::default);

/// Records the key's use, at most once a minute per key (a write per request would cost every
/// call a statement), off the request's path.
fn note_use(app: &std::sync::Arc<ApiState>, key: &KeyRow, now: i64) {
    const EVERY_MS: i64 = 60_000;
    if key.last_used_at.is_some_and(|t| now - t < EVERY_MS) {
        return;
    }
    {
        let mut last = LAST_WRITTEN.lock().unwrap_or_else(|p| p.into_inner());
        if last.get(&key.id).is_some_and(|t| now - t < EVERY_MS) {
            return;
        }
        last.insert(key.id.clone(), now);
    }
    let (app, id) = (std::sync::Arc::clone(app), key.id.clone());
    tokio::spawn(async move {
        if let Err(e) = app.store.keys().touch_used(&id, now).await {
            tracing::warn!(key = %id, error = &e as &dyn std::error::Error, "record a key's use");
        }
    });
}

/// An authenticated caller whose key is an operator's (admin): what the operator routes
/// (`/v1/hosts`) take. No key or a bad one is `401 unauthorized` as everywhere; a valid key that
/// is not an admin's is `403 forbidden`, before the route looks at anything it names.
pub struct Admin;

impl FromRequestParts<std::sync::Arc<ApiState>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &std::sync::Arc<ApiState>,
    ) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, app).await?;
        if !caller.is_admin() {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "this route is for operators: it needs an admin key (`pandastack keys create \
                 --admin` on the server)",
            ));
        }
        Ok(Admin)
    }
}

/// The credentials of an `Authorization: Bearer …` header. The scheme is case-insensitive
/// (RFC 7235 §2.1): `bearer` and `BEARER` are `Bearer`.
pub(crate) fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim())
}

/// Paths (by their last segment) of the routes a browser opens without being able to set
/// headers: WebSocket upgrades (`…/exec/ws`, `…/pty`) and `EventSource` streams (`…/logs`,
/// `…/files/watch`, `/v1/events`).
const HEADERLESS: &[&str] = &["/logs", "/ws", "/pty", "/files/watch", "/v1/events"];

/// `?access_token=` of a request a browser makes without headers: a `GET` of a
/// [`HEADERLESS`] route. Anywhere else a key in the URL is ignored, so it does not end up in
/// access logs of calls that can send a header (a `POST …/exec/stream` with only
/// `?access_token=` is unauthenticated).
fn query_key(parts: &Parts) -> Option<&str> {
    if parts.method != axum::http::Method::GET
        || !HEADERLESS.iter().any(|s| parts.uri.path().ends_with(s))
    {
        return None;
    }
    parts
        .uri
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix("access_token="))
}

/// A WebSocket upgrade; a plain HTTP call gets `426 upgrade_required` in the error envelope.
pub struct Upgrade(pub axum::extract::ws::WebSocketUpgrade);

impl<S: Send + Sync> FromRequestParts<S> for Upgrade {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::ws::WebSocketUpgrade::from_request_parts(parts, state)
            .await
            .map(Upgrade)
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::UpgradeRequired,
                    format!("this route speaks WebSocket: {}", e.body_text()),
                )
            })
    }
}

/// A request's media type (`Content-Type` without parameters, lower case; `application/json`
/// when absent).
pub(crate) fn media_type(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use axum::http::Request;

    use super::*;

    fn parts(method: &str, uri: &str, authorization: Option<&str>) -> Parts {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(a) = authorization {
            req = req.header("authorization", a);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for a in [
            "Bearer pds_x",
            "bearer pds_x",
            "BEARER pds_x",
            "bEaReR  pds_x ",
        ] {
            assert_eq!(
                bearer(&parts("GET", "/", Some(a)).headers),
                Some("pds_x"),
                "{a}"
            );
        }
        for a in ["Basic pds_x", "Bearerpds_x", "pds_x", "Bearer"] {
            assert_eq!(bearer(&parts("GET", "/", Some(a)).headers), None, "{a}");
        }
    }

    #[test]
    fn a_query_key_counts_only_where_a_browser_cannot_send_a_header() {
        let q = "?follow=1&access_token=pds_x";
        for path in [
            "/v1/sandboxes/sb-1/logs",
            "/v1/sandboxes/sb-1/exec/ws",
            "/v1/sandboxes/sb-1/pty",
        ] {
            assert_eq!(
                query_key(&parts("GET", &format!("{path}{q}"), None)),
                Some("pds_x"),
                "{path}"
            );
        }
        for (method, path) in [
            ("POST", "/v1/sandboxes/sb-1/exec/stream"),
            ("POST", "/v1/sandboxes/sb-1/code/stream"),
            ("POST", "/v1/sandboxes/sb-1/logs"),
            ("GET", "/v1/sandboxes/sb-1"),
            ("HEAD", "/v1/sandboxes/sb-1/logs"),
        ] {
            assert_eq!(
                query_key(&parts(method, &format!("{path}{q}"), None)),
                None,
                "{method} {path}"
            );
        }
    }
}
