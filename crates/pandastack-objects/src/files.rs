//! Whole files in and out: fixed-size chunks, holes kept as holes, a few chunks in flight.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::{stream, StreamExt, TryStreamExt};

use crate::manifest::check_chunk_size;
use crate::{names, ChunkHash, ChunkRef, Manifest, Objects, ObjectsError};

/// What [`Objects::upload_file`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UploadStats {
    /// Chunks in the file (holes included).
    pub chunks: u64,
    /// All-zero chunks, recorded as holes and not stored.
    pub holes: u64,
    /// Chunks this upload stored.
    pub uploaded: u64,
    /// Chunks that were stored already (by an earlier upload, an interrupted one or a
    /// concurrent writer).
    pub skipped_existing: u64,
    /// Bytes of the chunks this upload stored.
    pub bytes_uploaded: u64,
}

/// The result of [`Objects::upload_file`]: the manifest to store with
/// [`Objects::put_manifest`], and what it cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub manifest: Manifest,
    pub stats: UploadStats,
}

/// What [`Objects::download_file`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DownloadStats {
    /// Chunks read from the store.
    pub chunks: u64,
    /// Holes left unallocated.
    pub holes: u64,
    pub bytes_downloaded: u64,
    /// Chunks copied from a local file instead ([`Objects::download_file_reusing`]).
    pub reused: u64,
}

/// A local file whose chunks a download may copy instead of fetching them: its path and its
/// manifest (the same chunk size as the download's, else it is not used). A chunk copied is
/// hashed as a downloaded one is.
#[derive(Debug, Clone, Copy)]
pub struct Reuse<'a> {
    pub path: &'a Path,
    pub manifest: &'a Manifest,
}

/// Where one data chunk of a download comes from.
#[derive(Clone, Copy)]
enum From {
    Store,
    /// The chunk at this offset of the reused file.
    Local(u64),
}

enum Sent {
    Hole,
    Uploaded(ChunkHash, u64),
    Existing(ChunkHash),
}

impl Objects {
    /// Stores the file at `path` as chunks of `chunk_size` bytes ([`crate::DEFAULT_CHUNK_SIZE`]
    /// is 4 MiB) in workspace `ws` and returns its manifest. All-zero chunks become holes and are
    /// not stored; ranges the filesystem reports as holes (`SEEK_DATA`) are not even read, so a
    /// sparse multi-GiB file costs what its data costs. A chunk that is stored already is not
    /// sent again (a `HEAD` per chunk), so a second upload of an unchanged file, or a retry after
    /// an interruption, sends only what is missing. Up to [`Objects::with_concurrency`] chunks
    /// are in flight; memory use is about that many chunks.
    ///
    /// The file must not change while it is read (upload a snapshot or a reflink copy). Every
    /// chunk is stored before this returns; write the manifest afterwards.
    pub async fn upload_file(
        &self,
        ws: &str,
        path: &Path,
        chunk_size: u64,
    ) -> Result<Upload, ObjectsError> {
        names::check("workspace id", ws)?;
        check_chunk_size(chunk_size)?;
        let file = File::open(path).map_err(ObjectsError::io("open", path))?;
        let meta = file.metadata().map_err(ObjectsError::io("stat", path))?;
        if !meta.is_file() {
            return Err(ObjectsError::io("upload", path)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        let length = meta.len();
        let file = Arc::new(file);
        let sent: Vec<Sent> = stream::iter(0..length.div_ceil(chunk_size))
            .map(|i| {
                let file = Arc::clone(&file);
                async move {
                    let off = i * chunk_size;
                    let len = chunk_size.min(length - off);
                    let read = tokio::task::spawn_blocking(move || read_chunk(&file, off, len))
                        .await
                        .expect("reading a chunk does not panic")
                        .map_err(ObjectsError::io("read", path))?;
                    let Some((hash, data)) = read else {
                        return Ok(Sent::Hole);
                    };
                    Ok(if self.store_chunk(ws, &hash, data).await? {
                        Sent::Uploaded(hash, len)
                    } else {
                        Sent::Existing(hash)
                    })
                }
            })
            .buffered(self.concurrency)
            .try_collect()
            .await?;

        let mut stats = UploadStats {
            chunks: sent.len() as u64,
            ..Default::default()
        };
        let chunks = sent
            .into_iter()
            .map(|s| match s {
                Sent::Hole => {
                    stats.holes += 1;
                    ChunkRef::Hole
                }
                Sent::Uploaded(h, len) => {
                    stats.uploaded += 1;
                    stats.bytes_uploaded += len;
                    ChunkRef::Data(h)
                }
                Sent::Existing(h) => {
                    stats.skipped_existing += 1;
                    ChunkRef::Data(h)
                }
            })
            .collect();
        let manifest = Manifest {
            version: Manifest::VERSION,
            chunk_size,
            length,
            chunks,
        };
        Ok(Upload { manifest, stats })
    }

    /// Writes the file `manifest` describes (chunks of workspace `ws`) to `dest`, sparse: holes
    /// are left unallocated. The bytes go to a temporary file beside `dest` (mode 0600) that is
    /// synced and renamed over `dest` only when every chunk has been read and verified, so a
    /// failed or interrupted download leaves `dest` as it was.
    pub async fn download_file(
        &self,
        ws: &str,
        manifest: &Manifest,
        dest: &Path,
    ) -> Result<DownloadStats, ObjectsError> {
        self.download_file_reusing(ws, manifest, dest, None).await
    }

    /// [`Objects::download_file`], copying each chunk `reuse`'s file has (by its manifest) from
    /// there instead of fetching it: only the missing chunks are read from the store. A copied
    /// chunk whose bytes do not hash as expected (the local file changed) is fetched instead.
    pub async fn download_file_reusing(
        &self,
        ws: &str,
        manifest: &Manifest,
        dest: &Path,
        reuse: Option<Reuse<'_>>,
    ) -> Result<DownloadStats, ObjectsError> {
        names::check("workspace id", ws)?;
        manifest.validate().map_err(ObjectsError::InvalidManifest)?;
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let Some(name) = dest.file_name() else {
            return Err(ObjectsError::io("download to", dest)(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no file name",
            )));
        };
        let mut prefix = std::ffi::OsString::from(".");
        prefix.push(name);
        prefix.push(".");
        let tmp = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(".partial")
            .tempfile_in(dir)
            .map_err(ObjectsError::io("create a temporary file in", dir))?;
        let tmp_path = tmp.path().to_owned();
        tmp.as_file()
            .set_len(manifest.length)
            .map_err(ObjectsError::io("size", &tmp_path))?;
        let file = Arc::new(
            tmp.as_file()
                .try_clone()
                .map_err(ObjectsError::io("open", &tmp_path))?,
        );
        // Collected (not a lazy iterator): a closure over borrowed chunk refs held across the
        // awaits below would keep this future from being provably `Send` (rustc's
        // higher-ranked lifetime limits), and callers spawn it.
        let local: std::collections::HashMap<ChunkHash, u64> = match reuse {
            Some(r) if r.manifest.chunk_size == manifest.chunk_size => r
                .manifest
                .chunks
                .iter()
                .enumerate()
                .filter_map(|(j, c)| match c {
                    ChunkRef::Data(h) => Some((*h, r.manifest.range(j).0)),
                    ChunkRef::Hole => None,
                })
                .collect(),
            _ => Default::default(),
        };
        let source = match reuse {
            Some(r) if !local.is_empty() => File::open(r.path).ok().map(Arc::new),
            _ => None,
        };
        let data: Vec<(usize, ChunkHash, From)> = manifest
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                ChunkRef::Data(h) => Some((
                    i,
                    *h,
                    match (local.get(h), &source) {
                        (Some(&at), Some(_)) => From::Local(at),
                        _ => From::Store,
                    },
                )),
                ChunkRef::Hole => None,
            })
            .collect();
        let written: Vec<(u64, bool)> = stream::iter(data)
            .map(|(i, hash, from)| {
                let file = Arc::clone(&file);
                let source = source.clone();
                let tmp_path = &tmp_path;
                async move {
                    let (off, len) = manifest.range(i);
                    let copied = match (from, source) {
                        (From::Local(at), Some(src)) => {
                            tokio::task::spawn_blocking(move || local_chunk(&src, at, len, &hash))
                                .await
                                .expect("reading a local chunk does not panic")
                        }
                        _ => None,
                    };
                    let reused = copied.is_some();
                    let bytes = match copied {
                        Some(b) => b,
                        None => self.get_chunk(ws, &hash).await?,
                    };
                    if bytes.len() as u64 != len {
                        return Err(ObjectsError::InvalidManifest(format!(
                            "chunk {i} ({hash}) has {} bytes, {len} expected",
                            bytes.len()
                        )));
                    }
                    tokio::task::spawn_blocking(move || write_sparse(&file, &bytes, off))
                        .await
                        .expect("writing a chunk does not panic")
                        .map_err(ObjectsError::io("write", tmp_path))?;
                    Ok((len, reused))
                }
            })
            .buffer_unordered(self.concurrency)
            .try_collect()
            .await?;
        drop(file);
        let dest_owned = dest.to_owned();
        tokio::task::spawn_blocking(move || -> Result<(), ObjectsError> {
            tmp.as_file()
                .sync_all()
                .map_err(ObjectsError::io("sync", &tmp_path))?;
            tmp.persist(&dest_owned)
                .map_err(|e| ObjectsError::io("rename into", &dest_owned)(e.error))?;
            // The rename itself is durable once the directory is synced.
            let dir = dest_owned.parent().filter(|p| !p.as_os_str().is_empty());
            let dir = dir.unwrap_or(Path::new("."));
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(ObjectsError::io("sync", dir))
        })
        .await
        .expect("finishing a download does not panic")?;
        let reused = written.iter().filter(|(_, r)| *r).count() as u64;
        Ok(DownloadStats {
            chunks: written.len() as u64 - reused,
            holes: (manifest.chunks.len() - written.len()) as u64,
            bytes_downloaded: written.iter().filter(|(_, r)| !r).map(|(l, _)| l).sum(),
            reused,
        })
    }
}

/// The `len` bytes at `at` of `src` if they hash to `hash` (else `None`: fetch the chunk).
fn local_chunk(src: &File, at: u64, len: u64, hash: &ChunkHash) -> Option<Bytes> {
    let mut buf = vec![0u8; len as usize];
    src.read_exact_at(&mut buf, at).ok()?;
    (ChunkHash::of(&buf) == *hash).then(|| Bytes::from(buf))
}

/// Reads `len` bytes at `off`: `None` if they are all zero (a hole), else their hash and bytes.
fn read_chunk(file: &File, off: u64, len: u64) -> std::io::Result<Option<(ChunkHash, Bytes)>> {
    if no_data_in(file, off, len) {
        return Ok(None);
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, off)?;
    if all_zero(&buf) {
        return Ok(None);
    }
    Ok(Some((ChunkHash::of(&buf), Bytes::from(buf))))
}

/// Writes `data` at `off` but skips its all-zero 4 KiB blocks, so zeros inside a chunk stay
/// unallocated too (the file was sized with `set_len`, so skipped blocks read as zero).
fn write_sparse(file: &File, data: &[u8], off: u64) -> std::io::Result<()> {
    const BLOCK: usize = 4096;
    let mut start = None;
    for (n, block) in data.chunks(BLOCK).enumerate() {
        let at = n * BLOCK;
        match (start, all_zero(block)) {
            (None, false) => start = Some(at),
            (Some(s), true) => {
                file.write_all_at(&data[s..at], off + s as u64)?;
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        file.write_all_at(&data[s..], off + s as u64)?;
    }
    Ok(())
}

/// Whether the filesystem reports `off..off + len` as one hole (`SEEK_DATA` lands past it).
/// `false` when it cannot tell; the bytes are then read and checked.
fn no_data_in(file: &File, off: u64, len: u64) -> bool {
    match rustix::fs::seek(file, rustix::fs::SeekFrom::Data(off)) {
        Ok(next) => next >= off + len,
        Err(rustix::io::Errno::NXIO) => true,
        Err(_) => false,
    }
}

fn all_zero(buf: &[u8]) -> bool {
    let mut words = buf.chunks_exact(16);
    words
        .by_ref()
        .all(|w| u128::from_ne_bytes(w.try_into().expect("16 bytes")) == 0)
        && words.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros() {
        assert!(all_zero(&[]));
        assert!(all_zero(&[0; 33]));
        let mut b = [0u8; 33];
        b[32] = 1;
        assert!(!all_zero(&b));
        b[32] = 0;
        b[3] = 1;
        assert!(!all_zero(&b));
    }

    #[test]
    fn sparse_writes() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("f"))
            .unwrap();
        f.set_len(1 << 20).unwrap();
        // Non-zero bytes in blocks 0, 2-3 and the last partial block; zeros elsewhere.
        let mut data = vec![0u8; 10 * 4096 + 100];
        data[5] = 1;
        data[2 * 4096] = 2;
        data[4 * 4096 - 1] = 3;
        data[10 * 4096 + 99] = 4;
        write_sparse(&f, &data, 8192).unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 8192).unwrap();
        assert_eq!(back, data);
        assert!(f.metadata().unwrap().blocks() * 512 <= 4 * 4096 + 8192);
    }
}
