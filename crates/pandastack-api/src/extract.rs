//! Request extractors whose rejections use the error envelope: JSON bodies (strict, naming the
//! bad field), the caller's workspace from the API key, WebSocket upgrades, and strict boolean
//! query parameters.

use std::collections::BTreeMap;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use pandastack_api_types::ErrorCode;
use pandastack_store::KeyRow;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::App;

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
}

impl FromRequestParts<std::sync::Arc<App>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &std::sync::Arc<App>,
    ) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        // `?access_token=` only where a browser cannot set headers (SSE, WebSocket).
        let query = || {
            let q = parts.uri.query()?;
            q.split('&').find_map(|kv| kv.strip_prefix("access_token="))
        };
        let streaming = parts.uri.path().ends_with("/stream")
            || parts.uri.path().ends_with("/logs")
            || parts.uri.path().ends_with("/ws")
            || parts.uri.path().ends_with("/pty");
        let secret = header.or_else(|| if streaming { query() } else { None });
        let Some(secret) = secret else {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "missing API key: send Authorization: Bearer pds_…",
            ));
        };
        match app.store.keys().verify(secret).await? {
            Some(key) => Ok(Caller { key }),
            None => Err(ApiError::new(ErrorCode::Unauthorized, "invalid API key")),
        }
    }
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
