//! Signed file URLs (`POST /v1/sandboxes/{id}/files/url`): a URL that downloads (`GET`) or
//! uploads (`PUT`) one file of one sandbox without an API key until it expires, and the
//! route that serves it (`/v1/sandboxes/{id}/files/signed`). The signing is the control
//! plane's (`pandastack_control::Sandboxes::sign_file_url`); a refused URL is 403 `forbidden`
//! with the reason, a sandbox that is gone the same (the URL says nothing about it).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body as HttpBody;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{self as wire, ErrorCode, FileUrl, FileUrlRequest};
use pandastack_control::{ControlError, FileUrlMethod, SignedFileUrl};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::sandboxes::owned;
use crate::workload::{path_param, read_file, write_file};
use crate::{rfc3339, ApiState};

/// What a path's query value escapes: all but letters, digits and `/ . - _ ~`, so the path
/// stays readable in the URL.
const PATH_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'.')
    .remove(b'-')
    .remove(b'_')
    .remove(b'~');

fn method_of(m: wire::FileUrlMethod) -> FileUrlMethod {
    match m {
        wire::FileUrlMethod::Get => FileUrlMethod::Get,
        wire::FileUrlMethod::Put => FileUrlMethod::Put,
    }
}

/// A URL that downloads or uploads one file of the sandbox without an API key, until it
/// expires (at most 7 days). Anyone holding it can do that one thing to that one file.
#[utoipa::path(
    post,
    path = "/v1/sandboxes/{id}/files/url",
    operation_id = "file_url",
    tag = "files",
    params(("id" = String, Path, description = "Sandbox id")),
    request_body = FileUrlRequest,
    responses((status = 200, description = "The signed URL (relative to the API's base URL)", body = FileUrl))
)]
pub async fn sign(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<FileUrlRequest>,
) -> ApiResult<Json<FileUrl>> {
    req.validate()?;
    let row = owned(&app, &caller, &id).await?;
    let signed = app
        .control
        .sandboxes
        .sign_file_url(&row, method_of(req.method), &req.path, req.expires_in)
        .await?;
    let url = format!(
        "/v1/sandboxes/{}/files/signed?path={}&method={}&expires={}&signature={}",
        row.id,
        utf8_percent_encode(&signed.path, PATH_VALUE),
        signed.method.as_str(),
        signed.expires,
        signed.signature
    );
    Ok(Json(FileUrl {
        url,
        method: req.method,
        path: signed.path,
        expires_at: rfc3339(signed.expires * 1000),
    }))
}

/// The signed URL of a query, its method the request's (a URL signed for `GET` opens nothing
/// with `PUT`), and the sandbox it opens, awake.
async fn opened(
    app: &ApiState,
    id: &str,
    method: FileUrlMethod,
    q: &BTreeMap<String, String>,
) -> ApiResult<(String, String)> {
    let path = path_param(q, "path")?;
    let param = |name: &str| {
        q.get(name)
            .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, format!("{name}: required")))
    };
    let expires = param("expires")?.parse::<i64>().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidArgument,
            "expires: not a unix time in seconds",
        )
    })?;
    let forbidden = |why: String| ApiError::new(ErrorCode::Forbidden, why);
    if param("method")? != method.as_str() {
        return Err(forbidden(format!(
            "this URL was not signed for {}",
            method.as_str()
        )));
    }
    let url = SignedFileUrl {
        method,
        path,
        expires,
        signature: param("signature")?.clone(),
    };
    let row = match app.control.sandboxes.open_file_url(id, &url).await {
        Ok(Ok(row)) => row,
        Ok(Err(refused)) => return Err(forbidden(refused.to_string())),
        Err(ControlError::SandboxNotFound(_)) => {
            return Err(forbidden(
                pandastack_control::FileUrlRefused::BadSignature.to_string(),
            ))
        }
        Err(e) => return Err(e.into()),
    };
    let row = app.control.sandboxes.awake(row).await?;
    Ok((row.id, url.path))
}

/// Download the file a signed URL names (no API key: the URL is the credential).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/files/signed",
    operation_id = "read_signed_file",
    tag = "files",
    security(()),
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("path" = String, Query, description = "As signed"),
        ("method" = String, Query, description = "`GET`"),
        ("expires" = i64, Query, description = "Unix seconds, as signed"),
        ("signature" = String, Query, description = "The URL's signature"),
    ),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream", body = inline(crate::schemas::Bytes)),
        (status = 403, description = "Expired, or not signed for this sandbox, method and path", body = wire::ErrorEnvelope),
    )
)]
pub async fn signed_read(
    State(app): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Response> {
    let (id, path) = opened(&app, &id, FileUrlMethod::Get, &q).await?;
    read_file(&app, &id, &path).await
}

/// Upload the file a signed URL names (no API key: the URL is the credential); it is replaced
/// atomically, parents are created.
#[utoipa::path(
    put,
    path = "/v1/sandboxes/{id}/files/signed",
    operation_id = "write_signed_file",
    tag = "files",
    security(()),
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("path" = String, Query, description = "As signed"),
        ("method" = String, Query, description = "`PUT`"),
        ("expires" = i64, Query, description = "Unix seconds, as signed"),
        ("signature" = String, Query, description = "The URL's signature"),
    ),
    request_body(content = inline(crate::schemas::Bytes), content_type = "application/octet-stream", description = "The file's new bytes"),
    responses(
        (status = 200, description = "Written: `{\"path\", \"bytes_written\"}`", body = Object),
        (status = 403, description = "Expired, or not signed for this sandbox, method and path", body = wire::ErrorEnvelope),
    )
)]
pub async fn signed_write(
    State(app): State<Arc<ApiState>>,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
    body: HttpBody,
) -> ApiResult<Response> {
    let (id, path) = opened(&app, &id, FileUrlMethod::Put, &q).await?;
    Ok(write_file(&app, &id, &path, body).await?.into_response())
}
