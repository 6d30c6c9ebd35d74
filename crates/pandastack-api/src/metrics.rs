//! Resource use over time: `GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics`.
//!
//! The host of each VM keeps its readings (one every few seconds for the last hour, one a
//! minute for five hours before that: `pandastack_agent`'s `metrics`); this module asks for
//! those since `since` and folds them into points of `step` seconds. CPU and network figures
//! are differences of counters between consecutive readings of one VM process; memory and disk
//! are the step's last reading. A resource with several VMs (an app's, a function's instances,
//! a database and the VMs its restores start) sums them.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::Json;
use pandastack_api_types::{self as wire, SandboxState};
use pandastack_host::{HostError, MetricSample};
use pandastack_store::{Filter, SandboxRow};

use crate::error::{ApiError, ApiResult};
use crate::extract::Caller;
use crate::{rfc3339, ApiState};

/// `since` when none is given (seconds back).
const DEFAULT_SPAN_S: u64 = 600;
/// `step` when none is given (seconds): the hosts' sampling interval.
const DEFAULT_STEP_S: u64 = 5;
/// Readings asked for before `since`, so the first point has a counter to start from.
const LOOKBACK_MS: i64 = 60_000;

/// What a point sums so far.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Acc {
    cpu_ms: u64,
    /// Milliseconds of vCPU time the readings span.
    capacity_ms: u64,
    vcpus: u32,
    mem: u64,
    pss: u64,
    mem_total: Option<u64>,
    mem_available: Option<u64>,
    disk: Option<u64>,
    disk_total: Option<u64>,
    rx: Option<u64>,
    tx: Option<u64>,
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.cpu_ms += o.cpu_ms;
        self.capacity_ms += o.capacity_ms;
        self.vcpus += o.vcpus;
        self.mem += o.mem;
        self.pss += o.pss;
        self.mem_total = add(self.mem_total, o.mem_total);
        self.mem_available = add(self.mem_available, o.mem_available);
        self.disk = add(self.disk, o.disk);
        self.disk_total = add(self.disk_total, o.disk_total);
        self.rx = add(self.rx, o.rx);
        self.tx = add(self.tx, o.tx);
    }

    fn point(&self, t_ms: i64) -> wire::MetricPoint {
        let pct = if self.capacity_ms > 0 {
            self.cpu_ms as f64 * 100.0 / self.capacity_ms as f64
        } else {
            0.0
        };
        wire::MetricPoint {
            t: rfc3339(t_ms),
            cpu_pct: (pct * 100.0).round() / 100.0,
            vcpus: self.vcpus,
            mem_bytes: self.mem,
            pss_bytes: self.pss,
            mem_total_bytes: self.mem_total,
            mem_available_bytes: self.mem_available,
            disk_bytes: self.disk,
            disk_total_bytes: self.disk_total,
            net_rx: self.rx,
            net_tx: self.tx,
        }
    }
}

/// One VM's readings folded into steps of `step_ms` from `since_ms` (step starts are multiples
/// of the step, so several VMs' steps line up). Readings before `since_ms` only give the first
/// counters to start from; a reading of a new VM process (a wake) starts its counters again.
fn fold(samples: &[MetricSample], since_ms: i64, step_ms: i64) -> BTreeMap<i64, Acc> {
    let mut out: BTreeMap<i64, Acc> = BTreeMap::new();
    let mut prev: Option<&MetricSample> = None;
    for s in samples {
        if s.at_ms >= since_ms {
            let acc = out
                .entry(s.at_ms.div_euclid(step_ms) * step_ms)
                .or_default();
            if let Some(p) = prev.filter(|p| p.run == s.run && p.at_ms <= s.at_ms) {
                acc.cpu_ms += s.cpu_time_ms.saturating_sub(p.cpu_time_ms);
                acc.capacity_ms += (s.at_ms - p.at_ms) as u64 * u64::from(s.vcpus.max(1));
                let delta = |now: Option<u64>, before: Option<u64>| {
                    Some(now?.saturating_sub(before.unwrap_or(0)))
                };
                acc.rx = add(acc.rx, delta(s.net_rx_bytes, p.net_rx_bytes));
                acc.tx = add(acc.tx, delta(s.net_tx_bytes, p.net_tx_bytes));
            } else if s.net_rx_bytes.is_some() {
                acc.rx = acc.rx.or(Some(0));
                acc.tx = acc.tx.or(Some(0));
            }
            acc.vcpus = s.vcpus;
            acc.mem = s.rss_bytes;
            acc.pss = s.pss_bytes;
            acc.mem_total = s.mem_total_bytes;
            acc.mem_available = s.mem_available_bytes;
            acc.disk = s.disk_used_bytes;
            acc.disk_total = s.disk_total_bytes;
        }
        prev = Some(s);
    }
    out
}

fn points(steps: &BTreeMap<i64, Acc>) -> Vec<wire::MetricPoint> {
    steps.iter().map(|(t, a)| a.point(*t)).collect()
}

/// `since` and `step` of a query, as Unix ms and ms.
fn window(q: &BTreeMap<String, String>) -> ApiResult<(i64, i64)> {
    let step = wire::metrics_step(q.get("step").map(String::as_str), DEFAULT_STEP_S)
        .map_err(ApiError::from)?;
    let now = pandastack_store::now_ms();
    let since = match q.get("since").map(String::as_str) {
        None => now - (DEFAULT_SPAN_S * 1000) as i64,
        Some(v) => match wire::relative_since(v) {
            Some(span) => now - (span.map_err(ApiError::from)? * 1000) as i64,
            None => {
                let t =
                    time::OffsetDateTime::parse(v, &time::format_description::well_known::Rfc3339)
                        .map_err(|_| {
                            ApiError::from(wire::FieldError {
                                field: "since".into(),
                                message: "an RFC 3339 time or a span back such as 15m, 1h or 90s"
                                    .into(),
                            })
                        })?;
                (t.unix_timestamp_nanos() / 1_000_000) as i64
            }
        },
    };
    Ok((since, (step * 1000) as i64))
}

/// Whether a sandbox in `state` has a VM (running, paused or hibernated) whose host has its
/// readings.
fn has_vm(state: SandboxState) -> bool {
    matches!(
        state,
        SandboxState::Running | SandboxState::Paused | SandboxState::Hibernated
    )
}

/// The readings of `row`'s VM since `since_ms` (with the lookback); none for a sandbox that
/// has no VM, or whose VM went away meanwhile.
async fn readings(app: &ApiState, row: &SandboxRow, since_ms: i64) -> ApiResult<Vec<MetricSample>> {
    if !has_vm(row.state) {
        return Ok(Vec::new());
    }
    match app
        .control
        .host()
        .metrics(&row.id, since_ms - LOOKBACK_MS)
        .await
    {
        Ok(v) => Ok(v),
        Err(HostError::SandboxNotFound(_)) => Ok(Vec::new()),
        Err(e) => Err(e.into()),
    }
}

/// The use of a sandbox's VM over time, and its host-side figures now: `state`, and while it
/// runs `host_rss_bytes`, `host_pss_bytes`, `cpu_time_ms`. `since` is an RFC 3339 time or a
/// span back (`90s`, `15m`, `1h`; default 10 minutes, at most 6 hours); `step` is seconds per
/// point (default 5).
#[utoipa::path(
    get,
    path = "/v1/sandboxes/{id}/metrics",
    operation_id = "sandbox_metrics",
    tag = "sandboxes",
    params(
        ("id" = String, Path, description = "Sandbox id"),
        ("since" = Option<String>, Query, description = "RFC 3339 time, or a span back such as `15m` (default 10m, at most 6h)"),
        ("step" = Option<u64>, Query, description = "Seconds per point, 1 to 86400 (default 5)"),
    ),
    responses((status = 200, description = "Resource use", body = wire::Metrics))
)]
pub async fn sandbox(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::Metrics>> {
    let (since, step) = window(&q)?;
    let row = crate::sandboxes::owned(&app, &caller, &id).await?;
    let now = if has_vm(row.state) {
        app.control.host().stats(&row.id).await?
    } else {
        None
    };
    let samples = readings(&app, &row, since).await?;
    Ok(Json(wire::Metrics {
        state: row.state.as_str().to_owned(),
        host_rss_bytes: now.map(|s| s.rss_bytes),
        host_pss_bytes: now.map(|s| s.pss_bytes),
        cpu_time_ms: now.map(|s| s.cpu_time.as_millis() as u64),
        step: (step / 1000) as u64,
        samples: points(&fold(&samples, since, step)),
        instances: Vec::new(),
    }))
}

/// The metrics of a resource whose VMs are the workspace's sandboxes with every pair of
/// `metadata`.
async fn of_vms(
    app: &ApiState,
    ws: &str,
    state: String,
    metadata: Vec<(String, String)>,
    (since, step): (i64, i64),
) -> ApiResult<wire::Metrics> {
    let rows = app
        .store
        .sandboxes()
        .list(
            ws,
            &Filter {
                state: None,
                metadata,
            },
            None,
            u32::MAX - 1,
        )
        .await?;
    let mut total: BTreeMap<i64, Acc> = BTreeMap::new();
    let mut instances = Vec::new();
    for row in rows.iter().filter(|r| has_vm(r.state)) {
        let steps = fold(&readings(app, row, since).await?, since, step);
        for (t, a) in &steps {
            total.entry(*t).or_default().merge(a);
        }
        instances.push(wire::InstanceMetrics {
            sandbox_id: row.id.clone(),
            state: row.state.as_str().to_owned(),
            samples: points(&steps),
        });
    }
    Ok(wire::Metrics {
        state,
        host_rss_bytes: None,
        host_pss_bytes: None,
        cpu_time_ms: None,
        step: (step / 1000) as u64,
        samples: points(&total),
        instances,
    })
}

/// The use of a database's VM over time (see the sandbox's metrics for `since` and `step`).
#[utoipa::path(
    get,
    path = "/v1/databases/{id}/metrics",
    operation_id = "database_metrics",
    tag = "databases",
    params(
        ("id" = String, Path, description = "Database id or name"),
        ("since" = Option<String>, Query, description = "RFC 3339 time, or a span back such as `15m` (default 10m, at most 6h)"),
        ("step" = Option<u64>, Query, description = "Seconds per point, 1 to 86400 (default 5)"),
    ),
    responses((status = 200, description = "Resource use of its VMs", body = wire::Metrics))
)]
pub async fn database(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::Metrics>> {
    let w = window(&q)?;
    let d = app
        .control
        .databases
        .get(caller.ws(), crate::databases::id_of(&id)?)
        .await?;
    let meta = vec![(
        pandastack_control::DATABASE_METADATA.to_owned(),
        d.row.id.clone(),
    )];
    let state = d.row.state.as_str().to_owned();
    Ok(Json(of_vms(&app, caller.ws(), state, meta, w).await?))
}

/// The use of an app's VMs over time (see the sandbox's metrics for `since` and `step`).
#[utoipa::path(
    get,
    path = "/v1/apps/{name}/metrics",
    operation_id = "app_metrics",
    tag = "apps",
    params(
        ("name" = String, Path, description = "App name or id"),
        ("since" = Option<String>, Query, description = "RFC 3339 time, or a span back such as `15m` (default 10m, at most 6h)"),
        ("step" = Option<u64>, Query, description = "Seconds per point, 1 to 86400 (default 5)"),
    ),
    responses((status = 200, description = "Resource use of its VMs", body = wire::Metrics))
)]
pub async fn app_vms(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::Metrics>> {
    let w = window(&q)?;
    let a = app
        .control
        .apps
        .get(caller.ws(), crate::apps::name_of(&name)?)
        .await?;
    let meta = vec![(
        pandastack_control::apps::APP_METADATA.to_owned(),
        a.row.name.clone(),
    )];
    // An app's state is its instance's (none: it has not deployed, or scaled to zero).
    let state = a
        .instance
        .as_ref()
        .map_or("none", |s| s.state.as_str())
        .to_owned();
    Ok(Json(of_vms(&app, caller.ws(), state, meta, w).await?))
}

/// The use of a function's instances over time (see the sandbox's metrics for `since` and
/// `step`).
#[utoipa::path(
    get,
    path = "/v1/functions/{name}/metrics",
    operation_id = "function_metrics",
    tag = "functions",
    params(
        ("name" = String, Path, description = "Function name"),
        ("since" = Option<String>, Query, description = "RFC 3339 time, or a span back such as `15m` (default 10m, at most 6h)"),
        ("step" = Option<u64>, Query, description = "Seconds per point, 1 to 86400 (default 5)"),
    ),
    responses((status = 200, description = "Resource use of its instances", body = wire::Metrics))
)]
pub async fn function(
    State(app): State<Arc<ApiState>>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<wire::Metrics>> {
    let w = window(&q)?;
    let f = app
        .control
        .functions
        .function(caller.ws(), crate::functions::name_of(&name)?)
        .await?;
    let meta = vec![
        (
            pandastack_control::apps::APP_METADATA.to_owned(),
            f.row.name.clone(),
        ),
        (
            pandastack_control::apps::instances::INSTANCE_METADATA.to_owned(),
            f.row.name.clone(),
        ),
    ];
    Ok(Json(
        of_vms(&app, caller.ws(), "live".to_owned(), meta, w).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at_ms: i64, run: u32, cpu: u64, rx: Option<u64>) -> MetricSample {
        MetricSample {
            at_ms,
            run,
            vcpus: 2,
            cpu_time_ms: cpu,
            rss_bytes: at_ms as u64,
            net_rx_bytes: rx,
            net_tx_bytes: rx.map(|r| r * 2),
            ..Default::default()
        }
    }

    #[test]
    fn counters_become_rates_and_gauges_the_last_reading() {
        // Two vCPUs, 5 s apart: 5 s of CPU is half of their 10 s.
        let v = [
            s(95_000, 1, 1_000, Some(100)),
            s(100_000, 1, 6_000, Some(300)),
            s(105_000, 1, 6_000, Some(300)),
        ];
        let steps = fold(&v, 100_000, 5_000);
        assert_eq!(steps.len(), 2);
        let p = steps[&100_000].point(100_000);
        assert_eq!(p.cpu_pct, 50.0);
        assert_eq!((p.net_rx, p.net_tx), (Some(200), Some(400)));
        assert_eq!(p.mem_bytes, 100_000);
        assert_eq!(steps[&105_000].point(0).cpu_pct, 0.0);
        // A longer step sums the counters and keeps the last gauges.
        let steps = fold(&v, 100_000, 60_000);
        let p = steps[&60_000].point(60_000);
        assert_eq!(p.cpu_pct, 25.0);
        assert_eq!(p.mem_bytes, 105_000);
    }

    #[test]
    fn a_new_process_starts_its_counters_again() {
        let v = [
            s(0, 1, 50_000, Some(9_000)),
            s(5_000, 2, 1_000, Some(10)),
            s(10_000, 2, 3_000, Some(30)),
        ];
        let steps = fold(&v, 0, 5_000);
        // No rate across the two processes; none negative after.
        assert_eq!(steps[&5_000].cpu_ms, 0);
        assert_eq!(steps[&5_000].rx, Some(0));
        assert_eq!(steps[&10_000].cpu_ms, 2_000);
        assert_eq!(steps[&10_000].rx, Some(20));
    }

    #[test]
    fn several_vms_sum_within_aligned_steps() {
        let a = fold(&[s(0, 1, 0, None), s(5_000, 1, 5_000, None)], 0, 5_000);
        let b = fold(&[s(1_000, 1, 0, None), s(6_000, 1, 0, None)], 0, 5_000);
        let mut total: BTreeMap<i64, Acc> = BTreeMap::new();
        for (t, x) in a.iter().chain(b.iter()) {
            total.entry(*t).or_default().merge(x);
        }
        let p = total[&5_000].point(5_000);
        assert_eq!(p.vcpus, 4);
        assert_eq!(p.cpu_pct, 25.0);
        assert_eq!(p.mem_bytes, 11_000);
        assert_eq!(p.net_rx, None);
    }
}
