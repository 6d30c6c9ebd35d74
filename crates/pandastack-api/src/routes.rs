//! The route table. Each entry names a handler annotated with `#[utoipa::path]`; the method and
//! path in that annotation both register the handler in the router and list the operation in the
//! OpenAPI document ([`ApiDoc`]). A handler therefore cannot be served without being documented,
//! nor documented under a path or method it is not served on.

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter};
use axum::Router;
use utoipa::openapi::HttpMethod;

use crate::openapi::Conventions;
use crate::ApiState;
#[allow(unused_imports)] // named by the table through the macro
use crate::{
    apps, audit, code, databases, events, exec_ws, file_urls, functions, hosts, keys, logs,
    members, meta, metrics, operator_metrics, ports, pty, sandboxes, schedules, snapshots,
    templates, volumes, watch, webhooks, workload,
};

/// The operation id (`create_sandbox`) of the route `path` (a template) for `method`.
pub(crate) fn operation_id(method: &Method, path: &str) -> Option<String> {
    static IDS: std::sync::OnceLock<std::collections::HashMap<(Method, String), String>> =
        std::sync::OnceLock::new();
    IDS.get_or_init(operation_ids)
        .get(&(method.clone(), path.to_owned()))
        .cloned()
}

/// The axum method filter for an OpenAPI method.
fn filter(m: &HttpMethod) -> MethodFilter {
    match m {
        HttpMethod::Get => MethodFilter::GET,
        HttpMethod::Put => MethodFilter::PUT,
        HttpMethod::Post => MethodFilter::POST,
        HttpMethod::Delete => MethodFilter::DELETE,
        HttpMethod::Options => MethodFilter::OPTIONS,
        HttpMethod::Head => MethodFilter::HEAD,
        HttpMethod::Patch => MethodFilter::PATCH,
        HttpMethod::Trace => MethodFilter::TRACE,
    }
}

fn method(m: &HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Post => Method::POST,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Options => Method::OPTIONS,
        HttpMethod::Head => Method::HEAD,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Trace => Method::TRACE,
    }
}

/// Adds `handler` under `path` for `methods` (axum merges the methods of one path).
fn add<H, T, S>(router: Router<S>, path: &str, methods: &[HttpMethod], handler: H) -> Router<S>
where
    H: Handler<T, S>,
    T: 'static,
    S: Clone + Send + Sync + 'static,
{
    let mr = methods.iter().fold(MethodRouter::new(), |mr, m| {
        mr.on(filter(m), handler.clone())
    });
    router.route(path, mr)
}

/// Declares the table: `module::handler` entries, optionally `=> layer` for a per-handler layer.
/// Expands to [`ApiDoc`], [`operations`] and [`register`].
macro_rules! route_table {
    ($( $module:ident :: $handler:ident $(=> $layer:expr)? ),* $(,)?) => {
        /// The OpenAPI document of `/v1`, built from the route table. Use
        /// [`crate::openapi::document`] for the served document.
        #[derive(utoipa::OpenApi)]
        #[openapi(
            paths($($module::$handler),*),
            components(
                schemas(
                    pandastack_api_types::ErrorEnvelope,
                    pandastack_api_types::ErrorBody,
                    pandastack_api_types::ErrorCode,
                    pandastack_api_types::ExecClientFrame,
                    pandastack_api_types::ExecServerFrame,
                    pandastack_api_types::PtyClientFrame,
                    pandastack_api_types::PtyServerFrame,
                    pandastack_api_types::LogChunk,
                    pandastack_api_types::LogEnd,
                    pandastack_api_types::WatchFrame,
                    pandastack_api_types::Event,
                ),
            ),
            modifiers(&Conventions),
            security(("bearer" = [])),
            info(
                title = "PandaStack API",
                description = "Self-hostable microVM sandboxes. Authenticate with `Authorization: Bearer pds_…`; the streams a browser opens without headers (`GET` of SSE logs, WebSocket) also accept `?access_token=`. Every error is `{\"error\":{\"code\",\"message\",\"request_id\"}}`. Frame protocols of the streaming routes: docs/streams.md."
            ),
            tags(
                (name = "sandboxes", description = "Sandbox lifecycle"),
                (name = "exec", description = "Commands in a sandbox: blocking, SSE, WebSocket, PTY"),
                (name = "files", description = "Guest files"),
                (name = "code", description = "Code interpreter: code in a long-lived kernel (variables persist between calls)"),
                (name = "ports", description = "Preview URLs of ports inside a sandbox, served by the server's preview proxy"),
                (name = "snapshots", description = "Snapshots and forks"),
                (name = "templates", description = "Templates"),
                (name = "databases", description = "Managed PostgreSQL: a database per microVM on a durable volume, TLS connection strings, PgBouncer, branches, backups and SQL over HTTP"),
                (name = "apps", description = "Apps deployed from git: detected, built in a VM, health-checked, served at `<name>.<domain>` by the proxy; blue-green with rollback, scale to zero, push-to-deploy webhooks"),
                (name = "schedules", description = "Schedules (cron): a cron expression in a time zone runs a command in a fresh sandbox at each due time, once per due time; run history, manual runs, pause and resume"),
                (name = "events", description = "Events of every lifecycle change (`sandbox.created`, `deploy.live`, …), listed and streamed (SSE, resumable with `Last-Event-ID`), and webhook endpoints that receive them signed (Standard Webhooks), retried, in order per resource, with their delivery history"),
                (name = "volumes", description = "Durable volumes: disks that outlive sandboxes, their snapshots and backups to the object store"),
                (name = "keys", description = "API keys of the caller's workspace, and what it uses against its limits"),
                (name = "hosts", description = "Operators: every host of the platform, its drain and undrain, forgetting a dead one. Admin keys only (`pandastack keys create --admin`): any other key gets 403 `forbidden`"),
                (name = "meta", description = "Health and this document"),
            )
        )]
        pub struct ApiDoc;

        /// Method and path of every route the router serves (table order; the fallback aside).
        pub fn operations() -> Vec<(Method, String)> {
            let mut out = Vec::new();
            $(
                paste::paste! {
                    let path = <$module::[<__path_ $handler>] as utoipa::Path>::path();
                    for m in <$module::[<__path_ $handler>] as utoipa::Path>::methods() {
                        out.push((method(&m), path.clone()));
                    }
                }
            )*
            out
        }

        /// The operation id of each (method, route template) of the table.
        fn operation_ids() -> std::collections::HashMap<(Method, String), String> {
            let mut out = std::collections::HashMap::new();
            $(
                paste::paste! {
                    let path = <$module::[<__path_ $handler>] as utoipa::Path>::path();
                    let op = <$module::[<__path_ $handler>] as utoipa::Path>::operation();
                    if let Some(id) = op.operation_id {
                        for m in <$module::[<__path_ $handler>] as utoipa::Path>::methods() {
                            out.insert((method(&m), path.clone()), id.clone());
                        }
                    }
                }
            )*
            out
        }

        /// Registers every handler of the table on `router`.
        pub(crate) fn register(
            mut router: Router<Arc<ApiState>>,
        ) -> Router<Arc<ApiState>> {
            $(
                paste::paste! {
                    router = add(
                        router,
                        &<$module::[<__path_ $handler>] as utoipa::Path>::path(),
                        &<$module::[<__path_ $handler>] as utoipa::Path>::methods(),
                        $module::$handler $(.layer($layer))?,
                    );
                }
            )*
            router
        }
    };
}

route_table! {
    meta::health,
    meta::openapi_json,
    operator_metrics::prometheus,
    sandboxes::create,
    sandboxes::list,
    sandboxes::get,
    sandboxes::patch,
    sandboxes::delete,
    sandboxes::pause,
    sandboxes::resume,
    sandboxes::hibernate,
    sandboxes::wake,
    sandboxes::migrate,
    logs::logs,
    metrics::sandbox,
    metrics::database,
    metrics::app_vms,
    metrics::function,
    workload::exec,
    workload::exec_stream,
    exec_ws::exec_ws,
    pty::pty,
    workload::read,
    workload::write => DefaultBodyLimit::disable(),
    workload::remove,
    workload::list,
    workload::stat,
    workload::mkdir,
    workload::rename,
    file_urls::sign,
    file_urls::signed_read,
    file_urls::signed_write => DefaultBodyLimit::disable(),
    watch::watch,
    ports::url,
    ports::update,
    code::run,
    code::run_stream,
    code::create_context,
    code::delete_context,
    snapshots::create,
    snapshots::fork,
    snapshots::list,
    snapshots::delete,
    templates::list,
    templates::create => DefaultBodyLimit::disable(),
    templates::get,
    templates::bake,
    templates::delete,
    templates::logs,
    volumes::create,
    volumes::list,
    volumes::get,
    volumes::patch,
    volumes::delete,
    volumes::snapshot,
    volumes::snapshots,
    volumes::delete_snapshot,
    volumes::backup,
    volumes::backups,
    volumes::get_backup,
    databases::create,
    databases::list,
    databases::extensions,
    databases::get,
    databases::delete,
    databases::password,
    databases::branch,
    databases::restore,
    databases::backup,
    databases::backups,
    databases::query,
    databases::sql,
    apps::create,
    apps::list,
    apps::get,
    apps::update,
    apps::delete,
    apps::deploy => DefaultBodyLimit::disable(),
    apps::deploys,
    apps::get_deploy,
    apps::deploy_logs,
    apps::rollback,
    apps::rotate_deploy_key,
    apps::app_logs,
    apps::webhook_github,
    apps::webhook_generic,
    functions::create => DefaultBodyLimit::max(crate::functions::MAX_SOURCE_BODY),
    functions::list,
    functions::get,
    functions::update,
    functions::delete,
    functions::create_version => DefaultBodyLimit::disable(),
    functions::versions,
    functions::get_version,
    functions::version_logs,
    functions::rollback,
    functions::invocation,
    functions::invoke => DefaultBodyLimit::max(pandastack_api_types::MAX_INVOKE_PAYLOAD_BYTES + 1),
    schedules::create,
    schedules::list,
    schedules::get,
    schedules::update,
    schedules::delete,
    schedules::pause,
    schedules::resume,
    schedules::run_now,
    schedules::runs,
    schedules::get_run,
    events::list,
    webhooks::create,
    webhooks::list,
    webhooks::get,
    webhooks::delete,
    webhooks::deliveries,
    webhooks::redeliver,
    keys::list,
    keys::create,
    keys::revoke,
    keys::usage,
    members::create,
    members::list,
    members::get,
    members::update,
    members::delete,
    audit::list,
    hosts::list,
    hosts::get,
    hosts::drain,
    hosts::undrain,
    hosts::forget,
}
