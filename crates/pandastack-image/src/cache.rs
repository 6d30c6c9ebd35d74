//! The image cache: `<root>/images/<name>-<hash16>/` holds a finished image (`base.ext4`,
//! `manifest.json`, `spec.toml`, `build.log`, agent variants `rootfs-<agenthash16>.ext4`).
//!
//! Next to each image directory, with suffixes no finished directory can have (names are
//! `[a-z0-9-]`):
//! - `.lock`: flock held while building or adding an agent, so concurrent builds of one spec
//!   (two tests, two CLIs) wait for each other instead of racing;
//! - `.tmp/`: the build in progress, renamed into place only when complete — an interrupted build
//!   leaves only this, which the next build (holding the lock) deletes;
//! - `.failed/`: the log (and spec) of the last failed build.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::spec::{SpecHash, TemplateSpec};

/// Where cached images live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageCache {
    root: PathBuf,
}

impl ImageCache {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$PANDASTACK_CACHE`, else `/var/cache/pandastack`.
    pub fn from_env() -> Self {
        Self::new(
            std::env::var_os("PANDASTACK_CACHE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| "/var/cache/pandastack".into()),
        )
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the finished image for `spec` with hash `hash`.
    pub fn image_dir(&self, spec: &TemplateSpec, hash: &SpecHash) -> PathBuf {
        self.root
            .join("images")
            .join(format!("{}-{}", spec.name(), hash.short()))
    }
}

/// `dir` with a suffix appended to its last component (`x` → `x.tmp`).
pub(crate) fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut s = dir.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// An exclusive flock on `<image dir>.lock`, released on drop (or when the process dies).
#[derive(Debug)]
pub(crate) struct CacheLock {
    _file: File,
}

impl CacheLock {
    /// Takes the lock, calling `waiting` first if another process holds it.
    pub(crate) fn acquire(dir: &Path, waiting: impl FnOnce(&Path)) -> std::io::Result<Self> {
        use rustix::fs::{flock, FlockOperation};
        let path = sibling(dir, ".lock");
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        match flock(file.as_fd(), FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                waiting(&path);
                flock(file.as_fd(), FlockOperation::LockExclusive)?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Self { _file: file })
    }
}

/// Mount points at or below `path` (from /proc/self/mountinfo).
fn mounts_under(path: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape_mountinfo)
        .filter(|m| m.starts_with(path))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// Deletes a build directory, refusing if anything is mounted inside it (a chroot's /dev bind
/// mount left by a crashed tool must never be deleted through).
pub(crate) fn remove_build_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    check_nothing_mounted(&dir.canonicalize()?, &mounts_under(Path::new("/")))?;
    std::fs::remove_dir_all(dir)
}

fn check_nothing_mounted(dir: &Path, mounts: &[PathBuf]) -> std::io::Result<()> {
    let inside: Vec<String> = mounts
        .iter()
        .filter(|m| m.starts_with(dir))
        .map(|m| m.display().to_string())
        .collect();
    if inside.is_empty() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "refusing to delete {}: {} mounted inside (unmount first)",
            dir.display(),
            inside.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(
            unescape_mountinfo("/a\\040b\\134c"),
            PathBuf::from("/a b\\c")
        );
        assert_eq!(unescape_mountinfo("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn refuses_to_delete_through_a_mount_point() {
        assert!(mounts_under(Path::new("/")).contains(&PathBuf::from("/proc")));
        let mounts = [PathBuf::from("/"), PathBuf::from("/c/x.tmp/tree/dev")];
        let err = check_nothing_mounted(Path::new("/c/x.tmp"), &mounts).unwrap_err();
        assert!(err.to_string().contains("/c/x.tmp/tree/dev"), "{err}");
        check_nothing_mounted(Path::new("/c/y.tmp"), &mounts).unwrap();
        // A sibling with a common string prefix is not inside.
        check_nothing_mounted(Path::new("/c/x.tm"), &mounts).unwrap();
    }

    #[test]
    fn a_second_lock_waits() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("images/x-0123456789abcdef");
        let held = CacheLock::acquire(&image, |_| panic!("first lock must not wait")).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let image2 = image.clone();
        let t = std::thread::spawn(move || {
            let _l = CacheLock::acquire(&image2, |_| tx.send(()).unwrap()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("second locker should report that it waits");
        drop(held);
        t.join().unwrap();
    }
}
