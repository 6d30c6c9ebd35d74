//! Guest network configuration through iproute2's `ip` (shipped in every template image).

use pandastack_guest_proto::v1;
use tonic::Status;

async fn ip(args: &[&str]) -> Result<(), Status> {
    let mut cmd = std::process::Command::new("ip");
    cmd.args(args);
    let (status, _, stderr) = crate::reaper::output(cmd)
        .await
        .map_err(|e| Status::failed_precondition(format!("run ip: {e}")))?;
    if status
        != nix::sys::wait::WaitStatus::Exited(
            status.pid().unwrap_or(nix::unistd::Pid::from_raw(0)),
            0,
        )
    {
        return Err(Status::internal(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&stderr).trim()
        )));
    }
    Ok(())
}

/// The first non-loopback interface.
fn default_interface() -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lo")
        .collect();
    names.sort();
    names.into_iter().next()
}

fn valid_cidr(s: &str) -> bool {
    let Some((addr, prefix)) = s.split_once('/') else {
        return false;
    };
    addr.parse::<std::net::IpAddr>().is_ok() && prefix.parse::<u8>().is_ok_and(|p| p <= 128)
}

/// Applies `cfg`: MAC, MTU, address, default route, resolv.conf.
pub async fn configure(cfg: &v1::NetworkConfig) -> Result<(), Status> {
    let dev = if cfg.interface.is_empty() {
        default_interface().ok_or_else(|| Status::failed_precondition("no network interface"))?
    } else {
        cfg.interface.clone()
    };
    if dev.contains('/') || !std::path::Path::new("/sys/class/net").join(&dev).exists() {
        return Err(Status::not_found(format!("interface {dev}")));
    }
    if !cfg.address_cidr.is_empty() && !valid_cidr(&cfg.address_cidr) {
        return Err(Status::invalid_argument(
            "address_cidr: expected ADDR/PREFIX",
        ));
    }
    if !cfg.gateway.is_empty() && cfg.gateway.parse::<std::net::IpAddr>().is_err() {
        return Err(Status::invalid_argument("gateway: not an IP address"));
    }
    ip(&["link", "set", "lo", "up"]).await?;
    if !cfg.mac.is_empty() {
        ip(&["link", "set", &dev, "down"]).await?;
        ip(&["link", "set", &dev, "address", &cfg.mac]).await?;
    }
    if cfg.mtu > 0 {
        ip(&["link", "set", &dev, "mtu", &cfg.mtu.to_string()]).await?;
    }
    ip(&["link", "set", &dev, "up"]).await?;
    if !cfg.address_cidr.is_empty() {
        ip(&["-4", "addr", "flush", "dev", &dev]).await?;
        ip(&["addr", "add", &cfg.address_cidr, "dev", &dev]).await?;
    }
    if !cfg.gateway.is_empty() {
        ip(&[
            "route",
            "replace",
            "default",
            "via",
            &cfg.gateway,
            "dev",
            &dev,
        ])
        .await?;
    }
    if !cfg.dns.is_empty() {
        let body: String = cfg
            .dns
            .iter()
            .map(|d| format!("nameserver {d}\n"))
            .collect();
        std::fs::write("/etc/resolv.conf", body)
            .map_err(|e| Status::internal(format!("resolv.conf: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn cidr() {
        assert!(super::valid_cidr("10.0.0.2/24"));
        assert!(super::valid_cidr("fd00::2/64"));
        assert!(!super::valid_cidr("10.0.0.2"));
        assert!(!super::valid_cidr("x/24"));
    }
}
