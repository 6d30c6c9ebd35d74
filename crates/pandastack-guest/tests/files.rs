//! The Files service against the real agent binary (unix-socket mode).

mod common;

use common::{connect, start};
use pandastack_guest_proto::v1::{self, files_client::FilesClient};
use sha2::{Digest, Sha256};

fn header(path: &str, mode: u32, parents: bool) -> v1::WriteInput {
    v1::WriteInput {
        input: Some(v1::write_input::Input::Header(v1::WriteHeader {
            path: path.into(),
            mode,
            create_parents: parents,
            append: false,
        })),
    }
}

#[tokio::test]
async fn large_file_round_trip() {
    let a = start();
    let ch = connect(&a).await;
    let mut files = FilesClient::new(ch.clone());
    let size = 64 << 20;
    let data: Vec<u8> = (0..size as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    let path = a.dir.path().join("deep/dir/big.bin");
    let mut msgs = vec![header(path.to_str().unwrap(), 0o640, true)];
    msgs.extend(data.chunks(1 << 20).map(|c| v1::WriteInput {
        input: Some(v1::write_input::Input::Data(c.to_vec())),
    }));
    let w = files
        .write(futures::stream::iter(msgs))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(w.bytes_written, size as u64);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(Sha256::digest(&on_disk), Sha256::digest(&data));
    let st = files
        .stat(v1::PathRequest {
            path: path.to_string_lossy().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (st.size, st.mode, st.r#type),
        (size as u64, 0o640, v1::FileType::File as i32)
    );

    let mut s = files
        .read(v1::ReadRequest {
            path: path.to_string_lossy().into(),
            offset: 0,
            length: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut h = Sha256::new();
    let mut n = 0;
    while let Some(c) = s.message().await.unwrap() {
        n += c.data.len();
        h.update(&c.data);
    }
    assert_eq!(n, size);
    assert_eq!(h.finalize(), Sha256::digest(&data));

    // A ranged read.
    let mut s = files
        .read(v1::ReadRequest {
            path: path.to_string_lossy().into(),
            offset: 10,
            length: 5,
        })
        .await
        .unwrap()
        .into_inner();
    let c = s.message().await.unwrap().unwrap();
    assert_eq!(c.data, data[10..15]);
}

#[tokio::test]
async fn directory_operations_and_errors() {
    let a = start();
    let ch = connect(&a).await;
    let mut f = FilesClient::new(ch.clone());
    let root = a.dir.path().to_string_lossy().into_owned();
    f.mkdir(v1::MkdirRequest {
        path: format!("{root}/a/b/c"),
        parents: true,
        mode: 0,
    })
    .await
    .unwrap();
    f.mkdir(v1::MkdirRequest {
        path: format!("{root}/a/b/c"),
        parents: true,
        mode: 0,
    })
    .await
    .unwrap();
    let err = f
        .mkdir(v1::MkdirRequest {
            path: format!("{root}/x/y"),
            parents: false,
            mode: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    std::fs::write(format!("{root}/a/one.txt"), "1").unwrap();
    std::fs::write(format!("{root}/a/b/two.txt"), "22").unwrap();

    let l = f
        .list(v1::ListRequest {
            path: format!("{root}/a"),
            depth: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = l.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["b", "one.txt"]);
    let l = f
        .list(v1::ListRequest {
            path: format!("{root}/a"),
            depth: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let paths: Vec<_> = l
        .entries
        .iter()
        .map(|e| e.path.trim_start_matches(&root).to_string())
        .collect();
    assert_eq!(paths, ["/a/b", "/a/b/c", "/a/b/two.txt", "/a/one.txt"]);

    // Rename without overwrite refuses to clobber; with overwrite it replaces.
    let err = f
        .rename(v1::RenameRequest {
            from: format!("{root}/a/one.txt"),
            to: format!("{root}/a/b/two.txt"),
            overwrite: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    f.rename(v1::RenameRequest {
        from: format!("{root}/a/one.txt"),
        to: format!("{root}/a/b/two.txt"),
        overwrite: true,
    })
    .await
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("{root}/a/b/two.txt")).unwrap(),
        "1"
    );

    f.chmod(v1::ChmodRequest {
        path: format!("{root}/a/b/two.txt"),
        mode: 0o600,
    })
    .await
    .unwrap();
    let st = f
        .stat(v1::PathRequest {
            path: format!("{root}/a/b/two.txt"),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.mode, 0o600);

    let err = f
        .remove(v1::RemoveRequest {
            path: format!("{root}/a"),
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    f.remove(v1::RemoveRequest {
        path: format!("{root}/a"),
        recursive: true,
    })
    .await
    .unwrap();
    assert!(!std::path::Path::new(&format!("{root}/a")).exists());
    let err = f
        .remove(v1::RemoveRequest {
            path: format!("{root}/a"),
            recursive: true,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    let err = f
        .stat(v1::PathRequest {
            path: "relative/path".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = f
        .read(v1::ReadRequest {
            path: format!("{root}/missing"),
            offset: 0,
            length: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
}

fn data(bytes: &[u8]) -> v1::WriteInput {
    v1::WriteInput {
        input: Some(v1::write_input::Input::Data(bytes.to_vec())),
    }
}

async fn write(
    f: &mut FilesClient<tonic::transport::Channel>,
    msgs: Vec<v1::WriteInput>,
) -> Result<u64, tonic::Status> {
    f.write(futures::stream::iter(msgs))
        .await
        .map(|r| r.into_inner().bytes_written)
}

#[tokio::test]
async fn writes_replace_atomically_or_append() {
    let a = start();
    let ch = connect(&a).await;
    let mut f = FilesClient::new(ch.clone());
    let dir = a.dir.path().join("w");
    std::fs::create_dir(&dir).unwrap();
    let target = dir.join("file.txt");
    let path = target.to_string_lossy().into_owned();

    assert_eq!(
        write(&mut f, vec![header(&path, 0, false), data(b"first")])
            .await
            .unwrap(),
        5
    );
    let md = std::fs::metadata(&target).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o7777,
        0o644
    );
    let inode = std::os::unix::fs::MetadataExt::ino(&md);

    // A replacing write is a new file renamed over the old one.
    write(&mut f, vec![header(&path, 0o600, false), data(b"second")])
        .await
        .unwrap();
    let md = std::fs::metadata(&target).unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"second");
    assert_ne!(std::os::unix::fs::MetadataExt::ino(&md), inode);
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o7777,
        0o600
    );

    let mut append = header(&path, 0, false);
    if let Some(v1::write_input::Input::Header(h)) = append.input.as_mut() {
        h.append = true;
    }
    write(&mut f, vec![append, data(b"+more")]).await.unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"second+more");

    // No temporary files are left behind.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["file.txt"]);

    // Missing parent without create_parents; a directory as target; no header first.
    let missing = format!("{}/nope/file", dir.display());
    let err = write(&mut f, vec![header(&missing, 0, false), data(b"x")])
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
    let err = write(
        &mut f,
        vec![header(&dir.to_string_lossy(), 0, false), data(b"x")],
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    let err = write(&mut f, vec![data(b"x")]).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
}

#[tokio::test]
async fn symlinks_are_not_followed() {
    let a = start();
    let ch = connect(&a).await;
    let mut f = FilesClient::new(ch.clone());
    let root = a.dir.path().join("s");
    std::fs::create_dir_all(root.join("real/inner")).unwrap();
    std::fs::write(root.join("real/inner/f"), "x").unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();

    let st = f
        .stat(v1::PathRequest {
            path: root.join("link").to_string_lossy().into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.r#type, v1::FileType::Symlink as i32);
    assert_eq!(st.symlink_target, root.join("real").to_string_lossy());
    assert_eq!(st.name, "link");

    let l = f
        .list(v1::ListRequest {
            path: root.to_string_lossy().into(),
            depth: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let rel: Vec<_> = l
        .entries
        .iter()
        .map(|e| {
            e.path
                .strip_prefix(&*root.to_string_lossy())
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(rel, ["/link", "/real", "/real/inner", "/real/inner/f"]);

    // Reading a directory is a bad request; so is listing a file.
    let err = f
        .read(v1::ReadRequest {
            path: root.join("real").to_string_lossy().into(),
            offset: 0,
            length: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = f
        .list(v1::ListRequest {
            path: root.join("real/inner/f").to_string_lossy().into(),
            depth: 1,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    // Mkdir on an existing directory without `parents`; rename of a missing file.
    let err = f
        .mkdir(v1::MkdirRequest {
            path: root.join("real").to_string_lossy().into(),
            parents: false,
            mode: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::AlreadyExists);
    let err = f
        .rename(v1::RenameRequest {
            from: root.join("missing").to_string_lossy().into(),
            to: root.join("other").to_string_lossy().into(),
            overwrite: true,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);
    assert!(err.message().contains("missing"), "{}", err.message());
}

/// Reads `path` whole, within `secs` seconds: `Err` is the call's or stream's status.
async fn read_within(
    f: &mut FilesClient<tonic::transport::Channel>,
    path: &str,
    secs: u64,
) -> Result<Vec<u8>, tonic::Status> {
    let read = async {
        let mut s = f
            .read(v1::ReadRequest {
                path: path.into(),
                offset: 0,
                length: 0,
            })
            .await?
            .into_inner();
        let mut out = Vec::new();
        while let Some(c) = s.message().await? {
            out.extend_from_slice(&c.data);
        }
        Ok(out)
    };
    tokio::time::timeout(std::time::Duration::from_secs(secs), read)
        .await
        .unwrap_or_else(|_| panic!("reading {path} did not end within {secs} s"))
}

/// Files that have no end or make a reader wait: a FIFO without a writer (opening it would
/// block), a character device with endless bytes, `/proc` files that report no size, a file
/// that grows while it is read. Each read ends at once, bounded.
#[tokio::test]
async fn reads_of_devices_fifos_and_growing_files_end() {
    let a = start();
    let ch = connect(&a).await;
    let mut f = FilesClient::new(ch);
    let fifo = a.dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for path in [fifo.to_str().unwrap(), "/dev/zero", "/dev/urandom"] {
        let err = read_within(&mut f, path, 5).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{path}: {err}");
        assert!(
            err.message().contains("not a regular file"),
            "{path}: {err}"
        );
    }
    // /proc reports size 0 and has bytes: some of them, bounded.
    let status = read_within(&mut f, "/proc/self/status", 5).await.unwrap();
    assert!(
        status.starts_with(b"Name:"),
        "{:?}",
        String::from_utf8_lossy(&status)
    );
    assert!(status.len() <= 1 << 20);
    // A file written faster than it is read ends at the size it had when the read opened it.
    let growing = a.dir.path().join("growing");
    std::fs::write(&growing, vec![b'x'; 4 << 20]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (path, stop) = (growing.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            let block = vec![b'y'; 1 << 20];
            // At most 1 GiB, whatever happens to the reader.
            for _ in 0..1024 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                w.write_all(&block).unwrap();
            }
        })
    };
    // The writer is under way before the read opens the file.
    let mut before = std::fs::metadata(&growing).unwrap().len();
    while before <= 4 << 20 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        before = std::fs::metadata(&growing).unwrap().len();
    }
    let read = read_within(&mut f, growing.to_str().unwrap(), 20).await;
    let after = std::fs::metadata(&growing).unwrap().len();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let read = read.unwrap();
    assert!(
        read.len() as u64 >= before && (read.len() as u64) < after,
        "read {} bytes of a file of {before} then {after}",
        read.len()
    );
    let _ = std::fs::remove_file(&growing);
}
