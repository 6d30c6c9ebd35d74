//! The confined half: applies the layers to the root directory and makes the ext4 image. It runs
//! as uid 0 of a user namespace that is uid 100000+ on the host, so it can write nothing on the
//! host but the build's own directory; it still drops what a hostile layer could use against
//! whatever reads the image later (device nodes) or against this tree (`..`, links out of it).

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use super::layout::open_maybe_gzip;
use super::{io, OciError};

/// Arguments of `pandastack internal oci-unpack`.
#[derive(Debug, Clone)]
pub struct UnpackArgs {
    pub root: PathBuf,
    pub out: PathBuf,
    pub disk_mb: Option<u32>,
    pub layers: Vec<PathBuf>,
}

const MIB: u64 = 1 << 20;

/// Applies `args.layers` to `args.root` in order, then writes `args.out`. Prints one line per
/// dropped entry and, last, a JSON summary `{"entries":N,"neutralised":M}` on stdout.
pub fn unpack_main(args: UnpackArgs) -> Result<(), OciError> {
    // A compressed layer can expand without bound: stop at the disk size asked for, or at the
    // same ceiling the host puts on the layers themselves.
    let mut stats = Stats {
        limit: args
            .disk_mb
            .map_or(super::layout::MAX_LAYER_BYTES, |d| u64::from(d) * MIB),
        ..Stats::default()
    };
    for layer in &args.layers {
        apply_layer(layer, &args.root, &mut stats)?;
    }
    guest_dirs(&args.root)?;
    mkfs(&args.root, &args.out, args.disk_mb)?;
    println!(
        "{{\"entries\":{},\"neutralised\":{}}}",
        stats.entries, stats.neutralised
    );
    Ok(())
}

#[derive(Default)]
struct Stats {
    entries: u64,
    neutralised: u64,
    /// File bytes written so far, against `limit`.
    bytes: u64,
    limit: u64,
}

impl Stats {
    fn drop_entry(&mut self, path: &Path, why: &str) {
        self.neutralised += 1;
        println!("dropped {}: {why}", path.display());
    }
}

/// A layer path made relative and plain: leading `/` and `./` removed; `None` for `..`, an empty
/// path, or anything else odd.
pub(crate) fn sanitize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// `dir` (relative to `root`) if it resolves inside `root`.
fn inside(root: &Path, dir: &Path) -> Option<PathBuf> {
    let croot = root.canonicalize().ok()?;
    let c = root.join(dir).canonicalize().ok()?;
    c.starts_with(&croot).then_some(c)
}

/// Removes `path` (not following a symlink at it).
fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

fn apply_layer(layer: &Path, root: &Path, stats: &mut Stats) -> Result<(), OciError> {
    let mut archive = tar::Archive::new(open_maybe_gzip(layer)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let entries = archive
        .entries()
        .map_err(|e| OciError::Tar(format!("layer {}: {e}", layer.display())))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| OciError::Tar(format!("layer {}: {e}", layer.display())))?;
        let raw = entry
            .path()
            .map_err(|e| OciError::Tar(e.to_string()))?
            .into_owned();
        let Some(rel) = sanitize(&raw) else {
            if !matches!(raw.to_str(), Some("." | "./" | "/")) {
                stats.drop_entry(&raw, "path leaves the tree");
            }
            continue;
        };
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new("")).to_owned();
        if name == ".wh..wh..opq" {
            // Opaque directory: nothing of the lower layers stays in it. Markers come before
            // the layer's own entries for that directory, so clearing it now is enough.
            if let Some(dir) = inside(root, &parent) {
                for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    remove(&child.path()).map_err(io(format!("whiteout in {}", rel.display())))?;
                }
            }
            continue;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            match inside(root, &parent) {
                Some(dir) => {
                    remove(&dir.join(hidden)).map_err(io(format!("whiteout {}", rel.display())))?
                }
                None => stats.drop_entry(&raw, "whiteout outside the tree"),
            }
            continue;
        }
        let kind = entry.header().entry_type();
        stats.bytes += entry.size();
        if stats.bytes > stats.limit {
            return Err(OciError::TooSmall {
                need_mb: stats.bytes.div_ceil(MIB),
                disk_mb: (stats.limit / MIB) as u32,
            });
        }
        if matches!(kind, tar::EntryType::Block | tar::EntryType::Char) {
            stats.drop_entry(&raw, "device node");
            continue;
        }
        if kind == tar::EntryType::Link {
            let target = entry.link_name().ok().flatten().and_then(|t| sanitize(&t));
            let ok = target.as_ref().is_some_and(|t| {
                inside(root, t.parent().unwrap_or(Path::new(""))).is_some()
                    && std::fs::symlink_metadata(root.join(t)).is_ok_and(|m| !m.is_dir())
            });
            if !ok {
                stats.drop_entry(&raw, "hard link to nothing in the tree");
                continue;
            }
        }
        // A different kind of file replaces what a lower layer had there.
        let dest = root.join(&rel);
        if let Ok(m) = std::fs::symlink_metadata(&dest) {
            let new_dir = kind == tar::EntryType::Directory;
            if m.is_dir() != new_dir || m.file_type().is_symlink() {
                if inside(root, &parent).is_some() {
                    let _ = remove(&dest);
                }
            } else if new_dir {
                // An existing directory keeps its children; only its metadata changes.
            }
        }
        match entry.unpack_in(root) {
            Ok(true) => stats.entries += 1,
            Ok(false) => stats.drop_entry(&raw, "path leaves the tree"),
            Err(e) => {
                let mut why = e.to_string();
                let mut src = std::error::Error::source(&e);
                while let Some(s) = src {
                    why.push_str(&format!(": {s}"));
                    src = s.source();
                }
                stats.drop_entry(&raw, &why)
            }
        }
        // Drain what unpack_in did not read (it reads all on success; this is for the errors).
        let _ = std::io::copy(&mut entry.by_ref().take(u64::MAX), &mut std::io::sink());
    }
    Ok(())
}

/// Directories every sandbox needs, made if the image lacks them: where the guest agent goes
/// and the mount points it uses.
fn guest_dirs(root: &Path) -> Result<(), OciError> {
    use std::os::unix::fs::PermissionsExt;
    for (dir, mode) in [
        ("usr/local/sbin", 0o755),
        ("proc", 0o555),
        ("sys", 0o555),
        ("dev", 0o755),
        ("run", 0o755),
        ("tmp", 0o1777),
        ("etc", 0o755),
        ("root", 0o700),
    ] {
        let path = root.join(dir);
        if std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        // One component at a time, so no symlink of the image leads the creation out of it.
        let mut at = PathBuf::new();
        let mut ok = true;
        for c in Path::new(dir).components() {
            at.push(c);
            match std::fs::symlink_metadata(root.join(&at)) {
                Ok(m) if m.file_type().is_symlink() => {
                    if inside(root, &at).is_none() {
                        ok = false;
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => std::fs::create_dir(root.join(&at))
                    .map_err(io(format!("create {}", at.display())))?,
            }
        }
        if !ok {
            continue;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io(format!("chmod {dir}")))?;
    }
    Ok(())
}

/// Bytes and inodes the tree needs.
fn usage(root: &Path) -> std::io::Result<(u64, u64)> {
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let m = e.metadata()?;
            inodes += 1;
            bytes += m.len().div_ceil(4096) * 4096;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok((bytes, inodes))
}

fn mkfs(root: &Path, out: &Path, disk_mb: Option<u32>) -> Result<(), OciError> {
    let (bytes, inodes) = usage(root).map_err(io(format!("size of {}", root.display())))?;
    // Room for the agent, ext4's own structures and the sandbox's writes.
    let need_mb = (bytes + bytes / 4).div_ceil(MIB) + 64;
    let size_mb = match disk_mb {
        Some(d) if u64::from(d) < need_mb => {
            return Err(OciError::TooSmall {
                need_mb,
                disk_mb: d,
            })
        }
        Some(d) => u64::from(d),
        None => need_mb.max(256),
    };
    let inode_count = (inodes * 2 + 8192).max(size_mb * MIB / 16384);
    let mkfs = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .ok_or_else(|| OciError::Mkfs("mkfs.ext4 not found (install e2fsprogs)".into()))?;
    let output = Command::new(mkfs)
        .args(["-F", "-q", "-L", "rootfs", "-E", "root_owner=0:0", "-N"])
        .arg(inode_count.to_string())
        .arg("-d")
        .arg(root)
        .arg(out)
        .arg(format!("{size_mb}M"))
        .output()
        .map_err(io("run mkfs.ext4"))?;
    if !output.status.success() {
        return Err(OciError::Mkfs(
            String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_keeps_paths_in_the_tree() {
        assert_eq!(
            sanitize(Path::new("/etc/passwd")),
            Some(PathBuf::from("etc/passwd"))
        );
        assert_eq!(sanitize(Path::new("./a/./b")), Some(PathBuf::from("a/b")));
        assert_eq!(sanitize(Path::new("a/../../etc")), None);
        assert_eq!(sanitize(Path::new("..")), None);
        assert_eq!(sanitize(Path::new("./")), None);
        assert_eq!(sanitize(Path::new("/")), None);
    }

    #[test]
    fn whiteouts_and_opaque_dirs_apply_to_lower_layers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let layer = |entries: &[(&str, Option<&[u8]>)]| {
            let mut b = tar::Builder::new(Vec::new());
            for (path, data) in entries {
                let mut h = tar::Header::new_gnu();
                // Raw names: the builder refuses `..`, which a hostile layer has.
                h.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
                let d = data.unwrap_or_default();
                h.set_entry_type(if data.is_some() {
                    tar::EntryType::Regular
                } else {
                    tar::EntryType::Directory
                });
                h.set_size(d.len() as u64);
                h.set_mode(if data.is_some() { 0o644 } else { 0o755 });
                h.set_uid(0);
                h.set_gid(0);
                h.set_mtime(1_700_000_000);
                h.set_cksum();
                b.append(&h, d).unwrap();
            }
            b.into_inner().unwrap()
        };
        let l1 = dir.path().join("l1");
        std::fs::write(
            &l1,
            layer(&[
                ("a", None),
                ("a/keep", Some(b"1")),
                ("a/gone", Some(b"2")),
                ("o", None),
                ("o/old", Some(b"3")),
            ]),
        )
        .unwrap();
        let l2 = dir.path().join("l2");
        std::fs::write(
            &l2,
            layer(&[
                ("a/.wh.gone", Some(b"")),
                ("o/.wh..wh..opq", Some(b"")),
                ("o/new", Some(b"4")),
                ("../escape", Some(b"x")),
            ]),
        )
        .unwrap();
        let mut stats = Stats {
            limit: 1 << 20,
            ..Stats::default()
        };
        apply_layer(&l1, &root, &mut stats).unwrap();
        apply_layer(&l2, &root, &mut stats).unwrap();
        assert!(root.join("a/keep").exists());
        assert!(!root.join("a/gone").exists());
        assert!(!root.join("o/old").exists());
        assert!(root.join("o/new").exists());
        assert!(!dir.path().join("escape").exists());
        assert_eq!(stats.neutralised, 1);
        // Past the byte ceiling (a decompression bomb), the unpack stops.
        let mut small = Stats {
            limit: 2,
            ..Stats::default()
        };
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        assert!(matches!(
            apply_layer(&l1, &other, &mut small),
            Err(OciError::TooSmall { .. })
        ));
    }
}
