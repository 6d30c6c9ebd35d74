//! `pandastack bench soak`: many sandbox lifecycles against a server of its own, then a check
//! that they left nothing behind; and a `kill -9` of the server holding running sandboxes.
//!
//! 1. **Cycles.** Each cycle creates a sandbox, execs in it and deletes it; every
//!    `--fork-every`th cycle also forks it (the child execs, both are deleted, and the fork's
//!    snapshot must go with them), and every `--hibernate-every`th hibernates it and wakes it
//!    again before the exec. After the cycles, with no sandbox left: no QEMU process under the
//!    data directory, no sandbox or snapshot directory, no sandbox or snapshot row, none of the
//!    VM cgroups the cycles' VMs were in, no network namespace or host veth beyond the
//!    server's recorded slots, and the host nftables table's rules as before; the server's resident
//!    memory and open file descriptors are compared with what they were after the first cycle.
//! 2. **Restart.** `--restart-sandboxes` sandboxes each run a counter (a shell loop writing an
//!    increasing number every second); the server is `kill -9`ed and started again on the same
//!    data directory. Every sandbox must be listed once and `running`, with the same QEMU
//!    process as before (re-attached, not restarted), and its counter must have gone on from
//!    where it was. Then they are deleted and the leftover checks run again.
//!
//! The suite runs a short variant (`scripts/test.sh`); the full one's figures are in the
//! closing note of issue #36 and docs/isolation.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::bench::{host_info, metric, ms};
use super::bench_apps::str_of;
use super::bench_volumes::{accel, network_links, output, start_server_on, Http, OwnServer};

/// `--net-name` and `--net-base` of the soak's server: its own, so that it can run beside the
/// test suite or another bench (and its checks count only its own objects).
const NET_NAME: &str = "pssk";
const NET_BASE: &str = "10.214.0.0/16";

#[derive(Debug, clap::Args)]
pub(crate) struct SoakArgs {
    /// Create/exec/delete cycles.
    #[arg(long, default_value_t = 1000)]
    cycles: usize,
    /// Every Nth cycle also forks its sandbox (0: never).
    #[arg(long, default_value_t = 10)]
    fork_every: usize,
    /// Every Nth cycle also hibernates and wakes its sandbox (0: never).
    #[arg(long, default_value_t = 7)]
    hibernate_every: usize,
    /// Running sandboxes, each with a counter, when the server is `kill -9`ed (0: skip).
    #[arg(long, default_value_t = 50)]
    restart_sandboxes: usize,
    /// Template of every sandbox.
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Parent of the data directory of the server this command starts (default:
    /// /var/lib/pandastack; a temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Sandbox networking of the server (`on` also checks namespaces, veths and nftables).
    #[arg(long, default_value = "on")]
    network: String,
    /// Network names of the soak's server (another soak on this host needs other ones).
    #[arg(long, default_value = NET_NAME)]
    net_name: String,
    /// Addresses of the soak's server's sandbox network.
    #[arg(long, default_value = NET_BASE)]
    net_base: String,
    /// Largest growth of the server's resident memory over the cycles that passes, in MiB.
    #[arg(long, default_value_t = 64)]
    max_rss_growth_mib: u64,
    /// Largest growth of the server's open file descriptors over the cycles that passes.
    #[arg(long, default_value_t = 8)]
    max_fd_growth: u64,
    /// Write results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// What a server process holds: resident memory (KiB) and open file descriptors.
#[derive(Debug, Clone, Copy)]
struct Footprint {
    rss_kib: u64,
    fds: u64,
}

fn footprint(pid: u32) -> anyhow::Result<Footprint> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in the server's status")?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .with_context(|| format!("list /proc/{pid}/fd"))?
        .count() as u64;
    Ok(Footprint { rss_kib, fds })
}

/// The API of the soak's server, with the sandboxes it made still to delete.
struct Soak {
    http: Http,
    template: String,
    data: PathBuf,
    /// The VM cgroups the soak's VMs were in (each must be gone at the end).
    cgroups: BTreeSet<String>,
    /// The server's `--net-name`.
    net_name: String,
}

impl Soak {
    async fn create(&mut self) -> anyhow::Result<String> {
        let body = json!({"template": self.template});
        let (v, _) = self
            .http
            .expect(
                Method::POST,
                "/v1/sandboxes",
                Some(body),
                StatusCode::CREATED,
            )
            .await?;
        let id = str_of(&v, "id")?;
        self.note_cgroup(&id);
        Ok(id)
    }

    /// Remembers the cgroup of sandbox `id`'s VM (named in its run directory).
    fn note_cgroup(&mut self, id: &str) {
        let file = self.data.join("sandboxes").join(id).join("cgroup");
        if let Ok(name) = std::fs::read_to_string(file) {
            self.cgroups.insert(name.trim().to_owned());
        }
    }

    /// Runs `cmd` in sandbox `id`; its stdout, failing unless it exits 0.
    async fn exec(&self, id: &str, cmd: &str) -> anyhow::Result<String> {
        let path = format!("/v1/sandboxes/{id}/exec");
        let (v, _) = self
            .http
            .expect(
                Method::POST,
                &path,
                Some(json!({"cmd": cmd})),
                StatusCode::OK,
            )
            .await?;
        ensure!(v["exit_code"] == 0, "{id}: {cmd:?} answered {v}");
        Ok(v["stdout"].as_str().unwrap_or_default().to_owned())
    }

    async fn post(&self, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let (st, v) = self.http.call(Method::POST, path, body).await?;
        ensure!(st.is_success(), "POST {path}: {st} {v}");
        Ok(v)
    }

    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let path = format!("/v1/sandboxes/{id}");
        let (st, v) = self.http.call(Method::DELETE, &path, None).await?;
        ensure!(st.is_success(), "DELETE {path}: {st} {v}");
        Ok(())
    }

    /// One cycle: create, (hibernate and wake), exec, (fork: the child execs, is deleted),
    /// delete.
    async fn cycle(&mut self, i: usize, fork: bool, hibernate: bool) -> anyhow::Result<()> {
        let id = self.create().await?;
        if hibernate {
            self.post(&format!("/v1/sandboxes/{id}/hibernate"), None)
                .await?;
            self.post(&format!("/v1/sandboxes/{id}/wake"), None).await?;
            self.note_cgroup(&id);
        }
        let out = self.exec(&id, &format!("echo cycle-{i}")).await?;
        ensure!(out == format!("cycle-{i}\n"), "{id}: exec said {out:?}");
        if fork {
            let v = self
                .post(&format!("/v1/sandboxes/{id}/fork"), Some(json!({})))
                .await?;
            let child = str_of(&v["children"][0], "id")?;
            self.note_cgroup(&child);
            let out = self.exec(&child, &format!("echo child-{i}")).await?;
            ensure!(out == format!("child-{i}\n"), "{child}: exec said {out:?}");
            self.delete(&child).await?;
        }
        self.delete(&id).await
    }

    /// Ids of the sandboxes listed, and of the snapshots.
    async fn rows(&self) -> anyhow::Result<(Vec<(String, String)>, Vec<String>)> {
        let (v, _) = self
            .http
            .expect(
                Method::GET,
                "/v1/sandboxes?limit=1000",
                None,
                StatusCode::OK,
            )
            .await?;
        let sandboxes = v["data"]
            .as_array()
            .context("sandboxes: no data")?
            .iter()
            .map(|s| Ok((str_of(s, "id")?, str_of(s, "state")?)))
            .collect::<anyhow::Result<_>>()?;
        let (v, _) = self
            .http
            .expect(
                Method::GET,
                "/v1/snapshots?limit=1000",
                None,
                StatusCode::OK,
            )
            .await?;
        let snapshots = v["data"]
            .as_array()
            .context("snapshots: no data")?
            .iter()
            .map(|s| str_of(s, "id"))
            .collect::<anyhow::Result<_>>()?;
        Ok((sandboxes, snapshots))
    }
}

/// QEMU processes running in a directory under `dir` (a VM's run directory).
pub(crate) fn qemu_processes_under(dir: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| {
            let pid: u32 = p.file_name().to_string_lossy().parse().ok()?;
            let cwd = std::fs::read_link(p.path().join("cwd")).ok()?;
            let comm = std::fs::read_to_string(p.path().join("comm")).ok()?;
            (cwd.starts_with(dir) && comm.starts_with("qemu")).then_some(pid)
        })
        .collect()
}

/// QEMU processes whose run directory is the sandbox's (`<data>/sandboxes/<id>`).
fn qemu_of(data: &Path, id: &str) -> Vec<u32> {
    qemu_processes_under(&data.join("sandboxes").join(id))
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// VM cgroups of `names` that still exist in any hierarchy.
fn cgroups_left(names: &BTreeSet<String>) -> Vec<String> {
    let bases = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .map(PathBuf::from)
        .chain(
            ["memory", "cpu", "cpu,cpuacct", "pids"]
                .iter()
                .map(|c| Path::new("/sys/fs/cgroup").join(c)),
        );
    let bases: Vec<PathBuf> = bases.collect();
    names
        .iter()
        .filter(|n| bases.iter().any(|b| b.join("pandastack").join(n).is_dir()))
        .cloned()
        .collect()
}

/// The server network's host objects: namespaces, host veths, and the rules of its host
/// nftables table (which by design names no sandbox: its rules match the veth prefix, and each
/// slot's own rules live in the slot's namespace, kept with the recorded slot).
#[derive(Debug, Clone, PartialEq, Eq)]
struct NetObjects {
    netns: BTreeSet<String>,
    veths: BTreeSet<String>,
    nft_rules: usize,
}

fn net_objects(name: &str) -> NetObjects {
    let (netns, veths) = network_links(name);
    let table = format!("pandastack_{name}");
    let nft: Value = serde_json::from_str(&output(&["nft", "-j", "list", "table", "inet", &table]))
        .unwrap_or(Value::Null);
    let nft_rules = nft["nftables"]
        .as_array()
        .map(|items| items.iter().filter(|i| i.get("rule").is_some()).count())
        .unwrap_or(0);
    NetObjects {
        netns: netns.into_iter().collect(),
        veths: veths.into_iter().collect(),
        nft_rules,
    }
}

/// Slots the server's network pool records (`<data>/net/netpool.json`).
fn recorded_slots(data: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(data.join("net").join("netpool.json")).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    Some(v["slots"].as_array()?.len())
}

/// Everything the soak's sandboxes may have left behind, once none is left: what was found.
async fn leftovers(soak: &Soak, net_before: Option<&NetObjects>) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    // Deletes return once the VM is gone; give the host's asynchronous clean-up (cgroup removal
    // after the process is reaped, conntrack) a moment.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        found.clear();
        let (sandboxes, snapshots) = soak.rows().await?;
        if !sandboxes.is_empty() {
            found.push(format!("sandbox rows: {sandboxes:?}"));
        }
        if !snapshots.is_empty() {
            found.push(format!("snapshot rows: {snapshots:?}"));
        }
        let qemu = qemu_processes_under(&soak.data);
        if !qemu.is_empty() {
            found.push(format!("QEMU processes: {qemu:?}"));
        }
        for d in ["sandboxes", "snapshots"] {
            let left = entries(&soak.data.join(d));
            if !left.is_empty() {
                found.push(format!("{d}/: {left:?}"));
            }
        }
        let cgroups = cgroups_left(&soak.cgroups);
        if !cgroups.is_empty() {
            found.push(format!("VM cgroups: {cgroups:?}"));
        }
        if let Some(before) = net_before {
            let now = net_objects(&soak.net_name);
            let slots = recorded_slots(&soak.data).unwrap_or(0);
            if now.netns.len() > slots || now.veths.len() > slots {
                found.push(format!(
                    "{} namespaces and {} host veths for {slots} recorded slots",
                    now.netns.len(),
                    now.veths.len()
                ));
            }
            if now.nft_rules != before.nft_rules {
                found.push(format!(
                    "host nftables rules: {} (before the cycles: {})",
                    now.nft_rules, before.nft_rules
                ));
            }
        }
        if found.is_empty() || Instant::now() > deadline {
            return Ok(found);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Results of one soak.
#[derive(Debug, Default)]
struct Figures {
    cycle_ms: Vec<f64>,
    before: Option<Footprint>,
    after: Option<Footprint>,
    restart_reattached: usize,
    /// The network's objects before the cycles and at the end (with networking on).
    net: Option<(NetObjects, NetObjects)>,
    /// How far each counter went on between its reading before the kill and after the restart.
    restart_counter_steps: Vec<f64>,
    restart_seconds_since: f64,
    leftovers: Vec<String>,
}

pub(crate) async fn run(a: SoakArgs) -> anyhow::Result<ExitCode> {
    ensure!(a.cycles > 0, "--cycles: at least 1");
    let parent = a
        .data_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/pandastack"));
    let (accel, accel_reason) = accel().await;
    eprintln!("accelerator: {accel} ({accel_reason})");
    let network = a.network == "on";
    let net = (a.net_name.as_str(), a.net_base.as_str());
    let mut server = start_server_on(&parent, 0, net, &["--network", &a.network]).await?;
    let mut soak = Soak {
        http: Http::new(&server.url, &server.key),
        template: a.template.clone(),
        data: server.dir.path().to_owned(),
        cgroups: BTreeSet::new(),
        net_name: a.net_name.clone(),
    };
    let mut f = Figures::default();
    let started = Instant::now();
    let r = soak_and_restart(&a, &mut server, &mut soak, &mut f, network).await;
    let took = started.elapsed();
    print_figures(&a, &f, took);
    if let Some(path) = &a.json {
        let doc = json!({
            "name": "soak",
            "accel": accel,
            "accel_reason": accel_reason,
            "host": host_info(),
            "cycles": a.cycles,
            "fork_every": a.fork_every,
            "hibernate_every": a.hibernate_every,
            "restart_sandboxes": a.restart_sandboxes,
            "network": a.network,
            "seconds": took.as_secs_f64(),
            "server_rss_kib": {"before": f.before.map(|b| b.rss_kib), "after": f.after.map(|b| b.rss_kib)},
            "server_fds": {"before": f.before.map(|b| b.fds), "after": f.after.map(|b| b.fds)},
            "restart_reattached": f.restart_reattached,
            "leftovers": f.leftovers,
            "net_objects": f.net.as_ref().map(|(b, a)| json!({
                "before": {"netns": b.netns.len(), "veths": b.veths.len(), "nft_rules": b.nft_rules},
                "after": {"netns": a.netns.len(), "veths": a.veths.len(), "nft_rules": a.nft_rules},
            })),
            "metrics": {
                "cycle_ms": metric(f.cycle_ms.clone(), "ms"),
                "restart_counter_steps": metric(f.restart_counter_steps.clone(), "steps"),
            },
        });
        std::fs::write(path, serde_json::to_vec_pretty(&doc)?)
            .with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    drop(server);
    r?;
    Ok(ExitCode::SUCCESS)
}

async fn soak_and_restart(
    a: &SoakArgs,
    server: &mut OwnServer,
    soak: &mut Soak,
    f: &mut Figures,
    network: bool,
) -> anyhow::Result<()> {
    // The first cycle builds and bakes the template; the footprint is taken after it.
    eprintln!("first cycle (may build and bake {})…", a.template);
    soak.cycle(0, false, false).await?;
    let net_before = network.then(|| net_objects(&a.net_name));
    let pid = server.pid();
    f.before = Some(footprint(pid)?);
    let every = |n: usize, i: usize| n > 0 && i.is_multiple_of(n);
    let progress = (a.cycles / 20).max(1);
    for i in 1..=a.cycles {
        let t = Instant::now();
        soak.cycle(i, every(a.fork_every, i), every(a.hibernate_every, i))
            .await
            .with_context(|| format!("cycle {i}"))?;
        f.cycle_ms.push(ms(t.elapsed()));
        if i.is_multiple_of(progress) {
            let fp = footprint(pid)?;
            eprintln!(
                "cycle {i}/{}: {:.0} ms; server RSS {} MiB, {} fds",
                a.cycles,
                ms(t.elapsed()),
                fp.rss_kib >> 10,
                fp.fds
            );
        }
    }
    f.leftovers = leftovers(soak, net_before.as_ref()).await?;
    f.after = Some(footprint(pid)?);
    f.net = net_before.clone().map(|b| (b, net_objects(&soak.net_name)));
    ensure!(
        f.leftovers.is_empty(),
        "after {} cycles: {}",
        a.cycles,
        f.leftovers.join("; ")
    );
    let (before, after) = (f.before.unwrap_or(f.after.unwrap()), f.after.unwrap());
    ensure!(
        after.rss_kib <= before.rss_kib + (a.max_rss_growth_mib << 10),
        "the server's RSS grew from {} to {} MiB over {} cycles",
        before.rss_kib >> 10,
        after.rss_kib >> 10,
        a.cycles
    );
    ensure!(
        after.fds <= before.fds + a.max_fd_growth,
        "the server's open files went from {} to {} over {} cycles",
        before.fds,
        after.fds,
        a.cycles
    );
    if a.restart_sandboxes > 0 {
        restart(a, server, soak, f).await?;
        // The restart's slots stay recorded as free; the host table's rules must be as before.
        f.leftovers = leftovers(soak, net_before.as_ref()).await?;
        ensure!(
            f.leftovers.is_empty(),
            "after the restart: {}",
            f.leftovers.join("; ")
        );
    }
    Ok(())
}

/// A counter in the background: an increasing number in `/root/counter` every second,
/// outliving the exec that starts it. One `sleep` a second is all it runs (fifty guests that
/// each spawned a few processes ten times a second kept a 2-core TCG host at a load of 30).
/// The exec returns once the first number is there (up to 30 s: a loaded TCG guest can take
/// seconds to start a shell).
const COUNTER: &str = "nohup setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /root/counter; \
    sleep 1; done' >/dev/null 2>&1 < /dev/null & \
    for _ in $(seq 300); do [ -s /root/counter ] && break; sleep 0.1; done; cat /root/counter";

/// The counter of sandbox `id` (read again while the loop is between truncating and writing it).
async fn counter(soak: &Soak, id: &str) -> anyhow::Result<u64> {
    let out = soak
        .exec(
            id,
            "for _ in 1 2 3 4 5; do c=$(cat /root/counter); [ -n \"$c\" ] && break; sleep 0.05; done; echo $c",
        )
        .await?;
    out.trim()
        .parse()
        .with_context(|| format!("{id}: counter {out:?}"))
}

/// `n` running sandboxes with counters, the server `kill -9`ed and started again: each is
/// listed once and running, its QEMU process the same, its counter gone on.
async fn restart(
    a: &SoakArgs,
    server: &mut OwnServer,
    soak: &mut Soak,
    f: &mut Figures,
) -> anyhow::Result<()> {
    let n = a.restart_sandboxes;
    eprintln!("restart: {n} sandboxes with counters…");
    let mut held: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..n {
        let id = soak.create().await?;
        soak.exec(&id, COUNTER).await?;
        let pids = qemu_of(&soak.data, &id);
        ensure!(pids.len() == 1, "{id}: QEMU processes {pids:?}");
        held.insert(id, pids[0]);
    }
    let mut before = BTreeMap::new();
    for id in held.keys() {
        before.insert(id.clone(), (counter(soak, id).await?, Instant::now()));
    }
    eprintln!("restart: kill -9 of the server");
    server.kill9_restart().await?;
    soak.http = Http::new(&server.url, &server.key);
    let (listed, _) = soak.rows().await?;
    let ids: Vec<&String> = listed.iter().map(|(id, _)| id).collect();
    let unique: BTreeSet<&String> = ids.iter().copied().collect();
    ensure!(
        ids.len() == unique.len(),
        "a sandbox is listed twice: {ids:?}"
    );
    for (id, pid) in &held {
        let state = listed.iter().find(|(l, _)| l == id).map(|(_, s)| s);
        ensure!(
            state.map(String::as_str) == Some("running"),
            "{id} after the restart: {state:?}"
        );
        let now = qemu_of(&soak.data, id);
        ensure!(
            now == [*pid],
            "{id}: QEMU {pid} before the restart, {now:?} after"
        );
    }
    ensure!(
        listed.len() == held.len(),
        "{} sandboxes listed after the restart, {} held",
        listed.len(),
        held.len()
    );
    for (id, (was, at)) in &before {
        // The counter goes on from where it was: larger, by about the time that passed. It
        // counts seconds, and a restart can take less than one: read it again once more than a
        // second has passed since the reading before the kill.
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(at.elapsed())).await;
        let now = counter(soak, id).await?;
        ensure!(
            now > *was,
            "{id}: counter {was} before the restart, {now} after"
        );
        f.restart_counter_steps.push((now - was) as f64);
        f.restart_seconds_since = f.restart_seconds_since.max(at.elapsed().as_secs_f64());
        f.restart_reattached += 1;
    }
    eprintln!(
        "restart: {} of {n} sandboxes re-attached, counters going on",
        f.restart_reattached
    );
    for id in held.keys() {
        soak.delete(id).await?;
    }
    Ok(())
}

fn print_figures(a: &SoakArgs, f: &Figures, took: Duration) {
    let m = metric(f.cycle_ms.clone(), "ms");
    println!(
        "soak: {} of {} cycles in {:.0} s (fork every {}, hibernate every {}); cycle p50 {:.0} ms, p99 {:.0} ms",
        f.cycle_ms.len(),
        a.cycles,
        took.as_secs_f64(),
        a.fork_every,
        a.hibernate_every,
        m.p50,
        m.p99
    );
    if let (Some(b), Some(af)) = (f.before, f.after) {
        println!(
            "server: RSS {} → {} MiB, open files {} → {}",
            b.rss_kib >> 10,
            af.rss_kib >> 10,
            b.fds,
            af.fds
        );
    }
    if a.restart_sandboxes > 0 {
        let steps = metric(f.restart_counter_steps.clone(), "steps");
        println!(
            "restart: {} of {} running sandboxes re-attached after kill -9, counters going on \
             (min {:.0}, p50 {:.0} steps over up to {:.0} s)",
            f.restart_reattached,
            a.restart_sandboxes,
            f.restart_counter_steps
                .iter()
                .cloned()
                .fold(f64::INFINITY, f64::min),
            steps.p50,
            f.restart_seconds_since
        );
    }
    if f.leftovers.is_empty() {
        println!("leftovers: none");
    } else {
        println!("leftovers: {}", f.leftovers.join("; "));
    }
}
