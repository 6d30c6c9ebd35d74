//! `pandastack mcp`: the Model Context Protocol server over standard input and output, for
//! desktop agents (Claude Desktop and any MCP client that starts a server as a subprocess). It
//! calls the API at `--base-url`/`PANDASTACK_BASE_URL` with `--api-key`/`PANDASTACK_API_KEY`
//! (then the config file, as every CLI command). Standard output carries the protocol only;
//! logs go to standard error.

use std::process::ExitCode;

use anyhow::Context;
use pandastack_client::Client;

use super::client_util::ConnArgs;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    conn: ConnArgs,
}

pub async fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    if config.api_key.is_none() {
        // Said before the handshake: a client shows a server's stderr when it fails to start.
        anyhow::bail!(
            "no API key: set PANDASTACK_API_KEY (or pass --api-key, or run `pandastack auth login`)"
        );
    }
    let base_url = config.base_url.clone();
    let client = Client::new(config)?;
    tracing::info!(%base_url, "MCP server on stdio");
    pandastack_mcp::serve_stdio(client)
        .await
        .context("MCP over stdio")?;
    Ok(ExitCode::SUCCESS)
}
