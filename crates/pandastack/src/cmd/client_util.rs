//! What the API-calling subcommands (`auth`, `sandbox`, `volume`, `db`, `template ls`, `host
//! ls`, …) share: the connection flags and their precedence, error reports with a hint, a
//! progress spinner and plain tables.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use pandastack_client::{Client, Config, Sources};

/// `--base-url` and `--api-key`, stronger than the environment and the config file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnArgs {
    /// Server URL [env: PANDASTACK_BASE_URL; then the config file; default http://localhost:8080].
    #[arg(long, global = true, value_name = "URL")]
    pub base_url: Option<String>,
    /// API key [env: PANDASTACK_API_KEY or PANDASTACK_TOKEN; then the config file].
    #[arg(long, global = true, value_name = "KEY")]
    pub api_key: Option<String>,
}

impl ConnArgs {
    /// The configuration these flags, the environment and the config file give.
    pub fn config(&self) -> anyhow::Result<Config> {
        Ok(Sources::from_env(self.base_url.clone(), self.api_key.clone())?.resolve())
    }
}

/// Runs an API-calling command: on failure prints the error with its code, request id and a
/// hint, and exits 1.
pub async fn run_reported<F>(config: &Config, fut: F) -> anyhow::Result<ExitCode>
where
    F: std::future::Future<Output = anyhow::Result<ExitCode>>,
{
    match fut.await {
        Ok(code) => Ok(code),
        Err(e) => {
            report(&e, &config.base_url);
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Prints `error: <message> (code, request id …)` and a hint on stderr.
pub fn report(e: &anyhow::Error, base_url: &str) {
    let client_err = e
        .chain()
        .find_map(|c| c.downcast_ref::<pandastack_client::Error>());
    let mut line = format!("error: {e:#}");
    if let Some(a) = client_err.and_then(|c| c.api()) {
        line.push_str(&format!(
            " ({}, request id {})",
            a.code_text,
            a.request_id.as_deref().unwrap_or("-")
        ));
    }
    eprintln!("{line}");
    if let Some(h) = client_err.and_then(|c| hint(c, base_url)) {
        eprintln!("hint: {h}");
    }
}

/// What to try next for an error, when there is something obvious.
pub fn hint(e: &pandastack_client::Error, base_url: &str) -> Option<String> {
    if e.is_connect() {
        return Some(format!(
            "is `pandastack server` running at {base_url}? (set --base-url or PANDASTACK_BASE_URL)"
        ));
    }
    match e.status() {
        Some(401) => {
            Some("run `pandastack auth login` (or set PANDASTACK_API_KEY) with a valid key".into())
        }
        Some(404) if e.code() == Some(pandastack_client::types::ErrorCode::SandboxNotFound) => {
            Some("list your sandboxes with `pandastack sandbox ls`".into())
        }
        Some(404) if e.code() == Some(pandastack_client::types::ErrorCode::VolumeNotFound) => {
            Some("list your volumes with `pandastack volume ls`".into())
        }
        Some(404) if e.code() == Some(pandastack_client::types::ErrorCode::DatabaseNotFound) => {
            Some("list your databases with `pandastack db ls`".into())
        }
        Some(404) if e.code() == Some(pandastack_client::types::ErrorCode::HostNotFound) => {
            Some("list the hosts with `pandastack host ls`".into())
        }
        Some(403) if e.code() == Some(pandastack_client::types::ErrorCode::Forbidden) => Some(
            "use an admin key: make one on the server with `pandastack keys create --admin`".into(),
        ),
        _ => None,
    }
}

/// A client for `config`.
pub fn client(config: &Config) -> anyhow::Result<Client> {
    Ok(Client::new(config.clone())?)
}

/// A spinner on stderr while a slow call runs (only when stderr is a terminal).
pub struct Spinner {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Spinner {
    pub fn start(label: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { task: None };
        }
        let label = label.to_owned();
        let task = tokio::spawn(async move {
            const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
            let start = std::time::Instant::now();
            for i in 0.. {
                {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(
                        err,
                        "\r{} {label} {:.1}s",
                        FRAMES[i % FRAMES.len()],
                        start.elapsed().as_secs_f64()
                    );
                    let _ = err.flush();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { task: Some(task) }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

/// How the CLI shows a list of one resource: its columns and one row per item (a `const` per
/// view, beside the commands that list it).
pub struct Table<T: 'static> {
    pub header: &'static [&'static str],
    pub row: fn(&T) -> Vec<String>,
}

impl<T: serde::Serialize> Table<T> {
    /// `items` as JSON (`--json`) or as this table.
    pub fn print(&self, items: &[T], json: bool) -> anyhow::Result<()> {
        if json {
            return print_json(&items);
        }
        let rows: Vec<Vec<String>> = items.iter().map(self.row).collect();
        print_table(self.header, &rows);
        Ok(())
    }
}

/// Prints rows under a header, columns padded to their widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Parses `k=v` pairs of repeated flags.
pub fn parse_pairs(
    flag: &str,
    pairs: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => anyhow::bail!("--{flag} {p:?}: expected KEY=VALUE"),
        })
        .collect()
}

/// Runs `call` with a client for `conn`; a failure is reported with its code and a hint.
pub async fn api<F, Fut>(conn: &ConnArgs, call: F) -> anyhow::Result<ExitCode>
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let config = conn.config()?;
    run_reported(&config, async {
        call(client(&config)?).await?;
        Ok(ExitCode::SUCCESS)
    })
    .await
}
