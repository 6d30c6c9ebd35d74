//! `Idempotency-Key` on every POST that creates something (sandboxes, forks, snapshots): the key
//! is reserved before the work starts; a retry with the same key and request gets the first
//! response replayed, a concurrent one gets 409 `conflict` with `Retry-After` while the first is
//! still running, and a reuse with a different request gets 409 too. A failed request releases
//! its key.

use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use pandastack_api_types::ErrorCode;
use pandastack_store::{IdempotencyRecord, Reservation};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{ApiError, ApiResult};
use crate::ApiState;

/// A reserved key (or none was sent).
pub(crate) struct Idem {
    key: Option<String>,
    hash: String,
}

/// What to do with a request.
pub(crate) enum Begin {
    Proceed(Idem),
    Replay(StatusCode, Json<serde_json::Value>),
}

/// Reserves the request's key; `scope` names what is created (e.g. the route and its parent).
pub(crate) async fn begin(
    app: &ApiState,
    ws: &str,
    headers: &HeaderMap,
    scope: &str,
    body: &impl Serialize,
) -> ApiResult<Begin> {
    let text = serde_json::to_string(body).unwrap_or_default();
    let hash = hex::encode(Sha256::digest(format!("{scope}\n{text}").as_bytes()));
    let Some(key) = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
    else {
        return Ok(Begin::Proceed(Idem { key: None, hash }));
    };
    if key.len() > 128 {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            "Idempotency-Key: at most 128 bytes",
        ));
    }
    match app.store.idempotency().reserve(ws, &key, &hash).await? {
        Reservation::Reserved => Ok(Begin::Proceed(Idem {
            key: Some(key),
            hash,
        })),
        Reservation::Existing(rec) if rec.request_hash != hash => Err(ApiError::new(
            ErrorCode::Conflict,
            "Idempotency-Key was used with a different request",
        )),
        Reservation::Existing(rec) if rec.status == 0 => {
            let mut e = ApiError::new(
                ErrorCode::Conflict,
                "a request with this Idempotency-Key is still in progress",
            );
            e.retry_after = Some(1);
            Err(e)
        }
        Reservation::Existing(rec) => {
            let status = StatusCode::from_u16(rec.status as u16).unwrap_or(StatusCode::CREATED);
            let body = serde_json::from_str(&rec.body)
                .map_err(|e| ApiError::internal("idempotency replay", &e))?;
            Ok(Begin::Replay(status, Json(body)))
        }
    }
}

impl Idem {
    /// Records the response for replays, or releases the key if the request failed.
    pub(crate) async fn finish<T: Serialize>(
        self,
        app: &ApiState,
        ws: &str,
        result: ApiResult<(StatusCode, T)>,
    ) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
        let result = result.and_then(|(st, body)| {
            serde_json::to_value(body)
                .map(|v| (st, v))
                .map_err(|e| ApiError::internal("encode", &e))
        });
        let Some(key) = self.key else {
            return result.map(|(st, v)| (st, Json(v)));
        };
        match result {
            Ok((st, v)) => {
                let rec = IdempotencyRecord {
                    request_hash: self.hash,
                    status: i64::from(st.as_u16()),
                    body: v.to_string(),
                };
                app.store.idempotency().put(ws, &key, &rec).await?;
                Ok((st, Json(v)))
            }
            Err(e) => {
                app.store.idempotency().release(ws, &key).await?;
                Err(e)
            }
        }
    }
}

/// Runs `work` on a task of its own and waits for it. When the client goes away axum drops the
/// handler, but the task runs on: a create, fork or snapshot is finished (and its response
/// recorded, so a retry with the same `Idempotency-Key` gets it) or fails and cleans up; it is
/// never abandoned half done with a VM, files or rows behind.
pub(crate) async fn to_completion<T, F>(work: F) -> ApiResult<T>
where
    F: std::future::Future<Output = ApiResult<T>> + Send + 'static,
    T: Send + 'static,
{
    // The request's span goes with the work, so a trace shows it under the request.
    tokio::spawn(tracing::Instrument::in_current_span(work))
        .await
        .unwrap_or_else(|e| Err(ApiError::internal("request task", &e)))
}
