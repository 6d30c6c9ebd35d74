//! PostgreSQL wire protocol pieces of PandaStack's managed databases.
//!
//! Each managed database is a PostgreSQL server inside a microVM. The host reaches it over a
//! plain byte stream and needs both halves of the protocol:
//!
//! - [`front`]: the server side of a client's connection start. [`front::Front::accept`]
//!   takes a `postgres://` connection (psql, psycopg, node-postgres, sqlx with
//!   `sslmode=require`), negotiates TLS (after an `SSLRequest`, or directly with ALPN
//!   `postgresql` as PostgreSQL 17's `sslnegotiation=direct` does), and returns the decrypted
//!   stream with what routing needs: the SNI host name (`<db id>.<domain>`, see
//!   [`front::host_label`]) and the parsed [`startup::Startup`] message, whose
//!   [`endpoint`](startup::Startup::endpoint) is Neon's `options=endpoint%3D<id>` convention
//!   for clients without SNI. The caller forwards
//!   [`encode_for_upstream`](startup::Startup::encode_for_upstream) (the same message minus
//!   the endpoint option) and then every byte both ways; authentication is the real server's.
//!   A direct-TLS connection that is an HTTP request (a WebSocket client of the same port) is
//!   handed back as [`front::Incoming::Http`] for the caller to serve.
//! - [`client`]: a minimal PostgreSQL client over any byte stream for the HTTP query broker:
//!   SCRAM-SHA-256/MD5/cleartext/trust login, one statement per call in the extended protocol
//!   with text parameters, row and byte limits, transactions of several statements; and
//!   [`client::login`], the authentication alone, for a front that takes a client's password
//!   in cleartext (inside a TLS WebSocket) and logs in upstream with it.
//! - [`json`]: result rows as JSON the way Neon's `/sql` endpoint writes them, for
//!   `@neondatabase/serverless` and plain HTTP callers.
//!
//! What it deliberately does not do:
//!
//! - It knows nothing of VMs, HTTP or the state store: streams in, streams and values out
//!   (it recognises an HTTP request by its first four bytes, `GET `, and no more).
//! - Cancel requests are only parsed ([`front::Incoming::Cancel`],
//!   [`startup::encode_cancel_request`]); matching one to a backend is the caller's job.
//! - GSSAPI encryption is declined (`N`), as a server without GSSAPI does; the client then
//!   asks for TLS or is refused.
//! - Protocol 3.2 (PostgreSQL 18 clients): every 3.x startup is accepted, its minor version
//!   recorded and forwarded unchanged, so the real server answers with
//!   `NegotiateProtocolVersion` if it supports less. Other majors get `FATAL 0A000`.
//! - The client never offers SCRAM channel binding to the upstream: that hop is plaintext
//!   inside the host (there is no TLS session to bind to), so it sends the `n` flag and
//!   refuses a server that insists on `SCRAM-SHA-256-PLUS`.
//! - Nothing here sets timeouts: callers bound [`front::Front::accept`] and client calls.
//!
//! Every length read from a peer is bounded (startup packets at 10 000 bytes like PostgreSQL,
//! messages at 1 GiB) and malformed input is an error, never a panic.

#![forbid(unsafe_code)]

pub mod client;
pub mod front;
pub mod json;
pub mod startup;

pub use client::{
    Client, ClientError, ConnectOptions, DbError, Field, Limits, QueryResult, TransactionStatus,
};
pub use front::{
    host_label, write_error, Accepted, Front, FrontError, HttpConn, Incoming, Prefixed, Severity,
};
pub use json::{result_to_neon, value_to_json};
pub use startup::Startup;
