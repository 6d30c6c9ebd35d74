//! A typed async client for the PandaStack `/v1` API, used by the `pandastack` CLI, the tests
//! and the benchmarks: sandboxes, exec (blocking and as Server-Sent Events), files (streamed
//! from and to local files), snapshots, lifecycle, console logs, metrics, templates, keys and
//! the PTY WebSocket; the code interpreter (runs and contexts); volumes, their snapshots and
//! backups; managed PostgreSQL databases; apps deployed from git or an uploaded tarball, their
//! deploys and logs; schedules (cron) and runs;
//! functions, their versions and build logs, rollback and invoke; and, with an admin key, the
//! operator routes (hosts: list, drain, undrain, forget).
//!
//! Errors keep the server's envelope (`code`, `message`, `request_id`) in [`Error::Api`]; calls
//! answered 429, 502 or 503 are retried with backoff (honouring `Retry-After`), and creates
//! carry an `Idempotency-Key` so a retry cannot create twice. This crate speaks HTTP only; it
//! must not depend on the server's crates beyond the wire types.

mod apps;
mod code;
mod config;
mod databases;
mod error;
mod exec;
mod files;
mod functions;
mod hosts;
mod http;
mod pty;
mod resources;
mod sandboxes;
mod schedules;
mod sse;
mod team;
mod usage;
mod volumes;
mod watch;

pub use apps::AppLogStream;
pub use config::{config_path, Config, ConfigFile, Sources, DEFAULT_BASE_URL};
pub use error::{ApiError, Error};
pub use exec::{ExecEvent, ExecExit, ExecStream};
pub use http::RetryPolicy;
pub use pandastack_api_types as types;
pub use pty::{PtyEvent, PtyOptions, PtyReceiver, PtySender};
pub use sandboxes::{ListSandboxes, LogEvent, LogStream, MetricsOf};
pub use sse::{SseDecoder, SseEvent};
pub use team::AuditQuery;
pub use usage::UsageQuery;
pub use watch::WatchStream;

/// A connection to one PandaStack server with one API key. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    config: Config,
    retry: RetryPolicy,
}

impl Client {
    /// A client for `config` with the default retry policy.
    pub fn new(config: Config) -> Result<Self, Error> {
        if !(config.base_url.starts_with("http://") || config.base_url.starts_with("https://")) {
            return Err(Error::Config(format!(
                "base URL {:?} must start with http:// or https://",
                config.base_url
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .user_agent(concat!("pandastack-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            config,
            retry: RetryPolicy::default(),
        })
    }

    /// Replaces the retry policy.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The configuration this client uses.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The same server, HTTP connections and retry policy with another API key (a server
    /// that calls its own API for each caller with the caller's key).
    pub fn with_api_key(&self, api_key: impl Into<String>) -> Self {
        let mut c = self.clone();
        c.config.api_key = Some(api_key.into());
        c
    }
}
