//! `/v1/templates`: the catalog (specs on the server, shared by every workspace) and the
//! workspace's own templates, built with `POST /v1/templates` from a spec or an OCI image
//! tarball. The work (builds in the background, versions, re-bake, delete) is the control
//! plane's [`pandastack_control::Templates`]; these handlers parse, call it and map the result.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{
    self as wire, CreateTemplateRequest, ErrorCode, List, OciTemplateParams,
};
use pandastack_control::TemplateInfo;
use pandastack_store::TemplateBuildRow;

use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;
use crate::{rfc3339, ApiState, MAX_JSON_BODY};

fn catalog_view(t: pandastack_host::TemplateView) -> wire::Template {
    wire::Template {
        name: t.name,
        description: t.description,
        cpu: t.shape.vcpus,
        memory_mb: t.shape.memory_mib,
        disk_mb: t.disk_mb,
        state: if t.bake_ms.is_some() {
            "ready"
        } else {
            "available"
        }
        .into(),
        bake_ms: t.bake_ms,
        source: "catalog".into(),
        version: None,
        ready_version: None,
        error: None,
        build_ms: None,
        image_bytes: None,
        created_at: None,
    }
}

/// The view of a built template: its newest version, and which is the newest ready one.
fn built_view(newest: &TemplateBuildRow, ready_version: Option<i64>) -> wire::Template {
    wire::Template {
        name: newest.name.clone(),
        description: newest.description.clone(),
        cpu: newest.vcpus as u32,
        memory_mb: newest.memory_mib as u32,
        disk_mb: newest.disk_mb as u32,
        state: newest.status.as_str().into(),
        bake_ms: newest.bake_ms.map(|v| v as u64),
        source: newest.source.as_str().into(),
        version: Some(newest.version as u32),
        ready_version: ready_version.map(|v| v as u32),
        error: newest.error.clone(),
        build_ms: newest.build_ms.map(|v| v as u64),
        image_bytes: newest.image_bytes.map(|v| v as u64),
        created_at: Some(rfc3339(newest.created_at)),
    }
}

fn view(t: TemplateInfo) -> wire::Template {
    match t {
        TemplateInfo::Catalog(t) => catalog_view(t),
        TemplateInfo::Built(b) => built_view(&b.newest, b.ready_version),
    }
}

/// List the catalog and the workspace's own templates.
#[utoipa::path(
    get,
    path = "/v1/templates",
    operation_id = "list_templates",
    tag = "templates",
    responses((status = 200, description = "Templates: the catalog's, then the workspace's own", body = List<wire::Template>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
) -> ApiResult<Json<List<wire::Template>>> {
    let data = app.control.templates.list(caller.ws()).await?;
    Ok(Json(List {
        data: data.into_iter().map(view).collect(),
        next_cursor: None,
    }))
}

/// One template: the workspace's own of that name, else the catalog's.
#[utoipa::path(
    get,
    path = "/v1/templates/{name}",
    operation_id = "get_template",
    tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses(
        (status = 200, description = "The template", body = wire::Template),
        (status = 404, description = "No such template (code template_not_found)")
    )
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Template>> {
    Ok(Json(view(
        app.control.templates.get(caller.ws(), &name).await?,
    )))
}

/// Build a template (a new version if the name exists) from a spec or an OCI image tarball.
///
/// A JSON body `{"name"?, "spec": "<TOML>"}` builds from a spec in the catalog's format: the
/// server bootstraps the Debian part, then runs the pip/npm packages, inline files and `setup`
/// commands in a builder VM (`source` files and a custom `mirror` are refused: they would read
/// files or fetch packages on the server's host). A body with
/// `Content-Type: application/x-tar` (or `application/gzip`) is an OCI image layout or
/// `docker save` tarball; `name`, `cpu`, `memory_mb`, `disk_mb`, `description` are query
/// parameters. Answers 202 at once; follow `state` with `GET /v1/templates/{name}` and the
/// build log with `GET /v1/templates/{name}/logs?follow=1`.
#[utoipa::path(
    post,
    path = "/v1/templates",
    operation_id = "create_template",
    tag = "templates",
    request_body(content(
        (CreateTemplateRequest = "application/json"),
        (Vec<u8> = "application/x-tar"),
    )),
    params(
        ("name" = Option<String>, Query, description = "Tarball builds: the template name"),
        ("cpu" = Option<u32>, Query, description = "Tarball builds: vCPUs (1-16, default 1)"),
        ("memory_mb" = Option<u32>, Query, description = "Tarball builds: memory (128-65536, default 512)"),
        ("disk_mb" = Option<u32>, Query, description = "Tarball builds: root filesystem size (default: the image plus room)"),
        ("description" = Option<String>, Query, description = "Tarball builds: one line"),
    ),
    responses(
        (status = 202, description = "Build queued", body = wire::Template),
        (status = 409, description = "A build of this template is under way, or the name is a catalog template's"),
        (status = 422, description = "Invalid name, shape or spec (a refused spec field is named)"),
    )
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    req: Request,
) -> ApiResult<Response> {
    let ctype = crate::extract::media_type(req.headers());
    let row = match ctype.as_str() {
        "application/json" => {
            let bytes = axum::body::to_bytes(req.into_body(), MAX_JSON_BODY)
                .await
                .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, "request body too large"))?;
            let body: CreateTemplateRequest = crate::extract::json(&bytes)?;
            app.control
                .templates
                .queue_spec(caller.ws(), body.name, body.spec)
                .await?
        }
        "application/x-tar"
        | "application/tar"
        | "application/gzip"
        | "application/x-gzip"
        | "application/octet-stream" => {
            let (parts, body) = req.into_parts();
            let upload = body.into_data_stream();
            let params = match Query::<OciTemplateParams>::try_from_uri(&parts.uri) {
                Ok(Query(q)) => q,
                Err(e) => {
                    // Refused before reading the upload: read (a bounded part of) it anyway, so
                    // the client, still sending, gets this answer rather than a reset connection.
                    pandastack_control::drain_upload(upload).await;
                    return Err(ApiError::new(ErrorCode::InvalidArgument, e.body_text()));
                }
            };
            app.control
                .templates
                .queue_oci(caller.ws(), params, content_length(&parts.headers), upload)
                .await?
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "Content-Type {other}: send application/json (a spec) or application/x-tar \
                     (an OCI image tarball)"
                ),
            ))
        }
    };
    Ok((StatusCode::ACCEPTED, Json(built_view(&row, None))).into_response())
}

/// The request's `Content-Length`, if it has a sane one.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Re-bake a template: catalog templates from their spec, built ones from the newest ready
/// version's image. New sandboxes get the new bake; running ones keep theirs.
#[utoipa::path(
    post,
    path = "/v1/templates/{name}/bake",
    operation_id = "bake_template",
    tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses(
        (status = 200, description = "Baked", body = wire::Template),
        (status = 404, description = "No such template"),
        (status = 409, description = "No ready version to bake"),
    )
)]
pub async fn bake(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Template>> {
    Ok(Json(view(
        app.control.templates.rebake(caller.ws(), &name).await?,
    )))
}

/// Delete a built template, every version. Running sandboxes made from it keep running (their
/// disks are their own); catalog templates cannot be deleted.
#[utoipa::path(
    delete,
    path = "/v1/templates/{name}",
    operation_id = "delete_template",
    tag = "templates",
    params(("name" = String, Path, description = "Template name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such template"),
        (status = 409, description = "A catalog template, or a build is under way"),
    )
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    app.control.templates.delete(caller.ws(), &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A build's log: plain text, or with `?follow=1` Server-Sent Events until the build ends.
#[utoipa::path(
    get,
    path = "/v1/templates/{name}/logs",
    operation_id = "template_build_logs",
    tag = "templates",
    params(
        ("name" = String, Path, description = "Template name"),
        ("version" = Option<u32>, Query, minimum = 1, description = "Build version (default: the newest)"),
        ("follow" = Option<bool>, Query, description = "`1`/`true`: stream as Server-Sent Events — `log` events `{\"data\": text}`, then one `end` event `{\"reason\": \"ready\"|\"failed\"|\"deleted\"}`"),
    ),
    responses(
        (status = 200, description = "The build log", content((String = "text/plain"), (inline(crate::schemas::LogEvents) = "text/event-stream"))),
        (status = 404, description = "No such template or version"),
    )
)]
pub async fn logs(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let follow = crate::extract::bool_param(&q, "follow")?;
    let version = q
        .get("version")
        .map(|v| {
            v.parse::<u32>()
                .ok()
                .filter(|v| *v >= 1)
                .map(i64::from)
                .ok_or_else(|| {
                    ApiError::new(ErrorCode::InvalidArgument, "version: a positive integer")
                })
        })
        .transpose()?;
    let log = app
        .control
        .templates
        .log(caller.ws(), &name, version)
        .await?;
    let path = log.path().to_owned();
    Ok(crate::logs::log_response(path, follow, move || {
        let log = log.clone();
        async move { log.ended().await }
    })
    .await)
}
