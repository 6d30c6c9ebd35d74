//! The host's runtime on this machine, built the same way by `pandastack server` (a single node)
//! and `pandastack agent` (one host of a cluster): the flags they share ([`LocalHostArgs`],
//! flattened into both) and [`start_host`], the host agent over QEMU with its network pool,
//! cgroups, VM uids and templates. Nothing here reads the state store: which sandboxes to keep
//! at start is the caller's to say.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pandastack_agent::{AgentConfig, HostAgent};
use pandastack_qemu::{accel, QemuConfig, QemuDriver};
use pandastack_runtime::{DataDir, Runtime};

/// The flags of this machine's host runtime (see the module doc).
#[derive(Debug, Clone, clap::Args)]
pub struct LocalHostArgs {
    /// Data directory (templates, sandboxes, snapshots, state.db); reflink-capable is best.
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    pub data_dir: PathBuf,
    /// Object store for backups and images: `file:///absolute/path` or `s3://bucket[/prefix]`
    /// (credentials, region and endpoint from the standard `AWS_*` variables; `AWS_ENDPOINT_URL`
    /// for MinIO, Ceph, R2, …). Default: `file://<data-dir>/objects`.
    #[arg(long, env = "PANDASTACK_OBJECTS", value_name = "URL")]
    pub objects: Option<String>,
    /// Guest kernel (default: the cached build).
    #[arg(long, env = "PANDASTACK_KERNEL")]
    pub kernel: Option<PathBuf>,
    /// Guest agent binary put into template images (default: `pandastack-guest` next to this binary).
    #[arg(long, env = "PANDASTACK_GUEST_AGENT")]
    pub guest_agent: Option<PathBuf>,
    /// Directory of template specs (default: ./templates, then the installation's).
    #[arg(long, env = "PANDASTACK_TEMPLATES_DIR")]
    pub templates_dir: Option<PathBuf>,
    /// Pre-started VMs kept per baked template (0 disables the pool).
    #[arg(long, default_value_t = 1)]
    pub pool_size: usize,
    /// A pooled VM still untaken this long (ms) runs one shell command (`echo; /bin/true`), so
    /// that under TCG the sandbox's first command finds the exec path translated; 0 never warms
    #[arg(long, env = "PANDASTACK_POOL_WARM_UP_MS", default_value_t = 250)]
    pub pool_warm_up_ms: u64,
    /// Volume slots baked into templates (0–3): how many volumes a sandbox can mount. Catalog
    /// templates baked with another number are baked again on first use.
    #[arg(
        long,
        env = "PANDASTACK_VOLUME_SLOTS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u32).range(0..=3)
    )]
    pub volume_slots: u32,
    /// Bound on each sandbox's console log (`GET …/logs`), in KiB: past it the oldest part is
    /// cut and the newest kept (0: unbounded).
    #[arg(long, env = "PANDASTACK_CONSOLE_LOG_MAX_KB", default_value_t = 1024)]
    pub console_log_max_kb: u64,
    /// How often the host reads each running VM's CPU, memory, disk and network use for
    /// `GET …/metrics`, in ms (0: never).
    #[arg(long, env = "PANDASTACK_SAMPLE_INTERVAL_MS", default_value_t = 5000)]
    pub sample_interval_ms: u64,
    /// Bound on each VM process's own log (QEMU's messages, `qemu.log` in its run directory),
    /// in KiB: past it the oldest part is cut. It is read only for error messages.
    #[arg(long, env = "PANDASTACK_VM_LOG_MAX_KB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(4..))]
    pub vm_log_max_kb: u64,
    /// How fast each VM may read and write its disks (root disk and volumes) together, in
    /// MiB/s (QEMU's throttling, one group per VM), unless its template or its create names
    /// its own; 0 for no limit.
    #[arg(long, env = "PANDASTACK_VM_DISK_MBPS", default_value_t = 128)]
    pub vm_disk_mbps: u64,
    /// Read and write requests per second each VM may make of its disks together, unless its
    /// template or its create names its own; 0 for no limit.
    #[arg(long, env = "PANDASTACK_VM_DISK_IOPS", default_value_t = 4096)]
    pub vm_disk_iops: u64,
    /// Sandbox networking: `auto` gives every sandbox its own network namespace, TAP and NAT
    /// when the host allows it (root, nftables) and runs without network otherwise; `on`
    /// refuses to start without it; `off` gives VMs no NIC.
    #[arg(long, value_enum, default_value_t = NetworkMode::Auto)]
    pub network: NetworkMode,
    /// Names this server's network objects: namespaces `<name>-N`, host veths `<name>vN`,
    /// nftables table `pandastack_<name>`. Servers sharing a host need different names.
    #[arg(long, default_value = "ps")]
    pub net_name: String,
    /// Address range carved into one /30 per sandbox (must not overlap anything the host
    /// routes; servers sharing a host need disjoint ranges).
    #[arg(long, default_value = "10.200.0.0/16")]
    pub net_base: pandastack_net::Ipv4Cidr,
    /// Network slots built ahead of demand, off the create path.
    #[arg(long, default_value_t = 8)]
    pub net_spare: usize,
    /// Per-VM cgroups with memory, CPU and pids limits from the sandbox shape: `auto` uses them
    /// when the host has the controllers (cgroup v2, else v1), `off` does not.
    #[arg(long, value_enum, default_value_t = CgroupMode::Auto)]
    pub cgroups: CgroupMode,
    /// Under TCG, each VM process's cache of translated guest code, MiB (resident only as far
    /// as the guest's code fills it; counted in the VM's memory limit). Too small a cache is
    /// flushed over and over by large programs (Node, compilers): 32 made `npm install` 2.4x
    /// slower than 256.
    #[arg(long, env = "PANDASTACK_TCG_TB_SIZE_MIB", default_value_t = pandastack_qemu::DEFAULT_TCG_TB_SIZE_MIB,
          value_parser = clap::value_parser!(u32).range(16..=4096))]
    pub tcg_tb_size_mib: u32,
    /// The uids (each VM's gid is the same number) VM processes run as, one per process,
    /// `FIRST-LAST`; each QEMU drops to its own once it has opened its devices and chroots
    /// into its run directory. `off` runs them as this server's user (not for untrusted code).
    /// Claims are shared by every server on the host (`/run/pandastack/vm-uids`).
    #[arg(long, env = "PANDASTACK_VM_UIDS", default_value = "4200000-4265535")]
    pub vm_uids: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CgroupMode {
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkMode {
    Auto,
    On,
    Off,
}

/// A started host: its agent, the same as a `Host`, the accelerator its guests run under and
/// the guest kernel they boot.
pub struct StartedHost {
    pub agent: Arc<HostAgent<QemuDriver>>,
    pub host: Arc<dyn pandastack_host::Host>,
    pub accel: pandastack_vm::Accel,
    pub kernel: PathBuf,
}

/// Starts this host's agent over QEMU (the accelerator decided by booting): keeps the files of
/// the sandboxes `keep` names (by id) and removes the rest, bakes again templates whose
/// memory image changed, fills the pools and starts the console trimmer and the watch for
/// powered-off guests.
pub async fn start_host(
    a: &LocalHostArgs,
    keep: impl Fn(&str) -> bool,
    objects: pandastack_objects::Objects,
) -> anyhow::Result<StartedHost> {
    let kernel = a
        .kernel
        .clone()
        .or_else(super::doctor::cached_kernel)
        .context("no guest kernel: run scripts/setup-host.sh or pass --kernel")?;
    let guest_agent = match a.guest_agent.clone() {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("pandastack-guest"),
    };
    let templates_dir = a
        .templates_dir
        .clone()
        .or_else(|| {
            super::template::template_dirs()
                .into_iter()
                .find(|d| d.is_dir())
        })
        .unwrap_or_else(|| PathBuf::from("templates"));
    let choice = accel::detect(Path::new("qemu-system-x86_64"), &kernel).await;
    tracing::info!(accel = %choice.accel, reason = %choice.reason, "accelerator");
    let data =
        DataDir::open(&a.data_dir).with_context(|| format!("data dir {}", a.data_dir.display()))?;
    let mut qemu = QemuConfig::new(choice.accel);
    qemu.tcg_tb_size_mib = a.tcg_tb_size_mib;
    qemu.log_max_bytes = a.vm_log_max_kb << 10;
    qemu.disk_limits = pandastack_qemu::DiskLimits {
        bytes_per_sec: a.vm_disk_mbps.saturating_mul(1 << 20),
        iops: a.vm_disk_iops,
    };
    qemu.identities = vm_identities(&a.vm_uids)?;
    if a.cgroups == CgroupMode::Auto {
        match pandastack_qemu::Cgroups::detect() {
            Some(c) => {
                let swept = c.sweep();
                tracing::info!(version = c.version(), swept, "per-VM cgroups on");
                qemu.cgroups = Some(c);
            }
            None => tracing::warn!(
                "no cgroup memory/cpu/pids controllers found: VM processes run without limits"
            ),
        }
    }
    let warm_up = (a.pool_warm_up_ms > 0).then(|| Duration::from_millis(a.pool_warm_up_ms));
    let disk_limits = qemu.disk_limits;
    let mut rt = Runtime::new(QemuDriver::new(qemu), data, kernel.clone())
        .with_pool_warm_up(warm_up)
        .with_disk_limits(disk_limits);
    if let Some(pool) = open_network(a).await? {
        rt = rt.with_network(pool);
    }
    let cfg = AgentConfig {
        templates_dir,
        guest_agent,
        pool_size: a.pool_size,
        volume_slots: a.volume_slots,
        objects: Some(objects),
    };
    let (agent, report) = HostAgent::start(rt, cfg, |f| keep(&f.id)).await?;
    if !report.removed.is_empty() || report.leftovers > 0 {
        tracing::info!(removed = ?report.removed, leftovers = report.leftovers, "reconciled data dir");
    }
    let agent = Arc::new(agent);
    // Templates whose memory image changed since their bake (or that predate the seals) are
    // baked again before anything restores them.
    let checked = std::time::Instant::now();
    let builds_dir = a.data_dir.join("builds");
    let rebaking = agent
        .verify_templates(|name| Some(builds_dir.join(name).join("rootfs.ext4")))
        .await
        .context("verify baked templates")?;
    tracing::info!(
        took_ms = checked.elapsed().as_secs_f64() * 1e3,
        baking_again = rebaking.len(),
        "baked templates verified"
    );
    {
        let agent = Arc::clone(&agent);
        tokio::spawn(async move {
            if let Err(e) = agent.fill_pools().await {
                tracing::warn!(error = &e as &dyn std::error::Error, "pool fill");
            }
        });
    }
    tokio::spawn(Arc::clone(&agent).trim_consoles_forever(a.console_log_max_kb << 10));
    tokio::spawn(Arc::clone(&agent).stop_powered_off_forever());
    if a.sample_interval_ms > 0 {
        let every = Duration::from_millis(a.sample_interval_ms);
        tokio::spawn(Arc::clone(&agent).sample_forever(every));
    }
    let host: Arc<dyn pandastack_host::Host> =
        Arc::new(pandastack_agent::LocalHost(Arc::clone(&agent)));
    Ok(StartedHost {
        agent,
        host,
        accel: choice.accel,
        kernel,
    })
}

/// Opens `--objects` (default `file://<data-dir>/objects`). A URL that cannot be opened fails
/// the start; a store that does not answer (network, credentials) only warns, since nothing
/// needs it to serve sandboxes.
pub async fn open_objects(a: &LocalHostArgs) -> anyhow::Result<pandastack_objects::Objects> {
    let url = match &a.objects {
        Some(url) => url.clone(),
        None => {
            let dir = std::path::absolute(&a.data_dir)
                .with_context(|| format!("data dir {}", a.data_dir.display()))?;
            format!("file://{}", dir.join("objects").display())
        }
    };
    let objects = pandastack_objects::Objects::open(&url).context("object store (--objects)")?;
    match objects.check().await {
        Ok(()) => tracing::info!(store = %objects.describe(), "object store open"),
        Err(e) => tracing::warn!(
            store = %objects.describe(),
            error = &e as &dyn std::error::Error,
            "object store does not answer"
        ),
    }
    Ok(objects)
}

/// Opens the pool of per-sandbox network slots (see `pandastack-net`) as `--network` asks, and
/// builds `--net-spare` slots in the background.
async fn open_network(a: &LocalHostArgs) -> anyhow::Result<Option<Arc<pandastack_net::NetPool>>> {
    if a.network == NetworkMode::Off {
        tracing::info!("sandbox networking off (--network off): VMs have no NIC");
        return Ok(None);
    }
    let name = &a.net_name;
    let mut cfg = pandastack_net::NetConfig::new(a.data_dir.join("net"));
    cfg.base = a.net_base;
    cfg.ns_prefix = format!("{name}-");
    cfg.veth_prefix = format!("{name}v");
    cfg.nft_table = if name == "ps" {
        "pandastack".into()
    } else {
        format!("pandastack_{name}")
    };
    match pandastack_net::NetPool::open(cfg).await {
        Ok(pool) => {
            let pool = Arc::new(pool);
            let spare = a.net_spare;
            let p = Arc::clone(&pool);
            tokio::spawn(async move {
                if let Err(e) = p.ensure(spare).await {
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "building spare network slots"
                    );
                }
            });
            tracing::info!(base = %a.net_base, name = %name, "sandbox networking on");
            Ok(Some(pool))
        }
        Err(e) if a.network == NetworkMode::Auto => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "sandbox networking unavailable; VMs get no NIC (run as root with nftables, or \
                 pass --network on to make this fatal)"
            );
            Ok(None)
        }
        Err(e) => Err(anyhow::Error::new(e).context("sandbox networking (--network on)")),
    }
}

/// The VM uid pool of `--vm-uids`.
fn vm_identities(spec: &str) -> anyhow::Result<Option<Arc<pandastack_qemu::VmIdentities>>> {
    use pandastack_qemu::{confine, VmIdentities};
    if spec == "off" {
        tracing::warn!("--vm-uids off: VM processes run as this server's user, unconfined");
        return Ok(None);
    }
    if !rustix::process::geteuid().is_root() {
        tracing::warn!("not running as root: VM processes run as this server's user");
        return Ok(None);
    }
    let (first, count) =
        VmIdentities::parse_range(spec).map_err(|e| anyhow::anyhow!("--vm-uids: {e}"))?;
    let ids = VmIdentities::new(first, count, confine::DEFAULT_LOCK_DIR)?;
    match ids.landlock() {
        true => tracing::info!(
            first,
            count,
            "VM processes run as their own uid from exec, no capabilities, under Landlock"
        ),
        false => tracing::warn!(
            first,
            count,
            "no Landlock in this kernel: VM processes start as root, chroot and drop to their uid"
        ),
    }
    Ok(Some(Arc::new(ids)))
}
