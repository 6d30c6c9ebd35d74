//! The client's error type: the server's error envelope, unreachable servers, and failures of
//! the transport, of decoding and of local files.

use pandastack_api_types::{ErrorCode, ErrorEnvelope};

/// Everything a call of [`crate::Client`] can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error (the envelope `{"error":{code,message,request_id}}`,
    /// or a bare status when the body was not an envelope).
    #[error("{}", .0.message)]
    Api(ApiError),
    /// The server could not be reached at all (refused, DNS, timeout while connecting).
    #[error("cannot connect to {url}")]
    Connect {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The request failed after the connection was made (reset, timeout, bad response).
    #[error("request failed")]
    Http(#[source] reqwest::Error),
    /// A response or event body was not what the API defines.
    #[error("unexpected response from the server: {what}")]
    Decode {
        what: String,
        #[source]
        source: Option<serde_json::Error>,
    },
    /// The WebSocket of a streaming route failed.
    #[error("websocket failed")]
    WebSocket(#[source] Box<tokio_tungstenite::tungstenite::Error>),
    /// A stream reported an error in one of its events (`error` event or frame).
    #[error("{message}")]
    Stream {
        code: Option<ErrorCode>,
        message: String,
    },
    /// A local file could not be read or written.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The configuration is unusable (bad base URL, unreadable config file).
    #[error("{0}")]
    Config(String),
    /// A wait for something the server does in the background (a volume backup) ran out of
    /// time; the work goes on on the server.
    #[error("{0}")]
    Timeout(String),
}

/// An error answer of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// `error.code`, when the body was an envelope with a known code.
    pub code: Option<ErrorCode>,
    /// `error.code` as sent (also for codes this client does not know).
    pub code_text: String,
    pub message: String,
    /// `error.request_id`, else the `X-Request-Id` header.
    pub request_id: Option<String>,
    /// `Retry-After` in seconds, when sent.
    pub retry_after: Option<u64>,
}

impl Error {
    /// The API error, if this is one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Error::Api(a) => Some(a),
            _ => None,
        }
    }

    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        self.api().map(|a| a.status)
    }

    /// The error code of an API error or a stream error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api(a) => a.code,
            Error::Stream { code, .. } => *code,
            _ => None,
        }
    }

    /// The key was missing, unknown or revoked (401).
    pub fn is_unauthorized(&self) -> bool {
        self.status() == Some(401)
    }

    /// The object does not exist (or belongs to another workspace): 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// The server could not be reached.
    pub fn is_connect(&self) -> bool {
        matches!(self, Error::Connect { .. })
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn decode(what: impl Into<String>, source: Option<serde_json::Error>) -> Self {
        Error::Decode {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn transport(url: &str, e: reqwest::Error) -> Self {
        if e.is_connect() {
            Error::Connect {
                url: url.to_owned(),
                source: Box::new(e),
            }
        } else {
            Error::Http(e)
        }
    }
}

impl From<tokio_tungstenite::tungstenite::Error> for Error {
    fn from(e: tokio_tungstenite::tungstenite::Error) -> Self {
        Error::WebSocket(Box::new(e))
    }
}

/// Reads an error answer: the envelope when the body is one, else the status with the body's
/// first line as the message.
pub(crate) fn api_error(
    status: u16,
    header_request_id: Option<String>,
    retry_after: Option<u64>,
    body: &[u8],
) -> ApiError {
    if let Ok(env) = serde_json::from_slice::<ErrorEnvelope>(body) {
        return ApiError {
            status,
            code: Some(env.error.code),
            code_text: code_text(env.error.code),
            message: env.error.message,
            request_id: Some(env.error.request_id).or(header_request_id),
            retry_after,
        };
    }
    // An envelope with a code this client does not know yet.
    let raw: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        raw.as_ref()
            .and_then(|v| v["error"][name].as_str())
            .map(str::to_owned)
    };
    let text = String::from_utf8_lossy(body);
    let first_line = text.lines().next().unwrap_or("").trim();
    let message = field("message").unwrap_or_else(|| {
        if first_line.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {first_line}")
        }
    });
    ApiError {
        status,
        code: None,
        code_text: field("code").unwrap_or_else(|| format!("http_{status}")),
        message,
        request_id: field("request_id").or(header_request_id),
        retry_after,
    }
}

fn code_text(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_is_mapped() {
        let body = br#"{"error":{"code":"sandbox_not_found","message":"no sandbox sb_x","request_id":"req_1"}}"#;
        let e = api_error(404, Some("hdr".into()), None, body);
        assert_eq!(e.code, Some(ErrorCode::SandboxNotFound));
        assert_eq!(e.code_text, "sandbox_not_found");
        assert_eq!(e.message, "no sandbox sb_x");
        assert_eq!(e.request_id.as_deref(), Some("req_1"));
        let err = Error::Api(e);
        assert!(err.is_not_found());
        assert!(!err.is_unauthorized());
        assert_eq!(err.to_string(), "no sandbox sb_x");
    }

    #[test]
    fn unknown_codes_and_bare_statuses() {
        let body = br#"{"error":{"code":"brand_new","message":"later","request_id":"r"}}"#;
        let e = api_error(418, None, Some(3), body);
        assert_eq!(e.code, None);
        assert_eq!(e.code_text, "brand_new");
        assert_eq!(e.message, "later");
        assert_eq!(e.retry_after, Some(3));
        let e = api_error(502, Some("r2".into()), None, b"Bad Gateway\nmore");
        assert_eq!(e.code_text, "http_502");
        assert_eq!(e.message, "HTTP 502: Bad Gateway");
        assert_eq!(e.request_id.as_deref(), Some("r2"));
        let e = api_error(503, None, None, b"");
        assert_eq!(e.message, "HTTP 503");
    }
}
