//! Platform resource tools: managed PostgreSQL (create, run SQL), apps deployed from git, and
//! function calls.

use std::collections::BTreeMap;

use pandastack_api_types::{
    AppGit, CreateAppRequest, CreateDatabaseRequest, CreateDeployRequest, ErrorCode, QueryRequest,
    UpdateAppRequest,
};
use pandastack_client::Client;
use rmcp::model::{CallToolResult, ContentBlock, Extensions, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::schema;
use crate::output;
use crate::{PandaStackMcp, ToolError};

/// Rows query_database returns at most.
const MAX_ROWS: usize = 500;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateDatabase {
    /// The database's name: a lowercase letter, then lowercase letters, digits or `_`.
    #[schemars(length(min = 1, max = 40), regex(pattern = r"^[a-z][a-z0-9_]*$"))]
    name: String,
    /// PostgreSQL major version (server default when absent).
    #[serde(default)]
    version: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueryDatabase {
    /// The database's id or name.
    #[schemars(length(min = 1))]
    database: String,
    /// One SQL statement; `$1`, `$2`… refer to params.
    #[schemars(length(min = 1))]
    sql: String,
    /// Values of the statement's parameters, in order.
    #[serde(default)]
    params: Vec<serde_json::Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeployApp {
    /// The app's name, also its host name: lowercase letters, digits and `-`, starting with a
    /// letter.
    #[schemars(
        length(min = 1, max = 40),
        regex(pattern = r"^[a-z]([a-z0-9-]*[a-z0-9])?$")
    )]
    name: String,
    /// The git repository: `https://…`, `git://…`, `ssh://…` or `git@host:path`.
    #[schemars(length(min = 1))]
    git_url: String,
    /// Branch, tag or commit (default `main`).
    #[serde(default)]
    git_ref: Option<String>,
    /// Environment of the build and of the running app (replaces the app's when given).
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AppName {
    /// The app's name.
    #[schemars(length(min = 1, max = 40))]
    name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct InvokeFunction {
    /// The function's name.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// The event passed to the handler: any JSON value (default `{}`).
    #[serde(default)]
    event: Option<serde_json::Value>,
}

#[tool_router(router = platform_tools, vis = "pub(crate)")]
impl PandaStackMcp {
    #[tool(
        description = "Create a managed PostgreSQL database (its own microVM, pgvector included). Returns it with connection_uri (postgres://…, TLS) and http_url; use query_database to run SQL over the API.",
        input_schema = schema::<CreateDatabase>()
    )]
    async fn create_database(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, create_database).await
    }

    #[tool(
        description = "Run one SQL statement on a database as its owner. Returns command, row_count, fields and rows (at most 500 rows; more are cut and said). A PostgreSQL error is a tool error with its SQLSTATE.",
        input_schema = schema::<QueryDatabase>()
    )]
    async fn query_database(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, query).await
    }

    #[tool(
        description = "Deploy an app from a git repository: creates the app (framework detected, built in a microVM, served at its URL once healthy) or, if it exists, points it at this repository and ref and deploys again. Returns the app and its deploy; deploys take minutes, follow with get_app.",
        input_schema = schema::<DeployApp>(),
        annotations(open_world_hint = true)
    )]
    async fn deploy_app(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, deploy).await
    }

    #[tool(
        description = "Get an app: its URL, state and live deploy.",
        input_schema = schema::<AppName>(),
        annotations(read_only_hint = true)
    )]
    async fn get_app(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, get_app).await
    }

    #[tool(
        description = "Call a deployed function with a JSON event and wait for it. Returns status (ok, error, timeout), result, error, stdout and stderr; an exception in the handler is status error, not a tool error.",
        input_schema = schema::<InvokeFunction>()
    )]
    async fn invoke_function(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, invoke).await
    }
}

async fn create_database(c: Client, a: CreateDatabase) -> Result<CallToolResult, ToolError> {
    let req = CreateDatabaseRequest {
        name: a.name,
        version: a.version,
        ..Default::default()
    };
    output::json(c.create_database(&req).await?)
}

async fn query(c: Client, a: QueryDatabase) -> Result<CallToolResult, ToolError> {
    let req = QueryRequest {
        sql: a.sql,
        params: a.params,
        timeout_ms: None,
    };
    req.validate()
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
    let mut r = c.query_database(&a.database, &req).await?;
    let total = r.rows.len();
    r.rows.truncate(MAX_ROWS);
    let mut result = output::json(json!({
        "command": r.command,
        "row_count": r.row_count,
        "fields": r.fields,
        "rows": r.rows,
        "truncated": total > MAX_ROWS,
    }))?;
    if total > MAX_ROWS {
        result.content.push(ContentBlock::text(format!(
            "Note: truncated: the first {MAX_ROWS} of {total} rows (add LIMIT/OFFSET for the rest)."
        )));
    }
    Ok(result)
}

async fn deploy(c: Client, a: DeployApp) -> Result<CallToolResult, ToolError> {
    let git = AppGit {
        url: a.git_url,
        git_ref: a.git_ref.clone(),
    };
    match c.get_app(&a.name).await {
        Ok(_) => {
            let update = UpdateAppRequest {
                git: Some(git),
                env: a.env,
                ..Default::default()
            };
            let app = c.update_app(&a.name, &update).await?;
            let deploy = c
                .deploy_app(&a.name, &CreateDeployRequest { git_ref: a.git_ref })
                .await?;
            output::json(json!({"app": app, "deploy": deploy, "created": false}))
        }
        Err(e) if e.code() == Some(ErrorCode::AppNotFound) => {
            let req = CreateAppRequest {
                name: a.name,
                git,
                env: a.env.unwrap_or_default(),
                secrets: BTreeMap::new(),
                build: None,
                start: None,
                root_dir: None,
                memory_mb: None,
                min_instances: None,
                idle_seconds: None,
                health_path: None,
                deploy: Some(true),
                domains: Vec::new(),
            };
            let app = c.create_app(&req).await?;
            output::json(json!({"app": app, "created": true}))
        }
        Err(e) => Err(e.into()),
    }
}

async fn get_app(c: Client, a: AppName) -> Result<CallToolResult, ToolError> {
    output::json(c.get_app(&a.name).await?)
}

async fn invoke(c: Client, a: InvokeFunction) -> Result<CallToolResult, ToolError> {
    let event = a.event.unwrap_or_else(|| json!({}));
    output::json(c.invoke_function(&a.name, &event).await?)
}
