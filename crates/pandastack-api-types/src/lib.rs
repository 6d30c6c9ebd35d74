//! The `/v1` wire types of the PandaStack API: request bodies (strict: unknown fields are
//! rejected, `validate` names the offending field), resource objects, the error envelope with its
//! codes and HTTP statuses, and opaque list cursors. Shared by the server, the Rust client and
//! the tests. It must not depend on an HTTP framework or a runtime.

mod app;
mod code;
mod cursor;
mod database;
mod error;
mod event;
mod function;
mod host;
mod metrics;
mod ports;
mod sandbox;
mod schedule;
mod scope;
mod stream;
mod team;
mod usage;
mod volume;

pub use app::*;
pub use code::*;
pub use cursor::{Cursor, CursorError};
pub use database::*;
pub use error::{ErrorBody, ErrorCode, ErrorEnvelope};
pub use event::*;
pub use function::*;
pub use host::*;
pub use metrics::*;
pub use ports::*;
pub use sandbox::*;
pub use schedule::*;
pub use scope::*;
pub use stream::*;
pub use team::*;
pub use usage::*;
pub use volume::*;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A page of a list: `{"data":[…],"next_cursor":null|"…"}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct List<T> {
    pub data: Vec<T>,
    pub next_cursor: Option<String>,
}

/// A request field that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

pub(crate) fn field_error(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}
