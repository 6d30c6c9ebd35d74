//! The state store's statement latency, from the events sqlx emits for each statement it ran
//! (target `sqlx::query`, field `elapsed_secs`): a tracing layer, so every query of every
//! repository is timed without touching them. Add it to the subscriber with a filter of its own
//! that lets `sqlx::query` at debug through (see [`StoreQueryLayer::filter`]); the log output's
//! filter stays as the operator set it.

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, Layer};

/// Records each statement's `elapsed_secs` in [`crate::Metrics::store_query_seconds`].
#[derive(Debug, Default, Clone, Copy)]
pub struct StoreQueryLayer;

impl StoreQueryLayer {
    /// The events this layer needs: sqlx's statement events, at any level.
    pub fn filter() -> Targets {
        Targets::new().with_target("sqlx::query", tracing::Level::TRACE)
    }
}

struct Elapsed(Option<f64>);

impl Visit for Elapsed {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.0 = Some(value);
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber> Layer<S> for StoreQueryLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let mut v = Elapsed(None);
        event.record(&mut v);
        if let Some(secs) = v.0 {
            crate::metrics().store_query_seconds.observe(secs);
        }
    }
}
