//! The one error type of this crate.

use std::path::PathBuf;

/// What went wrong in an object storage operation. The key or path is in the message; the
/// cause (an I/O or object store error) is the [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
pub enum ObjectsError {
    /// The URL names a scheme this crate does not serve.
    #[error(
        "unsupported object store URL scheme {scheme:?} (use file:///absolute/path or \
         s3://bucket[/prefix])"
    )]
    UnsupportedScheme { scheme: String },
    /// The URL is malformed for its scheme.
    #[error("invalid object store URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The backend refused the configuration (an S3 builder error).
    #[error("open object store {url}")]
    Open {
        url: String,
        #[source]
        source: object_store::Error,
    },
    /// A workspace id, manifest kind or manifest id outside the allowed names.
    #[error("invalid {what} {name:?}: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },
    /// A chunk size outside [`crate::MIN_CHUNK_SIZE`]..=[`crate::MAX_CHUNK_SIZE`] or not a
    /// multiple of 4 KiB.
    #[error("invalid chunk size {0} (a multiple of 4 KiB from 4 KiB to 64 MiB)")]
    InvalidChunkSize(u64),
    /// The object does not exist.
    #[error("object {key} not found")]
    NotFound { key: String },
    /// A manifest exists under this name with different content; manifests are never replaced.
    #[error("manifest {key} exists with different content")]
    Conflict { key: String },
    /// A stored object does not hold what its name promises (hash or size mismatch, unparsable
    /// manifest).
    #[error("object {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    /// A manifest that is not self-consistent (version, chunk size, chunk count).
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// The backend failed (network, permissions, disk).
    #[error("object store {op} {key}")]
    Store {
        op: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },
    /// A local file could not be read or written.
    #[error("{op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ObjectsError {
    /// Maps a backend error on `key`: a missing object becomes [`ObjectsError::NotFound`].
    pub(crate) fn store<'a>(
        op: &'static str,
        key: &'a object_store::path::Path,
    ) -> impl Fn(object_store::Error) -> Self + 'a {
        move |source| match source {
            object_store::Error::NotFound { .. } => Self::NotFound {
                key: key.to_string(),
            },
            source => Self::Store {
                op,
                key: key.to_string(),
                source,
            },
        }
    }

    pub(crate) fn io<'a>(
        op: &'static str,
        path: &'a std::path::Path,
    ) -> impl Fn(std::io::Error) -> Self + 'a {
        move |source| Self::Io {
            op,
            path: path.to_owned(),
            source,
        }
    }
}
