//! `pandastack host init`: gives the data directory a reflink-capable filesystem by creating a
//! sparse XFS image (reflink=1) and loop-mounting it there, when the host's own filesystem has no
//! reflink. Idempotent.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};

#[derive(Debug, clap::Args)]
pub struct HostArgs {
    #[command(subcommand)]
    what: HostWhat,
}

#[derive(Debug, clap::Subcommand)]
enum HostWhat {
    /// Create and mount a loop-backed XFS data directory if the data dir has no reflink support.
    Init(InitArgs),
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

pub async fn run(args: HostArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        HostWhat::Init(a) => init(a),
    }
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
    run_cmd(
        Command::new("mount")
            .args(["-o", "loop"])
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
        "mounted {} (XFS, reflink) on {}; add it to /etc/fstab to keep it across reboots:\n  {} {} xfs loop 0 0",
        image.display(),
        a.data_dir.display(),
        image.display(),
        a.data_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
