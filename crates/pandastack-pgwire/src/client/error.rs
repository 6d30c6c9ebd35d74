//! Errors of the client: the server's own (`DbError`, after which the session goes on) and
//! the connection's (after which it is unusable).

use std::io;

use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::ErrorFields;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with an `ErrorResponse`. The connection was drained to
    /// `ReadyForQuery` and is still usable (unless the severity was `FATAL`).
    #[error("postgresql error")]
    Db(#[source] Box<DbError>),
    /// Reading or writing the stream failed, or it ended; the client is no longer usable.
    #[error("connection i/o")]
    Io(#[from] io::Error),
    /// A server message could not be decoded; the client is no longer usable.
    #[error("malformed message from the server")]
    Malformed(#[source] io::Error),
    /// The server broke the protocol (unexpected message, oversized message, …); the client
    /// is no longer usable.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// Authentication could not be carried out (missing password, unsupported method, a
    /// server signature that does not verify, …).
    #[error("authentication: {0}")]
    Auth(String),
    /// The result passed [`super::Limits`]; the rest of it was read and dropped, and the client
    /// is still usable. `rows` and `bytes` count the whole result (bytes of row data as sent).
    #[error("result exceeds the limit of {max_rows} rows or {max_bytes} bytes")]
    TooLarge {
        /// Rows the server sent.
        rows: u64,
        /// Bytes of row data the server sent.
        bytes: u64,
        /// The row limit in force.
        max_rows: usize,
        /// The byte limit in force.
        max_bytes: usize,
    },
    /// The request cannot be encoded (a NUL byte in the SQL, more than 65 535 parameters, a
    /// transaction already open, …); nothing was sent.
    #[error("invalid request: {0}")]
    InvalidInput(String),
    /// The isolation level is not one of the four SQL names; nothing was sent.
    #[error("unknown isolation level {0:?}")]
    InvalidIsolation(String),
    /// An earlier i/o or protocol failure left the connection in an unknown state.
    #[error("connection is unusable after an earlier failure")]
    Broken,
}

impl ClientError {
    /// The server error, if this is one.
    pub fn as_db(&self) -> Option<&DbError> {
        match self {
            ClientError::Db(db) => Some(db),
            _ => None,
        }
    }

    /// The SQLSTATE code of a server error.
    pub fn code(&self) -> Option<&str> {
        self.as_db().map(|db| db.code.as_str())
    }
}

/// The fields of a server `ErrorResponse`
/// (<https://www.postgresql.org/docs/current/protocol-error-fields.html>).
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{severity}: {message} (SQLSTATE {code})")]
pub struct DbError {
    /// `ERROR`, `FATAL` or `PANIC` (the non-localized `V` field when the server sends it).
    pub severity: String,
    /// SQLSTATE, e.g. `42601` for a syntax error.
    pub code: String,
    /// Primary message.
    pub message: String,
    /// Secondary message with more detail.
    pub detail: Option<String>,
    /// Suggestion what to do.
    pub hint: Option<String>,
    /// 1-based character position of the error in the query.
    pub position: Option<u32>,
    /// Position in an internally generated query.
    pub internal_position: Option<u32>,
    /// The internally generated query.
    pub internal_query: Option<String>,
    /// Call stack context (`W`).
    pub where_: Option<String>,
    /// Schema of the object concerned.
    pub schema: Option<String>,
    /// Table of the object concerned.
    pub table: Option<String>,
    /// Column concerned.
    pub column: Option<String>,
    /// Data type concerned.
    pub datatype: Option<String>,
    /// Constraint concerned.
    pub constraint: Option<String>,
    /// Server source file.
    pub file: Option<String>,
    /// Server source line.
    pub line: Option<u32>,
    /// Server source routine.
    pub routine: Option<String>,
}

impl DbError {
    /// Reads the fields of an `ErrorResponse` or `NoticeResponse`; unknown field types are
    /// skipped and non-UTF-8 text is replaced, as the protocol asks clients to be lenient.
    pub(crate) fn parse(mut fields: ErrorFields<'_>) -> Result<DbError, ClientError> {
        let mut db = DbError::default();
        let mut localized_severity = None;
        while let Some(field) = fields.next().map_err(ClientError::Malformed)? {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            let number = || value.parse::<u32>().ok();
            match field.type_() {
                b'S' => localized_severity = Some(value),
                b'V' => db.severity = value,
                b'C' => db.code = value,
                b'M' => db.message = value,
                b'D' => db.detail = Some(value),
                b'H' => db.hint = Some(value),
                b'P' => db.position = number(),
                b'p' => db.internal_position = number(),
                b'q' => db.internal_query = Some(value),
                b'W' => db.where_ = Some(value),
                b's' => db.schema = Some(value),
                b't' => db.table = Some(value),
                b'c' => db.column = Some(value),
                b'd' => db.datatype = Some(value),
                b'n' => db.constraint = Some(value),
                b'F' => db.file = Some(value),
                b'L' => db.line = number(),
                b'R' => db.routine = Some(value),
                _ => {}
            }
        }
        if db.severity.is_empty() {
            db.severity = localized_severity.unwrap_or_default();
        }
        Ok(db)
    }
}
