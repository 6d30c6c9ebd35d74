//! Tree → sparse ext4 image with `mkfs.ext4 -d` (no mounting, no loop device).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use super::run::Session;

const BLOCK: u64 = 4096;
const MIB: u64 = 1 << 20;

/// What a tree needs from a file system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TreeUsage {
    /// Data and directory blocks, 4 KiB-rounded, hard links counted once.
    pub block_bytes: u64,
    pub inodes: u64,
}

pub(super) fn tree_usage(root: &Path) -> std::io::Result<TreeUsage> {
    let mut usage = TreeUsage::default();
    let mut seen = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let md = std::fs::symlink_metadata(&dir)?;
        usage.inodes += 1;
        usage.block_bytes += md.len().div_ceil(BLOCK).max(1) * BLOCK;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let md = entry.metadata()?;
            let ft = md.file_type();
            if ft.is_dir() {
                stack.push(entry.path());
                continue;
            }
            if md.nlink() > 1 && !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            usage.inodes += 1;
            if ft.is_file() {
                usage.block_bytes += md.len().div_ceil(BLOCK) * BLOCK;
            } else if ft.is_symlink() && md.len() >= 60 {
                // Short symlink targets live in the inode itself.
                usage.block_bytes += BLOCK;
            }
        }
    }
    Ok(usage)
}

/// mke2fs's bytes-per-inode for a file system of this size (`mke2fs.conf`: "small" below 512 MiB).
fn inode_ratio(disk_bytes: u64) -> u64 {
    if disk_bytes < 512 * MIB {
        4096
    } else {
        16384
    }
}

/// mke2fs's default journal size (`ext2fs_default_journal_size`).
fn journal_bytes(disk_bytes: u64) -> u64 {
    let blocks = disk_bytes / BLOCK;
    let journal_blocks = match blocks {
        b if b < 32_768 => 1024,
        b if b < 256 * 1024 => 4096,
        b if b < 512 * 1024 => 8192,
        b if b < 4096 * 1024 => 16_384,
        b if b < 8192 * 1024 => 32_768,
        b if b < 16_384 * 1024 => 65_536,
        b if b < 32_768 * 1024 => 131_072,
        _ => 262_144,
    };
    journal_blocks * BLOCK
}

/// Bytes a file system of `disk_bytes` must have to hold the tree: its blocks plus slack for
/// extent and directory index blocks, inode tables, journal and group metadata.
pub(super) fn required_bytes(usage: TreeUsage, disk_bytes: u64) -> u64 {
    let inode_tables = disk_bytes / inode_ratio(disk_bytes) * 256;
    usage.block_bytes
        + usage.block_bytes / 64
        + inode_tables
        + journal_bytes(disk_bytes)
        + disk_bytes / 4096
}

/// Why a tree does not fit, if it does not.
pub(super) fn check_fits(usage: TreeUsage, disk_mb: u32) -> Result<(), TooSmall> {
    let disk = u64::from(disk_mb) * MIB;
    let need = required_bytes(usage, disk);
    let inodes = disk / inode_ratio(disk);
    if need > disk || usage.inodes + 16 > inodes {
        return Err(too_small(usage, disk_mb));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TooSmall {
    pub need_mb: u64,
    pub suggest_mb: u64,
}

pub(super) fn too_small(usage: TreeUsage, disk_mb: u32) -> TooSmall {
    let disk = u64::from(disk_mb) * MIB;
    let need_mb = required_bytes(usage, disk).div_ceil(MIB);
    // Room for the sandbox's own files on top, rounded up to 256 MiB; enough inodes too.
    let for_inodes = (usage.inodes + 16) * 16_384 / MIB + 1;
    let suggest_mb = (need_mb * 5 / 4).max(for_inodes).div_ceil(256) * 256;
    TooSmall {
        need_mb,
        suggest_mb: suggest_mb.max(u64::from(disk_mb) + 256),
    }
}

pub(super) enum MkfsError {
    TooSmall,
    Failed(String),
    Io(std::io::Error),
}

/// Creates `image` (sparse, `disk_mb` MiB) holding `tree`, owned by root.
pub(super) fn mkfs(
    session: &mut Session<'_>,
    tree: &Path,
    image: &Path,
    disk_mb: u32,
) -> Result<(), MkfsError> {
    let file = std::fs::File::create(image).map_err(MkfsError::Io)?;
    file.set_len(u64::from(disk_mb) * MIB)
        .map_err(MkfsError::Io)?;
    drop(file);
    let mut cmd = Command::new("mkfs.ext4");
    // lazy_journal_init: the journal stays a hole in the sparse file, which reads as zeros
    // exactly like the zeroed journal mke2fs would otherwise write (saves 32-128 MiB per image).
    cmd.args([
        "-F",
        "-q",
        "-L",
        "rootfs",
        "-E",
        "root_owner=0:0,lazy_journal_init=1",
        "-d",
    ])
    .arg(tree)
    .arg(image);
    let description = format!(
        "mkfs.ext4 -F -q -L rootfs -E root_owner=0:0,lazy_journal_init=1 -d {} {}",
        tree.display(),
        image.display()
    );
    session.note(&format!("$ {description}"));
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) => return Err(MkfsError::Failed(format!("run mkfs.ext4: {e}"))),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for line in text.lines() {
        session.output(line.to_owned());
    }
    if out.status.success() {
        return Ok(());
    }
    let full = [
        "Could not allocate",
        "No space left",
        "inode table",
        "ENOSPC",
    ]
    .iter()
    .any(|s| text.contains(s));
    if full {
        Err(MkfsError::TooSmall)
    } else {
        Err(MkfsError::Failed(format!("{description} ({})", out.status)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_sizes_match_mke2fs() {
        assert_eq!(journal_bytes(1024 * MIB), 32 * MIB);
        assert_eq!(journal_bytes(8192 * MIB), 64 * MIB);
        assert_eq!(journal_bytes(256 * MIB), 16 * MIB);
    }

    #[test]
    fn measures_a_tree_counting_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/a"), vec![1u8; 5000]).unwrap();
        std::fs::hard_link(root.join("d/a"), root.join("b")).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        std::os::unix::fs::symlink("short", root.join("s")).unwrap();
        std::os::unix::fs::symlink("x".repeat(80), root.join("long")).unwrap();
        let u = tree_usage(root).unwrap();
        // 2 directories, 1 linked file, 1 empty file, 2 symlinks.
        assert_eq!(u.inodes, 6);
        // 2 dirs (>= 1 block each) + 2 blocks for a + 1 for the long symlink.
        assert!(
            u.block_bytes >= 5 * BLOCK && u.block_bytes < 8 * BLOCK,
            "{u:?}"
        );
    }

    #[test]
    fn judges_whether_a_tree_fits() {
        let small = TreeUsage {
            block_bytes: 200 * MIB,
            inodes: 10_000,
        };
        assert!(check_fits(small, 1024).is_ok());
        let big = TreeUsage {
            block_bytes: 1000 * MIB,
            inodes: 10_000,
        };
        let e = check_fits(big, 1024).unwrap_err();
        assert!(e.need_mb > 1024 && e.suggest_mb >= e.need_mb, "{e:?}");
        assert_eq!(e.suggest_mb % 256, 0);
        assert!(check_fits(big, e.suggest_mb as u32).is_ok());
        let many_files = TreeUsage {
            block_bytes: 100 * MIB,
            inodes: 70_000,
        };
        let e = check_fits(many_files, 1024).unwrap_err();
        assert!(check_fits(many_files, e.suggest_mb as u32).is_ok(), "{e:?}");
    }

    /// Real mkfs.ext4 (e2fsprogs, no root needed): a tree fits, the image is sparse and owned
    /// by root, and a too-small disk is reported as such.
    #[test]
    fn packs_a_tree_and_reports_a_disk_too_small() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("etc")).unwrap();
        std::fs::write(tree.join("etc/hostname"), "sandbox\n").unwrap();
        let mut progress = |_: super::super::Progress| {};
        let mut s = Session::new(dir.path().join("log"), &mut progress).unwrap();
        let img = dir.path().join("img.ext4");
        assert!(mkfs(&mut s, &tree, &img, 64).is_ok());
        let md = std::fs::metadata(&img).unwrap();
        assert_eq!(md.len(), 64 * MIB);
        assert!(
            md.blocks() * 512 < 8 * MIB,
            "sparse: {} bytes",
            md.blocks() * 512
        );
        let cat = Command::new("debugfs")
            .args(["-R", "cat /etc/hostname"])
            .arg(&img)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&cat.stdout), "sandbox\n");

        // 24 MiB of data does not fit 16 MiB.
        std::fs::write(tree.join("big"), vec![7u8; 24 << 20]).unwrap();
        assert!(matches!(
            mkfs(&mut s, &tree, &img, 16),
            Err(MkfsError::TooSmall)
        ));
    }
}
