//! `Agent`: health, post-restore identity, network, sync, detach, shutdown.

use std::sync::Arc;
use std::time::Duration;

use pandastack_guest_proto::v1::{self, agent_server::Agent};
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use super::State;

pub struct AgentService {
    state: State,
    /// Ends the session this service instance belongs to.
    detach: Arc<Notify>,
}

impl AgentService {
    pub fn new(state: State, detach: Arc<Notify>) -> Self {
        Self { state, detach }
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn uptime_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn health(&self, _: Request<v1::Empty>) -> Result<Response<v1::HealthResponse>, Status> {
        Ok(Response::new(v1::HealthResponse {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol_version: pandastack_guest_proto::PROTOCOL_VERSION,
            uptime_ms: uptime_ms(),
            hostname: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            machine_id: read_trim("/etc/machine-id"),
            boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
        }))
    }

    async fn stats(&self, _: Request<v1::Empty>) -> Result<Response<v1::StatsResponse>, Status> {
        let stats = tokio::task::spawn_blocking(super::stats::read)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(stats))
    }

    async fn post_restore(
        &self,
        req: Request<v1::PostRestoreRequest>,
    ) -> Result<Response<v1::PostRestoreResponse>, Status> {
        let step_ms = apply_post_restore(&self.state, req.into_inner()).await?;
        Ok(Response::new(v1::PostRestoreResponse {
            clock_step_ms: step_ms,
        }))
    }

    async fn configure_network(
        &self,
        req: Request<v1::NetworkConfig>,
    ) -> Result<Response<v1::Empty>, Status> {
        super::net::configure(&req.into_inner()).await?;
        Ok(Response::new(v1::Empty {}))
    }

    async fn sync(&self, _: Request<v1::Empty>) -> Result<Response<v1::Empty>, Status> {
        tokio::task::spawn_blocking(nix::unistd::sync)
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(v1::Empty {}))
    }

    async fn detach(&self, _: Request<v1::Empty>) -> Result<Response<v1::Empty>, Status> {
        // A stored permit: the session sees it even if it is not waiting at this instant.
        self.detach.notify_one();
        Ok(Response::new(v1::Empty {}))
    }

    async fn shutdown(
        &self,
        req: Request<v1::ShutdownRequest>,
    ) -> Result<Response<v1::Empty>, Status> {
        let pid1 = self.state.pid1();
        let reboot = req.into_inner().reboot;
        tokio::spawn(async move {
            // Let the answer reach the host first.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if pid1 {
                crate::init::power_off(reboot).await;
            } else {
                std::process::exit(0);
            }
        });
        Ok(Response::new(v1::Empty {}))
    }
}

/// How long after a restore that turns free-page reporting on the driver is bound.
const REPORTING_ON_DELAY: std::time::Duration = std::time::Duration::from_secs(2);

/// The post-restore hook: checks `req`, steps the clock, reseeds the RNG, marks the restore,
/// applies a new hostname, machine id and network if given, and turns free-page reporting on
/// or off if asked (`crate::services::balloon`). Returns the clock step in ms. Run
/// by `Agent.PostRestore` and by a session's RESTORE line (`crate::session`).
pub async fn apply_post_restore(state: &State, req: v1::PostRestoreRequest) -> Result<i64, Status> {
    if req.entropy.len() < 32 {
        return Err(Status::invalid_argument(
            "entropy: at least 32 bytes required",
        ));
    }
    if !req.machine_id.is_empty() && !valid_machine_id(&req.machine_id) {
        return Err(Status::invalid_argument(
            "machine_id: 32 lowercase hex characters",
        ));
    }
    if !req.hostname.is_empty() && !valid_hostname(&req.hostname) {
        return Err(Status::invalid_argument(
            "hostname: 1-63 characters of [A-Za-z0-9-], not starting with '-'",
        ));
    }
    if let Some(net) = &req.network {
        super::net::check(net)?;
    }
    // Outside a VM (`serve`, the host-side tests and the test kit's fake VMs) the clock is
    // the host's: it is not stepped.
    let step_ms = if req.unix_time_ns > 0 && state.pid1() {
        step_clock(req.unix_time_ns).map_err(|e| io_status("set clock", e))?
    } else {
        0
    };
    reseed(&req.entropy).map_err(|e| io_status("reseed rng", e))?;
    if state.pid1() {
        // Processes restored with the VM (a function's runtime) reseed their own
        // generators when this changes: a clone of a baked process shares its RNG state.
        let mark = format!("{}-{}\n", req.unix_time_ns, hex8(&req.entropy));
        let _ = std::fs::create_dir_all("/run/pandastack");
        if let Err(e) = std::fs::write(RESTORED_MARK, mark) {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "write {RESTORED_MARK}"
            );
        }
    }
    if !req.hostname.is_empty() {
        set_hostname(&req.hostname).map_err(|e| io_status("set hostname", e))?;
    }
    if !req.machine_id.is_empty() {
        std::fs::write("/etc/machine-id", format!("{}\n", req.machine_id))
            .map_err(|e| io_status("write /etc/machine-id", e))?;
    }
    let reporting = req.free_page_reporting();
    if let Some(net) = req.network {
        super::net::configure(&net).await?;
    }
    // Outside a VM the bus is the host's: left alone. Off is applied before the answer: the
    // host bakes templates with reporting off, so a clone of one finds nothing to unbind (an
    // image baked before that unbinds here once, 60-100 ms under TCG, rather than racing its
    // first command for the vCPU). On — a woken sandbox's memory is its own again — waits
    // REPORTING_ON_DELAY in the background: binding (30-50 ms under TCG) must not compete with
    // the requests that woke it. A failure is logged, not answered: the restore is good either
    // way, and the host has no better setting to retry.
    if state.pid1() && reporting != v1::FreePageReporting::Unspecified {
        let apply = move || {
            let t = std::time::Instant::now();
            match super::balloon::apply(std::path::Path::new(super::balloon::VIRTIO_BUS), reporting)
            {
                Ok(changed) => tracing::debug!(
                    ?reporting,
                    ?changed,
                    ms = t.elapsed().as_secs_f64() * 1e3,
                    "free-page reporting set"
                ),
                Err(e) => tracing::warn!(
                    ?reporting,
                    error = &e as &dyn std::error::Error,
                    "set free-page reporting"
                ),
            }
        };
        if reporting == v1::FreePageReporting::Off {
            let _ = tokio::task::spawn_blocking(apply).await;
        } else {
            tokio::spawn(async move {
                tokio::time::sleep(REPORTING_ON_DELAY).await;
                let _ = tokio::task::spawn_blocking(apply).await;
            });
        }
    }
    tracing::info!(step_ms, hostname = %req.hostname, "post-restore identity applied");
    Ok(step_ms)
}

fn io_status(what: &str, e: std::io::Error) -> Status {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        Status::permission_denied(format!("{what}: {e}"))
    } else {
        Status::internal(format!("{what}: {e}"))
    }
}

fn valid_machine_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn valid_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with('-')
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Sets the hostname and the files that name it.
pub fn set_hostname(name: &str) -> std::io::Result<()> {
    nix::unistd::sethostname(name)?;
    std::fs::write("/etc/hostname", format!("{name}\n"))?;
    let hosts = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let mut out: Vec<String> = hosts
        .lines()
        .filter(|l| !l.starts_with("127.0.1.1"))
        .map(str::to_owned)
        .collect();
    if !out.iter().any(|l| l.starts_with("127.0.0.1")) {
        out.insert(0, "127.0.0.1\tlocalhost".into());
    }
    out.push(format!("127.0.1.1\t{name}"));
    std::fs::write("/etc/hosts", out.join("\n") + "\n")
}

/// Steps CLOCK_REALTIME to `unix_ns`; returns the step in ms.
fn step_clock(unix_ns: i64) -> std::io::Result<i64> {
    use nix::time::{clock_gettime, clock_settime, ClockId};
    let now = clock_gettime(ClockId::CLOCK_REALTIME)?;
    let now_ns = now.tv_sec() * 1_000_000_000 + now.tv_nsec();
    let ts = nix::sys::time::TimeSpec::new(unix_ns / 1_000_000_000, unix_ns % 1_000_000_000);
    clock_settime(ClockId::CLOCK_REALTIME, ts)?;
    Ok((unix_ns - now_ns) / 1_000_000)
}

/// Written with a new value after every restore (see `post_restore`).
const RESTORED_MARK: &str = "/run/pandastack/restored";

/// A value that differs per restore without giving the entropy away: an FNV-1a hash of it,
/// 8 hex digits.
fn hex8(entropy: &[u8]) -> String {
    let h = entropy.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    });
    format!("{h:08x}")
}

/// Mixes `entropy` into the kernel RNG, credits it, and forces the CRNG to reseed, so clones of
/// one snapshot stop sharing RNG state.
fn reseed(entropy: &[u8]) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const RNDADDENTROPY: libc::c_ulong = 0x4008_5203; // _IOW('R', 0x03, int[2])
    const RNDRESEEDCRNG: libc::c_ulong = 0x5207; // _IO('R', 0x07)
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/urandom")?;
    // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
    let mut info = Vec::with_capacity(8 + entropy.len());
    info.extend_from_slice(&((entropy.len() * 8) as i32).to_ne_bytes());
    info.extend_from_slice(&(entropy.len() as i32).to_ne_bytes());
    info.extend_from_slice(entropy);
    // Keep the buffer 4-byte aligned in length, as the kernel reads __u32 words.
    while info.len() % 4 != 0 {
        info.push(0);
    }
    // SAFETY: `info` is a valid rand_pool_info: two ints followed by buf_size bytes, alive for the
    // call; the kernel only reads from it.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), RNDADDENTROPY as _, info.as_ptr()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: RNDRESEEDCRNG takes no argument.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), RNDRESEEDCRNG as _) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_identity_fields() {
        assert!(valid_machine_id(&"a1".repeat(16)));
        assert!(!valid_machine_id("A1"));
        assert!(!valid_machine_id(&"g".repeat(32)));
        assert!(valid_hostname("sb-12"));
        assert!(!valid_hostname("a b"));
        assert!(!valid_hostname(&"a".repeat(64)));
        assert!(!valid_hostname("-x"));
        assert!(!valid_hostname("a/b"));
    }
}
