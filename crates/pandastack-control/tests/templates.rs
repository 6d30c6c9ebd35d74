//! The template service over a real SQLite store and a stand-in host (no VMs): names, versions,
//! conflicts, workspace isolation, uploads, the worker (one build at a time) and recovery after
//! a restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use pandastack_api_types::OciTemplateParams;
use pandastack_control::{BuildConfig, TemplateError, TemplateInfo, Templates};
use pandastack_host::{
    BoxStream, BuildLogFn, BuildSource, BuiltImage, DirPage, ExecEvent, ExecInput, ExecOutcome,
    ExecSpec, FileInfo, Host, HostError, HostResult, ListPage, LogChunk, LogPos, PortIo,
    SessionStart, Shape, SnapshotView, SpecRefused, SpecSummary, TemplateView, VmStats, VmView,
};
use pandastack_store::{BuildStatus, Store};

const HOST_ID: &str = "host-test";

/// A host with one catalog template, `minimal`, whose builds and bakes take a while and count
/// how many run at once. A spec is `name=<name>`.
///
/// Its successor is the test kit's scriptable host (`pandastack_testkit::script::ScriptedHost`),
/// over which these same tests run in `pandastack-testkit/tests/workflows/templates.rs`; this
/// crate may not name the test kit, not even as a dev-dependency (`pandastack-testkit/tests/
/// layers.rs`), so this stand-in stays here.
#[derive(Default)]
struct StubHost {
    running: AtomicUsize,
    most_at_once: AtomicUsize,
    removed: Mutex<Vec<String>>,
    /// What each build found in its directory when it started.
    build_dirs: Mutex<Vec<Vec<String>>>,
}

impl StubHost {
    async fn busy(&self, ms: u64) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_at_once.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

fn nope<T>() -> HostResult<T> {
    Err(HostError::BuildFailed("not in this stand-in".into()))
}

#[async_trait::async_trait]
impl Host for StubHost {
    async fn list(&self) -> Vec<VmView> {
        Vec::new()
    }
    async fn get(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn create(&self, _: &str, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn create_from_snapshot(&self, _: &str, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn create_with_memory_file(&self, _: &str, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn keep_standby(&self, _: &str, _: usize) -> HostResult<usize> {
        nope()
    }
    async fn create_with_volumes(
        &self,
        _: &str,
        _: &str,
        _: Vec<pandastack_host::VolumeMount>,
    ) -> HostResult<VmView> {
        nope()
    }
    async fn create_volume(&self, _: &str, _: u64) -> HostResult<pandastack_host::VolumeView> {
        nope()
    }
    async fn volume(&self, _: &str) -> HostResult<pandastack_host::VolumeView> {
        nope()
    }
    async fn grow_volume(&self, _: &str, _: u64) -> HostResult<pandastack_host::VolumeView> {
        nope()
    }
    async fn delete_volume(&self, _: &str) -> HostResult<()> {
        nope()
    }
    async fn volume_ids(&self) -> HostResult<Vec<String>> {
        Ok(Vec::new())
    }
    async fn snapshot_volume(
        &self,
        _: &str,
        _: &str,
        _: Option<pandastack_host::VolumeHolder>,
    ) -> HostResult<pandastack_host::VolumeSnapshotView> {
        nope()
    }
    async fn delete_volume_snapshot(&self, _: &str) -> HostResult<()> {
        nope()
    }
    async fn volume_snapshot_ids(&self) -> HostResult<Vec<String>> {
        Ok(Vec::new())
    }
    async fn volume_from_snapshot(
        &self,
        _: &str,
        _: &str,
        _: u64,
    ) -> HostResult<pandastack_host::VolumeView> {
        nope()
    }
    async fn upload_volume_snapshot(
        &self,
        _: &str,
        _: &str,
    ) -> HostResult<pandastack_host::VolumeUpload> {
        nope()
    }
    async fn volume_from_manifest(
        &self,
        _: &str,
        _: &pandastack_objects::Manifest,
        _: &str,
        _: u64,
    ) -> HostResult<pandastack_host::VolumeView> {
        nope()
    }
    async fn pause(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn resume(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn hibernate(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn wake(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn awake(&self, _: &str) -> HostResult<VmView> {
        nope()
    }
    async fn destroy(&self, _: &str) -> HostResult<()> {
        nope()
    }
    async fn stats(&self, _: &str) -> HostResult<Option<VmStats>> {
        nope()
    }
    async fn console(&self, _: &str, _: Option<LogPos>, _: usize) -> HostResult<LogChunk> {
        nope()
    }
    async fn snapshot(&self, _: &str, _: &str) -> HostResult<SnapshotView> {
        nope()
    }
    async fn fork(
        &self,
        _: &str,
        _: &str,
        _: &[String],
    ) -> HostResult<(SnapshotView, Vec<VmView>)> {
        nope()
    }
    async fn delete_snapshot(&self, _: &str) -> HostResult<()> {
        nope()
    }
    async fn exec(&self, _: &str, _: ExecSpec) -> HostResult<ExecOutcome> {
        nope()
    }
    async fn exec_stream(
        &self,
        _: &str,
        _: ExecSpec,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        nope()
    }
    async fn exec_session(
        &self,
        _: &str,
        _: SessionStart,
        _: BoxStream<ExecInput>,
    ) -> HostResult<BoxStream<HostResult<ExecEvent>>> {
        nope()
    }
    async fn read_file(&self, _: &str, _: &str) -> HostResult<BoxStream<HostResult<Bytes>>> {
        nope()
    }
    async fn write_file(
        &self,
        _: &str,
        _: &str,
        _: BoxStream<Result<Bytes, String>>,
    ) -> HostResult<u64> {
        nope()
    }
    async fn stat(&self, _: &str, _: &str) -> HostResult<FileInfo> {
        nope()
    }
    async fn list_dir(&self, _: &str, _: &str, _: u32, _: ListPage) -> HostResult<DirPage> {
        nope()
    }
    async fn mkdir(&self, _: &str, _: &str, _: bool) -> HostResult<()> {
        nope()
    }
    async fn remove(&self, _: &str, _: &str, _: bool) -> HostResult<()> {
        nope()
    }
    async fn rename(&self, _: &str, _: &str, _: &str, _: bool) -> HostResult<()> {
        nope()
    }
    async fn connect_port(&self, _: &str, _: u16) -> HostResult<Box<dyn PortIo>> {
        nope()
    }

    fn catalog(&self) -> HostResult<Vec<TemplateView>> {
        Ok(vec![TemplateView {
            name: "minimal".into(),
            description: "the catalog's".into(),
            shape: Shape {
                vcpus: 1,
                memory_mib: 512,
                disk: None,
            },
            disk_mb: 1024,
            bake_ms: None,
        }])
    }
    fn is_catalog(&self, name: &str) -> bool {
        name == "minimal"
    }
    async fn rebake(&self, _: &str) -> HostResult<()> {
        Ok(())
    }
    async fn remove_template(&self, name: &str) -> HostResult<()> {
        self.removed.lock().unwrap().push(name.to_owned());
        Ok(())
    }
    fn check_spec(&self, text: &str) -> Result<SpecSummary, SpecRefused> {
        let name = text
            .strip_prefix("name=")
            .ok_or_else(|| SpecRefused::Parse("want name=<name>".into()))?;
        Ok(SpecSummary {
            name: name.to_owned(),
            description: String::new(),
            shape: Shape {
                vcpus: 1,
                memory_mib: 256,
                disk: None,
            },
            disk_mb: 64,
        })
    }
    async fn build_image(
        &self,
        _: &str,
        _: BuildSource,
        dir: PathBuf,
        mut log: BuildLogFn,
    ) -> HostResult<BuiltImage> {
        let mut seen: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        seen.sort();
        self.build_dirs.lock().unwrap().push(seen);
        log("stand-in build step");
        self.busy(300).await;
        let image = dir.join("rootfs.ext4");
        std::fs::write(&image, b"image").unwrap();
        Ok(BuiltImage {
            image,
            shape: None,
            disk_mb: 64,
            env: vec!["GREETING=hello".into()],
        })
    }
    async fn bake_image(&self, _: &str, _: &Path, _: Shape) -> HostResult<u64> {
        self.busy(100).await;
        Ok(7)
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    builds: PathBuf,
    store: Store,
    host: Arc<StubHost>,
    templates: Templates,
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
        let host = Arc::new(StubHost::default());
        let builds = dir.path().join("builds");
        let templates = Self::service(&store, &host, &builds);
        Self {
            _dir: dir,
            builds,
            store,
            host,
            templates,
            ws: ws.id,
            other_ws: other.id,
        }
    }

    /// A new service over the same store, host and files (as after a restart).
    fn service(store: &Store, host: &Arc<StubHost>, builds: &Path) -> Templates {
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
    assert_eq!(f.host.most_at_once.load(Ordering::SeqCst), 1);

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
    assert!(text.contains("stand-in build step"), "{text}");
    assert!(text.contains("re-bake requested"), "{text}");
    assert_eq!(log.ended().await.as_deref(), Some("ready"));
    assert!(!f.builds.join(&b.id).join("upload.tar").exists());

    t.delete(&f.ws, "app").await.unwrap();
    assert_eq!(*f.host.removed.lock().unwrap(), vec![a.id.clone()]);
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
        *f.host.build_dirs.lock().unwrap(),
        vec![vec!["build.log".to_owned()]],
        "the second attempt starts clean, its log kept"
    );
    let log = std::fs::read_to_string(dir.join("build.log")).unwrap();
    assert!(log.starts_with("earlier attempt\n"), "{log}");
}
