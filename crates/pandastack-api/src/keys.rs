//! API keys of the caller's workspace, and its usage: against its limits, and metered
//! (`crate::usage`).

use std::sync::Arc;

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{self as wire, CreateKeyRequest, CreatedKey, ErrorCode, List, Scope};
use pandastack_store::{KeyGrant, KeyRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::{rfc3339, ApiState};

fn key_wire(k: &KeyRow) -> wire::Key {
    wire::Key {
        id: k.id.clone(),
        name: k.name.clone(),
        prefix: k.prefix.clone(),
        created_at: rfc3339(k.created_at),
        revoked: k.revoked_at.is_some(),
        admin: k.admin,
        scopes: k.scopes.clone(),
        expires_at: k.expires_at.map(rfc3339),
        last_used_at: k.last_used_at.map(rfc3339),
        member_id: k.member_id.clone(),
        role: k.role.as_deref().and_then(|r| wire::Role::parse(r).ok()),
    }
}

/// Whether `caller` sees (and may revoke) key `k`: every key of the workspace for a caller who
/// manages it, else only the keys of the caller's own member.
fn sees(caller: &Caller, k: &KeyRow) -> bool {
    caller.manages() || (k.member_id.is_some() && k.member_id == caller.key.member_id)
}

/// What a key made by `caller` with `req` may do: the scopes asked for (default: the caller's),
/// each covered by the caller's; an expiry in the future, never after the caller's own.
fn grant(caller: &Caller, req: &CreateKeyRequest) -> ApiResult<KeyGrant> {
    let own: Vec<Scope> = caller
        .key
        .scopes
        .iter()
        .filter_map(|s| Scope::parse(s).ok())
        .collect();
    let scopes = match &req.scopes {
        Some(v) => {
            let wanted = wire::parse_scopes(v)?;
            if let Some(s) = wire::first_uncovered(&own, &wanted) {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "scopes: this key cannot grant {s}: a key makes only keys with scopes its own cover (it has {})",
                        caller.key.scopes.join(", ")
                    ),
                ));
            }
            wanted.iter().map(ToString::to_string).collect()
        }
        None => caller.key.scopes.clone(),
    };
    let now = pandastack_store::now_ms();
    let expires_at = match &req.expires_at {
        Some(t) => {
            let at = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
                .map_err(|_| wire::FieldError {
                    field: "expires_at".into(),
                    message: format!("{t:?}: an RFC 3339 time"),
                })?;
            let ms = (at.unix_timestamp_nanos() / 1_000_000) as i64;
            if ms <= now {
                return Err(wire::FieldError {
                    field: "expires_at".into(),
                    message: "a time in the future".into(),
                }
                .into());
            }
            if let Some(own) = caller.key.expires_at.filter(|own| ms > *own) {
                return Err(wire::FieldError {
                    field: "expires_at".into(),
                    message: format!("not after this key's own expiry ({})", rfc3339(own)),
                }
                .into());
            }
            Some(ms)
        }
        None => caller.key.expires_at,
    };
    let member_id = match &req.member_id {
        Some(m) if Some(m) != caller.key.member_id.as_ref() => {
            if !caller.manages() {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "member_id: only an owner or admin makes keys for another member",
                ));
            }
            Some(m.clone())
        }
        _ => caller.key.member_id.clone(),
    };
    Ok(KeyGrant {
        scopes,
        expires_at,
        member_id,
    })
}

/// List the workspace's API keys (never their secrets).
#[utoipa::path(
    get,
    path = "/v1/keys",
    operation_id = "list_keys",
    tag = "keys",
    responses((status = 200, description = "Keys", body = List<wire::Key>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
) -> ApiResult<Json<List<wire::Key>>> {
    let keys = app.store.keys().list(caller.ws()).await?;
    Ok(Json(List {
        data: keys
            .iter()
            .filter(|k| sees(&caller, k))
            .map(key_wire)
            .collect(),
        next_cursor: None,
    }))
}

/// Create an API key in the caller's workspace; the secret is in this response only.
#[utoipa::path(
    post,
    path = "/v1/keys",
    operation_id = "create_key",
    tag = "keys",
    request_body = CreateKeyRequest,
    responses((status = 201, description = "The key with its secret", body = CreatedKey))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Body(req): Body<CreateKeyRequest>,
) -> ApiResult<(StatusCode, Json<CreatedKey>)> {
    if req.name.len() > 64 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "name: at most 64 bytes",
        ));
    }
    let grant = grant(&caller, &req)?;
    if let Some(m) = grant
        .member_id
        .as_deref()
        .filter(|_| req.member_id.is_some())
    {
        let member = app
            .store
            .members()
            .get(caller.ws(), m)
            .await
            .map_err(|e| match e {
                pandastack_store::MemberError::NotFound => ApiError::new(
                    ErrorCode::NotFound,
                    format!("member_id: member {m:?} not found in this workspace"),
                ),
                other => crate::members::member_store_error(other),
            })?;
        if member.role == "owner" && !caller.owns() {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "member_id: only an owner makes keys for an owner",
            ));
        }
    }
    let (row, secret) = match app
        .store
        .keys()
        .create_granted(caller.ws(), &req.name, &grant)
        .await
    {
        Ok(done) => done,
        // The member was removed between the check and the insert.
        Err(pandastack_store::StoreError::NotFound) => {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                "member_id: the member was removed",
            ))
        }
        Err(e) => return Err(e.into()),
    };
    Ok((
        StatusCode::CREATED,
        Json(CreatedKey {
            key: key_wire(&row),
            secret,
        }),
    ))
}

/// Revoke an API key of the caller's workspace; it stops working at once.
#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    operation_id = "revoke_key",
    tag = "keys",
    params(("id" = String, Path, description = "Key id")),
    responses((status = 204, description = "Revoked"))
)]
pub async fn revoke(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    if !caller.manages() {
        let own = app
            .store
            .keys()
            .list(caller.ws())
            .await?
            .iter()
            .any(|k| k.id == id && sees(&caller, k));
        if !own {
            return Err(ApiError::not_found(ErrorCode::KeyNotFound, "key", &id));
        }
    }
    match app.store.keys().revoke(caller.ws(), &id).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT),
        Err(pandastack_store::StoreError::NotFound) => {
            Err(ApiError::not_found(ErrorCode::KeyNotFound, "key", &id))
        }
        Err(e) => Err(e.into()),
    }
}

/// What the caller's workspace uses against its limits: sandboxes (running ones count against
/// the limit, hibernated ones against their own), volumes against the volume quota, snapshots,
/// template builds, and the host disk snapshots, hibernated sandboxes and template builds take
/// against the storage quota. And, in `metered`, what it used over `[from, to)` (default: this
/// calendar month, UTC, to now; at most 366 days; hours are the resolution) as the usage meter
/// counted it: vCPU-seconds, GiB-seconds of memory, storage GiB-hours, egress and ingress
/// bytes, function invocations and their seconds, databases' compute seconds — in totals and,
/// with `group_by`, in groups. `format=csv` (or `Accept: text/csv`) answers the metered part
/// as CSV: a header row, then a row per group (the totals when nothing is grouped).
#[utoipa::path(
    get,
    path = "/v1/usage",
    operation_id = "get_usage",
    tag = "keys",
    params(
        ("from" = Option<String>, Query, description = "RFC 3339 start of the metered window (default: the start of this month, UTC); rounded down to its hour"),
        ("to" = Option<String>, Query, description = "RFC 3339 end of the metered window (default: now); at most 366 days after `from`"),
        ("group_by" = Option<String>, Query, description = "`none` (default), or a comma list of `kind`, `resource` and one of `day` or `hour`"),
        ("format" = Option<String>, Query, description = "`json` (default) or `csv` (the metered part only; also chosen by `Accept: text/csv`)"),
    ),
    responses((status = 200, description = "The workspace's usage and limits, and its metered usage", content((wire::Usage = "application/json"), (String = "text/csv"))))
)]
pub async fn usage(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let asked = crate::usage::asked(&q, &headers, pandastack_store::now_ms())?;
    let metered = crate::usage::metered(&app, caller.ws(), &asked).await?;
    if asked.csv {
        let body = crate::usage::csv(&metered);
        return Ok(([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], body).into_response());
    }
    let ws = app.store.keys().workspace(caller.ws()).await?;
    let quota = app.store.keys().volume_quota(caller.ws()).await?;
    let c = app.store.keys().counts(caller.ws()).await?;
    let q = app.store.quotas().get(caller.ws()).await?;
    let s = app.store.quotas().used(caller.ws()).await?;
    let n = |v: i64| v.max(0) as u64;
    Ok(Json(wire::Usage {
        sandboxes: wire::SandboxUsage {
            running: n(c.running),
            hibernated: n(c.hibernated),
            limit: n(ws.max_sandboxes),
            hibernated_limit: n(q.max_hibernated),
            creates_per_minute: n(ws.creates_per_minute),
        },
        volumes: wire::VolumeUsage {
            count: n(c.volumes),
            size_gb: n(c.volume_gb),
            quota_gb: n(quota),
            snapshots: n(c.volume_snapshots),
        },
        snapshots: wire::SnapshotUsage {
            count: n(c.snapshots),
            limit: n(q.max_snapshots),
            bytes: n(c.snapshot_bytes),
        },
        templates: wire::TemplateUsage {
            builds: n(s.template_builds),
            limit: n(q.max_template_builds),
            bytes: n(s.template_bytes),
        },
        storage: wire::StorageUsage {
            bytes: n(s.bytes()),
            quota_gb: n(q.max_storage_gb),
            snapshot_bytes: n(s.snapshot_bytes),
            hibernated_bytes: n(s.hibernated_bytes),
            template_bytes: n(s.template_bytes),
        },
        metered,
    })
    .into_response())
}
