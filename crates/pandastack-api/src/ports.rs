//! Preview URLs of a sandbox's ports: what the URL of a port is, and whether it is public. The
//! proxy that serves them is [`crate::proxy`].

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::Json;
use pandastack_api_types::{parse_port, PortUpdate, PortUrl};
use pandastack_store::SandboxRow;

use crate::error::ApiResult;
use crate::extract::{Body, Caller};
use crate::sandboxes::owned;
use crate::ApiState;

/// The row's access token, giving it one if it has none (rows from before preview URLs).
pub(crate) async fn token(app: &ApiState, row: &SandboxRow) -> ApiResult<String> {
    Ok(app.control.sandboxes.access_token(row).await?)
}

fn port_url(app: &ApiState, row: &SandboxRow, port: u16, token: String) -> PortUrl {
    PortUrl {
        url: app.preview.url(port, &row.id),
        port,
        public: row.public_ports.contains(&port),
        token,
    }
}

/// The preview URL of a port inside a sandbox (whether or not anything listens there yet).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/ports/{port}/url",
    operation_id = "get_port_url",
    tag = "ports",
    params(("id" = String, Path, description = "Sandbox id"), ("port" = u16, Path, minimum = 1, maximum = 65535, description = "TCP port inside the sandbox, 1 to 65535")),
    responses((status = 200, description = "The port's URL, whether it is public, and the token that opens it while private", body = PortUrl))
)]
pub async fn url(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((id, port)): Path<(String, String)>,
) -> ApiResult<Json<PortUrl>> {
    let port = parse_port(&port)?;
    let row = owned(&app, &caller, &id).await?;
    let token = token(&app, &row).await?;
    Ok(Json(port_url(&app, &row, port, token)))
}

/// Make a port public (reachable without a token) or private again.
#[utoipa::path(
    patch,
    path = "/v1/sandboxes/{id}/ports/{port}",
    operation_id = "update_port",
    tag = "ports",
    params(("id" = String, Path, description = "Sandbox id"), ("port" = u16, Path, minimum = 1, maximum = 65535, description = "TCP port inside the sandbox, 1 to 65535")),
    request_body = PortUpdate,
    responses((status = 200, description = "The port as it is now", body = PortUrl))
)]
pub async fn update(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((id, port)): Path<(String, String)>,
    Body(req): Body<PortUpdate>,
) -> ApiResult<Json<PortUrl>> {
    let port = parse_port(&port)?;
    let mut row = owned(&app, &caller, &id).await?;
    row.public_ports = app
        .control
        .sandboxes
        .set_port_public(&row, port, req.public)
        .await?;
    let token = token(&app, &row).await?;
    Ok(Json(port_url(&app, &row, port, token)))
}
