//! The confined half: applies the layers to the root directory and makes the ext4 image. It runs
//! as uid 0 of a user namespace that is uid 100000+ on the host, so it can write nothing on the
//! host but the build's own directory; it still drops what a hostile layer could use against
//! whatever reads the image later (device nodes) or against this tree (`..`, links out of it).

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

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

/// What the unpacker reports on its last stdout line, as JSON.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(super) enum Report {
    Done { entries: u64, neutralised: u64 },
    TooSmall { need_mb: u64, disk_mb: u32 },
}

/// Applies `args.layers` to `args.root` in order, then writes `args.out`. Prints one line per
/// dropped entry and, last, a JSON [`Report`] on stdout (also for a disk too small, so the
/// parent can say so precisely).
pub fn unpack_main(args: UnpackArgs) -> Result<(), OciError> {
    let result = unpack(&args);
    let report = match &result {
        Ok(stats) => Some(Report::Done {
            entries: stats.entries,
            neutralised: stats.neutralised,
        }),
        Err(OciError::TooSmall { need_mb, disk_mb }) => Some(Report::TooSmall {
            need_mb: *need_mb,
            disk_mb: *disk_mb,
        }),
        Err(_) => None,
    };
    if let Some(r) = report {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    }
    result.map(|_| ())
}

/// Whether a `/proc/<pid>/uid_map` maps any id to host root.
fn maps_host_root(uid_map: &str) -> bool {
    uid_map.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        // inside, outside, count: does [outside, outside + count) hold 0?
        f.len() == 3 && f[1] == 0 && f[2] > 0
    })
}

fn unpack(args: &UnpackArgs) -> Result<Stats, OciError> {
    // Defence in depth: run by hand as root, this would unpack untrusted layers as real root.
    let uid_map =
        std::fs::read_to_string("/proc/self/uid_map").map_err(io("read /proc/self/uid_map"))?;
    if maps_host_root(&uid_map) {
        return Err(OciError::Unpacker(
            "refusing to unpack where host root is mapped: oci-unpack runs in the user \
             namespace import_oci makes for it"
                .into(),
        ));
    }
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
    Ok(stats)
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
    /// Counts and reports an entry left out. The path is quoted (escaped): a name with a
    /// newline must not pass for a line of its own.
    fn drop_entry(&mut self, path: &Path, why: &str) {
        self.neutralised += 1;
        let mut shown = format!("{path:?}");
        if shown.len() > 300 {
            let mut end = 300;
            while !shown.is_char_boundary(end) {
                end -= 1;
            }
            shown.truncate(end);
            shown.push('…');
        }
        println!("dropped {shown}: {}", why.escape_debug());
    }
}

/// A layer path made relative and plain: leading `/` and `./` removed; `None` for `..`, an empty
/// path, a NUL byte (possible in a PAX header), or anything else odd.
pub(crate) fn sanitize(path: &Path) -> Option<PathBuf> {
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return None;
    }
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

/// `dir` (relative to `root`) resolved, symlinks and all, if that is inside `root`.
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

/// What an entry's base name asks for.
#[derive(Debug, PartialEq)]
enum Whiteout<'a> {
    /// Not a whiteout: an ordinary entry.
    No,
    /// `.wh..wh..opq`: the directory hides everything of the lower layers.
    Opaque,
    /// `.wh.<name>`: `<name>` of the lower layers is gone.
    Remove(&'a str),
    /// `.wh.`, `.wh..`, `.wh...`: would name the directory itself or its parent.
    Invalid,
}

fn whiteout(name: &str) -> Whiteout<'_> {
    if name == ".wh..wh..opq" {
        return Whiteout::Opaque;
    }
    match name.strip_prefix(".wh.") {
        None => Whiteout::No,
        Some("" | "." | "..") => Whiteout::Invalid,
        Some(hidden) => Whiteout::Remove(hidden),
    }
}

fn apply_layer(layer: &Path, root: &Path, stats: &mut Stats) -> Result<(), OciError> {
    let mut archive = tar::Archive::new(open_maybe_gzip(layer)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let layer_err = |e: std::io::Error| OciError::Tar(format!("layer {}: {e}", layer.display()));
    for entry in archive.entries().map_err(layer_err)? {
        let mut entry = entry.map_err(layer_err)?;
        let raw = entry.path().map_err(layer_err)?.into_owned();
        let Some(rel) = sanitize(&raw) else {
            // `.` and `/` name the root itself, which exists: not worth a warning.
            if !matches!(raw.to_str(), Some("." | "./" | "/")) {
                stats.drop_entry(&raw, "path leaves the tree, is empty or has a NUL byte");
            }
            continue;
        };
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = rel.parent().unwrap_or(Path::new("")).to_owned();
        match whiteout(&name) {
            Whiteout::No => {}
            Whiteout::Invalid => {
                stats.drop_entry(&raw, "whiteout of no name");
                continue;
            }
            Whiteout::Opaque => {
                // Opaque directory: nothing of the lower layers stays in it. Markers come
                // before the layer's own entries for that directory (every writer puts them
                // first, as the directory's first entry), so clearing it now is enough. The
                // directory is resolved and checked to be in the tree before anything goes.
                match inside(root, &parent) {
                    Some(dir) => {
                        for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                            remove(&child.path())
                                .map_err(io(format!("whiteout in {}", rel.display())))?;
                        }
                    }
                    None if std::fs::symlink_metadata(root.join(&parent)).is_err() => {}
                    None => stats.drop_entry(&raw, "opaque whiteout outside the tree"),
                }
                continue;
            }
            Whiteout::Remove(hidden) => {
                match inside(root, &parent) {
                    Some(dir) => remove(&dir.join(hidden))
                        .map_err(io(format!("whiteout {}", rel.display())))?,
                    // Hiding what is not there is a no-op.
                    None if std::fs::symlink_metadata(root.join(&parent)).is_err() => {}
                    None => stats.drop_entry(&raw, "whiteout outside the tree"),
                }
                continue;
            }
        }
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
            // Metadata for the archive, not a file (its name is arbitrary).
            continue;
        }
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
        // A different kind of file replaces what a lower layer had there (a directory cannot
        // be overwritten by a file, nor a file by a directory; a symlink is never written
        // through), and so do a hard link and a fifo, which the tar crate would not put over an
        // existing file. Only a directory over a directory merges.
        let canon_parent = inside(root, &parent);
        let existing = canon_parent
            .as_ref()
            .and_then(|p| std::fs::symlink_metadata(p.join(&name)).ok());
        if let (Some(p), Some(m)) = (&canon_parent, &existing) {
            let new_dir = kind == tar::EntryType::Directory;
            let replaces = matches!(kind, tar::EntryType::Link | tar::EntryType::Fifo);
            if m.is_dir() != new_dir || m.file_type().is_symlink() || replaces {
                remove(&p.join(&name)).map_err(io(format!("replace {}", rel.display())))?;
            }
        }
        if kind == tar::EntryType::Fifo {
            // The tar crate would write a fifo as an empty regular file.
            match make_fifo(canon_parent.as_deref(), &name, entry.header()) {
                Ok(()) => stats.entries += 1,
                Err(why) => stats.drop_entry(&raw, &format!("fifo: {why}")),
            }
            continue;
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
                // Half-made (say, an owner outside the 65536 ids): a dropped entry is absent.
                if kind != tar::EntryType::Directory {
                    if let Some(p) = inside(root, &parent) {
                        let _ = std::fs::symlink_metadata(p.join(&name))
                            .map(|m| !m.is_dir() && remove(&p.join(&name)).is_ok());
                    }
                }
                stats.drop_entry(&raw, &why)
            }
        }
    }
    Ok(())
}

/// A named pipe `name` in `dir` (already resolved inside the tree), with the entry's owner and
/// mode; nothing is left of it on failure.
fn make_fifo(dir: Option<&Path>, name: &str, h: &tar::Header) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir.ok_or("its directory is missing or outside the tree")?;
    let path = dir.join(name);
    let mode = h.mode().map_err(|e| e.to_string())? & 0o7777;
    let ids = (
        h.uid().map_err(|e| e.to_string())?,
        h.gid().map_err(|e| e.to_string())?,
    );
    let (uid, gid) = match ids {
        (u, g) if u <= u64::from(u32::MAX) && g <= u64::from(u32::MAX) => (u as u32, g as u32),
        _ => return Err("owner out of range".into()),
    };
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &path,
        rustix::fs::Mode::from_raw_mode(mode),
    )
    .map_err(|e| e.to_string())?;
    // Owner first, then the mode (a chown clears set-id bits).
    let done = std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
        .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)));
    done.map_err(|e| {
        let _ = std::fs::remove_file(&path);
        e.to_string()
    })
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
    // Room for the agent, ext4's own structures and the sandbox's writes. Unasked, at least
    // 256 MiB: the image's size is the sandbox's disk, and a busybox-sized tree plus 64 MiB
    // would leave it some 40 MiB once the agent and the journal are in.
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
        // lazy_journal_init: the journal stays a hole of the new sparse file (as in build/mkfs.rs).
        .args([
            "-F",
            "-q",
            "-L",
            "rootfs",
            "-E",
            "root_owner=0:0,lazy_journal_init=1",
            "-N",
        ])
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
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn sanitize_keeps_paths_in_the_tree() {
        assert_eq!(
            sanitize(Path::new("/etc/passwd")),
            Some(PathBuf::from("etc/passwd"))
        );
        assert_eq!(sanitize(Path::new("./a/./b")), Some(PathBuf::from("a/b")));
        assert_eq!(sanitize(Path::new("//a//b/")), Some(PathBuf::from("a/b")));
        assert_eq!(sanitize(Path::new("a/../../etc")), None);
        assert_eq!(sanitize(Path::new("a/..")), None);
        assert_eq!(sanitize(Path::new("..")), None);
        assert_eq!(sanitize(Path::new("./")), None);
        assert_eq!(sanitize(Path::new("/")), None);
        assert_eq!(sanitize(Path::new("")), None);
        let nul = std::ffi::OsStr::from_bytes(b"a/b\0c");
        assert_eq!(sanitize(Path::new(nul)), None);
        // `..` inside a name is just a name.
        assert_eq!(sanitize(Path::new("a/..b")), Some(PathBuf::from("a/..b")));
    }

    #[test]
    fn host_root_in_the_uid_map_is_refused() {
        assert!(maps_host_root("         0          0 4294967295\n"));
        assert!(maps_host_root("0 100000 65536\n1 0 1\n"));
        assert!(!maps_host_root("         0     100000      65536\n"));
        assert!(!maps_host_root(""));
    }

    #[test]
    fn whiteout_names() {
        assert_eq!(whiteout("file"), Whiteout::No);
        assert_eq!(whiteout(".wh..wh..opq"), Whiteout::Opaque);
        assert_eq!(whiteout(".wh.gone"), Whiteout::Remove("gone"));
        assert_eq!(whiteout(".wh..hidden"), Whiteout::Remove(".hidden"));
        for bad in [".wh.", ".wh..", ".wh..."] {
            assert_eq!(whiteout(bad), Whiteout::Invalid, "{bad}");
        }
    }

    enum E<'a> {
        Dir,
        File(&'a [u8]),
        Symlink(&'a str),
        Hardlink(&'a str),
        Char,
        Fifo,
    }

    /// A layer tar. Names are written raw: the builder refuses `..`, which a hostile layer has.
    /// Owners are the test's own ids, so no root is needed to apply it.
    fn layer(entries: &[(&str, E)]) -> Vec<u8> {
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let mut b = tar::Builder::new(Vec::new());
        for (path, e) in entries {
            let mut h = tar::Header::new_gnu();
            h.as_gnu_mut().unwrap().name[..path.len()].copy_from_slice(path.as_bytes());
            let (kind, data, mode): (_, &[u8], _) = match e {
                E::Dir => (tar::EntryType::Directory, b"", 0o755),
                E::File(d) => (tar::EntryType::Regular, d, 0o644),
                E::Symlink(t) | E::Hardlink(t) => {
                    h.set_link_name(t).unwrap();
                    let k = match e {
                        E::Symlink(_) => tar::EntryType::Symlink,
                        _ => tar::EntryType::Link,
                    };
                    (k, b"", 0o777)
                }
                E::Char => {
                    h.set_device_major(1).unwrap();
                    h.set_device_minor(3).unwrap();
                    (tar::EntryType::Char, b"", 0o666)
                }
                E::Fifo => (tar::EntryType::Fifo, b"", 0o640),
            };
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            h.set_uid(uid.into());
            h.set_gid(gid.into());
            h.set_mtime(1_700_000_000);
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn apply(dir: &Path, root: &Path, name: &str, bytes: Vec<u8>, stats: &mut Stats) {
        let l = dir.join(name);
        std::fs::write(&l, bytes).unwrap();
        apply_layer(&l, root, stats).unwrap();
    }

    #[test]
    fn whiteouts_and_opaque_dirs_apply_to_lower_layers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut stats = Stats {
            limit: 1 << 20,
            ..Stats::default()
        };
        apply(
            dir.path(),
            &root,
            "l1",
            layer(&[
                ("a", E::Dir),
                ("a/keep", E::File(b"1")),
                ("a/gone", E::File(b"2")),
                ("a/gonedir", E::Dir),
                ("a/gonedir/x", E::File(b"x")),
                ("o", E::Dir),
                ("o/old", E::File(b"3")),
                ("o/olddir", E::Dir),
                ("link-to-a", E::Symlink("a")),
            ]),
            &mut stats,
        );
        assert_eq!((stats.entries, stats.neutralised), (9, 0));
        apply(
            dir.path(),
            &root,
            "l2",
            layer(&[
                ("a/.wh.gone", E::File(b"")),
                ("./a/.wh.gonedir", E::File(b"")),
                ("o/.wh..wh..opq", E::File(b"")),
                ("o/new", E::File(b"4")),
                // A whiteout of a symlink removes the link, not what it points to.
                ("/.wh.link-to-a", E::File(b"")),
                // Whiteouts of nothing are no-ops; of no name, dropped.
                ("nowhere/.wh.x", E::File(b"")),
                ("a/.wh.", E::File(b"")),
                ("a/.wh..", E::File(b"")),
                ("a/.wh...", E::File(b"")),
            ]),
            &mut stats,
        );
        assert!(root.join("a/keep").exists());
        assert!(!root.join("a/gone").exists());
        assert!(!root.join("a/gonedir").exists());
        assert!(!root.join("o/old").exists());
        assert!(!root.join("o/olddir").exists());
        assert_eq!(std::fs::read(root.join("o/new")).unwrap(), b"4");
        assert!(std::fs::symlink_metadata(root.join("link-to-a")).is_err());
        assert!(root.join("a").is_dir());
        assert!(
            dir.path().join("l1").exists(),
            "nothing above the root went"
        );
        assert_eq!(stats.neutralised, 3, "the three nameless whiteouts");
        // No whiteout marker itself lands in the tree.
        assert!(!root.join("a/.wh.gone").exists());
        assert!(!root.join("o/.wh..wh..opq").exists());

        // Past the byte ceiling (a decompression bomb), the unpack stops.
        let mut small = Stats {
            limit: 2,
            ..Stats::default()
        };
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        assert!(matches!(
            apply_layer(&dir.path().join("l1"), &other, &mut small),
            Err(OciError::TooSmall { .. })
        ));
    }

    #[test]
    fn hostile_entries_stay_out_of_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), "v").unwrap();
        std::fs::write(outside.join("victim2"), "v").unwrap();
        let outside_s = outside.to_str().unwrap();
        let mut stats = Stats {
            limit: 1 << 20,
            ..Stats::default()
        };
        apply(
            dir.path(),
            &root,
            "l1",
            layer(&[
                ("../escape", E::File(b"x")),
                ("a/../../escape2", E::File(b"x")),
                ("evil", E::Symlink(outside_s)),
                ("evil/pwned", E::File(b"x")),
                ("up", E::Symlink("../outside")),
                ("up/pwned", E::File(b"x")),
                ("up/.wh.victim", E::File(b"")),
                ("evil/.wh..wh..opq", E::File(b"")),
                ("null", E::Char),
                ("f", E::File(b"data")),
                ("hard", E::Hardlink("f")),
                ("hard-missing", E::Hardlink("nope")),
                ("hard-out", E::Hardlink("../outside/victim")),
                ("hard-abs", E::Hardlink("/etc/passwd")),
            ]),
            &mut stats,
        );
        assert!(!dir.path().join("escape").exists());
        assert!(!dir.path().join("escape2").exists());
        assert!(!outside.join("pwned").exists());
        assert!(outside.join("victim").exists());
        assert!(outside.join("victim2").exists());
        assert!(std::fs::symlink_metadata(root.join("null")).is_err());
        let f = std::fs::metadata(root.join("f")).unwrap();
        let h = std::fs::metadata(root.join("hard")).unwrap();
        assert_eq!((f.ino(), f.nlink()), (h.ino(), 2));
        for gone in ["hard-missing", "hard-out", "hard-abs"] {
            assert!(
                std::fs::symlink_metadata(root.join(gone)).is_err(),
                "{gone}"
            );
        }
        // Applied: evil, up, f, hard. Dropped: the two `..` paths, the two writes and the two
        // whiteouts through links out of the tree, the device and three bad hard links.
        assert_eq!((stats.entries, stats.neutralised), (4, 10));
    }

    #[test]
    fn an_upper_layer_replaces_a_path_of_another_kind() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(dir.path().join("target")).unwrap();
        let mut stats = Stats {
            limit: 1 << 20,
            ..Stats::default()
        };
        apply(
            dir.path(),
            &root,
            "l1",
            layer(&[
                ("d2f", E::Dir),
                ("d2f/child", E::File(b"c")),
                ("f2d", E::File(b"f")),
                ("l2d", E::Symlink("../target")),
                ("keep", E::Dir),
                ("keep/lower", E::File(b"l")),
                ("relinked", E::File(b"lower file")),
            ]),
            &mut stats,
        );
        apply(
            dir.path(),
            &root,
            "l2",
            layer(&[
                ("d2f", E::File(b"now a file")),
                ("f2d", E::Dir),
                ("f2d/child", E::File(b"c")),
                ("l2d", E::Dir),
                ("l2d/inside", E::File(b"i")),
                ("keep", E::Dir),
                ("keep/upper", E::File(b"u")),
                ("relinked", E::Hardlink("keep/upper")),
            ]),
            &mut stats,
        );
        assert_eq!(std::fs::read(root.join("d2f")).unwrap(), b"now a file");
        assert_eq!(std::fs::read(root.join("f2d/child")).unwrap(), b"c");
        assert!(std::fs::symlink_metadata(root.join("l2d"))
            .unwrap()
            .is_dir());
        assert!(root.join("l2d/inside").is_file());
        assert!(!dir.path().join("target/inside").exists());
        assert!(root.join("keep/lower").is_file() && root.join("keep/upper").is_file());
        assert_eq!(std::fs::read(root.join("relinked")).unwrap(), b"u");
        assert_eq!(stats.neutralised, 0);
    }

    #[test]
    fn fifos_are_made_as_fifos() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let mut stats = Stats {
            limit: 1 << 20,
            ..Stats::default()
        };
        apply(
            dir.path(),
            &root,
            "l1",
            layer(&[
                ("run", E::Dir),
                ("run/pipe", E::File(b"was a file")),
                ("run/pipe", E::Fifo),
                ("nodir/pipe", E::Fifo),
            ]),
            &mut stats,
        );
        let m = std::fs::symlink_metadata(root.join("run/pipe")).unwrap();
        assert!(m.file_type().is_fifo());
        assert_eq!(m.mode() & 0o7777, 0o640);
        assert!(!root.join("nodir").exists());
        assert_eq!((stats.entries, stats.neutralised), (3, 1));
    }

    #[test]
    fn reports_round_trip_as_json_lines() {
        for r in [
            Report::Done {
                entries: 3,
                neutralised: 1,
            },
            Report::TooSmall {
                need_mb: 300,
                disk_mb: 100,
            },
        ] {
            let line = serde_json::to_string(&r).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<Report>(&line).unwrap(), r);
        }
    }
}
