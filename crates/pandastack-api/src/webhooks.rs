//! `/v1/webhooks`: a workspace's webhook endpoints, their delivery history and redelivery.
//! Handlers parse, call the control plane's [`pandastack_control::Events`] and map; the URL's
//! destination is judged there (the outbound policy), a refused one is `invalid_argument`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pandastack_api_types::{self as wire, CreateWebhookRequest, ErrorCode, List};
use pandastack_control::events::{delivery_wire, webhook_wire};
use pandastack_control::WebhookError;

use crate::error::{ApiError, ApiResult};
use crate::extract::{Body, Caller};
use crate::idempotency::{self, Begin};
use crate::ApiState;

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::NotFound(id) => Self::not_found(ErrorCode::NotFound, "webhook", &id),
            WebhookError::DeliveryNotFound(id) => {
                Self::not_found(ErrorCode::NotFound, "delivery", &id)
            }
            WebhookError::Invalid(f) => f.into(),
            e @ WebhookError::Refused(_) => {
                let mut message = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    message = format!("{message}: {c}");
                    cause = c.source();
                }
                Self::new(ErrorCode::InvalidArgument, message)
            }
            WebhookError::Store(e) => e.into(),
        }
    }
}

/// A webhook id from a path, or 404.
fn id_of(id: &str) -> ApiResult<&str> {
    if wire::valid_name(id, 64) {
        Ok(id)
    } else {
        Err(ApiError::not_found(ErrorCode::NotFound, "webhook", id))
    }
}

/// Create a webhook endpoint: events matching `events` (exact types, `<kind>.*`, `*`) are
/// POSTed to `url`, signed with `secret` (Standard Webhooks). The secret is shown only here.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    operation_id = "create_webhook",
    tag = "events",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe (at most 128 bytes)")),
    request_body = CreateWebhookRequest,
    responses((status = 201, description = "The webhook, with its secret", body = wire::Webhook))
)]
pub async fn create(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    Body(req): Body<CreateWebhookRequest>,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let idem =
        match idempotency::begin(&app, caller.ws(), &headers, "POST /v1/webhooks", &req).await? {
            Begin::Replay(status, body) => return Ok((status, body)),
            Begin::Proceed(idem) => idem,
        };
    idempotency::to_completion(async move {
        let result = async {
            let row = app.control.events.create_webhook(caller.ws(), &req).await?;
            Ok((StatusCode::CREATED, webhook_wire(&row, true)))
        }
        .await;
        idem.finish(&app, caller.ws(), result).await
    })
    .await
}

/// List the workspace's webhooks.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    operation_id = "list_webhooks",
    tag = "events",
    params(crate::page::PageQuery),
    responses((status = 200, description = "A page of webhooks (without secrets)", body = List<wire::Webhook>))
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::Webhook>>> {
    let page = crate::page::Page::of(&q)?;
    let mut rows = app
        .control
        .events
        .list_webhooks(
            caller.ws(),
            page.after.as_ref().map(|c| c.id.as_str()),
            i64::from(page.limit) + 1,
        )
        .await?;
    let next_cursor = page.cut(&mut rows, |w| wire::Cursor {
        created_at_ms: 0,
        id: w.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(|w| webhook_wire(w, false)).collect(),
        next_cursor,
    }))
}

/// One webhook (without its secret).
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    operation_id = "get_webhook",
    tag = "events",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 200, description = "The webhook", body = wire::Webhook))
)]
pub async fn get(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<wire::Webhook>> {
    let row = app.control.events.webhook(caller.ws(), id_of(&id)?).await?;
    Ok(Json(webhook_wire(&row, false)))
}

/// Delete a webhook and its delivery history; what it has pending is not sent.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    operation_id = "delete_webhook",
    tag = "events",
    params(("id" = String, Path, description = "Webhook id")),
    responses((status = 204, description = "Deleted"))
)]
pub async fn delete(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    app.control
        .events
        .delete_webhook(caller.ws(), id_of(&id)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A webhook's deliveries, newest event first: each event's state (`pending`, `delivered`,
/// `failed`), attempts, last answer and error.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    operation_id = "list_webhook_deliveries",
    tag = "events",
    params(
        ("id" = String, Path, description = "Webhook id"),
        crate::page::PageQuery,
    ),
    responses((status = 200, description = "A page of deliveries", body = List<wire::WebhookDelivery>))
)]
pub async fn deliveries(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<List<wire::WebhookDelivery>>> {
    let page = crate::page::Page::of(&q)?;
    // The cursor carries the last event id of the previous page (newest first).
    let before = page.after.as_ref().map(|c| c.created_at_ms);
    let mut rows = app
        .control
        .events
        .deliveries(caller.ws(), id_of(&id)?, before, i64::from(page.limit) + 1)
        .await?;
    let next_cursor = page.cut(&mut rows, |d| wire::Cursor {
        created_at_ms: d.event_id,
        id: d.id.clone(),
    });
    Ok(Json(List {
        data: rows.iter().map(delivery_wire).collect(),
        next_cursor,
    }))
}

/// Send a delivery again (now, with a fresh round of attempts; its history is kept). Later
/// events of the same resource wait for it.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver",
    operation_id = "redeliver_webhook_delivery",
    tag = "events",
    params(
        ("id" = String, Path, description = "Webhook id"),
        ("delivery_id" = String, Path, description = "Delivery id"),
    ),
    responses((status = 202, description = "The delivery, pending", body = wire::WebhookDelivery))
)]
pub async fn redeliver(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path((id, delivery)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<wire::WebhookDelivery>)> {
    if !wire::valid_name(&delivery, 64) {
        return Err(ApiError::not_found(
            ErrorCode::NotFound,
            "delivery",
            &delivery,
        ));
    }
    let d = app
        .control
        .events
        .redeliver(caller.ws(), id_of(&id)?, &delivery)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(delivery_wire(&d))))
}
