//! Placement on both backends (`common`: a real SQLite file and a real PostgreSQL server):
//! which host `SandboxRepo::insert_placed` chooses, which it never chooses, why it refuses, and
//! that creates racing through two store handles never put a host over its memory or slots.

mod common;

use std::collections::BTreeMap;

use common::{stores, Case, LEASE, T0};
use pandastack_store::{
    Demand, HostCapacity, Joining, MountClaim, PlaceReason, Placement, SandboxRow, SandboxState,
    Store, StoreError, VolumeRow, VolumeState,
};

/// A moment inside every lease the tests give.
const NOW: i64 = T0 + 1_000;
const KEY: &str = "qemu-9.2/linux-6.12/x86-64-v3";

/// Host `id` joins with `memory_mib` of memory, `slots` slots and `templates`.
async fn host(store: &Store, id: &str, memory_mib: i64, slots: i64, templates: &[&str]) {
    let joining = Joining {
        id: id.into(),
        name: id.into(),
        address: format!("{id}:7443"),
        capacity: HostCapacity {
            vcpus: 16,
            memory_mib,
            disk_bytes: 1 << 40,
            free_slots: slots,
            creates_in_flight: 0,
            slots,
        },
        compat_key: KEY.into(),
        templates: templates.iter().map(|t| t.to_string()).collect(),
    };
    store.hosts().join(&joining, LEASE, T0).await.unwrap();
}

fn demand(memory_mib: i64, template: Option<&str>) -> Demand<'_> {
    Demand {
        memory_mib,
        template,
        compat_key: None,
        host: None,
        exclude: &[],
        now_ms: NOW,
    }
}

/// A new sandbox row of workspace `ws` (placement gives it its host).
fn row(ws: &str) -> SandboxRow {
    SandboxRow::service(ws, "", "base", BTreeMap::new())
}

/// Places one sandbox for `d` in workspace `ws`; the row it wrote must say where it went.
async fn place(store: &Store, ws: &str, d: &Demand<'_>) -> Result<Placement, StoreError> {
    let mut r = row(ws);
    let (placed, claimed) = store.sandboxes().insert_placed(&mut r, &[], d).await?;
    assert!(claimed.is_empty());
    let stored = store.sandboxes().by_id(&r.id).await.unwrap();
    assert_eq!(
        (stored.host_id.as_str(), stored.memory_mib),
        (placed.host_id.as_str(), d.memory_mib)
    );
    Ok(placed)
}

/// A sandbox of `memory_mib` in `state` on `host`.
async fn sandbox_on(store: &Store, ws: &str, host: &str, memory_mib: i64, state: SandboxState) {
    let mut r = SandboxRow::service(ws, host, "base", BTreeMap::new());
    r.memory_mib = memory_mib;
    r.state = state;
    store.sandboxes().insert(&r).await.unwrap();
}

async fn workspace(store: &Store) -> String {
    store
        .keys()
        .create_workspace("w", 10_000, 10_000)
        .await
        .unwrap()
        .id
}

/// The host holding the template wins while it has room, even over a tighter fit; without one
/// (or with none named, or a name that differs only in case) the host left fullest wins, ties
/// by id. Only sandboxes that hold a VM count against a host, creates in flight among them.
#[tokio::test]
async fn prefers_the_host_holding_the_template_then_best_fit() {
    for Case { backend, store, .. } in stores().await {
        let ws = workspace(&store).await;
        host(&store, "h-a", 8192, 0, &["base"]).await;
        host(&store, "h-b", 4096, 0, &["py_3"]).await;
        host(&store, "h-c", 16384, 0, &[]).await;

        let p = place(&store, &ws, &demand(1024, Some("base")))
            .await
            .unwrap();
        assert_eq!(
            p,
            Placement {
                host_id: "h-a".into(),
                reason: PlaceReason::TemplateLocal,
                free_memory_mib: 7168,
                candidates: 3,
            },
            "{backend}"
        );
        for (template, why) in [
            (None, "no template named"),
            (Some("node"), "no host holds it"),
            (Some("Base"), "names differ in case"),
            (Some("pyx3"), "`_` is no wildcard"),
        ] {
            let p = place(&store, &ws, &demand(1024, template)).await.unwrap();
            assert_eq!(
                (p.host_id.as_str(), p.reason),
                ("h-b", PlaceReason::BestFit),
                "{backend}: {why}"
            );
        }
        // h-b: 4 × 1024 placed; full for one more of 1024 even though it holds py_3.
        let p = place(&store, &ws, &demand(1024, Some("py_3"))).await;
        assert!(
            matches!(&p, Ok(p) if p.host_id == "h-a" && p.reason == PlaceReason::BestFit),
            "{backend}: {p:?}"
        );

        // A host whose sandboxes hold no VM has all its memory: h-d's stopped, hibernated,
        // failed and lost ones count for nothing, its paused and starting ones do.
        host(&store, "h-d", 3072, 0, &["node"]).await;
        for state in [
            SandboxState::Stopped,
            SandboxState::Hibernated,
            SandboxState::Failed,
            SandboxState::Lost,
        ] {
            sandbox_on(&store, &ws, "h-d", 3072, state).await;
        }
        let p = place(&store, &ws, &demand(1024, Some("node")))
            .await
            .unwrap();
        assert_eq!(
            (p.host_id.as_str(), p.reason, p.free_memory_mib),
            ("h-d", PlaceReason::TemplateLocal, 2048),
            "{backend}"
        );
        sandbox_on(&store, &ws, "h-d", 1024, SandboxState::Paused).await;
        let p = place(&store, &ws, &demand(1024, Some("node")))
            .await
            .unwrap();
        assert_eq!(
            (p.host_id.as_str(), p.free_memory_mib),
            ("h-d", 0),
            "{backend}"
        );
        let p = place(&store, &ws, &demand(1024, Some("node")))
            .await
            .unwrap();
        assert_ne!(p.host_id, "h-d", "{backend}: h-d is full");
    }
}

/// Draining, dead, lapsed, wrong-key, excluded, silent and in-process hosts are never chosen,
/// however much room they have; refusing them all says why, host by host.
#[tokio::test]
async fn hosts_that_cannot_take_work_are_never_chosen() {
    for Case { backend, store, .. } in stores().await {
        let ws = workspace(&store).await;
        for id in ["h-draining", "h-dead", "h-lapsed", "h-refused"] {
            host(&store, id, 1 << 20, 0, &["base"]).await;
        }
        store.hosts().drain("h-draining").await.unwrap();
        // h-dead's lease ends first (T0 + 500) and is reaped; h-lapsed's ends before NOW.
        let mut dead = Joining {
            id: "h-dead".into(),
            name: "h-dead".into(),
            address: "h-dead:7443".into(),
            capacity: HostCapacity {
                memory_mib: 1 << 20,
                ..HostCapacity::default()
            },
            compat_key: KEY.into(),
            templates: vec!["base".into()],
        };
        store.hosts().join(&dead, 500, T0).await.unwrap();
        assert_eq!(store.hosts().reap(T0 + 501).await.unwrap().len(), 1);
        dead.id = "h-lapsed".into();
        store.hosts().join(&dead, 900, T0).await.unwrap();
        dead.id = "h-other-key".into();
        dead.compat_key = "qemu-8.0/linux-6.1/x86-64-v2".into();
        store.hosts().join(&dead, LEASE, T0).await.unwrap();
        host(&store, "h-silent", 0, 0, &["base"]).await;
        store.hosts().register("h-local", "box").await.unwrap();
        host(&store, "h-small", 2048, 0, &[]).await;

        let refused = vec!["h-refused".to_owned()];
        let d = Demand {
            compat_key: Some(KEY),
            exclude: &refused,
            ..demand(1024, Some("base"))
        };
        for _ in 0..2 {
            let p = place(&store, &ws, &d).await.unwrap();
            assert_eq!(
                (p.host_id.as_str(), p.reason, p.candidates),
                ("h-small", PlaceReason::BestFit, 1),
                "{backend}"
            );
        }
        match place(&store, &ws, &d).await {
            Err(StoreError::NoCapacity { why }) => assert_eq!(
                why,
                "8 hosts: 1 dead, 1 draining, 1 without a lease (the in-process host: only when \
                 pinned), 1 with a lapsed lease, 1 with another compatibility key, 1 refused \
                 this create, 1 reporting no memory, 1 with less than 1024 MiB free",
                "{backend}"
            ),
            r => panic!("{backend}: {r:?}"),
        }
        // Refused, nothing was written: h-small still holds exactly two.
        let on_small = store.sandboxes().on_host("h-small").await.unwrap();
        assert_eq!(on_small.len(), 2, "{backend}");
        for h in [
            "h-draining",
            "h-dead",
            "h-lapsed",
            "h-other-key",
            "h-refused",
            "h-local",
        ] {
            let on = store.sandboxes().on_host(h).await.unwrap();
            assert!(on.is_empty(), "{backend}: placed on {h}");
        }
    }
}

/// A pinned create goes to its host or nowhere: chosen over a better fit elsewhere, refused
/// (saying why) when that host cannot take it. The in-process host, which reports no memory
/// and holds no lease, takes a create pinned to it.
#[tokio::test]
async fn a_pinned_create_goes_to_its_host_or_nowhere() {
    for Case { backend, store, .. } in stores().await {
        let ws = workspace(&store).await;
        host(&store, "h-big", 1 << 20, 0, &["base"]).await;
        host(&store, "h-pin", 2048, 0, &[]).await;
        store.hosts().register("h-local", "box").await.unwrap();
        let pinned = |h| Demand {
            host: Some(h),
            ..demand(1024, Some("base"))
        };
        for free in [1024, 0] {
            let p = place(&store, &ws, &pinned("h-pin")).await.unwrap();
            assert_eq!(
                p,
                Placement {
                    host_id: "h-pin".into(),
                    reason: PlaceReason::Pinned,
                    free_memory_mib: free,
                    candidates: 1,
                },
                "{backend}"
            );
        }
        match place(&store, &ws, &pinned("h-pin")).await {
            Err(StoreError::NoCapacity { why }) => assert_eq!(
                why, "host h-pin (pinned), which has less than 1024 MiB free",
                "{backend}"
            ),
            r => panic!("{backend}: {r:?}"),
        }
        let p = place(&store, &ws, &pinned("h-local")).await.unwrap();
        assert_eq!(
            (p.host_id.as_str(), p.reason),
            ("h-local", PlaceReason::Pinned),
            "{backend}"
        );
        store.hosts().drain("h-big").await.unwrap();
        match place(&store, &ws, &pinned("h-big")).await {
            Err(StoreError::NoCapacity { why }) => {
                assert_eq!(why, "host h-big (pinned), which is draining", "{backend}")
            }
            r => panic!("{backend}: {r:?}"),
        }
        match place(&store, &ws, &pinned("h-nope")).await {
            Err(StoreError::NoCapacity { why }) => {
                assert_eq!(why, "host h-nope (pinned) is not known", "{backend}")
            }
            r => panic!("{backend}: {r:?}"),
        }
    }
}

/// A host that reported its slots takes no more sandboxes holding a VM than it has slots,
/// however much memory it has left; with no host at all the refusal says so.
#[tokio::test]
async fn a_host_takes_no_more_sandboxes_than_its_slots() {
    for Case { backend, store, .. } in stores().await {
        let ws = workspace(&store).await;
        match place(&store, &ws, &demand(256, None)).await {
            Err(StoreError::NoCapacity { why }) => assert_eq!(why, "no hosts", "{backend}"),
            r => panic!("{backend}: {r:?}"),
        }
        host(&store, "h-1", 1 << 20, 3, &[]).await;
        sandbox_on(&store, &ws, "h-1", 256, SandboxState::Hibernated).await;
        sandbox_on(&store, &ws, "h-1", 256, SandboxState::Starting).await;
        for _ in 0..2 {
            assert_eq!(
                place(&store, &ws, &demand(256, None))
                    .await
                    .unwrap()
                    .host_id,
                "h-1",
                "{backend}"
            );
        }
        match place(&store, &ws, &demand(256, None)).await {
            Err(StoreError::NoCapacity { why }) => {
                assert_eq!(why, "1 host: 1 with every slot taken", "{backend}")
            }
            r => panic!("{backend}: {r:?}"),
        }
    }
}

/// Placement writes the row as `insert_with_volumes` does, in the same transaction: within the
/// workspace's limit, and claiming the volumes on the chosen host (pinned to the volume's
/// host it claims them; placed elsewhere nothing is written).
#[tokio::test]
async fn placement_keeps_the_workspace_limit_and_claims_volumes() {
    for Case { backend, store, .. } in stores().await {
        let ws = store.keys().create_workspace("w", 2, 100).await.unwrap().id;
        host(&store, "h-1", 1 << 20, 0, &[]).await;
        host(&store, "h-2", 4096, 0, &[]).await;
        let vol = VolumeRow {
            id: "vol-1".into(),
            workspace_id: ws.clone(),
            name: "data".into(),
            host_id: "h-1".into(),
            size_gb: 1,
            state: VolumeState::Ready,
            source: None,
            created_at: T0,
        };
        store.volumes().insert_within_quota(&vol).await.unwrap();
        let mounts = [MountClaim {
            name: "data".into(),
            path: "/data".into(),
            read_only: false,
        }];

        // Best fit is h-2, where the volume is not: refused, nothing written.
        let mut r = row(&ws);
        let refused = store
            .sandboxes()
            .insert_placed(&mut r, &mounts, &demand(1024, None))
            .await;
        assert!(
            matches!(&refused, Err(StoreError::VolumeElsewhere { host, .. }) if host == "h-1"),
            "{backend}: {refused:?}"
        );
        assert!(store.sandboxes().by_id(&r.id).await.is_err(), "{backend}");

        let mut r = row(&ws);
        let pinned = Demand {
            host: Some("h-1"),
            ..demand(1024, None)
        };
        let (p, claimed) = store
            .sandboxes()
            .insert_placed(&mut r, &mounts, &pinned)
            .await
            .unwrap();
        assert_eq!((p.host_id.as_str(), r.host_id.as_str()), ("h-1", "h-1"));
        assert_eq!(claimed.len(), 1, "{backend}");
        assert_eq!(claimed[0].volume.id, "vol-1", "{backend}");

        place(&store, &ws, &demand(1024, None)).await.unwrap();
        match place(&store, &ws, &demand(1024, None)).await {
            Err(StoreError::LimitReached { limit: 2 }) => {}
            r => panic!("{backend}: {r:?}"),
        }
    }
}

/// 200 creates at once, from 200 workspaces through two store handles (two replicas), against
/// 3 hosts with room for 150 between them (by memory on one, by slots on another, by both on
/// the third): exactly 150 are placed, each host holds exactly what it has room for, and the
/// other 50 are refused for capacity.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_racing_creates_never_overcommit_a_host() {
    for Case {
        backend,
        store,
        other,
        ..
    } in stores().await
    {
        // 50 by memory; 60 by slots; 40 by memory (slots 45).
        host(&store, "h-mem", 50 * 256, 0, &["base"]).await;
        host(&store, "h-slots", 1 << 20, 60, &[]).await;
        host(&store, "h-both", 40 * 256 + 100, 45, &["base"]).await;
        let mut workspaces = Vec::new();
        for _ in 0..200 {
            workspaces.push(workspace(&store).await);
        }
        let tasks: Vec<_> = workspaces
            .into_iter()
            .enumerate()
            .map(|(i, ws)| {
                let s = if i % 2 == 0 {
                    store.clone()
                } else {
                    other.clone()
                };
                tokio::spawn(async move {
                    let mut r = row(&ws);
                    let d = demand(256, Some("base"));
                    s.sandboxes().insert_placed(&mut r, &[], &d).await
                })
            })
            .collect();
        let (mut placed, mut full) = (BTreeMap::<String, i64>::new(), 0);
        for t in tasks {
            match t.await.unwrap() {
                Ok((p, _)) => *placed.entry(p.host_id).or_default() += 1,
                Err(StoreError::NoCapacity { .. }) => full += 1,
                Err(e) => panic!("{backend}: {e}"),
            }
        }
        let expect = BTreeMap::from([
            ("h-both".to_owned(), 40),
            ("h-mem".to_owned(), 50),
            ("h-slots".to_owned(), 60),
        ]);
        assert_eq!((placed, full), (expect.clone(), 50), "{backend}");
        // The rows agree: what each host holds, by memory and count.
        for (h, n) in expect {
            let rows = store.sandboxes().on_host(&h).await.unwrap();
            assert_eq!(rows.len() as i64, n, "{backend} {h}");
        }
    }
}

/// One placement at 200 hosts and 3,000 sandbox rows is a few queries, not one per host: a
/// create through `insert_placed` costs little more than the same create on a named host
/// (`insert_with_volumes`: the workspace check, the insert, the commit). The bound is loose —
/// a debug build decodes 200 rows slowly, and a shared 2-core machine is noisy — and guards
/// against a query per host (200 round trips), not the 2 ms target (`pandastack bench
/// cluster` measures that). The figures are printed (`--nocapture`).
#[tokio::test]
async fn placement_at_two_hundred_hosts_is_fast() {
    use std::time::Duration;
    for Case { backend, store, .. } in stores().await {
        let ws = workspace(&store).await;
        for i in 0..200 {
            let templates: &[&str] = if i % 10 == 0 { &["base"] } else { &["node"] };
            host(&store, &format!("h-{i:03}"), 1 << 20, 500, templates).await;
        }
        let states = [
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Hibernated,
            SandboxState::Stopped,
        ];
        let rows: Vec<SandboxRow> = (0..3_000)
            .map(|i| {
                let mut r =
                    SandboxRow::service(&ws, &format!("h-{:03}", i % 200), "base", BTreeMap::new());
                r.memory_mib = 256;
                r.state = states[i % states.len()];
                r
            })
            .collect();
        store.sandboxes().insert_within_limit(&rows).await.unwrap();

        let p50 = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2]
        };
        let (mut named, mut placed) = (Vec::new(), Vec::new());
        for i in 0..60 {
            let mut r = row(&ws);
            r.host_id = "h-001".into();
            let t = std::time::Instant::now();
            store
                .sandboxes()
                .insert_with_volumes(&r, &[])
                .await
                .unwrap();
            named.push(t.elapsed());

            let t = std::time::Instant::now();
            let mut r = row(&ws);
            let (p, _) = store
                .sandboxes()
                .insert_placed(&mut r, &[], &demand(256, Some("base")))
                .await
                .unwrap();
            placed.push(t.elapsed());
            assert_eq!(
                (p.candidates, p.reason),
                (200, PlaceReason::TemplateLocal),
                "{backend} {i}"
            );
        }
        let (named, placed) = (p50(named), p50(placed));
        let placing = placed.saturating_sub(named);
        eprintln!(
            "{backend}: 200 hosts, 3000 rows: create p50 {placed:?} placed, {named:?} on a named \
             host: placement {placing:?}"
        );
        assert!(
            placing < Duration::from_millis(40),
            "{backend}: placement took {placing:?}"
        );
    }
}

/// A thousand creates of two templates, eight at a time through two store handles (two
/// replicas), on three hosts: `a` holds `t1`, `b` holds `t2`, `c` neither. While the holder of
/// a create's template has room, at least 95% of creates land on it (all of them, here:
/// nothing else competes); once `a` is full the rest of `t1`'s go elsewhere by best fit; no
/// host ever holds more than its memory or slots, and the creates that find no room write
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_creates_are_template_local_while_room_exists_and_never_overcommit() {
    for Case {
        backend,
        store,
        other,
        ..
    } in stores().await
    {
        // Room for 400, 450 and 300 sandboxes of 256 MiB (slots bind `c`).
        host(&store, "a", 400 * 256, 0, &["t1"]).await;
        host(&store, "b", 450 * 256, 0, &["t2"]).await;
        host(&store, "c", 1 << 20, 300, &[]).await;
        let ws = store
            .keys()
            .create_workspace("w", 100_000, 100_000)
            .await
            .unwrap()
            .id;
        // Phase 1: 400 of t1 and 400 of t2, interleaved: every one has room on its holder.
        // Phase 2: 200 more of t1, when `a` is full.
        let templates: Vec<&'static str> = (0..800)
            .map(|i| if i % 2 == 0 { "t1" } else { "t2" })
            .chain(std::iter::repeat_n("t1", 200))
            .collect();
        let mut outcomes: Vec<(usize, &str, Result<String, StoreError>)> = Vec::new();
        for (chunk_no, chunk) in templates.chunks(8).enumerate() {
            let tasks: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    let s = if k % 2 == 0 {
                        store.clone()
                    } else {
                        other.clone()
                    };
                    let (ws, t) = (ws.clone(), *t);
                    tokio::spawn(async move {
                        let mut r = row(&ws);
                        let d = demand(256, Some(t));
                        s.sandboxes()
                            .insert_placed(&mut r, &[], &d)
                            .await
                            .map(|(p, _)| p.host_id)
                    })
                })
                .collect();
            for (k, task) in tasks.into_iter().enumerate() {
                let t = chunk[k];
                outcomes.push((chunk_no * 8 + k, t, task.await.unwrap()));
            }
        }
        let holder = |t: &str| if t == "t1" { "a" } else { "b" };
        let first: Vec<_> = outcomes.iter().filter(|(i, _, _)| *i < 800).collect();
        let local = first
            .iter()
            .filter(|(_, t, r)| r.as_deref().ok() == Some(holder(t)))
            .count();
        assert!(
            local * 100 >= first.len() * 95,
            "{backend}: {local} of {} template-local while room existed",
            first.len()
        );
        // Phase 2: `a` is full; t1 goes to the best fit of the others (`b`: least room left).
        let second: Vec<_> = outcomes.iter().filter(|(i, _, _)| *i >= 800).collect();
        assert!(
            second
                .iter()
                .all(|(_, _, r)| r.as_deref().ok() != Some("a")),
            "{backend}: a create went to a full host"
        );
        // Never over memory or slots, and the rows agree with the placements.
        let mut per_host: BTreeMap<String, i64> = BTreeMap::new();
        for (_, _, r) in &outcomes {
            if let Ok(h) = r {
                *per_host.entry(h.clone()).or_default() += 1;
            }
        }
        for (h, most) in [("a", 400), ("b", 450), ("c", 300)] {
            let n = per_host.get(h).copied().unwrap_or(0);
            assert!(n <= most, "{backend}: host {h} holds {n} > {most}");
            let rows = store.sandboxes().on_host(h).await.unwrap();
            assert_eq!(rows.len() as i64, n, "{backend}: rows of {h}");
        }
        let placed: i64 = per_host.values().sum();
        assert_eq!(placed, 1000, "{backend}: room for 1,150, all 1,000 placed");
    }
}
