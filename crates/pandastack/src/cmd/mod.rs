//! Subcommands of the `pandastack` binary.

use std::process::ExitCode;

pub mod agent;
mod agent_facts;
pub mod app;
pub mod auth;
pub mod bench;
mod bench_api;
mod bench_apps;
mod bench_cluster;
mod bench_compare;
mod bench_databases;
mod bench_diff;
mod bench_functions;
mod bench_objects;
mod bench_sampling;
mod bench_soak;
mod bench_volumes;
mod client_util;
pub mod cluster;
pub mod cron;
pub mod db;
pub mod doctor;
pub mod function;
pub mod host;
mod internal;
pub mod keys;
mod local_host;
pub mod mcp;
mod replica;
pub mod run;
pub mod sandbox;
mod sandbox_io;
mod sandbox_top;
pub mod server;
mod shell;
pub mod team;
pub mod template;
mod template_ls;
mod template_remote;
mod usage;
pub mod volume;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check that this host can run sandboxes, with a fix hint for each problem.
    Doctor(doctor::DoctorArgs),
    /// Measure latency and density with real guests; prints p50/p99 and writes JSON.
    Bench(bench::BenchArgs),
    /// Prepare this host (reflink-capable data directory); list, drain, undrain or forget the
    /// platform's hosts (an admin key).
    Host(host::HostArgs),
    /// The cluster's PKI: make its CA, issue a certificate per host (agent or server replica).
    Cluster(cluster::ClusterArgs),
    /// Create, list and revoke API keys in the server's database (works while it runs).
    Keys(keys::KeysArgs),
    /// Run one command in a fresh local sandbox (no server needed) and destroy it.
    Run(run::RunArgs),
    /// Serve the REST API: control plane and host agent in one process.
    // Boxed: its flags make it much larger than the other variants (clippy::large_enum_variant).
    Server(Box<server::ServerArgs>),
    /// Run this host's sandboxes for a cluster's control plane: serve them to the replicas over
    /// the cluster's mutual TLS and attend one (no database credentials, only a certificate).
    // Boxed, as the server's: its host flags make it large.
    Agent(Box<agent::AgentArgs>),
    /// Build template images from specs.
    Template(template::TemplateArgs),
    /// Log in to a server: store its URL and an API key for the client commands.
    Auth(auth::AuthArgs),
    /// Sandboxes on a running server: create, ls, exec, shell, cp, fork, snapshot, kill, …
    #[command(visible_alias = "sb")]
    Sandbox(sandbox::SandboxArgs),
    /// Durable volumes on a running server: create, ls, get, grow, rm, snapshot, backup, restore
    #[command(visible_alias = "vol")]
    Volume(volume::VolumeArgs),
    /// Managed PostgreSQL on a running server: create, ls, get, psql, branch, password, query, rm, backup
    #[command(name = "db", visible_alias = "database")]
    Db(db::DbArgs),
    /// Apps from git on a running server: create, deploy (a ref or --dir), logs, rollback, ls, get, deploys, rm
    #[command(visible_alias = "apps")]
    App(app::AppArgs),
    /// Schedules (cron) on a running server: add, ls, get, runs, run, pause, resume, rm
    #[command(visible_alias = "schedule")]
    Cron(cron::CronArgs),
    /// Functions on a running server: deploy (local files), invoke, logs, ls, get, versions, rollback, rm
    #[command(name = "fn", visible_alias = "function")]
    Function(function::FunctionArgs),
    /// The workspace's members and their roles (ls, add, set, rm, key) on a running server.
    #[command(visible_alias = "member")]
    Members(team::MembersArgs),
    /// The workspace's audit log: every change, who made it and from where (owners, admins).
    Audit(team::AuditArgs),
    /// What the workspace used: vCPU-seconds, GiB-seconds, storage GiB-hours, egress,
    /// invocations over a window (--from/--to), by --group-by, as a table, --csv or --json
    Usage(usage::UsageArgs),
    /// Helper processes of the server.
    /// Serve the Model Context Protocol over stdio: PandaStack's tools for an MCP client
    /// (PANDASTACK_API_KEY, PANDASTACK_BASE_URL).
    Mcp(mcp::McpArgs),
    #[command(hide = true)]
    Internal(internal::InternalArgs),
}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Doctor(args) => doctor::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Host(args) => host::run(args).await,
        Command::Cluster(args) => cluster::run(args).await,
        Command::Keys(args) => keys::run(args).await,
        Command::Usage(args) => usage::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Server(args) => server::run(*args).await,
        Command::Agent(args) => agent::run(*args).await,
        Command::Template(args) => template::run(args).await,
        Command::Auth(args) => auth::run(args).await,
        Command::Sandbox(args) => sandbox::run(args).await,
        Command::Volume(args) => volume::run(args).await,
        Command::Db(args) => db::run(args).await,
        Command::App(args) => app::run(args).await,
        Command::Cron(args) => cron::run(args).await,
        Command::Function(args) => function::run(args).await,
        Command::Mcp(args) => mcp::run(args).await,
        Command::Members(args) => team::run_members(args).await,
        Command::Audit(args) => team::run_audit(args).await,
        Command::Internal(args) => tokio::task::spawn_blocking(move || internal::run(args)).await?,
    }
}
