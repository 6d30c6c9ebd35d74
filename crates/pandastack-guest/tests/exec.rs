//! The Process service against the real agent binary (unix-socket mode).

mod common;

use std::time::{Duration, Instant};

use common::{connect, run, sh, start, start_msg};
use pandastack_guest_proto::v1::{self, agent_client::AgentClient, process_client::ProcessClient};

#[tokio::test]
async fn health_and_basic_exec() {
    let a = start();
    let ch = connect(&a).await;
    let h = AgentClient::new(ch.clone())
        .health(v1::Empty {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.protocol_version, pandastack_guest_proto::PROTOCOL_VERSION);

    let o = sh(&ch, "echo out; echo err >&2; exit 3").await;
    assert_eq!(o.stdout(), "out\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");
    assert_eq!(o.code(), 3);

    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            argv: vec!["printf".into(), "%s-%s".into(), "a b".into(), "c".into()],
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.stdout(), "a b-c");
}

#[tokio::test]
async fn env_cwd_and_stdin() {
    let a = start();
    let ch = connect(&a).await;
    let o = run(
        &ch,
        vec![
            start_msg(v1::ExecStart {
                shell: "echo $GREETING; pwd; cat".into(),
                env: [("GREETING".to_string(), "hi there".to_string())].into(),
                cwd: a.dir.path().to_string_lossy().into_owned(),
                stdin: true,
                ..Default::default()
            }),
            v1::ExecInput {
                input: Some(v1::exec_input::Input::Stdin(b"piped input".to_vec())),
            },
            v1::ExecInput {
                input: Some(v1::exec_input::Input::StdinEof(v1::Empty {})),
            },
        ],
    )
    .await;
    assert_eq!(
        o.stdout(),
        format!("hi there\n{}\npiped input", a.dir.path().display())
    );
    assert_eq!(o.code(), 0);
}

#[tokio::test]
async fn missing_binary_is_127_and_killed_is_128_plus_signal() {
    let a = start();
    let ch = connect(&a).await;
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            argv: vec!["definitely-not-a-program".into()],
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.code(), 127);
    assert!(String::from_utf8_lossy(&o.stderr).contains("not found"));
    let o = sh(&ch, "kill -9 $$").await;
    assert_eq!(o.code(), 137);
    assert_eq!(o.exit.unwrap().signal, 9);
    // Relative cwd is refused as bad input, not run somewhere surprising.
    let err = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start_msg(v1::ExecStart {
            shell: "true".into(),
            cwd: "tmp".into(),
            ..Default::default()
        })]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn timeout_kills_grandchildren() {
    let a = start();
    let ch = connect(&a).await;
    let pidfile = a.dir.path().join("grandchild.pid");
    let t = Instant::now();
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            shell: format!("sleep 300 & echo $! > {}; sleep 300", pidfile.display()),
            timeout_ms: 500,
            ..Default::default()
        })],
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    let exit = o.exit.unwrap();
    assert!(exit.timed_out);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false);
    assert!(!alive, "grandchild {pid} survived the timeout");
}

#[tokio::test]
async fn output_streams_before_exit_and_caps_truncate() {
    let a = start();
    let ch = connect(&a).await;
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start_msg(v1::ExecStart {
            shell: "echo first; sleep 2; echo second".into(),
            ..Default::default()
        })]))
        .await
        .unwrap()
        .into_inner();
    let t = Instant::now();
    loop {
        let m = s.message().await.unwrap().expect("message");
        if let Some(v1::exec_output::Output::Stdout(b)) = m.output {
            assert_eq!(b, b"first\n");
            break;
        }
    }
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "first chunk came only after {:?}",
        t.elapsed()
    );

    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            shell: "head -c 100000 /dev/zero".into(),
            max_output_bytes: 1000,
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.stdout.len(), 1000);
    let e = o.exit.unwrap();
    assert!(e.stdout_truncated && !e.stderr_truncated);
    assert_eq!(e.exit_code, 0);
}

#[tokio::test]
async fn concurrent_execs_on_one_connection() {
    let a = start();
    let ch = connect(&a).await;
    let t = Instant::now();
    let runs = (0..8).map(|i| {
        let ch = ch.clone();
        async move { sh(&ch, &format!("sleep 1; echo {i}")).await }
    });
    let outs = futures::future::join_all(runs).await;
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.stdout(), format!("{i}\n"));
    }
    assert!(
        t.elapsed() < Duration::from_secs(4),
        "8 x sleep 1 took {:?}: not concurrent",
        t.elapsed()
    );
}

#[tokio::test]
async fn pty_sessions_report_size_and_resize() {
    let a = start();
    let ch = connect(&a).await;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tx.send(start_msg(v1::ExecStart {
        shell: "stty size; read line; stty size; tty".into(),
        pty: true,
        pty_size: Some(v1::PtySize {
            rows: 30,
            cols: 100,
        }),
        ..Default::default()
    }))
    .await
    .unwrap();
    let mut s = ProcessClient::new(ch.clone())
        .exec(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut seen = String::new();
    let mut resized = false;
    while let Some(m) = s.message().await.unwrap() {
        match m.output {
            Some(v1::exec_output::Output::Stdout(b)) => {
                seen.push_str(&String::from_utf8_lossy(&b));
                if !resized && seen.contains("30 100") {
                    resized = true;
                    tx.send(v1::ExecInput {
                        input: Some(v1::exec_input::Input::Resize(v1::PtySize {
                            rows: 40,
                            cols: 120,
                        })),
                    })
                    .await
                    .unwrap();
                    tx.send(v1::ExecInput {
                        input: Some(v1::exec_input::Input::Stdin(b"go\n".to_vec())),
                    })
                    .await
                    .unwrap();
                }
            }
            Some(v1::exec_output::Output::Exit(e)) => {
                assert_eq!(e.exit_code, 0, "output: {seen}");
                break;
            }
            _ => {}
        }
    }
    assert!(seen.contains("30 100"), "{seen}");
    assert!(seen.contains("40 120"), "{seen}");
    assert!(seen.contains("/dev/pts/"), "{seen}");
}
