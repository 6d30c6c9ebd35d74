//! The PandaStack `/v1` HTTP API on axum: `router(app)` serves sandboxes (create, list, get,
//! patch, delete, exec, files, snapshots, fork, pause/resume, hibernate/wake with auto-wake,
//! logs with follow, metrics, exec and PTY over WebSocket), templates, keys, the operator routes
//! (hosts, admin keys only) and the OpenAPI document of all of it (`GET /v1/openapi.json`),
//! and beside `/v1` the web console (`GET /`, `/console/…`: [`console`]). Handlers validate at the edge, check the caller's
//! workspace against the store, and hand lifecycle work to the host agent; every error goes
//! through [`error::ApiError`]. It must not start VMs itself or know which hypervisor runs them.

mod apps;
mod audit;
mod code;
pub mod console;
mod databases;
pub mod db_front;
mod error;
mod events;
mod exec_ws;
mod extract;
mod file_urls;
mod functions;
mod hosts;
mod idempotency;
mod keys;
mod logs;
mod members;
mod meta;
mod metrics;
pub mod openapi;
mod operator_metrics;
mod page;
mod ports;
pub mod proxy;
mod pty;
mod routes;
mod sandboxes;
mod schedules;
mod schemas;
mod snapshots;
mod templates;
pub mod tls;
mod upstream;
mod usage;
mod utf8;
mod volumes;
mod watch;
mod webhooks;
mod workload;
mod ws;

pub use audit::AuditLog;
pub use db_front::serve_db_front;
pub use error::{ApiError, ApiResult};
pub use openapi::{document, ApiDoc};
pub use operator_metrics::metrics_router;
pub use proxy::{proxy_router, PreviewConfig};
pub use routes::operations;
pub use sandboxes::wire_state;
pub use tls::{serve_proxy_tls, ProxyTls};

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use pandastack_control::ControlPlane;
use pandastack_store::Store;

/// Largest JSON body accepted (file uploads are streamed and not bound by this).
pub const MAX_JSON_BODY: usize = 1 << 20;
/// Largest stdout (and stderr) a blocking exec returns.
pub const MAX_EXEC_OUTPUT: u64 = 4 << 20;

/// Shared state of the API: the control plane it hands work to, and what only HTTP needs.
pub struct ApiState {
    /// Every service of the control plane, and the host behind it.
    pub control: ControlPlane,
    /// The state store, for authentication, idempotency records and the operator's host rows
    /// only (everything else goes through [`Self::control`]).
    pub store: Store,
    /// Name of this host in sandbox objects.
    pub host_name: String,
    /// Preview URLs of sandbox ports.
    pub preview: PreviewConfig,
    /// The proxy's idle kept-alive connections into sandboxes.
    upstreams: upstream::Upstreams,
    /// Plain-HTTP requests for certified custom domains redirected to HTTPS (`None`: served).
    https_redirect: Option<tls::HttpsRedirect>,
    /// The writer of the audit log.
    pub audit: audit::AuditLog,
    /// The web console's settings.
    pub console: console::ConsoleConfig,
}

impl ApiState {
    pub fn new(control: ControlPlane, host_name: String, preview: PreviewConfig) -> Self {
        Self {
            audit: audit::AuditLog::new(control.store().clone()),
            store: control.store().clone(),
            control,
            host_name,
            preview,
            upstreams: upstream::Upstreams::default(),
            https_redirect: None,
            console: console::ConsoleConfig::default(),
        }
    }

    /// The web console's settings (session length, public URL).
    pub fn with_console(mut self, console: console::ConsoleConfig) -> Self {
        self.console = console;
        self
    }

    /// The host a sandbox object names: the row's host in a cluster (its placement), this
    /// host's name on a single-node server.
    pub fn host_of<'a>(&'a self, row_host_id: &'a str) -> &'a str {
        match self.control.place_mode() {
            pandastack_control::PlaceMode::AcrossHosts => row_host_id,
            pandastack_control::PlaceMode::ThisHost => &self.host_name,
        }
    }

    /// Keeps audit rows for `retention` (at least an hour; default 90 days).
    pub fn with_audit_retention(mut self, retention: std::time::Duration) -> Self {
        self.audit.set_retention(retention);
        self
    }

    /// Answers plain-HTTP requests for apps' custom domains that have a certificate of their
    /// own with a redirect to HTTPS (see [`tls::HttpsRedirect`]).
    pub fn with_https_redirect(mut self, redirect: tls::HttpsRedirect) -> Self {
        self.https_redirect = Some(redirect);
        self
    }
}

/// The `/v1` router: every operation of [`openapi::ApiDoc`] (one table, see [`routes`]),
/// fallbacks answering an unknown path (`not_found`) and a method a path does not serve
/// (`method_not_allowed`, with `Allow`) in the error envelope, the JSON body limit and request ids.
pub fn router(app: Arc<ApiState>) -> Router {
    front_door(
        routes::register(Router::new()).merge(console::routes()),
        app,
    )
}

/// [`router`] with `service` mounted at `path` (and below it) behind the same front door: a
/// request id, and an API key checked before the service sees anything — a request without a
/// valid `Authorization: Bearer` key is answered `401 unauthorized` in the error envelope. The
/// service is not in the OpenAPI document: it speaks a protocol of its own (the MCP endpoint
/// at `/mcp`).
pub fn router_with_service<S>(app: Arc<ApiState>, path: &str, service: S) -> Router
where
    S: tower::Service<Request, Error = std::convert::Infallible> + Clone + Send + Sync + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    listener_router(app, path, service, true)
}

/// [`router_with_service`], with the web console (`/`, `/console/…`) or without it: a server
/// given `--console-listen` serves the console on that listener only (which also serves `/v1`,
/// the console's same-origin API) and not on the API listener.
pub fn listener_router<S>(app: Arc<ApiState>, path: &str, service: S, console: bool) -> Router
where
    S: tower::Service<Request, Error = std::convert::Infallible> + Clone + Send + Sync + 'static,
    S::Response: axum::response::IntoResponse,
    S::Future: Send + 'static,
{
    let guarded =
        Router::new()
            .fallback_service(service)
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&app),
                require_key,
            ));
    let routes = routes::register(Router::new()).nest_service(path, guarded);
    let routes = if console {
        routes.merge(console::routes())
    } else {
        routes
    };
    front_door(routes, app)
}

/// Refuses a request without a valid API key (the [`extract::Caller`] rejection), else passes it on.
async fn require_key(_caller: extract::Caller, req: Request, next: Next) -> Response {
    next.run(req).await
}

/// The fallbacks, body limit, audit and request ids every router of the API listener has.
fn front_door(routes: Router<Arc<ApiState>>, app: Arc<ApiState>) -> Router {
    routes
        .fallback(|| async {
            ApiError::new(pandastack_api_types::ErrorCode::NotFound, "no such route")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                pandastack_api_types::ErrorCode::MethodNotAllowed,
                "this path does not serve this method (see Allow)",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            audit::record,
        ))
        .layer(axum::middleware::from_fn(request_id))
        .with_state(app)
}

/// Counts and times an API request in the process's metrics, by its route template.
fn record(method: &axum::http::Method, route: String, status: u16, took: std::time::Duration) {
    let m = pandastack_telemetry::metrics();
    m.http_requests
        .get_or_create(&pandastack_telemetry::HttpRequest {
            method: method.as_str().to_owned(),
            route: route.clone(),
            status,
        })
        .inc();
    m.http_request_seconds
        .get_or_create(&pandastack_telemetry::HttpRoute {
            method: method.as_str().to_owned(),
            route,
        })
        .observe(took.as_secs_f64());
}

/// Gives every request an id (the client's `X-Request-Id` if sane, else a new one), makes it
/// available to error responses, and returns it in `X-Request-Id`.
async fn request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("req_{:016x}", rand::random::<u64>()));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let has_body = req
        .headers()
        .contains_key(axum::http::header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v != "0");
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |p| p.as_str())
        .to_owned();
    let t = Instant::now();
    // One span per request, named by its route template (a trace's root).
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        request_id = %id,
    );
    let mut resp = tracing::Instrument::instrument(
        error::REQUEST_ID.scope(id.clone(), next.run(req)),
        span.clone(),
    )
    .await;
    span.record("http.response.status_code", resp.status().as_u16());
    record(&method, route, resp.status().as_u16(), t.elapsed());
    tracing::debug!(request_id = %id, %method, %path, status = resp.status().as_u16(), ms = t.elapsed().as_millis() as u64, "request");
    if let Some(cause) = resp.extensions_mut().remove::<error::InternalCause>() {
        cause.log(&id, &format!("{method} {path}"));
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    // A request refused before its body was read (a bad path on an upload, say) leaves that
    // body unread, and the server then closes the connection; saying so keeps a keep-alive
    // client from sending its next request on it (seen as "server disconnected").
    if has_body && (resp.status().is_client_error() || resp.status().is_server_error()) {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    resp
}

/// RFC 3339 for a unix-ms timestamp.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
