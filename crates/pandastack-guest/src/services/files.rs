//! `Files`: streamed read/write, stat, list, mkdir, remove, rename, chmod and watch on absolute
//! guest paths.

use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;

use futures::Stream;
use pandastack_guest_proto::listing::page;
use pandastack_guest_proto::v1::{self, files_server::Files, write_input::Input};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

const CHUNK: usize = 64 * 1024;
/// How much of a file that reports no size (`/proc`, `/sys`) a whole-file read returns.
const UNSIZED_READ_MAX: u64 = 1 << 20;

pub struct FilesService;

pub(super) fn abs(path: &str) -> Result<PathBuf, Status> {
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
pub(super) fn status(e: std::io::Error, path: &Path) -> Status {
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
    type WatchStream = super::watch::WatchStream;

    async fn watch(
        &self,
        req: Request<v1::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = req.into_inner();
        super::watch::watch(&req.path, req.recursive).map(Response::new)
    }

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
        let pattern = match req.pattern.as_str() {
            "" => None,
            p => Some(
                pandastack_guest_proto::listing::NamePattern::new(p)
                    .map_err(|e| Status::invalid_argument(format!("pattern: {e}")))?,
            ),
        };
        blocking(move || {
            let mut entries = Vec::new();
            list(&path, depth, &mut entries).map_err(|e| status(e, &path))?;
            if let Some(p) = &pattern {
                entries.retain(|e| p.matches(&e.name));
            }
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
