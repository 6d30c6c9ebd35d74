//! `pandastack-guest`: the agent inside every PandaStack VM.
//!
//! As PID 1 it sets up the guest (mounts, hostname, network, orphan reaping) and serves the
//! protocol of `pandastack-guest-proto` on the virtio-serial port named
//! [`pandastack_guest_proto::PORT_NAME`]. Outside a VM, `serve --unix PATH` serves the same
//! services on a unix socket (used by the host-side tests), and `serve --port PATH` on a given
//! character device.
//!
//! It must not depend on anything host-side, and as PID 1 it must never exit.

mod init;
mod port;
mod reaper;
mod services;
mod session;

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "pandastack-guest", version, about = "PandaStack guest agent")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Serve the agent protocol outside a VM (as PID 1 the agent serves without being asked).
    Serve(Serve),
}

#[derive(Debug, clap::Args)]
#[group(required = true, multiple = false)]
struct Serve {
    /// Listen on this unix socket; each connection is one session.
    #[arg(long, value_name = "PATH")]
    unix: Option<PathBuf>,
    /// Serve on this character device (a virtio-serial port), one session at a time.
    #[arg(long, value_name = "PATH")]
    port: Option<PathBuf>,
}

fn main() {
    if std::process::id() == 1 {
        init::pid1_main();
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PANDASTACK_GUEST_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let result = tokio::runtime::Runtime::new()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            rt.block_on(async move {
                let state = services::State::new(false);
                let Cmd::Serve(serve) = cli.command;
                match (serve.unix, serve.port) {
                    (Some(path), _) => session::serve_unix(&path, state).await,
                    (_, Some(path)) => {
                        port::serve_port(&path, state, || tracing::info!("waiting for a session"))
                            .await
                    }
                    (None, None) => Err(anyhow::anyhow!("pass --unix PATH or --port PATH")),
                }
            })
        });
    if let Err(e) = result {
        eprintln!("pandastack-guest: {e:#}");
        std::process::exit(1);
    }
}
