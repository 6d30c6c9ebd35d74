//! Sessions against the real agent binary: the handshake, reconnects, Detach, several
//! connections at once, and `serve --port` on a character device (a pty standing in for the
//! virtio-serial port).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{connect, sh, start, PtyPort, AGENT};
use pandastack_guest_proto::host::{ConnectError, Restored};
use pandastack_guest_proto::session::{hello_line, ready_line_restorable, Restore};
use pandastack_guest_proto::v1::{self, agent_client::AgentClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn version_flag() {
    let out = Command::new(AGENT).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("pandastack-guest {}", env!("CARGO_PKG_VERSION"))
    );
    // Outside PID 1 the agent needs to be told where to serve.
    let out = Command::new(AGENT).arg("serve").output().unwrap();
    assert!(!out.status.success());
}

#[tokio::test]
async fn health_reports_identity() {
    let a = start();
    let ch = connect(&a).await;
    let h = AgentClient::new(ch)
        .health(v1::Empty {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(h.protocol_version, pandastack_guest_proto::PROTOCOL_VERSION);
    assert_eq!(
        h.hostname,
        nix::unistd::gethostname().unwrap().to_string_lossy()
    );
    assert_eq!(
        h.boot_id,
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap()
            .trim()
    );
    assert!(h.uptime_ms > 0);
}

/// A channel over one already-open session stream that never reconnects, so the end of the
/// session is visible to calls.
async fn one_session(stream: tokio::net::UnixStream) -> tonic::transport::Channel {
    let mut once = Some(hyper_util::rt::TokioIo::new(stream));
    tonic::transport::Endpoint::from_static("http://guest")
        .connect_with_connector(tower::service_fn(move |_| {
            let io = once.take();
            async move { io.ok_or_else(|| std::io::Error::other("session is over")) }
        }))
        .await
        .unwrap()
}

async fn open(a: &common::Agent) -> tonic::transport::Channel {
    let stream = pandastack_guest_proto::host::open_session(&a.socket, Duration::from_secs(10))
        .await
        .unwrap();
    one_session(stream).await
}

#[tokio::test]
async fn reconnect_after_drop_and_detach() {
    let a = start();
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo one").await.stdout(), "one\n");
    drop(ch);
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo two").await.stdout(), "two\n");
    // Detach ends the session; a new session works.
    AgentClient::new(ch.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    drop(ch);
    let ch = connect(&a).await;
    assert_eq!(sh(&ch, "echo three").await.stdout(), "three\n");
}

#[tokio::test]
async fn detach_ends_only_its_own_session() {
    let a = start();
    let (one, two) = (open(&a).await, open(&a).await);
    AgentClient::new(one.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    let mut ended = false;
    for _ in 0..100 {
        if AgentClient::new(one.clone())
            .health(v1::Empty {})
            .await
            .is_err()
        {
            ended = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ended, "the detached session still answers");
    assert_eq!(sh(&two, "echo still here").await.stdout(), "still here\n");
}

#[tokio::test]
async fn garbage_before_hello_is_ignored() {
    let a = start();
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
    let mut line = vec![0u8; ready_line_restorable(0x1234).len()];
    stream.read_exact(&mut line).await.unwrap();
    assert_eq!(line, ready_line_restorable(0x1234));
    // The host may have resent HELLO before it saw READY; those lines are skipped, and the
    // session then speaks HTTP/2 on this very stream.
    stream.write_all(&hello_line(0x5678)).await.unwrap();
    let h = AgentClient::new(one_session(stream).await)
        .health(v1::Empty {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.protocol_version, pandastack_guest_proto::PROTOCOL_VERSION);
}

/// The post-restore hook as the session's RESTORE line: applied before any HTTP/2, answered,
/// and the session then serves calls; a line the agent refuses fails the open with its reason.
#[tokio::test]
async fn a_restore_line_is_applied_when_the_session_opens() {
    let a = start();
    let timeout = Duration::from_secs(10);
    let restore = Restore {
        unix_time_ns: 0,
        entropy: vec![42; 64],
        hostname: String::new(),
        machine_id: String::new(),
        // This agent offers the field: the line carries it and is accepted.
        free_page_reporting: v1::FreePageReporting::Off,
    };
    let (ch, restored) =
        pandastack_guest_proto::host::connect_restoring(a.socket.clone(), timeout, &restore)
            .await
            .expect("session with a restore line");
    // Outside a VM the agent does not step the clock.
    assert_eq!(restored, Restored::Applied { clock_step_ms: 0 });
    assert_eq!(
        sh(&ch, "echo after restore").await.stdout(),
        "after restore\n"
    );
    let bad = Restore {
        entropy: vec![1; 8],
        ..restore
    };
    match pandastack_guest_proto::host::connect_restoring(a.socket.clone(), timeout, &bad).await {
        Err(ConnectError::Restore(why)) => assert!(why.contains("entropy"), "{why}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("8 bytes of entropy were taken"),
    }
}

/// `serve --port` on a pty: the same byte pipe carries one session after another, as the
/// virtio-serial port does across host reconnects and restores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_mode_serves_one_session_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let port = PtyPort::new(dir.path());
    let mut cmd = Command::new(AGENT);
    cmd.args(["serve", "--port"]).arg(&port.slave_path);
    let mut a = common::spawn(cmd, dir, port.socket.clone());
    let timeout = Duration::from_secs(10);

    let ch = pandastack_guest_proto::host::connect(port.socket.clone(), timeout)
        .await
        .expect("first session");
    assert_eq!(sh(&ch, "echo one").await.stdout(), "one\n");

    // An idle session costs no CPU (nothing spins on the port).
    let before = a.cpu_ticks();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = a.cpu_ticks() - before;
    assert!(used <= 5, "idle agent used {used} ticks in 1 s");

    // Detach leaves the agent waiting for HELLO; the next host is answered at once (the wait
    // wakes on SIGIO, not on a timer).
    AgentClient::new(ch.clone())
        .detach(v1::Empty {})
        .await
        .unwrap();
    drop(ch);
    let t = Instant::now();
    let ch = pandastack_guest_proto::host::connect(port.socket.clone(), timeout)
        .await
        .expect("session after detach");
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500), "reconnect took {took:?}");
    assert_eq!(sh(&ch, "echo two").await.stdout(), "two\n");

    // A host that vanishes without Detach leaves the agent inside its old HTTP/2 session; the
    // next host's HELLO is garbage to it, the session fails, and a resent HELLO is answered.
    drop(ch);
    let ch = pandastack_guest_proto::host::connect(port.socket.clone(), timeout)
        .await
        .expect("session after an abandoned one");
    assert_eq!(sh(&ch, "echo three").await.stdout(), "three\n");
    assert!(a.exited().is_none(), "agent exited");
}

#[tokio::test]
async fn shutdown_outside_a_vm_answers_then_exits_cleanly() {
    let mut a = start();
    let ch = connect(&a).await;
    AgentClient::new(ch)
        .shutdown(v1::ShutdownRequest { reboot: false })
        .await
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = a.exited() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "agent still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
}
