//! `pandastack fn …` (alias `function`): functions on a running server through the `/v1` API —
//! deploy (creates the function from local files, or builds a new version of one that exists,
//! and waits for the build), invoke (prints the result, or the handler's error and traceback
//! and exits 1), logs (a version's build log), ls, get, versions, rollback and rm.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use pandastack_client::types::{
    CreateFunctionRequest, CreateVersionRequest, DeployState, Function, FunctionRollbackRequest,
    FunctionRuntime, FunctionVersion, Invocation, InvocationStatus, UpdateFunctionRequest,
    MAX_FUNCTION_SOURCE_BYTES,
};
use pandastack_client::Client;

use super::app::{cut, opt};
use super::client_util::{client, parse_pairs, print_json, run_reported, ConnArgs, Spinner, Table};

/// Directories `deploy --dir` leaves out, at any depth (besides hidden ones: `.git`, `.venv`…).
const SKIPPED_DIRS: [&str; 2] = ["node_modules", "__pycache__"];

#[derive(Debug, clap::Args)]
pub struct FunctionArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: FunctionCmd,
}

#[derive(Debug, clap::Subcommand)]
enum FunctionCmd {
    /// Deploy a function from local files: creates it, or builds a new version if it exists;
    /// waits until the version is live or failed (`--no-wait`: at once) and exits 1 if it
    /// failed.
    Deploy(DeployArgs),
    /// Call a function with an event (JSON, or text with --text): prints the handler's return
    /// value as JSON, or its error and traceback (then exits 1, also on a timeout).
    Invoke(InvokeArgs),
    /// Print the build log of the live version (or of --version N).
    Logs(LogsArgs),
    /// List functions.
    Ls(Json),
    /// Show one function.
    Get(NameJson),
    /// List a function's versions, newest first.
    Versions(VersionsArgs),
    /// Make an earlier version live again (default: the one before the live one); no rebuild.
    Rollback(RollbackArgs),
    /// Delete functions: their instances, versions and logs.
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
    /// Function name.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Runtime {
    Python,
    Node,
}

impl From<Runtime> for FunctionRuntime {
    fn from(r: Runtime) -> Self {
        match r {
            Runtime::Python => FunctionRuntime::Python,
            Runtime::Node => FunctionRuntime::Node,
        }
    }
}

#[derive(Debug, clap::Args)]
struct DeployArgs {
    /// Function name: 1-37 of [a-z0-9-], starting with a letter; its endpoint is
    /// `fn-<name>.<domain>`.
    name: String,
    /// Language of the handler (needed to create the function; a version keeps its runtime).
    #[arg(long, value_enum)]
    runtime: Option<Runtime>,
    /// `module.function`: `main.handler` is `handler` in main.py (Python), `index.handler` the
    /// export `handler` of index.js or index.mjs (Node.js). Default on create: main.handler
    /// (Python) or index.handler (Node.js); on a new version: the function's.
    #[arg(long, value_name = "MODULE.FUNCTION")]
    handler: Option<String>,
    /// Send the text files of this directory (hidden directories, node_modules and
    /// __pycache__ left out; files that are not UTF-8 text are skipped with a warning).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Send this file (repeatable), under its relative path as given (`src/app.py`), or under
    /// its file name when the path is absolute or goes up (`..`).
    #[arg(long = "file", value_name = "PATH", conflicts_with = "dir")]
    files: Vec<PathBuf>,
    /// requirements.txt (Python) or package.json (Node.js) to install in the build.
    #[arg(long, value_name = "FILE")]
    requirements: Option<PathBuf>,
    /// An environment variable of the build and of every call (repeatable; on a new version
    /// the ones given replace the function's).
    #[arg(long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Like --env, but the API never shows its value (repeatable).
    #[arg(long, value_name = "KEY=VALUE")]
    secret: Vec<String>,
    /// Per-call time limit, 1 to 900 (default 60): a call past it ends with status `timeout`.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Serve `fn-<name>.<domain>` to anyone (default: only `invoke` with an API key).
    #[arg(long)]
    public: bool,
    /// Return once the version is queued instead of waiting for its build.
    #[arg(long)]
    no_wait: bool,
    /// Longest to wait for the build (the first build on a server builds the `app` template:
    /// minutes); the build goes on on the server after that.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    wait_timeout: u64,
    /// Print the version as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct InvokeArgs {
    /// Function name.
    name: String,
    /// The event: JSON (`'{"n": 1}'`), or text with --text; none sends `null`.
    #[arg(value_name = "EVENT", conflicts_with = "data_file")]
    event: Option<String>,
    /// Read the event from this file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    data_file: Option<PathBuf>,
    /// Send the event as text: the handler gets a string.
    #[arg(long)]
    text: bool,
    /// Also print what the handler printed (its stdout and stderr), on stderr.
    #[arg(long)]
    logs: bool,
    /// Print the whole outcome as JSON (status, result, error, output, duration, cold).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct LogsArgs {
    /// Function name.
    name: String,
    /// The version whose build log to print (default: the live one, else the newest).
    #[arg(long, value_name = "N")]
    version: Option<u64>,
}

#[derive(Debug, clap::Args)]
struct VersionsArgs {
    /// Function name.
    name: String,
    /// Show at most this many (the newest); default all.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: Option<u32>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RollbackArgs {
    /// Function name.
    name: String,
    /// The version to make live (default: the one before the live one).
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// Print the version as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// Function names.
    #[arg(required = true)]
    names: Vec<String>,
}

pub async fn run(args: FunctionArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

async fn dispatch(c: Client, cmd: FunctionCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        FunctionCmd::Deploy(a) => return deploy(&c, a).await,
        FunctionCmd::Invoke(a) => return invoke(&c, a).await,
        FunctionCmd::Logs(a) => logs(&c, a).await?,
        FunctionCmd::Ls(a) => {
            let all = c.list_all_functions().await?;
            FUNCTIONS.print(&all, a.json)?;
        }
        FunctionCmd::Get(a) => show(&c.get_function(&a.name).await?, a.json)?,
        FunctionCmd::Versions(a) => {
            let all = match a.limit {
                Some(n) => c.list_function_versions(&a.name, Some(n), None).await?.data,
                None => c.list_all_function_versions(&a.name).await?,
            };
            VERSIONS.print(&all, a.json)?;
        }
        FunctionCmd::Rollback(a) => {
            let req = FunctionRollbackRequest { version: a.version };
            let v = {
                let _s = Spinner::start("rolling back");
                c.rollback_function(&a.name, &req).await?
            };
            if a.json {
                print_json(&v)?;
            } else {
                println!(
                    "{}: version {} is {}",
                    v.function,
                    v.version,
                    v.state.as_str()
                );
            }
        }
        FunctionCmd::Rm(a) => return rm(&c, a).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates the function, or posts a new version of it; then waits for the version's build
/// unless `--no-wait`.
async fn deploy(c: &Client, a: DeployArgs) -> anyhow::Result<ExitCode> {
    let files = match &a.dir {
        Some(dir) => read_dir_files(dir)?,
        None => read_files(&a.files)?,
    };
    let size: usize = files.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_FUNCTION_SOURCE_BYTES {
        anyhow::bail!(
            "the files come to {} KiB; a function takes at most {} MiB of source (install \
             dependencies with --requirements instead of sending them)",
            size.div_ceil(1024),
            MAX_FUNCTION_SOURCE_BYTES >> 20
        );
    }
    let dependencies = match &a.requirements {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("--requirements {}: cannot read", p.display()))?,
        ),
        None => None,
    };
    let env = parse_pairs("env", &a.env)?;
    let secrets = parse_pairs("secret", &a.secret)?;
    let existing = match c.get_function(&a.name).await {
        Ok(f) => Some(f),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let version = match existing {
        Some(f) => {
            if let Some(r) = a.runtime {
                let want = FunctionRuntime::from(r);
                if want != f.runtime {
                    anyhow::bail!(
                        "function {} runs {}; a version cannot change the runtime (delete the \
                         function and deploy it again)",
                        f.name,
                        f.runtime.as_str()
                    );
                }
            }
            if a.timeout.is_some() || a.public {
                let req = UpdateFunctionRequest {
                    timeout_seconds: a.timeout,
                    public: a.public.then_some(true),
                    ..Default::default()
                };
                c.update_function(&a.name, &req).await?;
            }
            let req = CreateVersionRequest {
                handler: a.handler.clone(),
                files,
                git: None,
                dependencies,
                env: (!env.is_empty()).then_some(env),
                secrets: (!secrets.is_empty()).then_some(secrets),
            };
            let v = {
                let _s = Spinner::start("uploading");
                c.create_function_version(&a.name, &req).await?
            };
            eprintln!("version {} of {} queued", v.version, v.function);
            v
        }
        None => {
            let Some(runtime) = a.runtime else {
                anyhow::bail!(
                    "function {} does not exist: give --runtime python|node to create it",
                    a.name
                );
            };
            if files.is_empty() {
                anyhow::bail!(
                    "function {} does not exist: give its files with --dir or --file",
                    a.name
                );
            }
            let handler = a.handler.clone().unwrap_or_else(|| {
                match runtime {
                    Runtime::Python => "main.handler",
                    Runtime::Node => "index.handler",
                }
                .to_owned()
            });
            let req = CreateFunctionRequest {
                name: a.name.clone(),
                runtime: runtime.into(),
                handler,
                files,
                git: None,
                dependencies,
                env,
                secrets,
                memory_mb: None,
                timeout_seconds: a.timeout,
                concurrency: None,
                max_instances: None,
                idle_seconds: None,
                public: a.public,
            };
            let f = {
                let _s = Spinner::start("creating function");
                c.create_function(&req).await?
            };
            // The first version is the newest one.
            let first = c.list_function_versions(&f.name, Some(1), None).await?.data;
            let Some(v) = first.into_iter().next() else {
                anyhow::bail!("function {} created, but no version was queued", f.name);
            };
            eprintln!("function {} created; version {} queued", f.name, v.version);
            v
        }
    };
    if a.no_wait {
        eprintln!(
            "follow it with `pandastack fn versions {}` and `pandastack fn logs {} --version {}`",
            version.function, version.function, version.version
        );
        if a.json {
            print_json(&version)?;
        } else {
            println!("{}", version.version);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let v = {
        let _s = Spinner::start(&format!(
            "building version {} of {}",
            version.version, version.function
        ));
        c.wait_for_function_version(
            &version.function,
            version.version,
            Duration::from_secs(a.wait_timeout),
        )
        .await?
    };
    if a.json {
        print_json(&v)?;
    }
    let f = c.get_function(&v.function).await?;
    Ok(outcome(&f, &v, a.json))
}

/// Prints what a version's build came to: its state, and its error when it did not go live
/// (then exit 1).
fn outcome(f: &Function, v: &FunctionVersion, json: bool) -> ExitCode {
    if !json {
        println!("{}: version {} {}", v.function, v.version, v.state.as_str());
    }
    if v.state == DeployState::Live {
        eprintln!(
            "call it with `pandastack fn invoke {} '{{}}'`{}",
            f.name,
            if f.public {
                format!(" or at {}", f.url)
            } else {
                String::new()
            }
        );
        return ExitCode::SUCCESS;
    }
    let why = v.error.as_deref().unwrap_or("no reason given");
    eprintln!(
        "error: version {} of function {} {}: {why}",
        v.version,
        v.function,
        v.state.as_str()
    );
    if let Some(live) = f.live_version {
        eprintln!("the live version is still {live}");
    }
    eprintln!(
        "hint: the whole build log: `pandastack fn logs {} --version {}`",
        v.function, v.version
    );
    ExitCode::FAILURE
}

/// Calls the function and prints the outcome; exits 1 unless the handler returned.
async fn invoke(c: &Client, a: InvokeArgs) -> anyhow::Result<ExitCode> {
    let raw = match (&a.event, &a.data_file) {
        (Some(e), _) => Some(e.clone()),
        (None, Some(p)) => Some(read_event_file(p)?),
        (None, None) => None,
    };
    let inv = match (raw, a.text) {
        (Some(t), true) => c.invoke_function_text(&a.name, t).await?,
        (raw, _) => {
            let event = parse_event(raw.as_deref())?;
            c.invoke_function(&a.name, &event).await?
        }
    };
    if a.logs {
        let mut err = std::io::stderr().lock();
        err.write_all(inv.stdout.as_bytes())?;
        err.write_all(inv.stderr.as_bytes())?;
        err.flush()?;
    }
    if a.json {
        print_json(&inv)?;
    } else if inv.status == InvocationStatus::Ok {
        print_json(&inv.result.clone().unwrap_or(serde_json::Value::Null))?;
    }
    Ok(invocation_outcome(&inv))
}

/// The exit code of an invocation; the handler's error (and its traceback) on stderr.
fn invocation_outcome(inv: &Invocation) -> ExitCode {
    if inv.status == InvocationStatus::Ok {
        return ExitCode::SUCCESS;
    }
    let how = match inv.status {
        InvocationStatus::Error => "raised".to_owned(),
        InvocationStatus::Timeout => "timed out".to_owned(),
        s => format!("ended {}", s.as_str()),
    };
    let version = inv
        .version
        .map_or_else(String::new, |v| format!(" (version {v})"));
    match &inv.error {
        Some(e) => {
            let tb = e.traceback.trim_end();
            if !tb.is_empty() {
                eprintln!("{tb}");
            }
            eprintln!(
                "error: function {}{version} {how}: {}: {}",
                inv.function, e.kind, e.message
            );
        }
        None => eprintln!("error: function {}{version} {how}", inv.function),
    }
    ExitCode::FAILURE
}

/// The event of `invoke` as JSON: none is `null`.
fn parse_event(raw: Option<&str>) -> anyhow::Result<serde_json::Value> {
    match raw {
        None => Ok(serde_json::Value::Null),
        Some(t) => serde_json::from_str(t)
            .context("the event is not JSON (send it as a string with --text)"),
    }
}

fn read_event_file(p: &Path) -> anyhow::Result<String> {
    if p == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("--data-file -: cannot read standard input as UTF-8 text")?;
        return Ok(s);
    }
    std::fs::read_to_string(p)
        .with_context(|| format!("--data-file {}: cannot read as UTF-8 text", p.display()))
}

async fn logs(c: &Client, a: LogsArgs) -> anyhow::Result<()> {
    let version = match a.version {
        Some(v) => v,
        None => match c.get_function(&a.name).await?.live_version {
            Some(v) => v,
            None => {
                let newest = c.list_function_versions(&a.name, Some(1), None).await?.data;
                let Some(v) = newest.into_iter().next() else {
                    anyhow::bail!("function {} has no versions", a.name);
                };
                eprintln!(
                    "(no live version; the newest is version {}, {})",
                    v.version,
                    v.state.as_str()
                );
                v.version
            }
        },
    };
    let text = c.function_version_logs(&a.name, version).await?;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    Ok(())
}

/// Deletes every function named; reports each failure and exits 1 if any failed.
async fn rm(c: &Client, a: RmArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for name in &a.names {
        match c.delete_function(name).await {
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

/// The text files under `dir` by relative path (`/`-separated), without hidden directories
/// and [`SKIPPED_DIRS`] at any depth; files that are not UTF-8 are skipped with a warning,
/// and so are links to directories.
fn read_dir_files(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let meta =
        std::fs::metadata(dir).with_context(|| format!("--dir {}: cannot read", dir.display()))?;
    if !meta.is_dir() {
        anyhow::bail!("--dir {}: not a directory", dir.display());
    }
    let mut files = BTreeMap::new();
    let mut pending = vec![(dir.to_owned(), String::new())];
    while let Some((path, prefix)) = pending.pop() {
        let entries =
            std::fs::read_dir(&path).with_context(|| format!("cannot list {}", path.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot list {}", path.display()))?;
            let p = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                eprintln!("warning: skipped {} (its name is not UTF-8)", p.display());
                continue;
            };
            let rel = format!("{prefix}{name}");
            // The server keeps `.pandastack` for the runtime it adds.
            if name.starts_with(".pandastack") {
                eprintln!("warning: skipped {rel} (.pandastack is the server's)");
                continue;
            }
            let ft = entry
                .file_type()
                .with_context(|| format!("cannot stat {}", p.display()))?;
            let is_dir = if ft.is_symlink() {
                std::fs::metadata(&p).map(|m| m.is_dir()).unwrap_or(false)
            } else {
                ft.is_dir()
            };
            if is_dir {
                if name.starts_with('.') || SKIPPED_DIRS.contains(&name.as_str()) {
                    continue;
                }
                if ft.is_symlink() {
                    eprintln!("warning: skipped {rel}/ (a link to a directory)");
                    continue;
                }
                pending.push((p, format!("{rel}/")));
                continue;
            }
            let bytes =
                std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?;
            match String::from_utf8(bytes) {
                Ok(text) => {
                    files.insert(rel, text);
                }
                Err(_) => eprintln!("warning: skipped {rel} (not UTF-8 text)"),
            }
        }
    }
    Ok(files)
}

/// The files named by `--file`, each under [`file_key`].
fn read_files(paths: &[PathBuf]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for p in paths {
        let key = file_key(p)?;
        let text = std::fs::read_to_string(p)
            .with_context(|| format!("--file {}: cannot read as UTF-8 text", p.display()))?;
        if files.insert(key.clone(), text).is_some() {
            anyhow::bail!("--file {}: a second file named {key}", p.display());
        }
    }
    Ok(files)
}

/// Where `--file p` goes in the function: `p` itself when relative and not going up (`./`
/// dropped, `/`-separated), else its file name.
fn file_key(p: &Path) -> anyhow::Result<String> {
    let mut parts = Vec::new();
    let mut plain = true;
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(s) => match s.to_str() {
                Some(s) => parts.push(s),
                None => anyhow::bail!("--file {}: the name is not UTF-8", p.display()),
            },
            _ => plain = false,
        }
    }
    if plain && !parts.is_empty() {
        return Ok(parts.join("/"));
    }
    p.file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .with_context(|| format!("--file {}: not a file name", p.display()))
}

fn function_row(f: &Function) -> Vec<String> {
    vec![
        f.name.clone(),
        f.runtime.as_str().to_owned(),
        f.handler.clone(),
        opt(f.live_version),
        f.warm_instances.to_string(),
        f.public.to_string(),
        f.created_at.clone(),
    ]
}

fn version_row(v: &FunctionVersion) -> Vec<String> {
    vec![
        v.version.to_string(),
        v.id.clone(),
        v.state.as_str().to_owned(),
        v.created_at.clone(),
        opt(v
            .error
            .as_deref()
            .map(|e| cut(e.lines().next().unwrap_or(""), 60))),
    ]
}

/// One function, as JSON or as `field: value` lines.
fn show(f: &Function, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(f);
    }
    let env = if f.env.is_empty() {
        "-".to_owned()
    } else {
        f.env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let secrets = if f.secret_names.is_empty() {
        "-".to_owned()
    } else {
        f.secret_names.join(" ")
    };
    for (k, val) in [
        ("id", f.id.clone()),
        ("name", f.name.clone()),
        ("runtime", f.runtime.as_str().to_owned()),
        ("handler", f.handler.clone()),
        ("url", f.url.clone()),
        ("public", f.public.to_string()),
        ("env", env),
        ("secrets", secrets),
        ("memory_mb", f.memory_mb.to_string()),
        ("timeout_seconds", f.timeout_seconds.to_string()),
        ("concurrency", f.concurrency.to_string()),
        ("max_instances", f.max_instances.to_string()),
        ("idle_seconds", f.idle_seconds.to_string()),
        ("live_version", opt(f.live_version)),
        ("warm_instances", f.warm_instances.to_string()),
        ("created_at", f.created_at.clone()),
        ("updated_at", f.updated_at.clone()),
    ] {
        println!("{k:<16} {val}");
    }
    Ok(())
}

/// What `function ls` shows (`--json`: the objects).
const FUNCTIONS: Table<Function> = Table {
    header: &[
        "NAME", "RUNTIME", "HANDLER", "LIVE", "WARM", "PUBLIC", "CREATED",
    ],
    row: function_row,
};

/// What `function versions` shows (`--json`: the objects).
const VERSIONS: Table<FunctionVersion> = Table {
    header: &["VERSION", "ID", "STATE", "CREATED", "ERROR"],
    row: version_row,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_dir_files_takes_text_and_leaves_hidden_dirs_and_deps_out() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        for f in [
            "main.py",
            "requirements.txt",
            "pkg/util.py",
            ".env",
            ".git/HEAD",
            ".venv/bin/activate",
            "node_modules/x/index.js",
            "pkg/__pycache__/util.cpython-313.pyc",
            "web/node_modules/y.js",
            ".pandastack/runtime.py",
        ] {
            std::fs::create_dir_all(p.join(f).parent().unwrap()).unwrap();
            std::fs::write(p.join(f), f).unwrap();
        }
        std::fs::write(p.join("logo.png"), [0x89, b'P', b'N', b'G', 0xff, 0xfe]).unwrap();
        let files = read_dir_files(p).unwrap();
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            [".env", "main.py", "pkg/util.py", "requirements.txt"]
        );
        assert_eq!(files["pkg/util.py"], "pkg/util.py");
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(read_dir_files(f.path()).is_err());
        assert!(read_dir_files(Path::new("/nonexistent/dir")).is_err());
    }

    #[test]
    fn file_keys_are_relative_paths_or_file_names() {
        assert_eq!(file_key(Path::new("main.py")).unwrap(), "main.py");
        assert_eq!(file_key(Path::new("./src/app.py")).unwrap(), "src/app.py");
        assert_eq!(file_key(Path::new("/tmp/x/main.py")).unwrap(), "main.py");
        assert_eq!(file_key(Path::new("../lib/util.js")).unwrap(), "util.js");
        assert!(file_key(Path::new("..")).is_err());
    }

    #[test]
    fn read_files_refuses_two_files_of_one_name() {
        let d = tempfile::tempdir().unwrap();
        for sub in ["a", "b"] {
            std::fs::create_dir_all(d.path().join(sub)).unwrap();
            std::fs::write(d.path().join(sub).join("main.py"), sub).unwrap();
        }
        let one = read_files(&[d.path().join("a/main.py")]).unwrap();
        assert_eq!(one["main.py"], "a");
        let e = read_files(&[d.path().join("a/main.py"), d.path().join("b/main.py")]);
        assert!(e.unwrap_err().to_string().contains("a second file"));
    }

    #[test]
    fn events_are_json_or_null() {
        assert_eq!(parse_event(None).unwrap(), serde_json::Value::Null);
        assert_eq!(
            parse_event(Some(r#"{"n": 1}"#)).unwrap(),
            serde_json::json!({"n": 1})
        );
        assert_eq!(parse_event(Some("42")).unwrap(), serde_json::json!(42));
        let e = parse_event(Some("hello")).unwrap_err();
        assert!(format!("{e:#}").contains("--text"), "{e:#}");
    }
}
