//! `pandastack-guest`: the agent inside every PandaStack VM.
//!
//! As PID 1 it sets up the guest (mounts, hostname, network, orphan reaping) and serves the
//! protocol of `pandastack-guest-proto` on the virtio-serial port named
//! [`pandastack_guest_proto::PORT_NAME`]. Outside a VM, `serve --unix PATH` serves the same
//! services on a unix socket (used by the host-side tests).
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
    command: Option<Cmd>,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Serve the agent protocol outside a VM.
    Serve {
        /// Listen on this unix socket; each connection is one session.
        #[arg(long, conflicts_with = "port")]
        unix: Option<PathBuf>,
        /// Serve on this virtio-serial character device.
        #[arg(long)]
        port: Option<PathBuf>,
    },
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
        .init();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = rt.block_on(async move {
        let state = services::State::new(false);
        match cli.command {
            Some(Cmd::Serve {
                unix: Some(path), ..
            }) => session::serve_unix(&path, state).await,
            Some(Cmd::Serve {
                port: Some(path), ..
            }) => port::serve_port(&path, state).await,
            _ => Err(anyhow::anyhow!(
                "nothing to do: pass `serve --unix PATH` or `serve --port PATH`"
            )),
        }
    });
    if let Err(e) = result {
        eprintln!("pandastack-guest: {e:#}");
        std::process::exit(1);
    }
}
