use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Machine-readable error codes (`error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    SandboxNotFound,
    TemplateNotFound,
    SnapshotNotFound,
    VolumeNotFound,
    DatabaseNotFound,
    AppNotFound,
    KeyNotFound,
    HostNotFound,
    NotFound,
    InvalidArgument,
    InvalidJson,
    Unauthorized,
    /// The key is valid but may not call this route: the operator routes (`/v1/hosts`) need an
    /// admin key (`pandastack keys create --admin`).
    Forbidden,
    RateLimited,
    Conflict,
    PayloadTooLarge,
    /// A WebSocket route was called without a WebSocket upgrade.
    UpgradeRequired,
    SandboxState,
    /// The sandbox's disk (or a quota in it) is full.
    InsufficientStorage,
    Internal,
    Unavailable,
    /// The preview proxy reached the sandbox but nothing listens on the port.
    PortNotListening,
    /// The path exists but not with this method (`Allow` lists those it has).
    MethodNotAllowed,
    /// A read-write volume is mounted by another sandbox (the message names it).
    VolumeBusy,
    /// A workspace quota on storage is full: the total size of its volumes, or the host disk
    /// its snapshots, hibernated sandboxes and template builds take.
    QuotaExceeded,
    /// The workspace keeps as many snapshots, hibernated sandboxes or template builds as its
    /// quota allows (the message names which); delete some first. Not retried: it stays until
    /// something is deleted.
    LimitReached,
    /// PostgreSQL refused a query (the message starts with its SQLSTATE).
    QueryFailed,
}

impl ErrorCode {
    /// The HTTP status this code is sent with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::SandboxNotFound
            | ErrorCode::TemplateNotFound
            | ErrorCode::SnapshotNotFound
            | ErrorCode::VolumeNotFound
            | ErrorCode::DatabaseNotFound
            | ErrorCode::AppNotFound
            | ErrorCode::KeyNotFound
            | ErrorCode::HostNotFound
            | ErrorCode::NotFound => 404,
            ErrorCode::InvalidArgument => 422,
            ErrorCode::QueryFailed => 400,
            ErrorCode::InvalidJson => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::RateLimited | ErrorCode::LimitReached => 429,
            ErrorCode::Conflict | ErrorCode::SandboxState | ErrorCode::VolumeBusy => 409,
            ErrorCode::QuotaExceeded => 507,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UpgradeRequired => 426,
            ErrorCode::InsufficientStorage => 507,
            ErrorCode::Internal => 500,
            ErrorCode::Unavailable => 503,
            ErrorCode::PortNotListening => 502,
            ErrorCode::MethodNotAllowed => 405,
        }
    }
}

/// The error envelope of every failed call: `{"error":{"code","message","request_id"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorEnvelope {
    pub error: ErrorBody,
}

/// The body of [`ErrorEnvelope`].
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    pub request_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_with_statuses() {
        let v = serde_json::to_value(ErrorCode::SandboxNotFound).unwrap();
        assert_eq!(v, "sandbox_not_found");
        assert_eq!(ErrorCode::SandboxNotFound.http_status(), 404);
        assert_eq!(ErrorCode::RateLimited.http_status(), 429);
        assert_eq!(ErrorCode::InvalidArgument.http_status(), 422);
        assert_eq!(ErrorCode::Forbidden.http_status(), 403);
        assert_eq!(
            serde_json::to_value(ErrorCode::HostNotFound).unwrap(),
            "host_not_found"
        );
    }
}
