//! Traces for operators, off unless an OTLP endpoint is given (`--otlp-endpoint`): every
//! `tracing` span of the process becomes an OpenTelemetry span exported over OTLP/HTTP
//! (protobuf) in batches — one per API request (`GET /v1/sandboxes/{id}` style names), with
//! children for placement, each VM operation, the restore's steps, guest calls and the store's
//! statements ([`crate::StoreQueryLayer`] adds those: sqlx times a statement but opens no span,
//! so a finished statement becomes a span of its own, placed in time and under the span it ran
//! in). The batch processor runs on a thread of its own; a collector that is down costs
//! dropped spans, never a request.

use std::time::SystemTime;

use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("OTLP endpoint {0:?}: an http:// or https:// URL is needed")]
    Endpoint(String),
    #[error("OTLP exporter")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The process's trace pipeline; [`Traces::shutdown`] flushes what is still batched.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Exports the spans still batched and stops the exporter.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("traces: flush at exit: {e}");
        }
    }
}

static TRACER: std::sync::OnceLock<SdkTracer> = std::sync::OnceLock::new();

/// `endpoint` as the traces URL: a bare `http://host:port` gets OTLP's `/v1/traces`.
fn traces_url(endpoint: &str) -> Result<String, TracesError> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .ok_or_else(|| TracesError::Endpoint(endpoint.to_owned()))?;
    if rest.is_empty() {
        return Err(TracesError::Endpoint(endpoint.to_owned()));
    }
    Ok(match rest.find('/') {
        Some(i) if i + 1 < rest.len() => endpoint.to_owned(),
        _ => format!("{}/v1/traces", endpoint.trim_end_matches('/')),
    })
}

/// A layer exporting the process's spans to `endpoint` as service `service`, and the pipeline
/// to shut down at exit.
pub fn otlp_layer<S>(
    endpoint: &str,
    service: &'static str,
) -> Result<(OpenTelemetryLayer<S, SdkTracer>, Traces), TracesError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(traces_url(endpoint)?)
        .with_timeout(std::time::Duration::from_secs(5))
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name(service).build())
        .build();
    let tracer = provider.tracer("pandastack");
    let _ = TRACER.set(tracer.clone());
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_tracked_inactivity(false);
    Ok((layer, Traces { provider }))
}

/// Records a finished store statement as a span under the span it ran in, when traces are on
/// and it ran inside one.
pub(crate) fn statement(elapsed_secs: f64, summary: Option<&str>) {
    let Some(tracer) = TRACER.get() else { return };
    let cx = opentelemetry::Context::current();
    if !cx.span().span_context().is_valid() {
        return;
    }
    let end = SystemTime::now();
    let start = end
        .checked_sub(std::time::Duration::from_secs_f64(elapsed_secs.max(0.0)))
        .unwrap_or(end);
    let mut attrs = vec![KeyValue::new("db.system.name", "sql")];
    if let Some(s) = summary {
        attrs.push(KeyValue::new("db.query.summary", s.to_owned()));
    }
    let span = tracer
        .span_builder("store.query")
        .with_kind(SpanKind::Client)
        .with_start_time(start)
        .with_end_time(end)
        .with_attributes(attrs)
        .start_with_context(tracer, &cx);
    drop(span);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_becomes_the_traces_url() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/").unwrap(),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c/otlp/v1/traces").unwrap(),
            "https://c/otlp/v1/traces"
        );
        assert!(traces_url("c:4318").is_err());
        assert!(traces_url("http://").is_err());
    }
}
