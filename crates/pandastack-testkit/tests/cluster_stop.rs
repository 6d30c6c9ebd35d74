//! `SIGSTOP` of an agent for 15 s in a cluster on this machine (issue #38, item 4): the host is
//! reaped (`dead`, its sandboxes `lost`) while the agent cannot answer; after `SIGCONT` it
//! re-joins by itself with a new epoch, a sandbox deleted meanwhile has its VM stopped and
//! removed on that host, the others are `running` again and answer — and at no moment does any
//! sandbox id have a VM on two hosts (checked every 200 ms on the hosts themselves, from the
//! fake VMs' processes). Alone in its file: it waits 15 s, and CI runs it beside another test.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use pandastack_host::error_chain;
use pandastack_store::HostState;
use pandastack_testkit::cluster_kit::{Cluster, ClusterSpec};

/// Panics if a sandbox id has a live VM on two hosts; returns every host's VMs.
fn no_id_on_two_hosts(c: &Cluster) -> Vec<BTreeSet<String>> {
    let vms: Vec<BTreeSet<String>> = (0..c.agents.len()).map(|j| c.live_vms(j)).collect();
    let mut seen: BTreeMap<&String, usize> = BTreeMap::new();
    for (j, set) in vms.iter().enumerate() {
        for id in set {
            if let Some(k) = seen.insert(id, j) {
                panic!(
                    "sandbox {id} has a VM on {} and on {}",
                    c.agents[k].host_id, c.agents[j].host_id
                );
            }
        }
    }
    vms
}

/// Waits (checking [`no_id_on_two_hosts`] every 200 ms) until `done` holds; how long it took.
async fn until<F, Fut>(c: &Cluster, what: &str, limit: Duration, mut done: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = Instant::now();
    loop {
        no_id_on_two_hosts(c);
        if done().await {
            return t.elapsed();
        }
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_stopped_for_15s_is_reaped_then_rejoins_and_reconciles() {
    let spec = ClusterSpec {
        slots: 2,
        ..Default::default()
    };
    let Some(c) = Cluster::start(spec).await else {
        return;
    };
    let mut by_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in 0..6 {
        let (id, host) = c.create(n % 2).await;
        by_host.entry(host).or_default().push(id);
    }
    let j = 0;
    let host = c.agents[j].host_id.clone();
    let mine = by_host.get(&host).cloned().unwrap_or_default();
    assert_eq!(mine.len(), 2, "two sandboxes on each host: {by_host:?}");
    let (kept, deleted) = (mine[0].clone(), mine[1].clone());
    let epoch = c.host(j).await.epoch;
    let others_before: Vec<_> = {
        let mut v = Vec::new();
        for h in c.hosts().await.into_iter().filter(|h| h.id != host) {
            v.push((h.id.clone(), h.state, h.epoch, c.sandboxes_on(&h.id).await));
        }
        v
    };
    let vms_before = no_id_on_two_hosts(&c);
    assert!(vms_before[j].contains(&kept) && vms_before[j].contains(&deleted));

    let stopped = Instant::now();
    c.stop(j);
    let dead = until(
        &c,
        "the stopped host reaped",
        Duration::from_secs(14),
        || async { c.host(j).await.state == HostState::Dead },
    )
    .await;
    eprintln!("{host}: stopped, dead after {} ms", dead.as_millis());
    assert!(dead <= Duration::from_secs(10), "detection took {dead:?}");
    until(&c, "its sandboxes lost", Duration::from_secs(3), || async {
        c.sandboxes_on(&host).await.iter().all(|(_, s)| s == "lost")
    })
    .await;

    // Deleted while its host cannot be reached: the row goes; the VM is the host's to remove
    // when it is back.
    tokio::time::timeout(
        Duration::from_secs(20),
        c.client(1).delete_sandbox(&deleted),
    )
    .await
    .expect("a delete of a lost sandbox answers")
    .unwrap_or_else(|e| panic!("delete a lost sandbox: {}", error_chain(&e)));
    let gone = c.store().sandboxes().by_id(&deleted).await;
    assert!(gone.is_err(), "deleted sandbox's row: {gone:?}");
    // The VM still runs on the stopped host: nothing could tell it.
    assert!(c.live_vms(j).contains(&deleted));

    let left = Duration::from_secs(15).saturating_sub(stopped.elapsed());
    until(
        &c,
        "the 15 s stop",
        left + Duration::from_secs(1),
        || async { stopped.elapsed() >= Duration::from_secs(15) },
    )
    .await;
    c.cont(j);
    let continued = Instant::now();
    let rejoined = until(&c, "a new epoch", Duration::from_secs(10), || async {
        let h = c.host(j).await;
        h.state == HostState::Ready && h.epoch > epoch
    })
    .await;
    eprintln!(
        "{host}: continued, re-joined after {} ms",
        rejoined.as_millis()
    );
    // Both measured from the SIGCONT.
    until(
        &c,
        "its lost sandbox running",
        Duration::from_secs(10),
        || async { c.sandbox(&kept).await.state.as_str() == "running" },
    )
    .await;
    let found = continued.elapsed();
    until(
        &c,
        "the deleted sandbox's VM removed",
        Duration::from_secs(10),
        || async { !c.live_vms(j).contains(&deleted) },
    )
    .await;
    let removed = continued.elapsed();
    eprintln!(
        "{host}: after SIGCONT, its lost sandbox running at {} ms, the deleted one's VM gone \
         at {} ms",
        found.as_millis(),
        removed.as_millis()
    );
    assert_eq!(
        c.sandboxes_on(&host).await,
        vec![(kept.clone(), "running".to_owned())]
    );
    assert!(c.live_vms(j).contains(&kept));
    for r in 0..c.replicas.len() {
        assert_eq!(c.exec(r, &kept, "echo back").await, "back\n");
    }

    // The other hosts never changed.
    let mut others_after = Vec::new();
    for h in c.hosts().await.into_iter().filter(|h| h.id != host) {
        others_after.push((h.id.clone(), h.state, h.epoch, c.sandboxes_on(&h.id).await));
    }
    assert_eq!(others_after, others_before);
    no_id_on_two_hosts(&c);
}
