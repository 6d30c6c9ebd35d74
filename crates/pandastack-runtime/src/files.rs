//! Copy-on-write file clones with a copying fallback.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static WARNED: AtomicBool = AtomicBool::new(false);

/// How a clone was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloneKind {
    Reflink,
    Copy,
}

/// Makes `dir` an empty directory: what an earlier unfinished use left in it is removed.
pub(crate) fn empty_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)
}

/// Clones `src` to `dst` (which must not exist): a reflink where the filesystem supports it,
/// otherwise a sparse copy (logged once per process).
pub fn clone_file(src: &Path, dst: &Path) -> std::io::Result<CloneKind> {
    let from = std::fs::File::open(src)?;
    let to = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)?;
    match rustix::fs::ioctl_ficlone(&to, &from) {
        Ok(()) => return Ok(CloneKind::Reflink),
        // Across file systems (e.g. an image cache on / cloned into the data dir) a copy is
        // expected; it says nothing about reflink support of the data dir.
        Err(rustix::io::Errno::XDEV) => {
            tracing::debug!(src = %src.display(), "different file systems: copying");
        }
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = &e as &dyn std::error::Error, dir = %dst.parent().unwrap_or(dst).display(), "no reflink support: copying files (slower, uses more disk)");
            }
        }
    }
    drop(to);
    std::fs::remove_file(dst)?;
    let status = std::process::Command::new("cp")
        .args(["--sparse=always", "--"])
        .arg(src)
        .arg(dst)
        .status()?;
    if !status.success() {
        let _ = std::fs::remove_file(dst);
        return Err(std::io::Error::other(format!(
            "cp {} failed",
            src.display()
        )));
    }
    Ok(CloneKind::Copy)
}
