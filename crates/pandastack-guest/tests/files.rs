//! The Files and Agent services and session handling against the real agent binary.

mod common;

use std::time::Duration;

use common::{connect, sh, start};
use pandastack_guest_proto::session::hello_line;
use pandastack_guest_proto::v1::{self, agent_client::AgentClient, files_client::FilesClient};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

#[tokio::test]
async fn reconnect_after_drop_and_detach() {
    let a = start();
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo one").await.stdout(), "one\n");
    // Detach ends the session; a new session works.
    AgentClient::new(ch.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    drop(ch);
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo two").await.stdout(), "two\n");
    drop(ch);
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo three").await.stdout(), "three\n");
}

#[tokio::test]
async fn garbage_before_hello_is_ignored() {
    let a = start();
    // Wait for the socket.
    let mut stream = loop {
        match tokio::net::UnixStream::connect(&a.socket).await {
            Ok(s) => break s,
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    };
    stream
        .write_all(b"\x00\x00\x04\x08junk from an old session\nPRI * HTTP/2.0\r\n")
        .await
        .unwrap();
    stream.write_all(&hello_line(0x1234)).await.unwrap();
    let mut line = vec![0u8; 36];
    stream.read_exact(&mut line).await.unwrap();
    assert_eq!(line, pandastack_guest_proto::session::ready_line(0x1234));
}
