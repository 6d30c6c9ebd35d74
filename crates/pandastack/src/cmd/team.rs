//! `pandastack members …` and `pandastack audit`: the workspace's members (people with a role
//! whose keys can do no more than it allows) and its audit log, through a running server's API.

use std::process::ExitCode;

use pandastack_client::types::{AuditEntry, CreateKeyRequest, Member, Role, UpdateMemberRequest};
use pandastack_client::AuditQuery;

use super::client_util::{api, print_json, ConnArgs, Table};

#[derive(Debug, clap::Args)]
pub struct MembersArgs {
    #[command(subcommand)]
    what: MembersWhat,
}

#[derive(Debug, clap::Subcommand)]
enum MembersWhat {
    /// List the workspace's members.
    Ls(LsArgs),
    /// Add a member with a role (owner, admin, developer, viewer).
    Add(AddArgs),
    /// Change a member's role or name: their keys follow at once.
    Set(SetArgs),
    /// Remove a member: their keys are revoked.
    Rm(IdArgs),
    /// Make an API key for a member (it can do no more than the member's role); the secret is
    /// printed once.
    Key(KeyArgs),
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct AddArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Their email (unique in the workspace).
    email: String,
    /// owner, admin, developer or viewer.
    #[arg(long, value_parser = parse_role)]
    role: Role,
    /// A display name (default: the email).
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct SetArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// The member's id.
    id: String,
    #[arg(long, value_parser = parse_role)]
    role: Option<Role>,
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct IdArgs {
    #[command(flatten)]
    conn: ConnArgs,
    id: String,
}

#[derive(Debug, clap::Args)]
struct KeyArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// The member's id.
    id: String,
    /// The key's name.
    #[arg(long, default_value = "")]
    name: String,
    /// Scopes narrower than the role (repeat; default: the calling key's).
    #[arg(long = "scope")]
    scopes: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Only calls made with this key id.
    #[arg(long)]
    key: Option<String>,
    /// Only calls on the resource with this id or name.
    #[arg(long)]
    resource: Option<String>,
    /// Only this operation (`create_sandbox`).
    #[arg(long)]
    action: Option<String>,
    /// Only calls at or after this time (RFC 3339).
    #[arg(long)]
    since: Option<String>,
    /// At most this many rows (newest first).
    #[arg(long, default_value_t = 100)]
    limit: u32,
    #[arg(long)]
    json: bool,
}

fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).map_err(|e| e.message)
}

pub async fn run_members(args: MembersArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        MembersWhat::Ls(a) => {
            let json = a.json;
            api(&a.conn, |c| async move {
                MEMBERS.print(&c.list_members().await?, json)
            })
            .await
        }
        MembersWhat::Add(a) => {
            let name = a.name.clone().unwrap_or_else(|| a.email.clone());
            let (email, role, json) = (a.email, a.role, a.json);
            api(&a.conn, |c| async move {
                let m = c.create_member(&name, &email, role).await?;
                print_member(&m, json)
            })
            .await
        }
        MembersWhat::Set(a) => {
            let body = UpdateMemberRequest {
                name: a.name,
                role: a.role,
            };
            let (id, json) = (a.id, a.json);
            api(&a.conn, |c| async move {
                print_member(&c.update_member(&id, &body).await?, json)
            })
            .await
        }
        MembersWhat::Rm(a) => {
            let id = a.id;
            api(&a.conn, |c| async move {
                c.delete_member(&id).await?;
                eprintln!("removed member {id}; their keys are revoked");
                Ok(())
            })
            .await
        }
        MembersWhat::Key(a) => {
            let body = CreateKeyRequest {
                name: a.name,
                scopes: (!a.scopes.is_empty()).then_some(a.scopes),
                expires_at: None,
                member_id: Some(a.id),
            };
            api(&a.conn, |c| async move {
                let k = c.create_key_with(&body).await?;
                eprintln!(
                    "key {} for member {} ({}); the secret is shown once:",
                    k.key.id,
                    k.key.member_id.as_deref().unwrap_or("-"),
                    k.key.role.map(|r| r.to_string()).unwrap_or_default()
                );
                println!("{}", k.secret);
                Ok(())
            })
            .await
        }
    }
}

pub async fn run_audit(a: AuditArgs) -> anyhow::Result<ExitCode> {
    let json = a.json;
    let mut q = AuditQuery {
        limit: Some(a.limit.clamp(1, 1000)),
        key_id: a.key,
        resource_id: a.resource,
        action: a.action,
        since: a.since,
        cursor: None,
    };
    let want = a.limit as usize;
    api(&a.conn, |c| async move {
        let mut rows: Vec<AuditEntry> = Vec::new();
        loop {
            let page = c.audit(&q).await?;
            rows.extend(page.data);
            match page.next_cursor {
                Some(next) if rows.len() < want => q.cursor = Some(next),
                _ => break,
            }
        }
        rows.truncate(want);
        AUDIT.print(&rows, json)
    })
    .await
}

fn print_member(m: &Member, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(m);
    }
    MEMBERS.print(std::slice::from_ref(m), false)
}

const MEMBERS: Table<Member> = Table {
    header: &["ID", "NAME", "EMAIL", "ROLE", "KEYS", "CREATED"],
    row: |m| {
        vec![
            m.id.clone(),
            m.name.clone(),
            m.email.clone(),
            m.role.to_string(),
            m.active_keys.to_string(),
            m.created_at.clone(),
        ]
    },
};

const AUDIT: Table<AuditEntry> = Table {
    header: &["AT", "KEY", "ACTION", "RESOURCE", "RESULT", "SOURCE"],
    row: |r| {
        vec![
            r.at.clone(),
            format!("{} ({})", r.key_name, r.key_id),
            r.action.clone(),
            r.resource.clone(),
            r.result.clone(),
            r.source.clone(),
        ]
    },
};
