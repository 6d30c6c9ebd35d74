//! `pandastack server`: control plane and host agent in one process, SQLite and the local data
//! directory as embedded defaults. On first start it creates a workspace and prints its key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pandastack_api::ApiState;
use pandastack_control::{ControlConfig, ControlPlane};
use pandastack_store::Store;

use super::local_host::{open_objects, start_host, LocalHostArgs};

#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, env = "PANDASTACK_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address the preview proxy listens on (`<port>-<sandbox id>.<domain>` → that port inside
    /// the sandbox).
    #[arg(
        long,
        env = "PANDASTACK_PROXY_LISTEN",
        default_value = "127.0.0.1:8081"
    )]
    proxy_listen: SocketAddr,
    /// Address of a listener serving only `GET /metrics` (Prometheus text) without a key: bind
    /// it where only your scraper reaches. Without it, `/metrics` is on the API listener for
    /// admin keys.
    #[arg(long, env = "PANDASTACK_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// How users reach the preview proxy: `scheme://domain[:port]`; a port's URL is
    /// `scheme://<port>-<sandbox id>.domain[:port]` (default: `http://localhost:<proxy port>`,
    /// which browsers resolve to this machine). Put TLS in front for `https`.
    #[arg(long, env = "PANDASTACK_PREVIEW_URL")]
    preview_url: Option<String>,
    /// Address of the proxy's HTTPS listener (none unless given): apps' custom domains with
    /// certificates from `--tls-cert-dir` or ACME, any other name with `--proxy-tls-cert`.
    #[arg(long, env = "PANDASTACK_PROXY_TLS_LISTEN")]
    proxy_tls_listen: Option<SocketAddr>,
    /// Default certificate chain (PEM) of the HTTPS listener, for names without one of their
    /// own (e.g. a wildcard for the preview domain).
    #[arg(long, env = "PANDASTACK_PROXY_TLS_CERT", requires_all = ["proxy_tls_key", "proxy_tls_listen"])]
    proxy_tls_cert: Option<PathBuf>,
    #[arg(long, env = "PANDASTACK_PROXY_TLS_KEY", requires = "proxy_tls_cert")]
    proxy_tls_key: Option<PathBuf>,
    /// Certificates of custom domains from files: `<dir>/<domain>/fullchain.pem` and
    /// `privkey.pem` (the layout of certbot's `/etc/letsencrypt/live`). Read when a client
    /// names the domain; a replaced file is served within seconds.
    #[arg(long, env = "PANDASTACK_TLS_CERT_DIR", requires = "proxy_tls_listen")]
    tls_cert_dir: Option<PathBuf>,
    /// ACME directory for custom domains that no file covers (e.g.
    /// `https://acme-v02.api.letsencrypt.org/directory`). Validation is HTTP-01: port 80 of
    /// each domain must reach the proxy's plain listener.
    #[arg(long, env = "PANDASTACK_ACME_DIRECTORY", requires = "proxy_tls_listen")]
    acme_directory: Option<String>,
    /// Answer plain-HTTP requests for apps' custom domains that have a certificate of their own
    /// (from files or ACME) with `308` to the same URL over HTTPS; ACME's HTTP-01 challenges and
    /// names without a certificate are served as they are.
    #[arg(long, env = "PANDASTACK_HTTPS_REDIRECT", requires = "proxy_tls_listen")]
    https_redirect: bool,
    /// The HTTPS port in those redirects (default: the port of `--proxy-tls-listen`; a port
    /// forwarded to it from 443 is given as 443).
    #[arg(
        long,
        env = "PANDASTACK_HTTPS_REDIRECT_PORT",
        requires = "https_redirect"
    )]
    https_redirect_port: Option<u16>,
    /// Contact of the ACME account (an e-mail address or a URI).
    #[arg(long, env = "PANDASTACK_ACME_CONTACT")]
    acme_contact: Option<String>,
    /// PEM CA certificate to trust for the ACME directory's HTTPS instead of the system's
    /// roots (a test CA, such as pebble's).
    #[arg(long, env = "PANDASTACK_ACME_CA")]
    acme_ca: Option<PathBuf>,
    /// Longest a preview request waits for a hibernated sandbox to wake before answering 503
    /// with `Retry-After`.
    #[arg(long, default_value_t = 30)]
    preview_wake_timeout_seconds: u64,
    /// Address the database connection front listens on (`postgres://…@<database id>.<db
    /// domain>`, TLS required).
    #[arg(long, env = "PANDASTACK_DB_LISTEN", default_value = "127.0.0.1:5432")]
    db_listen: SocketAddr,
    /// Domain of databases' host names: `<id>.<domain>` (PostgreSQL) and `<id>-pooler.<domain>`
    /// (PgBouncer). Point a wildcard DNS record `*.<domain>` at this host.
    #[arg(long, env = "PANDASTACK_DB_DOMAIN", default_value = "db.localhost")]
    db_domain: String,
    /// Port in connection strings (default: the `--db-listen` port).
    #[arg(long, env = "PANDASTACK_DB_PORT")]
    db_port: Option<u16>,
    /// PEM certificate chain and key of the database front (default: a self-signed certificate
    /// for `*.<db domain>`, made once in `<data-dir>/db-tls/`).
    #[arg(long, env = "PANDASTACK_DB_TLS_CERT", requires = "db_tls_key")]
    db_tls_cert: Option<PathBuf>,
    #[arg(long, env = "PANDASTACK_DB_TLS_KEY", requires = "db_tls_cert")]
    db_tls_key: Option<PathBuf>,
    /// Longest a connection waits for its database to wake (or get a new VM) before it is told
    /// to retry (`57P03`).
    #[arg(long, default_value_t = 60)]
    db_wake_timeout_seconds: u64,
    /// A base backup of each running database this often (the first when it first runs);
    /// with its archived WAL it is where a point-in-time restore starts.
    #[arg(long, default_value_t = 86_400)]
    db_backup_interval_seconds: u64,
    /// How far back point-in-time restore reaches: older archived WAL and base backups go.
    #[arg(long, default_value_t = 7)]
    db_retention_days: u64,
    /// How long the audit log keeps a call (days; at least one).
    #[arg(long, default_value_t = 90)]
    audit_retention_days: u64,
    /// Address of a listener for the web console (which also serves `/v1` there, the API the
    /// console calls from its own origin). Given, the console is served there and not at `/` of
    /// the API listener.
    #[arg(long, env = "PANDASTACK_CONSOLE_LISTEN")]
    console_listen: Option<SocketAddr>,
    /// How long a web console sign-in lasts (hours; at least one).
    #[arg(long, default_value_t = 12)]
    console_session_hours: u64,
    /// Base URL of this API in databases' `http_url` (default: `http://<listen>`); an
    /// `https://` one also makes the web console's session cookie `Secure`.
    #[arg(long, env = "PANDASTACK_PUBLIC_URL")]
    public_url: Option<String>,
    // This machine's host runtime: the flags `pandastack agent` shares.
    #[command(flatten)]
    pub host: LocalHostArgs,
    #[command(flatten)]
    pub replica: super::replica::ReplicaArgs,
    /// State store: `postgres://USER@HOST/DB` (shared by hosts), `sqlite://PATH` or a file path
    /// (default: SQLite at `<data-dir>/state.db`).
    #[arg(long, env = "PANDASTACK_STATE")]
    state: Option<String>,
    /// This host's id, the owner of the rows of what runs here (default: the one in
    /// `<data-dir>/host-id`, created at first start).
    #[arg(long, env = "PANDASTACK_HOST_ID")]
    host_id: Option<String>,
    /// Quota on the total size of each workspace's volumes, GiB (set on every workspace at
    /// start).
    #[arg(long, env = "PANDASTACK_MAX_VOLUME_GB", default_value_t = 100)]
    max_volume_gb: i64,
    /// Snapshots each workspace may keep (set on every workspace at start).
    #[arg(long, env = "PANDASTACK_MAX_SNAPSHOTS", default_value_t = 500)]
    max_snapshots: i64,
    /// Hibernated sandboxes each workspace may keep (set on every workspace at start).
    #[arg(long, env = "PANDASTACK_MAX_HIBERNATED", default_value_t = 200)]
    max_hibernated: i64,
    /// Template builds (versions, failed ones aside) each workspace may keep (set on every
    /// workspace at start).
    #[arg(long, env = "PANDASTACK_MAX_TEMPLATE_BUILDS", default_value_t = 100)]
    max_template_builds: i64,
    /// Host disk each workspace's snapshots, hibernated sandboxes and template builds may take
    /// together, GiB (set on every workspace at start).
    #[arg(long, env = "PANDASTACK_MAX_STORAGE_GB", default_value_t = 500)]
    max_storage_gb: i64,
    /// The most `disk_mbps` a create may ask for (a larger one is a 422).
    #[arg(long, env = "PANDASTACK_VM_DISK_MBPS_MAX", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..))]
    vm_disk_mbps_max: u64,
    /// The most `disk_iops` a create may ask for (a larger one is a 422).
    #[arg(long, env = "PANDASTACK_VM_DISK_IOPS_MAX", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    vm_disk_iops_max: u64,
    /// Largest OCI image tarball accepted by `POST /v1/templates`, in MiB.
    #[arg(long, default_value_t = 16384)]
    max_template_upload_mb: u64,
    /// Write the first workspace's API key to this file (mode 0600) instead of only printing it.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Running (not hibernated) sandboxes per workspace.
    #[arg(long, default_value_t = 200)]
    max_sandboxes: i64,
    /// Sandbox creates per minute per workspace.
    #[arg(long, default_value_t = 600)]
    creates_per_minute: i64,
    /// On shutdown, hibernate running sandboxes instead of leaving them running.
    #[arg(long)]
    hibernate_on_shutdown: bool,
    /// An internal destination the server may fetch from or send to on a user's behalf (app and
    /// function git sources, webhook deliveries): by default only public addresses, never
    /// loopback, link-local, private, CGNAT or metadata ones. A host name (`git.corp`), an
    /// address (`10.1.2.3`), either with a port (`git.corp:8443`), or a network
    /// (`10.1.0.0/16`); repeat the flag, or separate with commas in the environment variable.
    #[arg(long, env = "PANDASTACK_ALLOW_INTERNAL_FETCH", value_delimiter = ',')]
    allow_internal_fetch: Vec<pandastack_outbound::Allowed>,
    /// How often the usage meter counts what the hosts sampled (`--sample-interval-ms`) into
    /// `GET /v1/usage`, in ms. Nothing is lost between passes; the hosts keep 6 hours of readings.
    #[arg(long, env = "PANDASTACK_METER_INTERVAL_MS", default_value_t = 15_000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    meter_interval_ms: u64,
}

pub async fn run(a: ServerArgs) -> anyhow::Result<ExitCode> {
    // Checked before anything starts: a replica needs the cluster's PostgreSQL.
    let cluster =
        super::replica::identity(&a.replica, a.state.as_deref(), a.host.objects.as_deref())?;
    // Opened first so a bad URL fails the start at once; volume backups go there.
    let objects = open_objects(&a.host).await?;
    let store = super::keys::open_store(&a.host.data_dir, a.state.as_deref()).await?;
    let first_key = first_start(&store, &a).await?;
    apply_quotas(&a, &store).await?;
    if let Some(identity) = cluster {
        return run_replica(a, identity, store, objects, first_key).await;
    }
    let (host_id, host_name) = register_host(&a, &store).await?;
    // Reconcile host and database: keep what has a row on this host, remove the rest; rows of
    // other hosts are theirs.
    let known: Vec<String> = store
        .sandboxes()
        .on_host(&host_id)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let started = start_host(&a.host, |id| known.iter().any(|k| k == id), objects.clone()).await?;
    let (agent, host, accel) = (started.agent, started.host, started.accel);
    let (certs, proxy_tls) = certificates(&a, &store, &host_id)?;
    let config = control_config(&a, host_id, certs)?;
    let control = ControlPlane::new(store, host, objects, config);
    control
        .recover()
        .await
        .context("settle what the last run left")?;
    control.start();
    let (app, preview_url) = api_state(&a, control.clone(), host_name, &proxy_tls)?;
    let runs_on = format!("guests run under {accel}");
    serve(&a, app, proxy_tls, first_key, &runs_on, &preview_url).await?;
    tracing::info!("shutting down");
    agent.shutdown().await;
    control.shutdown(a.hibernate_on_shutdown).await;
    Ok(ExitCode::SUCCESS)
}

/// The server as one control-plane replica of a cluster (`--cluster`): no host of its own,
/// sandboxes placed on and forwarded to the agents that attend the replicas; nothing to
/// settle at start (each host is reconciled when a replica sees it join).
async fn run_replica(
    a: ServerArgs,
    identity: pandastack_cluster::Identity,
    store: Store,
    objects: pandastack_objects::Objects,
    first_key: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mut replica = super::replica::start(&a.replica, identity, &store).await?;
    let name = replica.name.clone();
    let (certs, proxy_tls) = certificates(&a, &store, &name)?;
    // Rows the control plane owns name no replica: whichever runs the workers runs them all.
    let owner = pandastack_control::CLUSTER_CONTROL_ID.to_owned();
    let mut config = control_config(&a, owner, certs)?;
    config.place = pandastack_control::PlaceMode::AcrossHosts;
    let host: Arc<dyn pandastack_host::Host> = Arc::new(replica.fleet.clone());
    let control = ControlPlane::new(store.clone(), host, objects, config);
    control.sandboxes.set_fleet(replica.fleet.clone());
    // The workers run in one replica at a time (an advisory lock); the API in every one.
    replica.lead_workers(store, control.clone());
    let (app, preview_url) = api_state(&a, control.clone(), name.clone(), &proxy_tls)?;
    let runs_on = format!(
        "control-plane replica {name}; agents attend on {}",
        a.replica.membership_listen
    );
    serve(&a, app, proxy_tls, first_key, &runs_on, &preview_url).await?;
    tracing::info!("shutting down");
    control.shutdown(false).await;
    replica.stop();
    Ok(ExitCode::SUCCESS)
}

/// The API's state over `control`, and the preview proxy's base URL.
fn api_state(
    a: &ServerArgs,
    control: ControlPlane,
    host_name: String,
    proxy_tls: &Option<Arc<pandastack_api::ProxyTls>>,
) -> anyhow::Result<(Arc<ApiState>, String)> {
    let preview_url = a
        .preview_url
        .clone()
        .unwrap_or_else(|| format!("http://localhost:{}", a.proxy_listen.port()));
    let preview = pandastack_api::PreviewConfig::from_base_url(
        &preview_url,
        Duration::from_secs(a.preview_wake_timeout_seconds),
    )
    .map_err(anyhow::Error::msg)?;
    let mut app = ApiState::new(control, host_name, preview)
        .with_audit_retention(Duration::from_secs(a.audit_retention_days.max(1) * 86_400))
        .with_console(pandastack_api::console::ConsoleConfig {
            session_ttl: Duration::from_secs(a.console_session_hours.max(1) * 3600),
            public_url: a.public_url.clone(),
        });
    if let (true, Some(tls), Some(listen)) = (a.https_redirect, proxy_tls, a.proxy_tls_listen) {
        app = app.with_https_redirect(pandastack_api::tls::HttpsRedirect {
            tls: Arc::clone(tls),
            port: a.https_redirect_port.unwrap_or(listen.port()),
        });
    }
    Ok((Arc::new(app), preview_url))
}

/// Registers this host in the store (its id kept in the data dir unless given) and adopts rows
/// from before host ids; returns its id and name.
async fn register_host(a: &ServerArgs, store: &Store) -> anyhow::Result<(String, String)> {
    let host_name = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    let host_id = match &a.host_id {
        Some(id) => id.clone(),
        None => host_id_in(&a.host.data_dir)?,
    };
    store.hosts().register(&host_id, &host_name).await?;
    let adopted = store.hosts().adopt_unowned(&host_id).await?;
    if adopted > 0 {
        tracing::info!(rows = adopted, host = %host_id, "rows from before host ids now belong to this host");
    }
    tracing::info!(host = %host_id, backend = ?store.backend(), "state store open");
    Ok((host_id, host_name))
}

/// Sets every workspace's volume and storage quotas from the flags.
async fn apply_quotas(a: &ServerArgs, store: &Store) -> anyhow::Result<()> {
    if a.max_volume_gb < 0 {
        anyhow::bail!("--max-volume-gb: must be 0 or more");
    }
    store.keys().set_volume_quota_all(a.max_volume_gb).await?;
    let quotas = pandastack_store::StorageQuotas {
        max_snapshots: a.max_snapshots,
        max_hibernated: a.max_hibernated,
        max_template_builds: a.max_template_builds,
        max_storage_gb: a.max_storage_gb,
    };
    for (flag, v) in [
        ("--max-snapshots", quotas.max_snapshots),
        ("--max-hibernated", quotas.max_hibernated),
        ("--max-template-builds", quotas.max_template_builds),
        ("--max-storage-gb", quotas.max_storage_gb),
    ] {
        if v < 0 {
            anyhow::bail!("{flag}: must be 0 or more");
        }
    }
    store.quotas().set_all(&quotas).await?;
    Ok(())
}

/// Where custom domains get certificates (with an HTTPS listener), and the proxy's TLS set-up.
fn certificates(
    a: &ServerArgs,
    store: &Store,
    host_id: &str,
) -> anyhow::Result<(
    Option<pandastack_control::Certificates>,
    Option<Arc<pandastack_api::ProxyTls>>,
)> {
    let Some(_) = a.proxy_tls_listen else {
        return Ok((None, None));
    };
    let certs = pandastack_control::Certificates::new(
        store.clone(),
        host_id.to_owned(),
        pandastack_control::CertConfig {
            dir: a.tls_cert_dir.clone(),
            acme: a
                .acme_directory
                .clone()
                .map(|directory| pandastack_control::AcmeConfig {
                    directory,
                    contact: a.acme_contact.clone(),
                    root: a.acme_ca.clone(),
                }),
        },
    );
    let default = match (&a.proxy_tls_cert, &a.proxy_tls_key) {
        (Some(cert), Some(key)) => Some(
            pandastack_api::tls::config_from_files(cert, key)
                .context("--proxy-tls-cert/--proxy-tls-key")?,
        ),
        _ => None,
    };
    let tls = Arc::new(pandastack_api::ProxyTls::new(
        store.clone(),
        Arc::clone(&certs.config),
        default,
    ));
    Ok((Some(certs), Some(tls)))
}

/// The control plane's configuration from the flags.
fn control_config(
    a: &ServerArgs,
    host_id: String,
    certificates: Option<pandastack_control::Certificates>,
) -> anyhow::Result<ControlConfig> {
    let preview_url = a
        .preview_url
        .clone()
        .unwrap_or_else(|| format!("http://localhost:{}", a.proxy_listen.port()));
    let preview = pandastack_api::PreviewConfig::from_base_url(
        &preview_url,
        Duration::from_secs(a.preview_wake_timeout_seconds),
    )
    .map_err(anyhow::Error::msg)?;
    if !a.allow_internal_fetch.is_empty() {
        let shown: Vec<String> = a
            .allow_internal_fetch
            .iter()
            .map(|x| x.to_string())
            .collect();
        tracing::info!(allowed = %shown.join(","), "internal destinations sources may be fetched from");
    }
    Ok(ControlConfig {
        host_id,
        builds: pandastack_control::BuildConfig {
            dir: a.host.data_dir.join("builds"),
            max_upload_bytes: a.max_template_upload_mb << 20,
        },
        apps: pandastack_control::AppAddress {
            scheme: preview.scheme.clone(),
            domain: preview.domain.clone(),
            port: preview.port,
        },
        databases: pandastack_control::DatabaseAddress {
            domain: a.db_domain.to_ascii_lowercase(),
            port: a.db_port.unwrap_or(a.db_listen.port()),
            api_url: a
                .public_url
                .clone()
                .unwrap_or_else(|| format!("http://{}", a.listen)),
        },
        archive: pandastack_control::ArchiveSettings {
            backup_interval: Duration::from_secs(a.db_backup_interval_seconds.max(60)),
            retention: Duration::from_secs(a.db_retention_days.max(1) * 86_400),
            ..Default::default()
        },
        outbound: pandastack_outbound::OutboundPolicy::new(a.allow_internal_fetch.clone()),
        certificates,
        disk_max: pandastack_control::DiskMax {
            mbps: a.vm_disk_mbps_max,
            iops: a.vm_disk_iops_max,
        },
        deploy: Default::default(),
        place: pandastack_control::PlaceMode::ThisHost,
        webhooks: Default::default(),
        meter: pandastack_control::MeterSettings {
            interval: Duration::from_millis(a.meter_interval_ms),
        },
    })
}

/// Binds the API, the preview proxy (and its HTTPS listener when configured) and the database
/// front, prints how to use them, and serves until a shutdown signal.
async fn serve(
    a: &ServerArgs,
    app: Arc<ApiState>,
    proxy_tls: Option<Arc<pandastack_api::ProxyTls>>,
    first_key: Option<String>,
    runs_on: &str,
    preview_url: &str,
) -> anyhow::Result<()> {
    let db_front = db_tls(a)?;
    let listener = tokio::net::TcpListener::bind(a.listen)
        .await
        .with_context(|| format!("listen on {}", a.listen))?;
    let proxy_listener = tokio::net::TcpListener::bind(a.proxy_listen)
        .await
        .with_context(|| format!("listen on {} (preview proxy)", a.proxy_listen))?;
    let db_listener = tokio::net::TcpListener::bind(a.db_listen)
        .await
        .with_context(|| {
            format!(
                "listen on {} (database front; choose another with --db-listen)",
                a.db_listen
            )
        })?;
    let console_listener = match a.console_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen on {addr} (web console)"))?,
        ),
        None => None,
    };
    let url = format!("http://{}", a.listen);
    let console_url = match a.console_listen {
        Some(addr) => format!("http://{addr}"),
        None => url.clone(),
    };
    print_usage(
        &url,
        &console_url,
        first_key.as_deref(),
        a.key_file.as_deref(),
        runs_on,
    );
    println!(
        "Preview URLs: {} (proxy on {}; e.g. {})",
        preview_url,
        a.proxy_listen,
        app.preview.url(8080, "<sandbox id>")
    );
    println!(
        "Databases: postgres://…@<database id>.{}:{} (TLS front on {})",
        app.control.databases.address.domain, app.control.databases.address.port, a.db_listen
    );
    let db = tokio::spawn(pandastack_api::serve_db_front(
        Arc::clone(&app),
        db_listener,
        Arc::new(db_front),
        Duration::from_secs(a.db_wake_timeout_seconds),
    ));
    let mut tls_task = None;
    if let (Some(addr), Some(tls)) = (a.proxy_tls_listen, proxy_tls) {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on {addr} (proxy, TLS)"))?;
        println!(
            "HTTPS proxy on {addr}: custom domains of apps ({}){}",
            match (&a.tls_cert_dir, &a.acme_directory) {
                (Some(d), Some(u)) => format!("certificates from {} or ACME at {u}", d.display()),
                (Some(d), None) => format!("certificates from {}", d.display()),
                (None, Some(u)) => format!("certificates from ACME at {u}"),
                (None, None) => "no certificate source: only the default certificate".into(),
            },
            if a.proxy_tls_cert.is_some() {
                "; other names get the default certificate"
            } else {
                ""
            }
        );
        tls_task = Some(tokio::spawn(pandastack_api::serve_proxy_tls(
            Arc::clone(&app),
            listener,
            tls,
        )));
    }
    let metrics = match a.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("listen on {addr} (metrics)"))?;
            println!("Metrics: http://{addr}/metrics (Prometheus text, no key)");
            let router = pandastack_api::metrics_router(Some(app.store.clone()));
            Some(tokio::spawn(
                async move { axum::serve(listener, router).await },
            ))
        }
        None => None,
    };
    let proxy_app = pandastack_api::proxy_router(Arc::clone(&app));
    let proxy = tokio::spawn(async move { axum::serve(proxy_listener, proxy_app).await });
    // The MCP endpoint calls this listener's own API with each request's key; cancelling its
    // sessions on shutdown keeps their open streams from holding the graceful shutdown up.
    let mcp_shutdown = tokio_util::sync::CancellationToken::new();
    let own_api =
        pandastack_client::Client::new(pandastack_client::Config::new(own_url(a.listen), None))?;
    let mcp = pandastack_mcp::http_service(own_api, mcp_shutdown.clone());
    let console_task = console_listener.map(|l| {
        let router = pandastack_api::listener_router(Arc::clone(&app), "/mcp", mcp.clone(), true);
        tokio::spawn(async move {
            axum::serve(
                l,
                router.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
        })
    });
    // The peer's address reaches the handlers: the audit log records it.
    axum::serve(
        listener,
        pandastack_api::listener_router(Arc::clone(&app), "/mcp", mcp, console_task.is_none())
            .into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown_signal().await;
        mcp_shutdown.cancel();
    })
    .await?;
    app.audit.flush().await;
    proxy.abort();
    db.abort();
    if let Some(m) = metrics {
        m.abort();
    }
    if let Some(c) = console_task {
        c.abort();
    }
    if let Some(t) = tls_task {
        t.abort();
    }
    Ok(())
}

/// The URL this process reaches its own API listener at: `listen`, a wildcard address (all
/// interfaces) replaced by loopback.
fn own_url(listen: SocketAddr) -> String {
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{addr}")
}

/// The host id kept in `<data_dir>/host-id`, created (`host-` + 16 hex digits) the first time.
fn host_id_in(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join("host-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::new(e).context(format!("read {}", path.display()))),
    }
    let id = pandastack_store::new_id("host-");
    let tmp = data_dir.join(".host-id.tmp");
    std::fs::write(&tmp, format!("{id}\n"))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .with_context(|| format!("write {}", path.display()))?;
    Ok(id)
}

/// Creates the first workspace and key on a fresh install; returns the key to print.
async fn first_start(store: &Store, a: &ServerArgs) -> anyhow::Result<Option<String>> {
    if store.keys().workspace_count().await? > 0 {
        return Ok(None);
    }
    let (_, _, secret) = store
        .keys()
        .create_workspace_with_key("default", a.max_sandboxes, a.creates_per_minute)
        .await?;
    if let Some(path) = &a.key_file {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("write key file {}", path.display()))?;
        writeln!(f, "{secret}")?;
    }
    Ok(Some(secret))
}

fn print_usage(
    url: &str,
    console_url: &str,
    key: Option<&str>,
    key_file: Option<&Path>,
    runs_on: &str,
) {
    println!("PandaStack server listening on {url} ({runs_on})");
    println!("Console: {console_url}/ (sign in with an API key)");
    match (key, key_file) {
        (Some(k), _) => {
            println!("API key for the default workspace (shown once; store it):\n  {k}");
            if let Some(f) = key_file {
                println!("  (also written to {})", f.display());
            }
        }
        (None, Some(f)) => println!("API key: see {}", f.display()),
        (None, None) => {
            println!("API key: the one printed at first start (or `pandastack keys create`)")
        }
    }
    let k = key.unwrap_or("$PANDASTACK_API_KEY");
    println!("Try it:");
    println!("  export PANDASTACK_API_KEY={k}");
    println!("  curl -s -X POST {url}/v1/sandboxes -H \"Authorization: Bearer $PANDASTACK_API_KEY\" -d '{{\"template\":\"minimal\"}}'");
    println!("  curl -s -X POST {url}/v1/sandboxes/<id>/exec -H \"Authorization: Bearer $PANDASTACK_API_KEY\" -d '{{\"cmd\":\"python3 -c \\\"print(2**10)\\\"\"}}'");
}

pub(super) async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// The database front's TLS: the given certificate, or a self-signed one for `*.<db domain>`
/// made at first start and kept in `<data-dir>/db-tls/`.
fn db_tls(a: &ServerArgs) -> anyhow::Result<pandastack_pgwire::front::Front> {
    if let (Some(cert), Some(key)) = (&a.db_tls_cert, &a.db_tls_key) {
        let cert =
            std::fs::read_to_string(cert).with_context(|| format!("read {}", cert.display()))?;
        let key =
            std::fs::read_to_string(key).with_context(|| format!("read {}", key.display()))?;
        return pandastack_pgwire::front::Front::new(&cert, &key).context("database front TLS");
    }
    let dir = a.host.data_dir.join("db-tls");
    let domain = a.db_domain.to_ascii_lowercase();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    let names_path = dir.join("names");
    let names = format!("*.{domain}\n{domain}\n");
    if std::fs::read_to_string(&names_path).ok().as_deref() == Some(names.as_str()) {
        if let (Ok(c), Ok(k)) = (
            std::fs::read_to_string(&cert_path),
            std::fs::read_to_string(&key_path),
        ) {
            return pandastack_pgwire::front::Front::new(&c, &k).context("database front TLS");
        }
    }
    let (front, cert, key) =
        pandastack_pgwire::front::Front::self_signed(&[format!("*.{domain}"), domain.clone()])
            .context("self-signed certificate for the database front")?;
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    std::fs::write(&cert_path, cert).with_context(|| format!("write {}", cert_path.display()))?;
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&key_path)
            .with_context(|| format!("write {}", key_path.display()))?;
        f.write_all(key.as_bytes())?;
    }
    std::fs::write(&names_path, names)?;
    Ok(front)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_url_reaches_wildcards_on_loopback() {
        assert_eq!(
            own_url("0.0.0.0:8080".parse().unwrap()),
            "http://127.0.0.1:8080"
        );
        assert_eq!(own_url("[::]:8080".parse().unwrap()), "http://[::1]:8080");
        assert_eq!(
            own_url("10.1.2.3:80".parse().unwrap()),
            "http://10.1.2.3:80"
        );
    }
}
