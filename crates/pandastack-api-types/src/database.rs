//! Managed PostgreSQL databases: one per microVM, its data on a durable volume, reached with a
//! `postgres://` connection string through the host's TLS front or over HTTP.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// PostgreSQL major versions a database can be created with (the `postgres` template's).
pub const DATABASE_VERSIONS: &[u32] = &[17];
/// Default size of a database's data volume, GiB.
pub const DEFAULT_DATABASE_GB: u32 = 1;
/// Default memory of a database's VM, MiB (the `postgres` template's own size).
pub const DEFAULT_DATABASE_MEMORY_MB: u32 = 1024;
/// Memory sizes a database's VM can have, MiB (multiples of 256).
pub const DATABASE_MEMORY_MB: std::ops::RangeInclusive<u32> = 256..=16_384;
/// Default idle time before a database hibernates, seconds (`0`: never).
pub const DEFAULT_DATABASE_IDLE_SECONDS: u64 = 300;
/// Names a database (and its owner role) cannot take.
const RESERVED: &[&str] = &[
    "postgres",
    "template0",
    "template1",
    "pgbouncer",
    "pandastack",
];

/// A database name, also its owner role's: 1-40 of `[a-z0-9_]` starting with a letter, not a
/// name PostgreSQL or PandaStack uses itself.
pub fn validate_database_name(field: &str, name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.as_bytes()[0].is_ascii_lowercase()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        return Err(field_error(
            field,
            "1-40 of [a-z0-9_], starting with a letter",
        ));
    }
    if RESERVED.contains(&name) || name.starts_with("pg_") {
        return Err(field_error(
            field,
            format!("{name:?} is reserved (postgres, template0/1, pgbouncer, pandastack, pg_*)"),
        ));
    }
    Ok(())
}

/// `POST /v1/databases`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDatabaseRequest {
    /// The database's name, also the name of its owner role.
    #[schema(pattern = "^[a-z][a-z0-9_]{0,39}$")]
    pub name: String,
    /// PostgreSQL major version (only 17 today).
    #[serde(default)]
    pub version: Option<u32>,
    /// Size of the data volume, GiB (default 1).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1024)]
    pub size_gb: Option<u32>,
    /// Memory of the database's VM, MiB (default 1024; a multiple of 256 from 256 to 16384).
    /// The first database of a size bakes the `postgres` template at that size (seconds).
    #[serde(default)]
    #[schema(minimum = 256, maximum = 16384, multiple_of = 256)]
    pub memory_mb: Option<u32>,
    /// Seconds without connections or queries before the database hibernates (default 300;
    /// `0`: never). The next connection wakes it.
    #[serde(default)]
    #[schema(maximum = 604800)]
    pub idle_seconds: Option<u64>,
}

impl CreateDatabaseRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_database_name("name", &self.name)?;
        if let Some(v) = self.version {
            if !DATABASE_VERSIONS.contains(&v) {
                return Err(field_error(
                    "version",
                    format!("PostgreSQL {v} is not offered: one of {DATABASE_VERSIONS:?}"),
                ));
            }
        }
        if let Some(gb) = self.size_gb {
            if gb == 0 || gb > crate::MAX_VOLUME_GB {
                return Err(field_error(
                    "size_gb",
                    format!("between 1 and {}", crate::MAX_VOLUME_GB),
                ));
            }
        }
        if let Some(mb) = self.memory_mb {
            if !DATABASE_MEMORY_MB.contains(&mb) || mb % 256 != 0 {
                return Err(field_error(
                    "memory_mb",
                    "a multiple of 256 from 256 to 16384",
                ));
            }
        }
        if self.idle_seconds.is_some_and(|s| s > 604_800) {
            return Err(field_error("idle_seconds", "at most 604800"));
        }
        Ok(())
    }
}

/// `POST /v1/databases/{id}/branches`: a new database with the data of this one as of now.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBranchRequest {
    /// The branch's name (default `<name>_<6 hex>`). Its owner role keeps the parent's name.
    #[serde(default)]
    #[schema(pattern = "^[a-z][a-z0-9_]{0,39}$")]
    pub name: Option<String>,
    /// RFC 3339: branch from the archive as of this time (point-in-time: the newest base
    /// backup before it plus the archived WAL). Omitted: a copy-on-write copy as of now.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub from_time: Option<String>,
    #[serde(default)]
    #[schema(maximum = 604800)]
    pub idle_seconds: Option<u64>,
}

impl CreateBranchRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if let Some(n) = &self.name {
            validate_database_name("name", n)?;
        }
        if let Some(t) = &self.from_time {
            validate_time("from_time", t)?;
        }
        if self.idle_seconds.is_some_and(|s| s > 604_800) {
            return Err(field_error("idle_seconds", "at most 604800"));
        }
        Ok(())
    }
}

/// `POST /v1/databases/{id}/restore`: the database's data as of a past time, in place.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreDatabaseRequest {
    /// RFC 3339, inside the restore window (from the oldest base backup kept to now).
    #[schema(format = DateTime)]
    pub to_time: String,
}

impl RestoreDatabaseRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        validate_time("to_time", &self.to_time)
    }
}

/// A cheap shape check of an RFC 3339 time (the control plane parses it).
fn validate_time(field: &'static str, t: &str) -> Result<(), FieldError> {
    let ok = (20..=40).contains(&t.len())
        && t.as_bytes()[..10].iter().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                *b == b'-'
            } else {
                b.is_ascii_digit()
            }
        })
        && matches!(t.as_bytes()[10], b'T' | b't' | b' ');
    if ok {
        Ok(())
    } else {
        Err(field_error(
            field,
            "an RFC 3339 time, like 2026-11-25T17:40:01.250Z",
        ))
    }
}

/// Where a database is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseState {
    /// Being created (its volume, VM and cluster).
    Creating,
    /// Accepting connections.
    Ready,
    /// Hibernated after `idle_seconds`: the next connection or query wakes it.
    Hibernated,
    /// Its VM is gone (deleted, or died): the next connection or query starts a new one on the
    /// same data.
    Stopped,
}

/// A database resource.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Database {
    pub id: String,
    pub name: String,
    /// PostgreSQL major version.
    pub version: u32,
    pub state: DatabaseState,
    /// Owner role (also in the URIs).
    pub user: String,
    /// `postgres://user:password@<id>.<domain>:<port>/<name>?sslmode=require`.
    pub connection_uri: String,
    /// The same through PgBouncer (transaction pooling): `<id>-pooler.<domain>`.
    pub pooled_uri: String,
    /// Base of the HTTP query endpoints (`POST {http_url}/sql`, Neon-compatible).
    pub http_url: String,
    pub size_gb: u32,
    /// Memory of its VM, MiB.
    pub memory_mb: u32,
    pub idle_seconds: u64,
    /// The database this one was branched from.
    pub parent: Option<String>,
    /// The sandbox (VM) serving it now, if any.
    pub sandbox_id: Option<String>,
    /// The durable volume holding its data.
    pub volume: String,
    pub host: String,
    /// RFC 3339.
    pub created_at: String,
}

/// `POST /v1/databases/{id}/query`: one statement, parameters as `$1…` (sent as text; JSON
/// numbers and booleans are written as PostgreSQL reads them).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub sql: String,
    #[serde(default)]
    pub params: Vec<serde_json::Value>,
    /// Milliseconds (default 30000, at most 300000).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 300000)]
    pub timeout_ms: Option<u64>,
}

impl QueryRequest {
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.sql.trim().is_empty() {
            return Err(field_error("sql", "empty"));
        }
        if self.sql.len() > 1 << 20 {
            return Err(field_error("sql", "longer than 1 MiB"));
        }
        if self.params.len() > 65_535 {
            return Err(field_error("params", "more than 65535"));
        }
        if self.params.iter().any(|p| p.is_object() || p.is_array()) {
            return Err(field_error(
                "params",
                "each parameter is a string, number, boolean or null (send JSON as a string)",
            ));
        }
        if self.timeout_ms.is_some_and(|t| t == 0 || t > 300_000) {
            return Err(field_error("timeout_ms", "between 1 and 300000"));
        }
        Ok(())
    }
}

/// A result column.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryField {
    pub name: String,
    /// The type's OID (`pg_type.oid`).
    pub data_type_id: u32,
}

/// `POST /v1/databases/{id}/query`'s answer: rows as arrays in field order, values converted
/// to JSON (booleans, small integers and floats as numbers, JSON as JSON, arrays as arrays,
/// everything else — int8 and numeric included — as PostgreSQL's text).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QueryResponse {
    /// `SELECT`, `INSERT`, …
    pub command: String,
    pub row_count: Option<u64>,
    pub fields: Vec<QueryField>,
    #[schema(value_type = Vec<Vec<Object>>)]
    pub rows: Vec<Vec<serde_json::Value>>,
}

/// One extension the `postgres` template has.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseExtension {
    pub name: String,
    pub default_version: String,
}

/// `GET /v1/databases/extensions`: per PostgreSQL major, what `CREATE EXTENSION` can load.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseExtensions {
    /// `"17"` → the extensions of PostgreSQL 17.
    pub versions: BTreeMap<String, Vec<DatabaseExtension>>,
    /// Loaded at start (`shared_preload_libraries`).
    pub preloaded: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_database_name("name", "app").is_ok());
        assert!(validate_database_name("name", "a_1").is_ok());
        for bad in ["", "1a", "A", "a-b", "postgres", "pg_x", &"a".repeat(41)] {
            assert!(validate_database_name("name", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests() {
        let ok = CreateDatabaseRequest {
            name: "app".into(),
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
        let v15 = CreateDatabaseRequest {
            version: Some(15),
            ..ok.clone()
        };
        assert_eq!(v15.validate().unwrap_err().field, "version");
        let q = QueryRequest {
            sql: "select $1".into(),
            params: vec![serde_json::json!({"a": 1})],
            timeout_ms: None,
        };
        assert_eq!(q.validate().unwrap_err().field, "params");
        let b = CreateBranchRequest {
            from_time: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert!(b.validate().is_ok());
        for bad in ["yesterday", "2026-01-01", "", "2026/01/01T00:00:00Z"] {
            let b = CreateBranchRequest {
                from_time: Some(bad.into()),
                ..Default::default()
            };
            assert_eq!(b.validate().unwrap_err().field, "from_time", "{bad}");
            let r = RestoreDatabaseRequest {
                to_time: bad.into(),
            };
            assert_eq!(r.validate().unwrap_err().field, "to_time", "{bad}");
        }
    }
}
