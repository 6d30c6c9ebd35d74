//! `/v1/templates`: the catalog (specs on the server, shared by every workspace) and the
//! workspace's own templates, built with `POST /v1/templates` from a spec or an OCI image
//! tarball. A build runs in the background ([`build`]); every build is a new version, and new
//! sandboxes get the newest ready one while older sandboxes keep theirs.

pub(crate) mod build;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{
    self as wire, validate_template_name, CreateTemplateRequest, ErrorCode, List, OciTemplateParams,
};
use pandastack_host::{HostError, SpecRefused};
use pandastack_store::{now_ms, BuildStatus, SourceKind, StoreError, TemplateBuildRow};

pub use build::BuildConfig;
pub(crate) use build::Builds;

use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;
use crate::{rfc3339, App, MAX_JSON_BODY};

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

/// The view of a built template from its versions (oldest first, not empty).
fn built_view(versions: &[TemplateBuildRow]) -> Option<wire::Template> {
    let newest = versions.last()?;
    let ready = versions
        .iter()
        .rev()
        .find(|v| v.status == BuildStatus::Ready);
    Some(wire::Template {
        name: newest.name.clone(),
        description: newest.description.clone(),
        cpu: newest.vcpus as u32,
        memory_mb: newest.memory_mib as u32,
        disk_mb: newest.disk_mb as u32,
        state: newest.status.as_str().into(),
        bake_ms: newest.bake_ms.map(|v| v as u64),
        source: newest.source.as_str().into(),
        version: Some(newest.version as u32),
        ready_version: ready.map(|v| v.version as u32),
        error: newest.error.clone(),
        build_ms: newest.build_ms.map(|v| v as u64),
        image_bytes: newest.image_bytes.map(|v| v as u64),
        created_at: Some(rfc3339(newest.created_at)),
    })
}

/// What `POST /v1/sandboxes {template}` runs: the baked template's name on this host and the
/// environment its image asks for.
pub(crate) struct Resolved {
    pub baked: String,
    pub env: BTreeMap<String, String>,
}

/// Resolves `name` for a create in the caller's workspace: its own template of that name (the
/// newest ready version), one of its own versions by host name (`<name>-v<N>-<hex>`), else a
/// catalog template. Another workspace's builds are never reachable, not even by host name.
pub(crate) async fn resolve(app: &App, workspace: &str, name: &str) -> ApiResult<Resolved> {
    let versions = app
        .store
        .template_builds()
        .versions(workspace, name)
        .await?;
    if let Some(newest) = versions.last() {
        return match versions
            .iter()
            .rev()
            .find(|v| v.status == BuildStatus::Ready)
        {
            Some(v) => Ok(Resolved {
                baked: v.id.clone(),
                env: v.env.clone(),
            }),
            None => Err(ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "template {name} has no ready version yet (build {} is {})",
                    newest.version,
                    newest.status.as_str()
                ),
            )),
        };
    }
    // A version by its host name: the caller's own (ready) only.
    if let Some(v) = app.store.template_builds().by_id(name).await? {
        if v.workspace_id == workspace && v.status == BuildStatus::Ready {
            return Ok(Resolved {
                baked: v.id,
                env: v.env,
            });
        }
        return Err(ApiError::from(HostError::TemplateNotFound(name.to_owned())));
    }
    // The catalog (built and baked on first use) or a template baked on this host by hand.
    Ok(Resolved {
        baked: name.to_owned(),
        env: BTreeMap::new(),
    })
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
    State(app): State<Arc<App>>,
    caller: Caller,
) -> ApiResult<Json<List<wire::Template>>> {
    let mut data: Vec<wire::Template> = app.host.catalog()?.into_iter().map(catalog_view).collect();
    let rows = app.store.template_builds().list(caller.ws()).await?;
    for group in rows.chunk_by(|a, b| a.name == b.name) {
        data.extend(built_view(group));
    }
    Ok(Json(List {
        data,
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Template>> {
    Ok(Json(find(&app, caller.ws(), &name).await?))
}

async fn find(app: &App, ws: &str, name: &str) -> ApiResult<wire::Template> {
    let versions = app.store.template_builds().versions(ws, name).await?;
    if let Some(v) = built_view(&versions) {
        return Ok(v);
    }
    app.host
        .catalog()?
        .into_iter()
        .find(|t| t.name == name)
        .map(catalog_view)
        .ok_or_else(|| ApiError::from(HostError::TemplateNotFound(name.to_owned())))
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
    State(app): State<Arc<App>>,
    caller: Caller,
    req: Request,
) -> ApiResult<Response> {
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let row = match ctype.as_str() {
        "application/json" => {
            let bytes = axum::body::to_bytes(req.into_body(), MAX_JSON_BODY)
                .await
                .map_err(|_| ApiError::new(ErrorCode::PayloadTooLarge, "request body too large"))?;
            let body: CreateTemplateRequest = crate::extract::json(&bytes)?;
            let spec = app.host.check_spec(&body.spec).map_err(spec_error)?;
            let name = body.name.unwrap_or_else(|| spec.name.clone());
            if name != spec.name {
                return Err(ApiError::new(
                    ErrorCode::InvalidArgument,
                    format!("name {name:?} differs from the spec's name {:?}", spec.name),
                ));
            }
            let mut row = new_row(
                &app,
                caller.ws(),
                &name,
                SourceKind::Spec,
                &spec.description,
            )
            .await?;
            row.vcpus = i64::from(spec.shape.vcpus);
            row.memory_mib = i64::from(spec.shape.memory_mib);
            row.disk_mb = i64::from(spec.disk_mb);
            insert(&app, &mut row).await?;
            let job = build::BuildJob {
                build: row.id.clone(),
                spec: Some(body.spec),
                tarball: None,
                disk_mb: None,
            };
            if let Err(e) = build::enqueue(&app, job).await {
                app.store.template_builds().delete(&row.id).await?;
                return Err(e);
            }
            row
        }
        "application/x-tar"
        | "application/tar"
        | "application/gzip"
        | "application/x-gzip"
        | "application/octet-stream" => {
            let (parts, body) = req.into_parts();
            let accepted = async {
                let Query(q) = Query::<OciTemplateParams>::try_from_uri(&parts.uri)
                    .map_err(|e| ApiError::new(ErrorCode::InvalidArgument, e.body_text()))?;
                let shape = shape(q.cpu, q.memory_mb, q.disk_mb)?;
                app.builds.check_length(&parts.headers)?;
                let mut row = new_row(
                    &app,
                    caller.ws(),
                    &q.name,
                    SourceKind::Oci,
                    q.description.as_deref().unwrap_or(""),
                )
                .await?;
                (row.vcpus, row.memory_mib) = (i64::from(shape.0), i64::from(shape.1));
                row.disk_mb = i64::from(q.disk_mb.unwrap_or(0));
                insert(&app, &mut row).await?;
                Ok::<_, ApiError>((q, row))
            }
            .await;
            let (q, row) = match accepted {
                Ok(v) => v,
                Err(e) => {
                    // Refused before reading the upload: read (a bounded part of) it anyway, so
                    // the client, still sending, gets this answer rather than a reset connection.
                    build::drain(body).await;
                    return Err(e);
                }
            };
            let req_body = body;
            // The upload belongs to this request: if it fails, nothing of the build remains.
            let tarball = match app.builds.receive(&row.id, req_body).await {
                Ok(p) => p,
                Err(e) => {
                    app.builds.discard(&row.id);
                    app.store.template_builds().delete(&row.id).await?;
                    return Err(e);
                }
            };
            let job = build::BuildJob {
                build: row.id.clone(),
                spec: None,
                tarball: Some(tarball),
                disk_mb: q.disk_mb,
            };
            if let Err(e) = build::enqueue(&app, job).await {
                app.builds.discard(&row.id);
                app.store.template_builds().delete(&row.id).await?;
                return Err(e);
            }
            row
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
    let view = built_view(std::slice::from_ref(&row)).expect("one version");
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

fn spec_error(e: SpecRefused) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, e.to_string())
}

/// Checks the shape of a tarball build: (vCPUs, memory MiB).
fn shape(cpu: Option<u32>, memory_mb: Option<u32>, disk_mb: Option<u32>) -> ApiResult<(u32, u32)> {
    let cpu = cpu.unwrap_or(1);
    let memory = memory_mb.unwrap_or(512);
    let bad = |field: &str, range: &str| {
        ApiError::new(
            ErrorCode::InvalidArgument,
            format!("{field}: must be {range}"),
        )
    };
    if !(1..=16).contains(&cpu) {
        return Err(bad("cpu", "1-16"));
    }
    if !(128..=65536).contains(&memory) {
        return Err(bad("memory_mb", "128-65536"));
    }
    if disk_mb.is_some_and(|d| !(64..=1 << 20).contains(&d)) {
        return Err(bad("disk_mb", "64-1048576"));
    }
    Ok((cpu, memory))
}

async fn new_row(
    app: &App,
    ws: &str,
    name: &str,
    source: SourceKind,
    description: &str,
) -> ApiResult<TemplateBuildRow> {
    validate_template_name(name)?;
    if app.host.is_catalog(name) {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("{name} is a catalog template; choose another name"),
        ));
    }
    if description.len() > 200 || description.contains('\n') {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "description: one line, at most 200 bytes",
        ));
    }
    let now = now_ms();
    Ok(TemplateBuildRow {
        id: String::new(),
        workspace_id: ws.to_owned(),
        host_id: app.host_id.clone(),
        name: name.to_owned(),
        version: 0,
        source,
        status: BuildStatus::Queued,
        error: None,
        description: description.to_owned(),
        vcpus: 1,
        memory_mib: 512,
        disk_mb: 0,
        env: BTreeMap::new(),
        image_bytes: None,
        build_ms: None,
        bake_ms: None,
        created_at: now,
        updated_at: now,
    })
}

async fn insert(app: &App, row: &mut TemplateBuildRow) -> ApiResult<()> {
    match app.store.template_builds().insert_next(row).await {
        Ok(()) => Ok(()),
        Err(StoreError::Conflict) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "a build of template {} is under way; wait for it to finish",
                row.name
            ),
        )),
        Err(e) => Err(e.into()),
    }
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<wire::Template>> {
    let versions = app
        .store
        .template_builds()
        .versions(caller.ws(), &name)
        .await?;
    if versions.is_empty() {
        if !app.host.is_catalog(&name) {
            return Err(HostError::TemplateNotFound(name).into());
        }
        let host = Arc::clone(&app.host);
        let n = name.clone();
        crate::idempotency::to_completion(
            async move { host.rebake(&n).await.map_err(ApiError::from) },
        )
        .await?;
        return Ok(Json(find(&app, caller.ws(), &name).await?));
    }
    let resolved = resolve(&app, caller.ws(), &name).await?;
    let row = versions
        .into_iter()
        .find(|v| v.id == resolved.baked)
        .expect("resolve picks one of the versions");
    let app2 = Arc::clone(&app);
    crate::idempotency::to_completion(async move { build::rebake(&app2, row).await }).await?;
    Ok(Json(find(&app, caller.ws(), &name).await?))
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
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    let versions = app
        .store
        .template_builds()
        .versions(caller.ws(), &name)
        .await?;
    if versions.is_empty() {
        if app.host.is_catalog(&name) {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("{name} is a catalog template; it cannot be deleted"),
            ));
        }
        return Err(HostError::TemplateNotFound(name).into());
    }
    if let Some(v) = versions.iter().find(|v| v.status.active()) {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "build {} of {name} is {}; delete it once it has finished",
                v.version,
                v.status.as_str()
            ),
        ));
    }
    let app2 = Arc::clone(&app);
    crate::idempotency::to_completion(async move {
        for v in versions {
            app2.host.remove_template(&v.id).await?;
            app2.builds.discard(&v.id);
            app2.store.template_builds().delete(&v.id).await?;
        }
        Ok::<_, ApiError>(())
    })
    .await?;
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
        ("version" = Option<u32>, Query, description = "Build version (default: the newest)"),
        ("follow" = Option<bool>, Query, description = "`1`/`true`: stream as Server-Sent Events — `log` events `{\"data\": text}`, then one `end` event `{\"reason\": \"ready\"|\"failed\"|\"deleted\"}`"),
    ),
    responses(
        (status = 200, description = "The build log", content((String = "text/plain"), (wire::LogChunk = "text/event-stream"))),
        (status = 404, description = "No such template or version"),
    )
)]
pub async fn logs(
    State(app): State<Arc<App>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let versions = app
        .store
        .template_builds()
        .versions(caller.ws(), &name)
        .await?;
    let row = match q.get("version") {
        Some(v) => {
            let v: i64 = v.parse().map_err(|_| {
                ApiError::new(ErrorCode::InvalidArgument, "version: a positive integer")
            })?;
            versions.into_iter().find(|r| r.version == v)
        }
        None => versions.into_iter().next_back(),
    }
    .ok_or_else(|| ApiError::from(HostError::TemplateNotFound(name.clone())))?;
    let path = app.builds.log_path(&row.id);
    let (ws, id) = (caller.ws().to_owned(), row.id);
    Ok(crate::logs::log_response(path, &q, move || {
        let (app, ws, id, name) = (Arc::clone(&app), ws.clone(), id.clone(), name.clone());
        async move {
            let versions = app
                .store
                .template_builds()
                .versions(&ws, &name)
                .await
                .ok()?;
            match versions.into_iter().find(|v| v.id == id) {
                Some(v) if v.status.active() => None,
                Some(v) => Some(v.status.as_str().to_owned()),
                None => Some("deleted".to_owned()),
            }
        }
    })
    .await)
}
