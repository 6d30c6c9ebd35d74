//! File tools: write, read and list files inside a sandbox, and signed URLs for its files.

use base64::Engine as _;
use pandastack_client::Client;
use rmcp::model::{CallToolResult, ContentBlock, Extensions, JsonObject};
use rmcp::{tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{check_id, schema};
use crate::output;
use crate::{PandaStackMcp, ToolError};

/// Bytes of a file read_file returns unless the call asks for another bound.
const DEFAULT_READ_BYTES: usize = 256 << 10;
/// The largest bound read_file takes.
const MAX_READ_BYTES: usize = 4 << 20;
/// Entries list_files returns at most.
const MAX_LIST_ENTRIES: usize = 1000;

/// How file content is written in the arguments or the result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Encoding {
    /// Text, as it is.
    #[default]
    Utf8,
    /// Bytes, base64 (standard alphabet, padded).
    Base64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteFile {
    /// The sandbox.
    sandbox_id: String,
    /// Absolute path of the file in the sandbox; created or replaced (missing parent
    /// directories are an error).
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// The file's new content.
    content: String,
    /// How `content` is written: `utf8` text (default) or `base64` bytes.
    #[serde(default)]
    encoding: Encoding,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadFile {
    /// The sandbox.
    sandbox_id: String,
    /// Absolute path of the file in the sandbox.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// Bytes returned at most (default 262144); a longer file is cut and says so.
    #[serde(default)]
    #[schemars(range(min = 1, max = 4194304))]
    max_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListFiles {
    /// The sandbox.
    sandbox_id: String,
    /// Absolute path of the directory.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// Levels below the directory to list (default 1: its entries only).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10))]
    depth: Option<u32>,
    /// Only entries whose name matches this glob (`*.py`, `test_?.rs`, `[Mm]akefile`): with
    /// depth, a search by name.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1024))]
    pattern: Option<String>,
}

/// What a signed URL lets its holder do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum UrlAccess {
    /// Download the file (`GET`).
    #[default]
    Read,
    /// Upload the file's new content (`PUT`, created or replaced).
    Write,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GetFileUrl {
    /// The sandbox.
    sandbox_id: String,
    /// Absolute path of the file in the sandbox.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// `read` (default: a GET downloads it) or `write` (a PUT uploads it).
    #[serde(default)]
    access: UrlAccess,
    /// Seconds the URL works for (default 3600, at most 604800: 7 days).
    #[serde(default)]
    #[schemars(range(min = 1, max = 604800))]
    expires_in_seconds: Option<u64>,
}

#[tool_router(router = file_tools, vis = "pub(crate)")]
impl PandaStackMcp {
    #[tool(
        description = "Write a file in a sandbox (created or replaced). Content is text unless encoding is base64.",
        input_schema = schema::<WriteFile>(),
        annotations(idempotent_hint = true, open_world_hint = false)
    )]
    async fn write_file(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, write).await
    }

    #[tool(
        description = "Read a file from a sandbox: its text (UTF-8), or base64 when it is not text. Large files are cut at max_bytes and say so.",
        input_schema = schema::<ReadFile>(),
        annotations(read_only_hint = true)
    )]
    async fn read_file(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, read).await
    }

    #[tool(
        description = "List a directory in a sandbox: path, type (file, dir, symlink, other) and size of each entry, depth levels deep; with pattern, only entries whose name matches the glob (find files by name).",
        input_schema = schema::<ListFiles>(),
        annotations(read_only_hint = true)
    )]
    async fn list_files(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, list).await
    }

    #[tool(
        description = "A signed URL to download (read) or upload (write, HTTP PUT) one file of a sandbox without the API key, for a browser, curl or another service; it expires.",
        input_schema = schema::<GetFileUrl>(),
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    async fn get_file_url(&self, ext: Extensions, args: JsonObject) -> CallToolResult {
        self.run(&ext, args, file_url).await
    }
}

/// A guest path: absolute, no NUL (the API checks the rest and names what is wrong).
fn check_path(path: &str) -> Result<(), ToolError> {
    if !path.starts_with('/') {
        return Err(ToolError::InvalidArguments(format!(
            "path: {path:?} is not absolute (start it with /)"
        )));
    }
    if path.contains('\0') {
        return Err(ToolError::InvalidArguments(
            "path: contains a NUL byte".into(),
        ));
    }
    Ok(())
}

async fn write(c: Client, a: WriteFile) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    check_path(&a.path)?;
    let bytes = match a.encoding {
        Encoding::Utf8 => a.content.into_bytes(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(a.content.trim())
            .map_err(|e| ToolError::InvalidArguments(format!("content: not base64 ({e})")))?,
    };
    let n = bytes.len();
    c.write_file(&a.sandbox_id, &a.path, bytes).await?;
    output::json(json!({"path": a.path, "bytes_written": n}))
}

async fn read(c: Client, a: ReadFile) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    check_path(&a.path)?;
    let max = match a.max_bytes {
        None => DEFAULT_READ_BYTES,
        Some(n) if (1..=MAX_READ_BYTES).contains(&n) => n,
        Some(n) => {
            return Err(ToolError::InvalidArguments(format!(
                "max_bytes: {n} is not 1 to {MAX_READ_BYTES}"
            )))
        }
    };
    // The size first: a large file is refused rather than pulled whole into this process.
    let info = c.stat(&a.sandbox_id, &a.path).await?;
    if info.kind != "file" {
        return Err(ToolError::InvalidArguments(format!(
            "path: {} is a {}, not a file (list_files lists a directory)",
            a.path, info.kind
        )));
    }
    if info.size > (MAX_READ_BYTES as u64) * 4 {
        return Err(ToolError::InvalidArguments(format!(
            "path: {} is {} bytes, too large to read whole here; read a part with run_command \
             (head -c, tail -c, sed -n)",
            a.path, info.size
        )));
    }
    let data = c.read_file(&a.sandbox_id, &a.path).await?;
    let total = data.len();
    let kept = &data[..total.min(max)];
    let truncated = total > kept.len();
    // A cut may split a character: text up to the last whole one.
    let (content, encoding) = match std::str::from_utf8(kept) {
        Ok(s) => (s.to_owned(), "utf8"),
        Err(e) if truncated && e.error_len().is_none() => (
            String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned(),
            "utf8",
        ),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(kept),
            "base64",
        ),
    };
    let mut result = output::json(json!({
        "path": a.path,
        "content": content,
        "encoding": encoding,
        "size": total,
        "truncated": truncated,
    }))?;
    if truncated {
        result.content.push(ContentBlock::text(format!(
            "Note: truncated: the first {} of {total} bytes.",
            kept.len()
        )));
    }
    Ok(result)
}

async fn file_url(c: Client, a: GetFileUrl) -> Result<CallToolResult, ToolError> {
    use pandastack_client::types::FileUrlMethod;
    check_id("sandbox_id", &a.sandbox_id)?;
    check_path(&a.path)?;
    let method = match a.access {
        UrlAccess::Read => FileUrlMethod::Get,
        UrlAccess::Write => FileUrlMethod::Put,
    };
    let url = c
        .file_url(
            &a.sandbox_id,
            &a.path,
            method,
            a.expires_in_seconds.unwrap_or(3600),
        )
        .await?;
    output::json(json!({
        "url": url.url,
        "method": url.method,
        "path": url.path,
        "expires_at": url.expires_at,
    }))
}

async fn list(c: Client, a: ListFiles) -> Result<CallToolResult, ToolError> {
    check_id("sandbox_id", &a.sandbox_id)?;
    check_path(&a.path)?;
    let entries = c
        .list_files(&a.sandbox_id, &a.path, a.depth, a.pattern.as_deref())
        .await?;
    let total = entries.len();
    let items: Vec<_> = entries
        .iter()
        .take(MAX_LIST_ENTRIES)
        .map(|f| json!({"path": f.path, "type": f.kind, "size": f.size}))
        .collect();
    let mut result = output::json(json!({
        "path": a.path,
        "entries": items,
        "total": total,
        "truncated": total > MAX_LIST_ENTRIES,
    }))?;
    if total > MAX_LIST_ENTRIES {
        result.content.push(ContentBlock::text(format!(
            "Note: truncated: the first {MAX_LIST_ENTRIES} of {total} entries."
        )));
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_absolute() {
        assert!(check_path("/tmp/a").is_ok());
        assert!(check_path("tmp/a").is_err());
        assert!(check_path("/tmp/\0").is_err());
    }
}
