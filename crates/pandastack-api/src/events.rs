//! `GET /v1/events`: the workspace's events, as a page of JSON or — with `Accept:
//! text/event-stream` — as Server-Sent Events that go on as events happen.
//!
//! Both read the events table after an id: `?cursor=` (an event id; `0` for the oldest kept),
//! or, for a stream, the `Last-Event-ID` header an `EventSource` sends when it reconnects
//! (which wins over the cursor in the URL it reconnects to). Ids commit in order (see
//! `pandastack_store::EventRepo`), so a resumed stream gets exactly the events after the one it
//! last saw — none twice, none missed. A stream reads the table again when this process writes
//! an event (the control plane's hint) and every [`POLL`] otherwise (another replica's events).

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{self as wire, ErrorCode, List};
use pandastack_control::event_wire;
use pandastack_store::EventFilter;

use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;
use crate::ApiState;

/// Longest a stream goes without reading the table.
const POLL: Duration = Duration::from_secs(1);
/// Events read from the table at once by a stream.
const BATCH: i64 = 200;

/// Whether the request asks for Server-Sent Events.
fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

/// An event id from a cursor or a `Last-Event-ID`.
fn event_id(field: &str, v: &str) -> ApiResult<i64> {
    v.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidArgument,
                format!("{field}: an event id (a whole number, 0 for the oldest event kept)"),
            )
        })
}

/// `?type=` and `?resource=` as a filter (its `after` unset).
fn filter_of(q: &BTreeMap<String, String>) -> ApiResult<EventFilter> {
    let event_type = q.get("type").cloned();
    if let Some(t) = &event_type {
        if !wire::valid_event_pattern(t) {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("type: {t:?} is not an event type, a `<kind>.*` prefix of one, or `*`"),
            ));
        }
    }
    let resource_id = q.get("resource").cloned();
    if let Some(r) = &resource_id {
        if r.is_empty() || r.len() > 128 {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                "resource: a resource id, 1 to 128 bytes",
            ));
        }
    }
    Ok(EventFilter {
        after: None,
        event_type,
        resource_id,
    })
}

/// The workspace's events, oldest first: a page of JSON, or with `Accept: text/event-stream` a
/// stream.
///
/// A page starts after `cursor` (an event id; from the oldest kept without one) and its
/// `next_cursor` continues it. A stream starts after `Last-Event-ID` or `cursor` (without
/// either: with the events from now on), sends each event as it happens with its id as the
/// SSE `id` and its type as the SSE event name, and keeps the connection alive with comments.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "events",
    params(
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "A page's events, 1 to 1000 (default 100); not used by a stream"),
        ("cursor" = Option<String>, Query, pattern = "^[0-9]+$", description = "Start after this event id (`next_cursor` of the previous page, or an SSE id; `0`: the oldest kept)"),
        ("type" = Option<String>, Query, description = "Only this event type, or a `<kind>.*` prefix (`sandbox.*`)"),
        ("resource" = Option<String>, Query, description = "Only events of the resource with this id"),
        ("Last-Event-ID" = Option<String>, Header, description = "A stream resumes after this event id (what an EventSource sends when it reconnects)"),
        ("access_token" = Option<String>, Query, description = "API key, for clients that cannot set headers (EventSource)"),
    ),
    responses(
        (status = 200, description = "A page of events (JSON), or with `Accept: text/event-stream` Server-Sent Events named by the event's type, the event as data", content(
            (List<wire::Event> = "application/json"),
            (inline(crate::schemas::EventEvents) = "text/event-stream"),
        )),
    )
)]
pub async fn list(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let limit = crate::page::limit(&q, 100, 1000)?;
    let mut filter = filter_of(&q)?;
    let cursor = q.get("cursor").map(|c| event_id("cursor", c)).transpose()?;
    if wants_sse(&headers) {
        let last = headers
            .get("last-event-id")
            .map(|v| event_id("Last-Event-ID", v.to_str().unwrap_or("")))
            .transpose()?;
        filter.after = match last.or(cursor) {
            Some(id) => Some(id),
            None => Some(app.control.events.last_id().await?),
        };
        return Ok(stream(app, caller.ws().to_owned(), filter));
    }
    filter.after = cursor;
    let mut rows = app
        .control
        .events
        .list(caller.ws(), &filter, i64::from(limit) + 1)
        .await?;
    let next_cursor = if rows.len() > limit as usize {
        rows.truncate(limit as usize);
        rows.last().map(|r| r.id.to_string())
    } else {
        None
    };
    Ok(Json(List {
        data: rows.iter().map(event_wire).collect(),
        next_cursor,
    })
    .into_response())
}

/// A stream of workspace `ws`'s events after `filter.after`.
fn stream(app: Arc<ApiState>, ws: String, filter: EventFilter) -> Response {
    struct Follow {
        app: Arc<ApiState>,
        ws: String,
        filter: EventFilter,
        hint: tokio::sync::watch::Receiver<i64>,
        ready: VecDeque<wire::Event>,
    }
    let start = Follow {
        hint: app.control.events.subscribe(),
        app,
        ws,
        filter,
        ready: VecDeque::new(),
    };
    let events = futures::stream::unfold(start, |mut f| async move {
        loop {
            if let Some(e) = f.ready.pop_front() {
                let sse = Event::default()
                    .id(e.id.clone())
                    .event(e.event_type.clone())
                    .json_data(&e)
                    .unwrap_or_else(|_| Event::default().comment("unencodable event"));
                return Some((Ok::<_, Infallible>(sse), f));
            }
            // Marked seen before the read: an event written after it changes the hint again.
            f.hint.borrow_and_update();
            match f.app.control.events.list(&f.ws, &f.filter, BATCH).await {
                Ok(rows) if !rows.is_empty() => {
                    f.filter.after = rows.last().map(|r| r.id);
                    f.ready.extend(rows.iter().map(event_wire));
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    error = &e as &dyn std::error::Error,
                    "read events for a stream"
                ),
            }
            if let Ok(Err(_)) = tokio::time::timeout(POLL, f.hint.changed()).await {
                // The control plane that wrote the hint is gone: poll alone.
                tokio::time::sleep(POLL).await;
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
