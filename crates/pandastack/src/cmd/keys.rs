//! `pandastack keys create|list|revoke`: API keys administered on the server's own database
//! (`<data dir>/state.db`), with no API call and no key needed; this is how a first or a lost key
//! is made, and the only way an operator's (admin) key is (`keys create --admin`: it may also
//! call the operator routes, `/v1/hosts`). Safe while the server runs (SQLite in WAL mode; the
//! server reads keys per request).
//!
//! A new secret is printed once, alone on stdout (details on stderr), so
//! `KEY=$(pandastack keys create)` works; `--json` prints everything as one object instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use pandastack_api::rfc3339;
use pandastack_store::{KeyRow, Store, StoreError, Workspace};
use serde_json::json;

#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    /// Data directory of the server (holds state.db).
    #[arg(
        long,
        global = true,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack",
        value_name = "DIR"
    )]
    data_dir: PathBuf,
    /// The server's state store if it is not `<data-dir>/state.db` (`postgres://…`, see
    /// `pandastack server --state`).
    #[arg(long, global = true, env = "PANDASTACK_STATE", value_name = "URL")]
    state: Option<String>,
    #[command(subcommand)]
    command: KeysCmd,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCmd {
    /// Create a key and print its secret (shown this once).
    Create(CreateArgs),
    /// List keys (never their secrets).
    List(ListArgs),
    /// Revoke a key: calls with it fail with 401 from then on.
    Revoke(RevokeArgs),
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// Workspace of the key [default: the only workspace].
    #[arg(long, value_name = "ID", conflicts_with = "new_workspace")]
    workspace: Option<String>,
    /// Create a new workspace with this name for the key.
    #[arg(long, value_name = "NAME")]
    new_workspace: Option<String>,
    /// A name to tell the key apart.
    #[arg(long, default_value = "cli")]
    name: String,
    /// An operator's key: it may also call the operator routes (`/v1/hosts`: `pandastack host
    /// ls|drain|undrain|forget`). It still belongs to a workspace.
    #[arg(long)]
    admin: bool,
    /// What the key may do: `*` (everything, the default) or `<kind>:<action>` with `*` for
    /// either part, e.g. `*:read` (read-only) or `sandboxes:*` (repeatable).
    #[arg(long = "scope", value_name = "SCOPE", conflicts_with = "admin")]
    scopes: Vec<String>,
    /// Seconds until the key stops working [default: never].
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    expires_in: Option<u64>,
    /// Running sandboxes allowed in a new workspace.
    #[arg(long, default_value_t = 200, requires = "new_workspace")]
    max_sandboxes: i64,
    /// Sandbox creates per minute allowed in a new workspace.
    #[arg(long, default_value_t = 600, requires = "new_workspace")]
    creates_per_minute: i64,
    /// Print the key (with its secret) as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Only this workspace's keys [default: every workspace's].
    #[arg(long, value_name = "ID")]
    workspace: Option<String>,
    /// Print JSON (an array).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RevokeArgs {
    /// The key's id (`key-…`, see `pandastack keys list`).
    key_id: String,
}

pub async fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    let store = open(&args.data_dir, args.state.as_deref()).await?;
    match args.command {
        KeysCmd::Create(a) => create(&store, a).await?,
        KeysCmd::List(a) => list(&store, a).await?,
        KeysCmd::Revoke(a) => revoke(&store, a).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens an existing state database (a typo in `--data-dir` must not create an empty one).
async fn open(data_dir: &Path, state: Option<&str>) -> anyhow::Result<Store> {
    if state.is_some() {
        return open_store(data_dir, state).await;
    }
    let db = data_dir.join("state.db");
    if !db.is_file() {
        bail!(
            "no server database at {}: start `pandastack server` there once, or pass --data-dir",
            db.display()
        );
    }
    Store::open(&db)
        .await
        .with_context(|| format!("open {}", db.display()))
}

/// Opens (creating if needed) the state store `state` — a URL or file path, see
/// [`Store::connect`] — or SQLite at `<data_dir>/state.db`.
pub(crate) async fn open_store(data_dir: &Path, state: Option<&str>) -> anyhow::Result<Store> {
    match state {
        Some(url) => Store::connect(url)
            .await
            .with_context(|| format!("open state store {}", redact(url))),
        None => {
            let db = data_dir.join("state.db");
            Store::open(&db)
                .await
                .with_context(|| format!("open {}", db.display()))
        }
    }
}

/// `url` without a password (for messages).
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

async fn workspace(store: &Store, id: &str) -> anyhow::Result<Workspace> {
    match store.keys().workspace(id).await {
        Ok(w) => Ok(w),
        Err(StoreError::NotFound) => {
            bail!("no workspace {id} (see `pandastack keys list` for workspace ids)")
        }
        Err(e) => Err(e.into()),
    }
}

/// The workspace a new key goes to.
async fn target(store: &Store, a: &CreateArgs) -> anyhow::Result<Workspace> {
    if let Some(name) = &a.new_workspace {
        if name.is_empty() || name.len() > 64 {
            bail!("--new-workspace: 1 to 64 bytes");
        }
        return Ok(store
            .keys()
            .create_workspace(name, a.max_sandboxes, a.creates_per_minute)
            .await?);
    }
    if let Some(id) = &a.workspace {
        return workspace(store, id).await;
    }
    let mut all = store.keys().workspaces().await?;
    match all.len() {
        0 => {
            bail!("no workspace yet: start `pandastack server` once, or pass --new-workspace NAME")
        }
        1 => Ok(all.remove(0)),
        _ => {
            let ids: Vec<String> = all
                .iter()
                .map(|w| format!("{} ({})", w.id, w.name))
                .collect();
            bail!(
                "several workspaces, pass --workspace ID: {}",
                ids.join(", ")
            )
        }
    }
}

async fn create(store: &Store, a: CreateArgs) -> anyhow::Result<()> {
    if a.name.len() > 64 {
        bail!("--name: at most 64 bytes");
    }
    let scopes = if a.scopes.is_empty() {
        vec!["*".to_owned()]
    } else {
        pandastack_client::types::parse_scopes(&a.scopes)
            .map_err(|e| anyhow::anyhow!("--scope: {}", e.message))?
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let grant = pandastack_store::KeyGrant {
        scopes,
        expires_at: a
            .expires_in
            .map(|s| pandastack_store::now_ms().saturating_add((s as i64).saturating_mul(1000))),
        member_id: None,
    };
    let ws = target(store, &a).await?;
    let (key, secret) = if a.admin {
        store.keys().create_admin(&ws.id, &a.name).await?
    } else {
        store.keys().create_granted(&ws.id, &a.name, &grant).await?
    };
    if a.json {
        let mut v = key_json(&key, &ws.name);
        v["secret"] = json!(secret);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        eprintln!(
            "created {}key {} ({}) in workspace {} ({}); the secret is shown once:",
            if key.admin { "admin " } else { "" },
            key.id,
            key.name,
            ws.id,
            ws.name
        );
        println!("{secret}");
    }
    Ok(())
}

fn key_json(k: &KeyRow, workspace_name: &str) -> serde_json::Value {
    json!({
        "id": k.id,
        "name": k.name,
        "prefix": k.prefix,
        "workspace_id": k.workspace_id,
        "workspace_name": workspace_name,
        "created_at": rfc3339(k.created_at),
        "revoked": k.revoked_at.is_some(),
        "revoked_at": k.revoked_at.map(rfc3339),
        "admin": k.admin,
        "scopes": k.scopes,
        "expires_at": k.expires_at.map(rfc3339),
        "last_used_at": k.last_used_at.map(rfc3339),
    })
}

async fn list(store: &Store, a: ListArgs) -> anyhow::Result<()> {
    let workspaces = match &a.workspace {
        Some(id) => vec![workspace(store, id).await?],
        None => store.keys().workspaces().await?,
    };
    let mut rows = Vec::new();
    for ws in &workspaces {
        for k in store.keys().list(&ws.id).await? {
            rows.push((k, ws.name.clone()));
        }
    }
    if a.json {
        let v: Vec<_> = rows.iter().map(|(k, w)| key_json(k, w)).collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<22} {:<22} {:<16} {:<14} {:<22} {:<6} STATUS",
        "ID", "WORKSPACE", "NAME", "PREFIX", "CREATED", "ADMIN"
    );
    for (k, _) in &rows {
        println!(
            "{:<22} {:<22} {:<16} {:<14} {:<22} {:<6} {}",
            k.id,
            k.workspace_id,
            k.name,
            k.prefix,
            rfc3339(k.created_at),
            if k.admin { "yes" } else { "no" },
            if k.revoked_at.is_some() {
                "revoked"
            } else {
                "active"
            }
        );
    }
    Ok(())
}

async fn revoke(store: &Store, a: RevokeArgs) -> anyhow::Result<()> {
    let key = match store.keys().get_any(&a.key_id).await {
        Ok(k) => k,
        Err(StoreError::NotFound) => {
            bail!("no key {} (see `pandastack keys list`)", a.key_id)
        }
        Err(e) => return Err(e.into()),
    };
    if key.revoked_at.is_some() {
        bail!("key {} is already revoked", key.id);
    }
    store.keys().revoke(&key.workspace_id, &key.id).await?;
    eprintln!("revoked key {} of workspace {}", key.id, key.workspace_id);
    Ok(())
}
