//! `pandastack sandbox metrics` and `pandastack sandbox top`: a sandbox's resource use over
//! time as JSON, and a table of running sandboxes' use now, refreshed until interrupted.

use std::io::IsTerminal;
use std::time::Duration;

use pandastack_client::types::{MetricPoint, SandboxState};
use pandastack_client::{Client, ListSandboxes, MetricsOf};

use super::client_util::{print_json, print_table};

#[derive(Debug, clap::Args)]
pub(super) struct MetricsArgs {
    /// Sandbox id.
    id: String,
    /// From when: an RFC 3339 time, or a span back such as 90s, 15m, 1h [server default: 10m].
    #[arg(long)]
    since: Option<String>,
    /// Seconds per point [server default: 5].
    #[arg(long)]
    step: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub(super) struct TopArgs {
    /// Sandbox ids [default: every running sandbox of the workspace].
    ids: Vec<String>,
    /// Print the table once and exit.
    #[arg(long)]
    once: bool,
    /// Seconds between refreshes (and per point).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    interval: u64,
    /// Print JSON: the newest point of each sandbox (with `--once`).
    #[arg(long)]
    json: bool,
}

pub(super) async fn metrics(c: &Client, a: MetricsArgs) -> anyhow::Result<()> {
    let m = c
        .metrics(MetricsOf::Sandbox, &a.id, a.since.as_deref(), a.step)
        .await?;
    print_json(&m)
}

/// `n` bytes in binary units with one decimal (`1.5 GiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn used_of(used: Option<u64>, total: Option<u64>) -> String {
    match (used, total) {
        (Some(u), Some(t)) => format!("{}/{}", bytes(u), bytes(t)),
        _ => "-".into(),
    }
}

/// One table row of a sandbox's newest point (`None`: no reading yet).
fn row(id: &str, state: &str, p: Option<&MetricPoint>, step: u64) -> Vec<String> {
    let Some(p) = p else {
        return vec![
            id.into(),
            state.into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ];
    };
    let guest_used = match (p.mem_total_bytes, p.mem_available_bytes) {
        (Some(t), Some(a)) => Some(t.saturating_sub(a)),
        _ => None,
    };
    let rate = |b: Option<u64>| b.map_or("-".into(), |b| format!("{}/s", bytes(b / step.max(1))));
    vec![
        id.into(),
        state.into(),
        format!("{:.1}", p.cpu_pct),
        bytes(p.mem_bytes),
        used_of(guest_used, p.mem_total_bytes),
        used_of(p.disk_bytes, p.disk_total_bytes),
        format!("{} {}", rate(p.net_rx), rate(p.net_tx)),
    ]
}

pub(super) async fn top(c: &Client, a: TopArgs) -> anyhow::Result<()> {
    let tty = std::io::stdout().is_terminal() && !a.once;
    let since = format!("{}s", (a.interval * 3).max(30));
    loop {
        let ids = if a.ids.is_empty() {
            let q = ListSandboxes {
                state: Some(SandboxState::Running),
                ..Default::default()
            };
            c.list_all_sandboxes(&q)
                .await?
                .into_iter()
                .map(|s| s.id)
                .collect()
        } else {
            a.ids.clone()
        };
        let mut rows = Vec::new();
        let mut newest = serde_json::Map::new();
        for id in &ids {
            let m = c
                .metrics(MetricsOf::Sandbox, id, Some(&since), Some(a.interval))
                .await?;
            let p = m.samples.last();
            newest.insert(id.clone(), serde_json::to_value(p)?);
            rows.push(row(id, &m.state, p, m.step));
        }
        if a.json {
            print_json(&newest)?;
        } else {
            if tty {
                // Clear the screen and go home before each refresh.
                print!("\x1b[2J\x1b[H");
            }
            print_table(
                &[
                    "ID",
                    "STATE",
                    "CPU%",
                    "HOST MEM",
                    "GUEST MEM",
                    "DISK",
                    "NET RX TX",
                ],
                &rows,
            );
        }
        if a.once || a.json {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(a.interval)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        let p = MetricPoint {
            t: "2026-12-04T00:00:00Z".into(),
            cpu_pct: 12.34,
            vcpus: 1,
            mem_bytes: 200 << 20,
            pss_bytes: 100 << 20,
            mem_total_bytes: Some(1 << 30),
            mem_available_bytes: Some(768 << 20),
            disk_bytes: Some(1 << 30),
            disk_total_bytes: Some(4 << 30),
            net_rx: Some(10 << 10),
            net_tx: None,
        };
        assert_eq!(
            row("sb-1", "running", Some(&p), 5),
            [
                "sb-1",
                "running",
                "12.3",
                "200.0 MiB",
                "256.0 MiB/1.0 GiB",
                "1.0 GiB/4.0 GiB",
                "2.0 KiB/s -"
            ]
        );
        assert_eq!(row("sb-2", "running", None, 5)[2], "-");
    }
}
