//! `pandastack app …` (alias `apps`): apps on a running server through the `/v1` API — create
//! (from a git repository; follows the first deploy's log and prints the app's URL), deploy
//! (a git ref, or a local directory packed as a gzip tarball and uploaded), logs (the running
//! app's output or a deploy's log, `--follow`), rollback, ls, get, deploys and rm.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use pandastack_client::types::{
    App, AppBuild, AppGit, AppStart, CreateAppRequest, CreateDeployRequest, Deploy, DeployState,
    RollbackRequest,
};
use pandastack_client::{Client, LogEvent};

use super::client_util::{client, parse_pairs, print_json, run_reported, ConnArgs, Spinner, Table};

/// The largest tarball the server takes (`MAX_UPLOAD_BYTES` of the control plane).
const MAX_UPLOAD_BYTES: u64 = 512 << 20;

/// What `deploy --dir` leaves out, at any depth.
const SKIPPED: [&str; 2] = [".git", "node_modules"];

#[derive(Debug, clap::Args)]
pub struct AppArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: AppCmd,
}

#[derive(Debug, clap::Subcommand)]
enum AppCmd {
    /// Create an app from a git repository and deploy it: follows the first deploy's log (on
    /// stderr) until it ends and prints the app's URL (`--detach`: at once).
    Create(Box<CreateArgs>),
    /// Deploy an app again: its git ref (or `--ref`), or a local directory (`--dir`, packed
    /// without .git and node_modules); follows the log and exits 1 if the deploy fails.
    Deploy(DeployArgs),
    /// Print the running app's output, or a deploy's log (`--deploy ID`); `--follow` streams.
    Logs(LogsArgs),
    /// Put an earlier version back (default: the newest standby one) without a rebuild.
    Rollback(RollbackArgs),
    /// List apps.
    Ls(Json),
    /// Show one app.
    Get(NameJson),
    /// List an app's deploys, newest first.
    Deploys(DeploysArgs),
    /// Delete apps: every version's VM, their deploys and logs.
    Rm(RmArgs),
}

#[derive(Debug, clap::Args)]
struct Json {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct NameJson {
    /// App name or id.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// How a command that queues a deploy waits for it.
#[derive(Debug, Clone, Copy, clap::Args)]
struct FollowArgs {
    /// Return once the deploy is queued instead of following its log.
    #[arg(long)]
    detach: bool,
    /// Longest to follow the deploy (the first deploy on a server builds the `app` template:
    /// minutes); the deploy goes on on the server after that.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout: u64,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// App name, also its host name (`<name>.<domain>`): 1-40 of [a-z0-9-], starting with a
    /// letter.
    name: String,
    /// Repository to deploy: https://, http://, ssh://, git:// or file:// URL, or an absolute
    /// path on the server's host.
    #[arg(long, value_name = "URL")]
    git: String,
    /// Branch, tag or commit to deploy (default main); pushes to this branch deploy.
    #[arg(long = "ref", value_name = "REF")]
    git_ref: Option<String>,
    /// An environment variable of the build and the running app (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Like --env, but the API never shows its value (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    secret: Vec<String>,
    /// Build command run after the install (default: what detection chose).
    #[arg(long, value_name = "CMD")]
    build_command: Option<String>,
    /// Directory of a static build's output, served as files.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<String>,
    /// Command that serves HTTP on $PORT (default: what detection chose).
    #[arg(long, value_name = "CMD")]
    start_command: Option<String>,
    /// Port the app listens on (also in $PORT).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// The subdirectory of the repository that is the app (a monorepo's apps/web).
    #[arg(long, value_name = "DIR")]
    root_dir: Option<String>,
    /// Memory of the app's VM in MiB: a multiple of 256 from 256 to 16384 (default 1024).
    #[arg(long, value_name = "MB")]
    memory_mb: Option<u32>,
    /// 0 (default): hibernate when idle and wake on the next request; 1: always running.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1))]
    min_instances: Option<u32>,
    /// Seconds without requests before an app with --min-instances 0 hibernates (default 300).
    #[arg(long, value_name = "SECONDS")]
    idle_seconds: Option<u64>,
    /// Path the health check asks for (default /); 2xx or 3xx is healthy.
    #[arg(long, value_name = "PATH")]
    health_path: Option<String>,
    /// A custom domain the app also answers at (repeat for more); point its DNS at the proxy.
    #[arg(long = "domain", value_name = "NAME")]
    domains: Vec<String>,
    /// Create the app without deploying it.
    #[arg(long)]
    no_deploy: bool,
    #[command(flatten)]
    follow: FollowArgs,
    /// Print the app as JSON instead of its URL.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DeployArgs {
    /// App name or id.
    name: String,
    /// Branch, tag or commit to deploy (default: the app's ref).
    #[arg(long = "ref", value_name = "REF", conflicts_with = "dir")]
    git_ref: Option<String>,
    /// Deploy this local directory instead of the repository (packed as a gzip tarball,
    /// without .git and node_modules; regular files and directories only).
    #[arg(long, value_name = "PATH")]
    dir: Option<PathBuf>,
    #[command(flatten)]
    follow: FollowArgs,
    /// Print the deploy as JSON instead of the app's URL.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct LogsArgs {
    /// App name or id.
    name: String,
    /// A deploy's log (fetch, plan, install, build, health check) instead of the app's output.
    #[arg(long, value_name = "ID")]
    deploy: Option<String>,
    /// Stream: the output so far, then everything written next (a deploy's log: until the
    /// deploy ends).
    #[arg(short, long)]
    follow: bool,
}

#[derive(Debug, clap::Args)]
struct RollbackArgs {
    /// App name or id.
    name: String,
    /// The deploy to go back to (default: the newest standby one).
    #[arg(long, value_name = "DEPLOY_ID")]
    to: Option<String>,
    /// Print the deploy as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct DeploysArgs {
    /// App name or id.
    name: String,
    /// Show at most this many (the newest); default all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// App names or ids.
    #[arg(required = true)]
    names: Vec<String>,
}

pub async fn run(args: AppArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

async fn dispatch(c: Client, cmd: AppCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        AppCmd::Create(a) => return create(&c, *a).await,
        AppCmd::Deploy(a) => return deploy(&c, a).await,
        AppCmd::Logs(a) => logs(&c, a).await?,
        AppCmd::Rollback(a) => {
            let req = RollbackRequest { deploy_id: a.to };
            let d = {
                let _s = Spinner::start("rolling back");
                c.rollback_app(&a.name, &req).await?
            };
            if a.json {
                print_json(&d)?;
            } else {
                println!(
                    "{}: deploy #{} ({}) is {}",
                    d.app,
                    d.number,
                    d.id,
                    d.state.as_str()
                );
            }
        }
        AppCmd::Ls(a) => {
            let all = c.list_all_apps().await?;
            APPS.print(&all, a.json)?;
        }
        AppCmd::Get(a) => show(&c.get_app(&a.name).await?, a.json)?,
        AppCmd::Deploys(a) => {
            let all = match a.limit {
                Some(n) => c.list_deploys(&a.name, Some(n), None).await?.data,
                None => c.list_all_deploys(&a.name).await?,
            };
            DEPLOYS.print(&all, a.json)?;
        }
        AppCmd::Rm(a) => return rm(&c, a).await,
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(c: &Client, a: CreateArgs) -> anyhow::Result<ExitCode> {
    let build = (a.build_command.is_some() || a.output_dir.is_some()).then(|| AppBuild {
        command: a.build_command.clone(),
        output_dir: a.output_dir.clone(),
    });
    let start = (a.start_command.is_some() || a.port.is_some()).then(|| AppStart {
        command: a.start_command.clone(),
        port: a.port,
    });
    let req = CreateAppRequest {
        name: a.name.clone(),
        git: AppGit {
            url: a.git.clone(),
            git_ref: a.git_ref.clone(),
        },
        env: parse_pairs("env", &a.env)?,
        secrets: parse_pairs("secret", &a.secret)?,
        build,
        start,
        root_dir: a.root_dir.clone(),
        memory_mb: a.memory_mb,
        min_instances: a.min_instances,
        idle_seconds: a.idle_seconds,
        health_path: a.health_path.clone(),
        deploy: a.no_deploy.then_some(false),
        domains: a.domains.clone(),
    };
    let app = {
        let _s = Spinner::start("creating app");
        c.create_app(&req).await?
    };
    if a.no_deploy {
        eprintln!("app {} created (no deploy)", app.name);
        return print_app(&app, a.json);
    }
    // The first deploy is the newest one.
    let first = c.list_deploys(&app.name, Some(1), None).await?.data;
    let Some(first) = first.into_iter().next() else {
        eprintln!("app {} created; no deploy was queued", app.name);
        return print_app(&app, a.json);
    };
    eprintln!(
        "app {} created; deploy #{} ({}) of {} queued",
        app.name, first.number, first.id, first.git_ref
    );
    if a.follow.detach {
        eprintln!("{}", follow_hint(&app.name, &first.id));
        return print_app(&app, a.json);
    }
    let d = follow(c, &app.name, &first, a.follow.timeout).await?;
    let app = c.get_app(&app.name).await?;
    if a.json {
        print_json(&app)?;
    }
    Ok(outcome(&app, &d, a.json))
}

async fn deploy(c: &Client, a: DeployArgs) -> anyhow::Result<ExitCode> {
    let queued = match &a.dir {
        Some(dir) => {
            let tarball = pack_dir(dir).await?;
            let size = std::fs::metadata(tarball.path())
                .context("cannot read the packed tarball")?
                .len();
            if size > MAX_UPLOAD_BYTES {
                anyhow::bail!(
                    "{} packs to {} MiB; the server takes at most {} MiB (leave build outputs \
                     and large assets out of the directory)",
                    dir.display(),
                    size >> 20,
                    MAX_UPLOAD_BYTES >> 20
                );
            }
            let _s = Spinner::start(&format!("uploading {} KiB", size.div_ceil(1024)));
            c.deploy_app_tarball_file(&a.name, tarball.path()).await?
        }
        None => {
            let req = CreateDeployRequest {
                git_ref: a.git_ref.clone(),
            };
            c.deploy_app(&a.name, &req).await?
        }
    };
    eprintln!(
        "deploy #{} ({}) of {} queued",
        queued.number, queued.id, queued.git_ref
    );
    if a.follow.detach {
        eprintln!("{}", follow_hint(&queued.app, &queued.id));
        if a.json {
            print_json(&queued)?;
        } else {
            println!("{}", queued.id);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let d = follow(c, &queued.app, &queued, a.follow.timeout).await?;
    let app = c.get_app(&queued.app).await?;
    if a.json {
        print_json(&d)?;
    }
    Ok(outcome(&app, &d, a.json))
}

fn follow_hint(app: &str, deploy: &str) -> String {
    format!("follow it with `pandastack app logs {app} --deploy {deploy} --follow`")
}

/// Prints a deploy's log on stderr until it ends (falling back to polling when the stream
/// breaks) and returns the deploy in its final state.
async fn follow(c: &Client, app: &str, d: &Deploy, timeout_secs: u64) -> anyhow::Result<Deploy> {
    let timeout = Duration::from_secs(timeout_secs);
    let start = tokio::time::Instant::now();
    let streamed = tokio::time::timeout(timeout, async {
        let mut stream = c.follow_deploy_logs(app, &d.id).await?;
        while let Some(ev) = stream.next().await? {
            match ev {
                LogEvent::Log(t) => {
                    let mut err = std::io::stderr().lock();
                    let _ = err.write_all(t.as_bytes());
                    let _ = err.flush();
                }
                LogEvent::End(_) => break,
            }
        }
        Ok::<_, pandastack_client::Error>(())
    })
    .await;
    match streamed {
        Ok(Ok(())) => {}
        // The app or deploy is gone, or the key is wrong: polling would not help.
        Ok(Err(e)) if e.api().is_some() => return Err(e.into()),
        Ok(Err(e)) => eprintln!("(the log stream broke: {e}; waiting for the deploy to end)"),
        Err(_) => anyhow::bail!(
            "deploy #{} ({}) of app {app} did not end within {timeout_secs}s; it goes on on the \
             server ({})",
            d.number,
            d.id,
            follow_hint(app, &d.id)
        ),
    }
    let left = timeout
        .saturating_sub(start.elapsed())
        .max(Duration::from_secs(1));
    Ok(c.wait_for_deploy(app, &d.id, left).await?)
}

/// Prints what a followed deploy came to: the app's URL when it is live, its error otherwise
/// (then exit 1).
fn outcome(app: &App, d: &Deploy, json: bool) -> ExitCode {
    if d.state == DeployState::Live {
        if !json {
            println!("{}", app.url);
        }
        eprintln!("deploy #{} ({}) is live", d.number, d.id);
        return ExitCode::SUCCESS;
    }
    let why = match (d.state, d.error.as_deref()) {
        (_, Some(e)) => e.to_owned(),
        (DeployState::Superseded, None) => "a newer deploy replaced it before it ran".to_owned(),
        (_, None) => "no reason given".to_owned(),
    };
    eprintln!(
        "error: deploy #{} ({}) of app {} {}: {why}",
        d.number,
        d.id,
        d.app,
        d.state.as_str()
    );
    if let Some(live) = &app.live_deploy {
        eprintln!("the live version is still deploy {live} at {}", app.url);
    }
    eprintln!(
        "hint: the whole log: `pandastack app logs {} --deploy {}`",
        d.app, d.id
    );
    ExitCode::FAILURE
}

fn print_app(app: &App, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        print_json(app)?;
    } else {
        println!("{}", app.url);
        for d in &app.domains {
            let tls = serde_json::to_value(d.tls)?;
            println!("{} (tls: {})", d.name, tls.as_str().unwrap_or("?"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn logs(c: &Client, a: LogsArgs) -> anyhow::Result<()> {
    if !a.follow {
        let text = match &a.deploy {
            Some(id) => c.deploy_logs(&a.name, id).await?,
            None => c.app_logs(&a.name).await?,
        };
        std::io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(());
    }
    let mut stream = match &a.deploy {
        Some(id) => c.follow_deploy_logs(&a.name, id).await?,
        None => c.follow_app_logs(&a.name).await?,
    };
    while let Some(ev) = stream.next().await? {
        match ev {
            LogEvent::Log(t) => {
                let mut o = std::io::stdout().lock();
                o.write_all(t.as_bytes())?;
                o.flush()?;
            }
            LogEvent::End(reason) => {
                eprintln!("(log ended: {reason})");
                break;
            }
        }
    }
    Ok(())
}

/// Deletes every app named; reports each failure and exits 1 if any failed.
async fn rm(c: &Client, a: RmArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for name in &a.names {
        match c.delete_app(name).await {
            Ok(()) => println!("{name}"),
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

/// Packs `dir` as a gzip tarball in a temporary file, without `.git` and `node_modules` (at
/// any depth), with the system's `tar` (GNU tar or bsdtar).
async fn pack_dir(dir: &Path) -> anyhow::Result<tempfile::NamedTempFile> {
    let meta =
        std::fs::metadata(dir).with_context(|| format!("--dir {}: cannot read", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("--dir {}: not a directory", dir.display());
    }
    let out = tempfile::Builder::new()
        .prefix("pandastack-app-")
        .suffix(".tar.gz")
        .tempfile()
        .context("cannot create a temporary file for the tarball")?;
    let mut cmd = tokio::process::Command::new("tar");
    for s in SKIPPED {
        cmd.arg(format!("--exclude={s}"));
    }
    cmd.arg("-czf")
        .arg(out.path())
        .arg("-C")
        .arg(dir)
        .arg(".")
        // bsdtar on macOS: no AppleDouble `._*` files.
        .env("COPYFILE_DISABLE", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let res = cmd
        .output()
        .await
        .context("cannot run `tar` to pack the directory (is it installed?)")?;
    if !res.status.success() {
        anyhow::bail!(
            "tar could not pack {}: {}",
            dir.display(),
            String::from_utf8_lossy(&res.stderr).trim()
        );
    }
    Ok(out)
}

pub(super) fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn instance(a: &App) -> String {
    opt(a.instance_state.map(|s| s.as_str()))
}

fn app_row(a: &App) -> Vec<String> {
    vec![
        a.name.clone(),
        a.url.clone(),
        opt(a.live_deploy.as_deref()),
        instance(a),
        a.memory_mb.to_string(),
        a.min_instances.to_string(),
        a.created_at.clone(),
    ]
}

/// At most `n` characters of `s`, with `…` when cut.
pub(super) fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn deploy_row(d: &Deploy) -> Vec<String> {
    vec![
        d.number.to_string(),
        d.id.clone(),
        d.git_ref.clone(),
        opt(d
            .commit
            .as_deref()
            .map(|c| c.chars().take(12).collect::<String>())),
        d.state.as_str().to_owned(),
        d.created_at.clone(),
        opt(d
            .error
            .as_deref()
            .map(|e| cut(e.lines().next().unwrap_or(""), 60))),
    ]
}

/// One app, as JSON or as `field: value` lines.
fn show(a: &App, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(a);
    }
    let pairs = |m: &std::collections::BTreeMap<String, String>| {
        if m.is_empty() {
            "-".to_owned()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let secrets = if a.secret_names.is_empty() {
        "-".to_owned()
    } else {
        a.secret_names.join(" ")
    };
    for (k, val) in [
        ("id", a.id.clone()),
        ("name", a.name.clone()),
        ("url", a.url.clone()),
        ("git", a.git.url.clone()),
        ("ref", opt(a.git.git_ref.as_deref())),
        ("env", pairs(&a.env)),
        ("secrets", secrets),
        ("build_command", opt(a.build.command.as_deref())),
        ("output_dir", opt(a.build.output_dir.as_deref())),
        ("start_command", opt(a.start.command.as_deref())),
        ("port", opt(a.start.port)),
        ("root_dir", opt(a.root_dir.as_deref())),
        ("memory_mb", a.memory_mb.to_string()),
        ("min_instances", a.min_instances.to_string()),
        ("idle_seconds", a.idle_seconds.to_string()),
        ("health_path", a.health_path.clone()),
        ("live_deploy", opt(a.live_deploy.as_deref())),
        ("instance", instance(a)),
        ("webhook_secret", a.webhook_secret.clone()),
        ("deploy_key", a.deploy_key.clone()),
        ("created_at", a.created_at.clone()),
        ("updated_at", a.updated_at.clone()),
    ] {
        println!("{k:<15} {val}");
    }
    Ok(())
}

/// What `app ls` shows (`--json`: the objects).
const APPS: Table<App> = Table {
    header: &[
        "NAME",
        "URL",
        "LIVE",
        "INSTANCE",
        "MEMORY_MB",
        "MIN",
        "CREATED",
    ],
    row: app_row,
};

/// What `app deploys` shows (`--json`: the objects).
const DEPLOYS: Table<Deploy> = Table {
    header: &["#", "ID", "REF", "COMMIT", "STATE", "CREATED", "ERROR"],
    row: deploy_row,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pack_dir_leaves_git_and_node_modules_out() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for f in [
            "package.json",
            "src/index.js",
            ".git/HEAD",
            "node_modules/x/index.js",
            "web/node_modules/y.js",
            "web/.gitignore",
        ] {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), f).unwrap();
        }
        let t = pack_dir(p).await.unwrap();
        let bytes = std::fs::read(t.path()).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip");
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        let mut files: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.header().entry_type().is_file())
            .map(|e| {
                let p = e.path().unwrap().to_string_lossy().into_owned();
                p.trim_start_matches("./").to_owned()
            })
            .collect();
        files.sort();
        assert_eq!(files, ["package.json", "src/index.js", "web/.gitignore"]);
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(pack_dir(f.path()).await.is_err());
        assert!(pack_dir(Path::new("/nonexistent/dir")).await.is_err());
    }

    #[test]
    fn cuts_and_rows() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(opt(None::<u16>), "-");
        assert_eq!(opt(Some(3000u16)), "3000");
    }
}
