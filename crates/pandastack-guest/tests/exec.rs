//! The Process service against the real agent binary (unix-socket mode).

mod common;

use std::time::{Duration, Instant};

use common::{collect, connect, eof_msg, gone, read_pid, run, sh, start, start_msg, stdin_msg};
use pandastack_guest_proto::v1::{self, process_client::ProcessClient};

#[tokio::test]
async fn argv_and_shell_commands() {
    let a = start();
    let ch = connect(&a).await;
    let o = sh(&ch, "echo out; echo err >&2; exit 3").await;
    assert_eq!(o.stdout(), "out\n");
    assert_eq!(o.stderr(), "err\n");
    assert_eq!(o.code(), 3);
    assert!(o.pid > 0);

    // argv is not split or interpreted by a shell; argv[0] is looked up in PATH.
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            argv: vec![
                "printf".into(),
                "%s-%s".into(),
                "a b".into(),
                "$HOME".into(),
            ],
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.stdout(), "a b-$HOME");
    assert_eq!(o.code(), 0);

    // The first input must be `start`.
    let err = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([stdin_msg(b"x")]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
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
            stdin_msg(b"piped input"),
            eof_msg(),
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
    assert!(
        o.stderr()
            .contains("definitely-not-a-program: command not found"),
        "{}",
        o.stderr()
    );
    let not_executable = a.dir.path().join("data.txt");
    std::fs::write(&not_executable, "just data").unwrap();
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            argv: vec![not_executable.to_string_lossy().into_owned()],
            ..Default::default()
        })],
    )
    .await;
    assert_eq!(o.code(), 126, "{}", o.stderr());
    assert_eq!(sh(&ch, "exit 0").await.code(), 0);
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

#[tokio::test]
async fn stderr_cap_and_both_streams_truncated() {
    let a = start();
    let ch = connect(&a).await;
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            shell: "head -c 5000 /dev/zero; head -c 7000 /dev/zero >&2; echo done >&2".into(),
            max_output_bytes: 4096,
            ..Default::default()
        })],
    )
    .await;
    let e = o.exit.unwrap();
    assert_eq!((o.stdout.len(), o.stderr.len()), (4096, 4096));
    assert!(e.stdout_truncated && e.stderr_truncated);
    // The command itself ran to completion (its output was drained, not blocked).
    assert_eq!(e.exit_code, 0);
}

#[tokio::test]
async fn large_output_reaches_a_slow_reader_complete() {
    let a = start();
    let ch = connect(&a).await;
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start_msg(v1::ExecStart {
            shell: "head -c 6000000 /dev/zero | tr '\\0' x".into(),
            ..Default::default()
        })]))
        .await
        .unwrap()
        .into_inner();
    // Let the command finish while nothing is read: its output waits in pipes and buffers.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut n = 0;
    let mut exit = None;
    while let Some(m) = s.message().await.unwrap() {
        match m.output {
            Some(v1::exec_output::Output::Stdout(b)) => {
                assert!(b.len() <= 64 * 1024, "chunk of {}", b.len());
                assert!(b.iter().all(|&c| c == b'x'));
                n += b.len();
                // A slow reader: the command exits long before its output is delivered.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Some(v1::exec_output::Output::Exit(e)) => exit = Some(e),
            _ => {}
        }
    }
    assert_eq!(n, 6_000_000);
    assert_eq!(exit.unwrap().exit_code, 0);
}

#[tokio::test]
async fn large_stdin_is_delivered() {
    let a = start();
    let ch = connect(&a).await;
    let mut inputs = vec![start_msg(v1::ExecStart {
        shell: "wc -c".into(),
        stdin: true,
        ..Default::default()
    })];
    let chunk = vec![7u8; 256 * 1024];
    inputs.extend((0..40).map(|_| stdin_msg(&chunk)));
    inputs.push(eof_msg());
    let o = run(&ch, inputs).await;
    assert_eq!(o.stdout().trim(), (40 * 256 * 1024).to_string());
}

#[tokio::test]
async fn background_job_holding_the_pipes_does_not_delay_exit() {
    let a = start();
    let ch = connect(&a).await;
    let pidfile = a.dir.path().join("bg.pid");
    let t = Instant::now();
    let o = sh(
        &ch,
        &format!(
            "sleep 100 & echo $! > {}; echo main done",
            pidfile.display()
        ),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(o.stdout(), "main done\n");
    assert_eq!(o.code(), 0);
    // The background job was left running (only timeouts and cancellation kill the tree).
    let bg = read_pid(&pidfile).await;
    assert!(common::alive(bg));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(bg),
        nix::sys::signal::Signal::SIGKILL,
    );
}

#[tokio::test]
async fn signal_input_reaches_the_process_group() {
    let a = start();
    let ch = connect(&a).await;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(start_msg(v1::ExecStart {
        shell: "echo ready; sleep 300".into(),
        ..Default::default()
    }))
    .await
    .unwrap();
    let mut s = ProcessClient::new(ch.clone())
        .exec(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    loop {
        let m = s.message().await.unwrap().unwrap();
        if let Some(v1::exec_output::Output::Stdout(b)) = m.output {
            assert_eq!(b, b"ready\n");
            break;
        }
    }
    tx.send(v1::ExecInput {
        input: Some(v1::exec_input::Input::Signal(15)),
    })
    .await
    .unwrap();
    let o = collect(s).await;
    let e = o.exit.unwrap();
    assert_eq!((e.exit_code, e.signal, e.timed_out), (143, 15, false));
}

#[tokio::test]
async fn cancelling_the_call_kills_the_whole_tree() {
    let a = start();
    let ch = connect(&a).await;
    let pidfile = a.dir.path().join("grandchild.pid");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(start_msg(v1::ExecStart {
        shell: format!("sleep 300 & echo $! > {}; sleep 300", pidfile.display()),
        ..Default::default()
    }))
    .await
    .unwrap();
    let mut s = ProcessClient::new(ch.clone())
        .exec(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let Some(v1::exec_output::Output::Started(st)) = s.message().await.unwrap().unwrap().output
    else {
        panic!("first output is not started");
    };
    let grandchild = read_pid(&pidfile).await;
    assert!(common::alive(st.pid as i32) && common::alive(grandchild));
    drop(s);
    drop(tx);
    assert!(
        gone(st.pid as i32, Duration::from_secs(5)).await,
        "command survived"
    );
    assert!(
        gone(grandchild, Duration::from_secs(5)).await,
        "grandchild survived"
    );
    // The connection is still fine.
    assert_eq!(sh(&ch, "echo ok").await.stdout(), "ok\n");
}

#[tokio::test]
async fn runs_as_another_user() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: switching users needs root");
        return;
    }
    let a = start();
    let ch = connect(&a).await;
    let o = run(
        &ch,
        vec![start_msg(v1::ExecStart {
            shell: "id -u; id -g; echo $USER $HOME; pwd".into(),
            user: "nobody".into(),
            ..Default::default()
        })],
    )
    .await;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let home = if nobody.dir.is_dir() {
        nobody.dir.to_string_lossy().into_owned()
    } else {
        "/".into()
    };
    assert_eq!(
        o.stdout(),
        format!(
            "{}\n{}\nnobody {}\n{home}\n",
            nobody.uid,
            nobody.gid,
            nobody.dir.display()
        ),
        "{}",
        o.stderr()
    );
    let err = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start_msg(v1::ExecStart {
            shell: "true".into(),
            user: "no-such-user-here".into(),
            ..Default::default()
        })]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}
