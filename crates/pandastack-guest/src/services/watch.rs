//! `Files.Watch`: the changes under a directory, from inotify, as batches of events.
//!
//! One inotify instance per call, one watch per directory (every subdirectory too when
//! recursive, those made later included). The kernel's events are read as they come, turned
//! into create/modify/delete/rename events with absolute paths (a rename's two halves paired by
//! their cookie; repeated modifies of one file in a read folded into one) and sent a read at a
//! time. The stream toward the host is bounded: when it is full, events are dropped and the next
//! batch that fits starts with an overflow event, as it does when the kernel's own queue
//! overflows. Ending the call (or the session) drops the instance and every watch with it.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use pandastack_guest_proto::v1::{self, WatchKind};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::files::{abs, status};

/// Directories one call watches at most (each is a kernel watch, of which a user has a bounded
/// number: `fs.inotify.max_user_watches`).
const MAX_DIRS: usize = 8192;
/// Batches buffered toward the host before events are dropped (and an overflow said).
const QUEUE: usize = 64;

pub(super) type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::WatchBatch, Status>> + Send>>;

/// What the kernel is asked to tell about each watched directory.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
        | AddWatchFlags::IN_DONT_FOLLOW
}

/// Arms a watch on `path` and streams its events; the first message is an empty batch.
pub(super) fn watch(path: &str, recursive: bool) -> Result<WatchStream, Status> {
    let root = abs(path)?;
    let (mut tree, ino) = Tree::arm(root, recursive)?;
    let (tx, rx) = mpsc::channel(QUEUE);
    // The first message says the watch is armed: every change after it is told.
    tx.try_send(Ok(v1::WatchBatch::default()))
        .map_err(|_| Status::internal("watch queue"))?;
    let ino = Ino(ino);
    // SAFETY: `Ino` owns the inotify descriptor, moved into the AsyncFd here; it stays open
    // with the same number for the AsyncFd's whole life and `as_raw_fd` always returns it.
    let fd = unsafe { AsyncFd::register(ino) }
        .map_err(|e| Status::internal(format!("inotify: {}", std::io::Error::from(e))))?;
    tokio::spawn(async move {
        let mut dropped = false;
        loop {
            let events = tokio::select! {
                () = tx.closed() => return,
                r = read_whole_renames(&fd) => r,
            };
            let (mut out, end) = match events {
                Ok(events) => tree.translate(&fd.get_ref().0, events),
                Err(e) => {
                    let _ = tx
                        .send(Err(Status::internal(format!("inotify: {e}"))))
                        .await;
                    return;
                }
            };
            if dropped && !out.is_empty() {
                out.insert(0, tree.overflow());
            }
            if !out.is_empty() {
                match tx.try_send(Ok(v1::WatchBatch { events: out })) {
                    Ok(()) => dropped = false,
                    Err(mpsc::error::TrySendError::Full(_)) => dropped = true,
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
            if end {
                return;
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(rx)))
}

/// An inotify instance as tokio's reactor takes it.
struct Ino(Inotify);

impl AsRawFd for Ino {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The next events the kernel has.
async fn read(fd: &AsyncFd<Ino>) -> std::io::Result<Vec<InotifyEvent>> {
    loop {
        let mut ready = fd.readable().await?;
        match fd.get_ref().0.read_events() {
            Ok(events) => return Ok(events),
            Err(Errno::EAGAIN) => ready.clear_ready(),
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long a read that ends with the first half of a rename waits for its second half: the
/// kernel queues the two one after the other, and a reader on another CPU can wake between.
const RENAME_WAIT: Duration = Duration::from_millis(20);

/// The next events, a rename's second half included when it follows within [`RENAME_WAIT`].
async fn read_whole_renames(fd: &AsyncFd<Ino>) -> std::io::Result<Vec<InotifyEvent>> {
    let mut events = read(fd).await?;
    let deadline = tokio::time::Instant::now() + RENAME_WAIT;
    while half_a_rename(&events) {
        match tokio::time::timeout_at(deadline, read(fd)).await {
            Ok(more) => events.extend(more?),
            Err(_) => break, // moved out of the tree
        }
    }
    Ok(events)
}

/// Whether a `IN_MOVED_FROM` in `events` has no `IN_MOVED_TO` of its cookie after it.
fn half_a_rename(events: &[InotifyEvent]) -> bool {
    let mut open: Vec<u32> = Vec::new();
    for e in events {
        if e.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            open.push(e.cookie);
        } else if e.mask.contains(AddWatchFlags::IN_MOVED_TO) {
            open.retain(|c| *c != e.cookie);
        }
    }
    !open.is_empty()
}

/// The watched directories of one call.
struct Tree {
    root: PathBuf,
    root_wd: WatchDescriptor,
    recursive: bool,
    dirs: HashMap<WatchDescriptor, PathBuf>,
}

impl Tree {
    /// The tree of `root` watched by a new inotify instance (returned with it).
    fn arm(root: PathBuf, recursive: bool) -> Result<(Tree, Inotify), Status> {
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| Status::internal(format!("inotify: {e}")))?;
        let root_wd = ino
            .add_watch(&root, mask())
            .map_err(|e| status(e.into(), &root))?;
        let mut tree = Tree {
            root: root.clone(),
            root_wd,
            recursive,
            dirs: HashMap::from([(root_wd, root.clone())]),
        };
        if recursive {
            // What is there before the watch is armed is not news: no events for it.
            // The caller's to fix (a smaller tree), not the guest's: not RESOURCE_EXHAUSTED,
            // which tells of a full disk.
            tree.add_below(&ino, &root, None).map_err(|full| {
                Status::invalid_argument(format!(
                    "{}: more than {full} directories to watch; watch a smaller tree, or without recursive",
                    root.display()
                ))
            })?;
        }
        Ok((tree, ino))
    }

    /// Watches every directory below `dir` (not `dir` itself), pushing a create event for each
    /// entry found into `found` when given (for a directory made while the watch runs: what was
    /// put in it before its own watch was armed). Errs with the bound when it is reached.
    fn add_below(
        &mut self,
        ino: &Inotify,
        dir: &Path,
        mut found: Option<&mut Vec<v1::WatchEvent>>,
    ) -> Result<(), usize> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(()); // gone or unreadable: nothing to watch there
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if let Some(found) = found.as_deref_mut() {
                found.push(event(WatchKind::Create, &path, is_dir));
            }
            if !is_dir {
                continue;
            }
            if self.dirs.len() >= MAX_DIRS {
                return Err(MAX_DIRS);
            }
            match ino.add_watch(&path, mask()) {
                Ok(wd) => {
                    self.dirs.insert(wd, path.clone());
                }
                // The kernel's own bound (`fs.inotify.max_user_watches`).
                Err(Errno::ENOSPC) => return Err(self.dirs.len()),
                Err(_) => continue, // gone meanwhile, or not ours to read
            }
            self.add_below(ino, &path, found.as_deref_mut())?;
        }
        Ok(())
    }

    fn overflow(&self) -> v1::WatchEvent {
        event(WatchKind::Overflow, &self.root, true)
    }

    /// The events of one read, and whether the watch ended (its directory went away).
    fn translate(
        &mut self,
        ino: &Inotify,
        events: Vec<InotifyEvent>,
    ) -> (Vec<v1::WatchEvent>, bool) {
        let mut out: Vec<v1::WatchEvent> = Vec::new();
        // Renames' first halves by cookie: the index of the delete event each became, which
        // its second half turns into a rename.
        let mut moved_from: HashMap<u32, usize> = HashMap::new();
        let mut end = false;
        for ev in events {
            if ev.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                out.push(self.overflow());
                continue;
            }
            if ev.mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&ev.wd);
                end |= ev.wd == self.root_wd;
                continue;
            }
            let Some(dir) = self.dirs.get(&ev.wd) else {
                continue; // a directory no longer watched
            };
            let is_dir = ev.mask.contains(AddWatchFlags::IN_ISDIR);
            let Some(name) = ev.name.as_deref().filter(|n| !n.is_empty()) else {
                // About the directory itself: only the root's own end is news (a subdirectory's
                // is told by its parent).
                if ev.wd == self.root_wd
                    && ev
                        .mask
                        .intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
                {
                    out.push(event(WatchKind::Delete, &self.root, true));
                    let _ = ino.rm_watch(ev.wd);
                    end = true;
                }
                continue;
            };
            let path = dir.join(name_of(name));
            if ev.mask.contains(AddWatchFlags::IN_CREATE) {
                out.push(event(WatchKind::Create, &path, is_dir));
                if is_dir && self.recursive {
                    self.add_new(ino, &path, &mut out);
                }
            } else if ev.mask.contains(AddWatchFlags::IN_MODIFY) {
                let p = path.to_string_lossy();
                let seen = out
                    .iter()
                    .any(|e| e.kind == WatchKind::Modify as i32 && e.path == p);
                if !seen {
                    out.push(event(WatchKind::Modify, &path, is_dir));
                }
            } else if ev.mask.contains(AddWatchFlags::IN_DELETE) {
                out.push(event(WatchKind::Delete, &path, is_dir));
            } else if ev.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                moved_from.insert(ev.cookie, out.len());
                out.push(event(WatchKind::Delete, &path, is_dir));
            } else if ev.mask.contains(AddWatchFlags::IN_MOVED_TO) {
                match moved_from.remove(&ev.cookie) {
                    Some(i) => {
                        let from = std::mem::take(&mut out[i].path);
                        out[i] = v1::WatchEvent {
                            kind: WatchKind::Rename as i32,
                            path: path.to_string_lossy().into_owned(),
                            from: from.clone(),
                            dir: is_dir,
                        };
                        if is_dir {
                            self.moved(Path::new(&from), &path);
                        }
                    }
                    None => {
                        out.push(event(WatchKind::Create, &path, is_dir));
                        if is_dir && self.recursive {
                            self.add_new(ino, &path, &mut out);
                        }
                    }
                }
            }
        }
        // Renames whose second half did not come: moved out of the tree. Their directories'
        // watches would go on telling paths that are no longer under it.
        for i in moved_from.into_values() {
            if out[i].dir {
                let gone = PathBuf::from(&out[i].path);
                self.forget_below(ino, &gone);
            }
        }
        (out, end)
    }

    /// A directory made (or moved in) while the watch runs: watched, with what is already in it.
    fn add_new(&mut self, ino: &Inotify, dir: &Path, out: &mut Vec<v1::WatchEvent>) {
        if self.dirs.len() >= MAX_DIRS {
            out.push(self.overflow());
            return;
        }
        let Ok(wd) = ino.add_watch(dir, mask()) else {
            return; // gone already: its delete follows
        };
        self.dirs.insert(wd, dir.to_owned());
        if self.add_below(ino, dir, Some(out)).is_err() {
            out.push(self.overflow());
        }
    }

    /// A watched directory renamed inside the tree: its watches (and those below it) keep
    /// working, under the new path.
    fn moved(&mut self, from: &Path, to: &Path) {
        for p in self.dirs.values_mut() {
            if let Ok(rest) = p.strip_prefix(from) {
                *p = if rest.as_os_str().is_empty() {
                    to.to_owned()
                } else {
                    to.join(rest)
                };
            }
        }
    }

    /// Stops watching `dir` and everything below it.
    fn forget_below(&mut self, ino: &Inotify, dir: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.starts_with(dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = ino.rm_watch(wd);
        }
    }
}

fn name_of(name: &OsStr) -> &Path {
    Path::new(OsStr::from_bytes(name.as_bytes()))
}

fn event(kind: WatchKind, path: &Path, dir: bool) -> v1::WatchEvent {
    v1::WatchEvent {
        kind: kind as i32,
        path: path.to_string_lossy().into_owned(),
        from: String::new(),
        dir,
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    /// The events of the next batches until `want` of them came (or 5 s passed).
    async fn next_events(s: &mut WatchStream, want: usize) -> Vec<(WatchKind, String, String)> {
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while got.len() < want {
            let Ok(Some(batch)) = tokio::time::timeout_at(deadline, s.next()).await else {
                break;
            };
            for e in batch.unwrap().events {
                got.push((WatchKind::try_from(e.kind).unwrap(), e.path, e.from));
            }
        }
        got
    }

    fn s(p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }

    #[tokio::test]
    async fn tells_creates_modifies_renames_and_deletes_at_every_depth() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("old")).unwrap();
        let mut w = watch(&s(root), true).unwrap();
        assert!(w.next().await.unwrap().unwrap().events.is_empty(), "armed");

        std::fs::write(root.join("old/a.txt"), "1").unwrap();
        let got = next_events(&mut w, 2).await;
        assert_eq!(
            got,
            [
                (WatchKind::Create, s(&root.join("old/a.txt")), String::new()),
                (WatchKind::Modify, s(&root.join("old/a.txt")), String::new()),
            ]
        );

        // A directory made with a file already in it before its own watch is armed.
        std::fs::create_dir_all(root.join("new/deep")).unwrap();
        let got = next_events(&mut w, 2).await;
        assert!(got.contains(&(WatchKind::Create, s(&root.join("new")), String::new())));
        assert!(got.contains(&(WatchKind::Create, s(&root.join("new/deep")), String::new())));
        std::fs::write(root.join("new/deep/b"), "2").unwrap();
        let got = next_events(&mut w, 2).await;
        assert_eq!(
            got[0],
            (
                WatchKind::Create,
                s(&root.join("new/deep/b")),
                String::new()
            )
        );

        // A renamed directory's files are told under the new name.
        std::fs::rename(root.join("new"), root.join("moved")).unwrap();
        let got = next_events(&mut w, 1).await;
        assert_eq!(
            got,
            [(
                WatchKind::Rename,
                s(&root.join("moved")),
                s(&root.join("new"))
            )]
        );
        std::fs::remove_file(root.join("moved/deep/b")).unwrap();
        let got = next_events(&mut w, 1).await;
        assert_eq!(
            got,
            [(
                WatchKind::Delete,
                s(&root.join("moved/deep/b")),
                String::new()
            )]
        );
    }

    #[tokio::test]
    async fn without_recursive_only_the_directory_itself() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        let mut w = watch(&s(root), false).unwrap();
        assert!(w.next().await.unwrap().unwrap().events.is_empty());
        std::fs::write(root.join("sub/x"), "1").unwrap();
        std::fs::write(root.join("y"), "").unwrap();
        let got = next_events(&mut w, 1).await;
        assert_eq!(
            got,
            [(WatchKind::Create, s(&root.join("y")), String::new())]
        );
    }

    #[tokio::test]
    async fn the_watch_ends_with_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("w");
        std::fs::create_dir(&root).unwrap();
        let mut w = watch(&s(&root), true).unwrap();
        assert!(w.next().await.unwrap().unwrap().events.is_empty());
        std::fs::remove_dir(&root).unwrap();
        let got = next_events(&mut w, 1).await;
        assert_eq!(got, [(WatchKind::Delete, s(&root), String::new())]);
        let end = tokio::time::timeout(Duration::from_secs(5), w.next()).await;
        assert!(matches!(end, Ok(None)), "the stream ends: {end:?}");
    }

    #[tokio::test]
    async fn a_tree_of_too_many_directories_is_refused_when_recursive() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_DIRS {
            std::fs::create_dir(dir.path().join(i.to_string())).unwrap();
        }
        let e = watch(&s(dir.path()), true).err().expect("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("directories to watch"), "{e:?}");
        // Its top alone is fine.
        assert!(watch(&s(dir.path()), false).is_ok());
    }

    #[test]
    fn a_missing_directory_or_a_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = watch(&s(&dir.path().join("nope")), false).err().unwrap();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
        std::fs::write(dir.path().join("f"), "").unwrap();
        let e = watch(&s(&dir.path().join("f")), false).err().unwrap();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        let e = watch("relative", false).err().unwrap();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
}
