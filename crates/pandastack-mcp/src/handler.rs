//! [`PandaStackMcp`]: the MCP server handler. It holds a client of the `/v1` API and the tool
//! router (the tools of every resource module in [`crate::tools`]); which API key a call uses
//! depends on the transport: the handler's own (stdio), or the bearer key of the HTTP request
//! that carried the call (`/mcp`).

use std::future::Future;

use pandastack_client::Client;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    CallToolResult, Extensions, Implementation, JsonObject, ServerCapabilities, ServerConfig,
};
use rmcp::{tool_handler, ServerHandler};
use serde::de::DeserializeOwned;

use crate::ToolError;

/// What the model is told about the server as a whole.
const INSTRUCTIONS: &str = "PandaStack runs code in isolated microVM sandboxes. Create a \
sandbox (create_sandbox), then run shell commands (run_command) or code in a persistent \
interpreter (run_code: variables survive between calls), read and write its files, expose a \
port (get_preview_url), snapshot or fork it, and kill it when done. Sandboxes expire after \
their TTL. Platform resources: PostgreSQL databases (create_database, query_database), apps \
deployed from git (deploy_app, get_app) and functions (invoke_function). A failed call comes \
back as a tool error with the API's code and message.";

/// Where a call's client comes from.
#[derive(Clone)]
enum Clients {
    /// One client, its key fixed (stdio: the key of the process's configuration).
    Fixed(Client),
    /// The server's own API, with the bearer key of each HTTP request.
    PerRequest(Client),
}

/// The MCP server handler (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct PandaStackMcp {
    clients: Clients,
    tool_router: ToolRouter<Self>,
}

impl PandaStackMcp {
    /// A handler whose calls all use `client` (and its key).
    pub fn new(client: Client) -> Self {
        Self::with_clients(Clients::Fixed(client))
    }

    /// A handler for the HTTP transport: each call uses `base` with the bearer key of the HTTP
    /// request that carried it (a call without one is refused).
    pub fn per_request(base: Client) -> Self {
        Self::with_clients(Clients::PerRequest(base))
    }

    fn with_clients(clients: Clients) -> Self {
        Self {
            clients,
            tool_router: Self::sandbox_tools()
                + Self::exec_tools()
                + Self::file_tools()
                + Self::platform_tools(),
        }
    }

    /// Every tool this handler serves, as `tools/list` describes them.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tool_router.list_all()
    }

    /// The client for a call whose request context has `ext`.
    fn client(&self, ext: &Extensions) -> Result<Client, ToolError> {
        match &self.clients {
            Clients::Fixed(c) => Ok(c.clone()),
            Clients::PerRequest(base) => {
                let parts = ext
                    .get::<http::request::Parts>()
                    .ok_or(ToolError::NoApiKey)?;
                let key = crate::bearer_key(&parts.headers).ok_or(ToolError::NoApiKey)?;
                Ok(base.with_api_key(key))
            }
        }
    }

    /// Runs a tool: decodes `args` into `A` (a mismatch is a tool error naming the field),
    /// picks the call's client and hands both to `f`; any failure becomes a tool error result.
    pub(crate) async fn run<A, F, Fut>(
        &self,
        ext: &Extensions,
        args: JsonObject,
        f: F,
    ) -> CallToolResult
    where
        A: DeserializeOwned,
        F: FnOnce(Client, A) -> Fut,
        Fut: Future<Output = Result<CallToolResult, ToolError>>,
    {
        let prepared = serde_json::from_value::<A>(serde_json::Value::Object(args))
            .map_err(|e| ToolError::InvalidArguments(e.to_string()))
            .and_then(|a| Ok((self.client(ext)?, a)));
        let outcome = match prepared {
            Ok((client, a)) => f(client, a).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = &e as &dyn std::error::Error, "tool call failed");
                e.into_result()
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for PandaStackMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("pandastack", env!("CARGO_PKG_VERSION"))
                    .with_title("PandaStack"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}
