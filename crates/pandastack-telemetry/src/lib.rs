//! The process's own metrics for operators, in the Prometheus text format (`/metrics` of the
//! server, and of an agent with `--metrics-listen`). One registry per process ([`metrics`]);
//! the crates that do the work record into it, and the server fills the gauges that come from
//! the store (VMs by state, hosts, jobs) just before each scrape ([`Gauges`]).
//!
//! Label sets are bounded: operation names, route templates, status classes, job kinds and
//! states, database ids (one per managed database) — never a sandbox id or a raw path.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod sql;
mod traces;

pub use sql::StoreQueryLayer;
pub use traces::{otlp_layer, Traces, TracesError};

/// A VM operation and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpResult {
    pub op: &'static str,
    /// `ok` or `error`.
    pub result: &'static str,
}

/// A VM operation.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Op {
    pub op: &'static str,
}

/// An API request: its method, route template and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpRequest {
    pub method: String,
    /// The route template (`/v1/sandboxes/{id}`), or `unmatched`.
    pub route: String,
    pub status: u16,
}

/// An API route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpRoute {
    pub method: String,
    pub route: String,
}

/// A request the proxy served: what it was for and its status class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProxyRequest {
    /// `preview`, `app`, `function` or `database_http`.
    pub kind: &'static str,
    /// `2xx` … `5xx`.
    pub class: &'static str,
}

/// Object-store traffic's direction.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Direction {
    /// `read` or `write`.
    pub direction: &'static str,
}

/// An object-store call and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectOp {
    /// `get`, `put`, `head`, `list`, `delete`.
    pub op: &'static str,
    /// `ok`, `not_found` or `error`.
    pub result: &'static str,
}

/// A state of something counted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct State {
    pub state: String,
}

/// A durable job kind and state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Job {
    pub kind: String,
    pub state: String,
}

/// A durable job kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobKind {
    pub kind: String,
}

/// A managed database.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Database {
    pub database: String,
}

type Hist<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency() -> Histogram {
    // 5 ms … ~82 s.
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

fn fast_latency() -> Histogram {
    // 0.1 ms … ~3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// Every metric of the process.
pub struct Metrics {
    pub vm_operations: Family<OpResult, Counter>,
    pub vm_operation_seconds: Hist<Op>,
    pub http_requests: Family<HttpRequest, Counter>,
    pub http_request_seconds: Hist<HttpRoute>,
    pub proxy_requests: Family<ProxyRequest, Counter>,
    pub object_store_bytes: Family<Direction, Counter>,
    pub object_store_operations: Family<ObjectOp, Counter>,
    pub store_query_seconds: Histogram,
    pub sample_round_seconds: Histogram,
    pub sampled_vms: Gauge,
    pub pool_vms: Gauge,
    pub wal_archive_lag_seconds: Family<Database, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pub wal_outbox_segments: Family<Database, Gauge>,
    /// Filled from the store before each scrape (see [`Gauges`]).
    pub vms: Family<State, Gauge>,
    pub hosts: Family<State, Gauge>,
    pub jobs: Family<Job, Gauge>,
    pub job_oldest_queued_seconds: Family<JobKind, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// The usage meter's passes: how long each took, readings counted, parts that failed.
    pub meter_pass_seconds: Histogram,
    pub meter_readings: Counter,
    pub meter_failures: Counter,
    registry: Registry,
}

impl Metrics {
    fn new() -> Self {
        let mut m = Metrics {
            vm_operations: Family::default(),
            vm_operation_seconds: Family::new_with_constructor(latency),
            http_requests: Family::default(),
            http_request_seconds: Family::new_with_constructor(fast_latency),
            proxy_requests: Family::default(),
            object_store_bytes: Family::default(),
            object_store_operations: Family::default(),
            store_query_seconds: fast_latency(),
            sample_round_seconds: fast_latency(),
            sampled_vms: Gauge::default(),
            pool_vms: Gauge::default(),
            wal_archive_lag_seconds: Family::default(),
            wal_outbox_segments: Family::default(),
            vms: Family::default(),
            hosts: Family::default(),
            jobs: Family::default(),
            job_oldest_queued_seconds: Family::default(),
            meter_pass_seconds: latency(),
            meter_readings: Counter::default(),
            meter_failures: Counter::default(),
            registry: Registry::with_prefix("pandastack"),
        };
        let r = &mut m.registry;
        r.register(
            "vm_operations",
            "VM operations (create, restore, fork, snapshot, hibernate, wake, delete) by result",
            m.vm_operations.clone(),
        );
        r.register(
            "vm_operation_seconds",
            "How long VM operations took, by operation",
            m.vm_operation_seconds.clone(),
        );
        r.register(
            "http_requests",
            "API requests by method, route template and status",
            m.http_requests.clone(),
        );
        r.register(
            "http_request_seconds",
            "How long API requests took to their response head, by method and route template",
            m.http_request_seconds.clone(),
        );
        r.register(
            "proxy_requests",
            "Requests the proxy forwarded (preview URLs, apps, functions) by status class; 5xx are errors",
            m.proxy_requests.clone(),
        );
        r.register(
            "object_store_bytes",
            "Bytes read from and written to the object store",
            m.object_store_bytes.clone(),
        );
        r.register(
            "object_store_operations",
            "Object-store calls by operation and result",
            m.object_store_operations.clone(),
        );
        r.register(
            "store_query_seconds",
            "How long the state store's SQL statements took",
            m.store_query_seconds.clone(),
        );
        r.register(
            "metrics_sample_round_seconds",
            "How long one round of reading every VM's resource use took",
            m.sample_round_seconds.clone(),
        );
        r.register(
            "metrics_sampled_vms",
            "VMs read in the last round",
            m.sampled_vms.clone(),
        );
        r.register(
            "pool_vms",
            "Pre-started VMs waiting in this host's pools",
            m.pool_vms.clone(),
        );
        r.register(
            "database_wal_archive_lag_seconds",
            "Age of the oldest finished WAL segment not yet in the object store, per database (0: none waiting)",
            m.wal_archive_lag_seconds.clone(),
        );
        r.register(
            "database_wal_outbox_segments",
            "Finished WAL segments waiting to be archived, per database",
            m.wal_outbox_segments.clone(),
        );
        r.register("vms", "Sandboxes by state (every workspace)", m.vms.clone());
        r.register("hosts", "Hosts by state", m.hosts.clone());
        r.register("jobs", "Durable jobs by kind and state", m.jobs.clone());
        r.register(
            "job_oldest_queued_seconds",
            "Age of the oldest job waiting to run, by kind",
            m.job_oldest_queued_seconds.clone(),
        );
        r.register(
            "meter_pass_seconds",
            "How long one pass of the usage meter took",
            m.meter_pass_seconds.clone(),
        );
        r.register(
            "meter_readings",
            "VM readings the usage meter counted",
            m.meter_readings.clone(),
        );
        r.register(
            "meter_failures",
            "Parts of usage meter passes that failed (a VM's readings, the storage; retried)",
            m.meter_failures.clone(),
        );
        m
    }

    /// Records one VM operation that took `secs`.
    pub fn vm_operation(&self, op: &'static str, ok: bool, secs: f64) {
        let result = if ok { "ok" } else { "error" };
        self.vm_operations
            .get_or_create(&OpResult { op, result })
            .inc();
        self.vm_operation_seconds
            .get_or_create(&Op { op })
            .observe(secs);
    }

    /// Records one object-store call.
    pub fn object_op(&self, op: &'static str, result: &'static str) {
        self.object_store_operations
            .get_or_create(&ObjectOp { op, result })
            .inc();
    }

    /// Records bytes moved to or from the object store.
    pub fn object_bytes(&self, direction: &'static str, n: u64) {
        self.object_store_bytes
            .get_or_create(&Direction { direction })
            .inc_by(n);
    }

    /// Records one proxied request with its status.
    pub fn proxied(&self, kind: &'static str, status: u16) {
        self.proxy_requests
            .get_or_create(&ProxyRequest {
                kind,
                class: status_class(status),
            })
            .inc();
    }

    /// The registry in the Prometheus text format (OpenMetrics 1.0 text, which Prometheus
    /// and its parsers read).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// `2xx`-style class of an HTTP status.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// The gauges a scrape fills from the store, given as counts.
#[derive(Debug, Default, Clone)]
pub struct Gauges {
    pub vms: Vec<(String, i64)>,
    pub hosts: Vec<(String, i64)>,
    /// `(kind, state, count)`.
    pub jobs: Vec<(String, String, i64)>,
    /// `(kind, age in seconds of its oldest queued job)`.
    pub oldest_queued: Vec<(String, f64)>,
}

impl Metrics {
    /// Sets the store's gauges to `g` (series no longer present are dropped).
    pub fn set_gauges(&self, g: &Gauges) {
        self.vms.clear();
        for (state, n) in &g.vms {
            self.vms
                .get_or_create(&State {
                    state: state.clone(),
                })
                .set(*n);
        }
        self.hosts.clear();
        for (state, n) in &g.hosts {
            self.hosts
                .get_or_create(&State {
                    state: state.clone(),
                })
                .set(*n);
        }
        self.jobs.clear();
        for (kind, state, n) in &g.jobs {
            self.jobs
                .get_or_create(&Job {
                    kind: kind.clone(),
                    state: state.clone(),
                })
                .set(*n);
        }
        self.job_oldest_queued_seconds.clear();
        for (kind, age) in &g.oldest_queued {
            self.job_oldest_queued_seconds
                .get_or_create(&JobKind { kind: kind.clone() })
                .set(*age);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_names_every_family_with_its_labels() {
        let m = Metrics::new();
        m.vm_operation("create", true, 0.12);
        m.proxied("preview", 502);
        m.object_bytes("write", 10);
        m.set_gauges(&Gauges {
            vms: vec![("running".into(), 3)],
            jobs: vec![("template_build".into(), "queued".into(), 1)],
            ..Default::default()
        });
        let text = m.encode();
        for want in [
            "pandastack_vm_operations_total{op=\"create\",result=\"ok\"} 1",
            "pandastack_vm_operation_seconds_bucket{le=\"0.16\",op=\"create\"} 1",
            "pandastack_proxy_requests_total{kind=\"preview\",class=\"5xx\"} 1",
            "pandastack_object_store_bytes_total{direction=\"write\"} 10",
            "pandastack_vms{state=\"running\"} 3",
            "pandastack_jobs{kind=\"template_build\",state=\"queued\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} not in\n{text}");
        }
        m.set_gauges(&Gauges::default());
        assert!(!m.encode().contains("pandastack_vms{"));
    }
}
