//! `pandastack sandbox …` (alias `sb`): sandboxes on a running server through the `/v1` API —
//! create, list, inspect, lifecycle, fork, snapshot and kill here; exec, copy and logs in
//! `sandbox_io.rs`; the interactive shell in `shell.rs`.

use std::process::ExitCode;

use pandastack_client::types::{
    CreateSandboxRequest, ForkRequest, OnHostLoss, OnTimeout, Sandbox, SandboxState,
};
use pandastack_client::{Client, ListSandboxes};

use super::client_util::{
    client, parse_pairs, print_json, print_table, run_reported, ConnArgs, Spinner,
};
use super::{sandbox_io, sandbox_top, shell};

#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: SandboxCmd,
}

#[derive(Debug, clap::Subcommand)]
enum SandboxCmd {
    /// Create a sandbox and print its id.
    Create(CreateArgs),
    /// List sandboxes.
    Ls(LsArgs),
    /// Show one sandbox.
    Info(IdJson),
    /// Run a command, streaming its output; exits with the command's exit code.
    Exec(sandbox_io::ExecArgs),
    /// Run code in the sandbox's code interpreter (Python, JavaScript, TypeScript or Bash):
    /// variables live on between runs of a context. Exits 1 when the code ended with an error.
    RunCode(sandbox_io::RunCodeArgs),
    /// Open an interactive terminal in a sandbox.
    Shell(shell::ShellArgs),
    /// Copy a file: `cp LOCAL ID:/path` or `cp ID:/path LOCAL`.
    Cp(sandbox_io::CpArgs),
    /// Fork a running sandbox into N children; prints their ids.
    Fork(ForkArgs),
    /// Snapshot a sandbox (it keeps running); prints the snapshot id.
    Snapshot(IdJson),
    /// Freeze a sandbox's vCPUs in place.
    Pause(IdJson),
    /// Resume a paused sandbox.
    Resume(IdJson),
    /// Save a sandbox to disk and stop its VM.
    Hibernate(IdJson),
    /// Start a hibernated sandbox again.
    Wake(IdJson),
    /// Move a sandbox to another host of a cluster, with its memory, processes and files.
    Migrate(MigrateArgs),
    /// Delete sandboxes.
    Kill(KillArgs),
    /// Print a sandbox's console log (`-f` to follow).
    Logs(sandbox_io::LogsArgs),
    /// Print the changes under a directory of a sandbox as they happen, a line each (`-r` for
    /// its subdirectories too); runs until interrupted or the watch ends.
    Watch(sandbox_io::WatchArgs),
    /// Print a sandbox's resource use over time as JSON (`--since 1h --step 60`).
    Metrics(sandbox_top::MetricsArgs),
    /// Show running sandboxes' CPU, memory, disk and network use, refreshed every few seconds.
    Top(sandbox_top::TopArgs),
    /// Print the preview URL of a port inside a sandbox (and its access token while private).
    Url(UrlArgs),
    /// Make a port public (reachable without a token) or, with `--private`, private again.
    Expose(ExposeArgs),
    /// Print a signed URL that downloads (or, with `--put`, uploads) one file without an API
    /// key until it expires.
    FileUrl(FileUrlArgs),
}

#[derive(Debug, clap::Args)]
struct FileUrlArgs {
    /// Sandbox id.
    id: String,
    /// Absolute guest path.
    path: String,
    /// A URL that uploads (`PUT`) instead of one that downloads (`GET`).
    #[arg(long)]
    put: bool,
    /// Seconds until it expires (1 to 604800: 7 days).
    #[arg(long, default_value_t = 3600)]
    expires_in: u64,
    /// Print JSON (url, method, path, expires_at).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct UrlArgs {
    /// Sandbox id.
    id: String,
    /// TCP port inside the sandbox.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Print JSON (url, port, public, token).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ExposeArgs {
    /// Sandbox id.
    id: String,
    /// TCP port inside the sandbox.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Make the port private again.
    #[arg(long)]
    private: bool,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// Template name [server default: base].
    #[arg(long, short)]
    template: Option<String>,
    /// Time to live in seconds.
    #[arg(long, value_name = "SECONDS")]
    ttl: Option<u64>,
    /// Idle timeout in seconds.
    #[arg(long, value_name = "SECONDS")]
    idle_timeout: Option<u64>,
    /// What happens on timeout.
    #[arg(long, value_parser = ["kill", "hibernate"])]
    on_timeout: Option<String>,
    /// What becomes of it if its host is lost (a cluster's): `lost` waits for the host,
    /// `restore` runs it again on another host from its newest durable snapshot.
    #[arg(long, value_parser = ["lost", "restore"])]
    on_host_loss: Option<String>,
    /// Metadata `key=value` (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// Environment variable `NAME=VALUE` for every command (repeatable).
    #[arg(long = "env", short, value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Start from this snapshot instead of the template.
    #[arg(long, value_name = "ID")]
    from_snapshot: Option<String>,
    /// Mount a volume: `NAME:/path` read-write, `NAME:/path:ro` a read-only copy (repeatable, up
    /// to 3).
    #[arg(long = "volume", short = 'v', value_name = "NAME:/PATH[:ro]")]
    volumes: Vec<String>,
    /// Print the sandbox as JSON instead of its id.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    /// Only sandboxes in this state.
    #[arg(long, value_parser = ["starting", "running", "paused", "hibernated", "stopped", "failed"])]
    state: Option<String>,
    /// Only sandboxes with this metadata `key=value` (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct MigrateArgs {
    /// Sandbox id.
    id: String,
    /// The host to move it to (default: the one placement chooses).
    #[arg(long)]
    host: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct IdJson {
    /// Sandbox id.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ForkArgs {
    /// Sandbox id.
    id: String,
    /// Number of children (1-16).
    #[arg(long, short = 'n', default_value_t = 1)]
    count: u32,
    /// Metadata `key=value` for the children (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// Keep the fork's snapshot (by default it is deleted with the last child).
    #[arg(long)]
    keep_snapshot: bool,
    /// In a cluster, put the children on other hosts than the parent's.
    #[arg(long)]
    spread: bool,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct KillArgs {
    /// Sandbox ids.
    #[arg(required = true)]
    ids: Vec<String>,
}

pub async fn run(args: SandboxArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

async fn dispatch(c: Client, cmd: SandboxCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        SandboxCmd::Create(a) => create(&c, a).await?,
        SandboxCmd::Ls(a) => ls(&c, a).await?,
        SandboxCmd::Info(a) => {
            let sb = c.get_sandbox(&a.id).await?;
            show(&sb, a.json)?;
        }
        SandboxCmd::Exec(a) => return sandbox_io::exec(&c, a).await,
        SandboxCmd::RunCode(a) => return sandbox_io::run_code(&c, a).await,
        SandboxCmd::Shell(a) => return shell::run(&c, a).await,
        SandboxCmd::Cp(a) => sandbox_io::cp(&c, a).await?,
        SandboxCmd::FileUrl(a) => {
            let method = if a.put {
                pandastack_client::types::FileUrlMethod::Put
            } else {
                pandastack_client::types::FileUrlMethod::Get
            };
            let url = c.file_url(&a.id, &a.path, method, a.expires_in).await?;
            if a.json {
                print_json(&url)?;
            } else {
                println!("{}", url.url);
            }
        }
        SandboxCmd::Fork(a) => fork(&c, a).await?,
        SandboxCmd::Snapshot(a) => {
            let snap = {
                let _s = Spinner::start("snapshotting");
                c.create_snapshot(&a.id).await?
            };
            if a.json {
                print_json(&snap)?;
            } else {
                println!("{}", snap.id);
            }
        }
        SandboxCmd::Pause(a) => lifecycle(&c, a, "pause").await?,
        SandboxCmd::Resume(a) => lifecycle(&c, a, "resume").await?,
        SandboxCmd::Hibernate(a) => lifecycle(&c, a, "hibernate").await?,
        SandboxCmd::Wake(a) => lifecycle(&c, a, "wake").await?,
        SandboxCmd::Migrate(a) => {
            let sb = {
                let _s = Spinner::start("moving");
                c.migrate(&a.id, a.host.as_deref()).await?
            };
            if a.json {
                print_json(&sb)?;
            } else {
                println!("{} {} {}", sb.id, sb.state.as_str(), sb.host);
            }
        }
        SandboxCmd::Kill(a) => return kill(&c, a).await,
        SandboxCmd::Logs(a) => sandbox_io::logs(&c, a).await?,
        SandboxCmd::Watch(a) => sandbox_io::watch(&c, a).await?,
        SandboxCmd::Metrics(a) => sandbox_top::metrics(&c, a).await?,
        SandboxCmd::Top(a) => sandbox_top::top(&c, a).await?,
        SandboxCmd::Url(a) => {
            let p = c.port_url(&a.id, a.port).await?;
            if a.json {
                print_json(&p)?;
            } else {
                println!("{}", p.url);
                if !p.public {
                    eprintln!(
                        "private: send `{}: {}` (or open {}?pandastack_access={} once)",
                        pandastack_client::types::ACCESS_TOKEN_HEADER,
                        p.token,
                        p.url,
                        p.token
                    );
                }
            }
        }
        SandboxCmd::Expose(a) => {
            let p = c.set_port_public(&a.id, a.port, !a.private).await?;
            println!(
                "{} ({})",
                p.url,
                if p.public { "public" } else { "private" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(c: &Client, a: CreateArgs) -> anyhow::Result<()> {
    let mut req = CreateSandboxRequest {
        snapshot_id: a.from_snapshot,
        ttl_seconds: a.ttl,
        idle_timeout_seconds: a.idle_timeout,
        metadata: parse_pairs("meta", &a.meta)?,
        env: parse_pairs("env", &a.env)?,
        volumes: a
            .volumes
            .iter()
            .map(|v| super::volume::parse_mount(v))
            .collect::<anyhow::Result<_>>()?,
        ..Default::default()
    };
    if let Some(t) = a.template {
        req.template = t;
    }
    if a.on_timeout.as_deref() == Some("hibernate") {
        req.on_timeout = OnTimeout::Hibernate;
    }
    if a.on_host_loss.as_deref() == Some("restore") {
        req.on_host_loss = OnHostLoss::Restore;
    }
    let sb = {
        let _s = Spinner::start("creating sandbox");
        c.create_sandbox(&req).await?
    };
    if a.json {
        print_json(&sb)
    } else {
        println!("{}", sb.id);
        Ok(())
    }
}

async fn ls(c: &Client, a: LsArgs) -> anyhow::Result<()> {
    let q = ListSandboxes {
        state: a.state.as_deref().and_then(SandboxState::parse),
        metadata: parse_pairs("meta", &a.meta)?,
        ..Default::default()
    };
    let all = c.list_all_sandboxes(&q).await?;
    if a.json {
        return print_json(&all);
    }
    let rows: Vec<Vec<String>> = all
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.template.clone(),
                s.state.as_str().to_owned(),
                s.created_at.clone(),
                s.expires_at.clone().unwrap_or_else(|| "-".into()),
                meta_text(s),
            ]
        })
        .collect();
    print_table(
        &["ID", "TEMPLATE", "STATE", "CREATED", "EXPIRES", "METADATA"],
        &rows,
    );
    Ok(())
}

fn meta_text(s: &Sandbox) -> String {
    s.metadata
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn volumes_text(s: &Sandbox) -> String {
    if s.volumes.is_empty() {
        return "-".into();
    }
    s.volumes
        .iter()
        .map(|v| {
            format!(
                "{}:{}{}",
                v.name,
                v.path,
                if v.read_only { ":ro" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One sandbox, as JSON or as `field: value` lines.
fn show(sb: &Sandbox, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(sb);
    }
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let secs = |v: Option<u64>| v.map(|s| format!("{s}s")).unwrap_or_else(|| "-".into());
    for (k, v) in [
        ("id", sb.id.clone()),
        ("template", sb.template.clone()),
        ("state", sb.state.as_str().to_owned()),
        ("cpu", sb.cpu.to_string()),
        ("memory_mb", sb.memory_mb.to_string()),
        ("created_at", sb.created_at.clone()),
        ("expires_at", opt(&sb.expires_at)),
        ("ttl", secs(sb.ttl_seconds)),
        ("idle_timeout", secs(sb.idle_timeout_seconds)),
        ("on_timeout", sb.on_timeout.as_str().to_owned()),
        ("on_host_loss", sb.on_host_loss.as_str().to_owned()),
        ("boot", format!("{} ms ({})", sb.boot_ms, sb.boot_mode)),
        ("snapshot_id", opt(&sb.snapshot_id)),
        ("host", sb.host.clone()),
        ("metadata", meta_text(sb)),
        ("volumes", volumes_text(sb)),
    ] {
        println!("{k:<13} {v}");
    }
    Ok(())
}

async fn fork(c: &Client, a: ForkArgs) -> anyhow::Result<()> {
    let req = ForkRequest {
        count: a.count,
        metadata: parse_pairs("meta", &a.meta)?,
        keep_snapshot: a.keep_snapshot,
        spread: a.spread,
    };
    let out = {
        let _s = Spinner::start("forking");
        c.fork(&a.id, &req).await?
    };
    if a.json {
        return print_json(&out);
    }
    for child in &out.children {
        println!("{}", child.id);
    }
    Ok(())
}

async fn lifecycle(c: &Client, a: IdJson, verb: &str) -> anyhow::Result<()> {
    let sb = {
        let _s = match verb {
            "hibernate" => Spinner::start("hibernating"),
            "wake" => Spinner::start("waking"),
            _ => Spinner::start(verb),
        };
        match verb {
            "pause" => c.pause(&a.id).await?,
            "resume" => c.resume(&a.id).await?,
            "hibernate" => c.hibernate(&a.id).await?,
            _ => c.wake(&a.id).await?,
        }
    };
    if a.json {
        print_json(&sb)
    } else {
        println!("{} {}", sb.id, sb.state.as_str());
        Ok(())
    }
}

/// Deletes every id given; reports each failure and exits 1 if any failed.
async fn kill(c: &Client, a: KillArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for id in &a.ids {
        match c.delete_sandbox(id).await {
            Ok(()) => println!("{id}"),
            Err(e) => {
                failed = true;
                super::client_util::report(&anyhow::Error::new(e), &c.config().base_url);
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
