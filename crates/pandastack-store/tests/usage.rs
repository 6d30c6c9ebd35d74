//! Metered usage rows: a pass's figures and its cursor commit together and only from the cursor
//! the pass read, so a pass repeated (a restart, a second replica) adds nothing; figures add up
//! per (resource, hour). Runs on SQLite, and on PostgreSQL too when `PANDASTACK_TEST_POSTGRES`
//! names a server.

mod common;

use pandastack_store::{Advanced, Metered, Store, UsageKey, VmCursor};

const HOUR: i64 = 3_600_000;
const T0: i64 = common::T0 - common::T0 % HOUR;

fn key(ws: &str, kind: &str, id: &str, hour: i64) -> UsageKey {
    UsageKey {
        workspace_id: ws.into(),
        kind: kind.into(),
        resource_id: id.into(),
        hour,
    }
}

fn vm(ms: i64, egress: i64) -> Metered {
    Metered {
        vm_ms: ms,
        vcpu_ms: 2 * ms,
        memory_mib_ms: 512 * ms,
        egress_bytes: egress,
        ..Metered::default()
    }
}

fn cursor(at_ms: i64, run: i64, tx: i64) -> VmCursor {
    VmCursor {
        at_ms,
        run,
        net_rx: None,
        net_tx: Some(tx),
    }
}

async fn total(s: &Store, ws: &str) -> Metered {
    let mut t = Metered::default();
    for (_, m) in s.usage().hours(ws, 0, i64::MAX).await.unwrap() {
        t.add(&m);
    }
    t
}

#[tokio::test]
async fn a_pass_applied_twice_adds_once() {
    for c in common::stores().await {
        let u = c.store.usage();
        assert_eq!(u.cursor("sb-1").await.unwrap(), None, "{}", c.backend);
        let first = cursor(T0 + 5_000, 1, 100);
        let rows = [(key("w", "sandbox", "sb-1", T0), vm(5_000, 100))];
        assert_eq!(
            u.advance_vm("sb-1", None, &first, &rows).await.unwrap(),
            Advanced::Done
        );
        // The same pass again (a restarted meter that read no cursor, or a replica that read
        // the same one): nothing is added, whichever handle runs it.
        assert_eq!(
            c.other
                .usage()
                .advance_vm("sb-1", None, &first, &rows)
                .await
                .unwrap(),
            Advanced::Stale,
            "{}",
            c.backend
        );
        let next = cursor(T0 + 10_000, 1, 250);
        let more = [(key("w", "sandbox", "sb-1", T0), vm(5_000, 150))];
        assert_eq!(
            u.advance_vm("sb-1", Some(&first), &next, &more)
                .await
                .unwrap(),
            Advanced::Done
        );
        assert_eq!(
            c.other
                .usage()
                .advance_vm("sb-1", Some(&first), &next, &more)
                .await
                .unwrap(),
            Advanced::Stale,
            "{}",
            c.backend
        );
        assert_eq!(u.cursor("sb-1").await.unwrap(), Some(next));
        let t = total(&c.store, "w").await;
        assert_eq!((t.vm_ms, t.vcpu_ms, t.egress_bytes), (10_000, 20_000, 250));
        // One row for the one (resource, hour).
        assert_eq!(u.hours("w", 0, i64::MAX).await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn figures_and_cursor_commit_together() {
    for c in common::stores().await {
        let u = c.store.usage();
        let first = cursor(T0, 1, 0);
        u.advance_vm("sb-2", None, &first, &[]).await.unwrap();
        // A pass that read a cursor that has since moved writes neither its rows nor its cursor.
        let wrong = cursor(T0 - 1, 1, 0);
        let rows = [(key("w", "sandbox", "sb-2", T0), vm(1_000, 7))];
        let r = u
            .advance_vm("sb-2", Some(&wrong), &cursor(T0 + 1_000, 1, 7), &rows)
            .await
            .unwrap();
        assert_eq!(r, Advanced::Stale, "{}", c.backend);
        assert_eq!(u.cursor("sb-2").await.unwrap(), Some(first));
        assert!(total(&c.store, "w").await.is_zero(), "{}", c.backend);
        // The storage cursor follows the same rule.
        assert_eq!(u.storage_cursor().await.unwrap(), None);
        assert_eq!(
            u.advance_storage(None, T0, &[]).await.unwrap(),
            Advanced::Done
        );
        assert_eq!(
            c.other
                .usage()
                .advance_storage(None, T0, &[])
                .await
                .unwrap(),
            Advanced::Stale
        );
        let kept = Metered {
            storage_kib_ms: 1024 * 60_000,
            ..Metered::default()
        };
        let rows = [(key("w", "volume", "vol-1", T0), kept)];
        assert_eq!(
            u.advance_storage(Some(T0), T0 + 60_000, &rows)
                .await
                .unwrap(),
            Advanced::Done
        );
        assert_eq!(
            c.other
                .usage()
                .advance_storage(Some(T0), T0 + 60_000, &rows)
                .await
                .unwrap(),
            Advanced::Stale
        );
        assert_eq!(u.storage_cursor().await.unwrap(), Some(T0 + 60_000));
        assert_eq!(total(&c.store, "w").await.storage_kib_ms, 1024 * 60_000);
    }
}

#[tokio::test]
async fn hours_and_workspaces_stay_apart() {
    for c in common::stores().await {
        let u = c.store.usage();
        let rows = [
            (key("w", "sandbox", "sb-3", T0), vm(2_000, 1)),
            (key("w", "sandbox", "sb-3", T0 + HOUR), vm(3_000, 2)),
            (key("w", "database", "db-1", T0 + HOUR), vm(4_000, 0)),
            (key("other", "sandbox", "sb-9", T0), vm(9_000, 9)),
        ];
        u.advance_vm("sb-3", None, &cursor(T0 + HOUR + 3_000, 1, 3), &rows)
            .await
            .unwrap();
        // Invocations add without a cursor.
        let inv = Metered {
            invocations: 1,
            invocation_ms: 40,
            ..Metered::default()
        };
        u.add(&[(key("w", "function", "f", T0), inv)])
            .await
            .unwrap();
        u.add(&[(key("w", "function", "f", T0), inv)])
            .await
            .unwrap();
        let first_hour = u.hours("w", T0, T0 + HOUR).await.unwrap();
        assert_eq!(first_hour.len(), 2, "{}: {first_hour:?}", c.backend);
        let f = first_hour
            .iter()
            .find(|(k, _)| k.kind == "function")
            .unwrap();
        assert_eq!((f.1.invocations, f.1.invocation_ms), (2, 80));
        let second = u.hours("w", T0 + HOUR, T0 + 2 * HOUR).await.unwrap();
        assert_eq!(second.len(), 2);
        assert_eq!(second.iter().map(|(_, m)| m.vm_ms).sum::<i64>(), 7_000);
        assert_eq!(total(&c.store, "other").await.vm_ms, 9_000);
        assert_eq!(total(&c.store, "w").await.vm_ms, 9_000);
        assert!(total(&c.store, "nobody").await.is_zero());
    }
}

#[tokio::test]
async fn cursors_of_deleted_sandboxes_go() {
    for c in common::stores().await {
        let u = c.store.usage();
        u.advance_vm("sb-gone", None, &cursor(T0, 1, 0), &[])
            .await
            .unwrap();
        assert_eq!(u.forget_gone().await.unwrap(), 1, "{}", c.backend);
        assert_eq!(u.cursor("sb-gone").await.unwrap(), None);
    }
}

#[tokio::test]
async fn kept_lists_what_workspaces_store() {
    for c in common::stores().await {
        let ws = c.store.keys().create_workspace("w", 10, 60).await.unwrap();
        assert!(c.store.usage().kept().await.unwrap().is_empty());
        c.store
            .volumes()
            .insert_within_quota(&volume(&ws.id))
            .await
            .unwrap();
        let kept = c.store.usage().kept().await.unwrap();
        assert_eq!(kept.len(), 1, "{}", c.backend);
        assert_eq!(kept[0].kind, "volume");
        assert_eq!(kept[0].bytes, 3 << 30);
        assert_eq!(kept[0].workspace_id, ws.id);
    }
}

fn volume(ws: &str) -> pandastack_store::VolumeRow {
    pandastack_store::VolumeRow {
        id: pandastack_store::new_id("vol-"),
        workspace_id: ws.into(),
        name: "data".into(),
        host_id: "h".into(),
        size_gb: 3,
        state: pandastack_store::VolumeState::Creating,
        source: None,
        created_at: 1,
    }
}
