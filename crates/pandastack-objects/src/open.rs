//! `Objects::open`: a URL to a backend.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::names::Keys;
use crate::{Objects, ObjectsError, DEFAULT_CONCURRENCY};

impl Objects {
    /// Opens the store a URL names:
    ///
    /// - `file:///absolute/path`: a local directory (created if missing), through
    ///   object_store's `LocalFileSystem`. The path is taken literally (no percent-decoding).
    /// - `s3://bucket[/prefix]`: S3 or an S3-compatible store, configured from the standard
    ///   environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    ///   `AWS_REGION`, `AWS_ENDPOINT_URL` or `AWS_ENDPOINT` for MinIO, Ceph, R2, …; without
    ///   keys, the instance's credentials). Plain `http://` endpoints are allowed.
    ///
    /// Every key lives under the prefix. Opening contacts nothing; [`Objects::check`] does.
    pub fn open(url: &str) -> Result<Self, ObjectsError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(invalid(
                url,
                "expected file:///absolute/path or s3://bucket[/prefix]",
            ));
        };
        match scheme {
            "file" => Self::open_local(url, rest),
            "s3" => Self::open_s3(url, rest),
            other => Err(ObjectsError::UnsupportedScheme {
                scheme: other.to_owned(),
            }),
        }
    }

    /// `file://` + `rest`.
    fn open_local(url: &str, rest: &str) -> Result<Self, ObjectsError> {
        if !rest.starts_with('/') {
            return Err(invalid(
                url,
                "a file:// URL needs an absolute path (file:///absolute/path)",
            ));
        }
        let dir = std::path::Path::new(rest);
        std::fs::create_dir_all(dir).map_err(ObjectsError::io("create", dir))?;
        let store = LocalFileSystem::new_with_prefix(dir).map_err(|source| ObjectsError::Open {
            url: url.to_owned(),
            source,
        })?;
        Ok(Self::new(
            Arc::new(store),
            &Path::from(""),
            format!("local directory {}", dir.display()),
        ))
    }

    /// `s3://` + `rest`.
    fn open_s3(url: &str, rest: &str) -> Result<Self, ObjectsError> {
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some((_, host)) = bucket.rsplit_once('@') {
            // Never echo what was in front of the `@`.
            return Err(ObjectsError::InvalidUrl {
                url: format!("s3://***@{host}/{path}"),
                reason: "credentials do not belong in the URL (use AWS_ACCESS_KEY_ID and \
                         AWS_SECRET_ACCESS_KEY)"
                    .into(),
            });
        }
        if rest.contains(['?', '#']) {
            return Err(invalid(url, "no query or fragment allowed"));
        }
        if bucket.is_empty() {
            return Err(invalid(url, "no bucket (s3://bucket[/prefix])"));
        }
        // Taken as written: `..`, `.` and empty segments are refused, not resolved.
        let path = path.trim_end_matches('/');
        if path.starts_with('/') {
            return Err(invalid(url, "prefix: empty path segment"));
        }
        let prefix = Path::parse(path).map_err(|e| invalid(url, &format!("prefix: {e}")))?;
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
        if endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"))
        {
            builder = builder.with_allow_http(true);
        }
        let region = builder
            .get_config_value(&AmazonS3ConfigKey::Region)
            .unwrap_or_else(|| "us-east-1".into());
        let store = builder.build().map_err(|source| ObjectsError::Open {
            url: url.to_owned(),
            source,
        })?;
        let endpoint = endpoint
            .as_deref()
            .map(endpoint_for_log)
            .unwrap_or_else(|| "AWS".into());
        let shown = if prefix.as_ref().is_empty() {
            format!("s3://{bucket}")
        } else {
            format!("s3://{bucket}/{prefix}")
        };
        Ok(Self::new(
            Arc::new(store),
            &prefix,
            format!("{shown} (endpoint {endpoint}, region {region})"),
        ))
    }

    fn new(store: Arc<dyn ObjectStore>, prefix: &Path, description: String) -> Self {
        Self {
            store: Arc::new(crate::counted::Counted(store)),
            keys: Keys::new(prefix),
            description,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

fn invalid(url: &str, reason: &str) -> ObjectsError {
    ObjectsError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Scheme, host and port of an endpoint URL: never a user name, password or query.
fn endpoint_for_log(endpoint: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{}://{h}:{p}", u.scheme()),
            (Some(h), None) => format!("{}://{h}", u.scheme()),
            _ => "(unparsable endpoint)".into(),
        },
        Err(_) => "(unparsable endpoint)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_hides_credentials() {
        assert_eq!(
            endpoint_for_log("http://user:secret@127.0.0.1:9000/x?token=1"),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            endpoint_for_log("https://s3.example.com"),
            "https://s3.example.com"
        );
    }
}
