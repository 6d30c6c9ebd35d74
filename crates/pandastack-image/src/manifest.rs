//! `manifest.json`, written next to every cached image: what was built, from what, how long it
//! took and how big it is. Its presence marks a finished image.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::spec::VmShape;

pub const MANIFEST_FILE: &str = "manifest.json";

/// How long one build step took.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    pub step: String,
    pub seconds: f64,
}

/// Lenient on read (unknown fields ignored), so newer builders can add fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    /// The spec hash (SHA-256, hex).
    pub hash: String,
    pub builder: String,
    pub description: String,
    pub suite: String,
    pub variant: String,
    /// The main archive the image was bootstrapped from.
    pub mirror: String,
    pub vm: VmShape,
    /// Size of the image file (its `disk_mb`).
    pub apparent_bytes: u64,
    /// Blocks the sparse image file really uses.
    pub allocated_bytes: u64,
    /// The root filesystem tree before packing.
    pub tree_bytes: u64,
    /// Packages fetched by apt while bootstrapping (approximate).
    pub downloaded_bytes: u64,
    pub steps: Vec<StepTiming>,
    pub build_seconds: f64,
    /// RFC 3339, UTC.
    pub built_at: String,
}

impl Manifest {
    pub fn read(dir: &Path) -> Option<Manifest> {
        let bytes = std::fs::read(dir.join(MANIFEST_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(MANIFEST_FILE), json)
    }
}

/// Now as RFC 3339 UTC (`2026-11-22T12:50:30Z`).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 UTC (Howard Hinnant's days-to-civil algorithm).
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_timestamps() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_351_830), "2026-11-22T12:50:30Z");
        assert_eq!(rfc3339(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
