//! Resource use over time: `GET /v1/{sandboxes,databases,apps,functions}/{id}/metrics`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{field_error, FieldError};

/// The shortest `step` (seconds).
pub const MIN_METRICS_STEP: u64 = 1;
/// The longest `step` (seconds): a day.
pub const MAX_METRICS_STEP: u64 = 86_400;
/// How far back `since` may reach (seconds): what a host keeps.
pub const MAX_METRICS_SPAN: u64 = 6 * 3600;

/// One point of a resource's use: the readings within `[t, t + step)` of every VM it has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MetricPoint {
    /// Start of the step (RFC 3339).
    pub t: String,
    /// CPU time the VM processes used in the step, in percent of their vCPUs' time (100: every
    /// vCPU busy all the step). QEMU's own threads count too, so it can pass 100 briefly.
    pub cpu_pct: f64,
    /// vCPUs of the VMs read.
    pub vcpus: u32,
    /// Host memory the VM processes hold (RSS), at the step's last reading.
    pub mem_bytes: u64,
    /// Their proportional set size: memory shared with other VMs (a template's) divided among
    /// them.
    pub pss_bytes: u64,
    /// Memory the guests have and what they say is available to start programs (`None`: no
    /// guest answered).
    pub mem_total_bytes: Option<u64>,
    pub mem_available_bytes: Option<u64>,
    /// The guests' root filesystems: used and size.
    pub disk_bytes: Option<u64>,
    pub disk_total_bytes: Option<u64>,
    /// Bytes the guests received and sent over their network within the step (`None`: no NIC).
    pub net_rx: Option<u64>,
    pub net_tx: Option<u64>,
}

/// One VM's points, for a resource with several (an app's instances, a function's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InstanceMetrics {
    pub sandbox_id: String,
    /// The VM's state now.
    pub state: String,
    pub samples: Vec<MetricPoint>,
}

/// A resource's use over time. For a sandbox, `state` and the `host_*`/`cpu_time_ms` figures
/// are its VM's now (as before this history existed); for an app, a function or a database,
/// `samples` sums its VMs, listed one by one in `instances`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Metrics {
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_rss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pss_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_ms: Option<u64>,
    /// Seconds per point.
    pub step: u64,
    /// Oldest first.
    pub samples: Vec<MetricPoint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceMetrics>,
}

/// `step` as given (seconds), checked.
pub fn metrics_step(v: Option<&str>, default: u64) -> Result<u64, FieldError> {
    let Some(v) = v else { return Ok(default) };
    let n: u64 = v
        .parse()
        .map_err(|_| field_error("step", "a whole number of seconds"))?;
    if !(MIN_METRICS_STEP..=MAX_METRICS_STEP).contains(&n) {
        return Err(field_error(
            "step",
            format!("between {MIN_METRICS_STEP} and {MAX_METRICS_STEP} seconds"),
        ));
    }
    Ok(n)
}

/// How far back a relative `since` (`90s`, `15m`, `1h`) reaches, in seconds; `None` for any
/// other text (an RFC 3339 time, parsed by the server).
pub fn relative_since(v: &str) -> Option<Result<u64, FieldError>> {
    let (n, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit())?);
    let mult = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    let secs = n.parse::<u64>().ok().map(|n| n.saturating_mul(mult));
    Some(match secs {
        Some(s) if s > 0 && s <= MAX_METRICS_SPAN => Ok(s),
        _ => Err(field_error(
            "since",
            format!("a span of 1s to {}h back", MAX_METRICS_SPAN / 3600),
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_spans_are_checked() {
        assert_eq!(metrics_step(None, 5), Ok(5));
        assert_eq!(metrics_step(Some("60"), 5), Ok(60));
        assert!(metrics_step(Some("0"), 5).is_err());
        assert!(metrics_step(Some("1.5"), 5).is_err());
        assert!(metrics_step(Some("86401"), 5).is_err());
        assert_eq!(relative_since("15m"), Some(Ok(900)));
        assert_eq!(relative_since("1h"), Some(Ok(3600)));
        assert!(matches!(relative_since("7h"), Some(Err(_))));
        assert!(matches!(relative_since("0s"), Some(Err(_))));
        assert_eq!(relative_since("2026-12-04T10:00:00Z"), None);
        assert_eq!(relative_since("15"), None);
    }
}
