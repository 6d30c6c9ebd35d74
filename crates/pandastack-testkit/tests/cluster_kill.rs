//! `kill -9` of an agent in a cluster on this machine (issue #38, item 4): its host is `dead`
//! within 10 s (measured from the kill to the row, five kills across this file), its sandboxes
//! `lost`, no other host's rows touched; a call on a lost sandbox gets a clear refusal through
//! every replica while the other hosts' sandboxes answer. The agent started again re-joins
//! with a new epoch and its sandboxes (their VMs kept running, as QEMU's would) are `running`
//! again and answer.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use pandastack_host::error_chain;
use pandastack_store::HostState;
use pandastack_testkit::cluster_kit::{Cluster, ClusterSpec};

/// Detection bound of the issue: lease 8 s, reaped within a reaper tick after.
const DETECT: Duration = Duration::from_secs(10);

/// Two sandboxes on each of three hosts (two slots each); the ids by host.
async fn two_on_each() -> Option<(Cluster, BTreeMap<String, Vec<String>>)> {
    let spec = ClusterSpec {
        slots: 2,
        ..Default::default()
    };
    let c = Cluster::start(spec).await?;
    let mut by_host: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in 0..6 {
        let (id, host) = c.create(n % 2).await;
        by_host.entry(host).or_default().push(id);
    }
    for a in &c.agents {
        assert_eq!(
            by_host.get(&a.host_id).map(Vec::len),
            Some(2),
            "two sandboxes on each host: {by_host:?}"
        );
    }
    Some((c, by_host))
}

/// Everything the store says about the hosts other than `except` and their sandboxes.
async fn others(c: &Cluster, except: &str) -> Vec<String> {
    let mut out = Vec::new();
    for h in c.hosts().await {
        if h.id == except {
            continue;
        }
        out.push(format!(
            "{} {} epoch {} {:?}",
            h.id,
            h.state,
            h.epoch,
            c.sandboxes_on(&h.id).await
        ));
    }
    out
}

/// Kills agent `j`, checks everything the issue asks of a dead host, starts it again and
/// waits for its sandboxes to run again. Returns the detection time.
async fn kill_and_come_back(
    c: &mut Cluster,
    by_host: &BTreeMap<String, Vec<String>>,
    j: usize,
) -> Duration {
    let host = c.agents[j].host_id.clone();
    let mine = &by_host[&host];
    let epoch = c.host(j).await.epoch;
    let before = others(c, &host).await;

    let t = Instant::now();
    c.kill9(j);
    let detected = c
        .wait_host_state(j, HostState::Dead, t, DETECT + Duration::from_secs(10))
        .await;
    eprintln!("{host}: killed, dead after {} ms", detected.as_millis());

    // Its sandboxes are lost (the reaper marks them with the host, or right after).
    let t = Instant::now();
    loop {
        let states: Vec<(String, String)> = c.sandboxes_on(&host).await;
        if states.iter().all(|(_, s)| s == "lost") && states.len() == mine.len() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{host} is dead but its sandboxes are {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(c.host(j).await.epoch > epoch, "a reap bumps the epoch");
    // No other host's rows changed.
    assert_eq!(others(c, &host).await, before, "other hosts' rows changed");

    // A lost sandbox: a clear refusal through every replica; the others still answer.
    let other = by_host
        .iter()
        .find(|(h, _)| **h != host)
        .map(|(_, ids)| ids[0].clone())
        .unwrap();
    for r in 0..c.replicas.len() {
        let req = pandastack_client::types::ExecRequest {
            cmd: Some("true".into()),
            ..Default::default()
        };
        let e = tokio::time::timeout(
            Duration::from_secs(20),
            c.client_once(r).exec(&mine[0], &req),
        )
        .await
        .expect("a call on a lost sandbox answers")
        .expect_err("exec on a lost sandbox fails");
        match &e {
            pandastack_client::Error::Api(a) => {
                eprintln!(
                    "exec on lost {} through replica {r}: {} {}",
                    mine[0], a.status, a.message
                );
                assert!(
                    a.status == 503 || a.status == 409,
                    "exec on a lost sandbox: {} {} ({:?})",
                    a.status,
                    a.message,
                    a.code_text
                );
            }
            e => panic!("exec on a lost sandbox: {}", error_chain(e)),
        }
        let sb = c
            .client_once(r)
            .get_sandbox(&mine[0])
            .await
            .unwrap_or_else(|e| panic!("get a lost sandbox: {}", error_chain(&e)));
        assert_eq!(sb.state.as_str(), "lost");
        assert_eq!(c.exec(r, &other, "echo fine").await, "fine\n");
    }

    // Back: a new epoch, its sandboxes (whose VMs ran on) running again and answering.
    let dead_epoch = c.host(j).await.epoch;
    let t = Instant::now();
    c.restart_agent(j);
    c.wait_ready(std::slice::from_ref(&host), Duration::from_secs(20))
        .await;
    let joined = c.host(j).await;
    assert!(joined.epoch > dead_epoch, "{joined:?}");
    loop {
        let states = c.sandboxes_on(&host).await;
        if states.iter().all(|(_, s)| s == "running") && states.len() == mine.len() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{host} re-joined but its sandboxes are {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "{host}: restarted, its sandboxes running again after {} ms",
        t.elapsed().as_millis()
    );
    for id in mine {
        for r in 0..c.replicas.len() {
            assert_eq!(c.exec(r, id, "echo back").await, "back\n");
        }
    }
    detected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_each_agent_in_turn_is_detected_within_10s() {
    let Some((mut c, by_host)) = two_on_each().await else {
        return;
    };
    let mut times = Vec::new();
    for j in 0..c.agents.len() {
        times.push(kill_and_come_back(&mut c, &by_host, j).await);
    }
    let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    eprintln!("dead_host_detect_ms: {ms:?}");
    assert!(
        times.iter().all(|d| *d <= DETECT),
        "detection over 10 s: {ms:?} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_the_same_agent_twice_is_detected_within_10s_each_time() {
    let Some((mut c, by_host)) = two_on_each().await else {
        return;
    };
    let mut times = Vec::new();
    for _ in 0..2 {
        times.push(kill_and_come_back(&mut c, &by_host, 1).await);
    }
    let ms: Vec<u128> = times.iter().map(Duration::as_millis).collect();
    eprintln!("dead_host_detect_ms: {ms:?}");
    assert!(
        times.iter().all(|d| *d <= DETECT),
        "detection over 10 s: {ms:?} ms"
    );
}
