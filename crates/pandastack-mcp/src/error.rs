//! Errors: [`ToolError`], what a tool call can fail with (turned into an MCP tool result with
//! `isError`, never a protocol error), and [`ServeError`], a transport that could not run.

use pandastack_client::Error as ClientError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's input schema, or a value is out of range.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The API call failed: an error answer of the server (its code and message), or a server
    /// that could not be reached.
    #[error("the PandaStack API call failed")]
    Api(#[source] ClientError),
    /// A request over HTTP without a bearer API key reached a tool (the listener is expected to
    /// refuse those before any MCP handling).
    #[error("no API key: send Authorization: Bearer pds_…")]
    NoApiKey,
    /// A result could not be encoded as JSON.
    #[error("cannot encode the result")]
    Encode(#[source] serde_json::Error),
}

impl From<ClientError> for ToolError {
    fn from(e: ClientError) -> Self {
        ToolError::Api(e)
    }
}

impl ToolError {
    /// The tool result the model sees: `isError`, a line of text with the API's code, message
    /// and request id, and the same as structured content
    /// `{"error": {code, message, status?, request_id?}}`.
    pub fn into_result(self) -> CallToolResult {
        let (code, message, status, request_id) = match &self {
            ToolError::Api(ClientError::Api(a)) => (
                a.code_text.clone(),
                a.message.clone(),
                Some(a.status),
                a.request_id.clone(),
            ),
            ToolError::Api(e) => (client_code(e).into(), chain(e), None, None),
            ToolError::InvalidArguments(m) => ("invalid_argument".into(), m.clone(), None, None),
            ToolError::NoApiKey => ("unauthorized".into(), self.to_string(), None, None),
            ToolError::Encode(_) => ("internal".into(), chain(&self), None, None),
        };
        let mut text = format!("error {code}: {message}");
        if let Some(s) = status {
            text.push_str(&format!(" (HTTP {s}"));
            if let Some(r) = &request_id {
                text.push_str(&format!(", request id {r}"));
            }
            text.push(')');
        }
        let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "error": {"code": code, "message": message, "status": status, "request_id": request_id}
        }));
        result
    }
}

/// A code for client errors that are not answers of the server.
fn client_code(e: &ClientError) -> &'static str {
    match e {
        ClientError::Connect { .. } => "unreachable",
        ClientError::Stream { .. } => "stream_error",
        ClientError::Timeout(_) => "timeout",
        ClientError::Config(_) => "config",
        _ => "request_failed",
    }
}

/// `e` and its causes, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// A transport that could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The MCP handshake (`initialize`) failed.
    #[error("the MCP session did not start")]
    Initialize(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The task serving the session failed.
    #[error("the MCP session ended abnormally")]
    Join(#[source] tokio::task::JoinError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_code_message_and_request_id() {
        let e = ToolError::Api(ClientError::Api(pandastack_client::ApiError {
            status: 404,
            code: None,
            code_text: "sandbox_not_found".into(),
            message: "no sandbox sb_x".into(),
            request_id: Some("req_1".into()),
            retry_after: None,
        }));
        let r = e.into_result();
        assert_eq!(r.is_error, Some(true));
        let text = match &r.content[0] {
            ContentBlock::Text(t) => t.text.clone(),
            other => panic!("not text: {other:?}"),
        };
        assert_eq!(
            text,
            "error sandbox_not_found: no sandbox sb_x (HTTP 404, request id req_1)"
        );
        let s = r.structured_content.unwrap();
        assert_eq!(s["error"]["code"], "sandbox_not_found");
        assert_eq!(s["error"]["status"], 404);
    }

    #[test]
    fn argument_errors_are_tool_errors() {
        let r = ToolError::InvalidArguments("port: must be 1 to 65535".into()).into_result();
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.structured_content.unwrap()["error"]["code"],
            "invalid_argument"
        );
    }
}
