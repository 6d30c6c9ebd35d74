//! Images read straight from the host that has them (#39). A host asked to restore a snapshot
//! it lacks, and told which agent took it ([`Origin`]), reads the files from that agent over
//! the cluster's link ([`Peers`]) — while the origin's upload to the object store may still
//! be running, so a fork onto another host never waits for it. If the origin does not answer
//! (lost, restarted without the snapshot), the object store serves the fetch
//! ([`HostAgent::fetch_snapshot`]). A hibernated sandbox that moves is read the same way from
//! the host it leaves ([`HostAgent::leave`], [`HostAgent::adopt_from`]): nothing is uploaded
//! for the move.
//!
//! ```text
//!   origin: send_* ── Header {record, files+lengths}, Data {file, offset, bytes}, …
//!   here:   staged dir ◄── files sized, data written at its offsets ──► adopt_*
//! ```
//!
//! Ranges the filesystem reports as holes are never read, and all-zero pieces never sent: a
//! 512 MiB memory file of a mostly idle guest costs what its used pages cost. The bytes are not
//! chunk-hashed on this path (the link's mutual TLS guards them in transit); the object
//! store's copy, written meanwhile for a snapshot, is.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_host::{BoxStream, HostError, HostResult, ImagePiece, Origin, Peers};
use pandastack_runtime::{HibernateError, SnapshotError};
use pandastack_vm::VmDriver;
use serde::Serialize;

use crate::entry::SandboxVm;
use crate::moving::{is_leaving, StoredSandbox, LEAVING};
use crate::moving_snapshots::StoredSnapshot;
use crate::{AgentError, HostAgent, SandboxView};

/// Bytes per data piece sent.
const PIECE: u64 = 1 << 20;

/// Pieces read ahead of the link.
const READ_AHEAD: usize = 8;

impl<D: VmDriver + 'static> HostAgent<D> {
    /// Reaches the other agents of the cluster through `peers` from now on: a fetch told the
    /// snapshot's origin reads it from there first, and a move reads the sandbox from the host
    /// it leaves. Once: a second call is ignored.
    pub fn reach_peers(&self, peers: Arc<dyn Peers>) {
        let _ = self.peers.set(peers);
    }

    fn peers(&self) -> Result<&Arc<dyn Peers>, AgentError> {
        self.peers.get().ok_or(AgentError::NotShared)
    }

    /// Snapshot `id`'s files for another host ([`pandastack_host::Host::send_snapshot`]): the
    /// header (its record as [`Self::store_snapshot`] would store it, and each file's length),
    /// then the data, read on a blocking thread a few pieces ahead of the link.
    pub fn send_snapshot(&self, id: &str) -> Result<BoxStream<HostResult<ImagePiece>>, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let snap = self.rt.get_snapshot(id)?;
        let names = snap.moving_files()?;
        let opened = open_all(&snap.dir, &names)?;
        send_files(
            &StoredSnapshot::of(&snap, &names, &s.compat_key, &s.host),
            opened,
        )
    }

    /// Snapshot `id` read from `origin` into this host ([`Self::send_snapshot`] there) and
    /// adopted; refused when its compatibility key is not this host's. Nothing is left behind
    /// on failure.
    pub(crate) async fn fetch_from_origin(
        &self,
        id: &str,
        origin: &Origin,
    ) -> Result<(), AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let pieces = self
            .peers()?
            .send_snapshot(origin, id)
            .await
            .map_err(|e| from_peer(origin, e))?;
        let staged = self.rt.snapshot_moving_in(id)?;
        let stored = receive(pieces, &staged, origin, |record: StoredSnapshot, files| {
            if record.info.id != id {
                return Err(peer_said(
                    origin,
                    format!("it sent snapshot {}", record.info.id),
                ));
            }
            if let Some(why) = crate::moving::other_key(
                "was taken",
                &record.host,
                &record.compat_key,
                &s.compat_key,
            ) {
                return Err(SnapshotError::Immovable { id: id.into(), why }.into());
            }
            let expected = record.info.moving_files()?;
            same_files(origin, files, &expected)?;
            Ok(record)
        })
        .await?;
        self.rt.adopt_snapshot(stored.info, &staged)?;
        Ok(())
    }

    /// Hibernates sandbox `id` (if it runs) and marks it leaving for a move whose destination
    /// reads its image from here ([`Self::adopt_from`]): it does not wake here from now on.
    /// Returns a tag naming the move; [`Self::forget_stored`] with it gives the move up.
    pub async fn leave(&self, id: &str) -> Result<String, AgentError> {
        self.hibernate(id).await?;
        let e = self.entry(id).await?;
        let slot = e.lock().await;
        let SandboxVm::Hibernated(h) = &*slot else {
            return Err(AgentError::InvalidState {
                id: id.into(),
                state: slot.state().unwrap_or(crate::VmState::Exited),
                op: "move it to another host",
            });
        };
        h.moving_files().map_err(AgentError::Hibernate)?;
        std::fs::write(h.dir.join(LEAVING), b"")?;
        Ok(format!("{:016x}", rand::random::<u64>()))
    }

    /// Hibernated sandbox `id`'s image for the host that adopts it
    /// ([`pandastack_host::Host::send_hibernated`]): only while it is leaving ([`Self::leave`]),
    /// so no wake changes its files.
    pub async fn send_hibernated(
        &self,
        id: &str,
    ) -> Result<BoxStream<HostResult<ImagePiece>>, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        let e = self.entry(id).await?;
        let slot = e.lock().await;
        let h = match &*slot {
            SandboxVm::Hibernated(h) if is_leaving(h) => h,
            other => {
                return Err(AgentError::InvalidState {
                    id: id.into(),
                    state: other.state().unwrap_or(crate::VmState::Exited),
                    op: "send its image to another host (it is not leaving this one)",
                })
            }
        };
        let names = h.moving_files().map_err(AgentError::Hibernate)?;
        let opened = open_all(&h.dir, &names)?;
        send_files(
            &StoredSandbox::of(&h.info, &names, &s.compat_key, &s.host),
            opened,
        )
    }

    /// Makes sandbox `id`, leaving `origin`, a hibernated sandbox of this host, its image read
    /// from `origin` ([`Self::send_hibernated`] there). Refused when its compatibility key is
    /// not this host's or the sandbox is here already; nothing is left behind on failure.
    pub async fn adopt_from(&self, id: &str, origin: &Origin) -> Result<SandboxView, AgentError> {
        let s = self.sharing.get().ok_or(AgentError::NotShared)?;
        self.not_here(id).await?;
        let pieces = self
            .peers()?
            .send_hibernated(origin, id)
            .await
            .map_err(|e| from_peer(origin, e))?;
        let staged = self.rt.moving_in(id)?;
        let stored = receive(pieces, &staged, origin, |record: StoredSandbox, files| {
            if record.info.id != id {
                return Err(peer_said(
                    origin,
                    format!("it sent sandbox {}", record.info.id),
                ));
            }
            if let Some(why) = crate::moving::other_key(
                "hibernated",
                &record.host,
                &record.compat_key,
                &s.compat_key,
            ) {
                return Err(HibernateError::Immovable { id: id.into(), why }.into());
            }
            let names: Vec<&str> = record.files.iter().map(String::as_str).collect();
            if names
                .iter()
                .any(|n| !pandastack_runtime::MOVING_FILES.contains(n))
            {
                return Err(peer_said(origin, format!("it names files {names:?}")));
            }
            same_files(origin, files, &names)?;
            Ok(record)
        })
        .await?;
        let h = self.rt.adopt_hibernated(stored.info, &staged)?;
        Ok(self.insert(SandboxVm::Hibernated(h)).await)
    }
}

/// The failure of a call to `origin`'s agent.
fn from_peer(origin: &Origin, e: HostError) -> AgentError {
    AgentError::FromPeer {
        host: origin.host_id.clone(),
        source: Box::new(e),
    }
}

/// `origin` sent something this host cannot take.
fn peer_said(origin: &Origin, what: String) -> AgentError {
    AgentError::FromPeer {
        host: origin.host_id.clone(),
        source: what.into(),
    }
}

/// Whether the header's `files` are exactly `expected` (in any order).
fn same_files(
    origin: &Origin,
    files: &[(String, u64)],
    expected: &[&str],
) -> Result<(), AgentError> {
    if files.len() != expected.len() || files.iter().any(|(f, _)| !expected.contains(&f.as_str())) {
        return Err(peer_said(
            origin,
            format!("it sent files {files:?}, the image has {expected:?}"),
        ));
    }
    Ok(())
}

/// `names` in `dir`, opened.
fn open_all(dir: &Path, names: &[&str]) -> std::io::Result<Vec<(String, File)>> {
    names
        .iter()
        .map(|n| Ok(((*n).to_owned(), File::open(dir.join(n))?)))
        .collect()
}

/// The header (`record` as JSON and each file's length) and the data of `files`, read on a
/// blocking thread a few pieces ahead of the receiver.
fn send_files(
    record: &impl Serialize,
    files: Vec<(String, File)>,
) -> Result<BoxStream<HostResult<ImagePiece>>, AgentError> {
    let record = Bytes::from(serde_json::to_vec(record).expect("a record serialises"));
    let mut lengths = Vec::with_capacity(files.len());
    for (name, f) in &files {
        lengths.push((name.clone(), f.metadata()?.len()));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD);
    let header = ImagePiece::Header {
        record,
        files: lengths,
    };
    tokio::task::spawn_blocking(move || {
        if tx.blocking_send(Ok(header)).is_err() {
            return;
        }
        for (n, (_, f)) in files.iter().enumerate() {
            let sent = read_data(f, |offset, data| {
                let piece = ImagePiece::Data {
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
                    let _ = tx.blocking_send(Err(HostError::failed("read an image's file", e)));
                    return;
                }
            }
        }
    });
    Ok(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx)))
}

/// Writes the image `pieces` carry from `origin` into `staged` (an empty directory): the
/// header's record (JSON) parsed and checked by `check` with the header's files, then each
/// file sized and its data written at its offsets, then synced. Returns what `check` made of
/// the record; on any failure `staged` is removed.
async fn receive<R: serde::de::DeserializeOwned, T>(
    mut pieces: BoxStream<HostResult<ImagePiece>>,
    staged: &Path,
    origin: &Origin,
    check: impl FnOnce(R, &[(String, u64)]) -> Result<T, AgentError>,
) -> Result<T, AgentError> {
    let received = async {
        let Some(ImagePiece::Header { record, files }) = pieces
            .next()
            .await
            .transpose()
            .map_err(|e| from_peer(origin, e))?
        else {
            return Err(peer_said(
                origin,
                "its answer did not start with the image's header".into(),
            ));
        };
        let record: R = serde_json::from_slice(&record)
            .map_err(|e| peer_said(origin, format!("its record: {e}")))?;
        let checked = check(record, &files)?;
        let mut out = Vec::with_capacity(files.len());
        for (name, length) in &files {
            let f = File::create_new(staged.join(name))?;
            f.set_len(*length)?;
            out.push((Arc::new(f), *length));
        }
        while let Some(piece) = pieces.next().await {
            let ImagePiece::Data { file, offset, data } =
                piece.map_err(|e| from_peer(origin, e))?
            else {
                return Err(peer_said(origin, "a second header".into()));
            };
            let Some((f, length)) = out.get(file as usize) else {
                return Err(peer_said(
                    origin,
                    format!("data of file {file}, of {} sent", out.len()),
                ));
            };
            if offset
                .checked_add(data.len() as u64)
                .is_none_or(|end| end > *length)
            {
                return Err(peer_said(
                    origin,
                    format!("data past the end of {}", files[file as usize].0),
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
        Ok(checked)
    }
    .await;
    if received.is_err() {
        let _ = std::fs::remove_dir_all(staged);
    }
    received
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
