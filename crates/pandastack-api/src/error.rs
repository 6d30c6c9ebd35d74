//! The one HTTP error path: every failure becomes `{"error":{code,message,request_id}}` with the
//! code's status; internal causes go to the log, not to the client — once, by the request-id
//! middleware, with the request's id, method and path beside the whole cause chain.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use pandastack_api_types::{ErrorBody, ErrorCode, ErrorEnvelope, FieldError};
use pandastack_host::{GuestErrorKind, HostError};
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
    /// What failed inside, for the log only (set by [`ApiError::internal`]).
    cause: Option<InternalCause>,
}

/// The cause of an internal error, carried to the request-id middleware in the response's
/// extensions and logged there once.
#[derive(Debug, Clone)]
pub(crate) struct InternalCause {
    /// What was being done ("database", "build job", ...).
    pub context: String,
    /// The error and its sources, outermost first.
    pub chain: String,
}

impl InternalCause {
    /// Logs the cause, with the request's id and route (`METHOD path`) when known.
    pub(crate) fn log(&self, request_id: &str, route: &str) {
        tracing::error!(
            request_id,
            route,
            error = self.chain.as_str(),
            "{} failed",
            self.context
        );
    }
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
            cause: None,
        }
    }

    pub fn not_found(code: ErrorCode, what: &str, id: &str) -> Self {
        Self::new(code, format!("{what} {id} not found"))
    }

    /// A 500 whose client sees only "`context` failed"; the whole cause chain is logged when
    /// the error is answered (see [`InternalCause`]).
    pub fn internal(context: &str, e: &(dyn std::error::Error + 'static)) -> Self {
        let mut err = Self::new(ErrorCode::Internal, format!("{context} failed"));
        err.cause = Some(InternalCause {
            context: context.to_owned(),
            chain: pandastack_host::error_chain(e),
        });
        err
    }

    /// Logs the internal cause now: for an error that is not answered as an HTTP response (a
    /// stream's error frame or event).
    pub(crate) fn log_cause(&self) {
        if let Some(c) = &self.cause {
            c.log(
                &REQUEST_ID.try_with(|id| id.clone()).unwrap_or_default(),
                "",
            );
        }
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
            e @ StoreError::RateLimited {
                retry_after_secs, ..
            } => {
                let mut err = Self::new(ErrorCode::RateLimited, e.to_string());
                err.retry_after = Some(retry_after_secs);
                err
            }
            e @ StoreError::CountLimit { .. } => {
                Self::new(ErrorCode::LimitReached, format!("{e}; delete some first"))
            }
            e @ StoreError::StorageQuota { .. } => Self::new(
                ErrorCode::QuotaExceeded,
                format!("{e}; delete snapshots, hibernated sandboxes or template versions first"),
            ),
            StoreError::MissingVolume(name) => {
                Self::not_found(ErrorCode::VolumeNotFound, "volume", &name)
            }
            e @ StoreError::VolumeBusy { .. } => Self::new(ErrorCode::VolumeBusy, e.to_string()),
            e @ StoreError::VolumeElsewhere { .. } => Self::new(ErrorCode::Conflict, e.to_string()),
            // The cluster is full (or every host fit for it is draining or down): say why.
            e @ StoreError::NoCapacity { .. } => Self::new(ErrorCode::Unavailable, e.to_string()),
            e => Self::internal("database", &e),
        }
    }
}

impl From<pandastack_control::ControlError> for ApiError {
    fn from(e: pandastack_control::ControlError) -> Self {
        match e {
            pandastack_control::ControlError::Store(e) => e.into(),
            pandastack_control::ControlError::Host(e) => e.into(),
            pandastack_control::ControlError::Template(e) => e.into(),
            pandastack_control::ControlError::SandboxNotFound(id) => {
                Self::not_found(ErrorCode::SandboxNotFound, "sandbox", &id)
            }
            pandastack_control::ControlError::SnapshotNotFound(id) => {
                Self::not_found(ErrorCode::SnapshotNotFound, "snapshot", &id)
            }
            e @ pandastack_control::ControlError::DiskLimit { .. } => {
                Self::new(ErrorCode::InvalidArgument, e.to_string())
            }
            e @ pandastack_control::ControlError::SandboxLost { .. } => {
                Self::new(ErrorCode::SandboxState, e.to_string())
            }
            e @ pandastack_control::ControlError::CannotMove { .. } => {
                Self::new(ErrorCode::Conflict, e.to_string())
            }
            pandastack_control::ControlError::VolumeUnavailable(e) => (*e).into(),
        }
    }
}

impl From<pandastack_control::VolumeError> for ApiError {
    fn from(e: pandastack_control::VolumeError) -> Self {
        use pandastack_control::VolumeError as E;
        match e {
            E::NotFound(name) => Self::not_found(ErrorCode::VolumeNotFound, "volume", &name),
            E::SnapshotNotFound(id) => Self::not_found(ErrorCode::NotFound, "volume snapshot", &id),
            E::BackupNotFound(id) => Self::not_found(ErrorCode::NotFound, "backup", &id),
            e @ E::Exists(_) => Self::new(ErrorCode::Conflict, e.to_string()),
            e @ E::Quota { .. } => Self::new(ErrorCode::QuotaExceeded, e.to_string()),
            e @ E::Busy { .. } => Self::new(ErrorCode::VolumeBusy, e.to_string()),
            e @ E::Shrink { .. } => Self::new(ErrorCode::InvalidArgument, format!("size_gb: {e}")),
            e @ (E::Elsewhere { .. } | E::BackupNotDone(_) | E::Unavailable { .. }) => {
                Self::new(ErrorCode::Conflict, e.to_string())
            }
            E::Store(e) => e.into(),
            E::Host(e) => e.into(),
            e @ E::Objects(_) => Self::internal("object store", &e),
        }
    }
}

impl From<pandastack_control::CodeContextError> for ApiError {
    fn from(e: pandastack_control::CodeContextError) -> Self {
        use pandastack_control::CodeContextError as E;
        match e {
            E::Host(e) => e.into(),
            E::ContextNotFound(ctx) => Self::new(
                ErrorCode::NotFound,
                format!("code context {ctx} not found (create it with POST …/code/contexts)"),
            ),
            e @ E::WrongLanguage(_) => {
                Self::new(ErrorCode::InvalidArgument, format!("language: {e}"))
            }
            E::Kernel(e) => Self::new(
                ErrorCode::InvalidArgument,
                format!("{}: {}", e.name, e.value),
            ),
        }
    }
}

impl From<pandastack_control::TemplateError> for ApiError {
    fn from(e: pandastack_control::TemplateError) -> Self {
        use pandastack_control::TemplateError as E;
        match e {
            E::Store(e) => e.into(),
            E::Host(e) => e.into(),
            E::Io { what, source } => Self::internal(what, &source),
            E::Job(e) => Self::internal("build job", &e),
            E::Task(e) => Self::internal("request task", &e),
            E::Objects(e) => Self::internal("storing the upload in the object store", &e),
            e => Self::new(template_code(&e), e.to_string()),
        }
    }
}

/// The code of a template error answered with its own message.
fn template_code(e: &pandastack_control::TemplateError) -> ErrorCode {
    use pandastack_control::TemplateError as E;
    match e {
        E::NotFound(_) => ErrorCode::TemplateNotFound,
        E::InvalidName(_)
        | E::InvalidDescription
        | E::InvalidShape { .. }
        | E::InvalidSpec(_)
        | E::NameMismatch { .. }
        | E::UploadCut(_)
        | E::EmptyUpload => ErrorCode::InvalidArgument,
        E::CatalogName(_)
        | E::CatalogDelete(_)
        | E::BuildUnderWay(_)
        | E::VersionActive { .. }
        | E::NoReadyVersion { .. }
        | E::ImageGone { .. } => ErrorCode::Conflict,
        E::UploadTooLarge { .. } => ErrorCode::PayloadTooLarge,
        E::NoSpace => ErrorCode::InsufficientStorage,
        E::RebakeFailed(_)
        | E::Io { .. }
        | E::Job(_)
        | E::Task(_)
        | E::Store(_)
        | E::Host(_)
        | E::Objects(_) => ErrorCode::Internal,
    }
}

impl From<HostError> for ApiError {
    fn from(e: HostError) -> Self {
        match &e {
            HostError::SandboxNotFound(id) => {
                Self::not_found(ErrorCode::SandboxNotFound, "sandbox", id)
            }
            HostError::TemplateNotFound(name) => {
                Self::not_found(ErrorCode::TemplateNotFound, "template", name)
            }
            HostError::SnapshotNotFound(id) => {
                Self::not_found(ErrorCode::SnapshotNotFound, "snapshot", id)
            }
            HostError::VolumeNotFound(id) => {
                Self::not_found(ErrorCode::VolumeNotFound, "volume", id)
            }
            HostError::VolumeSnapshotNotFound(id) => {
                Self::not_found(ErrorCode::NotFound, "volume snapshot", id)
            }
            HostError::TooManyVolumes { .. } => {
                Self::new(ErrorCode::InvalidArgument, format!("volumes: {e}"))
            }
            HostError::InvalidState { .. } | HostError::CutOff { .. } => {
                Self::new(ErrorCode::SandboxState, e.to_string())
            }
            HostError::VmExited(_) => Self::new(
                ErrorCode::SandboxState,
                format!("{e}: delete the sandbox (its files and volumes are released)"),
            ),
            HostError::Guest { kind, message } => {
                let code = match kind {
                    GuestErrorKind::NotFound => ErrorCode::NotFound,
                    GuestErrorKind::InvalidArgument | GuestErrorKind::PermissionDenied => {
                        ErrorCode::InvalidArgument
                    }
                    GuestErrorKind::AlreadyExists => ErrorCode::Conflict,
                    GuestErrorKind::NoSpace => ErrorCode::InsufficientStorage,
                    GuestErrorKind::Unavailable => ErrorCode::Unavailable,
                    GuestErrorKind::Other => {
                        tracing::error!(error = message.as_str(), "guest agent");
                        ErrorCode::Internal
                    }
                };
                Self::new(code, format!("guest: {message}"))
            }
            HostError::BuildFailed(m) => Self::new(ErrorCode::InvalidArgument, m.clone()),
            HostError::Unreachable { host, .. } => Self::new(
                ErrorCode::Unavailable,
                format!("host {host} is unreachable: try again later"),
            ),
            HostError::Failed { what, .. } => Self::internal(what, &e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let request_id = REQUEST_ID.try_with(|id| id.clone()).ok();
        let in_request = request_id.is_some();
        if let (Some(cause), false) = (&self.cause, in_request) {
            // Not under the request-id middleware (the proxy, the database front): log here.
            cause.log("", "");
        }
        let request_id = request_id.unwrap_or_default();
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let code = self.code;
        let body = ErrorEnvelope {
            error: ErrorBody {
                code,
                message: self.message,
                request_id,
            },
        };
        let mut resp = (status, Json(body)).into_response();
        resp.extensions_mut().insert(crate::audit::Failed(code));
        if let Some(cause) = self.cause.filter(|_| in_request) {
            resp.extensions_mut().insert(cause);
        }
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::*;

    /// What a subscriber wrote, shared with the test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// An internal error answered through the router is logged once, by the middleware, with
    /// the request's id and route and the whole cause chain; the client sees only its context.
    #[test]
    fn an_internal_cause_is_logged_once_with_its_request() {
        let out = Captured::default();
        let writer = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let body = tracing::subscriber::with_default(subscriber, || {
            rt.block_on(async {
                let router = axum::Router::new()
                    .route(
                        "/v1/boom",
                        axum::routing::get(|| async {
                            let inner = std::io::Error::other("disk on fire");
                            let outer = HostError::Failed {
                                what: "start the VM",
                                source: Box::new(inner),
                            };
                            ApiError::from(outer)
                        }),
                    )
                    .layer(axum::middleware::from_fn(crate::request_id));
                let resp = router
                    .oneshot(
                        Request::get("/v1/boom")
                            .header("x-request-id", "req-test-1")
                            .body(Body::empty())
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
                axum::body::to_bytes(resp.into_body(), 1 << 16)
                    .await
                    .unwrap()
            })
        });
        let body = String::from_utf8_lossy(&body).into_owned();
        assert!(body.contains("start the VM failed"), "{body}");
        assert!(
            !body.contains("disk on fire"),
            "the cause reached the client: {body}"
        );
        let log = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
        assert_eq!(lines.len(), 1, "{log}");
        for part in [
            "req-test-1",
            "GET /v1/boom",
            "disk on fire",
            "start the VM failed",
        ] {
            assert!(lines[0].contains(part), "{part} missing: {log}");
        }
    }
}
