//! The one HTTP error path: every failure becomes `{"error":{code,message,request_id}}` with the
//! code's status; internal causes go to the log, not to the client.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_agent::AgentError;
use pandastack_api_types::{ErrorBody, ErrorCode, ErrorEnvelope, FieldError};
use pandastack_store::StoreError;

tokio::task_local! {
    /// The current request's id (set by the request-id middleware).
    pub static REQUEST_ID: String;
}

/// An error answered to the client.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn not_found(code: ErrorCode, what: &str, id: &str) -> Self {
        Self::new(code, format!("{what} {id} not found"))
    }

    pub fn internal(context: &str, e: &(dyn std::error::Error + 'static)) -> Self {
        let chain = pandastack_agent::error_chain(e);
        tracing::error!(error = %chain, "{context}");
        Self::new(ErrorCode::Internal, format!("{context} failed"))
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        Self::new(ErrorCode::InvalidArgument, e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::new(ErrorCode::NotFound, "not found"),
            StoreError::Conflict => Self::new(ErrorCode::Conflict, "already exists"),
            StoreError::LimitReached { limit } => {
                let mut e = Self::new(
                    ErrorCode::RateLimited,
                    format!(
                        "workspace limit of {limit} running sandboxes reached; delete or hibernate one"
                    ),
                );
                e.retry_after = Some(5);
                e
            }
            e => Self::internal("database", &e),
        }
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        match &e {
            AgentError::SandboxNotFound(id) => {
                Self::not_found(ErrorCode::SandboxNotFound, "sandbox", id)
            }
            AgentError::TemplateNotFound(name) => {
                Self::not_found(ErrorCode::TemplateNotFound, "template", name)
            }
            AgentError::InvalidState { .. } => Self::new(ErrorCode::SandboxState, e.to_string()),
            AgentError::Snapshot(pandastack_runtime::SnapshotError::NotFound(id)) => {
                Self::not_found(ErrorCode::SnapshotNotFound, "snapshot", id)
            }
            _ => Self::internal("sandbox operation", &e),
        }
    }
}

impl From<tonic::Status> for ApiError {
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        let code = match s.code() {
            Code::NotFound => ErrorCode::NotFound,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                ErrorCode::InvalidArgument
            }
            Code::AlreadyExists => ErrorCode::Conflict,
            Code::ResourceExhausted => ErrorCode::InsufficientStorage,
            Code::PermissionDenied => ErrorCode::InvalidArgument,
            Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded => ErrorCode::Unavailable,
            _ => {
                tracing::error!(status = ?s, "guest agent");
                ErrorCode::Internal
            }
        };
        Self::new(code, format!("guest: {}", s.message()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = REQUEST_ID.try_with(|id| id.clone()).unwrap_or_default();
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorEnvelope {
            error: ErrorBody {
                code: self.code,
                message: self.message,
                request_id,
            },
        };
        let mut resp = (status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                resp.headers_mut().insert("retry-after", v);
            }
        }
        if self.code == ErrorCode::PayloadTooLarge {
            // The rest of the oversized body is never read, so this connection cannot carry
            // another request: say so, or a keep-alive client reuses it and fails its next call.
            resp.headers_mut().insert(
                axum::http::header::CONNECTION,
                HeaderValue::from_static("close"),
            );
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
