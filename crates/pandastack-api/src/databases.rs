//! Managed PostgreSQL databases. Handlers parse, call the control plane's
//! [`pandastack_control::Databases`] and map. Also the HTTP query broker: `POST …/query` (API
//! key; runs as the owner role) and the Neon-compatible `POST …/sql` (no API key: the
//! `Neon-Connection-String` header's credentials log in, checked by PostgreSQL itself — and
//! the owner's password by the control plane first, so a wrong one wakes nothing). `/sql`
//! answers an id of no database as a wrong password (PostgreSQL's `28P01`): it is no oracle of
//! which database ids exist.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateBranchRequest, CreateDatabaseRequest, DatabaseState, ErrorCode, List,
    QueryRequest, RestoreDatabaseRequest,
};
use pandastack_control::{Credentials, DatabaseError, DatabaseInfo, QueryError, QueryLimits};
use pandastack_pgwire::client::{ClientError, QueryResult};
use pandastack_store::{DatabaseRowState, SandboxState};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::{rfc3339, ApiState};

/// Rows an HTTP query returns at most.
const MAX_ROWS: usize = 10_000;
/// Bytes of row data an HTTP query returns at most.
const MAX_BYTES: usize = 10 << 20;
/// Default statement timeout of an HTTP query.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The extensions of the `postgres` template (made when the template is built; see
/// `templates/postgres.extensions.json`).
const EXTENSIONS: &str = include_str!("../../../templates/postgres.extensions.json");

pub(crate) fn database_wire(app: &ApiState, d: &DatabaseInfo) -> wire::Database {
    let a = &app.control.databases.address;
    let state = match (d.row.state, d.sandbox.as_ref().map(|s| s.state)) {
        (DatabaseRowState::Creating, _) => DatabaseState::Creating,
        (_, Some(SandboxState::Running | SandboxState::Starting | SandboxState::Paused)) => {
            DatabaseState::Ready
        }
        (_, Some(SandboxState::Hibernated)) => DatabaseState::Hibernated,
        (_, Some(SandboxState::Stopped | SandboxState::Failed | SandboxState::Lost) | None) => {
            DatabaseState::Stopped
        }
    };
    wire::Database {
        id: d.row.id.clone(),
        name: d.row.name.clone(),
        version: d.row.version as u32,
        state,
        user: d.row.role_name.clone(),
        connection_uri: a.connection_uri(&d.row),
        pooled_uri: a.pooled_uri(&d.row),
        http_url: a.http_url(&d.row),
        size_gb: d.row.size_gb as u32,
        memory_mb: d.row.memory_mb as u32,
        idle_seconds: d.row.idle_seconds as u64,
        parent: d.row.parent_id.clone(),
        sandbox_id: d.sandbox.as_ref().map(|s| s.id.clone()),
        volume: pandastack_control::database_volume_name(&d.row.id),
        // The host its VM runs on (a cluster's agent host; the server's name on one node).
        host: match &d.sandbox {
            Some(s) => app.host_of(&s.host_id).to_owned(),
            None => app.host_name.clone(),
        },
        created_at: rfc3339(d.row.created_at),
    }
}

/// A database id or name from a path, or 404.
pub(crate) fn id_of(id: &str) -> ApiResult<&str> {
    if wire::valid_name(id, 64) {
        Ok(id)
    } else {
        Err(ApiError::not_found(
            ErrorCode::DatabaseNotFound,
            "database",
            id,
        ))
    }
}

impl From<DatabaseError> for ApiError {
    fn from(e: DatabaseError) -> Self {
        match e {
            DatabaseError::NotFound(id) => {
                Self::not_found(ErrorCode::DatabaseNotFound, "database", &id)
            }
            e @ (DatabaseError::Exists(_) | DatabaseError::NotReady(_)) => {
                Self::new(ErrorCode::Conflict, e.to_string())
            }
            e @ DatabaseError::LoginFailed(_) => Self::new(ErrorCode::Unauthorized, e.to_string()),
            e @ DatabaseError::Bootstrap { .. } => {
                tracing::error!(error = &e as &dyn std::error::Error, "database bootstrap");
                Self::new(ErrorCode::Internal, e.to_string())
            }
            DatabaseError::Volume(e) => e.into(),
            DatabaseError::Control(e) => e.into(),
            DatabaseError::Store(e) => e.into(),
            DatabaseError::Host(e) => e.into(),
            DatabaseError::Query(e) => query_error(e),
            e @ (DatabaseError::BadTime { .. } | DatabaseError::OutsideWindow { .. }) => {
                Self::new(ErrorCode::InvalidArgument, e.to_string())
            }
            e @ DatabaseError::Archive(_) => {
                tracing::error!(error = &e as &dyn std::error::Error, "database archive");
                Self::new(ErrorCode::Unavailable, e.to_string())
            }
        }
    }
}

fn query_error(e: QueryError) -> ApiError {
    match e {
        QueryError::Client(ClientError::Db(db)) => ApiError::new(
            ErrorCode::QueryFailed,
            format!("{} {}: {}", db.severity, db.code, db.message),
        ),
        QueryError::Client(e @ ClientError::TooLarge { .. }) => {
            ApiError::new(ErrorCode::PayloadTooLarge, e.to_string())
        }
        e @ QueryError::Timeout(_) => ApiError::new(ErrorCode::Unavailable, e.to_string()),
        QueryError::Client(e) => {
            ApiError::new(ErrorCode::Unavailable, format!("database connection: {e}"))
        }
    }
}

/// Create a managed PostgreSQL database: its own microVM, its data on a durable volume,
/// reachable at `connection_uri` (TLS) once this returns.
#[utoipa::path(
    post,
    path = "/v1/databases",
    operation_id = "create_database",
    tag = "databases",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")),
    request_body = CreateDatabaseRequest,
    responses((status = 201, description = "The ready database", body = wire::Database))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<CreateDatabaseRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    req.validate()?;
    let idem =
        match idempotency::begin(&app, caller.ws(), &headers, "POST /v1/databases", &req).await? {
            Begin::Replay(status, body) => return Ok((status, body)),
            Begin::Proceed(idem) => idem,
        };
    idempotency::to_completion(async move {
        let result = async {
            let d = app.control.databases.create(caller.ws(), &req).await?;
            Ok((StatusCode::CREATED, database_wire(&app, &d)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// List the workspace's databases by name.
#[utoipa::path(
    get,
    path = "/v1/databases",
    operation_id = "list_databases",
    tag = "databases",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of databases", body = List<wire::Database>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Database>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .databases
        .list(caller.ws(), page.after.clone().map(|c| c.id), page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |d| wire::Cursor {
        created_at_ms: 0,
        id: d.row.name.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|d| database_wire(&app, d)).collect(),
        next_cursor,
    }))
}

/// The extensions a database can load (`CREATE EXTENSION`), per PostgreSQL version.
#[utoipa::path(
    get,
    path = "/v1/databases/extensions",
    operation_id = "list_database_extensions",
    tag = "databases",
    responses((status = 200, description = "Extensions by PostgreSQL major version", body = wire::DatabaseExtensions))
)]
pub async fn extensions(_caller: Caller) -> ApiResult<Json<wire::DatabaseExtensions>> {
    #[derive(serde::Deserialize)]
    struct Pg {
        major: u32,
    }
    #[derive(serde::Deserialize)]
    struct File {
        postgres: Pg,
        shared_preload_libraries: Vec<String>,
        extensions: Vec<wire::DatabaseExtension>,
    }
    let f: File =
        serde_json::from_str(EXTENSIONS).map_err(|e| ApiError::internal("extension list", &e))?;
    Ok(Json(wire::DatabaseExtensions {
        versions: BTreeMap::from([(f.postgres.major.to_string(), f.extensions)]),
        preloaded: f.shared_preload_libraries,
    }))
}

/// One database (by id or name).
#[utoipa::path(
    get,
    path = "/v1/databases/{id}",
    operation_id = "get_database",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    responses((status = 200, description = "The database", body = wire::Database))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Database>> {
    let d = app.control.databases.get(caller.ws(), id_of(&id)?).await?;
    Ok(Json(database_wire(&app, &d)))
}

/// Delete a database: its VM and its data volume (backups stay in the object store).
#[utoipa::path(
    delete,
    path = "/v1/databases/{id}",
    operation_id = "delete_database",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .databases
        .delete(caller.ws(), id_of(&id)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Rotate the owner role's password; the answer carries the new connection strings (the old
/// password stops working at once; open sessions stay).
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/password",
    operation_id = "rotate_database_password",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    responses((status = 200, description = "The database with its new password", body = wire::Database))
)]
pub async fn password(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Database>> {
    let d = app
        .control
        .databases
        .rotate_password(caller.ws(), id_of(&id)?)
        .await?;
    Ok(Json(database_wire(&app, &d)))
}

/// Branch a database as of now: a new database on a copy-on-write copy of its data (the
/// parent's file system frozen for the instant of the copy), same owner role, its own
/// password and VM.
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/branches",
    operation_id = "branch_database",
    tag = "databases",
    params(
        ("id" = String, Path, description = "Database id or name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    request_body = CreateBranchRequest,
    responses((status = 201, description = "The branch, ready", body = wire::Database))
)]
pub async fn branch(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(req): Body<CreateBranchRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    id_of(&id)?;
    req.validate()?;
    let scope = format!("POST /v1/databases/{id}/branches");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &req).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = async {
            let d = app.control.databases.branch(caller.ws(), &id, &req).await?;
            Ok((StatusCode::CREATED, database_wire(&app, &d)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// Restore a database in place to a past time: the same id, name, password and connection
/// strings, its data as of `to_time` (the newest base backup before it plus the archived WAL,
/// replayed to that time), on a new timeline. Connections to the old data are closed.
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/restore",
    operation_id = "restore_database",
    tag = "databases",
    params(
        ("id" = String, Path, description = "Database id or name"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")
    ),
    request_body = RestoreDatabaseRequest,
    responses((status = 200, description = "The restored database, ready", body = wire::Database))
)]
pub async fn restore(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(req): Body<RestoreDatabaseRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    id_of(&id)?;
    req.validate()?;
    let scope = format!("POST /v1/databases/{id}/restore");
    let idem = match idempotency::begin(&app, caller.ws(), &headers, &scope, &req).await? {
        Begin::Replay(status, body) => return Ok((status, body)),
        Begin::Proceed(idem) => idem,
    };
    idempotency::to_completion(async move {
        let result = async {
            let to_ms = pandastack_control::parse_database_time("to_time", &req.to_time)?;
            let d = app
                .control
                .databases
                .restore(caller.ws(), &id, to_ms)
                .await?;
            Ok((StatusCode::OK, database_wire(&app, &d)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// Take a base backup now: the database's data volume copied between `pg_backup_start` and
/// `pg_backup_stop` (its file system frozen for the instant of the copy) and uploaded
/// incrementally as a durable job; with the archived WAL it is a base for point-in-time
/// restore. One is taken when a database first runs and then every backup interval.
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/backups",
    operation_id = "backup_database",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    responses((status = 202, description = "The backup, uploading", body = wire::VolumeBackup))
)]
pub async fn backup(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<wire::VolumeBackup>)> {
    let b = app
        .control
        .databases
        .backup(caller.ws(), id_of(&id)?)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(crate::volumes::backup_wire(&b))))
}

/// A database's backups, oldest first.
#[utoipa::path(
    get,
    path = "/v1/databases/{id}/backups",
    operation_id = "list_database_backups",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    responses((status = 200, description = "The backups (one page)", body = List<wire::VolumeBackup>))
)]
pub async fn backups(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<List<wire::VolumeBackup>>> {
    let rows = app
        .control
        .databases
        .backups(caller.ws(), id_of(&id)?)
        .await?;
    Ok(Json(List {
        data: rows.iter().map(crate::volumes::backup_wire).collect(),
        next_cursor: None,
    }))
}

/// A JSON parameter as PostgreSQL text (`None`: NULL).
fn text_param(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    }
}

fn limits(timeout_ms: Option<u64>) -> QueryLimits {
    QueryLimits {
        timeout: timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis),
        max_rows: MAX_ROWS,
        max_bytes: MAX_BYTES,
    }
}

fn query_wire(r: &QueryResult) -> wire::QueryResponse {
    wire::QueryResponse {
        command: r.command.clone(),
        row_count: r.row_count,
        fields: r
            .fields
            .iter()
            .map(|f| wire::QueryField {
                name: f.name.clone(),
                data_type_id: f.data_type_id,
            })
            .collect(),
        rows: r
            .rows
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&r.fields)
                    .map(|(v, f)| {
                        pandastack_pgwire::json::value_to_json(v.as_deref(), f.data_type_id)
                    })
                    .collect()
            })
            .collect(),
    }
}

/// Run one SQL statement as the database's owner role (woken or started first). At most
/// 10 000 rows and 10 MiB of row data; `timeout_ms` is the statement timeout.
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/query",
    operation_id = "query_database",
    tag = "databases",
    params(("id" = String, Path, description = "Database id or name")),
    request_body = QueryRequest,
    responses((status = 200, description = "The result", body = wire::QueryResponse))
)]
pub async fn query(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<QueryRequest>,
) -> ApiResult<Json<wire::QueryResponse>> {
    req.validate()?;
    let row = app.control.databases.row(caller.ws(), id_of(&id)?).await?;
    let params: Vec<Option<String>> = req.params.iter().map(text_param).collect();
    let r = app
        .control
        .databases
        .query(
            &row,
            &Credentials::owner(&row),
            &req.sql,
            &params,
            &limits(req.timeout_ms),
        )
        .await?;
    Ok(Json(query_wire(&r)))
}

/// Body of the Neon-compatible `/sql` endpoint: one query, or `queries` run as a transaction.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct SqlRequest {
    #[serde(default)]
    query: Option<String>,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    params: Vec<serde_json::Value>,
    #[serde(default)]
    queries: Option<Vec<SqlQuery>>,
}

#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct SqlQuery {
    query: String,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    params: Vec<serde_json::Value>,
}

/// A Neon-style error — `{message, code, detail, hint, position, …}` at the top level, as
/// Neon's driver reads it — that is also this API's error envelope (`error: {code, message,
/// request_id}`), so one body satisfies both.
fn neon_error(
    status: StatusCode,
    message: String,
    db: Option<&pandastack_pgwire::client::DbError>,
) -> Response {
    let code = match (status, db) {
        (_, Some(_)) => ErrorCode::QueryFailed,
        (StatusCode::NOT_FOUND, None) => ErrorCode::DatabaseNotFound,
        _ => ErrorCode::InvalidArgument,
    };
    let request_id = crate::error::REQUEST_ID
        .try_with(|id| id.clone())
        .unwrap_or_default();
    let mut body = serde_json::json!({
        "message": message,
        "error": { "code": code, "message": message, "request_id": request_id },
    });
    if let (Some(d), Some(o)) = (db, body.as_object_mut()) {
        o.insert("code".into(), d.code.clone().into());
        o.insert("severity".into(), d.severity.clone().into());
        for (k, v) in [
            ("detail", &d.detail),
            ("hint", &d.hint),
            ("where", &d.where_),
            ("schema", &d.schema),
            ("table", &d.table),
            ("column", &d.column),
            ("constraint", &d.constraint),
        ] {
            if let Some(v) = v {
                o.insert(k.into(), v.clone().into());
            }
        }
        if let Some(p) = d.position {
            o.insert("position".into(), p.to_string().into());
        }
    }
    (status, Json(body)).into_response()
}

fn neon_failure(e: DatabaseError) -> Response {
    match e {
        DatabaseError::Query(QueryError::Client(ClientError::Db(db))) => {
            neon_error(StatusCode::BAD_REQUEST, db.message.clone(), Some(&db))
        }
        // What PostgreSQL answers a wrong password with, word for word: `/sql` answers an id of
        // no database the same way.
        e @ DatabaseError::LoginFailed(_) => {
            let db = pandastack_pgwire::client::DbError {
                severity: "FATAL".into(),
                code: "28P01".into(),
                message: e.to_string(),
                ..Default::default()
            };
            neon_error(StatusCode::BAD_REQUEST, db.message.clone(), Some(&db))
        }
        DatabaseError::NotFound(id) => neon_error(
            StatusCode::NOT_FOUND,
            format!("database {id} not found"),
            None,
        ),
        e => {
            let api: ApiError = e.into();
            api.into_response()
        }
    }
}

/// Credentials from a `Neon-Connection-String` (`postgres://user:password@host/db`).
fn credentials(uri: &str) -> Option<Credentials> {
    let u = url::Url::parse(uri).ok()?;
    if u.scheme() != "postgres" && u.scheme() != "postgresql" {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8()
            .ok()
            .map(|c| c.into_owned())
    };
    let user = decode(u.username())?;
    let password = decode(u.password()?)?;
    let database = decode(u.path().trim_start_matches('/'))?;
    (!user.is_empty() && !database.is_empty()).then_some(Credentials {
        user,
        password,
        database,
    })
}

/// Neon's `Neon-Batch-Isolation-Level` (`ReadCommitted`, …) as SQL (`READ COMMITTED`).
fn isolation_level(v: &str) -> Option<String> {
    Some(
        match v.replace(['_', ' '], "").to_ascii_lowercase().as_str() {
            "readuncommitted" => "READ UNCOMMITTED",
            "readcommitted" => "READ COMMITTED",
            "repeatableread" => "REPEATABLE READ",
            "serializable" => "SERIALIZABLE",
            _ => return None,
        }
        .to_owned(),
    )
}

fn flag(headers: &HeaderMap, name: &str) -> bool {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Neon-compatible SQL over HTTP (`@neondatabase/serverless` with `fetchEndpoint` pointing
/// here). No API key: the `Neon-Connection-String` header's user and password log in to the
/// database, checked by PostgreSQL. `{query, params}` → one result; `{queries:[…]}` → a
/// transaction (`Neon-Batch-Isolation-Level`, `Neon-Batch-Read-Only`) → `{results:[…]}`.
/// `Neon-Array-Mode: true` gives rows as arrays, `Neon-Raw-Text-Output: true` values as text.
#[utoipa::path(
    post,
    path = "/v1/databases/{id}/sql",
    operation_id = "database_sql",
    tag = "databases",
    params(
        ("id" = String, Path, description = "Database id"),
        ("Neon-Connection-String" = String, Header, description = "postgres://user:password@host/database"),
    ),
    request_body = SqlRequest,
    responses((status = 200, description = "Neon-style result(s)", body = Object))
)]
pub async fn sql(
    State(app): State<Arc<ApiState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Body(req): Body<SqlRequest>,
) -> Response {
    let Some(creds) = headers
        .get("neon-connection-string")
        .and_then(|v| v.to_str().ok())
        .and_then(credentials)
    else {
        return neon_error(
            StatusCode::BAD_REQUEST,
            "Neon-Connection-String: want postgres://user:password@host/database".into(),
            None,
        );
    };
    let row = match app.control.databases.login(&id, &creds).await {
        Ok(r) => r,
        Err(e) => return neon_failure(e),
    };
    let array_mode = flag(&headers, "neon-array-mode");
    let raw = flag(&headers, "neon-raw-text-output");
    let lim = limits(None);
    let neon = |r: &QueryResult| pandastack_pgwire::json::result_to_neon(r, array_mode, raw);
    match (req.query, req.queries) {
        (Some(q), None) => {
            let params: Vec<Option<String>> = req.params.iter().map(text_param).collect();
            match app
                .control
                .databases
                .query(&row, &creds, &q, &params, &lim)
                .await
            {
                Ok(r) => Json(neon(&r)).into_response(),
                Err(e) => neon_failure(e),
            }
        }
        (None, Some(qs)) => {
            let queries: Vec<(String, Vec<Option<String>>)> = qs
                .into_iter()
                .map(|q| (q.query, q.params.iter().map(text_param).collect()))
                .collect();
            let isolation = headers
                .get("neon-batch-isolation-level")
                .and_then(|v| v.to_str().ok())
                .and_then(isolation_level);
            let read_only = flag(&headers, "neon-batch-read-only");
            match app
                .control
                .databases
                .transaction(
                    &row,
                    &creds,
                    &queries,
                    isolation.as_deref(),
                    read_only,
                    &lim,
                )
                .await
            {
                Ok(rs) => Json(serde_json::json!({
                    "results": rs.iter().map(neon).collect::<Vec<_>>()
                }))
                .into_response(),
                Err(e) => neon_failure(e),
            }
        }
        _ => neon_error(
            StatusCode::BAD_REQUEST,
            "give either query (with params) or queries".into(),
            None,
        ),
    }
}
