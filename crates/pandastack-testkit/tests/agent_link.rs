//! The agent link end to end: a real `AgentService` on a loopback port, over the cluster's
//! mutual TLS, with a scripted host behind it, driven through `RemoteHost` — the `Host` calls
//! the control plane makes, their streams, every `HostError` coming back as itself, and the
//! peers each side refuses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_agent_link::{serve_counting, InFlight, RemoteHost};
use pandastack_cluster::{Identity, Role, San};
use pandastack_host::{
    error_chain, ExecEvent, ExecSpec, GuestErrorKind, Host, HostError, ListPage, SessionStart,
    VmState,
};
use pandastack_testkit::cluster::TestCa;
use pandastack_testkit::script::{Op, Reply, ScriptedHost};
use pandastack_testkit::within;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOST: &str = "host-a";

/// Aborts the agent's server task when a test ends.
struct Agent {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    /// The creates its service has under way.
    in_flight: InFlight,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts an agent presenting `identity` with `host` behind it.
async fn agent(identity: Identity, host: Arc<ScriptedHost>) -> Agent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let in_flight = InFlight::default();
    let counting = in_flight.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = serve_counting(&identity, listener, host, counting).await {
            panic!("agent stopped: {}", error_chain(&e));
        }
    });
    Agent {
        addr,
        task,
        in_flight,
    }
}

/// A scripted host behind a real agent, and a replica's `RemoteHost` connected to it.
struct Link {
    host: Arc<ScriptedHost>,
    remote: RemoteHost,
    cluster: TestCa,
    agent: Agent,
}

async fn link() -> Link {
    let cluster = TestCa::new();
    let host = Arc::new(ScriptedHost::new());
    let agent = agent(cluster.identity(Role::Agent, HOST, &[]), Arc::clone(&host)).await;
    let replica = cluster.identity(Role::Server, "replica-1", &[]);
    let remote = RemoteHost::connect(&replica, agent.addr, HOST)
        .await
        .unwrap();
    Link {
        host,
        remote,
        cluster,
        agent,
    }
}

fn sh(command: &str) -> ExecSpec {
    ExecSpec {
        shell: command.into(),
        ..ExecSpec::default()
    }
}

#[tokio::test]
async fn lifecycle_calls_cross_the_link() {
    let l = link().await;
    let r = &l.remote;
    let vm = r.create("base", "sb-1").await.unwrap();
    assert_eq!((vm.id.as_str(), vm.state), ("sb-1", VmState::Running));
    assert_eq!(vm.template, "base");
    assert_eq!(vm.shape.memory_mib, 256);
    assert_eq!(r.get("sb-1").await.unwrap().id, "sb-1");
    assert_eq!(
        r.list()
            .await
            .iter()
            .map(|v| v.id.clone())
            .collect::<Vec<_>>(),
        ["sb-1"]
    );
    assert_eq!(r.pause("sb-1").await.unwrap().state, VmState::Paused);
    assert_eq!(r.resume("sb-1").await.unwrap().state, VmState::Running);
    assert_eq!(
        r.hibernate("sb-1").await.unwrap().state,
        VmState::Hibernated
    );
    assert_eq!(l.host.vm_state("sb-1"), Some(VmState::Hibernated));
    assert_eq!(r.wake("sb-1").await.unwrap().state, VmState::Running);
    assert_eq!(r.awake("sb-1").await.unwrap().state, VmState::Running);
    let stats = r
        .stats("sb-1")
        .await
        .unwrap()
        .expect("a running VM has stats");
    assert_eq!(stats.rss_bytes, 256 << 20);
    assert!(r.console("sb-1", None, 1024).await.unwrap().data.is_empty());

    // Snapshots and forks.
    let snap = r.snapshot("sb-1", "snap-1").await.unwrap();
    assert_eq!(
        (snap.id.as_str(), snap.sandbox_id.as_str()),
        ("snap-1", "sb-1")
    );
    let child = r.create_from_snapshot("snap-1", "sb-2").await.unwrap();
    assert_eq!(child.id, "sb-2");
    let (fork_snap, children) = r
        .fork("sb-1", "snap-2", &["sb-3".into(), "sb-4".into()])
        .await
        .unwrap();
    assert_eq!(fork_snap.id, "snap-2");
    assert_eq!(
        children.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        ["sb-3", "sb-4"]
    );
    r.delete_snapshot("snap-1").await.unwrap();

    // Volumes.
    let vol = r.create_volume("vol-1", 1 << 20).await.unwrap();
    assert_eq!((vol.id.as_str(), vol.size_bytes), ("vol-1", 1 << 20));
    assert_eq!(r.volume("vol-1").await.unwrap().id, "vol-1");
    assert_eq!(r.volume_ids().await.unwrap(), ["vol-1"]);
    r.delete_volume("vol-1").await.unwrap();

    for id in ["sb-1", "sb-2", "sb-3", "sb-4"] {
        r.destroy(id).await.unwrap();
    }
    assert!(r.list().await.is_empty());
    assert!(matches!(
        r.get("sb-1").await,
        Err(HostError::SandboxNotFound(id)) if id == "sb-1"
    ));
    let ops: Vec<Op> = l.host.calls().into_iter().map(|(op, _)| op).collect();
    for op in [
        Op::Create,
        Op::Pause,
        Op::Resume,
        Op::Hibernate,
        Op::Wake,
        Op::Snapshot,
        Op::Fork,
        Op::DeleteSnapshot,
        Op::CreateVolume,
        Op::DeleteVolume,
        Op::Destroy,
    ] {
        assert!(ops.contains(&op), "{op:?} reached the host: {ops:?}");
    }
}

#[tokio::test]
async fn exec_with_env_timeouts_and_streams() {
    let l = link().await;
    let r = &l.remote;
    r.create("base", "sb").await.unwrap();
    l.host
        .on_exec("echo hi", Reply::ok("hi\n").stderr("warn\n"));
    l.host.on_exec("sleep", Reply::hang());

    let mut spec = sh("echo hi");
    spec.env.insert("GREETING".into(), "hello world".into());
    spec.stdin = Some(b"input".to_vec());
    let out = r.exec("sb", spec).await.unwrap();
    assert_eq!(
        (&out.stdout[..], &out.stderr[..], out.exit_code),
        (&b"hi\n"[..], &b"warn\n"[..], 0)
    );
    let envs = l.host.exec_envs();
    assert_eq!(
        envs[0].1.get("GREETING").map(String::as_str),
        Some("hello world")
    );

    // A timeout travels with the spec and the host's verdict comes back.
    let mut spec = sh("sleep");
    spec.timeout = Duration::from_millis(200);
    let out = r.exec("sb", spec).await.unwrap();
    assert!(out.timed_out, "{out:?}");

    // A streamed command: its events in order.
    let events: Vec<ExecEvent> = r
        .exec_stream("sb", sh("echo hi"))
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(events[0], ExecEvent::Stdout(Bytes::from_static(b"hi\n")));
    assert_eq!(events[1], ExecEvent::Stderr(Bytes::from_static(b"warn\n")));
    assert!(matches!(events[2], ExecEvent::Exit { exit_code: 0, .. }));

    // A session (its inputs go up; the scripted host answers like a stream).
    let start = SessionStart {
        spec: sh("echo hi"),
        stdin: true,
        pty: Some(pandastack_host::PtySize { rows: 24, cols: 80 }),
    };
    let inputs = futures::stream::iter([
        pandastack_host::ExecInput::Stdin(Bytes::from_static(b"ls\n")),
        pandastack_host::ExecInput::StdinEof,
    ])
    .boxed();
    let events: Vec<ExecEvent> = r
        .exec_session("sb", start, inputs)
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(events.len(), 3, "{events:?}");

    // An exec on a sandbox the host does not have fails as itself.
    assert!(matches!(
        r.exec("nope", sh("echo hi")).await,
        Err(HostError::SandboxNotFound(_))
    ));
}

#[tokio::test]
async fn files_cross_in_chunks_and_listings_in_pages() {
    let l = link().await;
    let r = &l.remote;
    r.create("base", "sb").await.unwrap();

    // 9 MiB and a bit, in pieces larger than a link message: cut and joined again.
    let data: Vec<u8> = (0..(9 << 20) + 123).map(|i| (i % 251) as u8).collect();
    let body = futures::stream::iter(
        data.chunks(3 << 20)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    )
    .boxed();
    let n = r.write_file("sb", "/data/big.bin", body).await.unwrap();
    assert_eq!(n, data.len() as u64);
    let mut pieces = 0;
    let mut back = Vec::new();
    let mut s = r.read_file("sb", "/data/big.bin").await.unwrap();
    while let Some(c) = s.next().await {
        back.extend_from_slice(&c.unwrap());
        pieces += 1;
    }
    assert!(pieces > 4, "read in link-sized pieces ({pieces})");
    assert!(back == data, "the file came back byte for byte");
    assert_eq!(
        r.stat("sb", "/data/big.bin").await.unwrap().size,
        data.len() as u64
    );

    // A body error cancels the write: the old file stays.
    let body = futures::stream::iter([
        Ok(Bytes::from_static(b"partial")),
        Err("the client went away".to_owned()),
    ])
    .boxed();
    let e = r.write_file("sb", "/data/big.bin", body).await.unwrap_err();
    assert!(
        matches!(&e, HostError::Guest { kind: GuestErrorKind::Unavailable, message } if message == "the client went away"),
        "{e:?}"
    );
    assert_eq!(
        r.stat("sb", "/data/big.bin").await.unwrap().size,
        data.len() as u64
    );

    // Listings in pages.
    r.mkdir("sb", "/d", true).await.unwrap();
    for i in 0..5 {
        let body = futures::stream::iter([Ok(Bytes::from(format!("{i}")))]).boxed();
        r.write_file("sb", &format!("/d/f{i}"), body).await.unwrap();
    }
    let mut after = None;
    let mut pages = Vec::new();
    loop {
        let page = r
            .list_dir(
                "sb",
                "/d",
                1,
                ListPage {
                    after,
                    limit: 2,
                    pattern: None,
                },
            )
            .await
            .unwrap();
        pages.push(
            page.entries
                .iter()
                .map(|e| e.name.clone())
                .collect::<Vec<_>>(),
        );
        match page.next_after {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(pages, [vec!["f0", "f1"], vec!["f2", "f3"], vec!["f4"]]);
    assert_eq!(r.list_dir_all("sb", "/d", 1).await.unwrap().len(), 5);
    r.rename("sb", "/d/f0", "/d/g0", false).await.unwrap();
    r.remove("sb", "/d/f1", false).await.unwrap();
    assert!(matches!(
        r.stat("sb", "/d/f1").await,
        Err(HostError::Guest {
            kind: GuestErrorKind::NotFound,
            ..
        })
    ));
    assert_eq!(r.stat("sb", "/d/g0").await.unwrap().name, "g0");
}

#[tokio::test]
async fn a_port_carries_bytes_both_ways() {
    let l = link().await;
    let r = &l.remote;
    r.create("base", "sb").await.unwrap();
    l.host.on_port(8080, Some(201));
    let mut io = r.connect_port("sb", 8080).await.unwrap();
    io.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    io.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 201 Scripted"), "{answer:?}");
    assert!(answer.ends_with("ok"), "{answer:?}");

    // Nothing listening: refused at once, as the guest's own error.
    let e = r.connect_port("sb", 9999).await.err().expect("refused");
    assert!(
        matches!(
            e,
            HostError::Guest {
                kind: GuestErrorKind::Unavailable,
                ..
            }
        ),
        "{e:?}"
    );
}

/// One of every `HostError` variant (every state and guest kind), by index.
fn error(i: usize) -> Option<HostError> {
    let states = [
        VmState::Running,
        VmState::Paused,
        VmState::Hibernated,
        VmState::Exited,
    ];
    let kinds = [
        GuestErrorKind::NotFound,
        GuestErrorKind::InvalidArgument,
        GuestErrorKind::AlreadyExists,
        GuestErrorKind::NoSpace,
        GuestErrorKind::PermissionDenied,
        GuestErrorKind::Unavailable,
        GuestErrorKind::Other,
    ];
    Some(match i {
        0 => HostError::SandboxNotFound("sb".into()),
        1 => HostError::TemplateNotFound("tpl".into()),
        2 => HostError::SnapshotNotFound("snap".into()),
        3 => HostError::VolumeNotFound("vol".into()),
        4 => HostError::VolumeSnapshotNotFound("vsnap".into()),
        5 => HostError::TooManyVolumes {
            template: "tpl".into(),
            slots: 3,
            wanted: 4,
        },
        6 => HostError::VmExited("sb".into()),
        7 => HostError::BuildFailed("step 2: exit 1".into()),
        8 => HostError::failed("pause", std::io::Error::other("qmp: connection reset")),
        i if i < 9 + 4 => HostError::InvalidState {
            id: "sb".into(),
            state: states[i - 9],
            op: "pause",
        },
        i if i < 13 + 4 => HostError::CutOff {
            id: "sb".into(),
            state: states[i - 13],
        },
        i if i < 17 + 7 => HostError::guest(kinds[i - 17], "guest says no"),
        _ => return None,
    })
}

#[tokio::test]
async fn every_host_error_comes_back_as_itself() {
    let l = link().await;
    l.remote.create("base", "sb").await.unwrap();
    let mut seen = 0;
    for i in 0.. {
        let Some(want) = error(i) else { break };
        l.host
            .fail_next(Op::Pause, 1, move |_| error(i).expect("in range"));
        let got = l.remote.pause("sb").await.unwrap_err();
        match (&want, &got) {
            (HostError::Failed { what: a, .. }, HostError::Failed { what: b, .. }) => {
                assert_eq!(a, b);
                assert_eq!(error_chain(&want), error_chain(&got));
            }
            _ => assert_eq!(format!("{want:?}"), format!("{got:?}")),
        }
        assert_eq!(want.to_string(), got.to_string());
        seen += 1;
    }
    assert_eq!(seen, 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_calls_cross_the_link() {
    let l = link().await;
    let r = &l.remote;
    let names: Vec<String> = r.catalog().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["base", "minimal"]);
    assert!(r.is_catalog("base"));
    assert!(!r.is_catalog("mine"));
    assert_eq!(r.check_spec("name=mine\n").unwrap().name, "mine");
    assert!(matches!(
        r.check_spec("nonsense"),
        Err(pandastack_host::SpecRefused::Parse(_))
    ));
    r.rebake("base").await.unwrap();
    assert!(matches!(
        r.rebake("nope").await,
        Err(HostError::TemplateNotFound(n)) if n == "nope"
    ));
}

#[tokio::test]
async fn sync_calls_on_a_current_thread_runtime_use_the_cached_catalog() {
    let l = link().await;
    assert!(l.remote.is_catalog("minimal"));
    assert_eq!(l.remote.catalog().unwrap().len(), 2);
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let l = link().await;
    let replica = l.cluster.identity(Role::Server, "replica-2", &[]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(replica.ca().clone()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let e = RemoteHost::connect_with(config, l.agent.addr, HOST)
        .await
        .expect_err("no certificate, no link");
    let chain = error_chain(&e);
    assert!(chain.contains("CertificateRequired"), "{chain}");
    assert!(l.host.calls().is_empty());
}

#[tokio::test]
async fn a_client_with_an_agent_certificate_is_refused() {
    let l = link().await;
    let other_agent = l.cluster.identity(Role::Agent, "host-b", &[]);
    let e = RemoteHost::connect(&other_agent, l.agent.addr, HOST)
        .await
        .expect_err("only servers call agents");
    // The agent drops the connection once it has read the certificate: no call reaches its host.
    assert!(
        matches!(e, pandastack_agent_link::ConnectError::FirstCall { .. }),
        "{}",
        error_chain(&e)
    );
    assert!(l.host.calls().is_empty());
}

#[tokio::test]
async fn an_agent_that_is_not_the_host_dialled_is_refused() {
    let cluster = TestCa::new();
    let replica = cluster.identity(Role::Server, "replica-1", &[]);
    let host = Arc::new(ScriptedHost::new());

    // Another host's agent, whose certificate also carries the dialled name as a DNS name:
    // TLS accepts it; the link checks the identity and refuses it.
    let other = agent(
        cluster.identity(Role::Agent, "host-b", &[San::Dns(HOST.into())]),
        Arc::clone(&host),
    )
    .await;
    let e = RemoteHost::connect(&replica, other.addr, HOST)
        .await
        .expect_err("host-b is not host-a");
    let chain = error_chain(&e);
    assert!(chain.contains("not agent host-a"), "{chain}");

    // A replica's certificate on the agent's port, with the host's name: not an agent.
    let impostor = agent(cluster.identity(Role::Server, HOST, &[]), Arc::clone(&host)).await;
    let e = RemoteHost::connect(&replica, impostor.addr, HOST)
        .await
        .expect_err("a server is not an agent");
    let chain = error_chain(&e);
    assert!(chain.contains("not agent host-a"), "{chain}");

    // An agent whose certificate does not name the dialled host at all: the handshake fails.
    let stranger = agent(cluster.identity(Role::Agent, "host-c", &[]), host).await;
    let e = RemoteHost::connect(&replica, stranger.addr, HOST)
        .await
        .expect_err("host-c is not host-a");
    let chain = error_chain(&e);
    assert!(chain.contains("not valid for name"), "{chain}");
}

/// The real HTTP API and control plane over a `RemoteHost`: what the control plane needs of a
/// host crosses the link (create, exec, a file each way, delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_runs_over_the_link() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    let l = link().await;
    l.host.on_exec("echo over the link", Reply::ok("linked\n"));
    let dir = tempfile::tempdir().unwrap();
    let store = pandastack_store::Store::open(&dir.path().join("state.db"))
        .await
        .unwrap();
    let (_, _, key) = store
        .keys()
        .create_workspace_with_key("ws", 20, 100)
        .await
        .unwrap();
    let host: Arc<dyn Host> = Arc::new(l.remote.clone());
    let control = pandastack_testkit::fake::fake_control(store, host, dir.path());
    control.recover().await.unwrap();
    let app = Arc::new(pandastack_testkit::fake::fake_api(control));
    let router = pandastack_api::router(app);
    let call = |method: &str, path: String, body: Body, json: bool| {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("authorization", format!("Bearer {key}"));
        if json {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(body).unwrap();
        let router = router.clone();
        async move {
            let resp = router.oneshot(req).await.unwrap();
            let status = resp.status();
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            (status, bytes)
        }
    };
    let json = |b: &Bytes| -> serde_json::Value { serde_json::from_slice(b).unwrap() };

    let (st, b) = call(
        "POST",
        "/v1/sandboxes".into(),
        Body::from(r#"{"template":"base"}"#),
        true,
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{b:?}");
    let id = json(&b)["id"].as_str().unwrap().to_owned();
    assert!(
        l.host.vm(&id).is_some(),
        "the sandbox is on the agent's host"
    );

    let (st, b) = call(
        "POST",
        format!("/v1/sandboxes/{id}/exec"),
        Body::from(r#"{"cmd":"echo over the link"}"#),
        true,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{b:?}");
    assert_eq!(json(&b)["stdout"], "linked\n", "{:?}", l.host.exec_log());

    let (st, b) = call(
        "PUT",
        format!("/v1/sandboxes/{id}/fs?path=/work/hello.txt"),
        Body::from("hello over the link"),
        false,
    )
    .await;
    assert!(st.is_success(), "{st} {b:?}");
    let (st, b) = call(
        "GET",
        format!("/v1/sandboxes/{id}/fs?path=/work/hello.txt"),
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{b:?}");
    assert_eq!(&b[..], b"hello over the link");

    // A host error crosses as itself and the API maps it as it would a local one.
    let (st, b) = call(
        "GET",
        format!("/v1/sandboxes/{id}/fs?path=/nope"),
        Body::empty(),
        false,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{b:?}");

    let (st, b) = call(
        "DELETE",
        format!("/v1/sandboxes/{id}"),
        Body::empty(),
        false,
    )
    .await;
    assert!(st.is_success(), "{st} {b:?}");
    assert!(l.host.vm(&id).is_none(), "destroyed on the agent's host");
}

/// The calls the other tests do not make: creates with volumes, disk limits or a memory file,
/// standby, volume snapshots and restores, the object-store calls, builds (their log lines
/// streamed) and bakes.
#[tokio::test]
async fn the_remaining_calls_cross_the_link() {
    use pandastack_host::{BuildSource, DiskRequest, Shape, VolumeHolder, VolumeMount};
    use pandastack_testkit::script::BuildReply;

    let l = link().await;
    let r = &l.remote;
    r.create_volume("vol", 4 << 20).await.unwrap();
    let mount = VolumeMount {
        volume_id: "vol".into(),
        path: "/data".into(),
        read_only: false,
        holder: None,
        owner: Some("1000:1000".into()),
    };
    r.create_with_volumes("base", "sb-v", vec![mount.clone()])
        .await
        .unwrap();
    assert_eq!(l.host.vm("sb-v").unwrap().mounts, [mount]);
    let disk = DiskRequest {
        mbps: Some(20),
        iops: Some(300),
    };
    let vm = r
        .create_with_disk("base", "sb-d", Vec::new(), disk)
        .await
        .unwrap();
    let limits = vm.shape.disk.expect("the create's limits");
    assert_eq!((limits.bytes_per_sec, limits.iops), (20 << 20, 300));
    r.create_with_memory_file("base", "sb-m").await.unwrap();
    let four = vec![
        VolumeMount {
            volume_id: "vol".into(),
            path: "/a".into(),
            read_only: true,
            holder: None,
            owner: None,
        };
        4
    ];
    assert!(matches!(
        r.create_with_volumes("base", "sb-x", four).await,
        Err(HostError::TooManyVolumes {
            slots: 3,
            wanted: 4,
            ..
        })
    ));

    r.snapshot("sb-m", "snap").await.unwrap();
    assert_eq!(r.keep_standby("snap", 2).await.unwrap(), 0);
    assert!(matches!(
        r.keep_standby("nope", 1).await,
        Err(HostError::SnapshotNotFound(_))
    ));

    let holder = VolumeHolder {
        sandbox_id: "sb-v".into(),
        path: "/data".into(),
    };
    let vs = r
        .snapshot_volume("vol", "vsnap", Some(holder))
        .await
        .unwrap();
    assert_eq!(vs.id, "vsnap");
    assert_eq!(r.volume_snapshot_ids().await.unwrap(), ["vsnap"]);
    let restored = r
        .volume_from_snapshot("vsnap", "vol-2", 8 << 20)
        .await
        .unwrap();
    assert_eq!(restored.size_bytes, 8 << 20);
    assert_eq!(
        r.grow_volume("vol-2", 16 << 20).await.unwrap().size_bytes,
        16 << 20
    );
    r.delete_volume_snapshot("vsnap").await.unwrap();

    // The scripted host has no object store: the upload's failure crosses as itself.
    let e = r.upload_volume_snapshot("vsnap", "ws").await.unwrap_err();
    assert!(
        matches!(
            &e,
            HostError::Failed {
                what: "upload volume snapshot",
                ..
            }
        ),
        "{e:?}"
    );
    let data = vec![7u8; 3 << 20];
    let manifest = pandastack_objects::Manifest {
        version: pandastack_objects::Manifest::VERSION,
        chunk_size: 1 << 20,
        length: data.len() as u64,
        chunks: data
            .chunks(1 << 20)
            .map(|c| Some(pandastack_objects::ChunkHash::of(c)).into())
            .collect(),
    };
    let v = r
        .volume_from_manifest("ws", &manifest, "vol-3", 1 << 20)
        .await
        .unwrap();
    assert_eq!(v.size_bytes, 3 << 20);

    // A build: its log lines arrive through the callback, then the image.
    let builds = tempfile::tempdir().unwrap();
    l.host.on_build("name=ok", BuildReply::ok(&["PATH=/bin"]));
    l.host
        .on_build("name=bad", BuildReply::fail("step 1 failed"));
    let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = Arc::clone(&lines);
    let built = r
        .build_image(
            "b-1",
            BuildSource::Spec("name=ok".into()),
            builds.path().to_owned(),
            Box::new(move |line| seen.lock().unwrap().push(line.to_owned())),
        )
        .await
        .unwrap();
    assert_eq!(built.env, ["PATH=/bin"]);
    assert_eq!(built.image, builds.path().join("rootfs.ext4"));
    assert_eq!(*lines.lock().unwrap(), ["scripted build step"]);
    let e = r
        .build_image(
            "b-2",
            BuildSource::Spec("name=bad".into()),
            builds.path().to_owned(),
            Box::new(|_| {}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, HostError::BuildFailed(m) if m == "step 1 failed"),
        "{e:?}"
    );
    let shape = Shape {
        vcpus: 2,
        memory_mib: 512,
        disk: None,
    };
    assert_eq!(r.bake_image("mine", &built.image, shape).await.unwrap(), 7);
    r.remove_template("mine").await.unwrap();
}

#[tokio::test]
async fn the_agent_counts_the_creates_it_has_under_way() {
    let l = link().await;
    l.host.hang_next(Op::Create, 1);
    let remote = l.remote.clone();
    let hung = tokio::spawn(async move { remote.create("minimal", "sb-hung").await });
    within(Duration::from_secs(5), "the hung create counted", async {
        while l.agent.in_flight.now() != 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    l.remote.create("minimal", "sb-quick").await.unwrap();
    assert_eq!(
        l.agent.in_flight.now(),
        1,
        "a finished create is not counted"
    );
    // The replica gives up on the hung one: its call ends on the agent too.
    hung.abort();
    within(
        Duration::from_secs(5),
        "the abandoned create uncounted",
        async {
            while l.agent.in_flight.now() != 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
}
