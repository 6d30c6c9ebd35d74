//! Members of the caller's workspace: people with a role (owner, admin, developer, viewer)
//! whose keys can do no more than the role allows. Managing members needs `members:write`
//! (owners and admins); only an owner (or a workspace key) makes, changes or removes an owner.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use pandastack_api_types::{
    self as wire, check_member, CreateMemberRequest, ErrorCode, List, Role, UpdateMemberRequest,
};
use pandastack_store::{MemberError, MemberRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::{rfc3339, ApiState};

pub(crate) fn member_wire(m: &MemberRow) -> wire::Member {
    wire::Member {
        id: m.id.clone(),
        name: m.name.clone(),
        email: m.email.clone(),
        role: Role::parse(&m.role).unwrap_or(Role::Viewer),
        created_at: rfc3339(m.created_at),
        active_keys: u32::try_from(m.active_keys).unwrap_or(0),
    }
}

fn member_error(e: MemberError, id: &str) -> ApiError {
    match e {
        MemberError::NotFound => ApiError::new(
            ErrorCode::NotFound,
            format!("member {id:?} not found in this workspace"),
        ),
        MemberError::EmailTaken => ApiError::new(
            ErrorCode::Conflict,
            "email: a member with this email already exists in the workspace",
        ),
        MemberError::LastOwner => ApiError::new(
            ErrorCode::Conflict,
            "this is the workspace's last owner: make another member owner first",
        ),
        MemberError::Store(e) => e.into(),
    }
}

/// A store failure of a member operation that is not about the member itself.
pub(crate) fn member_store_error(e: MemberError) -> ApiError {
    member_error(e, "")
}

/// Refuses a caller who is not an owner a change that makes, changes or removes an owner.
fn owners_only(caller: &Caller, touches_owner: bool) -> ApiResult<()> {
    if touches_owner && !caller.owns() {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "only an owner makes, changes or removes an owner (this key's member is an admin)",
        ));
    }
    Ok(())
}

/// Add a member to the caller's workspace. Give them a key with `POST /v1/keys
/// {"member_id": …}`; their keys can do no more than the role allows.
#[utoipa::path(
    post,
    path = "/v1/members",
    operation_id = "create_member",
    tag = "keys",
    request_body = CreateMemberRequest,
    responses((status = 201, description = "The member", body = wire::Member))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Body(req): Body<CreateMemberRequest>,
) -> ApiResult<(StatusCode, Json<wire::Member>)> {
    let email = check_member(&req.name, &req.email)?;
    owners_only(&caller, req.role == Role::Owner)?;
    let m = app
        .store
        .members()
        .create(caller.ws(), req.name.trim(), &email, req.role.as_str())
        .await
        .map_err(|e| member_error(e, ""))?;
    Ok((StatusCode::CREATED, Json(member_wire(&m))))
}

/// The workspace's members, oldest first.
#[utoipa::path(
    get,
    path = "/v1/members",
    operation_id = "list_members",
    tag = "keys",
    responses((status = 200, description = "Members", body = List<wire::Member>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
) -> ApiResult<Json<List<wire::Member>>> {
    let rows = app.store.members().list(caller.ws()).await?;
    Ok(Json(List {
        data: rows.iter().map(member_wire).collect(),
        next_cursor: None,
    }))
}

/// One member.
#[utoipa::path(
    get,
    path = "/v1/members/{id}",
    operation_id = "get_member",
    tag = "keys",
    params(("id" = String, Path, description = "Member id")),
    responses((status = 200, description = "The member", body = wire::Member))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Member>> {
    let m = app
        .store
        .members()
        .get(caller.ws(), &id)
        .await
        .map_err(|e| member_error(e, &id))?;
    Ok(Json(member_wire(&m)))
}

/// Rename a member or change their role: what every key of theirs may do changes at once. The
/// last owner keeps the owner role (409).
#[utoipa::path(
    patch,
    path = "/v1/members/{id}",
    operation_id = "update_member",
    tag = "keys",
    params(("id" = String, Path, description = "Member id")),
    request_body = UpdateMemberRequest,
    responses((status = 200, description = "The member", body = wire::Member))
)]
pub async fn update(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Body(req): Body<UpdateMemberRequest>,
) -> ApiResult<Json<wire::Member>> {
    let members = app.store.members();
    let current = members
        .get(caller.ws(), &id)
        .await
        .map_err(|e| member_error(e, &id))?;
    if let Some(name) = &req.name {
        check_member(name, &current.email)?;
    }
    let touches_owner = current.role == "owner" || req.role == Some(Role::Owner);
    owners_only(&caller, touches_owner && req.role.is_some())?;
    let m = members
        .update(
            caller.ws(),
            &id,
            req.name.as_deref().map(str::trim),
            req.role.map(Role::as_str),
        )
        .await
        .map_err(|e| member_error(e, &id))?;
    Ok(Json(member_wire(&m)))
}

/// Remove a member: their keys are revoked at once. The last owner stays (409).
#[utoipa::path(
    delete,
    path = "/v1/members/{id}",
    operation_id = "delete_member",
    tag = "keys",
    params(("id" = String, Path, description = "Member id")),
    responses((status = 204, description = "Removed, keys revoked"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let members = app.store.members();
    let current = members
        .get(caller.ws(), &id)
        .await
        .map_err(|e| member_error(e, &id))?;
    owners_only(&caller, current.role == "owner")?;
    members
        .delete(caller.ws(), &id)
        .await
        .map_err(|e| member_error(e, &id))?;
    Ok(StatusCode::NO_CONTENT)
}
