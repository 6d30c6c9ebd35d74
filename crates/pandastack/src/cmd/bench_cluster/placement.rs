//! The placement part: creates placed in the store at a number of simulated hosts.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use anyhow::{ensure, Context};
use pandastack_store::Store;
use serde_json::json;

use crate::cmd::bench::{metric, ms, Metric};

/// The template every create names; every third simulated host holds it.
const TEMPLATE: &str = "minimal";
/// Each simulated host: 32 GiB and 64 slots; each create 512 MiB, so 64 sandboxes fill one.
const HOST_MEMORY_MIB: i64 = 32_768;
const HOST_SLOTS: i64 = 64;
const CREATE_MEMORY_MIB: i64 = 512;
/// The last this many creates stay `starting` (creates in flight); older ones are `running`.
const IN_FLIGHT: usize = 8;
/// Creates before the measured ones (the connection's statements prepared).
const PLACE_WARM_UP: usize = 10;

/// What placing the creates on the simulated hosts took and where they went.
pub(super) struct Placed {
    pub(super) metric: Metric,
    /// Of the creates made while a host holding the template had room, the share placed on one.
    pub(super) local_share: f64,
    pub(super) details: serde_json::Value,
}

/// `placement_<n>hosts_ms`: `hosts` agents joined with capacity and a lease for a day (every
/// third holding [`TEMPLATE`]); `creates` creates through `SandboxRepo::insert_placed` (check
/// the workspace's limit, choose the host, insert the row: one transaction), each timed. Live
/// sandboxes are kept at three quarters of the hosts' room at most (the oldest deleted), so
/// hosts fill and empty as in use but never all fill; the last [`IN_FLIGHT`] are `starting`.
/// Fails if a host is ever given more than it holds.
pub(super) async fn placement(url: &str, hosts: usize, creates: usize) -> anyhow::Result<Placed> {
    use pandastack_store::{Demand, HostCapacity, Joining, PlaceReason, SandboxRow, SandboxState};
    let store = Store::connect(url).await?;
    let ws = store
        .keys()
        .create_workspace("bench-cluster", 1_000_000, 1_000_000)
        .await?;
    let now = pandastack_store::now_ms();
    let mut local_hosts = std::collections::HashSet::new();
    for i in 0..hosts {
        let id = format!("host-{i:03}");
        let templates = if i % 3 == 0 {
            local_hosts.insert(id.clone());
            vec![TEMPLATE.to_owned()]
        } else {
            Vec::new()
        };
        let joining = Joining {
            name: format!("{id}.bench"),
            address: format!("10.9.{}.{}:7443", i / 250, i % 250 + 1),
            capacity: HostCapacity {
                vcpus: 16,
                memory_mib: HOST_MEMORY_MIB,
                disk_bytes: 1 << 40,
                free_slots: HOST_SLOTS,
                creates_in_flight: 0,
                slots: HOST_SLOTS,
            },
            compat_key: "bench".into(),
            templates,
            id,
        };
        store.hosts().join(&joining, 86_400_000, now).await?;
    }
    let per_host = (HOST_MEMORY_MIB / CREATE_MEMORY_MIB).min(HOST_SLOTS) as usize;
    let population = creates.min(hosts * per_host * 3 / 4).max(1);
    let mut live: std::collections::VecDeque<(String, String)> = Default::default();
    let mut load: HashMap<String, usize> = HashMap::new();
    let (mut samples, mut most) = (Vec::new(), 0);
    let (mut room_creates, mut local_while_room, mut best_fit) = (0, 0, 0);
    for i in 0..PLACE_WARM_UP + creates {
        let room = local_hosts
            .iter()
            .any(|h| load.get(h).copied().unwrap_or(0) < per_host);
        let mut row = SandboxRow::service(&ws.id, "", TEMPLATE, BTreeMap::new());
        let demand = Demand {
            memory_mib: CREATE_MEMORY_MIB,
            template: Some(TEMPLATE),
            compat_key: None,
            host: None,
            exclude: &[],
            now_ms: pandastack_store::now_ms(),
        };
        let t = Instant::now();
        let (placed, _) = store
            .sandboxes()
            .insert_placed(&mut row, &[], &demand)
            .await
            .with_context(|| format!("create {i} at {hosts} hosts"))?;
        let took = ms(t.elapsed());
        let on = load.entry(placed.host_id.clone()).or_default();
        *on += 1;
        ensure!(
            *on <= per_host,
            "host {} was given {on} sandboxes, room for {per_host}",
            placed.host_id
        );
        most = most.max(*on);
        if i >= PLACE_WARM_UP {
            samples.push(took);
            best_fit += usize::from(placed.reason == PlaceReason::BestFit);
            if room {
                room_creates += 1;
                local_while_room += usize::from(placed.reason == PlaceReason::TemplateLocal);
            }
        }
        live.push_back((row.id, placed.host_id));
        if let Some(i) = live.len().checked_sub(IN_FLIGHT + 1) {
            store
                .sandboxes()
                .set_state(&live[i].0, SandboxState::Running)
                .await?;
        }
        if live.len() > population {
            if let Some((id, host)) = live.pop_front() {
                store.sandboxes().delete(&id).await?;
                *load.entry(host).or_default() -= 1;
            }
        }
    }
    let local_share = local_while_room as f64 / room_creates.max(1) as f64;
    let details = json!({
        "hosts": hosts,
        "hosts_holding_template": local_hosts.len(),
        "host_memory_mib": HOST_MEMORY_MIB,
        "host_slots": HOST_SLOTS,
        "create_memory_mib": CREATE_MEMORY_MIB,
        "creates_measured": samples.len(),
        "warm_up_creates": PLACE_WARM_UP,
        "live_sandboxes_kept": population,
        "in_flight_starting": IN_FLIGHT,
        "creates_while_room_on_template_host": room_creates,
        "template_local_while_room": local_while_room,
        "template_local_share": local_share,
        "placed_best_fit": best_fit,
        "most_on_one_host": most,
    });
    Ok(Placed {
        metric: metric(samples, "ms"),
        local_share,
        details,
    })
}
