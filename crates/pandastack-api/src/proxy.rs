//! The preview proxy: a listener of its own that routes `<port>-<sandbox id>.<domain>` (the
//! request's Host, or `:authority` over HTTP/2) to TCP `port` inside that sandbox, through the
//! host boundary ([`pandastack_host::Host::connect_port`]) — so the mapping holds whichever
//! network slot the sandbox has, and across hibernate and wake.
//!
//! - **Access.** A port is private unless made public (`PATCH …/ports/{port}`): a request then
//!   needs the sandbox's token (header `X-PandaStack-Access-Token`, cookie
//!   `pandastack_access`, or `?pandastack_access=` once, which sets the cookie and redirects) or
//!   an API key of the sandbox's workspace (`Authorization: Bearer`). These credentials are
//!   taken off the request before it reaches the sandbox.
//! - **Wake.** A request to a hibernated sandbox wakes it and waits up to the configured bound;
//!   past it the answer is 503 with `Retry-After` (the wake goes on).
//! - **Activity.** Proxied requests count as activity for the idle timeout.
//! - **Protocols.** Clients speak HTTP/1.1 or HTTP/2; the sandbox is spoken to in HTTP/1.1 over
//!   connections kept alive between requests ([`crate::upstream`]), bodies streamed both ways,
//!   and WebSocket (any `Upgrade`) requests are joined end to end, over a connection of their
//!   own, once the sandbox answers 101.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use pandastack_api_types::{ErrorCode, SandboxState, ACCESS_TOKEN_HEADER};
use pandastack_host::{GuestErrorKind, HostError};
use pandastack_store::{now_ms, SandboxRow};

use crate::error::{ApiError, ApiResult};
use crate::ApiState;

/// Cookie that carries a sandbox's access token (host-only: each preview host has its own).
const COOKIE: &str = "pandastack_access";
/// Query parameter that sets [`COOKIE`] on a first visit.
const QUERY: &str = "pandastack_access";
/// Activity is written at most this often per sandbox by proxied traffic.
const ACTIVITY_EVERY_MS: i64 = 5_000;
/// `Retry-After` of a request that timed out waiting for a wake.
const RETRY_AFTER_S: u64 = 2;

/// Where preview URLs point and how long a request waits for a wake.
#[derive(Debug, Clone)]
pub struct PreviewConfig {
    /// `http` or `https` (TLS is terminated in front of the proxy).
    pub scheme: String,
    /// `<port>-<id>.<domain>` names a sandbox's port.
    pub domain: String,
    /// Port in the URLs (`None`: the scheme's default).
    pub port: Option<u16>,
    /// Longest a request to a hibernated sandbox waits for it to wake.
    pub wake_timeout: Duration,
}

impl PreviewConfig {
    /// From the base URL users reach the proxy at, e.g. `http://localhost:8081` or
    /// `https://preview.example.com`.
    pub fn from_base_url(base: &str, wake_timeout: Duration) -> Result<Self, String> {
        let (scheme, rest) = base
            .split_once("://")
            .ok_or_else(|| format!("preview URL {base:?}: want scheme://domain[:port]"))?;
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "preview URL {base:?}: scheme must be http or https"
            ));
        }
        let rest = rest.trim_end_matches('/');
        if rest.contains('/') || rest.contains('?') || rest.contains('@') {
            return Err(format!("preview URL {base:?}: no path, query or user part"));
        }
        let (domain, port) = match rest.rsplit_once(':') {
            Some((d, p)) => (
                d,
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("preview URL {base:?}: bad port"))?,
                ),
            ),
            None => (rest, None),
        };
        let valid = !domain.is_empty()
            && domain.split('.').all(|l| {
                !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            });
        if !valid {
            return Err(format!(
                "preview URL {base:?}: {domain:?} is not a domain name"
            ));
        }
        Ok(Self {
            scheme: scheme.to_owned(),
            domain: domain.to_ascii_lowercase(),
            port,
            wake_timeout,
        })
    }

    /// The URL of `port` in sandbox `id`.
    pub fn url(&self, port: u16, id: &str) -> String {
        let default = if self.scheme == "https" { 443 } else { 80 };
        match self.port {
            Some(p) if p != default => format!("{}://{port}-{id}.{}:{p}", self.scheme, self.domain),
            _ => format!("{}://{port}-{id}.{}", self.scheme, self.domain),
        }
    }

    /// The app a request's host names (`<app>.<domain>`, the app name starting with a letter).
    fn app_name(&self, host: &str) -> Option<String> {
        let label = self.label(host)?;
        pandastack_api_types::validate_app_name("host", &label)
            .is_ok()
            .then_some(label)
    }

    /// The one label a request's host has under the domain (port and case aside).
    fn label(&self, host: &str) -> Option<String> {
        let host = host.to_ascii_lowercase();
        let name = match host.rsplit_once(':') {
            Some((n, p)) if p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => host.as_str(),
        };
        let label = name.strip_suffix(&self.domain)?.strip_suffix('.')?;
        (!label.contains('.')).then(|| label.to_owned())
    }

    /// The port and sandbox id a request's host names (`None`: not a preview host).
    fn route(&self, host: &str) -> Option<(u16, String)> {
        let label = self.label(host)?;
        let (port, id) = label.split_once('-')?;
        let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
        (!id.is_empty()).then(|| (port, id.to_owned()))
    }
}

/// The proxy's router: everything goes to one handler.
pub fn proxy_router(app: Arc<ApiState>) -> Router {
    Router::new().fallback(handle).with_state(app)
}

async fn handle(State(app): State<Arc<ApiState>>, req: Request) -> Response {
    let kind = kind_of(&app, &req);
    let resp = match forward(&app, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    pandastack_telemetry::metrics().proxied(kind, resp.status().as_u16());
    resp
}

/// What a proxied request is for, for the metrics: a preview URL, an app, a function or a
/// custom domain.
fn kind_of(app: &ApiState, req: &Request) -> &'static str {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
        })
        .unwrap_or_default();
    if app.preview.route(host).is_some() {
        "preview"
    } else {
        match app.preview.app_name(host) {
            Some(n) if n.starts_with(pandastack_api_types::FUNCTION_HOST_PREFIX) => "function",
            Some(_) => "app",
            None => "domain",
        }
    }
}

/// How a request got in.
enum Access {
    /// The port is public.
    Public,
    /// The sandbox's token (header or cookie).
    Token,
    /// An API key of the sandbox's workspace.
    Key,
    /// The token in the query: answer with the cookie and a redirect to the clean URL.
    SetCookie(String),
}

async fn forward(app: &Arc<ApiState>, mut req: Request) -> ApiResult<Response> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            req.headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let Some((port, id)) = app.preview.route(&host) else {
        if let Some(name) = app.preview.app_name(&host) {
            return forward_app(app, &name, req).await;
        }
        return forward_domain(app, &host, req).await;
    };
    let mut row = app.control.sandboxes.by_id(&id).await?;
    match authorize(app, &row, port, req.headers(), req.uri()).await? {
        Access::SetCookie(token) => return Ok(set_cookie(req.uri(), &token)),
        Access::Key => {
            req.headers_mut().remove(header::AUTHORIZATION);
        }
        Access::Public | Access::Token => {}
    }
    strip_credentials(req.headers_mut());
    if row.state == SandboxState::Hibernated {
        row = wake(app, row).await?;
    } else if now_ms() - row.last_activity_at >= ACTIVITY_EVERY_MS {
        crate::ws::touch(app, &row.id).await;
    }
    send(app, &row, port, req).await
}

/// A request for app `name`: to its live version's VM, woken if it hibernated. Apps are
/// public; nothing is taken off the request.
async fn forward_app(app: &Arc<ApiState>, name: &str, req: Request) -> ApiResult<Response> {
    if name.starts_with(pandastack_api_types::FUNCTION_HOST_PREFIX) {
        if let Some((lease, port)) = app.control.functions.function_lease(name).await? {
            return forward_function(app, lease, port, req).await;
        }
    }
    let Some(route) = app.control.apps.route(name).await? else {
        return Err(ApiError::not_found(ErrorCode::AppNotFound, "app", name));
    };
    let mut row = route.sandbox;
    if row.state == SandboxState::Hibernated {
        let t = std::time::Instant::now();
        row = wake(app, row).await?;
        tracing::debug!(app = name, sandbox = %row.id, ms = t.elapsed().as_millis() as u64, "woken for a request");
    } else if now_ms() - row.last_activity_at >= ACTIVITY_EVERY_MS {
        // A write to the store: off the request's path (the cached route learns of it, so the
        // next requests do not write again).
        app.control.apps.note_activity(name, &row.id, now_ms());
        let (app, id) = (Arc::clone(app), row.id.clone());
        tokio::spawn(async move { crate::ws::touch(&app, &id).await });
    }
    send(app, &row, route.port, req).await
}

/// A request for a public function's endpoint (`fn-<name>.<domain>`): to an instance of its
/// live version (restored from the baked snapshot when none is warm), bounded by the
/// function's time limit; an instance that runs past it is discarded.
async fn forward_function(
    app: &Arc<ApiState>,
    lease: pandastack_control::apps::function::FunctionLease,
    port: u16,
    req: Request,
) -> ApiResult<Response> {
    let row = lease.sandbox().clone();
    match tokio::time::timeout(lease.timeout, send(app, &row, port, req)).await {
        Ok(r) => r,
        Err(_) => {
            let limit = lease.timeout;
            lease.discard().await;
            Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("the function did not answer within {limit:?}; its instance was discarded"),
            ))
        }
    }
}

/// A request for a host that is neither a preview host nor `<app>.<domain>`: an app's custom
/// domain, or an ACME CA fetching the HTTP-01 challenge of one.
async fn forward_domain(app: &Arc<ApiState>, host: &str, req: Request) -> ApiResult<Response> {
    let name = host
        .rsplit_once(':')
        .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
        .map_or(host, |(name, _)| name)
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if let Some(token) = req.uri().path().strip_prefix(ACME_CHALLENGE) {
        if let Some(key_auth) = app.control.domains.acme_challenge(token).await? {
            return Ok((
                [(header::CONTENT_TYPE, "application/octet-stream")],
                key_auth,
            )
                .into_response());
        }
    }
    match app.control.domains.app_for_domain(&name).await? {
        Some(app_name) => match https_redirect(app, &name, req.uri(), over_tls(&req)).await {
            Some(to) => {
                Ok((StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, to)]).into_response())
            }
            None => forward_app(app, &app_name, req).await,
        },
        None => Err(ApiError::new(
            ErrorCode::NotFound,
            format!(
                "{host:?} is not a preview host or an app's domain: use <port>-<sandbox id>.{} \
                 or <app>.{}, or add the domain to an app",
                app.preview.domain, app.preview.domain
            ),
        )),
    }
}

/// Where `req`, for custom domain `name`, is redirected to over HTTPS: with
/// `--https-redirect`, when it came over plain HTTP and the name has a certificate of its own.
async fn https_redirect(app: &ApiState, name: &str, uri: &Uri, over_tls: bool) -> Option<String> {
    let r = app.https_redirect.as_ref()?;
    (!over_tls && r.tls.has_own(name).await).then(|| crate::tls::https_location(name, r.port, uri))
}

/// Whether `req` came over the proxy's TLS listener.
fn over_tls(req: &Request) -> bool {
    req.extensions().get::<crate::tls::OverTls>().is_some()
}

/// Where ACME CAs fetch HTTP-01 challenges (RFC 8555 §8.3).
const ACME_CHALLENGE: &str = "/.well-known/acme-challenge/";

/// Whether `req` may reach `port` of `row`.
async fn authorize(
    app: &ApiState,
    row: &SandboxRow,
    port: u16,
    headers: &HeaderMap,
    uri: &Uri,
) -> ApiResult<Access> {
    if row.public_ports.contains(&port) {
        return Ok(Access::Public);
    }
    let token = &row.access_token;
    let ok = |t: &str| !token.is_empty() && same_secret(t, token);
    if let Some(t) = query_token(uri) {
        return if ok(&t) {
            Ok(Access::SetCookie(t))
        } else {
            Err(denied(port, &row.id))
        };
    }
    let header = headers
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    if header.is_some_and(ok) || cookie_token(headers).is_some_and(|t| ok(&t)) {
        return Ok(Access::Token);
    }
    if let Some(secret) = crate::extract::bearer(headers) {
        if let Some(key) = app.store.keys().verify(secret).await? {
            if key.workspace_id == row.workspace_id {
                return Ok(Access::Key);
            }
        }
    }
    Err(denied(port, &row.id))
}

fn denied(port: u16, id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        format!(
            "port {port} of sandbox {id} is private: send the sandbox's token in \
             {ACCESS_TOKEN_HEADER} (GET /v1/sandboxes/{id}/ports/{port}/url gives it), or make \
             the port public"
        ),
    )
}

/// Equal secrets, compared in time independent of where they differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        kv.strip_prefix(QUERY)
            .and_then(|v| v.strip_prefix('='))
            .map(str::to_owned)
    })
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (name, value) = c.trim().split_once('=')?;
            (name == COOKIE).then(|| value.to_owned())
        })
}

/// Takes the proxy's own credentials off a request bound for the sandbox.
fn strip_credentials(headers: &mut HeaderMap) {
    headers.remove(ACCESS_TOKEN_HEADER);
    let cookies: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|c| !c.is_empty() && c.split_once('=').is_none_or(|(n, _)| n != COOKIE))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if !cookies.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&cookies.join("; ")) {
            headers.insert(header::COOKIE, v);
        }
    }
}

/// A redirect to `uri` without the token parameter, setting the cookie.
fn set_cookie(uri: &Uri, token: &str) -> Response {
    let query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with(&format!("{QUERY}=")))
        .collect();
    let mut location = uri.path().to_owned();
    if !query.is_empty() {
        location.push('?');
        location.push_str(&query.join("&"));
    }
    let cookie = format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax");
    let mut resp = StatusCode::FOUND.into_response();
    if let (Ok(l), Ok(c)) = (
        HeaderValue::from_str(&location),
        HeaderValue::from_str(&cookie),
    ) {
        resp.headers_mut().insert(header::LOCATION, l);
        resp.headers_mut().insert(header::SET_COOKIE, c);
    }
    resp
}

/// Wakes a hibernated sandbox for a request, waiting at most the configured bound (a sandbox
/// moving to another host is followed there). The wake runs as a task of its own: a request
/// that gives up (or a client that goes away) never cuts a wake off half-way.
async fn wake(app: &Arc<ApiState>, row: SandboxRow) -> ApiResult<SandboxRow> {
    let (sandboxes, id) = (app.control.sandboxes.clone(), row.id.clone());
    let woke = tokio::spawn(async move { sandboxes.awake(row).await });
    match tokio::time::timeout(app.preview.wake_timeout, woke).await {
        Err(_) => {
            let mut e = ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "sandbox {} is waking up and did not answer within {} s; try again",
                    id,
                    app.preview.wake_timeout.as_secs()
                ),
            );
            e.retry_after = Some(RETRY_AFTER_S);
            Err(e)
        }
        Ok(Err(e)) => Err(ApiError::internal("wake", &e)),
        Ok(Ok(r)) => Ok(r?),
    }
}

/// Sends `req` to `port` of sandbox `row`, and the answer back: over a kept-alive connection
/// of the proxy's pool when there is one (see [`crate::upstream`]), else over a new one; an
/// upgrade (WebSocket) always over a new one, joined end to end once the sandbox answers 101.
async fn send(
    app: &ApiState,
    row: &SandboxRow,
    port: u16,
    mut req: Request,
) -> ApiResult<Response> {
    let id = row.id.as_str();
    // HTTP/2 clients name the host in `:authority`; the sandbox hears HTTP/1.1 with a Host.
    if !req.headers().contains_key(header::HOST) {
        if let Some(v) = req
            .uri()
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            req.headers_mut().insert(header::HOST, v);
        }
    }
    let origin_form = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    *req.uri_mut() = origin_form
        .parse()
        .unwrap_or_else(|_| Uri::from_static("/"));
    *req.version_mut() = Version::HTTP_11;
    if req.headers().contains_key(header::UPGRADE) {
        return send_upgrade(app, id, port, req).await;
    }
    crate::upstream::strip_hop_by_hop(req.headers_mut());
    // A paused sandbox's request goes through the dial, which answers for its state.
    let pooled = row.state == SandboxState::Running;
    let mut again = crate::upstream::replayable(&req);
    while let Some(mut conn) = pooled.then(|| app.upstreams.take(id, port)).flatten() {
        match conn.try_send_request(req).await {
            Ok(resp) => {
                app.upstreams.recycle(id, port, conn);
                return Ok(answer(resp));
            }
            Err(mut e) => match e.take_message() {
                // Not written: the next idle connection, or a new one.
                Some(r) => req = r,
                // Written when the connection failed (its server closing it just then): a
                // request safe to repeat goes once more, on a new connection.
                None => match again.take() {
                    Some(r) => {
                        req = r;
                        break;
                    }
                    None => return Err(upstream(id, port, e.error())),
                },
            },
        }
    }
    let t = std::time::Instant::now();
    let (mut conn, task) = dial(app, id, port).await?;
    tracing::debug!(
        sandbox = id,
        port,
        ms = t.elapsed().as_secs_f64() * 1e3,
        "dialed"
    );
    tokio::spawn(async move {
        if let Err(e) = task.await {
            tracing::debug!(error = &e as &dyn std::error::Error, "preview connection");
        }
    });
    let resp = conn
        .send_request(req)
        .await
        .map_err(|e| upstream(id, port, &e))?;
    tracing::debug!(
        sandbox = id,
        port,
        ms = t.elapsed().as_secs_f64() * 1e3,
        "answered on a new connection"
    );
    if pooled {
        app.upstreams.recycle(id, port, conn);
    }
    Ok(answer(resp))
}

/// The sandbox's answer to a request that is not an upgrade, without the headers that were
/// about the connection into the sandbox.
fn answer(mut resp: Response<hyper::body::Incoming>) -> Response {
    for h in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        resp.headers_mut().remove(h);
    }
    resp.map(Body::new)
}

/// A connection request with an `Upgrade`: over a connection of its own (never pooled), the
/// two sides joined once the sandbox answers 101.
async fn send_upgrade(
    app: &ApiState,
    id: &str,
    port: u16,
    mut req: Request,
) -> ApiResult<Response> {
    let (mut sender, conn) = dial(app, id, port).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = &e as &dyn std::error::Error, "preview connection");
        }
    });
    let client_side = hyper::upgrade::on(&mut req);
    let mut resp = sender
        .send_request(req)
        .await
        .map_err(|e| upstream(id, port, &e))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(answer(resp));
    }
    let sandbox_side = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (Ok(client), Ok(sandbox)) = tokio::join!(client_side, sandbox_side) else {
            return;
        };
        let _ =
            tokio::io::copy_bidirectional(&mut TokioIo::new(client), &mut TokioIo::new(sandbox))
                .await;
    });
    Ok(resp.map(Body::new))
}

/// A new HTTP/1.1 connection to `port` in sandbox `id` (one port stream through the host
/// boundary): its sender and the task that drives it (to be spawned).
async fn dial(
    app: &ApiState,
    id: &str,
    port: u16,
) -> ApiResult<(
    hyper::client::conn::http1::SendRequest<Body>,
    hyper::client::conn::http1::Connection<TokioIo<Box<dyn pandastack_host::PortIo>>, Body>,
)> {
    let io = app
        .control
        .host()
        .connect_port(id, port)
        .await
        .map_err(|e| match e {
            HostError::Guest {
                kind: GuestErrorKind::Unavailable,
                message,
            } => ApiError::new(
                ErrorCode::PortNotListening,
                format!("sandbox {id}, port {port}: {message}"),
            ),
            e => e.into(),
        })?;
    hyper::client::conn::http1::handshake::<_, Body>(TokioIo::new(io))
        .await
        .map_err(|e| upstream(id, port, &e))
}

fn upstream(id: &str, port: u16, e: &hyper::Error) -> ApiError {
    ApiError::new(
        ErrorCode::PortNotListening,
        format!("sandbox {id}, port {port}: the app did not answer in HTTP: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(base: &str) -> PreviewConfig {
        PreviewConfig::from_base_url(base, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn urls_and_routes_agree() {
        let c = cfg("http://localhost:8081");
        assert_eq!(c.url(3000, "sb-1a"), "http://3000-sb-1a.localhost:8081");
        assert_eq!(
            c.route("3000-sb-1a.localhost:8081"),
            Some((3000, "sb-1a".into()))
        );
        assert_eq!(
            c.route("3000-SB-1A.LOCALHOST"),
            Some((3000, "sb-1a".into()))
        );
        let c = cfg("https://preview.example.com/");
        assert_eq!(c.url(80, "sb-2"), "https://80-sb-2.preview.example.com");
        assert_eq!(
            c.route("80-sb-2.preview.example.com"),
            Some((80, "sb-2".into()))
        );
        for bad in [
            "preview.example.com",
            "x.80-sb-2.preview.example.com",
            "0-sb-2.preview.example.com",
            "70000-sb-2.preview.example.com",
            "80-.preview.example.com",
            "80-sb-2.example.com",
            "80-sb-2preview.example.com",
        ] {
            assert_eq!(c.route(bad), None, "{bad}");
        }
    }

    #[test]
    fn bad_base_urls_are_refused() {
        for bad in [
            "localhost:8081",
            "ftp://x",
            "http://x/y",
            "http://",
            "http://a..b",
            "http://x:99999",
        ] {
            assert!(
                PreviewConfig::from_base_url(bad, Duration::ZERO).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn credentials_are_found_and_stripped() {
        let mut h = HeaderMap::new();
        h.insert(ACCESS_TOKEN_HEADER, HeaderValue::from_static("t"));
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; pandastack_access=tok"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie_token(&h).as_deref(), Some("tok"));
        strip_credentials(&mut h);
        assert!(h.get(ACCESS_TOKEN_HEADER).is_none());
        assert_eq!(h.get(header::COOKIE).unwrap(), "a=1; b=2");
        let uri: Uri = "/p?x=1&pandastack_access=tok&y=2".parse().unwrap();
        assert_eq!(query_token(&uri).as_deref(), Some("tok"));
        let r = set_cookie(&uri, "tok");
        assert_eq!(r.status(), StatusCode::FOUND);
        assert_eq!(r.headers()[header::LOCATION], "/p?x=1&y=2");
        assert!(r.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .starts_with("pandastack_access=tok;"));
        assert!(
            same_secret("abc", "abc") && !same_secret("abc", "abd") && !same_secret("ab", "abc")
        );
    }
}
