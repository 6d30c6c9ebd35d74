//! The store on a real SQLite file.

use pandastack_store::{Filter, SandboxRow, Store, StoreError};

fn sandbox(ws: &str, id: &str, created_at: i64, task: &str) -> SandboxRow {
    SandboxRow {
        id: id.into(),
        workspace_id: ws.into(),
        template: "base".into(),
        state: "running".into(),
        vcpus: 1,
        memory_mib: 512,
        metadata: [("task".to_owned(), task.to_owned())].into(),
        env: Default::default(),
        ttl_seconds: None,
        idle_timeout_seconds: None,
        on_timeout: "kill".into(),
        created_at,
        expires_at: None,
        last_activity_at: created_at,
        boot_ms: 10,
        boot_mode: "restore".into(),
        snapshot_id: None,
        parent_id: None,
    }
}

#[tokio::test]
async fn keys_workspaces_sandboxes_and_paging() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = Store::open(&path).await.unwrap();
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
        store
            .sandboxes()
            .insert(&sandbox(&a.id, &format!("sb-{i:02}"), 1000 + i / 2, task))
            .await
            .unwrap();
    }
    assert!(matches!(
        store
            .sandboxes()
            .insert(&sandbox(&a.id, "sb-00", 1, "x"))
            .await,
        Err(StoreError::Conflict)
    ));
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
    assert_eq!(seen, want);
    let x = store
        .sandboxes()
        .list(
            &a.id,
            &Filter {
                state: Some("running".into()),
                metadata: vec![("task".into(), "x".into())],
            },
            None,
            100,
        )
        .await
        .unwrap();
    assert_eq!(x.len(), 5);

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
    drop(store);
    let store = Store::open(&path).await.unwrap();
    assert_eq!(store.sandboxes().all_ids().await.unwrap().len(), 25);
}
