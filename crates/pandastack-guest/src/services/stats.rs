//! What the guest sees of its own memory and root filesystem, for the host's samples.

use pandastack_guest_proto::v1;

/// `MemTotal` and `MemAvailable` of a `/proc/meminfo` text, in bytes (0 for a missing line).
fn meminfo(text: &str) -> (u64, u64) {
    let kib = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
            .saturating_mul(1024)
    };
    (kib("MemTotal:"), kib("MemAvailable:"))
}

/// Reads the guest's figures. A file that cannot be read gives zeros for its fields, never an
/// error: the host's own figures of the sample stand without them.
pub(crate) fn read() -> v1::StatsResponse {
    let (mem_total_bytes, mem_available_bytes) =
        meminfo(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default());
    let (disk_total_bytes, disk_used_bytes) = match nix::sys::statvfs::statvfs("/") {
        Ok(s) => {
            let frag = s.fragment_size();
            let total = s.blocks().saturating_mul(frag);
            let free = s.blocks_free().saturating_mul(frag);
            (total, total.saturating_sub(free))
        }
        Err(_) => (0, 0),
    };
    v1::StatsResponse {
        mem_total_bytes,
        mem_available_bytes,
        disk_total_bytes,
        disk_used_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_gives_total_and_available_in_bytes() {
        let text = "MemTotal:         500000 kB\nMemFree:  100 kB\nMemAvailable:     250000 kB\n";
        assert_eq!(meminfo(text), (500_000 * 1024, 250_000 * 1024));
        assert_eq!(meminfo("garbage"), (0, 0));
    }

    #[test]
    fn the_root_filesystem_has_a_size() {
        let s = read();
        assert!(s.disk_total_bytes > 0);
        assert!(s.disk_used_bytes <= s.disk_total_bytes);
        assert!(s.mem_available_bytes <= s.mem_total_bytes);
    }
}
