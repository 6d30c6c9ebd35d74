//! A minimal PostgreSQL client over any byte stream, for the HTTP query broker.
//!
//! One call runs one statement in the extended protocol, pipelined in a single write:
//!
//! ```text
//! Parse(unnamed, no parameter types) Bind(text params, text results) Describe(portal)
//! Execute(no row limit) Sync  ──►  ParseComplete BindComplete RowDescription|NoData
//!                                  DataRow* CommandComplete|EmptyQueryResponse  ReadyForQuery
//! ```
//!
//! Every call reads up to `ReadyForQuery`, whatever happened on the way (a server error, a
//! result over the [`Limits`]), so the session stays usable; only i/o and protocol failures
//! leave it [`ClientError::Broken`]. Rows past a limit are read and dropped without being
//! held in memory.

mod auth;
mod conn;
mod error;

use std::collections::BTreeMap;
use std::fmt;

use bytes::BufMut;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::backend::{DataRowBody, Message, RowDescriptionBody};
use postgres_protocol::message::frontend;
use postgres_protocol::IsNull;
use tokio::io::{AsyncRead, AsyncWrite};

use conn::Conn;
pub use conn::MAX_MESSAGE;
pub use error::{ClientError, DbError};

/// How to log in.
#[derive(Clone, Default)]
pub struct ConnectOptions {
    /// Role name.
    pub user: String,
    /// Password, for SCRAM-SHA-256, MD5 or cleartext (not needed for trust).
    pub password: Option<String>,
    /// Database; the server defaults it to the user name.
    pub database: Option<String>,
    /// Server command-line options, e.g. `-c statement_timeout=5000`.
    pub options: Option<String>,
    /// Shown in `pg_stat_activity`.
    pub application_name: Option<String>,
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("database", &self.database)
            .field("options", &self.options)
            .field("application_name", &self.application_name)
            .finish()
    }
}

/// Bounds on what one call collects (for a transaction: all of its statements together).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Rows.
    pub max_rows: usize,
    /// Bytes of row data as the server sent it (text values and their length words).
    pub max_bytes: usize,
}

impl Default for Limits {
    /// 100 000 rows, 10 MiB (Neon's default response cap).
    fn default() -> Limits {
        Limits {
            max_rows: 100_000,
            max_bytes: 10 << 20,
        }
    }
}

/// A result column, from `RowDescription`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Column name (or alias).
    pub name: String,
    /// OID of the table the column comes from, 0 if none.
    pub table_id: u32,
    /// Attribute number in that table, 0 if none.
    pub column_id: i16,
    /// OID of the column's type.
    pub data_type_id: u32,
    /// `pg_type.typlen`: negative for variable length.
    pub data_type_size: i16,
    /// `pg_attribute.atttypmod`, -1 if none.
    pub data_type_modifier: i32,
    /// 0 text, 1 binary (always 0 here: results are asked for as text).
    pub format: i16,
}

/// The result of one statement: values in PostgreSQL's text format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryResult {
    /// The command tag's verb: `SELECT`, `INSERT`, `CREATE`, … (empty for an empty query).
    pub command: String,
    /// Rows affected or returned, when the tag says (`INSERT 0 5` → 5, `CREATE TABLE` → none).
    pub row_count: Option<u64>,
    /// Columns; empty for a statement that returns no rows.
    pub fields: Vec<Field>,
    /// Rows; `None` is SQL NULL.
    pub rows: Vec<Vec<Option<String>>>,
}

/// The session's transaction state, from the last `ReadyForQuery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    /// Not in a transaction block.
    Idle,
    /// In a transaction block.
    InTransaction,
    /// In a failed transaction block (statements are refused until it ends).
    Failed,
}

/// A logged-in session.
pub struct Client<S> {
    conn: Conn<S>,
    parameters: BTreeMap<String, String>,
    backend_key: Option<(i32, i32)>,
    status: TransactionStatus,
}

impl<S> fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("parameters", &self.parameters)
            .field("backend_key", &self.backend_key)
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// Logs in on a stream whose `StartupMessage` the caller has already sent (a front relaying
/// a client's own startup): answers the server's authentication request with `password`
/// (SCRAM-SHA-256, MD5 or cleartext, as it asks) up to `AuthenticationOk`, which is consumed.
/// Returns the stream and the bytes already read past that message (the server's
/// `ParameterStatus`, `BackendKeyData`, … that came in the same read), which belong to
/// whoever reads the stream next. A refusal (wrong password: `28P01`) is
/// [`ClientError::Db`].
pub async fn login<S>(
    stream: S,
    user: &str,
    password: &str,
) -> Result<(S, bytes::Bytes), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let opts = ConnectOptions {
        user: user.to_owned(),
        password: Some(password.to_owned()),
        ..Default::default()
    };
    let mut conn = Conn::new(stream);
    auth::authenticate(&mut conn, &opts).await?;
    let (stream, rest) = conn.into_parts();
    Ok((stream, rest.freeze()))
}

/// Row and byte counts of a call so far.
#[derive(Debug, Default)]
struct Usage {
    rows: u64,
    bytes: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Client<S> {
    /// Sends the `StartupMessage` (with `client_encoding=UTF8`), authenticates and waits for
    /// the first `ReadyForQuery`.
    pub async fn connect(stream: S, opts: &ConnectOptions) -> Result<Client<S>, ClientError> {
        let mut params: Vec<(&str, &str)> = vec![("user", &opts.user)];
        if let Some(database) = &opts.database {
            params.push(("database", database));
        }
        if let Some(options) = &opts.options {
            params.push(("options", options));
        }
        if let Some(name) = &opts.application_name {
            params.push(("application_name", name));
        }
        params.push(("client_encoding", "UTF8"));

        let mut client = Client {
            conn: Conn::new(stream),
            parameters: BTreeMap::new(),
            backend_key: None,
            status: TransactionStatus::Idle,
        };
        frontend::startup_message(params, &mut client.conn.wbuf)
            .map_err(|e| ClientError::InvalidInput(format!("startup parameters: {e}")))?;
        client.conn.flush().await?;
        auth::authenticate(&mut client.conn, opts).await?;
        loop {
            match client.conn.message().await? {
                Message::ParameterStatus(body) => {
                    let name = body.name().map_err(ClientError::Malformed)?;
                    let value = body.value().map_err(ClientError::Malformed)?;
                    client.parameters.insert(name.to_owned(), value.to_owned());
                }
                Message::BackendKeyData(body) => {
                    client.backend_key = Some((body.process_id(), body.secret_key()));
                }
                Message::NoticeResponse(body) => log_notice(body.fields()),
                Message::ErrorResponse(body) => {
                    return Err(ClientError::Db(Box::new(DbError::parse(body.fields())?)))
                }
                Message::ReadyForQuery(body) => {
                    client.status = transaction_status(body.status())?;
                    return Ok(client);
                }
                _ => {
                    return Err(ClientError::Protocol(
                        "unexpected message before ReadyForQuery".into(),
                    ))
                }
            }
        }
    }

    /// A run-time parameter the server reported (`server_version`, `TimeZone`, …).
    pub fn parameter(&self, name: &str) -> Option<&str> {
        self.parameters.get(name).map(String::as_str)
    }

    /// All parameters the server reported.
    pub fn parameters(&self) -> &BTreeMap<String, String> {
        &self.parameters
    }

    /// `(process id, secret key)` from `BackendKeyData`, for a cancel request.
    pub fn backend_key(&self) -> Option<(i32, i32)> {
        self.backend_key
    }

    /// The transaction state after the last call.
    pub fn transaction_status(&self) -> TransactionStatus {
        self.status
    }

    /// `false` once an i/o or protocol failure made the session unusable.
    pub fn is_usable(&self) -> bool {
        !self.conn.is_broken()
    }

    /// Runs one statement with `$1…` parameters in text format (`None` is NULL); the server
    /// infers their types. Several statements in `sql` are refused by the server.
    pub async fn query(
        &mut self,
        sql: &str,
        params: &[Option<String>],
        limits: &Limits,
    ) -> Result<QueryResult, ClientError> {
        self.run(sql, params, limits, &mut Usage::default()).await
    }

    /// Runs the statements in one transaction (`BEGIN [ISOLATION LEVEL …] [READ ONLY]` …
    /// `COMMIT`), rolling back at the first error, which is returned. `isolation` is one of
    /// the four SQL levels, spelled `repeatable read`, `RepeatableRead` or `REPEATABLE_READ`.
    /// `limits` cover all statements together.
    pub async fn transaction(
        &mut self,
        queries: &[(String, Vec<Option<String>>)],
        isolation: Option<&str>,
        read_only: bool,
        limits: &Limits,
    ) -> Result<Vec<QueryResult>, ClientError> {
        let mut begin = String::from("BEGIN");
        if let Some(name) = isolation {
            let level =
                isolation_level(name).ok_or_else(|| ClientError::InvalidIsolation(name.into()))?;
            begin.push_str(" ISOLATION LEVEL ");
            begin.push_str(level);
        }
        if read_only {
            begin.push_str(" READ ONLY");
        }
        if self.status != TransactionStatus::Idle {
            return Err(ClientError::InvalidInput(
                "a transaction is already open on this connection".into(),
            ));
        }
        let control = Limits::default();
        self.query(&begin, &[], &control).await?;

        let mut usage = Usage::default();
        let mut results = Vec::with_capacity(queries.len());
        for (sql, params) in queries {
            match self.run(sql, params, limits, &mut usage).await {
                Ok(result) => results.push(result),
                Err(error) => {
                    if self.is_usable() {
                        if let Err(rollback) = self.query("ROLLBACK", &[], &control).await {
                            tracing::warn!(
                                error = &rollback as &dyn std::error::Error,
                                "rollback after a failed statement"
                            );
                        }
                    }
                    return Err(error);
                }
            }
        }
        let commit = self.query("COMMIT", &[], &control).await?;
        // COMMIT of a transaction that failed answers ROLLBACK; not reachable as statements
        // stop at the first error, but never report such a transaction as committed.
        if commit.command != "COMMIT" {
            return Err(ClientError::Protocol(format!(
                "COMMIT answered {:?}",
                commit.command
            )));
        }
        Ok(results)
    }

    /// Sends `Terminate` and shuts the stream down.
    pub async fn close(mut self) -> Result<(), ClientError> {
        if !self.conn.is_broken() {
            frontend::terminate(&mut self.conn.wbuf);
            self.conn.flush().await?;
        }
        self.conn.shutdown().await
    }

    /// The stream, e.g. to drop it without `Terminate`.
    pub fn into_inner(self) -> S {
        self.conn.into_inner()
    }

    async fn run(
        &mut self,
        sql: &str,
        params: &[Option<String>],
        limits: &Limits,
        usage: &mut Usage,
    ) -> Result<QueryResult, ClientError> {
        if self.conn.is_broken() {
            return Err(ClientError::Broken);
        }
        if let Err(error) = encode_statement(&mut self.conn.wbuf, sql, params) {
            self.conn.wbuf.clear();
            return Err(error);
        }
        self.conn.flush().await?;
        match self.collect(limits, usage).await {
            Ok(drained) => drained,
            Err(error) => {
                // Stopped before ReadyForQuery: the stream is not at a message boundary.
                self.conn.mark_broken();
                Err(error)
            }
        }
    }

    /// Reads the answer to one pipelined statement up to `ReadyForQuery`. The outer error
    /// means the answer could not be read to its end; the inner result is the statement's.
    async fn collect(
        &mut self,
        limits: &Limits,
        usage: &mut Usage,
    ) -> Result<Result<QueryResult, ClientError>, ClientError> {
        let mut result = QueryResult::default();
        let mut db_error = None;
        let mut decode_error = None;
        let mut over_limit = false;
        loop {
            let header = self.conn.header().await?;
            if header.tag == b'D' || header.tag == b'd' {
                let row_bytes = header.body as u64;
                let fits = usage.rows < limits.max_rows as u64
                    && usage.bytes.saturating_add(row_bytes) <= limits.max_bytes as u64;
                if header.tag == b'd' || over_limit || !fits {
                    // COPY data, or a row past a limit: read past it without holding it.
                    self.conn.skip().await?;
                    if header.tag == b'D' {
                        over_limit = true;
                        usage.rows += 1;
                        usage.bytes += row_bytes;
                    }
                    continue;
                }
            }
            match self.conn.message().await? {
                Message::ParseComplete
                | Message::BindComplete
                | Message::NoData
                | Message::CloseComplete
                | Message::PortalSuspended
                | Message::CopyDone
                | Message::CopyOutResponse(_)
                | Message::NotificationResponse(_) => {}
                Message::RowDescription(body) => result.fields = fields(&body)?,
                Message::DataRow(body) => {
                    usage.rows += 1;
                    usage.bytes += header.body as u64;
                    match row(&body, result.fields.len()) {
                        Ok(values) => result.rows.push(values),
                        Err(error) => {
                            decode_error.get_or_insert(error);
                        }
                    }
                }
                Message::CommandComplete(body) => {
                    let tag = body.tag().map_err(ClientError::Malformed)?;
                    (result.command, result.row_count) = parse_command_tag(tag);
                }
                Message::EmptyQueryResponse => result.command.clear(),
                Message::CopyInResponse(_) => {
                    // The Sync already sent was swallowed by copy-in mode: fail the copy
                    // and sync again.
                    frontend::copy_fail("COPY FROM STDIN is not supported", &mut self.conn.wbuf)
                        .map_err(ClientError::Io)?;
                    frontend::sync(&mut self.conn.wbuf);
                    self.conn.flush().await?;
                }
                Message::ErrorResponse(body) => {
                    let error = DbError::parse(body.fields())?;
                    db_error.get_or_insert(error);
                }
                Message::NoticeResponse(body) => log_notice(body.fields()),
                Message::ParameterStatus(body) => {
                    let name = body.name().map_err(ClientError::Malformed)?;
                    let value = body.value().map_err(ClientError::Malformed)?;
                    self.parameters.insert(name.to_owned(), value.to_owned());
                }
                Message::ReadyForQuery(body) => {
                    self.status = transaction_status(body.status())?;
                    break;
                }
                _ => {
                    return Err(ClientError::Protocol(
                        "unexpected message in a query response".into(),
                    ))
                }
            }
        }
        if let Some(db) = db_error {
            return Ok(Err(ClientError::Db(Box::new(db))));
        }
        if over_limit {
            return Ok(Err(ClientError::TooLarge {
                rows: usage.rows,
                bytes: usage.bytes,
                max_rows: limits.max_rows,
                max_bytes: limits.max_bytes,
            }));
        }
        Ok(match decode_error {
            Some(error) => Err(error),
            None => Ok(result),
        })
    }
}

fn encode_statement(
    buf: &mut bytes::BytesMut,
    sql: &str,
    params: &[Option<String>],
) -> Result<(), ClientError> {
    if params.len() > usize::from(u16::MAX) {
        return Err(ClientError::InvalidInput(format!(
            "{} parameters (at most {})",
            params.len(),
            u16::MAX
        )));
    }
    frontend::parse("", sql, std::iter::empty(), buf)
        .map_err(|e| ClientError::InvalidInput(format!("statement: {e}")))?;
    frontend::bind(
        "",
        "",
        std::iter::empty(),
        params,
        |value, buf| match value {
            Some(text) => {
                buf.put_slice(text.as_bytes());
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        },
        std::iter::empty(),
        buf,
    )
    .map_err(|e| match e {
        frontend::BindError::Conversion(e) => ClientError::InvalidInput(format!("parameter: {e}")),
        frontend::BindError::Serialization(e) => {
            ClientError::InvalidInput(format!("parameters: {e}"))
        }
    })?;
    frontend::describe(b'P', "", buf).map_err(ClientError::Io)?;
    frontend::execute("", 0, buf).map_err(ClientError::Io)?;
    frontend::sync(buf);
    Ok(())
}

fn fields(body: &RowDescriptionBody) -> Result<Vec<Field>, ClientError> {
    let mut out = Vec::new();
    let mut fields = body.fields();
    while let Some(field) = fields.next().map_err(ClientError::Malformed)? {
        out.push(Field {
            name: field.name().to_owned(),
            table_id: field.table_oid(),
            column_id: field.column_id(),
            data_type_id: field.type_oid(),
            data_type_size: field.type_size(),
            data_type_modifier: field.type_modifier(),
            format: field.format(),
        });
    }
    Ok(out)
}

/// A row's values as text. A malformed row is reported once the response is drained.
fn row(body: &DataRowBody, columns: usize) -> Result<Vec<Option<String>>, ClientError> {
    let mut values = Vec::with_capacity(columns);
    let mut ranges = body.ranges();
    while let Some(range) = ranges.next().map_err(ClientError::Malformed)? {
        let value = match range {
            None => None,
            Some(range) => {
                let bytes = body
                    .buffer()
                    .get(range)
                    .ok_or_else(|| ClientError::Protocol("data row value out of bounds".into()))?;
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| ClientError::Protocol("data row value is not UTF-8".into()))?;
                Some(text.to_owned())
            }
        };
        values.push(value);
    }
    if values.len() != columns {
        return Err(ClientError::Protocol(format!(
            "data row has {} values for {columns} columns",
            values.len()
        )));
    }
    Ok(values)
}

/// The verb and the count of a command tag, the way node-postgres and Neon read it: the
/// first word, and the last number (the second of `INSERT oid rows`).
fn parse_command_tag(tag: &str) -> (String, Option<u64>) {
    match tag.split_once(' ') {
        None => (tag.to_owned(), None),
        Some(("INSERT", rest)) => (
            "INSERT".to_owned(),
            rest.split_once(' ').and_then(|(_, n)| n.parse().ok()),
        ),
        Some((verb, rest)) => (verb.to_owned(), rest.parse().ok()),
    }
}

fn transaction_status(byte: u8) -> Result<TransactionStatus, ClientError> {
    match byte {
        b'I' => Ok(TransactionStatus::Idle),
        b'T' => Ok(TransactionStatus::InTransaction),
        b'E' => Ok(TransactionStatus::Failed),
        other => Err(ClientError::Protocol(format!(
            "ReadyForQuery status {other:#04x}"
        ))),
    }
}

/// The SQL spelling of an isolation level, from any of its usual spellings.
fn isolation_level(name: &str) -> Option<&'static str> {
    if name.len() > 32 {
        return None;
    }
    let squashed: String = name
        .chars()
        .filter(|c| !matches!(c, ' ' | '_' | '-'))
        .collect::<String>()
        .to_ascii_lowercase();
    match squashed.as_str() {
        "serializable" => Some("SERIALIZABLE"),
        "repeatableread" => Some("REPEATABLE READ"),
        "readcommitted" => Some("READ COMMITTED"),
        "readuncommitted" => Some("READ UNCOMMITTED"),
        _ => None,
    }
}

fn log_notice(fields: postgres_protocol::message::backend::ErrorFields<'_>) {
    match DbError::parse(fields) {
        Ok(notice) => tracing::debug!(code = %notice.code, message = %notice.message, "notice"),
        Err(error) => tracing::debug!(error = &error as &dyn std::error::Error, "malformed notice"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake server that logs in with trust, sends `reply` to whatever comes next, and
    /// closes.
    async fn fake_server(reply: Vec<u8>) -> Client<tokio::io::DuplexStream> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client_side, mut server) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let _ = server.read(&mut buf).await;
            let _ = server.write_all(b"R\0\0\0\x08\0\0\0\0Z\0\0\0\x05I").await;
            let _ = server.read(&mut buf).await;
            // Then the stream ends.
            let _ = server.write_all(&reply).await;
        });
        let opts = ConnectOptions {
            user: "u".into(),
            ..ConnectOptions::default()
        };
        Client::connect(client_side, &opts)
            .await
            .expect("trust login")
    }

    #[tokio::test]
    async fn oversized_or_unknown_messages_break_the_client() {
        let mut huge = b"D".to_vec();
        huge.extend_from_slice(&(MAX_MESSAGE as u32 + 1).to_be_bytes());
        let mut client = fake_server(huge).await;
        let error = client.query("select 1", &[], &Limits::default()).await;
        assert!(matches!(error, Err(ClientError::Protocol(_))), "{error:?}");
        assert!(!client.is_usable());
        let error = client.query("select 1", &[], &Limits::default()).await;
        assert!(matches!(error, Err(ClientError::Broken)), "{error:?}");

        let mut client = fake_server(b"?\0\0\0\x04".to_vec()).await;
        let error = client.query("select 1", &[], &Limits::default()).await;
        assert!(matches!(error, Err(ClientError::Malformed(_))), "{error:?}");
        assert!(!client.is_usable());

        // A row with more values than columns is reported after the drain; still usable.
        let mut reply = b"1\0\0\0\x042\0\0\0\x04n\0\0\0\x04".to_vec();
        reply.extend_from_slice(b"D\0\0\0\x0b\0\x01\0\0\0\x01x");
        reply.extend_from_slice(b"C\0\0\0\x0dSELECT 1\0Z\0\0\0\x05I");
        let mut client = fake_server(reply).await;
        let error = client.query("select 1", &[], &Limits::default()).await;
        assert!(matches!(error, Err(ClientError::Protocol(_))), "{error:?}");
        assert!(client.is_usable());

        // The stream ends mid-answer.
        let mut client = fake_server(b"1\0\0".to_vec()).await;
        let error = client.query("select 1", &[], &Limits::default()).await;
        assert!(matches!(error, Err(ClientError::Io(_))), "{error:?}");
        assert!(!client.is_usable());
    }

    #[test]
    fn parses_command_tags() {
        for (tag, verb, count) in [
            ("SELECT 5", "SELECT", Some(5)),
            ("INSERT 0 3", "INSERT", Some(3)),
            ("UPDATE 0", "UPDATE", Some(0)),
            ("CREATE TABLE", "CREATE", None),
            ("BEGIN", "BEGIN", None),
            ("INSERT 0", "INSERT", None),
            ("", "", None),
        ] {
            assert_eq!(parse_command_tag(tag), (verb.to_owned(), count), "{tag}");
        }
    }

    #[test]
    fn isolation_levels_are_a_closed_set() {
        assert_eq!(isolation_level("Serializable"), Some("SERIALIZABLE"));
        assert_eq!(isolation_level("repeatable read"), Some("REPEATABLE READ"));
        assert_eq!(isolation_level("RepeatableRead"), Some("REPEATABLE READ"));
        assert_eq!(isolation_level("READ_COMMITTED"), Some("READ COMMITTED"));
        assert_eq!(isolation_level("ReadUncommitted"), Some("READ UNCOMMITTED"));
        assert_eq!(isolation_level("serializable; drop table x"), None);
        assert_eq!(isolation_level(""), None);
    }

    #[test]
    fn statement_encoding_refuses_what_cannot_be_sent() {
        let mut buf = bytes::BytesMut::new();
        assert!(matches!(
            encode_statement(&mut buf, "select\0 1", &[]),
            Err(ClientError::InvalidInput(_))
        ));
        let many = vec![None; 70_000];
        assert!(matches!(
            encode_statement(&mut bytes::BytesMut::new(), "select 1", &many),
            Err(ClientError::InvalidInput(_))
        ));
        let mut buf = bytes::BytesMut::new();
        encode_statement(&mut buf, "select $1", &[Some("x".into())]).expect("encode");
        let tags: Vec<u8> = {
            let mut tags = Vec::new();
            let mut rest = &buf[..];
            while let Some((&tag, tail)) = rest.split_first() {
                let len = u32::from_be_bytes(tail[..4].try_into().expect("len")) as usize;
                tags.push(tag);
                rest = &tail[len..];
            }
            tags
        };
        assert_eq!(tags, b"PBDES");
    }
}
