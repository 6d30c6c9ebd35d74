//! Snapshots read straight from the host that took them (#39): a host asked to restore a
//! snapshot it lacks, and told which agent took it ([`Origin`]), reads the files from that
//! agent over the cluster's link ([`Peers`]) — while the origin's upload to the object store
//! may still be running, so a fork onto another host never waits for it. If the origin does
//! not answer (lost, restarted without the snapshot), the object store serves the fetch
//! ([`HostAgent::fetch_snapshot`]).
//!
//! ```text
//!   origin: send_snapshot ── Header {record, files+lengths}, Data {file, offset, bytes}, …
//!   here:   staged dir ◄── files sized, data written at its offsets ──► adopt_snapshot
//! ```
//!
//! Ranges the filesystem reports as holes are never read, and all-zero pieces never sent: a
//! 512 MiB memory file of a mostly idle guest costs what its used pages cost. The bytes are not
//! chunk-hashed on this path (the link's TLS guards them in transit); the object store's copy,
//! written meanwhile, is.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_host::{BoxStream, HostError, HostResult, Origin, Peers, SnapshotPiece};
use pandastack_runtime::SnapshotError;
use pandastack_vm::VmDriver;

use crate::moving_snapshots::StoredSnapshot;
use crate::{AgentError, HostAgent};

/// Bytes per data piece sent.
const PIECE: u64 = 1 << 20;

/// Pieces read ahead of the link.
const READ_AHEAD: usize = 8;

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Reaches the other agents of the cluster through `peers` from now on: a fetch told the
    /// snapshot's origin reads it from there first. Once: a second call is ignored.
    pub fn reach_peers(&self, peers: Arc<dyn Peers>) {
        let _ = self.peers.set(peers);
    }

    /// Snapshot `id`'s files for another host ([`pandastack_host::Host::send_snapshot`]): the
    /// header (its record as [`Self::store_snapshot`] would store it, and each file's length),
    /// then the data, read on a blocking thread a few pieces ahead of the link.
    pub fn send_snapshot(
        &self,
        id: &str,
    ) -> Result<BoxStream<HostResult<SnapshotPiece>>, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let snap = self.rt.get_snapshot(id)?;
        let names = snap.moving_files()?;
        let mut files = Vec::with_capacity(names.len());
        let mut opened = Vec::with_capacity(names.len());
        for name in &names {
            let f = File::open(snap.dir.join(name))?;
            files.push(((*name).to_owned(), f.metadata()?.len()));
            opened.push(f);
        }
        let record = StoredSnapshot {
            info: snap.clone(),
            files: names.iter().map(|f| (*f).to_owned()).collect(),
            compat_key: s.compat_key.clone(),
            host: s.host.clone(),
            stored_at_ms: crate::shared_templates::now_ms(),
        };
        let record = Bytes::from(serde_json::to_vec(&record).expect("a record serialises"));
        let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
        let header = SnapshotPiece::Header { record, files };
        tokio::task::spawn_blocking(move || {
            if tx.blocking_send(Ok(header)).is_err() {
                return;
            }
            for (n, f) in opened.iter().enumerate() {
                let sent = read_data(f, |offset, data| {
                    let piece = SnapshotPiece::Data {
                        file: n as u32,
                        offset,
                        data,
                    };
                    tx.blocking_send(Ok(piece)).is_ok()
                });
                match sent {
                    Ok(true) => {}
                    Ok(false) => return, // the receiver went
                    Err(e) => {
                        let _ = tx.blocking_send(Err(HostError::failed("read a snapshot file", e)));
                        return;
                    }
                }
            }
        });
        Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
    }

    /// Snapshot `id` of workspace `ws` read from `origin` into this host ([`Self::send_snapshot`]
    /// there) and adopted; refused when its compatibility key is not this host's. Nothing is
    /// left behind on failure.
    pub(crate) async fn fetch_from_origin(
        &self,
        id: &str,
        origin: &Origin,
    ) -> Result<(), AgentError> {
        let peers = self.peers.get().ok_or(AgentError::NotShared)?;
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let from = |source: Box<dyn std::error::Error + Send + Sync>| AgentError::FromPeer {
            host: origin.host_id.clone(),
            source,
        };
        let mut pieces = peers
            .send_snapshot(origin, id)
            .await
            .map_err(|e| from(e.into()))?;
        let Some(SnapshotPiece::Header { record, files }) = pieces
            .next()
            .await
            .transpose()
            .map_err(|e| from(e.into()))?
        else {
            return Err(from(
                "its answer did not start with the snapshot's header".into(),
            ));
        };
        let stored: StoredSnapshot =
            serde_json::from_slice(&record).map_err(|e| from(Box::new(e)))?;
        if stored.info.id != id {
            return Err(from(format!("it sent snapshot {}", stored.info.id).into()));
        }
        if stored.compat_key != s.compat_key {
            return Err(SnapshotError::Immovable {
                id: id.into(),
                why: format!(
                    "it was taken on host {} with compatibility key {}, this host's is {}",
                    stored.host, stored.compat_key, s.compat_key
                ),
            }
            .into());
        }
        let expected = stored.info.moving_files()?;
        if files.len() != expected.len()
            || files.iter().any(|(f, _)| !expected.contains(&f.as_str()))
        {
            return Err(from(
                format!("it sent files {files:?}, the snapshot has {expected:?}").into(),
            ));
        }
        let staged = self.rt.snapshot_moving_in(id)?;
        let written = async {
            let mut out = Vec::with_capacity(files.len());
            for (name, length) in &files {
                let f = File::create_new(staged.join(name))?;
                f.set_len(*length)?;
                out.push((Arc::new(f), *length));
            }
            while let Some(piece) = pieces.next().await {
                let SnapshotPiece::Data { file, offset, data } =
                    piece.map_err(|e| from(e.into()))?
                else {
                    return Err(from("a second header".into()));
                };
                let Some((f, length)) = out.get(file as usize) else {
                    return Err(from(
                        format!("data of file {file}, of {} sent", out.len()).into(),
                    ));
                };
                if offset
                    .checked_add(data.len() as u64)
                    .is_none_or(|end| end > *length)
                {
                    return Err(from(
                        format!("data past the end of {}", files[file as usize].0).into(),
                    ));
                }
                let f = Arc::clone(f);
                tokio::task::spawn_blocking(move || f.write_all_at(&data, offset))
                    .await
                    .expect("writing a piece does not panic")?;
            }
            let synced: Vec<Arc<File>> = out.into_iter().map(|(f, _)| f).collect();
            tokio::task::spawn_blocking(move || synced.iter().try_for_each(|f| f.sync_all()))
                .await
                .expect("syncing does not panic")?;
            Ok::<_, AgentError>(())
        }
        .await;
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&staged);
            return Err(e);
        }
        self.rt.adopt_snapshot(stored.info, &staged)?;
        Ok(())
    }
}

/// Calls `send(offset, bytes)` for every non-zero piece of `f` (at most [`PIECE`] bytes, within
/// the ranges the filesystem reports as data) until it returns `false`; `Ok(false)` then.
fn read_data(f: &File, mut send: impl FnMut(u64, Bytes) -> bool) -> std::io::Result<bool> {
    let length = f.metadata()?.len();
    let mut pos = 0;
    while pos < length {
        let start = match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break, // only a hole after `pos`
            Err(_) => pos,                         // cannot tell: read it all
        };
        let end = match rustix::fs::seek(f, rustix::fs::SeekFrom::Hole(start)) {
            Ok(e) => e.min(length),
            Err(_) => length,
        };
        let mut at = start;
        while at < end {
            let len = PIECE.min(end - at) as usize;
            let mut buf = vec![0u8; len];
            f.read_exact_at(&mut buf, at)?;
            if buf.iter().any(|&b| b != 0) && !send(at, Bytes::from(buf)) {
                return Ok(false);
            }
            at += len as u64;
        }
        pos = end.max(start + 1);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_data_is_read_and_zeros_are_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = File::create(&path).unwrap();
        f.set_len(8 * PIECE + 100).unwrap();
        f.write_all_at(b"start", 0).unwrap();
        // Written zeros (allocated, not a hole) and data far into the file.
        f.write_all_at(&vec![0u8; PIECE as usize], 2 * PIECE)
            .unwrap();
        f.write_all_at(b"end", 8 * PIECE + 97).unwrap();
        let f = File::open(&path).unwrap();
        let mut got = Vec::new();
        assert!(read_data(&f, |off, data| {
            got.push((off, data));
            true
        })
        .unwrap());
        let mut back = vec![0u8; (8 * PIECE + 100) as usize];
        for (off, data) in &got {
            back[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
        assert_eq!(&back[..5], b"start");
        assert_eq!(&back[back.len() - 3..], b"end");
        assert!(back[5..back.len() - 3].iter().all(|&b| b == 0));
        // Two pieces at most: the zeros written in the middle are not sent.
        assert!(got.len() <= 2, "{} pieces", got.len());
        assert_eq!(
            got.iter()
                .map(|(_, d)| d.len())
                .filter(|&l| l == PIECE as usize)
                .count(),
            0
        );
    }

    #[test]
    fn a_receiver_that_goes_stops_the_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 3 * PIECE as usize]).unwrap();
        let f = File::open(&path).unwrap();
        let mut n = 0;
        assert!(!read_data(&f, |_, _| {
            n += 1;
            false
        })
        .unwrap());
        assert_eq!(n, 1);
    }
}
