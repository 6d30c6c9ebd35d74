//! The audit log: every state-changing call (any method but `GET`/`HEAD`/`OPTIONS`, and the
//! `GET`s that run something in a VM: exec and PTY over WebSocket) of an authenticated key is
//! recorded — who (key id and name, its member), what (the operation), which resource, the
//! result, the caller's address and when. Never a body, a query string or a header: secrets in
//! requests (key secrets, passwords, env values) cannot reach the log.
//!
//! [`record`] is the middleware. The key is known only inside the handler's extractors, so the
//! middleware hands each request a [`Who`] slot that [`crate::extract::Caller`] fills once the
//! key is verified (before its scope is checked: a refused call is recorded too). Rows go to
//! one writer task per API state ([`AuditLog`]) that stores them in batches, off the request's
//! path; [`AuditLog::flush`] waits until every row sent before it is stored. The writer also
//! deletes rows older than the retention, once an hour.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::{ConnectInfo, MatchedPath, Query, RawPathParams, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use axum::Json;
use pandastack_api_types::{self as wire, Action, ErrorCode, List};
use pandastack_store::{AuditFilter, AuditRow, KeyRow, Store};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;
use crate::{rfc3339, ApiState};

/// How long rows are kept unless the operator says otherwise.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(90 * 86_400);

/// Rows waiting for the writer, at most (a full queue makes requests wait: none is dropped).
const QUEUE: usize = 4096;
/// Rows stored in one transaction, at most.
const BATCH: usize = 256;

/// The key behind a request, filled in by [`Caller`] once verified.
#[derive(Clone, Default)]
pub(crate) struct Who(Arc<Mutex<Option<KeyRow>>>);

impl Who {
    pub(crate) fn set(&self, key: &KeyRow) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(key.clone());
    }

    fn take(&self) -> Option<KeyRow> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The error code of a failed call, put on its response by [`ApiError`].
#[derive(Clone, Copy)]
pub(crate) struct Failed(pub ErrorCode);

enum Msg {
    Row(Box<AuditRow>),
    Flush(oneshot::Sender<()>),
}

/// The writer of one API state's audit rows (started with the first row).
pub struct AuditLog {
    store: Store,
    retention: Duration,
    tx: OnceLock<mpsc::Sender<Msg>>,
}

impl AuditLog {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            store,
            retention: DEFAULT_RETENTION,
            tx: OnceLock::new(),
        }
    }

    pub(crate) fn set_retention(&mut self, retention: Duration) {
        self.retention = retention.max(Duration::from_secs(3600));
    }

    fn sender(&self) -> &mpsc::Sender<Msg> {
        self.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(write(self.store.clone(), self.retention, rx));
            tx
        })
    }

    async fn send(&self, row: AuditRow) {
        if self.sender().send(Msg::Row(Box::new(row))).await.is_err() {
            tracing::warn!("the audit writer has stopped: a row is lost");
        }
    }

    /// Waits until every row sent before this call is stored (or its batch failed, logged).
    pub async fn flush(&self) {
        let Some(tx) = self.tx.get() else {
            return;
        };
        let (done, wait) = oneshot::channel();
        if tx.send(Msg::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

/// The writer task: stores rows in batches, answers flushes after what came before them, and
/// prunes rows older than `retention` once an hour. Ends when every sender is gone.
async fn write(store: Store, retention: Duration, mut rx: mpsc::Receiver<Msg>) {
    let mut prune = tokio::time::interval(Duration::from_secs(3600));
    loop {
        let first = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
            _ = prune.tick() => {
                let before = pandastack_store::now_ms() - retention.as_millis() as i64;
                match store.audit().prune(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(rows = n, "pruned audit rows past their retention"),
                    Err(e) => tracing::warn!(error = &e as &dyn std::error::Error, "prune the audit log"),
                }
                continue;
            }
        };
        let mut rows = Vec::new();
        let mut flushes = Vec::new();
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Row(r) => rows.push(*r),
                Msg::Flush(done) => flushes.push(done),
            }
            if rows.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = store.audit().insert_many(&rows).await {
            tracing::error!(
                rows = rows.len(),
                error = &e as &dyn std::error::Error,
                "store audit rows: they are lost"
            );
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// Whether a call is recorded: it changes something, or runs something in a VM.
fn audited(method: &Method, route: &str) -> bool {
    if !route.starts_with("/v1/") {
        return false;
    }
    match *method {
        Method::GET => {
            pandastack_api_types::needed("GET", route).is_some_and(|(_, a)| a == Action::Exec)
        }
        Method::HEAD | Method::OPTIONS => false,
        _ => true,
    }
}

/// The middleware: records each audited call of a verified key once it is answered.
pub(crate) async fn record(
    State(app): State<Arc<ApiState>>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(route) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
    else {
        return next.run(req).await;
    };
    let method = req.method().clone();
    if !audited(&method, &route) {
        return next.run(req).await;
    }
    let who = Who::default();
    req.extensions_mut().insert(who.clone());
    let source = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let (mut parts, body) = req.into_parts();
    let named = {
        use axum::extract::FromRequestParts;
        RawPathParams::from_request_parts(&mut parts, &())
            .await
            .ok()
            .and_then(|p| p.iter().next().map(|(_, v)| v.to_owned()))
    };
    let resp = next.run(Request::from_parts(parts, body)).await;
    let Some(key) = who.take() else {
        // No key, or not a valid one: nothing to attribute the call to.
        return resp;
    };
    let (resp, created) = if named.is_none() && resp.status() == axum::http::StatusCode::CREATED {
        created_id(resp).await
    } else {
        (resp, None)
    };
    let now = pandastack_store::now_ms();
    let kind = route
        .strip_prefix("/v1/")
        .and_then(|r| r.split('/').next())
        .unwrap_or_default()
        .to_owned();
    let row = AuditRow {
        id: AuditRow::new_id(now),
        workspace_id: key.workspace_id.clone(),
        at: now,
        key_id: key.id.clone(),
        key_name: key.name.clone(),
        member_id: key.member_id.clone(),
        action: crate::routes::operation_id(&method, &route)
            .unwrap_or_else(|| format!("{method} {route}")),
        method: method.to_string(),
        route,
        resource_kind: kind,
        resource_id: named.or(created),
        status: i64::from(resp.status().as_u16()),
        error_code: resp.extensions().get::<Failed>().map(|f| code_name(f.0)),
        source,
        request_id: crate::error::REQUEST_ID
            .try_with(|id| id.clone())
            .unwrap_or_default(),
    };
    app.audit.send(row).await;
    resp
}

/// The snake_case name of an error code, as on the wire.
fn code_name(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{code:?}"))
}

/// The `id` (or `name`) a create answered with, read from its JSON body (which is passed on
/// unchanged). Only bodies of a known, small size are read; nothing else of them is kept.
async fn created_id(resp: Response) -> (Response, Option<String>) {
    use axum::body::HttpBody as _;
    const MAX: u64 = 256 << 10;
    let json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json || resp.body().size_hint().upper().is_none_or(|n| n > MAX) {
        return (resp, None);
    }
    let (parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX as usize).await {
        Ok(b) => b,
        Err(_) => return (Response::from_parts(parts, axum::body::Body::empty()), None),
    };
    let id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| {
            ["id", "name"]
                .iter()
                .find_map(|f| v.get(f).and_then(|x| x.as_str()).map(str::to_owned))
        });
    (
        Response::from_parts(parts, axum::body::Body::from(bytes)),
        id,
    )
}

fn entry(r: &AuditRow) -> wire::AuditEntry {
    wire::AuditEntry {
        id: r.id.clone(),
        at: rfc3339(r.at),
        key_id: r.key_id.clone(),
        key_name: r.key_name.clone(),
        member_id: r.member_id.clone(),
        action: r.action.clone(),
        method: r.method.clone(),
        route: r.route.clone(),
        resource: match &r.resource_id {
            Some(id) => format!("{}/{id}", r.resource_kind),
            None => r.resource_kind.clone(),
        },
        result: r.error_code.clone().unwrap_or_else(|| "ok".into()),
        status: u16::try_from(r.status).unwrap_or(0),
        source: r.source.clone(),
        request_id: r.request_id.clone(),
    }
}

/// The workspace's audit log, newest first: every state-changing call with who made it (key
/// and member), the operation, the resource, the result and the caller's address. Needs the
/// scope `audit:read` (owners and admins; not developers or viewers). Rows are kept for the
/// operator's retention (`--audit-retention-days`, default 90).
#[utoipa::path(
    get,
    path = "/v1/audit",
    operation_id = "list_audit",
    tag = "keys",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "1 to 1000 (default 100)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("key_id" = Option<String>, Query, description = "Only calls made with this key"),
        ("resource_id" = Option<String>, Query, description = "Only calls on the resource with this id or name"),
        ("action" = Option<String>, Query, description = "Only this operation (`create_sandbox`)"),
        ("since" = Option<String>, Query, description = "Only calls at or after this time (RFC 3339)"),
    ),
    responses((status = 200, description = "Audit rows, newest first", body = List<wire::AuditEntry>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::AuditEntry>>> {
    let limit = crate::page::limit(&q, 100, 1000)?;
    let text = |name: &str| -> ApiResult<Option<String>> {
        match q.get(name) {
            None => Ok(None),
            Some(v) if v.is_empty() || v.len() > 128 => Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("{name}: 1 to 128 bytes"),
            )),
            Some(v) => Ok(Some(v.clone())),
        }
    };
    let before = text("cursor")?;
    if let Some(c) = &before {
        if !c.starts_with("au-") {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "cursor: not a cursor returned by this API",
            ));
        }
    }
    let since = q
        .get("since")
        .map(|t| {
            time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .map(|at| (at.unix_timestamp_nanos() / 1_000_000) as i64)
                .map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidArgument,
                        format!("since: {t:?} is not an RFC 3339 time"),
                    )
                })
        })
        .transpose()?;
    let filter = AuditFilter {
        before,
        key_id: text("key_id")?,
        resource_id: text("resource_id")?,
        action: text("action")?,
        since,
    };
    // What this process has answered is in the log before it is read.
    app.audit.flush().await;
    let mut rows = app
        .store
        .audit()
        .list(caller.ws(), &filter, i64::from(limit) + 1)
        .await?;
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|r| r.id.clone())
    } else {
        None
    };
    Ok(Json(List {
        data: rows.iter().map(entry).collect(),
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_and_runs_are_audited_reads_are_not() {
        for (m, r) in [
            (Method::POST, "/v1/sandboxes"),
            (Method::DELETE, "/v1/sandboxes/{id}"),
            (Method::PATCH, "/v1/members/{id}"),
            (Method::PUT, "/v1/sandboxes/{id}/fs"),
            (Method::GET, "/v1/sandboxes/{id}/pty"),
            (Method::GET, "/v1/sandboxes/{id}/exec/ws"),
        ] {
            assert!(audited(&m, r), "{m} {r}");
        }
        for (m, r) in [
            (Method::GET, "/v1/sandboxes"),
            (Method::GET, "/v1/sandboxes/{id}/fs"),
            (Method::GET, "/v1/audit"),
            (Method::HEAD, "/v1/sandboxes/{id}"),
            (Method::POST, "/mcp"),
        ] {
            assert!(!audited(&m, r), "{m} {r}");
        }
    }

    #[test]
    fn error_codes_read_as_on_the_wire() {
        assert_eq!(code_name(ErrorCode::Forbidden), "forbidden");
        assert_eq!(code_name(ErrorCode::SandboxNotFound), "sandbox_not_found");
    }
}
