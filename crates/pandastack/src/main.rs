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
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> std::process::ExitCode {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let log = tracing_subscriber::EnvFilter::try_from_env("PANDASTACK_LOG")
        .unwrap_or_else(|_| "info".into());
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(log),
        )
        // The store's statement latency for `/metrics`, whatever the log shows.
        .with(
            pandastack_telemetry::StoreQueryLayer
                .with_filter(pandastack_telemetry::StoreQueryLayer::filter()),
        )
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cmd::run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
