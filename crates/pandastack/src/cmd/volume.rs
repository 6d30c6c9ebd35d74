//! `pandastack volume …` (alias `vol`): durable volumes on a running server through the `/v1`
//! API — create (empty, from a volume snapshot or a backup), ls, get, grow, rm, snapshots and
//! backups to the object store (`--wait` follows the upload to its end).

use std::process::ExitCode;
use std::time::Duration;

use pandastack_client::types::{
    BackupState, CreateVolumeRequest, Volume, VolumeBackup, VolumeSnapshot,
};
use pandastack_client::Client;

use super::client_util::{client, print_json, run_reported, ConnArgs, Spinner, Table};

#[derive(Debug, clap::Args)]
pub struct VolumeArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(subcommand)]
    command: VolumeCmd,
}

#[derive(Debug, clap::Subcommand)]
enum VolumeCmd {
    /// Create a volume: empty (`--size-gb`), or from a volume snapshot or a backup.
    Create(CreateArgs),
    /// List volumes.
    Ls(Json),
    /// Show one volume.
    Get(NameJson),
    /// Grow a volume no sandbox has mounted (never shrinks).
    Grow(GrowArgs),
    /// Delete volumes (their backups stay in the object store).
    Rm(RmArgs),
    /// Snapshot a volume (also while a sandbox writes to it); prints the snapshot id.
    Snapshot(NameJson),
    /// List a volume's snapshots.
    Snapshots(NameJson),
    /// Back a volume up to the object store; prints the backup id (`--wait`: once uploaded).
    Backup(BackupArgs),
    /// List a volume's backups (also after the volume was deleted).
    Backups(NameJson),
    /// Create a volume from a backup (the same as `create NAME --from-backup ID`).
    Restore(RestoreArgs),
}

#[derive(Debug, clap::Args)]
struct Json {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct NameJson {
    /// Volume name.
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct CreateArgs {
    /// Volume name: 1-63 of [a-z0-9-], starting with a letter or digit.
    name: String,
    /// Size in GiB (required for an empty volume; with a source, grows it to this size).
    #[arg(long, value_name = "GB")]
    size_gb: Option<u32>,
    /// Start from this volume snapshot (`vs-…`).
    #[arg(long, value_name = "ID", conflicts_with = "from_backup")]
    from_snapshot: Option<String>,
    /// Start from this backup (`vb-…`).
    #[arg(long, value_name = "ID")]
    from_backup: Option<String>,
    /// Print the volume as JSON instead of its name.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RestoreArgs {
    /// Name of the new volume.
    name: String,
    /// The backup (`vb-…`) to restore.
    #[arg(long, value_name = "ID")]
    from_backup: String,
    /// Grow the restored volume to this size in GiB.
    #[arg(long, value_name = "GB")]
    size_gb: Option<u32>,
    /// Print the volume as JSON instead of its name.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct GrowArgs {
    /// Volume name.
    name: String,
    /// The new size in GiB (larger than the current one).
    #[arg(long, value_name = "GB")]
    size_gb: u32,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct RmArgs {
    /// Volume names.
    #[arg(required = true)]
    names: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct BackupArgs {
    /// Volume name.
    name: String,
    /// Wait until the upload has ended; exit 1 if it failed.
    #[arg(long)]
    wait: bool,
    /// With `--wait`: give up after this many seconds (the upload goes on).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout: u64,
    /// Print the backup as JSON instead of its id.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: VolumeArgs) -> anyhow::Result<ExitCode> {
    let config = args.conn.config()?;
    let c = match client(&config) {
        Ok(c) => c,
        Err(e) => return run_reported(&config, async { Err(e) }).await,
    };
    run_reported(&config, dispatch(c, args.command)).await
}

async fn dispatch(c: Client, cmd: VolumeCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        VolumeCmd::Create(a) => {
            let req = CreateVolumeRequest {
                name: a.name,
                size_gb: a.size_gb,
                from_snapshot: a.from_snapshot,
                from_backup: a.from_backup,
            };
            create(&c, req, a.json).await?;
        }
        VolumeCmd::Restore(a) => {
            let req = CreateVolumeRequest {
                name: a.name,
                size_gb: a.size_gb,
                from_snapshot: None,
                from_backup: Some(a.from_backup),
            };
            create(&c, req, a.json).await?;
        }
        VolumeCmd::Ls(a) => {
            let all = c.list_all_volumes().await?;
            VOLUMES.print(&all, a.json)?;
        }
        VolumeCmd::Get(a) => show(&c.get_volume(&a.name).await?, a.json)?,
        VolumeCmd::Grow(a) => {
            let v = c.grow_volume(&a.name, a.size_gb).await?;
            if a.json {
                print_json(&v)?;
            } else {
                println!("{} {} GiB", v.name, v.size_gb);
            }
        }
        VolumeCmd::Rm(a) => return rm(&c, a).await,
        VolumeCmd::Snapshot(a) => {
            let snap = {
                let _s = Spinner::start("snapshotting");
                c.create_volume_snapshot(&a.name).await?
            };
            if a.json {
                print_json(&snap)?;
            } else {
                println!("{}", snap.id);
            }
        }
        VolumeCmd::Snapshots(a) => {
            let all = c.list_volume_snapshots(&a.name).await?;
            SNAPSHOTS.print(&all, a.json)?;
        }
        VolumeCmd::Backup(a) => return backup(&c, a).await,
        VolumeCmd::Backups(a) => {
            let all = c.list_volume_backups(&a.name).await?;
            BACKUPS.print(&all, a.json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(c: &Client, req: CreateVolumeRequest, json: bool) -> anyhow::Result<()> {
    let v = {
        let _s = Spinner::start("creating volume");
        c.create_volume(&req).await?
    };
    if json {
        print_json(&v)
    } else {
        println!("{}", v.name);
        Ok(())
    }
}

/// Deletes every volume named; reports each failure and exits 1 if any failed.
async fn rm(c: &Client, a: RmArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for name in &a.names {
        match c.delete_volume(name).await {
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

async fn backup(c: &Client, a: BackupArgs) -> anyhow::Result<ExitCode> {
    let mut b = c.create_volume_backup(&a.name).await?;
    if a.wait {
        let _s = Spinner::start("uploading");
        b = c
            .wait_volume_backup(&a.name, &b.id, Duration::from_secs(a.timeout))
            .await?;
    }
    if a.json {
        print_json(&b)?;
    } else {
        println!("{}", b.id);
    }
    if b.state == BackupState::Failed {
        anyhow::bail!(
            "backup {} of volume {} failed: {}",
            b.id,
            a.name,
            b.error.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
}

fn volume_row(v: &Volume) -> Vec<String> {
    vec![
        v.name.clone(),
        state(v).to_owned(),
        v.size_gb.to_string(),
        opt(&v.attached_to),
        opt(&v.source),
        v.host.clone(),
        v.created_at.clone(),
    ]
}

/// `ready`, or `unavailable` (its host is dead).
fn state(v: &Volume) -> &'static str {
    match v.state {
        pandastack_client::types::VolumeState::Ready => "ready",
        pandastack_client::types::VolumeState::Unavailable => "unavailable",
    }
}

fn snapshot_row(s: &VolumeSnapshot) -> Vec<String> {
    vec![
        s.id.clone(),
        s.volume.clone(),
        s.size_gb.to_string(),
        s.frozen.to_string(),
        s.created_at.clone(),
    ]
}

fn backup_row(b: &VolumeBackup) -> Vec<String> {
    vec![
        b.id.clone(),
        b.volume.clone(),
        b.size_gb.to_string(),
        b.state.as_str().to_owned(),
        b.bytes_uploaded
            .map_or_else(|| "-".to_owned(), |n| n.to_string()),
        b.created_at.clone(),
        opt(&b.finished_at),
    ]
}

/// One volume, as JSON or as `field: value` lines.
fn show(v: &Volume, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(v);
    }
    let attachments = v
        .attachments
        .iter()
        .map(|a| {
            format!(
                "{}:{}{}",
                a.sandbox_id,
                a.path,
                if a.read_only { ":ro" } else { "" }
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    for (k, val) in [
        ("id", v.id.clone()),
        ("name", v.name.clone()),
        ("state", state(v).to_owned()),
        ("size_gb", v.size_gb.to_string()),
        ("attached_to", opt(&v.attached_to)),
        (
            "attachments",
            if attachments.is_empty() {
                "-".into()
            } else {
                attachments
            },
        ),
        ("source", opt(&v.source)),
        ("host", v.host.clone()),
        ("created_at", v.created_at.clone()),
    ] {
        println!("{k:<12} {val}");
    }
    Ok(())
}

/// Parses `--volume NAME:/path[:ro]` of `sandbox create`.
pub(super) fn parse_mount(s: &str) -> anyhow::Result<pandastack_client::types::SandboxVolume> {
    let (name, rest) = s
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("--volume {s:?}: expected NAME:/path[:ro]"))?;
    let (path, read_only) = match rest.rsplit_once(':') {
        Some((p, "ro")) => (p, true),
        Some((p, "rw")) => (p, false),
        _ => (rest, false),
    };
    if name.is_empty() || !path.starts_with('/') {
        anyhow::bail!("--volume {s:?}: expected NAME:/path[:ro] with an absolute path");
    }
    Ok(pandastack_client::types::SandboxVolume {
        name: name.to_owned(),
        path: path.to_owned(),
        read_only,
    })
}

/// What `volume ls` shows (`--json`: the objects).
const VOLUMES: Table<Volume> = Table {
    header: &[
        "NAME",
        "STATE",
        "SIZE_GB",
        "ATTACHED_TO",
        "SOURCE",
        "HOST",
        "CREATED",
    ],
    row: volume_row,
};

/// What `volume snapshots` shows (`--json`: the objects).
const SNAPSHOTS: Table<VolumeSnapshot> = Table {
    header: &["ID", "VOLUME", "SIZE_GB", "FROZEN", "CREATED"],
    row: snapshot_row,
};

/// What `volume backups` shows (`--json`: the objects).
const BACKUPS: Table<VolumeBackup> = Table {
    header: &[
        "ID",
        "VOLUME",
        "SIZE_GB",
        "STATE",
        "BYTES_UPLOADED",
        "CREATED",
        "FINISHED",
    ],
    row: backup_row,
};

#[cfg(test)]
mod tests {
    use super::parse_mount;

    #[test]
    fn mounts() {
        let m = parse_mount("data:/workspace").unwrap();
        assert_eq!(
            (m.name.as_str(), m.path.as_str(), m.read_only),
            ("data", "/workspace", false)
        );
        let m = parse_mount("data:/home/user/ws:ro").unwrap();
        assert_eq!((m.path.as_str(), m.read_only), ("/home/user/ws", true));
        let m = parse_mount("data:/ws:rw").unwrap();
        assert_eq!((m.path.as_str(), m.read_only), ("/ws", false));
        for bad in ["data", "data:", "data:ws", ":/ws"] {
            assert!(parse_mount(bad).is_err(), "{bad}");
        }
    }
}
