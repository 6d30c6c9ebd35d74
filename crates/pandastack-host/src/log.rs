//! Reading a log a host appends to (a sandbox's console) in pieces, so a caller can follow it
//! across the boundary: each read says where to continue, and a replaced or truncated file (a
//! new VM process) starts over from its top.
//!
//! A log is also kept bounded while its writer (the VM process, appending with `O_APPEND`)
//! goes on: [`trim_log`] cuts its oldest part out of the file in place
//! (`FALLOC_FL_COLLAPSE_RANGE`: the newest part moves to the top, the writer keeps appending at
//! the end) and counts the bytes cut in an extended attribute of the file, so offsets a reader
//! holds (in [`LogPos`]) stay offsets into the whole stream. Where the file system cannot
//! collapse a range (tmpfs), the file is emptied instead, counted the same way. Reads and trims
//! of one file take a shared and an exclusive `flock` on it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rustix::fs::{FallocateFlags, FlockOperation};

/// Extended attribute with the number of bytes [`trim_log`] cut from the top of a log.
const TRIMMED_XATTR: &str = "user.pandastack.trimmed";

use bytes::Bytes;

/// Where the next read of a log continues: which file (its inode) and how far into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPos {
    pub file: u64,
    pub offset: u64,
}

/// A piece of a log.
#[derive(Debug, Clone, Default)]
pub struct LogChunk {
    pub data: Bytes,
    /// Where to continue (`None`: the log does not exist yet).
    pub next: Option<LogPos>,
    /// The data starts at the top of a new (or truncated) file, not where the caller was.
    pub restarted: bool,
}

/// Reads at most `max` bytes of the log file at `path` from `from` (`None`: from the top of
/// what is kept). A missing file is an empty chunk. A position that [`trim_log`] has cut away
/// continues at the oldest byte kept.
pub fn read_log(path: &Path, from: Option<LogPos>, max: usize) -> std::io::Result<LogChunk> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LogChunk::default()),
        Err(e) => return Err(e),
    };
    let _shared = Flock::new(&file, FlockOperation::LockShared)?;
    let meta = file.metadata()?;
    let ident = meta.ino();
    let trimmed = trimmed(&file);
    let end = trimmed + meta.len();
    let (offset, restarted) = match from {
        Some(p) if p.file == ident && p.offset <= end => (p.offset.max(trimmed), false),
        Some(_) => (trimmed, true),
        None => (trimmed, false),
    };
    let want = (end - offset).min(max as u64) as usize;
    let mut buf = vec![0; want];
    let mut reader = &file;
    reader.seek(SeekFrom::Start(offset - trimmed))?;
    let mut n = 0;
    while n < want {
        match reader.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    buf.truncate(n);
    Ok(LogChunk {
        data: buf.into(),
        next: Some(LogPos {
            file: ident,
            offset: offset + n as u64,
        }),
        restarted,
    })
}

/// Keeps the log at `path` near `max` bytes: once it is larger, cuts its oldest part so that
/// about half of `max` (the newest) stays. Returns the bytes cut (0: nothing to do, or no file).
pub fn trim_log(path: &Path, max: u64) -> std::io::Result<u64> {
    let file = match File::options().read(true).write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if meta.len() <= max {
        return Ok(0);
    }
    let _exclusive = Flock::new(&file, FlockOperation::LockExclusive)?;
    // Collapsing works in whole blocks and must leave at least one byte behind.
    let block = meta.blksize().max(1);
    let len = meta.len();
    // Whole blocks, rounded up so the file ends under its bound (rounding down left a log
    // bounded at one or two blocks over it), but never the whole file.
    let mut cut = (len - max / 2).div_ceil(block) * block;
    if cut >= len {
        cut = (len - 1) / block * block;
    }
    if cut == 0 {
        return Ok(0);
    }
    let before = trimmed(&file);
    let cut = match rustix::fs::fallocate(&file, FallocateFlags::COLLAPSE_RANGE, 0, cut) {
        Ok(()) => cut,
        // No range collapse here (tmpfs, say): empty the file. The writer appends, so it goes
        // on at offset 0.
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::INVAL) => {
            file.set_len(0)?;
            len
        }
        Err(e) => return Err(e.into()),
    };
    rustix::fs::fsetxattr(
        &file,
        TRIMMED_XATTR,
        (before + cut).to_string().as_bytes(),
        rustix::fs::XattrFlags::empty(),
    )?;
    Ok(cut)
}

/// Bytes cut from the top of `file` so far (0 when never trimmed or unreadable).
fn trimmed(file: &File) -> u64 {
    let mut buf = [0u8; 24];
    rustix::fs::fgetxattr(file, TRIMMED_XATTR, &mut buf)
        .ok()
        .and_then(|n| std::str::from_utf8(&buf[..n]).ok()?.parse().ok())
        .unwrap_or(0)
}

/// An `flock` held until dropped.
struct Flock<'a>(&'a File);

impl<'a> Flock<'a> {
    fn new(file: &'a File, op: FlockOperation) -> std::io::Result<Self> {
        rustix::fs::flock(file, op)?;
        Ok(Self(file))
    }
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::flock(self.0, FlockOperation::Unlock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_appends_and_starts_over_on_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        assert!(read_log(&path, None, 100).unwrap().next.is_none());
        std::fs::write(&path, b"hello ").unwrap();
        let a = read_log(&path, None, 100).unwrap();
        assert_eq!(&a.data[..], b"hello ");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"world").unwrap();
        let b = read_log(&path, a.next, 3).unwrap();
        assert_eq!((&b.data[..], b.restarted), (&b"wor"[..], false));
        let c = read_log(&path, b.next, 100).unwrap();
        assert_eq!(&c.data[..], b"ld");
        // A new file in its place (a woken VM's console): from its top, said so.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"new").unwrap();
        let d = read_log(&path, c.next, 100).unwrap();
        assert_eq!((&d.data[..], d.restarted), (&b"new"[..], true));
    }

    /// Appends numbered lines `from..to` the way a VM process writes its console.
    fn append(path: &Path, from: u32, to: u32) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        let text: String = (from..to).map(|i| format!("line {i:07}\n")).collect();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    }

    fn trims_in_place_and_readers_keep_their_place(dir: &Path) -> bool {
        let path = dir.join("console.log");
        append(&path, 0, 80_000); // 13 bytes a line: ~1 MiB
        let len = std::fs::metadata(&path).unwrap().len();
        let early = read_log(&path, None, 13 * 10).unwrap();
        assert!(early.data.starts_with(b"line 0000000\n"));
        let cut = trim_log(&path, 256 << 10).unwrap();
        assert!(cut > 0, "over the bound: something is cut");
        let kept = std::fs::metadata(&path).unwrap().len();
        assert!(kept <= 256 << 10, "{kept} bytes kept");
        // The writer goes on at the end.
        append(&path, 80_000, 80_010);
        let all = read_log(&path, None, usize::MAX).unwrap();
        assert!(!all.restarted);
        assert!(
            all.data.ends_with(b"line 0080009\n"),
            "the newest part is kept"
        );
        let collapsed = cut < len;
        // Offsets are into the whole stream (emptied or collapsed): the whole-log read ends
        // where a follower that started at the top would end.
        assert_eq!(all.next.unwrap().offset, len + 130);
        // A follower whose place was cut continues at the oldest byte kept, not restarted.
        let next = read_log(&path, early.next, 13).unwrap();
        assert!(!next.restarted);
        assert_eq!(&next.data[..], &all.data[..13]);
        // Under the bound: nothing to do.
        assert_eq!(trim_log(&path, 256 << 10).unwrap(), 0);
        collapsed
    }

    /// A bound of a block or two is kept too: the cut rounds up to whole blocks (it rounded
    /// down, and a 10 KiB log bounded at 4 KiB stayed at 5.8 KiB).
    #[test]
    fn small_bounds_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qemu.log");
        append(&path, 0, 772); // 10,036 bytes
        assert!(trim_log(&path, 4096).unwrap() > 0);
        let kept = std::fs::metadata(&path).unwrap().len();
        assert!(kept <= 4096, "{kept} bytes kept");
        let all = read_log(&path, None, usize::MAX).unwrap();
        assert!(
            all.data.ends_with(b"line 0000771\n"),
            "the newest part is kept"
        );
    }

    #[test]
    fn trim_collapses_on_a_disk_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let fs = std::process::Command::new("stat")
            .args(["-f", "-c", "%T"])
            .arg(dir.path())
            .output()
            .unwrap();
        let fs = String::from_utf8_lossy(&fs.stdout).trim().to_owned();
        let collapsed = trims_in_place_and_readers_keep_their_place(dir.path());
        if ["ext2/ext3", "xfs"].contains(&fs.as_str()) {
            assert!(collapsed, "{fs} collapses ranges");
        }
    }

    #[test]
    fn trim_empties_where_ranges_cannot_collapse() {
        // tmpfs has no FALLOC_FL_COLLAPSE_RANGE.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm");
            return;
        };
        assert!(!trims_in_place_and_readers_keep_their_place(dir.path()));
    }
}
