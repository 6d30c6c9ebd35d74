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

#[derive(Default)]
struct Statement {
    elapsed_secs: Option<f64>,
    summary: Option<String>,
}

impl Visit for Statement {
    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.elapsed_secs = Some(value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "summary" {
            self.summary = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: Subscriber> Layer<S> for StoreQueryLayer {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "sqlx::query" {
            return;
        }
        let mut v = Statement::default();
        event.record(&mut v);
        if let Some(secs) = v.elapsed_secs {
            crate::metrics().store_query_seconds.observe(secs);
            crate::traces::statement(secs, v.summary.as_deref());
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    use super::*;

    /// A real statement through sqlx, with the layer as the process's subscriber (SQLite runs
    /// its statements on a thread of its own, so a thread's default would not see them), is
    /// timed.
    #[tokio::test]
    async fn every_statement_sqlx_runs_is_timed() {
        let subscriber = tracing_subscriber::registry()
            .with(StoreQueryLayer.with_filter(StoreQueryLayer::filter()));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        let before = count();
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        for _ in 0..3 {
            sqlx::query("SELECT 1").execute(&pool).await.unwrap();
        }
        assert!(count() >= before + 3, "{} → {}", before, count());
    }

    /// How many statements the histogram has seen, from its text.
    fn count() -> u64 {
        crate::metrics()
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix("pandastack_store_query_seconds_count "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
}
