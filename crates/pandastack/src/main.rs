//! `pandastack`: one binary for the server, the host agent and the CLI. This file only parses the
//! command line and dispatches; each subcommand lives in `cmd/`.

mod cmd;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "pandastack",
    version,
    about = "Self-hostable microVM sandboxes for AI agents"
)]
struct Cli {
    /// Export traces over OTLP/HTTP to this collector (`http://host:4318`): a span per API
    /// request with its placement, VM operations, restore steps, guest calls and store
    /// statements. Off unless given.
    #[arg(
        long,
        global = true,
        env = "PANDASTACK_OTLP_ENDPOINT",
        value_name = "URL"
    )]
    otlp_endpoint: Option<String>,
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let service = match &cli.command {
        cmd::Command::Server(_) => "pandastack-server",
        cmd::Command::Agent(_) => "pandastack-agent",
        _ => "pandastack",
    };
    let traces = match init_logging(cli.otlp_endpoint.as_deref(), service) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: --otlp-endpoint: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(cmd::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    };
    if let Some(t) = traces {
        t.shutdown();
    }
    code
}

/// Logs to stderr as `PANDASTACK_LOG` says (events only: spans are for traces), the store's
/// statement latency for `/metrics`, and traces to `otlp` when given.
fn init_logging(
    otlp: Option<&str>,
    service: &'static str,
) -> Result<Option<pandastack_telemetry::Traces>, pandastack_telemetry::TracesError> {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let log = tracing_subscriber::EnvFilter::try_from_env("PANDASTACK_LOG")
        .unwrap_or_else(|_| "info".into())
        .and(tracing_subscriber::filter::filter_fn(|m| m.is_event()));
    let (otel, traces) = match otlp {
        Some(url) => {
            let (layer, traces) = pandastack_telemetry::otlp_layer(url, service)?;
            (Some(layer), Some(traces))
        }
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(log),
        )
        // The store's statement latency (and, with traces on, its statements' spans).
        .with(
            pandastack_telemetry::StoreQueryLayer
                .with_filter(pandastack_telemetry::StoreQueryLayer::filter()),
        )
        .with(otel.map(|l| l.with_filter(tracing_subscriber::filter::LevelFilter::INFO)))
        .init();
    Ok(traces)
}
