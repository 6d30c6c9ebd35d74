//! Events and webhook deliveries: ids in commit order (a reader resuming after an id misses
//! nothing and sees nothing twice, whatever the writers racing), deliveries written with their
//! event, claimed one resource at a time in order, retried, given up and redelivered.
//! Runs on SQLite, and on PostgreSQL too when `PANDASTACK_TEST_POSTGRES` names a server.

use pandastack_api_types::DeliveryState;
use pandastack_store::{Attempt, EventFilter, NewEvent, Store, StoreError, WebhookRow};

/// Two connections (two "processes") to one fresh database per backend.
async fn pairs() -> Vec<(&'static str, Store, Store, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut out = vec![(
        "sqlite",
        Store::open(&path).await.unwrap(),
        Store::open(&path).await.unwrap(),
        Some(dir),
    )];
    if let Ok(admin) = std::env::var("PANDASTACK_TEST_POSTGRES") {
        if admin != "skip" {
            use sqlx::Connection;
            let name = format!("t_{:016x}", rand::random::<u64>());
            let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
            let url = format!("{base}/{name}");
            out.push((
                "postgres",
                Store::connect(&url).await.unwrap(),
                Store::connect(&url).await.unwrap(),
                None,
            ));
        }
    }
    out
}

fn event(ws: &str, ty: &str, resource: &str) -> NewEvent {
    NewEvent {
        workspace_id: ws.into(),
        event_type: ty.into(),
        resource_kind: "sandbox".into(),
        resource_id: resource.into(),
        data: serde_json::json!({"n": resource}),
    }
}

fn webhook(ws: &str, id: &str, events: &[&str]) -> WebhookRow {
    WebhookRow {
        id: id.into(),
        workspace_id: ws.into(),
        url: "https://example.com/hook".into(),
        events: events.iter().map(|s| s.to_string()).collect(),
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        disabled: false,
        created_at: 1,
    }
}

async fn workspace(s: &Store, name: &str) -> String {
    s.keys().create_workspace(name, 10, 60).await.unwrap().id
}

#[tokio::test]
async fn events_list_after_an_id_by_workspace_type_and_resource() {
    for (backend, s, _, _dir) in pairs().await {
        let a = workspace(&s, "a").await;
        let b = workspace(&s, "b").await;
        let mut ids = Vec::new();
        for (ws, ty, r) in [
            (&a, "sandbox.created", "sb-1"),
            (&b, "sandbox.created", "sb-9"),
            (&a, "sandbox.paused", "sb-1"),
            (&a, "snapshot.created", "snap-1"),
            (&a, "sandbox.killed", "sb-2"),
        ] {
            let (row, queued) = s.events().insert(&event(ws, ty, r)).await.unwrap();
            assert_eq!(queued, 0, "{backend}: no webhooks yet");
            ids.push(row.id);
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{backend}: {ids:?}");
        assert_eq!(s.events().last_id().await.unwrap(), ids[4]);
        let all = s
            .events()
            .list(&a, &EventFilter::default(), 100)
            .await
            .unwrap();
        let types: Vec<_> = all.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(
            types,
            [
                "sandbox.created",
                "sandbox.paused",
                "snapshot.created",
                "sandbox.killed"
            ],
            "{backend}: only workspace a's, in order"
        );
        assert_eq!(all[0].data, serde_json::json!({"n": "sb-1"}));
        let after = EventFilter {
            after: Some(ids[2]),
            ..Default::default()
        };
        let later = s.events().list(&a, &after, 100).await.unwrap();
        assert_eq!(
            later.iter().map(|e| e.id).collect::<Vec<_>>(),
            [ids[3], ids[4]],
            "{backend}: exactly what follows the id"
        );
        let sandbox_only = EventFilter {
            event_type: Some("sandbox.*".into()),
            ..Default::default()
        };
        assert_eq!(
            s.events().list(&a, &sandbox_only, 100).await.unwrap().len(),
            3
        );
        let exact = EventFilter {
            event_type: Some("sandbox.paused".into()),
            ..Default::default()
        };
        assert_eq!(s.events().list(&a, &exact, 100).await.unwrap().len(), 1);
        let of_sb1 = EventFilter {
            resource_id: Some("sb-1".into()),
            ..Default::default()
        };
        assert_eq!(s.events().list(&a, &of_sb1, 100).await.unwrap().len(), 2);
        assert_eq!(
            s.events()
                .list(&a, &EventFilter::default(), 2)
                .await
                .unwrap()
                .len(),
            2
        );
        // Pruning keeps what is newer than the line.
        assert_eq!(s.events().prune(0).await.unwrap(), 0);
        assert_eq!(s.events().prune(i64::MAX).await.unwrap(), 5, "{backend}");
    }
}

/// Two stores (two processes) write 120 events at once while a reader follows them by id, as
/// a stream does: the reader sees every event once, in id order, with no id it later finds
/// skipped — ids are handed out in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_resuming_after_an_id_misses_nothing_while_writers_race() {
    for (backend, s1, s2, _dir) in pairs().await {
        let ws = workspace(&s1, "w").await;
        let mut writers = Vec::new();
        for (n, s) in [s1.clone(), s2.clone(), s1.clone(), s2.clone()]
            .into_iter()
            .enumerate()
        {
            let ws = ws.clone();
            writers.push(tokio::spawn(async move {
                for i in 0..30 {
                    s.events()
                        .insert(&event(&ws, "sandbox.created", &format!("sb-{n}-{i}")))
                        .await
                        .unwrap();
                }
            }));
        }
        let reader = {
            let (s, ws) = (s2.clone(), ws.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut after = 0;
                while seen.len() < 120 {
                    let f = EventFilter {
                        after: Some(after),
                        ..Default::default()
                    };
                    for e in s.events().list(&ws, &f, 7).await.unwrap() {
                        after = e.id;
                        seen.push(e.id);
                    }
                }
                seen
            })
        };
        for w in writers {
            w.await.unwrap();
        }
        let seen = tokio::time::timeout(std::time::Duration::from_secs(30), reader)
            .await
            .expect("the reader saw 120 events")
            .unwrap();
        let all: Vec<i64> = s1
            .events()
            .list(&ws, &EventFilter::default(), 1000)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(all.len(), 120, "{backend}");
        assert_eq!(
            seen, all,
            "{backend}: the follower saw each event once, in order"
        );
    }
}

#[tokio::test]
async fn deliveries_go_one_at_a_time_per_resource_in_event_order() {
    for (backend, s, other, _dir) in pairs().await {
        let ws = workspace(&s, "w").await;
        let elsewhere = workspace(&s, "x").await;
        s.webhooks()
            .insert(&webhook(&ws, "wh_all", &["*"]))
            .await
            .unwrap();
        s.webhooks()
            .insert(&webhook(&ws, "wh_kills", &["sandbox.killed"]))
            .await
            .unwrap();
        s.webhooks()
            .insert(&webhook(&elsewhere, "wh_x", &["*"]))
            .await
            .unwrap();
        let (e1, q1) = s
            .events()
            .insert(&event(&ws, "sandbox.created", "sb-1"))
            .await
            .unwrap();
        let (e2, q2) = s
            .events()
            .insert(&event(&ws, "sandbox.killed", "sb-1"))
            .await
            .unwrap();
        let (e3, _) = s
            .events()
            .insert(&event(&ws, "sandbox.created", "sb-2"))
            .await
            .unwrap();
        assert_eq!(
            (q1, q2),
            (1, 2),
            "{backend}: matched by each webhook's filter"
        );
        assert_eq!(s.webhooks().pending().await.unwrap(), 4);

        // sb-1's first event, then sb-2's (sb-1's second waits for its first), then the other
        // webhook's: never two of one (webhook, resource) at once.
        let (d1, hook) = s.webhooks().claim("a", 60_000).await.unwrap().unwrap();
        assert_eq!(
            (d1.event_id, hook.id.as_str()),
            (e1.id, "wh_all"),
            "{backend}"
        );
        let mut claimed = Vec::new();
        while let Some((d, _)) = other.webhooks().claim("b", 60_000).await.unwrap() {
            claimed.push((d.webhook_id.clone(), d.event_id));
        }
        claimed.sort();
        assert_eq!(
            claimed,
            [("wh_all".to_owned(), e3.id), ("wh_kills".to_owned(), e2.id)],
            "{backend}: sb-1's kill waits for its create on wh_all only"
        );
        // Another deliverer cannot record on a lease it does not hold.
        let delivered = Attempt::Delivered { status: 200 };
        assert!(matches!(
            other.webhooks().record(&d1.id, "b", &delivered).await,
            Err(StoreError::NotFound)
        ));
        // A failed attempt with a retry: pending again, not claimable before its time.
        let retry = Attempt::Failed {
            status: Some(500),
            error: "the endpoint answered 500".into(),
            retry_at: Some(pandastack_store::now_ms() + 60_000),
        };
        s.webhooks().record(&d1.id, "a", &retry).await.unwrap();
        let d = s.webhooks().delivery("wh_all", &d1.id).await.unwrap();
        assert_eq!(
            (d.state, d.attempts, d.last_status),
            (DeliveryState::Pending, 1, Some(500))
        );
        assert!(
            s.webhooks().claim("a", 60_000).await.unwrap().is_none(),
            "{backend}: not due"
        );
        // Nothing can be claimed for a minute: the heads wait for their retry or are leased,
        // and sb-1's kill, due but behind its create, does not count.
        let next = s.webhooks().next_due().await.unwrap().unwrap();
        assert!(
            next > pandastack_store::now_ms() + 30_000,
            "{backend}: {next}"
        );
        // Given up: failed, and sb-1's next event on wh_all is free to go.
        let redo = sqlx_due_now(&s, &d1.id).await;
        assert!(redo, "{backend}");
        let (again, _) = s.webhooks().claim("a", 60_000).await.unwrap().unwrap();
        assert_eq!(again.id, d1.id);
        let give_up = Attempt::Failed {
            status: None,
            error: "connection refused".into(),
            retry_at: None,
        };
        s.webhooks().record(&d1.id, "a", &give_up).await.unwrap();
        let d = s.webhooks().delivery("wh_all", &d1.id).await.unwrap();
        assert_eq!(
            (d.state, d.attempts),
            (DeliveryState::Failed, 2),
            "{backend}"
        );
        let (next, _) = s.webhooks().claim("a", 60_000).await.unwrap().unwrap();
        assert_eq!((next.webhook_id.as_str(), next.event_id), ("wh_all", e2.id));
        s.webhooks()
            .record(&next.id, "a", &delivered)
            .await
            .unwrap();
        let d = s.webhooks().delivery("wh_all", &next.id).await.unwrap();
        assert_eq!(d.state, DeliveryState::Delivered);
        assert!(d.delivered_at.is_some());

        // Redeliver: pending again with a fresh round, history kept.
        let r = s.webhooks().redeliver("wh_all", &d1.id).await.unwrap();
        assert_eq!(
            (r.state, r.attempts, r.round_start),
            (DeliveryState::Pending, 2, 2)
        );
        assert!(matches!(
            s.webhooks().redeliver("wh_kills", &d1.id).await,
            Err(StoreError::NotFound)
        ));
        // History, newest event first; another workspace's webhook is not found.
        let h = s.webhooks().deliveries("wh_all", None, 10).await.unwrap();
        assert_eq!(
            h.iter().map(|d| d.event_id).collect::<Vec<_>>(),
            [e3.id, e2.id, e1.id]
        );
        let page = s
            .webhooks()
            .deliveries("wh_all", Some(e2.id), 10)
            .await
            .unwrap();
        assert_eq!(page.len(), 1);
        assert!(matches!(
            s.webhooks().get(&elsewhere, "wh_all").await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(s.webhooks().list(&ws, None, 10).await.unwrap().len(), 2);
        s.webhooks().delete(&ws, "wh_all").await.unwrap();
        assert!(s
            .webhooks()
            .deliveries("wh_all", None, 10)
            .await
            .unwrap()
            .is_empty());
        assert!(matches!(
            s.webhooks().delete(&ws, "wh_all").await,
            Err(StoreError::NotFound)
        ));
    }
}

/// Makes delivery `id` due now (what waiting for its retry time would do), as another
/// deliverer's redeliver-free path: through redeliver of a pending delivery, which only moves
/// its time.
async fn sqlx_due_now(s: &Store, id: &str) -> bool {
    let d = s.webhooks().redeliver("wh_all", id).await.unwrap();
    d.state == DeliveryState::Pending && d.round_start == 0
}
