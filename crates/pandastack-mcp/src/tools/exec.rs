//! Running things in a sandbox: shell commands (output bounded, what was cut said) and code in
//! the code interpreter's persistent contexts.

use std::collections::BTreeMap;

use pandastack_api_types::{CodeContextRequest, CodeRequest, ExecRequest};
use pandastack_client::Client;
use rmcp::model::{CallToolResult, ContentBlock, Extensions, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{check_id, schema};
use crate::output::{self, cap, Capped};
use crate::{PandaStackMcp, ToolError};

/// Bytes of each output stream a result carries unless the call asks for another bound.
pub(crate) const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 << 10;
/// The largest bound a call may ask for.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1 << 20;
/// A command's time limit unless the call gives one.
const DEFAULT_COMMAND_TIMEOUT_SECONDS: u64 = 60;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunCommand {
    /// The sandbox to run in.
    sandbox_id: String,
    /// A shell command line, run with `/bin/sh -c`.
    #[schemars(length(min = 1))]
    command: String,
    /// Working directory (absolute; default the user's home).
    #[serde(default)]
    cwd: Option<String>,
    /// Extra environment variables.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Text given to the command's standard input.
    #[serde(default)]
    stdin: Option<String>,
    /// Kill the command after this many seconds (default 60).
    #[serde(default)]
    #[schemars(range(min = 1, max = 3600))]
    timeout_seconds: Option<u64>,
    /// Bytes of stdout and of stderr returned, each (default 65536): longer output keeps its
    /// beginning and end and says how much was cut.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    max_output_bytes: Option<usize>,
}

/// A language the code interpreter runs (the server's list:
/// [`pandastack_api_types::CODE_LANGUAGES`]; a test keeps the two the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Language {
    Python,
    Javascript,
    Typescript,
    Bash,
}

impl Language {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
            Language::Bash => "bash",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunCode {
    /// The sandbox to run in.
    sandbox_id: String,
    /// The code. In Python, JavaScript and TypeScript the value of a final expression comes
    /// back as a result; in Bash a non-zero exit status of the last command is an error.
    #[schemars(length(min = 1, max = 524288))]
    code: String,
    /// The language (default python). JavaScript and TypeScript allow top-level await and
    /// import; Bash keeps the working directory, variables and functions.
    #[serde(default)]
    language: Option<Language>,
    /// The context to run in: the language's default context unless one made with
    /// create_code_context is named (its language is then used). Variables, imports and files
    /// opened persist in a context between calls.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    context_id: Option<String>,
    /// Interrupt the run after this many seconds (default 300); the context survives.
    #[serde(default)]
    #[schemars(range(min = 1, max = 3600))]
    timeout_seconds: Option<u64>,
    /// Bytes of stdout and of stderr returned, each (default 65536).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    max_output_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateContext {
    /// The sandbox.
    sandbox_id: String,
    /// The language of the context's kernel (default python).
    #[serde(default)]
    language: Option<Language>,
}

#[tool_router(router = exec_tools, vis = "pub(crate)")]
impl PandaStackMcp {
    #[tool(
        description = "Run a shell command in a sandbox and wait for it. Returns exit_code, stdout, stderr, timed_out and truncated; a non-zero exit is a result, not an error. Output is bounded (max_output_bytes per stream).",
        input_schema = schema::<RunCommand>(),
        annotations(open_world_hint = false)
    )]
    async fn run_command(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, run_command).await
    }

    #[tool(
        description = "Run Python, JavaScript, TypeScript or Bash in a sandbox's persistent interpreter: variables and imports survive between calls in the same context. Returns stdout, stderr, results (the final expression's value, displays; images as image content) and error (an exception in the code, with traceback).",
        input_schema = schema::<RunCode>(),
        annotations(open_world_hint = false)
    )]
    async fn run_code(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, run_code).await
    }

    #[tool(
        description = "Create a fresh code-interpreter context (a kernel with its own variables) in a sandbox; pass its id to run_code as context_id. Without one, run_code uses the sandbox's `default` context.",
        input_schema = schema::<CreateContext>()
    )]
    async fn create_code_context(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, create_context).await
    }
}

/// `max_output_bytes` as asked, checked.
fn output_bound(asked: Option<usize>) -> Result<usize, ToolError> {
    match asked {
        None => Ok(DEFAULT_MAX_OUTPUT_BYTES),
        Some(n) if (1..=MAX_OUTPUT_BYTES).contains(&n) => Ok(n),
        Some(n) => Err(ToolError::InvalidArguments(format!(
            "max_output_bytes: {n} is not 1 to {MAX_OUTPUT_BYTES}"
        ))),
    }
}

/// The sentence saying what was cut of a result's streams; `server_cut` when the server had
/// already cut them at its own limit.
fn truncation_note(streams: &[(&str, &Capped)], server_cut: bool) -> Option<String> {
    let mut parts: Vec<String> = streams
        .iter()
        .filter(|(_, c)| c.truncated)
        .map(|(name, c)| {
            format!(
                "{name} truncated: {} bytes, its beginning and end kept",
                c.total_bytes
            )
        })
        .collect();
    if server_cut {
        parts.push("the server cut the output at its own limit".into());
    }
    (!parts.is_empty()).then(|| format!("Note: {}.", parts.join("; ")))
}

async fn run_command(c: Client, a: RunCommand) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    let max = output_bound(a.max_output_bytes)?;
    if a.command.trim().is_empty() {
        return Err(ToolError::InvalidArguments(
            "command: must not be empty".into(),
        ));
    }
    let req = ExecRequest {
        cmd: Some(a.command),
        env: a.env,
        cwd: a.cwd,
        stdin: a.stdin,
        timeout_seconds: Some(a.timeout_seconds.unwrap_or(DEFAULT_COMMAND_TIMEOUT_SECONDS)),
        ..Default::default()
    };
    let r = c.exec(&a.sandbox_id, &req).await?;
    let (out, err) = (cap(&r.stdout, max), cap(&r.stderr, max));
    let note = truncation_note(&[("stdout", &out), ("stderr", &err)], r.truncated);
    let mut result = output::json(json!({
        "exit_code": r.exit_code,
        "stdout": out.text,
        "stderr": err.text,
        "timed_out": r.timed_out,
        "truncated": out.truncated || err.truncated || r.truncated,
        "duration_ms": r.duration_ms,
    }))?;
    if r.timed_out {
        result.content.push(ContentBlock::text(format!(
            "Note: the command was killed at its time limit ({} s).",
            req.timeout_seconds.unwrap_or_default()
        )));
    }
    if let Some(n) = note {
        result.content.push(ContentBlock::text(n));
    }
    Ok(result)
}

async fn run_code(c: Client, a: RunCode) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    let max = output_bound(a.max_output_bytes)?;
    let req = CodeRequest {
        code: a.code,
        language: a.language.map(|l| l.as_str().to_owned()),
        context_id: a.context_id,
        env: BTreeMap::new(),
        timeout_seconds: a.timeout_seconds,
    };
    req.validate()
        .map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
    let r = c.run_code(&a.sandbox_id, &req).await?;
    let (out, err) = (cap(&r.stdout, max), cap(&r.stderr, max));
    let note = truncation_note(&[("stdout", &out), ("stderr", &err)], r.truncated);
    let mut images = Vec::new();
    let results: Vec<_> = r
        .results
        .iter()
        .map(|o| {
            if let Some(png) = &o.png {
                images.push(ContentBlock::image(png.clone(), "image/png"));
            }
            let mut v = json!({"text": cap(&o.text, max).text});
            if let Some(m) = &o.markdown {
                v["markdown"] = json!(cap(m, max).text);
            }
            if let Some(j) = &o.json {
                v["json"] = j.clone();
            }
            if o.png.is_some() {
                v["image"] = json!("image/png (attached)");
            }
            v
        })
        .collect();
    let mut result = output::json(json!({
        "stdout": out.text,
        "stderr": err.text,
        "results": results,
        "error": r.error,
        "truncated": out.truncated || err.truncated || r.truncated,
        "duration_ms": r.duration_ms,
    }))?;
    if let Some(n) = note {
        result.content.push(ContentBlock::text(n));
    }
    result.content.extend(images);
    Ok(result)
}

async fn create_context(c: Client, a: CreateContext) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    let req = CodeContextRequest {
        language: a.language.map(|l| l.as_str().to_owned()),
        env: BTreeMap::new(),
    };
    output::json(c.create_code_context(&a.sandbox_id, &req).await?)
}

#[cfg(test)]
mod tests {
    use pandastack_api_types::CODE_LANGUAGES;

    use super::*;

    /// The `language` enum of run_code's schema is exactly what the server runs.
    #[test]
    fn languages_are_the_servers() {
        // Every variant, listed through a match so that a new one must be added here.
        let every = [
            Language::Python,
            Language::Javascript,
            Language::Typescript,
            Language::Bash,
        ]
        .map(|l| match l {
            Language::Python | Language::Javascript | Language::Typescript | Language::Bash => {
                l.as_str()
            }
        });
        assert_eq!(every, CODE_LANGUAGES);
        let schema = serde_json::Value::Object((*schema::<RunCode>()).clone());
        let text = schema.to_string();
        for l in CODE_LANGUAGES {
            assert!(text.contains(&format!("\"{l}\"")), "{l} not in {text}");
        }
    }

    #[test]
    fn output_bounds_are_checked() {
        assert_eq!(output_bound(None).unwrap(), DEFAULT_MAX_OUTPUT_BYTES);
        assert_eq!(output_bound(Some(10)).unwrap(), 10);
        assert!(output_bound(Some(0)).is_err());
        assert!(output_bound(Some(MAX_OUTPUT_BYTES + 1)).is_err());
    }

    #[test]
    fn truncation_is_said() {
        let whole = cap("ok", 10);
        let cut = cap(&"x".repeat(100), 10);
        assert_eq!(truncation_note(&[("stdout", &whole)], false), None);
        let n = truncation_note(&[("stdout", &whole), ("stderr", &cut)], false).unwrap();
        assert!(n.contains("stderr truncated: 100 bytes"), "{n}");
        assert!(truncation_note(&[("stdout", &whole)], true)
            .unwrap()
            .contains("server cut"));
    }
}
