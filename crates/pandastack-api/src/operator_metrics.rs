//! `GET /metrics`: the process's metrics in the Prometheus (OpenMetrics) text format for
//! operators — on the API listener with an admin key, or on a listener of its own
//! (`--metrics-listen`, no key: bind it where only the scraper reaches). The gauges that come
//! from the store (sandboxes by state, hosts, jobs and the age of the oldest waiting one) are
//! read just before each scrape; the rest are recorded as the work happens
//! (`pandastack_telemetry`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::Router;
use pandastack_store::{now_ms, Store, StoreError};

use crate::error::ApiResult;
use crate::extract::Admin;
use crate::ApiState;

/// The content type of the OpenMetrics text Prometheus reads.
pub const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Reads the store's gauges into the registry.
async fn refresh(store: &Store) -> Result<(), StoreError> {
    let now = now_ms();
    let hosts = store.hosts().list().await?;
    let mut by_state = std::collections::BTreeMap::<String, i64>::new();
    for h in &hosts {
        *by_state.entry(h.state.as_str().to_owned()).or_default() += 1;
    }
    let gauges = pandastack_telemetry::Gauges {
        vms: store.sandboxes().count_by_state().await?,
        hosts: by_state.into_iter().collect(),
        jobs: store.jobs().count_by_kind_and_state().await?,
        oldest_queued: store
            .jobs()
            .oldest_due_by_kind(now)
            .await?
            .into_iter()
            .map(|(kind, due)| (kind, (now - due).max(0) as f64 / 1000.0))
            .collect(),
    };
    pandastack_telemetry::metrics().set_gauges(&gauges);
    Ok(())
}

/// The registry's text, with the store's gauges read first when there is a store.
async fn text(store: Option<&Store>) -> Result<Response, StoreError> {
    if let Some(store) = store {
        refresh(store).await?;
    }
    Ok((
        [(CONTENT_TYPE, CONTENT)],
        pandastack_telemetry::metrics().encode(),
    )
        .into_response())
}

/// The server's metrics for Prometheus (an admin key's): VMs by state, hosts, VM operations
/// and their latency, pool depth, jobs and their age, WAL archive lag per database, API and
/// proxy requests, object-store traffic, store query latency. See `docs/operations.md`.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "prometheus_metrics",
    tag = "hosts",
    responses(
        (status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String),
    )
)]
pub async fn prometheus(State(app): State<Arc<ApiState>>, _: Admin) -> ApiResult<Response> {
    Ok(text(Some(&app.store)).await?)
}

/// A router serving only `GET /metrics`, without a key, for a listener of its own: the
/// server's (with its store's gauges) or an agent's (`store` none: what the process records).
pub fn metrics_router(store: Option<Store>) -> Router {
    Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let store = store.clone();
            async move {
                match text(store.as_ref()).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(
                            error = &e as &dyn std::error::Error,
                            "metrics: the store's gauges"
                        );
                        (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("the store did not answer: {e}\n"),
                        )
                            .into_response()
                    }
                }
            }
        }),
    )
}
