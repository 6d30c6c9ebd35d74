//! PandaStack's Model Context Protocol server: the platform as MCP tools an LLM agent can call
//! (sandboxes, commands, the code interpreter, files, preview URLs, snapshots and forks,
//! databases, apps and functions), built on the maintained Rust SDK (`rmcp`).
//!
//! One handler, [`PandaStackMcp`], serves both transports: [`serve_stdio`] for desktop agents
//! (`pandastack mcp`), and [`http_service`] for the streamable-HTTP transport the server mounts
//! at `/mcp`. Every tool is a thin call through [`pandastack_client::Client`]: this crate speaks
//! the public `/v1` API only and must never reach into the control plane, the store or a host.
//! A failed call is a tool result with `isError` and the API's code and message, never a
//! protocol error, so the model can read it and try again.

mod error;
mod handler;
mod http;
mod output;
mod tools;

pub use error::{ServeError, ToolError};
pub use handler::PandaStackMcp;
pub use http::{bearer_key, http_service, McpHttpService};

use rmcp::ServiceExt;

/// Serves `client` over this process's standard input and output until the peer closes them.
/// Standard output carries the protocol only: log to standard error.
pub async fn serve_stdio(client: pandastack_client::Client) -> Result<(), ServeError> {
    let running = PandaStackMcp::new(client)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| ServeError::Initialize(Box::new(e)))?;
    running.waiting().await.map_err(ServeError::Join)?;
    Ok(())
}
