//! Reading a log a host appends to (a sandbox's console) in pieces, so a caller can follow it
//! across the boundary: each read says where to continue, and a replaced or truncated file (a
//! new VM process) starts over from its top.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

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

/// Reads at most `max` bytes of the log file at `path` from `from` (`None`: from the top). A
/// missing file is an empty chunk.
pub fn read_log(path: &Path, from: Option<LogPos>, max: usize) -> std::io::Result<LogChunk> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(LogChunk::default()),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    let ident = meta.ino();
    let (offset, restarted) = match from {
        Some(p) if p.file == ident && p.offset <= meta.len() => (p.offset, false),
        Some(_) => (0, true),
        None => (0, false),
    };
    let want = (meta.len() - offset).min(max as u64) as usize;
    let mut buf = vec![0; want];
    file.seek(SeekFrom::Start(offset))?;
    let mut n = 0;
    while n < want {
        match file.read(&mut buf[n..])? {
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
}
