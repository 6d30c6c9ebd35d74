//! The template service over a real SQLite store and the scripted host (no VMs): names,
//! versions, conflicts, workspace isolation, uploads, the worker (one build at a time) and
//! recovery after a restart. Moved from `pandastack-control/tests/templates.rs`, whose
//! hand-written stand-in host this module's [`ScriptedHost`] succeeds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_api_types::OciTemplateParams;
use pandastack_control::{BuildConfig, TemplateError, TemplateInfo, Templates};
use pandastack_host::Host;
use pandastack_store::{BuildStatus, Store};
use pandastack_testkit::script::{BuildReply, Op, ScriptedHost};

const HOST_ID: &str = "host-test";

/// A host with one catalog template, `minimal`, whose spec builds (`name=<name>`) take 300 ms
/// and end with `GREETING=hello` in the image's environment, and whose bakes take 100 ms.
fn scripted_host() -> ScriptedHost {
    let mut host = ScriptedHost::with_catalog(&["minimal"]);
    host.build_time = Duration::from_millis(100);
    host.on_build(
        "name=",
        BuildReply::ok(&["GREETING=hello"]).delay(Duration::from_millis(300)),
    );
    host
}

/// Templates the host was asked to remove.
fn removed(host: &ScriptedHost) -> Vec<String> {
    host.calls()
        .into_iter()
        .filter(|(op, _)| *op == Op::RemoveTemplate)
        .map(|(_, name)| name)
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    builds: PathBuf,
    store: Store,
    host: Arc<ScriptedHost>,
    templates: Templates,
    /// The events its services record.
    events: pandastack_control::Events,
    ws: String,
    other_ws: String,
}

impl Fixture {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("state.db")).await.unwrap();
        let (ws, _, _) = store
            .keys()
            .create_workspace_with_key("a", 10, 100)
            .await
            .unwrap();
        let (other, _, _) = store
            .keys()
            .create_workspace_with_key("b", 10, 100)
            .await
            .unwrap();
        let host = Arc::new(scripted_host());
        let builds = dir.path().join("builds");
        let events = pandastack_control::Events::new(store.clone());
        let templates = Self::service(&store, &host, &builds).with_events(events.clone());
        Self {
            _dir: dir,
            builds,
            store,
            host,
            templates,
            events,
            ws: ws.id,
            other_ws: other.id,
        }
    }

    /// A new service over the same store, host and files (as after a restart).
    fn service(store: &Store, host: &Arc<ScriptedHost>, builds: &Path) -> Templates {
        let host: Arc<dyn Host> = Arc::clone(host) as Arc<dyn Host>;
        Templates::new(
            store.clone(),
            host,
            HOST_ID.into(),
            BuildConfig {
                dir: builds.to_owned(),
                max_upload_bytes: 1024,
            },
        )
    }

    async fn status(&self, name: &str) -> Option<BuildStatus> {
        let v = self
            .store
            .template_builds()
            .versions(&self.ws, name)
            .await
            .unwrap();
        v.last().map(|r| r.status)
    }

    async fn wait_ready(&self, name: &str) {
        for _ in 0..200 {
            if self.status(name).await == Some(BuildStatus::Ready) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{name} not ready: {:?}", self.status(name).await);
    }
}

fn oci(name: &str) -> OciTemplateParams {
    OciTemplateParams {
        name: name.into(),
        ..Default::default()
    }
}

/// An upload of `chunks` chunks of 100 bytes that counts how many were read.
fn upload(
    chunks: usize,
    read: &Arc<AtomicUsize>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let read = Arc::clone(read);
    futures::stream::iter((0..chunks).map(move |_| {
        read.fetch_add(1, Ordering::SeqCst);
        Ok(Bytes::from(vec![0u8; 100]))
    }))
}

#[tokio::test]
async fn catalog_names_are_refused_and_cannot_be_deleted() {
    let f = Fixture::new().await;
    let t = &f.templates;
    let e = t
        .queue_spec(&f.ws, None, "name=minimal".into())
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::CatalogName(_)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "minimal is a catalog template; choose another name"
    );
    let e = t.delete(&f.ws, "minimal").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "minimal is a catalog template; it cannot be deleted"
    );
    let e = t.delete(&f.ws, "nothing").await.unwrap_err();
    assert!(matches!(e, TemplateError::NotFound(_)), "{e:?}");
    assert_eq!(e.to_string(), "template nothing not found");
    // Refused before the upload is read: it is drained anyway, and nothing is left.
    let read = Arc::new(AtomicUsize::new(0));
    let e = t
        .queue_oci(&f.ws, oci("minimal"), Some(500), upload(5, &read))
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::CatalogName(_)), "{e:?}");
    assert_eq!(read.load(Ordering::SeqCst), 5);
    assert!(t.list(&f.ws).await.unwrap().len() == 1);
    let e = t
        .queue_spec(&f.ws, Some("other".into()), "name=app".into())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "name \"other\" differs from the spec's name \"app\""
    );
    let e = t
        .queue_spec(&f.ws, None, "name=Bad_Name".into())
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::InvalidName(_)), "{e:?}");
}

#[tokio::test]
async fn a_second_build_of_a_name_under_way_conflicts() {
    let f = Fixture::new().await;
    let t = &f.templates;
    // No worker: the first build stays queued.
    let (a, b) = tokio::join!(
        t.queue_spec(&f.ws, None, "name=app".into()),
        t.queue_spec(&f.ws, None, "name=app".into()),
    );
    let (ok, refused) = match (a, b) {
        (Ok(r), Err(e)) | (Err(e), Ok(r)) => (r, e),
        other => panic!("want one build and one refusal: {other:?}"),
    };
    assert_eq!(ok.version, 1);
    assert_eq!(
        refused.to_string(),
        "a build of template app is under way; wait for it to finish"
    );
    // A tarball build of that name too, its upload drained.
    let read = Arc::new(AtomicUsize::new(0));
    let e = t
        .queue_oci(&f.ws, oci("app"), None, upload(3, &read))
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::BuildUnderWay(_)), "{e:?}");
    assert_eq!(read.load(Ordering::SeqCst), 3);
    let e = t.resolve(&f.ws, "app").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "template app has no ready version yet (build 1 is queued)"
    );
    let e = t.delete(&f.ws, "app").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "build 1 of app is queued; delete it once it has finished"
    );
    // Another workspace has its own namespace.
    let other = t
        .queue_spec(&f.other_ws, None, "name=app".into())
        .await
        .unwrap();
    assert_eq!(other.version, 1);
}

#[tokio::test]
async fn uploads_over_the_limit_or_empty_leave_nothing() {
    let f = Fixture::new().await;
    let t = &f.templates;
    let read = Arc::new(AtomicUsize::new(0));
    let e = t
        .queue_oci(&f.ws, oci("big"), Some(4096), upload(50, &read))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "image tarball larger than this server's limit of 0 MiB"
    );
    // Refused by its announced length: drained, bounded.
    assert_eq!(read.load(Ordering::SeqCst), 50);
    // No length announced: refused once past the limit, and the build is gone.
    let e = t
        .queue_oci(&f.ws, oci("big"), None, upload(50, &read))
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::UploadTooLarge { .. }), "{e:?}");
    let e = t
        .queue_oci(&f.ws, oci("empty"), None, upload(0, &read))
        .await
        .unwrap_err();
    assert!(matches!(e, TemplateError::EmptyUpload), "{e:?}");
    let e = t
        .queue_oci(
            &f.ws,
            OciTemplateParams {
                cpu: Some(17),
                ..oci("shape")
            },
            None,
            upload(1, &read),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "cpu: must be 1-16");
    assert_eq!(t.list(&f.ws).await.unwrap().len(), 1, "only the catalog");
    let dirs: Vec<_> = std::fs::read_dir(&f.builds)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(dirs.is_empty(), "build files left: {dirs:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_leaves_mid_upload_leaves_no_build() {
    let f = Fixture::new().await;
    let t = &f.templates;
    // One chunk, then the client goes quiet; the request is dropped (its connection closed).
    let stalled = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(vec![0u8; 100]))])
        .chain(futures::stream::pending());
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        t.queue_oci(&f.ws, oci("left"), None, stalled),
    )
    .await;
    assert!(cut.is_err(), "the upload was still under way");
    for _ in 0..100 {
        let rows = f
            .store
            .template_builds()
            .versions(&f.ws, "left")
            .await
            .unwrap();
        let dirs = std::fs::read_dir(&f.builds).map(|d| d.count()).unwrap_or(0);
        if rows.is_empty() && dirs == 0 {
            // The name is free again at once, not after a restart.
            let read = Arc::new(AtomicUsize::new(0));
            t.queue_oci(&f.ws, oci("left"), None, upload(1, &read))
                .await
                .unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the cut-off build's row or files stayed");
}

#[tokio::test(flavor = "multi_thread")]
async fn builds_run_one_at_a_time_and_stay_in_their_workspace() {
    let f = Fixture::new().await;
    let t = &f.templates;
    let worker = tokio::spawn(t.clone().worker());
    let a = t.queue_spec(&f.ws, None, "name=app".into()).await.unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let b = t
        .queue_oci(&f.ws, oci("other"), Some(300), upload(3, &read))
        .await
        .unwrap();
    let name_ok = |id: &str, name: &str| {
        let rest = id.strip_prefix(&format!("{name}-v1-")).unwrap_or("");
        rest.len() == 6 && rest.bytes().all(|c| c.is_ascii_hexdigit())
    };
    assert!(name_ok(&a.id, "app"), "{}", a.id);
    assert!(name_ok(&b.id, "other"), "{}", b.id);
    f.wait_ready("app").await;
    // A re-bake while the other build runs waits for it.
    let info = t.rebake(&f.ws, "app").await.unwrap();
    let TemplateInfo::Built(built) = info else {
        panic!("a built template")
    };
    assert_eq!(built.ready_version, Some(1));
    f.wait_ready("other").await;
    assert_eq!(f.host.most_builds_at_once(), 1);

    let r = t.resolve(&f.ws, "app").await.unwrap();
    assert_eq!(r.baked, a.id);
    assert_eq!(r.env.get("GREETING").map(String::as_str), Some("hello"));
    assert_eq!(t.resolve(&f.ws, &a.id).await.unwrap().baked, a.id);
    // Another workspace cannot reach the build, not even by its host name.
    let e = t.resolve(&f.other_ws, &a.id).await.unwrap_err();
    assert!(matches!(e, TemplateError::NotFound(_)), "{e:?}");
    assert!(matches!(
        t.get(&f.other_ws, "app").await,
        Err(TemplateError::NotFound(_))
    ));

    let log = t.log(&f.ws, "app", None).await.unwrap();
    let text = std::fs::read_to_string(log.path()).unwrap();
    assert!(text.contains("scripted build step"), "{text}");
    assert!(text.contains("re-bake requested"), "{text}");
    assert_eq!(log.ended().await.as_deref(), Some("ready"));
    assert!(!f.builds.join(&b.id).join("upload.tar").exists());
    // One event for the build (the re-bake of a ready version is none), in its workspace.
    let events = super::events_of(&f.events, &f.ws, "app").await;
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types, ["template.build_succeeded"]);
    assert_eq!(events[0].1["build"], a.id.as_str());
    assert!(super::events_of(&f.events, &f.other_ws, "app")
        .await
        .is_empty());

    t.delete(&f.ws, "app").await.unwrap();
    assert_eq!(removed(&f.host), vec![a.id.clone()]);
    assert!(!f.builds.join(&a.id).exists());
    assert_eq!(log.ended().await.as_deref(), Some("deleted"));
    assert!(matches!(
        t.delete(&f.ws, "app").await,
        Err(TemplateError::NotFound(_))
    ));
    worker.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_cut_off_by_a_restart_runs_again_from_the_start() {
    let f = Fixture::new().await;
    let row = f
        .templates
        .queue_spec(&f.ws, None, "name=app".into())
        .await
        .unwrap();
    // A server that claimed the job and died mid-build, leaving work behind.
    let job = f
        .store
        .jobs()
        .claim(HOST_ID, "host-test/1", 60_000)
        .await
        .unwrap()
        .expect("the queued job");
    assert_eq!(job.kind, "template_build");
    let dir = f.builds.join(&row.id);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::write(dir.join("build.log"), "earlier attempt\n").unwrap();
    std::fs::create_dir_all(f.builds.join("stray")).unwrap();

    let restarted = Fixture::service(&f.store, &f.host, &f.builds);
    restarted.recover().await.unwrap();
    assert!(!f.builds.join("stray").exists(), "files of no build");
    let worker = tokio::spawn(restarted.clone().worker());
    f.wait_ready("app").await;
    worker.abort();
    assert_eq!(
        f.host.build_dirs(),
        vec![vec!["build.log".to_owned()]],
        "the second attempt starts clean, its log kept"
    );
    let log = std::fs::read_to_string(dir.join("build.log")).unwrap();
    assert!(log.starts_with("earlier attempt\n"), "{log}");
}
