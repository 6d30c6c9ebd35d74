//! `pandastack host …`: this machine, and the platform's hosts.
//!
//! - `host init` gives the data directory a reflink-capable filesystem by creating a sparse XFS
//!   image (reflink=1) and loop-mounting it there, when the host's own filesystem has no
//!   reflink. Idempotent.
//! - `host ls|drain|undrain|forget` are the operator routes of a running server's `/v1` API
//!   (`/v1/hosts`): they need an admin key (`pandastack keys create --admin` on the server).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use pandastack_client::types::Host;

use super::client_util::{api, print_json, ConnArgs, Table};

#[derive(Debug, clap::Args)]
pub struct HostArgs {
    #[command(subcommand)]
    what: HostWhat,
}

#[derive(Debug, clap::Subcommand)]
enum HostWhat {
    /// Create and mount a loop-backed XFS data directory if the data dir has no reflink support.
    Init(InitArgs),
    /// List every host of the platform (an admin key).
    Ls(LsArgs),
    /// Drain a host: it keeps what it runs and takes nothing new (an admin key).
    Drain(StateArgs),
    /// Let a drained host take work again (an admin key).
    Undrain(StateArgs),
    /// Forget a dead host nothing lives on any more (an admin key).
    Forget(ForgetArgs),
}

#[derive(Debug, clap::Args)]
struct InitArgs {
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    /// Sparse image file that backs the filesystem (default: <data-dir>.xfs).
    #[arg(long)]
    image: Option<PathBuf>,
    /// Apparent size of the image; blocks are allocated only as they are used.
    #[arg(long, default_value_t = 64)]
    size_gib: u64,
}

#[derive(Debug, clap::Args)]
struct LsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Print JSON (an array of hosts).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct StateArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// The host's id (see `pandastack host ls`).
    id: String,
    /// Print the host as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ForgetArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// The host's id (see `pandastack host ls`).
    id: String,
}

pub async fn run(args: HostArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        HostWhat::Init(a) => init(a),
        HostWhat::Ls(a) => {
            let json = a.json;
            api(&a.conn, |c| async move {
                HOSTS.print(&c.list_hosts().await?, json)
            })
            .await
        }
        HostWhat::Drain(a) => {
            let (id, json) = (a.id, a.json);
            api(&a.conn, |c| async move {
                print_host(&c.drain_host(&id).await?, json)
            })
            .await
        }
        HostWhat::Undrain(a) => {
            let (id, json) = (a.id, a.json);
            api(&a.conn, |c| async move {
                print_host(&c.undrain_host(&id).await?, json)
            })
            .await
        }
        HostWhat::Forget(a) => {
            let id = a.id;
            api(&a.conn, |c| async move {
                c.forget_host(&id).await?;
                eprintln!("forgot host {id}");
                Ok(())
            })
            .await
        }
    }
}

/// One host as `host drain|undrain` print it: a row of [`HOSTS`], or the object (`--json`).
fn print_host(h: &Host, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(h);
    }
    HOSTS.print(std::slice::from_ref(h), false)
}

/// What `host ls` (and `host drain|undrain`) shows; `--json`: the objects.
const HOSTS: Table<Host> = Table {
    header: &[
        "ID",
        "NAME",
        "STATE",
        "EPOCH",
        "LEASE_EXPIRES",
        "ADDRESS",
        "VCPUS",
        "MEMORY_MIB",
        "FREE/SLOTS",
        "SANDBOXES",
        "TEMPLATES",
    ],
    row: host_row,
};

fn host_row(h: &Host) -> Vec<String> {
    let state = serde_json::to_value(h.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    vec![
        h.id.clone(),
        h.name.clone(),
        state,
        h.epoch.to_string(),
        h.lease_expires_at.clone().unwrap_or_else(|| "-".into()),
        h.address.clone().unwrap_or_else(|| "-".into()),
        h.capacity.vcpus.to_string(),
        h.capacity.memory_mib.to_string(),
        match h.capacity.slots {
            0 => format!("{}/-", h.capacity.free_slots),
            all => format!("{}/{all}", h.capacity.free_slots),
        },
        h.sandboxes.to_string(),
        if h.templates.is_empty() {
            "-".into()
        } else {
            h.templates.join(",")
        },
    ]
}

fn supports_reflink(dir: &Path) -> bool {
    let Ok(tmp) = tempfile::tempdir_in(dir) else {
        return false;
    };
    let a = tmp.path().join("a");
    if std::fs::write(&a, b"x").is_err() {
        return false;
    }
    Command::new("cp")
        .arg("--reflink=always")
        .arg(&a)
        .arg(tmp.path().join("b"))
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn is_mountpoint(dir: &Path) -> bool {
    Command::new("mountpoint")
        .arg("-q")
        .arg(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn run_cmd(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            cmd.get_program(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn init(a: InitArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&a.data_dir)
        .with_context(|| format!("create {}", a.data_dir.display()))?;
    if supports_reflink(&a.data_dir) {
        println!(
            "{} already supports reflink copies; nothing to do",
            a.data_dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if is_mountpoint(&a.data_dir) {
        bail!(
            "{} is a mount point without reflink support; unmount it or choose another --data-dir",
            a.data_dir.display()
        );
    }
    if std::fs::read_dir(&a.data_dir)?.next().is_some() {
        bail!(
            "{} is not empty; move its contents away first (they would be hidden by the mount)",
            a.data_dir.display()
        );
    }
    let image = a.image.unwrap_or_else(|| a.data_dir.with_extension("xfs"));
    if !image.exists() {
        let f = std::fs::File::create_new(&image)
            .with_context(|| format!("create {}", image.display()))?;
        f.set_len(a.size_gib << 30)?;
        drop(f);
        if let Err(e) = run_cmd(
            Command::new("mkfs.xfs")
                .args(["-q", "-m", "reflink=1"])
                .arg(&image),
        ) {
            let _ = std::fs::remove_file(&image);
            return Err(e.context("mkfs.xfs (install xfsprogs)"));
        }
    }
    // `discard`: a deleted file's blocks go back to the image's host file system (the image is
    // sparse); without it the image only grows, to the most its sandboxes ever held at once.
    run_cmd(
        Command::new("mount")
            .args(["-o", "loop,discard"])
            .arg(&image)
            .arg(&a.data_dir),
    )?;
    if !supports_reflink(&a.data_dir) {
        bail!(
            "mounted {} on {} but reflink copies still fail",
            image.display(),
            a.data_dir.display()
        );
    }
    println!(
        "mounted {} (XFS, reflink) on {}; add it to /etc/fstab to keep it across reboots:\n  {} {} xfs loop,discard 0 0",
        image.display(),
        a.data_dir.display(),
        image.display(),
        a.data_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
