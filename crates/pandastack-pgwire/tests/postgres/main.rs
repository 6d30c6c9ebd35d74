//! Tests against a real PostgreSQL (Debian's 15 binaries, or `PANDASTACK_PG_BIN`): the client
//! directly, the front in a small proxy driven by psql and rustls clients. One throwaway
//! cluster per test, stopped when the test ends.

mod client;
mod fixture;
mod front;
