//! Membership, leases and fencing, on both backends: a real SQLite file and a real PostgreSQL
//! server (`PANDASTACK_TEST_POSTGRES`, as in `store.rs`; `skip` runs SQLite only). Every test
//! gets a fresh database on each backend, reached through two store handles (two replicas;
//! `common`).

mod common;

use std::collections::BTreeSet;

use common::{stores, Case, LEASE, T0};
use pandastack_store::{
    HostCapacity, HostState, Joining, Reaped, SandboxRow, SandboxState, Store, StoreError,
};

fn joining(id: &str) -> Joining {
    Joining {
        id: id.into(),
        name: format!("box-{id}"),
        address: format!("{id}.cluster:7443"),
        capacity: HostCapacity {
            vcpus: 16,
            memory_mib: 65_536,
            disk_bytes: 1 << 40,
            free_slots: 100,
            creates_in_flight: 1,
            slots: 120,
        },
        compat_key: "qemu-7.2/linux-6.12/x86-64-v3".into(),
        templates: vec!["base".into(), "py_3".into()],
    }
}

/// The ids of the hosts a reap reaped.
fn ids(reaped: Vec<Reaped>) -> Vec<String> {
    reaped.into_iter().map(|r| r.host_id).collect()
}

/// A running sandbox on `host` in a new workspace.
async fn sandbox_on(store: &Store, host: &str) -> SandboxRow {
    let ws = store.keys().create_workspace("w", 100, 60).await.unwrap();
    let mut row = SandboxRow::service(&ws.id, host, "base", Default::default());
    row.state = SandboxState::Running;
    store.sandboxes().insert(&row).await.unwrap();
    row
}

/// The single-node server's in-process host keeps working as before: registered, no lease,
/// never reaped. Agents' hosts join with a new epoch each time; a drain survives a re-join.
#[tokio::test]
async fn join_gives_a_new_epoch_and_register_holds_no_lease() {
    for Case { backend, store, .. } in stores().await {
        let local = store.hosts().register("h-local", "box").await.unwrap();
        assert_eq!(
            (local.state, local.epoch, local.lease_until, local.address),
            (HostState::Ready, 1, 0, None),
            "{backend}"
        );
        let again = store.hosts().register("h-local", "box2").await.unwrap();
        assert_eq!(
            (again.created_at, again.name.as_str(), again.epoch),
            (local.created_at, "box2", 1),
            "{backend}"
        );

        let first = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        assert_eq!(first.state, HostState::Ready, "{backend}");
        assert_eq!(first.lease_until, T0 + LEASE, "{backend}");
        assert_eq!(first.capacity, joining("h1").capacity, "{backend}");
        assert_eq!(first.templates, ["base", "py_3"], "{backend}");
        assert_eq!(
            first.address.as_deref(),
            Some("h1.cluster:7443"),
            "{backend}"
        );
        let second = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 100)
            .await
            .unwrap();
        assert_eq!(second.epoch, first.epoch + 1, "{backend}");
        assert_eq!(second.created_at, first.created_at, "{backend}");

        // A drain survives the host restarting; undrain makes it ready.
        assert_eq!(
            store.hosts().drain("h1").await.unwrap().state,
            HostState::Draining,
            "{backend}"
        );
        let third = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 200)
            .await
            .unwrap();
        assert_eq!(
            (third.state, third.epoch),
            (HostState::Draining, second.epoch + 1),
            "{backend}"
        );
        assert_eq!(
            store.hosts().undrain("h1").await.unwrap().state,
            HostState::Ready,
            "{backend}"
        );
        assert!(matches!(
            store.hosts().drain("h-nope").await,
            Err(StoreError::NotFound)
        ));

        let listed: Vec<String> = store
            .hosts()
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|h| h.id)
            .collect();
        assert_eq!(listed, ["h-local", "h1"], "{backend}");
        // The in-process host is never reaped, however late.
        assert_eq!(
            ids(store.hosts().reap(i64::MAX).await.unwrap()),
            ["h1"],
            "{backend}"
        );
        assert_eq!(
            store.hosts().get("h-local").await.unwrap().state,
            HostState::Ready,
            "{backend}"
        );
    }
}

/// Only the current epoch renews, and a renewal never shortens a lease.
#[tokio::test]
async fn renew_with_a_stale_epoch_is_refused() {
    for Case { backend, store, .. } in stores().await {
        let old = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        let new = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        let r = store
            .hosts()
            .renew(
                &[("h1".into(), old.epoch), ("h-nope".into(), 1)],
                T0 + 2 * LEASE,
            )
            .await
            .unwrap();
        assert!(r.renewed.is_empty(), "{backend}: {r:?}");
        assert_eq!(r.fenced.len(), 2, "{backend}");
        assert_eq!(
            store.hosts().get("h1").await.unwrap().lease_until,
            T0 + LEASE,
            "{backend}: a refused renewal changed the lease"
        );

        let r = store
            .hosts()
            .renew(&[("h1".into(), new.epoch)], T0 + 2 * LEASE)
            .await
            .unwrap();
        assert_eq!(r.renewed, [("h1".to_owned(), new.epoch)], "{backend}");
        // An older renewal (another replica, behind) does not shorten it.
        store
            .hosts()
            .renew(&[("h1".into(), new.epoch)], T0 + LEASE)
            .await
            .unwrap();
        assert_eq!(
            store.hosts().get("h1").await.unwrap().lease_until,
            T0 + 2 * LEASE,
            "{backend}"
        );
    }
}

/// One reap marks exactly the hosts whose lease lapsed (draining ones too), bumps their
/// epochs, and the next reap finds nothing.
#[tokio::test]
async fn reap_marks_exactly_the_lapsed_hosts_once() {
    for Case { backend, store, .. } in stores().await {
        let a = store
            .hosts()
            .join(&joining("h-a"), 1_000, T0)
            .await
            .unwrap();
        let b = store
            .hosts()
            .join(&joining("h-b"), 5_000, T0)
            .await
            .unwrap();
        let c = store
            .hosts()
            .join(&joining("h-c"), 1_000, T0)
            .await
            .unwrap();
        store.hosts().drain("h-c").await.unwrap();
        store.hosts().register("h-local", "box").await.unwrap();

        // A lease that ends at `now` has not lapsed yet.
        assert!(ids(store.hosts().reap(T0 + 1_000).await.unwrap()).is_empty());
        assert_eq!(
            ids(store.hosts().reap(T0 + 2_000).await.unwrap()),
            ["h-a", "h-c"],
            "{backend}"
        );
        for (h, before) in [("h-a", &a), ("h-c", &c)] {
            let now = store.hosts().get(h).await.unwrap();
            assert_eq!(
                (now.state, now.epoch),
                (HostState::Dead, before.epoch + 1),
                "{backend} {h}"
            );
        }
        assert_eq!(
            store.hosts().get("h-b").await.unwrap(),
            b,
            "{backend}: a live lease was touched"
        );
        assert!(
            ids(store.hosts().reap(T0 + 2_000).await.unwrap()).is_empty(),
            "{backend}: reaped twice"
        );
        assert_eq!(ids(store.hosts().reap(T0 + 6_000).await.unwrap()), ["h-b"]);
        assert_eq!(
            store.hosts().get("h-a").await.unwrap().epoch,
            a.epoch + 1,
            "{backend}: a dead host's epoch moved again"
        );
        // Drain and undrain leave a dead host dead.
        assert!(matches!(
            store.hosts().undrain("h-a").await,
            Err(StoreError::HostDead { host }) if host == "h-a"
        ));
    }
}

/// Reapers in many replicas race on one store: each lapsed host is reaped by exactly one of
/// them, and its epoch moves once.
#[tokio::test]
async fn racing_reapers_reap_each_host_exactly_once() {
    for Case {
        backend,
        store,
        other,
        ..
    } in stores().await
    {
        let mut epochs = std::collections::BTreeMap::new();
        for i in 0..40 {
            let id = format!("h-{i:02}");
            // Half lapse before the reap, half do not.
            let lease = if i % 2 == 0 { 1_000 } else { 60_000 };
            let h = store.hosts().join(&joining(&id), lease, T0).await.unwrap();
            epochs.insert(id, h.epoch);
        }
        let reapers: Vec<_> = (0..8)
            .map(|i| {
                let s = if i % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                tokio::spawn(async move { s.hosts().reap(T0 + 10_000).await })
            })
            .collect();
        let mut all = Vec::new();
        for r in reapers {
            all.extend(ids(r.await.unwrap().unwrap()));
        }
        let unique: BTreeSet<&String> = all.iter().collect();
        assert_eq!(all.len(), 20, "{backend}: a host was reaped twice: {all:?}");
        assert_eq!(unique.len(), 20, "{backend}");
        for h in store.hosts().list().await.unwrap() {
            let lapsed = unique.contains(&h.id);
            assert_eq!(
                h.id[2..].parse::<u32>().unwrap() % 2 == 0,
                lapsed,
                "{backend} {}",
                h.id
            );
            let expect = if lapsed {
                (HostState::Dead, epochs[&h.id] + 1)
            } else {
                (HostState::Ready, epochs[&h.id])
            };
            assert_eq!((h.state, h.epoch), expect, "{backend} {}", h.id);
        }
    }
}

/// A sandbox write caused by an agent is applied only with its host's current epoch, only to a
/// sandbox still on that host, and never once the host is dead; a refusal changes nothing.
#[tokio::test]
async fn a_fenced_sandbox_write_with_a_stale_epoch_changes_nothing() {
    for Case { backend, store, .. } in stores().await {
        let e1 = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        store.hosts().join(&joining("h2"), LEASE, T0).await.unwrap();
        let sb = sandbox_on(&store, "h1").await;
        let elsewhere = sandbox_on(&store, "h2").await;
        let state = |id: String| {
            let store = store.clone();
            async move { store.sandboxes().by_id(&id).await.unwrap().state }
        };

        store
            .sandboxes()
            .set_state_fenced(&sb.id, "h1", e1.epoch, SandboxState::Paused)
            .await
            .unwrap();
        assert_eq!(
            state(sb.id.clone()).await,
            SandboxState::Paused,
            "{backend}"
        );

        // The host restarted: the old process's epoch is stale.
        let e2 = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 1)
            .await
            .unwrap();
        match store
            .sandboxes()
            .set_state_fenced(&sb.id, "h1", e1.epoch, SandboxState::Failed)
            .await
        {
            Err(StoreError::Fenced { host, epoch }) => {
                assert_eq!((host.as_str(), epoch), ("h1", e1.epoch), "{backend}")
            }
            r => panic!("{backend}: {r:?}"),
        }
        assert_eq!(
            state(sb.id.clone()).await,
            SandboxState::Paused,
            "{backend}"
        );

        // A sandbox of another host is not this agent's to write.
        assert!(matches!(
            store
                .sandboxes()
                .set_state_fenced(&elsewhere.id, "h1", e2.epoch, SandboxState::Failed)
                .await,
            Err(StoreError::NotFound)
        ));
        assert_eq!(
            state(elsewhere.id.clone()).await,
            SandboxState::Running,
            "{backend}"
        );

        // Once reaped, not even the epoch the reap gave it opens the fence.
        store.hosts().reap(T0 + 2 * LEASE).await.unwrap();
        let dead = store.hosts().get("h1").await.unwrap();
        for epoch in [e2.epoch, dead.epoch] {
            assert!(
                matches!(
                    store
                        .sandboxes()
                        .set_state_fenced(&sb.id, "h1", epoch, SandboxState::Running)
                        .await,
                    Err(StoreError::Fenced { .. })
                ),
                "{backend}: epoch {epoch}"
            );
        }
        // The reap made it lost; the refused writes left it so.
        assert_eq!(state(sb.id.clone()).await, SandboxState::Lost, "{backend}");
        // And wrote its event in the same transaction (`sandbox.lost`, with the host).
        let events = store
            .events()
            .list(&sb.workspace_id, &Default::default(), 10)
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{backend}: {events:?}");
        assert_eq!(
            (
                events[0].event_type.as_str(),
                events[0].resource_id.as_str()
            ),
            ("sandbox.lost", sb.id.as_str())
        );
        assert_eq!(events[0].data["host"], "h1");
        assert_eq!(events[0].data["from"], "paused", "the state it was lost in");
    }
}

/// An agent whose host was reaped is fenced: its renewals fail until it joins again, and the
/// new epoch is the only one that works after.
#[tokio::test]
async fn renew_after_reap_is_fenced_until_the_host_joins_again() {
    for Case { backend, store, .. } in stores().await {
        let before = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        let sb = sandbox_on(&store, "h1").await;
        assert_eq!(
            ids(store.hosts().reap(T0 + LEASE + 1).await.unwrap()),
            ["h1"]
        );
        let dead = store.hosts().get("h1").await.unwrap();
        for epoch in [before.epoch, dead.epoch] {
            let r = store
                .hosts()
                .renew(&[("h1".into(), epoch)], T0 + 3 * LEASE)
                .await
                .unwrap();
            assert!(r.renewed.is_empty(), "{backend}: epoch {epoch}: {r:?}");
        }
        assert_eq!(
            store.hosts().get("h1").await.unwrap().state,
            HostState::Dead,
            "{backend}"
        );

        let back = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 2 * LEASE)
            .await
            .unwrap();
        assert_eq!(back.state, HostState::Ready, "{backend}");
        assert!(back.epoch > dead.epoch, "{backend}");
        let r = store
            .hosts()
            .renew(&[("h1".into(), back.epoch)], T0 + 3 * LEASE)
            .await
            .unwrap();
        assert_eq!(r.renewed.len(), 1, "{backend}");
        assert!(matches!(
            store
                .sandboxes()
                .set_state_fenced(&sb.id, "h1", before.epoch, SandboxState::Failed)
                .await,
            Err(StoreError::Fenced { .. })
        ));
        store
            .sandboxes()
            .set_state_fenced(&sb.id, "h1", back.epoch, SandboxState::Paused)
            .await
            .unwrap();
    }
}

/// Forget removes only a dead host with nothing left on it, and says why otherwise. A host
/// forgotten and joining again never repeats an old epoch.
#[tokio::test]
async fn forget_refuses_a_live_host_or_one_with_sandboxes() {
    for Case { backend, store, .. } in stores().await {
        let first = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        match store.hosts().forget("h1").await {
            Err(StoreError::HostNotDead { host, state }) => {
                assert_eq!(
                    (host.as_str(), state),
                    ("h1", HostState::Ready),
                    "{backend}"
                )
            }
            r => panic!("{backend}: {r:?}"),
        }
        let sb = sandbox_on(&store, "h1").await;
        store.hosts().reap(T0 + LEASE + 1).await.unwrap();
        match store.hosts().forget("h1").await {
            Err(StoreError::HostInUse { host, what, count }) => {
                assert_eq!(
                    (host.as_str(), what, count),
                    ("h1", "sandboxes", 1),
                    "{backend}"
                )
            }
            r => panic!("{backend}: {r:?}"),
        }
        assert!(store.hosts().get("h1").await.is_ok(), "{backend}");

        store.sandboxes().delete(&sb.id).await.unwrap();
        store.hosts().forget("h1").await.unwrap();
        assert!(matches!(
            store.hosts().get("h1").await,
            Err(StoreError::NotFound)
        ));
        assert!(matches!(
            store.hosts().forget("h1").await,
            Err(StoreError::NotFound)
        ));

        let again = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 10 * LEASE)
            .await
            .unwrap();
        assert!(again.epoch > first.epoch + 1, "{backend}: {again:?}");
    }
}

/// A replica renews every agent streaming to it in one call; stale epochs among them are
/// returned as fenced and the others renewed (300 hosts: more than one statement's worth).
#[tokio::test]
async fn three_hundred_hosts_renewed_in_one_call() {
    for Case { backend, store, .. } in stores().await {
        let mut pairs = Vec::new();
        for i in 0..300 {
            let id = format!("h-{i:03}");
            let h = store.hosts().join(&joining(&id), LEASE, T0).await.unwrap();
            // Every hundredth agent is an old process of its host.
            let epoch = if i % 100 == 7 { h.epoch - 1 } else { h.epoch };
            pairs.push((id, epoch));
        }
        let r = store.hosts().renew(&pairs, T0 + 5 * LEASE).await.unwrap();
        assert_eq!(r.renewed.len(), 297, "{backend}");
        let fenced: Vec<&str> = r.fenced.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(fenced, ["h-007", "h-107", "h-207"], "{backend}");
        // Only the fenced three lapse.
        assert_eq!(
            ids(store.hosts().reap(T0 + 2 * LEASE).await.unwrap()),
            ["h-007", "h-107", "h-207"],
            "{backend}"
        );
    }
}

/// A sandbox in state `state` on `host`, in workspace `ws`.
async fn sandbox_in(store: &Store, ws: &str, host: &str, state: SandboxState) -> SandboxRow {
    let mut row = SandboxRow::service(ws, host, "base", Default::default());
    row.state = state;
    row.memory_mib = 512;
    store.sandboxes().insert(&row).await.unwrap();
    row
}

/// A reap marks `lost` exactly the reaped host's sandboxes that held a VM, says how many per
/// host, and touches no other host's rows (nor, reaping nothing, any row at all).
#[tokio::test]
async fn reap_marks_the_dead_hosts_running_sandboxes_lost() {
    use SandboxState::*;
    for Case { backend, store, .. } in stores().await {
        store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        store.hosts().join(&joining("h2"), LEASE, T0).await.unwrap();
        store
            .hosts()
            .join(&joining("h3"), 4 * LEASE, T0)
            .await
            .unwrap();
        store.hosts().register("h-local", "box").await.unwrap();
        let ws = store.keys().create_workspace("w", 100, 60).await.unwrap();
        let states = [Starting, Running, Paused, Hibernated, Stopped, Failed];
        let mut rows = Vec::new();
        for host in ["h1", "h2", "h3", "h-local"] {
            for state in states {
                rows.push(sandbox_in(&store, &ws.id, host, state).await);
            }
        }
        let state_of = |id: String| {
            let store = store.clone();
            async move { store.sandboxes().by_id(&id).await.unwrap().state }
        };

        let reaped = store.hosts().reap(T0 + LEASE + 1).await.unwrap();
        assert_eq!(
            reaped,
            [
                Reaped {
                    host_id: "h1".into(),
                    lost: 3
                },
                Reaped {
                    host_id: "h2".into(),
                    lost: 3
                }
            ],
            "{backend}"
        );
        for row in &rows {
            let now = state_of(row.id.clone()).await;
            let dead = row.host_id == "h1" || row.host_id == "h2";
            let expect = if dead && matches!(row.state, Starting | Running | Paused) {
                Lost
            } else {
                row.state
            };
            assert_eq!(
                now, expect,
                "{backend}: {} was {:?}",
                row.host_id, row.state
            );
        }

        // Nothing left to reap: nothing changes (a lost sandbox stays lost, not counted twice).
        assert!(
            store.hosts().reap(T0 + LEASE + 2).await.unwrap().is_empty(),
            "{backend}"
        );
        // h3 lapses later; h1's rows are not touched again.
        let later = store.hosts().reap(T0 + 5 * LEASE).await.unwrap();
        assert_eq!(
            later,
            [Reaped {
                host_id: "h3".into(),
                lost: 3
            }],
            "{backend}"
        );
        let lost = rows.iter().filter(|r| r.host_id != "h-local");
        for row in lost {
            if matches!(row.state, Starting | Running | Paused) {
                assert_eq!(state_of(row.id.clone()).await, Lost, "{backend}");
            }
        }
    }
}

/// Racing reapers mark each dead host's sandboxes lost once: the counts they return add up
/// to the sandboxes there were.
#[tokio::test]
async fn racing_reapers_count_each_lost_sandbox_once() {
    for Case {
        backend,
        store,
        other,
        ..
    } in stores().await
    {
        let ws = store.keys().create_workspace("w", 1_000, 60).await.unwrap();
        for i in 0..10 {
            let id = format!("h-{i}");
            store.hosts().join(&joining(&id), 1_000, T0).await.unwrap();
            for _ in 0..=i {
                sandbox_in(&store, &ws.id, &id, SandboxState::Running).await;
            }
        }
        let reapers: Vec<_> = (0..6)
            .map(|i| {
                let s = if i % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                tokio::spawn(async move { s.hosts().reap(T0 + 5_000).await })
            })
            .collect();
        let mut all = Vec::new();
        for r in reapers {
            all.extend(r.await.unwrap().unwrap());
        }
        all.sort_by(|a, b| a.host_id.cmp(&b.host_id));
        let expect: Vec<Reaped> = (0..10)
            .map(|i| Reaped {
                host_id: format!("h-{i}"),
                lost: i + 1,
            })
            .collect();
        assert_eq!(all, expect, "{backend}");
    }
}

/// A report replaces the host's capacity and templates only under its current epoch: an old
/// process of the host (it joined again since), a reaped host and an unknown one are fenced,
/// and a refused report writes nothing.
#[tokio::test]
async fn report_is_fenced_after_a_rejoin() {
    for Case { backend, store, .. } in stores().await {
        let first = store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        let now = HostCapacity {
            vcpus: 8,
            memory_mib: 32_768,
            disk_bytes: 1 << 39,
            free_slots: 7,
            creates_in_flight: 2,
            slots: 64,
        };
        store
            .hosts()
            .report("h1", first.epoch, &now, &["node".into(), "base".into()])
            .await
            .unwrap();
        let row = store.hosts().get("h1").await.unwrap();
        assert_eq!(
            (row.capacity, row.templates.clone()),
            (now, vec!["base".to_owned(), "node".to_owned()]),
            "{backend}"
        );
        assert_eq!(
            (row.epoch, row.lease_until),
            (first.epoch, first.lease_until),
            "{backend}: a report moved the epoch or the lease"
        );

        let second = store
            .hosts()
            .join(&joining("h1"), LEASE, T0 + 1)
            .await
            .unwrap();
        let stale = HostCapacity { vcpus: 1, ..now };
        match store
            .hosts()
            .report("h1", first.epoch, &stale, &["stale".into()])
            .await
        {
            Err(StoreError::Fenced { host, epoch }) => {
                assert_eq!((host.as_str(), epoch), ("h1", first.epoch), "{backend}")
            }
            r => panic!("{backend}: {r:?}"),
        }
        let row = store.hosts().get("h1").await.unwrap();
        assert_eq!(
            (row.capacity, row.templates.clone()),
            (
                joining("h1").capacity,
                vec!["base".to_owned(), "py_3".to_owned()]
            ),
            "{backend}: a fenced report wrote"
        );
        store
            .hosts()
            .report("h1", second.epoch, &now, &[])
            .await
            .unwrap();
        assert!(
            store.hosts().get("h1").await.unwrap().templates.is_empty(),
            "{backend}"
        );

        store.hosts().reap(T0 + 2 * LEASE).await.unwrap();
        let dead = store.hosts().get("h1").await.unwrap();
        for epoch in [second.epoch, dead.epoch] {
            assert!(
                matches!(
                    store.hosts().report("h1", epoch, &now, &[]).await,
                    Err(StoreError::Fenced { .. })
                ),
                "{backend}: epoch {epoch}"
            );
        }
        assert!(matches!(
            store.hosts().report("h-nope", 1, &now, &[]).await,
            Err(StoreError::Fenced { .. })
        ));
    }
}

/// `owner_of` names the host of a sandbox, a snapshot, a volume and a volume snapshot by id
/// alone (any workspace), and nothing for an unknown id.
#[tokio::test]
async fn owner_of_names_the_host_of_each_kind_of_row() {
    use pandastack_store::{SnapshotRow, VolumeRow, VolumeSnapshotRow, VolumeState};
    for Case { backend, store, .. } in stores().await {
        let ws = store.keys().create_workspace("w", 100, 60).await.unwrap();
        let sb = sandbox_in(&store, &ws.id, "h1", SandboxState::Running).await;
        let snap = SnapshotRow {
            id: "snap-1".into(),
            workspace_id: ws.id.clone(),
            host_id: "h2".into(),
            sandbox_id: sb.id.clone(),
            template: "base".into(),
            size_bytes: 1,
            created_at: T0,
            auto_delete: false,
            durable_at: None,
        };
        store.snapshots().insert(&snap).await.unwrap();
        let vol = VolumeRow {
            id: "vol-1".into(),
            workspace_id: ws.id.clone(),
            name: "data".into(),
            host_id: "h3".into(),
            size_gb: 1,
            state: VolumeState::Ready,
            source: None,
            created_at: T0,
        };
        store.volumes().insert_within_quota(&vol).await.unwrap();
        let vsnap = VolumeSnapshotRow {
            id: "vs-1".into(),
            workspace_id: ws.id.clone(),
            volume_id: vol.id.clone(),
            host_id: "h4".into(),
            size_gb: 1,
            frozen: false,
            internal: false,
            created_at: T0,
        };
        store.volumes().insert_snapshot(&vsnap).await.unwrap();
        for (id, host) in [
            (sb.id.as_str(), Some("h1")),
            ("snap-1", Some("h2")),
            ("vol-1", Some("h3")),
            ("vs-1", Some("h4")),
            ("sb-nope", None),
        ] {
            assert_eq!(
                store.hosts().owner_of(id).await.unwrap().as_deref(),
                host,
                "{backend}: {id}"
            );
        }
    }
}

/// A hibernated sandbox's durable copy (#39): recorded only while the sandbox is on its host,
/// hibernated and untouched since it hibernated; cleared by any change of its state (not by
/// the same state written again); and a re-home moves it only off a dead host, only while the
/// row still names that copy, and clears it. A snapshot's `durable_at` is set and read back.
#[tokio::test]
async fn durable_copies_are_fenced_and_a_rehome_needs_a_dead_host() {
    use SandboxState::*;
    for Case { backend, store, .. } in stores().await {
        store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        store
            .hosts()
            .join(&joining("h2"), 4 * LEASE, T0)
            .await
            .unwrap();
        let ws = store.keys().create_workspace("w", 100, 60).await.unwrap();
        let rows = store.sandboxes();
        let sb = sandbox_in(&store, &ws.id, "h1", Running).await;
        let id = sb.id.as_str();
        // Running: nothing to record.
        assert!(!rows.set_durable(id, "h1", T0, "t0", T0).await.unwrap());
        rows.set_state_touched(id, Hibernated, T0 + 5)
            .await
            .unwrap();
        // Another host, or a hibernation other than this one: refused.
        assert!(!rows.set_durable(id, "h2", T0 + 5, "t1", T0).await.unwrap());
        assert!(!rows.set_durable(id, "h1", T0 + 4, "t1", T0).await.unwrap());
        assert_eq!(rows.durable_copy(id).await.unwrap(), None, "{backend}");
        assert!(rows
            .set_durable(id, "h1", T0 + 5, "t1", T0 + 9)
            .await
            .unwrap());
        let copy = pandastack_store::DurableCopy {
            tag: "t1".into(),
            at_ms: T0 + 9,
        };
        assert_eq!(rows.durable_copy(id).await.unwrap(), Some(copy.clone()));
        // The same state written again keeps it; a wake clears it.
        rows.set_state(id, Hibernated).await.unwrap();
        assert_eq!(rows.durable_copy(id).await.unwrap(), Some(copy));
        rows.set_state_touched(id, Running, T0 + 20).await.unwrap();
        assert_eq!(rows.durable_copy(id).await.unwrap(), None, "{backend}");

        // Hibernated again with a copy: no re-home while h1 lives, or for another tag.
        rows.set_state_touched(id, Hibernated, T0 + 30)
            .await
            .unwrap();
        assert!(rows
            .set_durable(id, "h1", T0 + 30, "t2", T0 + 31)
            .await
            .unwrap());
        assert!(!rows.rehome_hibernated(id, "h1", "h2", "t2").await.unwrap());
        assert_eq!(
            store.hosts().reap(T0 + LEASE + 1).await.unwrap(),
            [Reaped {
                host_id: "h1".into(),
                lost: 0
            }],
            "{backend}"
        );
        assert!(!rows.rehome_hibernated(id, "h1", "h2", "t1").await.unwrap());
        assert!(rows.rehome_hibernated(id, "h1", "h2", "t2").await.unwrap());
        let now = rows.by_id(id).await.unwrap();
        assert_eq!((now.host_id.as_str(), now.state), ("h2", Hibernated));
        assert_eq!(rows.durable_copy(id).await.unwrap(), None, "{backend}");
        // Once only: a second replica's re-home of the same copy changes nothing.
        assert!(!rows.rehome_hibernated(id, "h1", "h2", "t2").await.unwrap());

        // A snapshot's durability.
        let snap = pandastack_store::SnapshotRow {
            id: "snap-durable".into(),
            workspace_id: ws.id.clone(),
            host_id: "h2".into(),
            sandbox_id: id.to_owned(),
            template: "base".into(),
            size_bytes: 1,
            created_at: T0,
            auto_delete: false,
            durable_at: None,
        };
        store.snapshots().insert(&snap).await.unwrap();
        assert_eq!(store.snapshots().durable_at(&snap.id).await.unwrap(), None);
        assert!(store
            .snapshots()
            .set_durable(&snap.id, T0 + 40)
            .await
            .unwrap());
        assert_eq!(
            store.snapshots().durable_at(&snap.id).await.unwrap(),
            Some(T0 + 40),
            "{backend}"
        );
        // The row says so too (the API shows it).
        let read = store
            .snapshots()
            .get(&snap.workspace_id, &snap.id)
            .await
            .unwrap();
        assert_eq!(read.durable_at, Some(T0 + 40), "{backend}");
        assert!(!store
            .snapshots()
            .set_durable("snap-none", T0)
            .await
            .unwrap());
        assert!(matches!(
            store.snapshots().durable_at("snap-none").await,
            Err(StoreError::NotFound)
        ));
    }
}

/// A restore takes only a lost sandbox created with `on_host_loss: "restore"` whose host is
/// dead, once, and can give it back; the reap keeps what it was, and a checkpoint names only a
/// snapshot that exists.
#[tokio::test]
async fn a_lost_sandbox_is_taken_for_a_restore_once_and_only_off_a_dead_host() {
    use SandboxState::*;
    for Case { backend, store, .. } in stores().await {
        store.hosts().join(&joining("h1"), LEASE, T0).await.unwrap();
        store
            .hosts()
            .join(&joining("h2"), 4 * LEASE, T0)
            .await
            .unwrap();
        let ws = store.keys().create_workspace("w", 100, 60).await.unwrap();
        let rows = store.sandboxes();
        let mut restorable = Vec::new();
        for state in [Running, Paused] {
            let mut row = SandboxRow::service(&ws.id, "h1", "base", Default::default());
            row.state = state;
            row.on_host_loss = pandastack_store::OnHostLoss::Restore;
            rows.insert(&row).await.unwrap();
            restorable.push(row);
        }
        // Created without it, and one on the host that lives: never taken.
        let kept = sandbox_in(&store, &ws.id, "h1", Running).await;
        let mut elsewhere = SandboxRow::service(&ws.id, "h2", "base", Default::default());
        elsewhere.on_host_loss = pandastack_store::OnHostLoss::Restore;
        rows.insert(&elsewhere).await.unwrap();
        let id = restorable[0].id.as_str();
        assert_eq!(
            rows.by_id(id).await.unwrap().on_host_loss,
            pandastack_store::OnHostLoss::Restore,
            "{backend}"
        );

        // The checkpoint: only a snapshot with a row.
        assert!(!rows.set_checkpoint(id, "snap-none").await.unwrap());
        let snap = pandastack_store::SnapshotRow {
            id: "snap-cp".into(),
            workspace_id: ws.id.clone(),
            host_id: "h1".into(),
            sandbox_id: id.to_owned(),
            template: "base".into(),
            size_bytes: 1,
            created_at: T0,
            auto_delete: false,
            durable_at: None,
        };
        store.snapshots().insert(&snap).await.unwrap();
        assert!(rows.set_checkpoint(id, "snap-cp").await.unwrap());

        // Alive: nothing to restore, nothing taken.
        assert!(rows.to_restore(10).await.unwrap().is_empty(), "{backend}");
        assert!(!rows.take_lost(id, "h1", "h2").await.unwrap());
        store.hosts().reap(T0 + LEASE + 1).await.unwrap();
        let due = rows.to_restore(10).await.unwrap();
        let due: Vec<(&str, Option<&str>)> = due
            .iter()
            .map(|(r, c)| (r.id.as_str(), c.as_deref()))
            .collect();
        let mut want = vec![(id, Some("snap-cp")), (restorable[1].id.as_str(), None)];
        want.sort();
        let mut got = due.clone();
        got.sort();
        assert_eq!(got, want, "{backend}");
        // The reap kept what each was.
        assert_eq!(rows.lost_from(id).await.unwrap(), Some(Running));
        assert_eq!(
            rows.lost_from(&restorable[1].id).await.unwrap(),
            Some(Paused)
        );
        assert_eq!(rows.lost_from(&kept.id).await.unwrap(), Some(Running));

        // Taken once; given back; taken again.
        assert!(!rows.take_lost(id, "h2", "h1").await.unwrap());
        assert!(rows.take_lost(id, "h1", "h2").await.unwrap());
        assert!(!rows.take_lost(id, "h1", "h2").await.unwrap());
        let taken = rows.by_id(id).await.unwrap();
        assert_eq!((taken.host_id.as_str(), taken.state), ("h2", Starting));
        assert_eq!(rows.to_restore(10).await.unwrap().len(), 1, "{backend}");
        assert!(rows.give_back_lost(id, "h1", "h2").await.unwrap());
        assert!(!rows.give_back_lost(id, "h1", "h2").await.unwrap());
        let back = rows.by_id(id).await.unwrap();
        assert_eq!((back.host_id.as_str(), back.state), ("h1", Lost));
        assert!(rows.take_lost(id, "h1", "h2").await.unwrap());
        rows.set_state(id, Running).await.unwrap();
        assert!(!rows.give_back_lost(id, "h1", "h2").await.unwrap());

        // A deleted snapshot is no sandbox's checkpoint any more.
        rows.clear_checkpoint("snap-cp").await.unwrap();
        assert!(rows.set_checkpoint(id, "snap-cp").await.unwrap());
        rows.clear_checkpoint("snap-cp").await.unwrap();
        store.snapshots().delete(&ws.id, "snap-cp").await.unwrap();
        assert!(!rows.set_checkpoint(id, "snap-cp").await.unwrap());
    }
}
