//! `pandastack auth login|status|logout`: the server URL and API key the client commands use,
//! kept in `$XDG_CONFIG_HOME/pandastack/config.toml` (mode 0600). A key is checked with a call
//! before it is stored.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use pandastack_client::{config_path, Client, Config, ConfigFile, ListSandboxes};

use super::client_util::{run_reported, ConnArgs};

#[derive(Debug, clap::Args)]
pub struct AuthArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: AuthCmd,
}

#[derive(Debug, clap::Subcommand)]
enum AuthCmd {
    /// Check an API key against the server and store it with the URL (key from --api-key,
    /// else read from standard input).
    Login,
    /// Show which server and key the client commands use, and check the key.
    Status,
    /// Forget the stored key and URL.
    Logout,
}

pub async fn run(args: AuthArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    match args.command {
        AuthCmd::Login => run_reported(&config, login(args.conn, config.clone())).await,
        AuthCmd::Status => run_reported(&config, status(config.clone())).await,
        AuthCmd::Logout => logout(),
    }
}

fn path() -> anyhow::Result<PathBuf> {
    config_path(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .context("neither XDG_CONFIG_HOME nor HOME is set")
}

/// A cheap authenticated call.
async fn verify(config: &Config) -> anyhow::Result<()> {
    let client = Client::new(config.clone())?;
    let q = ListSandboxes {
        limit: Some(1),
        ..Default::default()
    };
    client.list_sandboxes(&q).await?;
    Ok(())
}

async fn login(conn: ConnArgs, resolved: Config) -> anyhow::Result<ExitCode> {
    let key = match conn.api_key {
        Some(k) => k,
        None => read_key()?,
    };
    let config = Config::new(resolved.base_url, Some(key.clone()));
    verify(&config).await.context("the key was not accepted")?;
    let path = path()?;
    ConfigFile {
        base_url: Some(config.base_url.clone()),
        api_key: Some(key),
    }
    .save(&path)?;
    println!(
        "logged in to {} (saved in {})",
        config.base_url,
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// The key from standard input (prompted for on a terminal).
fn read_key() -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprint!("API key: ");
        std::io::stderr().flush()?;
    }
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    let key = line.trim().to_owned();
    anyhow::ensure!(
        !key.is_empty(),
        "no API key given (use --api-key or pass it on standard input)"
    );
    Ok(key)
}

async fn status(config: Config) -> anyhow::Result<ExitCode> {
    let path = path()?;
    println!("server:  {}", config.base_url);
    println!(
        "config:  {}{}",
        path.display(),
        if path.exists() { "" } else { " (none)" }
    );
    let Some(key) = &config.api_key else {
        anyhow::bail!("no API key: run `pandastack auth login` or set PANDASTACK_API_KEY");
    };
    println!("key:     {}", mask(key));
    verify(&config).await?;
    println!("status:  ok");
    Ok(ExitCode::SUCCESS)
}

fn logout() -> anyhow::Result<ExitCode> {
    let path = path()?;
    match std::fs::remove_file(&path) {
        Ok(()) => println!("logged out (removed {})", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => println!("not logged in"),
        Err(e) => return Err(e).with_context(|| format!("cannot remove {}", path.display())),
    }
    Ok(ExitCode::SUCCESS)
}

/// The first characters of a key, enough to tell keys apart.
fn mask(key: &str) -> String {
    let shown: String = key.chars().take(8).collect();
    format!("{shown}…")
}
