//! Console sign-in: an API key is exchanged for a session cookie, so the browser never keeps
//! the key.
//!
//! - `POST /console/session {"api_key"}` verifies the key as the API does, starts a session
//!   (stored hashed, see `pandastack_store::SessionRepo`) and sets `ps_session` — `HttpOnly`
//!   (no script reads it), `SameSite=Strict` (no other site's page sends it), `Path=/`,
//!   `Max-Age` of the session, `Secure` over HTTPS. The answer names the workspace, the key,
//!   its role and scopes, and the session's CSRF token.
//! - `GET /console/session` answers the same for a valid cookie; `DELETE` revokes the session
//!   and clears the cookie.
//!
//! A cookie-authenticated `/v1` call ([`resolve`], used by [`crate::extract::Caller`]) acts as
//! the session's key, verified again each time (a revoked or expired key ends its sessions), and
//! passes [`check_browser`]: every change (any method but `GET`/`HEAD`/`OPTIONS`) must send the
//! session's token in `X-CSRF-Token`, an `Origin` (when sent) must be this server's, and a
//! WebSocket upgrade must send one (a browser cannot set headers on a WebSocket but always
//! sends `Origin`). Failed sign-ins are limited per source address.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex};

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::ErrorCode;
use pandastack_store::{KeyRow, SessionRow};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::{rfc3339, ApiState};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "ps_session";
/// The header a session's changes carry its CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-csrf-token";

/// `POST /console/session`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignIn {
    api_key: String,
}

/// What a session is: its key's workspace, name, role and scopes, its CSRF token and end.
#[derive(Serialize)]
struct SessionInfo {
    workspace_id: String,
    key_id: String,
    key_name: String,
    /// The role of the key's member (`null`: a workspace key).
    role: Option<String>,
    scopes: Vec<String>,
    admin: bool,
    csrf_token: String,
    expires_at: String,
}

impl SessionInfo {
    fn new(s: &SessionRow, key: &KeyRow) -> Self {
        Self {
            workspace_id: key.workspace_id.clone(),
            key_id: key.id.clone(),
            key_name: key.name.clone(),
            role: role_name(key),
            scopes: key.scopes.clone(),
            admin: key.admin,
            csrf_token: s.csrf_token.clone(),
            expires_at: rfc3339(s.expires_at),
        }
    }
}

fn role_name(key: &KeyRow) -> Option<String> {
    key.member_id.as_ref()?;
    Some(key.role.clone().unwrap_or_else(|| "viewer".into()))
}

pub(super) async fn sign_in(
    State(app): State<Arc<ApiState>>,
    headers: HeaderMap,
    ext: axum::http::Extensions,
    Body(req): Body<SignIn>,
) -> ApiResult<Response> {
    if !origin_allowed(&headers, app.console.public_url.as_deref()) {
        return Err(cross_site());
    }
    let source = ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip());
    if let Some(wait) = FAILURES.blocked(source, pandastack_store::now_ms()) {
        let mut e = ApiError::new(
            ErrorCode::RateLimited,
            "too many failed sign-ins from this address: wait a little",
        );
        e.retry_after = Some(wait);
        return Err(e);
    }
    let now = pandastack_store::now_ms();
    let key = match app.store.keys().verify(req.api_key.trim()).await? {
        Some(k) if k.expires_at.is_none_or(|at| at > now) => k,
        Some(k) => {
            FAILURES.note(source, now);
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                format!(
                    "this API key expired at {}",
                    rfc3339(k.expires_at.unwrap_or_default())
                ),
            ));
        }
        None => {
            FAILURES.note(source, now);
            return Err(ApiError::new(ErrorCode::Unauthorized, "invalid API key"));
        }
    };
    let ttl = i64::try_from(app.console.session_ttl.as_millis()).unwrap_or(i64::MAX);
    // A session never outlives its key.
    let ttl = key.expires_at.map_or(ttl, |at| ttl.min(at - now));
    let (session, secret) = app.store.sessions().create(&key.id, now, ttl).await?;
    prune_now_and_then(&app, now);
    let max_age = (session.expires_at - now) / 1000;
    let cookie = format!(
        "{COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age}{}",
        if secure(&headers, app.console.public_url.as_deref()) {
            "; Secure"
        } else {
            ""
        }
    );
    Ok(with_cookie(
        (StatusCode::CREATED, Json(SessionInfo::new(&session, &key))).into_response(),
        &cookie,
    ))
}

pub(super) async fn current(
    State(app): State<Arc<ApiState>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (session, key) = session_of(&app, &headers).await?.ok_or_else(signed_out)?;
    let mut resp = Json(SessionInfo::new(&session, &key)).into_response();
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

pub(super) async fn sign_out(
    State(app): State<Arc<ApiState>>,
    method: Method,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let (session, _) = session_of(&app, &headers).await?.ok_or_else(signed_out)?;
    check_browser(
        &method,
        &headers,
        &session,
        app.console.public_url.as_deref(),
    )?;
    app.store
        .sessions()
        .revoke(&session.id, pandastack_store::now_ms())
        .await?;
    let clear = format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        if secure(&headers, app.console.public_url.as_deref()) {
            "; Secure"
        } else {
            ""
        }
    );
    Ok(with_cookie(StatusCode::NO_CONTENT.into_response(), &clear))
}

/// Deletes ended sessions, at most once an hour per process, off the request's path (a
/// sign-in is when rows are added, so it is when they are cleared).
fn prune_now_and_then(app: &Arc<ApiState>, now: i64) {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    const EVERY_MS: i64 = 3_600_000;
    let last = LAST.load(Ordering::Relaxed);
    if now - last < EVERY_MS
        || LAST
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let app = Arc::clone(app);
    tokio::spawn(async move {
        match app.store.sessions().prune(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "pruned ended console sessions"),
            Err(e) => {
                tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "prune console sessions"
                )
            }
        }
    });
}

fn with_cookie(mut resp: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

fn signed_out() -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        "no console session (signed out or expired): sign in again",
    )
}

fn cross_site() -> ApiError {
    ApiError::new(
        ErrorCode::Forbidden,
        "cross-site request refused: the Origin header is not this server's",
    )
}

/// The session of a request's `ps_session` cookie and its key, if the request has one.
/// A cookie for no valid session, or for a key revoked or gone, is `401`; an expired key is
/// returned (the caller says why it is refused).
pub(crate) async fn resolve(
    headers: &HeaderMap,
    app: &ApiState,
) -> Result<Option<(SessionRow, KeyRow)>, ApiError> {
    let Some(secret) = cookie(headers) else {
        return Ok(None);
    };
    let now = pandastack_store::now_ms();
    let Some(session) = app.store.sessions().verify(secret, now).await? else {
        return Err(signed_out());
    };
    let key = match app.store.keys().get_any(&session.key_id).await {
        Ok(k) if k.revoked_at.is_none() => k,
        Ok(_) | Err(pandastack_store::StoreError::NotFound) => {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the API key of this console session was revoked: sign in again",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    Ok(Some((session, key)))
}

/// [`resolve`] for the session routes: the session only while its key works.
async fn session_of(
    app: &ApiState,
    headers: &HeaderMap,
) -> Result<Option<(SessionRow, KeyRow)>, ApiError> {
    let Some((s, key)) = resolve(headers, app).await? else {
        return Ok(None);
    };
    if key
        .expires_at
        .is_some_and(|at| at <= pandastack_store::now_ms())
    {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "the API key of this console session expired: sign in with another",
        ));
    }
    Ok(Some((s, key)))
}

/// The checks a cookie-authenticated request passes that a keyed one does not: the `Origin`
/// (when sent; always, for a WebSocket upgrade) is this server's, and a change carries the
/// session's CSRF token.
pub(crate) fn check_browser(
    method: &Method,
    headers: &HeaderMap,
    session: &SessionRow,
    public_url: Option<&str>,
) -> Result<(), ApiError> {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade && !headers.contains_key(header::ORIGIN) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "a WebSocket of a console session needs an Origin header",
        ));
    }
    if !origin_allowed(headers, public_url) {
        return Err(cross_site());
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let sent = headers
        .get(CSRF_HEADER)
        .map(HeaderValue::as_bytes)
        .unwrap_or_default();
    if sent.is_empty() || !bool::from(sent.ct_eq(session.csrf_token.as_bytes())) {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "a change made with a console session needs the X-CSRF-Token header: the \
             csrf_token of POST or GET /console/session",
        ));
    }
    Ok(())
}

/// The value of the `ps_session` cookie.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (name, value) = c.trim().split_once('=')?;
            (name == COOKIE && !value.is_empty()).then_some(value)
        })
}

/// Whether the request's `Origin`, if any, is this server's: the `Host` it was sent to, or
/// the origin of the public URL.
fn origin_allowed(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin.to_str().ok().and_then(Origin::parse) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if host.is_some_and(|h| origin.authority_is(h)) {
        return true;
    }
    public_url
        .and_then(Origin::parse)
        .is_some_and(|p| p.scheme == origin.scheme && origin.authority_is(&p.authority))
}

/// A web origin: scheme and `host[:port]`, the default port left out.
struct Origin {
    scheme: String,
    authority: String,
}

impl Origin {
    /// `http://host[:port]` or `https://…` (a trailing path, as in a public URL, is ignored);
    /// `null` and anything else are not origins.
    fn parse(s: &str) -> Option<Self> {
        let (scheme, rest) = s.split_once("://")?;
        let scheme = scheme.to_ascii_lowercase();
        let default = match scheme.as_str() {
            "http" => ":80",
            "https" => ":443",
            _ => return None,
        };
        let authority = rest.split('/').next()?.to_ascii_lowercase();
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        let authority = authority
            .strip_suffix(default)
            .map(str::to_owned)
            .unwrap_or(authority);
        Some(Self { scheme, authority })
    }

    /// Whether `host` (a `Host` header) names this origin's host and port.
    fn authority_is(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        let default = if self.scheme == "https" {
            ":443"
        } else {
            ":80"
        };
        host.strip_suffix(default).unwrap_or(&host) == self.authority
    }
}

/// Whether the session cookie gets `Secure`: the request came over HTTPS (as a proxy in front
/// says) or the server's public URL is `https://`.
fn secure(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    public_url.is_some_and(|u| u.to_ascii_lowercase().starts_with("https://"))
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// Failed sign-ins per source address: at most [`Failures::MAX`] in [`Failures::WINDOW_MS`].
struct Failures(Mutex<HashMap<Option<IpAddr>, (i64, u32)>>);

static FAILURES: LazyLock<Failures> = LazyLock::new(|| Failures(Mutex::default()));

impl Failures {
    const MAX: u32 = 10;
    const WINDOW_MS: i64 = 10_000;

    /// Seconds to wait, if `source` failed too often lately.
    fn blocked(&self, source: Option<IpAddr>, now: i64) -> Option<u64> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (start, n) = *map.get(&source)?;
        (n >= Self::MAX && now - start < Self::WINDOW_MS)
            .then(|| ((Self::WINDOW_MS - (now - start)) / 1000 + 1) as u64)
    }

    fn note(&self, source: Option<IpAddr>, now: i64) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.retain(|_, (start, _)| now - *start < Self::WINDOW_MS);
        }
        let e = map.entry(source).or_insert((now, 0));
        if now - e.0 >= Self::WINDOW_MS {
            *e = (now, 0);
        }
        e.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn origins_match_the_host_or_the_public_url() {
        let ok = |o: &str, host: &str, public: Option<&str>| {
            origin_allowed(&headers(&[("origin", o), ("host", host)]), public)
        };
        assert!(ok("http://localhost:8080", "localhost:8080", None));
        assert!(ok("http://Example.com", "example.com:80", None));
        assert!(ok("https://example.com:443", "example.com", None));
        assert!(!ok("http://evil.test", "localhost:8080", None));
        assert!(!ok("http://localhost:8081", "localhost:8080", None));
        assert!(!ok("null", "localhost:8080", None));
        assert!(!ok("file://x", "localhost:8080", None));
        assert!(ok(
            "https://ps.example.com",
            "10.0.0.5:8080",
            Some("https://ps.example.com/")
        ));
        assert!(!ok(
            "http://ps.example.com",
            "10.0.0.5:8080",
            Some("https://ps.example.com")
        ));
        assert!(origin_allowed(&headers(&[("host", "x")]), None));
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; ps_session=pss_abc; b=2")]);
        assert_eq!(cookie(&h), Some("pss_abc"));
        let h = headers(&[("cookie", "a=1"), ("cookie", "ps_session=pss_x")]);
        assert_eq!(cookie(&h), Some("pss_x"));
        assert_eq!(cookie(&headers(&[("cookie", "xps_session=1")])), None);
        assert_eq!(cookie(&headers(&[("cookie", "ps_session=")])), None);
    }

    #[test]
    fn failed_sign_ins_are_limited_per_address() {
        let f = Failures(Mutex::default());
        let ip = Some(IpAddr::from([192, 0, 2, 1]));
        for i in 0..Failures::MAX {
            assert_eq!(f.blocked(ip, 1000 + i64::from(i)), None);
            f.note(ip, 1000 + i64::from(i));
        }
        assert!(f.blocked(ip, 2000).is_some());
        assert_eq!(f.blocked(Some(IpAddr::from([192, 0, 2, 2])), 2000), None);
        assert_eq!(f.blocked(ip, 1000 + Failures::WINDOW_MS), None);
    }
}
