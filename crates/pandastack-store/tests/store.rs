//! The store's suite, run against both backends: a real SQLite file and a real PostgreSQL
//! server (`PANDASTACK_TEST_POSTGRES`, a `postgres://` URL of a server where the test may create
//! databases — `scripts/test-postgres.sh start` provides one; set it to `skip` to run SQLite
//! only). Every test gets a fresh database on each backend.

use std::sync::Arc;

use pandastack_store::{
    BuildStatus, Filter, JobState, NewJob, OnTimeout, SandboxRow, SandboxState, SourceKind, Store,
    StoreError, TemplateBuildRow,
};

/// A fresh store on one backend.
struct Case {
    backend: &'static str,
    store: Store,
    /// The database's URL, for writing behind the store's back.
    url: String,
    /// Keeps the SQLite file's directory.
    dir: Option<tempfile::TempDir>,
}

impl Case {
    /// Runs `sql` on its own connection (what an older version or an operator might write).
    async fn raw(&self, sql: &str) {
        use sqlx::Connection;
        sqlx::any::install_default_drivers();
        let mut c = sqlx::AnyConnection::connect(&self.url).await.unwrap();
        sqlx::query(sql).execute(&mut c).await.unwrap();
    }
}

/// One fresh store per backend.
async fn stores() -> Vec<Case> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let sqlite = Store::open(&path).await.unwrap();
    let mut out = vec![Case {
        backend: "sqlite",
        store: sqlite,
        url: format!("sqlite://{}", path.display()),
        dir: Some(dir),
    }];
    match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
        Ok("skip") => eprintln!("PostgreSQL backend skipped (PANDASTACK_TEST_POSTGRES=skip)"),
        Ok(admin) => {
            let url = fresh_postgres(admin).await;
            out.push(Case {
                backend: "postgres",
                store: Store::connect(&url).await.unwrap(),
                url,
                dir: None,
            })
        }
        Err(_) => panic!(
            "PANDASTACK_TEST_POSTGRES is not set: run `eval \"$(scripts/test-postgres.sh start)\"` \
             first (or set it to `skip` to test SQLite only)"
        ),
    }
    out
}

/// The URL of a new, empty database on the server at `admin`.
async fn fresh_postgres(admin: &str) -> String {
    use sqlx::Connection;
    let name = format!("t_{:016x}", rand::random::<u64>());
    let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
    format!("{base}/{name}")
}

fn sandbox(ws: &str, host: &str, id: &str, created_at: i64, task: &str) -> SandboxRow {
    SandboxRow {
        id: id.into(),
        workspace_id: ws.into(),
        host_id: host.into(),
        template: "base".into(),
        state: SandboxState::Running,
        vcpus: 1,
        memory_mib: 512,
        disk_mbps: 128,
        disk_iops: 4096,
        metadata: [("task".to_owned(), task.to_owned())].into(),
        env: Default::default(),
        ttl_seconds: None,
        idle_timeout_seconds: None,
        on_timeout: OnTimeout::Kill,
        on_host_loss: pandastack_store::OnHostLoss::Lost,
        created_at,
        expires_at: None,
        last_activity_at: created_at,
        boot_ms: 10,
        boot_mode: "restore".into(),
        snapshot_id: None,
        parent_id: None,
        access_token: format!("tok-{id}"),
        public_ports: Default::default(),
        volumes: Vec::new(),
    }
}

#[tokio::test]
async fn keys_workspaces_sandboxes_and_paging() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        assert_eq!(store.keys().workspace_count().await.unwrap(), 0);
        let (a, _, secret_a) = store
            .keys()
            .create_workspace_with_key("a", 10, 60)
            .await
            .unwrap();
        let (b, _, _) = store
            .keys()
            .create_workspace_with_key("b", 10, 60)
            .await
            .unwrap();
        assert!(secret_a.starts_with("pds_") && secret_a.len() == 68);
        let key = store.keys().verify(&secret_a).await.unwrap().unwrap();
        assert_eq!(key.workspace_id, a.id);
        assert!(store.keys().verify("pds_wrong").await.unwrap().is_none());
        assert!(store.keys().verify("nope").await.unwrap().is_none());

        for i in 0..25 {
            let task = if i % 5 == 0 { "x" } else { "y" };
            let row = sandbox(&a.id, "h1", &format!("sb-{i:02}"), 1000 + i / 2, task);
            store.sandboxes().insert(&row).await.unwrap();
        }
        assert!(
            matches!(
                store
                    .sandboxes()
                    .insert(&sandbox(&a.id, "h1", "sb-00", 1, "x"))
                    .await,
                Err(StoreError::Conflict)
            ),
            "{backend}"
        );
        // Pages of 10: 3 pages, every row once.
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let mut page = store
                .sandboxes()
                .list(&a.id, &Filter::default(), after.clone(), 10)
                .await
                .unwrap();
            let more = page.len() > 10;
            page.truncate(10);
            after = page.last().map(|s| (s.created_at, s.id.clone()));
            seen.extend(page.into_iter().map(|s| s.id));
            if !more {
                break;
            }
        }
        let want: Vec<String> = (0..25).map(|i| format!("sb-{i:02}")).collect();
        assert_eq!(seen, want, "{backend}");
        let x = store
            .sandboxes()
            .list(
                &a.id,
                &Filter {
                    state: Some(SandboxState::Running),
                    metadata: vec![("task".into(), "x".into())],
                },
                None,
                100,
            )
            .await
            .unwrap();
        assert_eq!(x.len(), 5, "{backend}");
        let none = store
            .sandboxes()
            .list(
                &a.id,
                &Filter {
                    state: Some(SandboxState::Hibernated),
                    metadata: vec![],
                },
                None,
                100,
            )
            .await
            .unwrap();
        assert!(none.is_empty(), "{backend}");
        let got = store.sandboxes().get(&a.id, "sb-03").await.unwrap();
        assert_eq!(got, sandbox(&a.id, "h1", "sb-03", 1001, "y"), "{backend}");

        // Workspace isolation.
        assert!(matches!(
            store.sandboxes().get(&b.id, "sb-00").await,
            Err(StoreError::NotFound)
        ));
        assert!(store
            .sandboxes()
            .list(&b.id, &Filter::default(), None, 100)
            .await
            .unwrap()
            .is_empty());

        // Revocation, and the database survives a reopen (migrations are idempotent).
        store.keys().revoke(&a.id, &key.id).await.unwrap();
        assert!(store.keys().verify(&secret_a).await.unwrap().is_none());
        assert!(matches!(
            store.keys().revoke(&b.id, &key.id).await,
            Err(StoreError::NotFound)
        ));
        if let Some(dir) = &case.dir {
            let store = Store::open(&dir.path().join("state.db")).await.unwrap();
            assert_eq!(store.sandboxes().on_host("h1").await.unwrap().len(), 25);
        }
    }
}

/// An operator's key is marked admin wherever a key row is read (its verification above all);
/// every other key, and every key from before the flag, is not.
#[tokio::test]
async fn admin_keys_are_marked_as_such_when_verified() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let (ws, plain, plain_secret) = store
            .keys()
            .create_workspace_with_key("w", 10, 60)
            .await
            .unwrap();
        // A key written before migration 0020 (no `admin` value given) is not an admin's.
        case.raw(&format!(
            "INSERT INTO api_keys (id, workspace_id, name, prefix, hash, created_at) \
             VALUES ('key-old', '{}', 'old', 'pds_0000', 'not-a-real-hash', 1)",
            ws.id
        ))
        .await;
        let (admin, admin_secret) = store.keys().create_admin(&ws.id, "ops").await.unwrap();
        assert!(admin.admin && !plain.admin, "{backend}");
        let verified = store.keys().verify(&admin_secret).await.unwrap().unwrap();
        assert_eq!(verified, admin, "{backend}");
        let verified = store.keys().verify(&plain_secret).await.unwrap().unwrap();
        assert!(!verified.admin, "{backend}");
        assert!(
            store.keys().get_any(&admin.id).await.unwrap().admin,
            "{backend}"
        );
        let listed: Vec<(String, bool)> = store
            .keys()
            .list(&ws.id)
            .await
            .unwrap()
            .into_iter()
            .map(|k| (k.name, k.admin))
            .collect();
        assert_eq!(
            listed,
            [
                ("old".to_owned(), false),
                ("default".to_owned(), false),
                ("ops".to_owned(), true)
            ],
            "{backend}"
        );
        // Revoked, an admin key is no key at all.
        store.keys().revoke(&ws.id, &admin.id).await.unwrap();
        assert!(store.keys().verify(&admin_secret).await.unwrap().is_none());
    }
}

/// A state this version does not know is an error naming the column, not a silent `failed`.
#[tokio::test]
async fn unknown_stored_state_is_an_error_not_a_guess() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 10, 60).await.unwrap();
        let mut row = sandbox(&ws.id, "h1", "sb-1", 1, "x");
        store.sandboxes().insert(&row).await.unwrap();
        row.state = SandboxState::Hibernated;
        store
            .sandboxes()
            .set_state("sb-1", SandboxState::Hibernated)
            .await
            .unwrap();
        assert_eq!(store.sandboxes().get(&ws.id, "sb-1").await.unwrap(), row);
        // State and activity in one statement (a wake).
        row.state = SandboxState::Running;
        row.last_activity_at += 5_000;
        store
            .sandboxes()
            .set_state_touched("sb-1", SandboxState::Running, row.last_activity_at)
            .await
            .unwrap();
        assert_eq!(
            store.sandboxes().get(&ws.id, "sb-1").await.unwrap(),
            row,
            "{backend}"
        );
        case.raw("UPDATE sandboxes SET state = 'melted'").await;
        match store.sandboxes().get(&ws.id, "sb-1").await {
            Err(StoreError::Corrupt { column, value }) => {
                assert_eq!((column, value.as_str()), ("state", "melted"), "{backend}")
            }
            other => panic!("{backend}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn access_tokens_and_public_ports() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 10, 60).await.unwrap();
        let mut row = sandbox(&ws.id, "h1", "sb-1", 1, "x");
        row.access_token = String::new();
        store.sandboxes().insert(&row).await.unwrap();
        let s = store.sandboxes();
        // The first token set sticks; a second caller gets the first one.
        assert_eq!(
            s.ensure_access_token("sb-1", "aaa").await.unwrap(),
            "aaa",
            "{backend}"
        );
        assert_eq!(
            s.ensure_access_token("sb-1", "bbb").await.unwrap(),
            "aaa",
            "{backend}"
        );
        assert!(matches!(
            s.ensure_access_token("sb-nope", "x").await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            s.set_port_public("sb-1", 8080, true).await.unwrap(),
            [8080].into(),
            "{backend}"
        );
        s.set_port_public("sb-1", 3000, true).await.unwrap();
        assert_eq!(
            s.set_port_public("sb-1", 8080, false).await.unwrap(),
            [3000].into(),
            "{backend}"
        );
        let got = s.by_id("sb-1").await.unwrap();
        assert_eq!(
            (got.access_token.as_str(), got.public_ports),
            ("aaa", [3000].into()),
            "{backend}"
        );
        assert!(matches!(
            s.set_port_public("sb-nope", 1, true).await,
            Err(StoreError::NotFound)
        ));
    }
}

/// Start-up and the reaper of one host see only that host's rows.
#[tokio::test]
async fn host_scoped_queries_see_only_their_host() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 10, 60).await.unwrap();
        for (id, host) in [("sb-a1", "h-a"), ("sb-a2", "h-a"), ("sb-b1", "h-b")] {
            let mut row = sandbox(&ws.id, host, id, 1, "x");
            row.expires_at = Some(5);
            store.sandboxes().insert(&row).await.unwrap();
        }
        let on_a: Vec<String> = store
            .sandboxes()
            .on_host("h-a")
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(on_a, ["sb-a1", "sb-a2"], "{backend}");
        let expired: Vec<String> = store
            .sandboxes()
            .expired("h-b", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(expired, ["sb-b1"], "{backend}");
        let counts: Vec<(String, i64)> = store
            .sandboxes()
            .count_by_host()
            .await
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(
            counts,
            [("h-a".to_owned(), 2), ("h-b".to_owned(), 1)],
            "{backend}"
        );
        assert!(store
            .sandboxes()
            .expired("h-b", 4)
            .await
            .unwrap()
            .is_empty());

        // Rows from before hosts existed belong to the first host that starts.
        case.raw("UPDATE sandboxes SET host_id = '' WHERE id = 'sb-b1'")
            .await;
        assert_eq!(store.hosts().adopt_unowned("h-a").await.unwrap(), 1);
        assert_eq!(store.hosts().adopt_unowned("h-b").await.unwrap(), 0);
        assert_eq!(store.sandboxes().on_host("h-a").await.unwrap().len(), 3);
        let h = store.hosts().register("h-a", "box1").await.unwrap();
        let again = store.hosts().register("h-a", "box1b").await.unwrap();
        assert_eq!(
            (again.created_at, again.name.as_str()),
            (h.created_at, "box1b")
        );
    }
}

/// The workspace limit holds under concurrent creates: check and insert are one transaction.
#[tokio::test]
async fn concurrent_creates_never_exceed_the_workspace_limit() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 3, 60).await.unwrap();
        let mut hib = sandbox(&ws.id, "h1", "sb-hib", 1, "x");
        hib.state = SandboxState::Hibernated;
        store.sandboxes().insert_within_limit(&[hib]).await.unwrap();
        let store = Arc::new(store.clone());
        let mut tasks = Vec::new();
        for i in 0..12 {
            let (store, ws) = (Arc::clone(&store), ws.id.clone());
            tasks.push(tokio::spawn(async move {
                let mut row = sandbox(&ws, "h1", &format!("sb-{i}"), 2, "x");
                row.state = SandboxState::Starting;
                store.sandboxes().insert_within_limit(&[row]).await
            }));
        }
        let (mut ok, mut limited) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => ok += 1,
                Err(StoreError::LimitReached { limit: 3 }) => limited += 1,
                Err(e) => panic!("{backend}: {e:?}"),
            }
        }
        // Hibernated sandboxes do not count.
        assert_eq!((ok, limited), (3, 9), "{backend}");
        assert_eq!(store.sandboxes().count_active(&ws.id).await.unwrap(), 3);
        // A fork of two when one place is left writes nothing.
        store.sandboxes().delete("sb-hib").await.unwrap();
        let any = store.sandboxes().on_host("h1").await.unwrap();
        store.sandboxes().delete(&any[0].0).await.unwrap();
        let two = [
            sandbox(&ws.id, "h1", "sb-c1", 3, "x"),
            sandbox(&ws.id, "h1", "sb-c2", 3, "x"),
        ];
        assert!(matches!(
            store.sandboxes().insert_within_limit(&two).await,
            Err(StoreError::LimitReached { .. })
        ));
        assert_eq!(store.sandboxes().on_host("h1").await.unwrap().len(), 2);
        // One row update records a finished create.
        let mut first = store.sandboxes().get(&ws.id, &any[1].0).await.unwrap();
        first.state = SandboxState::Running;
        first.vcpus = 2;
        first.boot_ms = 42;
        store.sandboxes().finish_create(&first).await.unwrap();
        assert_eq!(
            store.sandboxes().get(&ws.id, &first.id).await.unwrap(),
            first
        );
    }
}

fn build(ws: &str, name: &str) -> TemplateBuildRow {
    TemplateBuildRow {
        id: String::new(),
        workspace_id: ws.into(),
        host_id: "h1".into(),
        name: name.into(),
        version: 0,
        source: SourceKind::Oci,
        status: BuildStatus::Queued,
        error: None,
        description: String::new(),
        vcpus: 1,
        memory_mib: 512,
        disk_mb: 1024,
        env: Default::default(),
        image_bytes: None,
        build_ms: None,
        bake_ms: None,
        created_at: 1,
        updated_at: 1,
    }
}

/// Two concurrent builds of one template: one gets the next version, the other a conflict.
#[tokio::test]
async fn concurrent_builds_of_one_template_conflict() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 3, 60).await.unwrap();
        let store = Arc::new(store.clone());
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (store, ws) = (Arc::clone(&store), ws.id.clone());
                tokio::spawn(async move {
                    let mut b = build(&ws, "py");
                    store.template_builds().insert_next(&mut b).await.map(|_| b)
                })
            })
            .collect();
        let mut built = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(b) => built.push(b),
                Err(StoreError::Conflict) => {}
                Err(e) => panic!("{backend}: {e:?}"),
            }
        }
        assert_eq!(built.len(), 1, "{backend}");
        let mut b = built.remove(0);
        assert_eq!(b.version, 1);
        assert!(b.id.starts_with("py-v1-"));
        b.status = BuildStatus::Ready;
        store.template_builds().update(&b).await.unwrap();
        let mut next = build(&ws.id, "py");
        store
            .template_builds()
            .insert_next(&mut next)
            .await
            .unwrap();
        assert_eq!(next.version, 2, "{backend}");
        let unfinished = store.template_builds().unfinished("h1").await.unwrap();
        assert_eq!(unfinished, [next], "{backend}");
        assert!(store
            .template_builds()
            .unfinished("h2")
            .await
            .unwrap()
            .is_empty());
    }
}

fn job(resource: &str, host: Option<&str>) -> NewJob {
    NewJob {
        kind: "test".into(),
        resource: resource.into(),
        host_id: host.map(str::to_owned),
        payload: serde_json::json!({ "n": 1 }),
        max_attempts: 2,
        run_after: 0,
    }
}

#[tokio::test]
async fn jobs_are_unique_per_resource_claimed_once_and_survive_their_runner() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let jobs = store.jobs();
        let a = jobs.enqueue(&job("build:a", Some("h1"))).await.unwrap();
        // One incomplete job per resource.
        assert!(
            matches!(
                jobs.enqueue(&job("build:a", None)).await,
                Err(StoreError::Conflict)
            ),
            "{backend}"
        );
        assert_eq!(jobs.incomplete("build:a").await.unwrap().unwrap().id, a.id);
        // Host h2 cannot take h1's job.
        assert!(jobs.claim("h2", "r2", 60_000).await.unwrap().is_none());
        let got = jobs.claim("h1", "r1", 60_000).await.unwrap().unwrap();
        assert_eq!(
            (got.id.as_str(), got.state, got.attempts),
            (a.id.as_str(), JobState::Running, 1)
        );
        assert_eq!(got.payload, serde_json::json!({ "n": 1 }));
        assert!(jobs.claim("h1", "r1b", 60_000).await.unwrap().is_none());
        jobs.renew(&a.id, "r1", 60_000).await.unwrap();
        assert!(matches!(
            jobs.renew(&a.id, "someone-else", 60_000).await,
            Err(StoreError::NotFound)
        ));
        // A failure with attempts left is queued again; the next claim is attempt 2.
        assert_eq!(
            jobs.fail(&a.id, "r1", "boom", Some(0)).await.unwrap(),
            JobState::Queued
        );
        // The runner dies holding it: its lease runs out and another runner takes it.
        let again = jobs.claim("h1", "r2", 0).await.unwrap().unwrap();
        assert_eq!((again.attempts, again.error.as_deref()), (2, Some("boom")));
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        // Out of attempts with an expired lease: failed, not run a third time.
        assert!(jobs.claim("h1", "r3", 60_000).await.unwrap().is_none());
        let failed = jobs.get(&a.id).await.unwrap();
        assert_eq!(failed.state, JobState::Failed, "{backend}");
        assert!(matches!(
            jobs.complete(&a.id, "r2").await,
            Err(StoreError::NotFound)
        ));
        // The resource is free for a new job.
        let b = jobs.enqueue(&job("build:a", None)).await.unwrap();

        // Many runners at once: every job is claimed exactly once.
        for i in 0..20 {
            jobs.enqueue(&job(&format!("r:{i}"), None)).await.unwrap();
        }
        let store = Arc::new(store.clone());
        let runners: Vec<_> = (0..6)
            .map(|r| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    while let Some(j) = store
                        .jobs()
                        .claim("h1", &format!("runner-{r}"), 60_000)
                        .await
                        .unwrap()
                    {
                        store
                            .jobs()
                            .complete(&j.id, &format!("runner-{r}"))
                            .await
                            .unwrap();
                        mine.push(j.resource);
                    }
                    mine
                })
            })
            .collect();
        let mut all = Vec::new();
        for r in runners {
            all.extend(r.await.unwrap());
        }
        all.sort();
        let mut want: Vec<String> = (0..20).map(|i| format!("r:{i}")).collect();
        want.push("build:a".into());
        want.sort();
        assert_eq!(all, want, "{backend}");
        assert_eq!(store.jobs().get(&b.id).await.unwrap().state, JobState::Done);
    }
}

fn volume(ws: &str, host: &str, name: &str, gb: i64) -> pandastack_store::VolumeRow {
    pandastack_store::VolumeRow {
        id: pandastack_store::new_id("vol-"),
        workspace_id: ws.into(),
        name: name.into(),
        host_id: host.into(),
        size_gb: gb,
        state: pandastack_store::VolumeState::Creating,
        source: None,
        created_at: 1,
    }
}

fn claim(name: &str, path: &str, read_only: bool) -> pandastack_store::MountClaim {
    pandastack_store::MountClaim {
        name: name.into(),
        path: path.into(),
        read_only,
    }
}

#[tokio::test]
async fn volume_quota_mounts_and_their_release() {
    for case in stores().await {
        let s = &case.store;
        let ws = s.keys().create_workspace("v", 10, 100).await.unwrap().id;
        s.keys().set_volume_quota_all(3).await.unwrap();
        let vols = s.volumes();
        let work = volume(&ws, "h1", "work", 2);
        vols.insert_within_quota(&work).await.unwrap();
        assert!(
            matches!(
                vols.insert_within_quota(&volume(&ws, "h1", "more", 2))
                    .await,
                Err(StoreError::LimitReached { limit: 3 })
            ),
            "{}",
            case.backend
        );
        assert!(matches!(
            vols.insert_within_quota(&volume(&ws, "h1", "work", 1))
                .await,
            Err(StoreError::Conflict)
        ));
        // Not ready yet: not mountable.
        let a = sandbox(&ws, "h1", "sb-a", 1, "a");
        let err = s
            .sandboxes()
            .insert_with_volumes(&a, &[claim("work", "/w", false)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::MissingVolume(ref n) if n == "work"),
            "{err:?}"
        );
        assert!(
            s.sandboxes().get(&ws, "sb-a").await.is_err(),
            "a refused claim wrote the row"
        );
        vols.set_ready(&work.id).await.unwrap();
        let got = s
            .sandboxes()
            .insert_with_volumes(&a, &[claim("work", "/w", false)])
            .await
            .unwrap();
        assert_eq!((got.len(), got[0].writer.is_none()), (1, true));

        // One writer; readers many, told who writes; another host's create is refused.
        let b = sandbox(&ws, "h1", "sb-b", 2, "b");
        let err = s
            .sandboxes()
            .insert_with_volumes(&b, &[claim("work", "/w", false)])
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::VolumeBusy { ref sandbox, .. } if sandbox == "sb-a"),
            "{err:?}"
        );
        for id in ["sb-r1", "sb-r2"] {
            let r = sandbox(&ws, "h1", id, 3, "r");
            let got = s
                .sandboxes()
                .insert_with_volumes(&r, &[claim("work", "/r", true)])
                .await
                .unwrap();
            assert_eq!(got[0].writer.as_ref().unwrap().sandbox_id, "sb-a");
        }
        let elsewhere = sandbox(&ws, "h2", "sb-x", 4, "x");
        assert!(matches!(
            s.sandboxes()
                .insert_with_volumes(&elsewhere, &[claim("work", "/r", true)])
                .await,
            Err(StoreError::VolumeElsewhere { .. })
        ));
        assert_eq!(vols.mounts(&work.id).await.unwrap().len(), 3);
        // Growing and deleting wait for the writer; deleting the sandbox releases it.
        assert!(vols.grow(&work, 3).await.unwrap().is_some());
        assert!(vols.delete_unless_mounted(&work).await.unwrap().is_err());
        s.sandboxes().delete("sb-a").await.unwrap();
        assert!(vols.grow(&work, 4).await.is_err(), "quota of 3");
        assert!(vols.grow(&work, 3).await.unwrap().is_none());
        assert_eq!(vols.get(&ws, "work").await.unwrap().size_gb, 3);
        s.sandboxes()
            .insert_with_volumes(&b, &[claim("work", "/w", false)])
            .await
            .unwrap();
        s.sandboxes().delete("sb-b").await.unwrap();
        assert!(vols.delete_unless_mounted(&work).await.unwrap().is_ok());
        assert!(vols.mounts(&work.id).await.unwrap().is_empty());
        assert!(matches!(
            vols.get(&ws, "work").await,
            Err(StoreError::NotFound)
        ));
    }
}

/// An app's SSH deploy key: stored with the row, made later for a row without one (the
/// first writer wins a race), replaced by a rotation.
#[tokio::test]
async fn app_deploy_keys() {
    for case in stores().await {
        let s = &case.store;
        let ws = s.keys().create_workspace("w", 3, 60).await.unwrap();
        let mut app = pandastack_store::AppRow {
            id: "app-1".into(),
            workspace_id: ws.id.clone(),
            name: "web".into(),
            host_id: "h1".into(),
            config: serde_json::json!({}),
            webhook_secret: "whs".into(),
            deploy_private_key: Some("K1".into()),
            live_deploy_id: None,
            created_at: 1,
            updated_at: 1,
            kind: "app".into(),
        };
        s.apps().insert(&app).await.unwrap();
        assert_eq!(
            s.apps().by_id("app-1").await.unwrap(),
            app,
            "{}",
            case.backend
        );
        // A row from before keys: the first key made for it stays.
        app.id = "app-2".into();
        app.name = "old".into();
        app.deploy_private_key = None;
        s.apps().insert(&app).await.unwrap();
        let apps = s.apps();
        assert!(apps.set_deploy_key("app-2", "K2", true, 5).await.unwrap());
        assert!(!apps.set_deploy_key("app-2", "K3", true, 6).await.unwrap());
        let got = apps.get(&ws.id, "old").await.unwrap();
        assert_eq!(got.deploy_private_key.as_deref(), Some("K2"));
        assert_eq!(got.updated_at, 1, "{}", case.backend);
        // A rotation replaces it.
        assert!(apps.set_deploy_key("app-2", "K4", false, 7).await.unwrap());
        let got = apps.by_name("old").await.unwrap();
        assert_eq!(
            (got.deploy_private_key.as_deref(), got.updated_at),
            (Some("K4"), 7)
        );
        assert!(!apps.set_deploy_key("nope", "K", false, 8).await.unwrap());
    }
}

fn snapshot(ws: &str, id: &str, bytes: i64) -> pandastack_store::SnapshotRow {
    pandastack_store::SnapshotRow {
        id: id.into(),
        workspace_id: ws.into(),
        host_id: "h1".into(),
        sandbox_id: "sb-x".into(),
        template: "base".into(),
        size_bytes: bytes,
        created_at: 1,
        auto_delete: false,
        durable_at: None,
    }
}

/// A workspace created after the server set the quotas (`pandastack keys create
/// --new-workspace` while it runs) starts with them, not with the columns' defaults; a later
/// setting reaches it like every other workspace.
#[tokio::test]
async fn a_new_workspace_starts_with_the_quotas_last_set() {
    use pandastack_store::StorageQuotas;
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let before = store
            .keys()
            .create_workspace("before", 10, 60)
            .await
            .unwrap();
        let q = StorageQuotas {
            max_snapshots: 7,
            max_hibernated: 2,
            max_template_builds: 3,
            max_storage_gb: 4,
        };
        store.quotas().set_all(&q).await.unwrap();
        store.keys().set_volume_quota_all(5).await.unwrap();

        let after = store
            .keys()
            .create_workspace("after", 10, 60)
            .await
            .unwrap();
        for ws in [&before, &after] {
            assert_eq!(
                store.quotas().get(&ws.id).await.unwrap(),
                q,
                "{backend} {}",
                ws.name
            );
            assert_eq!(
                store.keys().volume_quota(&ws.id).await.unwrap(),
                5,
                "{backend} {}",
                ws.name
            );
        }
        let (with_key, _, _) = store
            .keys()
            .create_workspace_with_key("keyed", 10, 60)
            .await
            .unwrap();
        assert_eq!(
            store.quotas().get(&with_key.id).await.unwrap(),
            q,
            "{backend}"
        );

        let q2 = StorageQuotas {
            max_snapshots: 1,
            ..q
        };
        store.quotas().set_all(&q2).await.unwrap();
        assert_eq!(
            store.quotas().get(&after.id).await.unwrap(),
            q2,
            "{backend}"
        );
        let later = store
            .keys()
            .create_workspace("later", 10, 60)
            .await
            .unwrap();
        assert_eq!(
            store.quotas().get(&later.id).await.unwrap(),
            q2,
            "{backend}"
        );
        assert_eq!(
            store.keys().volume_quota(&later.id).await.unwrap(),
            5,
            "{backend}"
        );
    }
}

/// Counts of snapshots, hibernated sandboxes and template builds stop at their limits, and
/// their bytes together at the storage quota; concurrent snapshot rows never pass the limit;
/// another workspace is not affected.
#[tokio::test]
async fn storage_quotas_count_and_stop_at_their_limits() {
    use pandastack_store::{Adding, StorageQuotas};
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let backend = *backend;
        let ws = store.keys().create_workspace("w", 10, 60).await.unwrap();
        let other = store.keys().create_workspace("o", 10, 60).await.unwrap();
        let q = StorageQuotas {
            max_snapshots: 3,
            max_hibernated: 1,
            max_template_builds: 2,
            max_storage_gb: 1,
        };
        store.quotas().set_all(&q).await.unwrap();
        assert_eq!(store.quotas().get(&ws.id).await.unwrap(), q, "{backend}");

        // Snapshots: eight concurrent rows of 1 MiB, three fit.
        let store = Arc::new(store.clone());
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (store, ws) = (Arc::clone(&store), ws.id.clone());
                tokio::spawn(async move {
                    let s = snapshot(&ws, &format!("snap-{i}"), 1 << 20);
                    store.snapshots().insert_within_quota(&s).await
                })
            })
            .collect();
        let (mut ok, mut limited) = (0, 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok(()) => ok += 1,
                Err(StoreError::CountLimit {
                    what: "snapshots",
                    limit: 3,
                }) => limited += 1,
                Err(e) => panic!("{backend}: {e:?}"),
            }
        }
        assert_eq!((ok, limited), (3, 5), "{backend}");
        assert!(matches!(
            store.quotas().check(&ws.id, Adding::Snapshot).await,
            Err(StoreError::CountLimit { .. })
        ));
        // The other workspace has room.
        store
            .quotas()
            .check(&other.id, Adding::Snapshot)
            .await
            .unwrap();

        // Hibernated sandboxes: one may be kept, with the bytes its files take.
        store
            .quotas()
            .check(&ws.id, Adding::Hibernation)
            .await
            .unwrap();
        let mut hib = sandbox(&ws.id, "h1", "sb-hib", 1, "x");
        hib.state = SandboxState::Hibernated;
        store.sandboxes().insert(&hib).await.unwrap();
        store
            .sandboxes()
            .set_image_bytes("sb-hib", 300 << 20)
            .await
            .unwrap();
        assert!(matches!(
            store.quotas().check(&ws.id, Adding::Hibernation).await,
            Err(StoreError::CountLimit { limit: 1, .. })
        ));

        // Template builds: failed ones do not count; the third build is refused.
        let mut b1 = build(&ws.id, "one");
        store.template_builds().insert_next(&mut b1).await.unwrap();
        b1.status = BuildStatus::Failed;
        store.template_builds().update(&b1).await.unwrap();
        let mut b2 = build(&ws.id, "two");
        store.template_builds().insert_next(&mut b2).await.unwrap();
        b2.status = BuildStatus::Ready;
        b2.image_bytes = Some(200 << 20);
        store.template_builds().update(&b2).await.unwrap();
        let mut b3 = build(&ws.id, "three");
        store.template_builds().insert_next(&mut b3).await.unwrap();
        b3.status = BuildStatus::Ready;
        store.template_builds().update(&b3).await.unwrap();
        let mut b4 = build(&ws.id, "four");
        assert!(
            matches!(
                store.template_builds().insert_next(&mut b4).await,
                Err(StoreError::CountLimit {
                    what: "template builds",
                    limit: 2
                })
            ),
            "{backend}"
        );

        let used = store.quotas().used(&ws.id).await.unwrap();
        assert_eq!(
            (used.snapshots, used.hibernated, used.template_builds),
            (3, 1, 2),
            "{backend}"
        );
        assert_eq!(
            used.bytes(),
            (3 << 20) + (300 << 20) + (200 << 20),
            "{backend}"
        );

        // Storage: with room in the counts, bytes at the quota refuse everything.
        store
            .quotas()
            .set_all(&StorageQuotas {
                max_snapshots: 100,
                max_hibernated: 100,
                max_template_builds: 100,
                max_storage_gb: 1,
            })
            .await
            .unwrap();
        store
            .quotas()
            .check(&ws.id, Adding::Snapshot)
            .await
            .unwrap();
        store
            .sandboxes()
            .set_image_bytes("sb-hib", 1 << 30)
            .await
            .unwrap();
        for adding in [Adding::Snapshot, Adding::Hibernation, Adding::TemplateBuild] {
            assert!(
                matches!(
                    store.quotas().check(&ws.id, adding).await,
                    Err(StoreError::StorageQuota { limit_gb: 1, .. })
                ),
                "{backend} {adding:?}"
            );
        }
        assert!(matches!(
            store
                .snapshots()
                .insert_within_quota(&snapshot(&ws.id, "snap-x", 1))
                .await,
            Err(StoreError::StorageQuota { .. })
        ));
        // A woken sandbox's image no longer counts.
        store
            .sandboxes()
            .set_state("sb-hib", SandboxState::Running)
            .await
            .unwrap();
        store
            .quotas()
            .check(&ws.id, Adding::Snapshot)
            .await
            .unwrap();
        store
            .quotas()
            .check(&other.id, Adding::Snapshot)
            .await
            .unwrap();
    }
}

/// A fork's snapshot (`auto_delete`) goes with the last sandbox row that names it, exactly once
/// when released concurrently; a kept or explicit snapshot never does, nor one still named.
#[tokio::test]
async fn fork_snapshots_go_once_with_the_last_sandbox_that_names_them() {
    for case in stores().await {
        let Case { backend, store, .. } = &case;
        let ws = store.keys().create_workspace("w", 10, 60).await.unwrap();
        let fork = pandastack_store::SnapshotRow {
            auto_delete: true,
            durable_at: None,
            ..snapshot(&ws.id, "snap-fork", 1 << 20)
        };
        store.snapshots().insert(&fork).await.unwrap();
        store
            .snapshots()
            .insert(&snapshot(&ws.id, "snap-kept", 1 << 20))
            .await
            .unwrap();
        let kids: Vec<SandboxRow> = (0..3)
            .map(|i| SandboxRow {
                snapshot_id: Some(if i < 2 { "snap-fork" } else { "snap-kept" }.into()),
                ..sandbox(&ws.id, "h1", &format!("sb-{i}"), i, "t")
            })
            .collect();
        store.sandboxes().insert_within_limit(&kids).await.unwrap();
        assert_eq!(
            store.snapshots().get(&ws.id, "snap-fork").await.unwrap(),
            fork,
            "{backend}"
        );
        let snaps = store.snapshots();
        assert!(
            !snaps.delete_unused("snap-fork").await.unwrap(),
            "{backend}"
        );
        store.sandboxes().delete("sb-0").await.unwrap();
        assert!(
            !snaps.delete_unused("snap-fork").await.unwrap(),
            "{backend}"
        );
        assert!(
            store
                .snapshots()
                .unused_on_host("h1")
                .await
                .unwrap()
                .is_empty(),
            "{backend}"
        );
        store.sandboxes().delete("sb-1").await.unwrap();
        assert_eq!(
            store.snapshots().unused_on_host("h1").await.unwrap(),
            ["snap-fork"],
            "{backend}"
        );
        assert!(
            store
                .snapshots()
                .unused_on_host("h2")
                .await
                .unwrap()
                .is_empty(),
            "{backend}"
        );
        let store = Arc::new(store.clone());
        let racing: Vec<_> = (0..8)
            .map(|_| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.snapshots().delete_unused("snap-fork").await })
            })
            .collect();
        let mut won = 0;
        for t in racing {
            won += usize::from(t.await.unwrap().unwrap());
        }
        assert_eq!(won, 1, "{backend}");
        assert!(matches!(
            store.snapshots().get(&ws.id, "snap-fork").await,
            Err(StoreError::NotFound)
        ));
        // An explicit snapshot stays, named or not.
        store.sandboxes().delete("sb-2").await.unwrap();
        assert!(!store.snapshots().delete_unused("snap-kept").await.unwrap());
        assert!(store
            .snapshots()
            .unused_on_host("h1")
            .await
            .unwrap()
            .is_empty());
        assert!(store.snapshots().get(&ws.id, "snap-kept").await.is_ok());
    }
}

/// The create-rate window is the store's: two handles (two replicas) on one database share it,
/// racing takes never pass its last place, a refusal counts nothing and says when the window
/// ends, and the next window starts afresh.
#[tokio::test]
async fn create_rate_is_shared_by_every_replica_and_exact_under_races() {
    for case in stores().await {
        let backend = case.backend;
        let other = Store::connect(&case.url).await.unwrap();
        let (ws, _, _) = case
            .store
            .keys()
            .create_workspace_with_key("rate", 100, 10)
            .await
            .unwrap();
        let t0 = 1_000_000_000_000i64;
        // Twenty racing takes of one through two handles: exactly ten pass.
        let takes = (0..20).map(|i| {
            let s = if i % 2 == 0 {
                case.store.clone()
            } else {
                other.clone()
            };
            let ws = ws.id.clone();
            tokio::spawn(async move { s.keys().take_creates(&ws, 1, t0 + i).await })
        });
        let mut passed = 0;
        for t in takes {
            match t.await.unwrap() {
                Ok(()) => passed += 1,
                Err(StoreError::RateLimited {
                    limit,
                    retry_after_secs,
                }) => {
                    assert_eq!(limit, 10, "{backend}");
                    assert!(
                        (59..=60).contains(&retry_after_secs),
                        "{backend}: {retry_after_secs}"
                    );
                }
                Err(e) => panic!("{backend}: {e}"),
            }
        }
        assert_eq!(passed, 10, "{backend}");
        // Refused, 30 s on: half the window is left.
        match other.keys().take_creates(&ws.id, 1, t0 + 30_000).await {
            Err(StoreError::RateLimited {
                retry_after_secs, ..
            }) => assert_eq!(retry_after_secs, 30, "{backend}"),
            r => panic!("{backend}: {r:?}"),
        }
        // A new window: a fork of ten fits, one of eleven never does.
        let t1 = t0 + 60_000;
        assert!(matches!(
            case.store.keys().take_creates(&ws.id, 11, t1).await,
            Err(StoreError::RateLimited { .. })
        ));
        case.store
            .keys()
            .take_creates(&ws.id, 10, t1)
            .await
            .unwrap();
        assert!(other.keys().take_creates(&ws.id, 1, t1 + 1).await.is_err());
        // Another workspace has its own window.
        let (ws2, _, _) = other
            .keys()
            .create_workspace_with_key("rate2", 100, 1)
            .await
            .unwrap();
        other.keys().take_creates(&ws2.id, 1, t1).await.unwrap();
    }
}
