//! `Files`: streamed read/write, stat, list, mkdir, remove, rename, chmod on absolute guest paths.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;

use futures::Stream;
use pandastack_guest_proto::v1::{self, files_server::Files, write_input::Input};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

const CHUNK: usize = 64 * 1024;
/// Entries a listing page holds when the request names no limit.
const LIST_DEFAULT_LIMIT: u32 = 1000;
/// The most entries one listing page holds, whatever the request asks.
const LIST_MAX_LIMIT: u32 = 5000;
/// What one listing page's entries may weigh encoded: half of gRPC's 4 MiB message limit, so a
/// page of long names (a path can be 4 KiB, a symlink target as much again) always fits.
const LIST_PAGE_BYTES: usize = 2 << 20;
/// How much of a file that reports no size (`/proc`, `/sys`) a whole-file read returns.
const UNSIZED_READ_MAX: u64 = 1 << 20;

pub struct FilesService;

fn abs(path: &str) -> Result<PathBuf, Status> {
    let p = PathBuf::from(path);
    if path.is_empty() || !p.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "path must be absolute: {path:?}"
        )));
    }
    if path.contains('\0') {
        return Err(Status::invalid_argument("path contains NUL"));
    }
    Ok(p)
}

/// Maps an io error on `path` to a gRPC status with a short message naming the path.
fn status(e: std::io::Error, path: &Path) -> Status {
    let p = path.display();
    // ELOOP has no stable `ErrorKind` yet.
    if e.raw_os_error() == Some(nix::errno::Errno::ELOOP as i32) {
        return Status::invalid_argument(format!("{p}: {e}"));
    }
    match e.kind() {
        ErrorKind::NotFound => Status::not_found(format!("{p}: no such file or directory")),
        ErrorKind::AlreadyExists => Status::already_exists(format!("{p}: already exists")),
        ErrorKind::PermissionDenied => Status::permission_denied(format!("{p}: permission denied")),
        ErrorKind::IsADirectory => Status::invalid_argument(format!("{p}: is a directory")),
        ErrorKind::NotADirectory => Status::invalid_argument(format!("{p}: not a directory")),
        ErrorKind::DirectoryNotEmpty => {
            Status::failed_precondition(format!("{p}: directory not empty"))
        }
        // What the caller asked for cannot be done to this path (renaming a mount point or
        // across file systems, a name too long, a symlink loop, …): the request's fault.
        ErrorKind::InvalidInput
        | ErrorKind::InvalidFilename
        | ErrorKind::CrossesDevices
        | ErrorKind::TooManyLinks
        | ErrorKind::NotSeekable
        | ErrorKind::Unsupported => Status::invalid_argument(format!("{p}: {e}")),
        // The guest's state forbids it right now.
        ErrorKind::ResourceBusy | ErrorKind::ExecutableFileBusy | ErrorKind::ReadOnlyFilesystem => {
            Status::failed_precondition(format!("{p}: {e}"))
        }
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded | ErrorKind::FileTooLarge => {
            Status::resource_exhausted(format!("{p}: {e}"))
        }
        _ => Status::internal(format!("{p}: {e}")),
    }
}

fn info(path: &Path, md: &std::fs::Metadata) -> v1::FileInfo {
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        v1::FileType::Symlink
    } else if ft.is_dir() {
        v1::FileType::Dir
    } else if ft.is_file() {
        v1::FileType::File
    } else {
        v1::FileType::Other
    };
    v1::FileInfo {
        name: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into()),
        path: path.to_string_lossy().into_owned(),
        r#type: kind as i32,
        size: md.len(),
        mode: md.mode() & 0o7777,
        mtime_ms: md.mtime() * 1000 + md.mtime_nsec() / 1_000_000,
        uid: md.uid(),
        gid: md.gid(),
        symlink_target: if ft.is_symlink() {
            std::fs::read_link(path)
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        },
    }
}

fn list(dir: &Path, depth: u32, out: &mut Vec<v1::FileInfo>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let md = std::fs::symlink_metadata(&path)?;
        let is_dir = md.file_type().is_dir();
        out.push(info(&path, &md));
        if depth > 1 && is_dir {
            // Unreadable subdirectories are listed but not descended into.
            let _ = list(&path, depth - 1, out);
        }
    }
    Ok(())
}

/// The page of `sorted` (entries sorted by path) a listing request asks for: at most `limit`
/// entries (0: the default; clamped) whose path sorts after `after` (empty: from the start),
/// fewer when more would pass [`LIST_PAGE_BYTES`]. `next_after` names the page's last path when
/// entries remain. A page always holds at least one entry when any remain (one entry is far
/// below the bound), and it never ends between entries of equal paths (names that are not UTF-8
/// can share a lossy path): a cursor that split them would skip the rest.
fn page(sorted: Vec<v1::FileInfo>, after: &str, limit: u32) -> v1::ListResponse {
    let limit = match limit {
        0 => LIST_DEFAULT_LIMIT,
        n => n.clamp(1, LIST_MAX_LIMIT),
    } as usize;
    let start = if after.is_empty() {
        0
    } else {
        sorted.partition_point(|e| e.path.as_str() <= after)
    };
    let mut end = start;
    let mut bytes = 0;
    while end < sorted.len() {
        let same_path = end > start && sorted[end].path == sorted[end - 1].path;
        let weight = entry_weight(&sorted[end]);
        let full = end - start >= limit || bytes + weight > LIST_PAGE_BYTES;
        if full && end > start && !same_path {
            break;
        }
        bytes += weight;
        end += 1;
    }
    let next_after = if end < sorted.len() && end > start {
        sorted[end - 1].path.clone()
    } else {
        String::new()
    };
    let entries = sorted.into_iter().skip(start).take(end - start).collect();
    v1::ListResponse {
        entries,
        next_after,
    }
}

/// What `entry` adds to an encoded `ListResponse`: its field key, length and bytes.
fn entry_weight(entry: &v1::FileInfo) -> usize {
    let len = prost::Message::encoded_len(entry);
    1 + prost::length_delimiter_len(len) + len
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Status::internal(e.to_string()))?
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<v1::Chunk, Status>> + Send>>;

#[tonic::async_trait]
impl Files for FilesService {
    type ReadStream = ChunkStream;

    async fn read(&self, req: Request<v1::ReadRequest>) -> Result<Response<ChunkStream>, Status> {
        let req = req.into_inner();
        let path = abs(&req.path)?;
        let p = path.clone();
        let (mut file, size) = blocking(move || {
            // Non-blocking: opening a FIFO must not wait for a writer (the file type is checked
            // right after, on the open file, so a swap between the two cannot fool it).
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&p)
                .map_err(|e| status(e, &p))?;
            let md = f.metadata().map_err(|e| status(e, &p))?;
            if md.is_dir() {
                return Err(Status::invalid_argument(format!(
                    "{}: is a directory",
                    p.display()
                )));
            }
            if !md.is_file() {
                return Err(Status::invalid_argument(format!(
                    "{}: not a regular file (a device, FIFO or socket has no end to read to)",
                    p.display()
                )));
            }
            Ok((f, md.len()))
        })
        .await?;
        let (tx, rx) = mpsc::channel(4);
        // A whole-file read ends at the size the file had when it was opened, so a file that
        // grows as fast as it is read (a log being written) cannot keep a read going forever.
        // Files that report no size (`/proc`, `/sys`) are read up to a bound.
        let whole = if size == 0 { UNSIZED_READ_MAX } else { size };
        let mut remaining = if req.length == 0 { whole } else { req.length };
        let offset = req.offset;
        tokio::task::spawn_blocking(move || {
            if offset > 0 {
                if let Err(e) = file.seek(SeekFrom::Start(offset)) {
                    let _ = tx.blocking_send(Err(status(e, &path)));
                    return;
                }
            }
            let mut buf = vec![0u8; CHUNK];
            while remaining > 0 {
                let want = (remaining.min(CHUNK as u64)) as usize;
                match file.read(&mut buf[..want]) {
                    Ok(0) => return,
                    Ok(n) => {
                        remaining -= n as u64;
                        if tx
                            .blocking_send(Ok(v1::Chunk {
                                data: buf[..n].to_vec(),
                            }))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(status(e, &path)));
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn write(
        &self,
        req: Request<Streaming<v1::WriteInput>>,
    ) -> Result<Response<v1::WriteResponse>, Status> {
        let mut input = req.into_inner();
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("no header"))?;
        let Some(Input::Header(h)) = first.input else {
            return Err(Status::invalid_argument("first input must be header"));
        };
        let path = abs(&h.path)?;
        let mode = if h.mode == 0 { 0o644 } else { h.mode & 0o7777 };
        let dir = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| "/".into());
        let (p, d) = (path.clone(), dir.clone());
        let (file, tmp) = blocking(move || {
            if h.create_parents {
                std::fs::create_dir_all(&d).map_err(|e| status(e, &d))?;
            }
            if std::fs::symlink_metadata(&p)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                return Err(Status::invalid_argument(format!(
                    "{}: is a directory",
                    p.display()
                )));
            }
            if h.append {
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(mode)
                    .open(&p)
                    .map_err(|e| status(e, &p))?;
                return Ok((f, None));
            }
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let tmp = d.join(format!(".{name}.pandastack-{:016x}", rand::random::<u64>()));
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&tmp)
                .map_err(|e| status(e, &d))?;
            Ok((f, Some(tmp)))
        })
        .await?;
        let mut written = 0u64;
        let mut file = Some(file);
        let result: Result<(), Status> = async {
            while let Some(msg) = input.message().await? {
                match msg.input {
                    Some(Input::Data(data)) => {
                        written += data.len() as u64;
                        let Some(mut f) = file.take() else {
                            return Err(Status::internal("file handle lost"));
                        };
                        let (f, r) = tokio::task::spawn_blocking(move || {
                            let r = f.write_all(&data);
                            (f, r)
                        })
                        .await
                        .map_err(|e| Status::internal(e.to_string()))?;
                        file = Some(f);
                        r.map_err(|e| status(e, &path))?;
                    }
                    Some(Input::Header(_)) => {
                        return Err(Status::invalid_argument("header sent twice"))
                    }
                    None => {}
                }
            }
            Ok(())
        }
        .await;
        let p = path.clone();
        blocking(move || {
            match (result, tmp) {
                (Ok(()), Some(tmp)) => {
                    // The mode given at creation was filtered by the umask; set it exactly.
                    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| status(e, &tmp))?;
                    drop(file);
                    std::fs::rename(&tmp, &p).map_err(|e| {
                        let _ = std::fs::remove_file(&tmp);
                        status(e, &p)
                    })
                }
                (Ok(()), None) => Ok(()),
                (Err(e), tmp) => {
                    if let Some(t) = tmp {
                        let _ = std::fs::remove_file(t);
                    }
                    Err(e)
                }
            }
        })
        .await?;
        Ok(Response::new(v1::WriteResponse {
            bytes_written: written,
        }))
    }

    async fn stat(&self, req: Request<v1::PathRequest>) -> Result<Response<v1::FileInfo>, Status> {
        let path = abs(&req.into_inner().path)?;
        blocking(move || {
            let md = std::fs::symlink_metadata(&path).map_err(|e| status(e, &path))?;
            Ok(Response::new(info(&path, &md)))
        })
        .await
    }

    async fn list(
        &self,
        req: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        let req = req.into_inner();
        let path = abs(&req.path)?;
        let depth = req.depth.clamp(1, 32);
        blocking(move || {
            let mut entries = Vec::new();
            list(&path, depth, &mut entries).map_err(|e| status(e, &path))?;
            entries.sort_by(|a, b| a.path.cmp(&b.path));
            Ok(Response::new(page(entries, &req.after, req.limit)))
        })
        .await
    }

    async fn mkdir(&self, req: Request<v1::MkdirRequest>) -> Result<Response<v1::Empty>, Status> {
        let req = req.into_inner();
        let path = abs(&req.path)?;
        let mode = if req.mode == 0 {
            0o755
        } else {
            req.mode & 0o7777
        };
        blocking(move || {
            let mut b = std::fs::DirBuilder::new();
            std::os::unix::fs::DirBuilderExt::mode(&mut b, mode);
            b.recursive(req.parents);
            b.create(&path).map_err(|e| status(e, &path))?;
            Ok(Response::new(v1::Empty {}))
        })
        .await
    }

    async fn remove(&self, req: Request<v1::RemoveRequest>) -> Result<Response<v1::Empty>, Status> {
        let req = req.into_inner();
        let path = abs(&req.path)?;
        if path == Path::new("/") {
            return Err(Status::invalid_argument("refusing to remove /"));
        }
        blocking(move || {
            let md = std::fs::symlink_metadata(&path).map_err(|e| status(e, &path))?;
            let r = if md.is_dir() {
                if req.recursive {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_dir(&path)
                }
            } else {
                std::fs::remove_file(&path)
            };
            r.map_err(|e| status(e, &path))?;
            Ok(Response::new(v1::Empty {}))
        })
        .await
    }

    async fn rename(&self, req: Request<v1::RenameRequest>) -> Result<Response<v1::Empty>, Status> {
        let req = req.into_inner();
        let (from, to) = (abs(&req.from)?, abs(&req.to)?);
        blocking(move || {
            let flags = if req.overwrite {
                nix::fcntl::RenameFlags::empty()
            } else {
                nix::fcntl::RenameFlags::RENAME_NOREPLACE
            };
            nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                &from,
                nix::fcntl::AT_FDCWD,
                &to,
                flags,
            )
            .map_err(|e| {
                let e = std::io::Error::from(e);
                // Name the path the error is about.
                if e.kind() == ErrorKind::AlreadyExists {
                    status(e, &to)
                } else {
                    status(e, &from)
                }
            })?;
            Ok(Response::new(v1::Empty {}))
        })
        .await
    }

    async fn chmod(&self, req: Request<v1::ChmodRequest>) -> Result<Response<v1::Empty>, Status> {
        let req = req.into_inner();
        let path = abs(&req.path)?;
        blocking(move || {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(req.mode & 0o7777))
                .map_err(|e| status(e, &path))?;
            Ok(Response::new(v1::Empty {}))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno as libc_errno;

    #[test]
    fn only_absolute_paths() {
        assert!(abs("/tmp/x").is_ok());
        assert_eq!(
            abs("tmp/x").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(abs("").unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    fn entry(path: &str) -> v1::FileInfo {
        v1::FileInfo {
            name: path.rsplit('/').next().unwrap_or_default().into(),
            path: path.into(),
            ..Default::default()
        }
    }

    fn sorted(n: usize) -> Vec<v1::FileInfo> {
        (0..n).map(|i| entry(&format!("/d/f{i:05}"))).collect()
    }

    fn paths(r: &v1::ListResponse) -> Vec<&str> {
        r.entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn pages_follow_the_path_order_from_after() {
        let r = page(sorted(5), "", 2);
        assert_eq!(paths(&r), ["/d/f00000", "/d/f00001"]);
        assert_eq!(r.next_after, "/d/f00001");
        let r = page(sorted(5), &r.next_after, 2);
        assert_eq!(paths(&r), ["/d/f00002", "/d/f00003"]);
        let r = page(sorted(5), &r.next_after, 2);
        assert_eq!(paths(&r), ["/d/f00004"]);
        assert_eq!(r.next_after, "", "the last page names no next one");
        // `after` need not be a listed path: entries after it in path order.
        let r = page(sorted(5), "/d/f00002x", 10);
        assert_eq!(paths(&r), ["/d/f00003", "/d/f00004"]);
        assert_eq!(r.next_after, "");
        // Past the end, and an empty directory: an empty last page.
        assert!(page(sorted(5), "/z", 10).entries.is_empty());
        let r = page(Vec::new(), "", 10);
        assert!(r.entries.is_empty() && r.next_after.is_empty());
    }

    #[test]
    fn limits_default_and_clamp() {
        let r = page(sorted(1200), "", 0);
        assert_eq!(r.entries.len(), LIST_DEFAULT_LIMIT as usize);
        assert_eq!(r.next_after, "/d/f00999");
        let r = page(sorted(6000), "", u32::MAX);
        assert_eq!(r.entries.len(), LIST_MAX_LIMIT as usize);
        let r = page(sorted(3), "", 1);
        assert_eq!(
            (paths(&r), r.next_after.as_str()),
            (vec!["/d/f00000"], "/d/f00000")
        );
        // Exactly `limit` left: no next page.
        let r = page(sorted(3), "", 3);
        assert_eq!((r.entries.len(), r.next_after.as_str()), (3, ""));
    }

    #[test]
    fn a_page_stays_under_its_byte_bound() {
        // 4 KiB paths: 5,000 of them would weigh 20 MiB.
        let long = "x".repeat(4000);
        let all: Vec<_> = (0..2000)
            .map(|i| entry(&format!("/d/{i:05}{long}")))
            .collect();
        let (mut after, mut seen) = (String::new(), Vec::new());
        loop {
            let r = page(all.clone(), &after, LIST_MAX_LIMIT);
            let bytes = prost::Message::encoded_len(&r);
            assert!(bytes <= LIST_PAGE_BYTES + 8192, "{bytes} bytes");
            assert!(!r.entries.is_empty());
            seen.extend(r.entries.iter().map(|e| e.path.clone()));
            if r.next_after.is_empty() {
                break;
            }
            assert!(r.entries.len() < 2000, "the bound cut the page");
            assert_eq!(Some(&r.next_after), seen.last());
            after = r.next_after;
        }
        let want: Vec<_> = all.into_iter().map(|e| e.path).collect();
        assert_eq!(seen, want, "every entry exactly once, in order");
    }

    #[test]
    fn a_page_never_splits_equal_paths() {
        let all = vec![entry("/d/a"), entry("/d/b"), entry("/d/b"), entry("/d/c")];
        let r = page(all.clone(), "", 2);
        assert_eq!(paths(&r), ["/d/a", "/d/b", "/d/b"]);
        assert_eq!(r.next_after, "/d/b");
        let r = page(all, &r.next_after, 2);
        assert_eq!((paths(&r), r.next_after.as_str()), (vec!["/d/c"], ""));
    }

    #[test]
    fn io_errors_map_to_codes() {
        let p = Path::new("/x");
        assert_eq!(
            status(ErrorKind::NotFound.into(), p).code(),
            tonic::Code::NotFound
        );
        assert_eq!(
            status(ErrorKind::AlreadyExists.into(), p).code(),
            tonic::Code::AlreadyExists
        );
        assert_eq!(
            status(ErrorKind::DirectoryNotEmpty.into(), p).code(),
            tonic::Code::FailedPrecondition
        );
        // Renaming "/" (a mount point) fails with EXDEV: the caller's fault, not the agent's.
        for (errno, code) in [
            (libc_errno::EXDEV, tonic::Code::InvalidArgument),
            (libc_errno::EBUSY, tonic::Code::FailedPrecondition),
            (libc_errno::ELOOP, tonic::Code::InvalidArgument),
            (libc_errno::ENOSPC, tonic::Code::ResourceExhausted),
            (libc_errno::EIO, tonic::Code::Internal),
        ] {
            let e = std::io::Error::from_raw_os_error(errno as i32);
            assert_eq!(status(e, p).code(), code, "errno {errno:?}");
        }
    }
}
