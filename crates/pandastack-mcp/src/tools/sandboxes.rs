//! Sandbox tools: create, list and kill sandboxes, a port's preview URL, snapshot and fork.

use std::collections::BTreeMap;

use pandastack_api_types::{CreateSandboxRequest, ForkRequest, SandboxState};
use pandastack_client::{Client, ListSandboxes};
use rmcp::model::{CallToolResult, Extensions, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{check_id, schema};
use crate::output;
use crate::{PandaStackMcp, ToolError};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSandbox {
    /// Template to boot: `base` (Python, Node, Go, Bun) unless another is named, e.g. `minimal`
    /// or `code-interpreter`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 40), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    template: Option<String>,
    /// Start from this snapshot (snapshot_sandbox's `id`) instead of a fresh template.
    #[serde(default)]
    #[schemars(length(min = 1, max = 32), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    snapshot_id: Option<String>,
    /// Lifetime in seconds, after which the sandbox is killed (server default when absent).
    #[serde(default)]
    #[schemars(range(min = 1, max = 604800))]
    ttl_seconds: Option<u64>,
    /// Labels to find the sandbox by later.
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    /// Environment variables of every command run in it.
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {
    /// Only sandboxes in this state.
    #[serde(default)]
    state: Option<State>,
    /// At most this many (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    limit: Option<u32>,
    /// `next_cursor` of a previous call, for the next page.
    #[serde(default)]
    cursor: Option<String>,
}

/// A sandbox state, as a filter.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum State {
    Starting,
    Running,
    Paused,
    Hibernated,
    Stopped,
    Failed,
    Lost,
}

impl From<State> for SandboxState {
    fn from(s: State) -> Self {
        match s {
            State::Starting => SandboxState::Starting,
            State::Running => SandboxState::Running,
            State::Paused => SandboxState::Paused,
            State::Hibernated => SandboxState::Hibernated,
            State::Stopped => SandboxState::Stopped,
            State::Failed => SandboxState::Failed,
            State::Lost => SandboxState::Lost,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SandboxId {
    /// The sandbox's id (`id` of create_sandbox's result).
    sandbox_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreviewArgs {
    /// The sandbox's id.
    sandbox_id: String,
    /// The TCP port a server listens on inside the sandbox.
    #[schemars(range(min = 1, max = 65535))]
    port: u32,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkArgs {
    /// The sandbox to fork.
    sandbox_id: String,
    /// How many copies (default 1).
    #[serde(default)]
    #[schemars(range(min = 1, max = 16))]
    count: Option<u32>,
    /// Labels of the children.
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

#[tool_router(router = sandbox_tools, vis = "pub(crate)")]
impl PandaStackMcp {
    #[tool(
        description = "Create a sandbox: a microVM with its own Linux kernel, ready to run commands when this returns. Returns the sandbox object; its `id` is what every other sandbox tool takes.",
        input_schema = schema::<CreateSandbox>(),
        annotations(open_world_hint = false)
    )]
    async fn create_sandbox(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, create).await
    }

    #[tool(
        description = "List your sandboxes (id, template, state, created_at, expires_at, metadata), oldest first; pass next_cursor back as cursor for more.",
        input_schema = schema::<ListArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn list_sandboxes(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, list).await
    }

    #[tool(
        description = "Kill a sandbox: its VM stops and its files are gone (snapshots of it stay).",
        input_schema = schema::<SandboxId>(),
        annotations(destructive_hint = true, idempotent_hint = true)
    )]
    async fn kill_sandbox(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, kill).await
    }

    #[tool(
        description = "Get the preview URL of a port inside a sandbox (a web server listening on it), and the access token a private URL needs (header X-PandaStack-Access-Token).",
        input_schema = schema::<PreviewArgs>(),
        annotations(read_only_hint = true)
    )]
    async fn get_preview_url(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, preview_url).await
    }

    #[tool(
        description = "Snapshot a running sandbox (memory and disk); it keeps running. Returns the snapshot; create_sandbox with its id as snapshot_id starts a sandbox from it.",
        input_schema = schema::<SandboxId>()
    )]
    async fn snapshot_sandbox(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, snapshot).await
    }

    #[tool(
        description = "Fork a sandbox: copy-on-write copies of it as it is now (files, processes, memory), each a new sandbox. Returns the children.",
        input_schema = schema::<ForkArgs>()
    )]
    async fn fork_sandbox(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, fork).await
    }
}

async fn create(c: Client, a: CreateSandbox) -> Result<CallToolResult, ToolError> {
    if let Some(s) = &a.snapshot_id {
        check_id("snapshot_id", s)?;
    }
    let mut req = CreateSandboxRequest {
        snapshot_id: a.snapshot_id,
        ttl_seconds: a.ttl_seconds,
        metadata: a.metadata,
        env: a.env,
        ..Default::default()
    };
    if let Some(t) = a.template {
        req.template = t;
    }
    output::json(c.create_sandbox(&req).await?)
}

async fn list(c: Client, a: ListArgs) -> Result<CallToolResult, ToolError> {
    let q = ListSandboxes {
        state: a.state.map(Into::into),
        limit: Some(a.limit.unwrap_or(50)),
        cursor: a.cursor,
        ..Default::default()
    };
    let page = c.list_sandboxes(&q).await?;
    let items: Vec<_> = page
        .data
        .iter()
        .map(|s| {
            json!({
                "id": s.id, "template": s.template, "state": s.state,
                "created_at": s.created_at, "expires_at": s.expires_at, "metadata": s.metadata,
            })
        })
        .collect();
    output::json(json!({"sandboxes": items, "next_cursor": page.next_cursor}))
}

async fn kill(c: Client, a: SandboxId) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    c.delete_sandbox(&a.sandbox_id).await?;
    output::json(json!({"killed": a.sandbox_id}))
}

async fn preview_url(c: Client, a: PreviewArgs) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    let port = u16::try_from(a.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            ToolError::InvalidArguments(format!("port: {} is not 1 to 65535", a.port))
        })?;
    output::json(c.port_url(&a.sandbox_id, port).await?)
}

async fn snapshot(c: Client, a: SandboxId) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    output::json(c.create_snapshot(&a.sandbox_id).await?)
}

async fn fork(c: Client, a: ForkArgs) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    let req = ForkRequest {
        count: a.count.unwrap_or(1),
        metadata: a.metadata,
        ..Default::default()
    };
    output::json(c.fork(&a.sandbox_id, &req).await?)
}
