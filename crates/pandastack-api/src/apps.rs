//! Apps deployed from git. Handlers parse, call the control plane's
//! [`pandastack_control::Apps`] and map. The webhooks take no API key: the body's HMAC
//! signature with the app's webhook secret is the credential.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use pandastack_api_types::{
    self as wire, CreateAppRequest, CreateDeployRequest, ErrorCode, List, LogChunk, LogEnd,
    RollbackRequest, UpdateAppRequest, WebhookResult,
};
use pandastack_control::apps::{Delivery, WebhookKind, APP_LOG};
use pandastack_control::{AppError, AppInfo, DomainError, SharedError};
use pandastack_host::{ExecEvent, ExecSpec};
use pandastack_store::DeployRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::{bool_param, Body, Caller};
use crate::{rfc3339, ApiState};

/// Most of the app's own log a plain `GET …/logs` returns (its newest part).
const APP_LOG_TAIL: u64 = 1 << 20;

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::NotFound(n) => Self::not_found(ErrorCode::AppNotFound, "app", &n),
            AppError::DeployNotFound(n) => Self::not_found(ErrorCode::NotFound, "deploy", &n),
            e @ (AppError::Exists(_) | AppError::Conflict(_)) => {
                Self::new(ErrorCode::Conflict, e.to_string())
            }
            e @ AppError::BadSignature => Self::new(ErrorCode::Unauthorized, e.to_string()),
            e @ AppError::BadWebhook(_) => Self::new(ErrorCode::InvalidArgument, e.to_string()),
            AppError::Shared(e) => e.into(),
            AppError::Domain(e) => e.into(),
        }
    }
}

impl From<SharedError> for ApiError {
    fn from(e: SharedError) -> Self {
        match e {
            SharedError::Control(e) => e.into(),
            SharedError::Store(e) => e.into(),
            SharedError::Host(e) => e.into(),
            e @ (SharedError::Upload(_) | SharedError::BadSource(_)) => {
                Self::new(ErrorCode::InvalidArgument, e.to_string())
            }
            e @ SharedError::TooLarge(_) => Self::new(ErrorCode::PayloadTooLarge, e.to_string()),
            SharedError::Config(e) => Self::internal("app configuration", &e),
            e @ SharedError::DeployKey(_) => Self::internal("app deploy key", &e),
            e @ SharedError::Carry { .. } => Self::internal("object store", &e),
        }
    }
}

impl From<DomainError> for ApiError {
    fn from(e: DomainError) -> Self {
        match e {
            e @ DomainError::BadDomain(_) => Self::new(ErrorCode::InvalidArgument, e.to_string()),
            e @ DomainError::DomainTaken(_) => Self::new(ErrorCode::Conflict, e.to_string()),
            DomainError::Store(e) => e.into(),
        }
    }
}

pub(crate) fn deploy_wire(app_name: &str, d: &DeployRow) -> wire::Deploy {
    wire::Deploy {
        id: d.id.clone(),
        app: app_name.to_owned(),
        number: d.seq as u64,
        git_ref: d.git_ref.clone(),
        commit: d.commit_sha.clone(),
        state: d.state,
        error: d.error.clone(),
        plan: d.plan.clone(),
        phases_ms: serde_json::from_value(d.phases.clone()).unwrap_or_default(),
        sandbox_id: d.sandbox_id.clone(),
        created_at: rfc3339(d.created_at),
        updated_at: rfc3339(d.updated_at),
    }
}

fn app_wire(app: &ApiState, a: &AppInfo) -> wire::App {
    let c = &a.config;
    wire::App {
        id: a.row.id.clone(),
        name: a.row.name.clone(),
        url: app.control.apps.address().url(&a.row.name),
        git: c.git.clone(),
        env: c.env.clone(),
        secret_names: c.secrets.keys().cloned().collect(),
        build: c.build.clone(),
        start: c.start.clone(),
        root_dir: c.root_dir.clone(),
        memory_mb: c.memory_mb,
        min_instances: c.min_instances,
        idle_seconds: c.idle_seconds,
        health_path: c.health_path.clone(),
        webhook_secret: a.row.webhook_secret.clone(),
        deploy_key: a.deploy_key.clone(),
        live_deploy: a.row.live_deploy_id.clone(),
        instance_state: a.instance.as_ref().map(|s| s.state),
        domains: a
            .domains
            .iter()
            .map(|d| app.control.domains.domain_view(d))
            .collect(),
        created_at: rfc3339(a.row.created_at),
        updated_at: rfc3339(a.row.updated_at),
    }
}

/// An app name from a path, or 404.
pub(crate) fn name_of(name: &str) -> ApiResult<&str> {
    if wire::valid_name(name, 64) {
        Ok(name)
    } else {
        Err(ApiError::not_found(ErrorCode::AppNotFound, "app", name))
    }
}

/// Create an app from a git repository; its first deploy is queued at once (unless
/// `deploy: false`): follow it with `GET …/deploys`.
#[utoipa::path(
    post,
    path = "/v1/apps",
    operation_id = "create_app",
    tag = "apps",
    request_body = CreateAppRequest,
    responses((status = 201, description = "The app (its first deploy queued)", body = wire::App))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Body(req): Body<CreateAppRequest>,
) -> ApiResult<(StatusCode, Json<wire::App>)> {
    req.validate()?;
    let (info, _deploy) = app.control.apps.create(caller.ws(), &req).await?;
    Ok((StatusCode::CREATED, Json(app_wire(&app, &info))))
}

/// List the workspace's apps by name.
#[utoipa::path(
    get,
    path = "/v1/apps",
    operation_id = "list_apps",
    tag = "apps",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of apps", body = List<wire::App>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::App>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .apps
        .list(caller.ws(), page.after.clone().map(|c| c.id), page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |a| wire::Cursor {
        created_at_ms: 0,
        id: a.row.name.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|a| app_wire(&app, a)).collect(),
        next_cursor,
    }))
}

/// One app (by name or id).
#[utoipa::path(
    get,
    path = "/v1/apps/{name}",
    operation_id = "get_app",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    responses((status = 200, description = "The app", body = wire::App))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::App>> {
    let a = app.control.apps.get(caller.ws(), name_of(&name)?).await?;
    Ok(Json(app_wire(&app, &a)))
}

/// Change an app's configuration; the next deploy builds with it (scaling settings apply to
/// the running version at once).
#[utoipa::path(
    patch,
    path = "/v1/apps/{name}",
    operation_id = "update_app",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    request_body = UpdateAppRequest,
    responses((status = 200, description = "The app", body = wire::App))
)]
pub async fn update(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<UpdateAppRequest>,
) -> ApiResult<Json<wire::App>> {
    name_of(&name)?;
    req.validate()?;
    let a = app.control.apps.update(caller.ws(), &name, &req).await?;
    Ok(Json(app_wire(&app, &a)))
}

/// Delete an app: every version's VM, its deploys and their logs.
#[utoipa::path(
    delete,
    path = "/v1/apps/{name}",
    operation_id = "delete_app",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .apps
        .delete(caller.ws(), name_of(&name)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deploy the app again: a JSON body `{"ref"?}` fetches its `git.ref` (or `ref`); a body with
/// `Content-Type: application/gzip` is a gzip tarball of the app's files (what `pandastack app
/// deploy --dir` sends), deployed as `ref` `upload` — regular files and directories only, at
/// most 512 MiB. Queued; one deploy runs at a time per host, and a queued deploy that a newer
/// one of the same app overtakes is `superseded`.
#[utoipa::path(
    post,
    path = "/v1/apps/{name}/deploys",
    operation_id = "create_deploy",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    request_body(content(
        (CreateDeployRequest = "application/json"),
        (Vec<u8> = "application/gzip"),
    )),
    responses((status = 202, description = "The queued deploy", body = wire::Deploy))
)]
pub async fn deploy(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    req: Request,
) -> ApiResult<(StatusCode, Json<wire::Deploy>)> {
    let ctype = crate::extract::media_type(req.headers());
    let d = match ctype.as_str() {
        "application/json" => {
            let bytes = axum::body::to_bytes(req.into_body(), crate::MAX_JSON_BODY)
                .await
                .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, "request body too large"))?;
            let body: CreateDeployRequest = if bytes.is_empty() {
                CreateDeployRequest::default()
            } else {
                crate::extract::json(&bytes)?
            };
            name_of(&name)?;
            body.validate()?;
            app.control.apps.deploy(caller.ws(), &name, &body).await?
        }
        "application/gzip" | "application/x-gzip" | "application/x-tar+gzip" => {
            let upload = req.into_body().into_data_stream();
            if let Err(e) = name_of(&name) {
                pandastack_control::drain_upload(upload).await;
                return Err(e);
            }
            app.control
                .apps
                .deploy_upload(caller.ws(), &name, upload)
                .await?
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "Content-Type {other}: send application/json ({{\"ref\"}}) or \
                     application/gzip (a tarball of the app's files)"
                ),
            ))
        }
    };
    let a = app.control.apps.get(caller.ws(), &name).await?;
    Ok((StatusCode::ACCEPTED, Json(deploy_wire(&a.row.name, &d))))
}

/// An app's deploys, newest first.
#[utoipa::path(
    get,
    path = "/v1/apps/{name}/deploys",
    operation_id = "list_deploys",
    tag = "apps",
    params(
        ("name" = String, Path, description = "App name or id"),
        crate::page::PageQuery,
    ),
    responses((status = 200, description = "A page of deploys", body = List<wire::Deploy>))
)]
pub async fn deploys(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Deploy>>> {
    let page = crate::page::Page::of(&q)?;
    let before = page.after.as_ref().map(|c| c.created_at_ms);
    let (row, mut rows) = app
        .control
        .apps
        .deploys(caller.ws(), name_of(&name)?, before, page.limit)
        .await?;
    let next_cursor = page.cut(&mut rows, |d| wire::Cursor {
        created_at_ms: d.seq,
        id: d.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|d| deploy_wire(&row.name, d)).collect(),
        next_cursor,
    }))
}

/// One deploy.
#[utoipa::path(
    get,
    path = "/v1/apps/{name}/deploys/{id}",
    operation_id = "get_deploy",
    tag = "apps",
    params(
        ("name" = String, Path, description = "App name or id"),
        ("id" = String, Path, description = "Deploy id"),
    ),
    responses((status = 200, description = "The deploy", body = wire::Deploy))
)]
pub async fn get_deploy(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Json<wire::Deploy>> {
    let (row, d) = app
        .control
        .apps
        .deploy_row(caller.ws(), name_of(&name)?, &id)
        .await?;
    Ok(Json(deploy_wire(&row.name, &d)))
}

/// A deploy's log (fetch, plan decisions, install and build output, start, health check):
/// plain text, or with `?follow=1` Server-Sent Events until the deploy ends.
#[utoipa::path(
    get,
    path = "/v1/apps/{name}/deploys/{id}/logs",
    operation_id = "deploy_logs",
    tag = "apps",
    params(
        ("name" = String, Path, description = "App name or id"),
        ("id" = String, Path, description = "Deploy id"),
        ("follow" = Option<bool>, Query, description = "`1`/`true`: stream as Server-Sent Events — `log` events `{\"data\": text}`, then one `end` event `{\"reason\": \"live\"|\"failed\"|\"superseded\"|\"deleted\"}`"),
    ),
    responses(
        (status = 200, description = "The deploy log", content((String = "text/plain"), (inline(crate::schemas::LogEvents) = "text/event-stream"))),
    )
)]
pub async fn deploy_logs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let follow = bool_param(&q, "follow")?;
    let (_, d) = app
        .control
        .apps
        .deploy_row(caller.ws(), name_of(&name)?, &id)
        .await?;
    let apps = app.control.apps.clone();
    let read = crate::logs::deploy_reader(apps.clone(), caller.ws().to_owned(), d.id.clone());
    Ok(crate::logs::read_response(read, follow, move || {
        let (apps, id) = (apps.clone(), d.id.clone());
        async move { apps.deploy_ended(&id).await }
    })
    .await)
}

/// Replace the app's SSH deploy key with a new ed25519 pair; the answer carries the new
/// public key (`deploy_key`) to put on the repository. Deploys from now on fetch with the new
/// key; the old one stops working once it is taken off the repository.
#[utoipa::path(
    post,
    path = "/v1/apps/{name}/deploy-key",
    operation_id = "rotate_app_deploy_key",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    responses((status = 200, description = "The app with its new deploy key", body = wire::App))
)]
pub async fn rotate_deploy_key(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::App>> {
    let a = app
        .control
        .apps
        .rotate_deploy_key(caller.ws(), name_of(&name)?)
        .await?;
    Ok(Json(app_wire(&app, &a)))
}

/// Put an earlier version back: its hibernated VM is woken, checked and takes the traffic (no
/// rebuild); the current version becomes `standby`.
#[utoipa::path(
    post,
    path = "/v1/apps/{name}/rollback",
    operation_id = "rollback_app",
    tag = "apps",
    params(("name" = String, Path, description = "App name or id")),
    request_body = RollbackRequest,
    responses((status = 200, description = "The deploy now live", body = wire::Deploy))
)]
pub async fn rollback(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Body(req): Body<RollbackRequest>,
) -> ApiResult<Json<wire::Deploy>> {
    name_of(&name)?;
    let apps = app.control.apps.clone();
    let ws = caller.ws().to_owned();
    // A rollback switches traffic: it finishes even if the caller goes away.
    let d = tokio::spawn(async move { apps.rollback(&ws, &name, &req).await.map(|d| (name, d)) })
        .await
        .map_err(|e| ApiError::internal("rollback", &e))??;
    let a = app.control.apps.get(caller.ws(), &d.0).await?;
    Ok(Json(deploy_wire(&a.row.name, &d.1)))
}

/// The running app's own output (its server's stdout and stderr): the newest MiB as plain
/// text, or with `?follow=1` Server-Sent Events of it and everything it writes next.
#[utoipa::path(
    get,
    path = "/v1/apps/{name}/logs",
    operation_id = "app_logs",
    tag = "apps",
    params(
        ("name" = String, Path, description = "App name or id"),
        ("follow" = Option<bool>, Query, description = "`1`/`true`: stream as Server-Sent Events — `log` events `{\"data\": text}`; an `end` event when the VM stops"),
    ),
    responses(
        (status = 200, description = "The app's output", content((String = "text/plain"), (inline(crate::schemas::LogEvents) = "text/event-stream"))),
    )
)]
pub async fn app_logs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let follow = bool_param(&q, "follow")?;
    let sb = app
        .control
        .apps
        .instance(caller.ws(), name_of(&name)?)
        .await?;
    let argv = if follow {
        vec!["tail", "-c", "+1", "-F", APP_LOG]
    } else {
        vec!["tail", "-c", "1048576", APP_LOG]
    };
    let spec = ExecSpec {
        argv: argv.into_iter().map(str::to_owned).collect(),
        max_output_bytes: if follow { 0 } else { APP_LOG_TAIL },
        timeout: if follow {
            Duration::ZERO
        } else {
            Duration::from_secs(30)
        },
        ..Default::default()
    };
    if !follow {
        let out = app.control.host().exec(&sb.id, spec).await?;
        return Ok(String::from_utf8_lossy(&out.stdout)
            .into_owned()
            .into_response());
    }
    let events = app.control.host().exec_stream(&sb.id, spec).await?;
    let stream = events
        .filter_map(|ev| async move {
            match ev {
                Ok(ExecEvent::Stdout(b)) => Some(
                    Event::default()
                        .event("log")
                        .json_data(LogChunk {
                            data: String::from_utf8_lossy(&b).into_owned(),
                        })
                        .unwrap_or_default(),
                ),
                Ok(ExecEvent::Stderr(_)) => None,
                Ok(ExecEvent::Exit { .. }) | Err(_) => Some(
                    Event::default()
                        .event("end")
                        .json_data(LogEnd {
                            reason: "stopped".into(),
                        })
                        .unwrap_or_default(),
                ),
            }
        })
        .map(Ok::<_, Infallible>);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// GitHub's push webhook: `X-Hub-Signature-256` (HMAC-SHA256 of the body with the app's
/// `webhook_secret`) must verify; a push to the tracked branch queues a deploy; a redelivery
/// (same `X-GitHub-Delivery`) deploys nothing and answers `duplicate`. No API key.
#[utoipa::path(
    post,
    path = "/v1/apps/{name}/webhooks/github",
    operation_id = "app_webhook_github",
    tag = "apps",
    security(()),
    params(
        ("name" = String, Path, description = "App name"),
        ("X-Hub-Signature-256" = String, Header, description = "`sha256=<hex HMAC-SHA256 of the body>`"),
        ("X-GitHub-Event" = String, Header, description = "`push` deploys; `ping` and others are ignored"),
        ("X-GitHub-Delivery" = Option<String>, Header, description = "Delivery id (redeliveries repeat it)"),
    ),
    request_body(content = String, content_type = "application/json", description = "GitHub's push event"),
    responses(
        (status = 200, description = "What the delivery did", body = WebhookResult),
        (status = 401, description = "The signature does not verify", body = wire::ErrorEnvelope),
    )
)]
pub async fn webhook_github(
    State(app): State<Arc<ApiState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<WebhookResult>> {
    webhook(&app, &name, WebhookKind::GitHub, &headers, &body).await
}

/// A webhook for other git hosts, signed like GitHub's: `X-PandaStack-Signature-256:
/// sha256=<hex>` over a body `{"ref": "<branch>"}` (or `refs/heads/<branch>`);
/// `X-PandaStack-Delivery` makes redeliveries `duplicate`. No API key.
#[utoipa::path(
    post,
    path = "/v1/apps/{name}/webhooks/generic",
    operation_id = "app_webhook_generic",
    tag = "apps",
    security(()),
    params(
        ("name" = String, Path, description = "App name"),
        ("X-PandaStack-Signature-256" = String, Header, description = "`sha256=<hex HMAC-SHA256 of the body>`"),
        ("X-PandaStack-Delivery" = Option<String>, Header, description = "Delivery id (redeliveries repeat it)"),
    ),
    request_body(content = String, content_type = "application/json", description = "`{\"ref\": \"main\"}`"),
    responses(
        (status = 200, description = "What the delivery did", body = WebhookResult),
        (status = 401, description = "The signature does not verify", body = wire::ErrorEnvelope),
    )
)]
pub async fn webhook_generic(
    State(app): State<Arc<ApiState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<WebhookResult>> {
    webhook(&app, &name, WebhookKind::Generic, &headers, &body).await
}

async fn webhook(
    app: &ApiState,
    name: &str,
    kind: WebhookKind,
    headers: &HeaderMap,
    body: &[u8],
) -> ApiResult<Json<WebhookResult>> {
    // An unknown app answers like a bad signature: a webhook URL does not say which apps exist.
    if !wire::valid_name(name, 64) {
        return Err(AppError::BadSignature.into());
    }
    let (sig, delivery, event) = match kind {
        WebhookKind::GitHub => (
            header(headers, "x-hub-signature-256"),
            header(headers, "x-github-delivery"),
            header(headers, "x-github-event"),
        ),
        WebhookKind::Generic => (
            header(headers, "x-pandastack-signature-256"),
            header(headers, "x-pandastack-delivery"),
            None,
        ),
    };
    let delivery = delivery.filter(|d| !d.is_empty() && d.len() <= 128);
    let d = Delivery {
        kind,
        id: delivery,
        event,
        signature: sig,
        body,
    };
    match app.control.apps.webhook(name, &d).await {
        Ok(r) => Ok(Json(r)),
        Err(AppError::NotFound(_)) => Err(AppError::BadSignature.into()),
        Err(e) => Err(e.into()),
    }
}
