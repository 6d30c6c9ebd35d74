//! `Ports.Dial` against the real agent binary (unix-socket mode, on this host): the host-side
//! `connect_port` stream to TCP servers the test runs on the loopback, as the preview proxy uses
//! it inside a guest.

mod common;

use std::time::Duration;

use common::{connect, start};
use pandastack_guest_proto::connect_port;
use pandastack_guest_proto::v1::{self, ports_client::PortsClient};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A TCP echo server on the loopback; returns its port.
async fn echo_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test]
async fn bytes_round_trip_small_and_large() {
    let a = start();
    let ch = connect(&a).await;
    let port = echo_server().await;
    let mut s = connect_port(ch.clone(), port).await.unwrap();
    s.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"hello");

    // 64 MiB each way at once, compared by hash.
    let size = 64usize << 20;
    let data: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let want = Sha256::digest(&data);
    let (mut rd, mut wr) = tokio::io::split(s);
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut got = Vec::with_capacity(size);
    rd.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), size);
    assert_eq!(Sha256::digest(&got), want);
}

#[tokio::test]
async fn half_close_lets_the_answer_through_and_eof_arrives() {
    let a = start();
    let ch = connect(&a).await;
    // A server that reads everything, then answers with its length and closes.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).await.unwrap();
        s.write_all(format!("got {}", all.len()).as_bytes())
            .await
            .unwrap();
    });
    let mut s = connect_port(ch, port).await.unwrap();
    s.write_all(&[7u8; 300_000]).await.unwrap();
    s.shutdown().await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut answer))
        .await
        .expect("answer and EOF")
        .unwrap();
    assert_eq!(answer, "got 300000");
}

#[tokio::test]
async fn nothing_listening_fails_at_once_naming_the_port() {
    let a = start();
    let ch = connect(&a).await;
    // A port that was just free.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = std::time::Instant::now();
    let e = connect_port(ch, port).await.err().expect("refused");
    assert_eq!(e.code(), tonic::Code::Unavailable);
    assert!(
        e.message().contains(&format!("port {port}")),
        "{}",
        e.message()
    );
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn bad_ports_and_a_missing_open_are_refused() {
    let a = start();
    let ch = connect(&a).await;
    for port in [0u32, 70000] {
        let open = v1::PortInput {
            input: Some(v1::port_input::Input::Open(v1::PortOpen { port })),
        };
        let e = PortsClient::new(ch.clone())
            .dial(futures::stream::iter([open]))
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{port}");
    }
    let data = v1::PortInput {
        input: Some(v1::port_input::Input::Data(b"x".to_vec())),
    };
    let e = PortsClient::new(ch)
        .dial(futures::stream::iter([data]))
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn many_connections_on_one_channel_and_drop_closes() {
    let a = start();
    let ch = connect(&a).await;
    let port = echo_server().await;
    let tasks: Vec<_> = (0..16u8)
        .map(|i| {
            let ch = ch.clone();
            tokio::spawn(async move {
                let mut s = connect_port(ch, port).await.unwrap();
                let msg = vec![i; 100_000];
                s.write_all(&msg).await.unwrap();
                let mut back = vec![0u8; msg.len()];
                s.read_exact(&mut back).await.unwrap();
                assert_eq!(back, msg);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }

    // Dropping the host side closes the guest's connection: the server sees EOF.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        buf
    });
    let mut s = connect_port(ch, port).await.unwrap();
    s.write_all(b"bye").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(s);
    let got = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server saw the connection close")
        .unwrap();
    assert_eq!(got, b"bye");
}
