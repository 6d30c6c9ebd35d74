//! Seals on the files every clone of a template reads: the memory image and the device state.
//!
//! A bake records a [`Seal`] of each (content hash, size, change time) after making the file
//! read-only. Checking one is a `stat`: any write, truncation or hole punch moves the inode's
//! change time (`ctime`, which no caller can set back), so an unchanged `ctime` and size mean an
//! unchanged file and nothing is read. Only a file whose metadata moved is hashed again: same
//! content (a `chmod`, a backup tool's `touch`) re-seals it, different content is damage.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a file was when it was sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seal {
    /// SHA-256 of the whole content, lowercase hex.
    pub sha256: String,
    pub size: u64,
    /// Inode change time, nanoseconds since the epoch.
    pub ctime_ns: i128,
}

/// The outcome of checking a file against its seal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealCheck {
    /// Metadata unchanged: the content is what was sealed (nothing was read).
    Intact,
    /// Metadata changed but the content hashes the same: here is the seal to record instead.
    Resealed(Seal),
    /// The content is not what was sealed.
    Damaged(String),
}

/// Makes `path` read-only and seals it.
pub fn seal(path: &Path) -> std::io::Result<Seal> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))?;
    let sha256 = hash(path)?;
    let meta = std::fs::metadata(path)?;
    Ok(Seal {
        sha256,
        size: meta.len(),
        ctime_ns: ctime_ns(&meta),
    })
}

/// Checks `path` against `seal`; hashes the file only when its metadata moved.
pub fn check(path: &Path, seal: &Seal) -> std::io::Result<SealCheck> {
    let meta = std::fs::metadata(path)?;
    if meta.len() == seal.size && ctime_ns(&meta) == seal.ctime_ns {
        return Ok(SealCheck::Intact);
    }
    if meta.len() != seal.size {
        return Ok(SealCheck::Damaged(format!(
            "size {} instead of {}",
            meta.len(),
            seal.size
        )));
    }
    let sha256 = hash(path)?;
    if sha256 != seal.sha256 {
        return Ok(SealCheck::Damaged(format!(
            "content hash {sha256} instead of {}",
            seal.sha256
        )));
    }
    Ok(SealCheck::Resealed(Seal {
        sha256,
        size: meta.len(),
        ctime_ns: ctime_ns(&meta),
    }))
}

fn ctime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec())
}

fn hash(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    fn file(dir: &Path, content: &[u8]) -> std::path::PathBuf {
        let p = dir.join("mem");
        std::fs::File::create(&p)
            .unwrap()
            .write_all(content)
            .unwrap();
        p
    }

    #[test]
    fn untouched_file_is_intact_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), &[7u8; 8192]);
        let s = seal(&p).unwrap();
        assert_eq!(s.size, 8192);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o444
        );
        assert_eq!(check(&p, &s).unwrap(), SealCheck::Intact);
    }

    #[test]
    fn a_write_in_place_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), &[7u8; 8192]);
        let s = seal(&p).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[0u8; 16], 4096).unwrap();
        assert!(matches!(check(&p, &s).unwrap(), SealCheck::Damaged(_)));
    }

    #[test]
    fn a_punched_hole_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), &[7u8; 1 << 16]);
        let s = seal(&p).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        rustix::fs::fallocate(
            &f,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            1 << 15,
        )
        .unwrap();
        match check(&p, &s).unwrap() {
            SealCheck::Damaged(why) => assert!(why.contains("content hash"), "{why}"),
            other => panic!("hole not detected: {other:?}"),
        }
    }

    #[test]
    fn metadata_only_change_reseals() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), &[7u8; 8192]);
        let s = seal(&p).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
        match check(&p, &s).unwrap() {
            SealCheck::Resealed(n) => {
                assert_eq!(n.sha256, s.sha256);
                assert_ne!(n.ctime_ns, s.ctime_ns);
                assert_eq!(check(&p, &n).unwrap(), SealCheck::Intact);
            }
            other => panic!("expected a re-seal: {other:?}"),
        }
    }

    #[test]
    fn truncation_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        let p = file(dir.path(), &[7u8; 8192]);
        let s = seal(&p).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(4096).unwrap();
        assert!(matches!(check(&p, &s).unwrap(), SealCheck::Damaged(_)));
    }
}
