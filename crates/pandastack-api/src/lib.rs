//! The PandaStack `/v1` HTTP API on axum: `router(app)` serves sandboxes (create, list, get,
//! patch, delete, exec, files, snapshots, fork, pause/resume, hibernate/wake with auto-wake,
//! logs with follow, metrics, exec and PTY over WebSocket), templates, keys and the OpenAPI
//! document of all of it (`GET /v1/openapi.json`). Handlers validate at the edge, check the caller's
//! workspace against the store, and hand lifecycle work to the host agent; every error goes
//! through [`error::ApiError`]. It must not start VMs itself or know which hypervisor runs them.

mod apps;
mod code;
mod databases;
pub mod db_front;
mod error;
mod exec_ws;
mod extract;
mod functions;
mod idempotency;
mod keys;
mod logs;
mod meta;
pub mod openapi;
mod page;
mod ports;
pub mod proxy;
mod pty;
mod routes;
mod sandboxes;
mod schedules;
mod schemas;
mod snapshots;
mod templates;
pub mod tls;
mod upstream;
mod utf8;
mod volumes;
mod workload;
mod ws;

pub use db_front::serve_db_front;
pub use error::{ApiError, ApiResult};
pub use openapi::{document, ApiDoc};
pub use pandastack_control::BuildConfig;
pub use proxy::{proxy_router, PreviewConfig};
pub use routes::operations;
pub use sandboxes::wire_state;
pub use tls::{serve_proxy_tls, ProxyTls};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use pandastack_host::Host;
use pandastack_store::Store;

/// Largest JSON body accepted (file uploads are streamed and not bound by this).
pub const MAX_JSON_BODY: usize = 1 << 20;
/// Largest stdout (and stderr) a blocking exec returns.
pub const MAX_EXEC_OUTPUT: u64 = 4 << 20;

/// Shared state of the API.
pub struct App {
    pub store: Store,
    /// The host the sandboxes run on, behind the boundary.
    pub host: Arc<dyn Host>,
    /// Name of this host in sandbox objects.
    pub host_name: String,
    /// This host's id: the owner of the rows of what runs here.
    pub host_id: String,
    /// Create-rate windows per workspace: (window start, creates in it).
    rate: Mutex<HashMap<String, (Instant, i64)>>,
    /// Preview URLs of sandbox ports.
    pub preview: PreviewConfig,
    /// The sandbox service of the control plane (rows and VMs in step).
    pub sandboxes: pandastack_control::Sandboxes,
    /// The snapshot service of the control plane.
    pub snapshots: pandastack_control::Snapshots,
    /// The template service of the control plane (catalog, builds, versions).
    pub templates: pandastack_control::Templates,
    /// The code interpreter's service of the control plane (kernels in the guest).
    pub code: pandastack_control::CodeContexts,
    /// The volume service of the control plane (volumes, their snapshots and backups).
    pub volumes: pandastack_control::Volumes,
    /// The managed-database service of the control plane.
    pub databases: pandastack_control::Databases,
    /// App hosting: apps deployed from git, served by the proxy at `<name>.<domain>`.
    pub apps: pandastack_control::Apps,
    /// Schedules (cron): fired once per due time by this host's scheduler.
    pub schedules: pandastack_control::Schedules,
    /// The proxy's idle kept-alive connections into sandboxes.
    upstreams: upstream::Upstreams,
    /// Plain-HTTP requests for certified custom domains redirected to HTTPS (`None`: served).
    https_redirect: Option<tls::HttpsRedirect>,
    /// The most disk limits a create may ask for.
    pub disk_max: DiskMax,
}

/// The most a create may ask for in `disk_mbps` and `disk_iops` (`pandastack server
/// --vm-disk-mbps-max`, `--vm-disk-iops-max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskMax {
    pub mbps: u64,
    pub iops: u64,
}

impl Default for DiskMax {
    fn default() -> Self {
        Self {
            mbps: 4096,
            iops: 1_000_000,
        }
    }
}

impl DiskMax {
    /// A 422 `invalid_argument` naming the field when `req` asks for more than these.
    pub fn check(&self, req: &pandastack_api_types::CreateSandboxRequest) -> error::ApiResult<()> {
        for (field, v, max) in [
            ("disk_mbps", req.disk_mbps, self.mbps),
            ("disk_iops", req.disk_iops, self.iops),
        ] {
            if v.is_some_and(|v| v == 0 || v > max) {
                return Err(error::ApiError::new(
                    pandastack_api_types::ErrorCode::InvalidArgument,
                    format!("{field}: between 1 and {max}"),
                ));
            }
        }
        Ok(())
    }
}

impl App {
    pub fn new(
        store: Store,
        host: Arc<dyn Host>,
        host_name: String,
        host_id: String,
        builds: BuildConfig,
        preview: PreviewConfig,
        objects: pandastack_objects::Objects,
    ) -> Self {
        let volumes = pandastack_control::Volumes::new(
            store.clone(),
            Arc::clone(&host),
            objects.clone(),
            host_id.clone(),
        );
        let sandboxes = pandastack_control::Sandboxes::new(store.clone(), Arc::clone(&host));
        // Deploys keep their files beside the template builds' (`<data>/deploys/<id>/`).
        let deploys_dir = builds.dir.with_file_name("deploys");
        let templates = pandastack_control::Templates::new(
            store.clone(),
            Arc::clone(&host),
            host_id.clone(),
            builds,
        );
        let apps = pandastack_control::Apps::new(
            store.clone(),
            Arc::clone(&host),
            sandboxes.clone(),
            host_id.clone(),
            deploys_dir,
            pandastack_control::AppAddress {
                scheme: preview.scheme.clone(),
                domain: preview.domain.clone(),
                port: preview.port,
            },
            objects.clone(),
        );
        Self {
            schedules: pandastack_control::Schedules::new(
                store.clone(),
                Arc::clone(&host),
                sandboxes.clone(),
                templates.clone(),
                apps.clone(),
                host_id.clone(),
            ),
            apps,
            databases: pandastack_control::Databases::new(
                store.clone(),
                Arc::clone(&host),
                sandboxes.clone(),
                volumes.clone(),
                host_id.clone(),
                pandastack_control::DatabaseAddress {
                    domain: "db.localhost".into(),
                    port: 5432,
                    api_url: "http://127.0.0.1:8080".into(),
                },
            ),
            volumes,
            sandboxes,
            templates,
            code: pandastack_control::CodeContexts::new(Arc::clone(&host)),
            snapshots: pandastack_control::Snapshots::new(
                store.clone(),
                Arc::clone(&host),
                host_id.clone(),
            ),
            store,
            host,
            host_name,
            host_id,
            rate: Mutex::new(HashMap::new()),
            preview,
            upstreams: upstream::Upstreams::default(),
            https_redirect: None,
            disk_max: DiskMax::default(),
        }
    }

    /// How connection strings and `http_url` name databases (the front's domain and port, the
    /// API's URL); the default is `db.localhost:5432` and `http://127.0.0.1:8080`.
    /// Custom domains of apps get TLS certificates from `certs` (files or ACME).
    /// Answers plain-HTTP requests for apps' custom domains that have a certificate of their
    /// own with a redirect to HTTPS (see [`tls::HttpsRedirect`]).
    /// Caps the disk limits a create may ask for ([`DiskMax::default`] unless set).
    pub fn with_disk_max(mut self, max: DiskMax) -> Self {
        self.disk_max = max;
        self
    }

    pub fn with_https_redirect(mut self, redirect: tls::HttpsRedirect) -> Self {
        self.https_redirect = Some(redirect);
        self
    }

    /// What app and function sources may be fetched from (default: public addresses only).
    pub fn with_outbound(mut self, policy: pandastack_outbound::OutboundPolicy) -> Self {
        self.apps = self.apps.with_outbound(policy);
        self
    }

    pub fn with_certificates(mut self, certs: pandastack_control::Certificates) -> Self {
        self.apps = self.apps.with_certificates(certs);
        self
    }

    pub fn with_database_address(mut self, address: pandastack_control::DatabaseAddress) -> Self {
        self.databases.address = address;
        self
    }

    /// When databases' base backups are taken and how long their archive is kept.
    pub fn with_database_archive(mut self, settings: pandastack_control::ArchiveSettings) -> Self {
        self.databases = self.databases.with_archive(settings);
        self
    }

    /// Settles what database creates and restores cut off by a previous server process left.
    pub async fn recover_databases(&self) -> Result<(), pandastack_control::DatabaseError> {
        self.databases.reconcile().await
    }

    /// Starts the task that archives running databases' WAL to the object store and takes
    /// their scheduled base backups.
    pub fn start_database_archiver(self: &Arc<Self>) {
        tokio::spawn(self.databases.clone().archiver());
    }

    /// Settles what a previous server process left of template builds: build jobs it was
    /// running are queued again, builds without a job marked failed, files of unknown builds
    /// removed. Then [`App::start_build_worker`].
    pub async fn recover_builds(&self) -> Result<(), pandastack_store::StoreError> {
        self.templates.recover().await
    }

    /// Starts the task that runs this host's template build jobs, one at a time.
    pub fn start_build_worker(self: &Arc<Self>) {
        tokio::spawn(self.templates.clone().worker());
    }

    /// Settles what a previous server process left of volumes (creates cut off, files no row
    /// names) and of backups (uploads queued again). Then [`App::start_backup_worker`].
    pub async fn recover_volumes(&self) -> Result<(), pandastack_control::VolumeError> {
        self.volumes.reconcile().await?;
        self.volumes.recover_backups().await
    }

    /// Removes deploy files no deploy owns, then starts the task that runs this host's deploy
    /// jobs, one at a time (jobs cut off by a previous process are queued again by
    /// [`App::recover_builds`]'s requeue of this host's running jobs).
    pub async fn start_deploy_worker(self: &Arc<Self>) -> Result<(), pandastack_control::AppError> {
        self.apps.remove_strays().await?;
        self.apps.remove_stray_instances().await?;
        tokio::spawn(self.apps.clone().worker());
        tokio::spawn(self.apps.clone().instance_sweeper());
        self.apps.start_invoke_runners();
        Ok(())
    }

    /// Starts this host's scheduler and the runners of its schedules' runs (runs cut off by a
    /// previous process are queued again by [`App::recover_builds`]'s requeue of this host's
    /// running jobs).
    pub fn start_scheduler(&self) {
        self.schedules.start();
    }

    /// Starts the task that runs this host's backup uploads, one at a time.
    pub fn start_backup_worker(self: &Arc<Self>) {
        tokio::spawn(self.volumes.clone().worker());
    }
}

/// The `/v1` router: every operation of [`openapi::ApiDoc`] (one table, see [`routes`]),
/// fallbacks answering an unknown path (`not_found`) and a method a path does not serve
/// (`method_not_allowed`, with `Allow`) in the error envelope, the JSON body limit and request ids.
pub fn router(app: Arc<App>) -> Router {
    routes::register(Router::new())
        .fallback(|| async {
            ApiError::new(pandastack_api_types::ErrorCode::NotFound, "no such route")
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                pandastack_api_types::ErrorCode::MethodNotAllowed,
                "this path does not serve this method (see Allow)",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(axum::middleware::from_fn(request_id))
        .with_state(app)
}

/// Gives every request an id (the client's `X-Request-Id` if sane, else a new one), makes it
/// available to error responses, and returns it in `X-Request-Id`.
async fn request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("req_{:016x}", rand::random::<u64>()));
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let has_body = req
        .headers()
        .contains_key(axum::http::header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v != "0");
    let t = Instant::now();
    let mut resp = error::REQUEST_ID.scope(id.clone(), next.run(req)).await;
    tracing::debug!(request_id = %id, %method, %path, status = resp.status().as_u16(), ms = t.elapsed().as_millis() as u64, "request");
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    // A request refused before its body was read (a bad path on an upload, say) leaves that
    // body unread, and the server then closes the connection; saying so keeps a keep-alive
    // client from sending its next request on it (seen as "server disconnected").
    if has_body && (resp.status().is_client_error() || resp.status().is_server_error()) {
        resp.headers_mut().insert(
            axum::http::header::CONNECTION,
            HeaderValue::from_static("close"),
        );
    }
    resp
}

/// RFC 3339 for a unix-ms timestamp.
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}
