//! `pandastack usage`: what the workspace of the API key used over a window (`GET /v1/usage`):
//! totals, or a table of groups with `--group-by`; `--csv` prints the server's CSV and `--json`
//! the whole answer (limits and counts too).

use std::process::ExitCode;

use pandastack_client::types::{MeteredUsage, UsageFigures};
use pandastack_client::UsageQuery;

use super::client_util::{client, print_json, print_table, run_reported, ConnArgs};

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Start of the window, RFC 3339 [default: the start of this month, UTC].
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// End of the window, RFC 3339 [default: now].
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// `none`, or a comma list of `kind`, `resource` and one of `day` or `hour`.
    #[arg(long, value_name = "DIMS")]
    group_by: Option<String>,
    /// Print the metered usage as CSV (a header row, then a row per group).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Print the whole answer as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: UsageArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    let q = UsageQuery {
        from: a.from.clone(),
        to: a.to.clone(),
        group_by: a.group_by.clone(),
    };
    run_reported(&config, async {
        let c = client(&config)?;
        if a.csv {
            print!("{}", c.usage_csv(&q).await?);
        } else {
            let u = c.usage(&q).await?;
            if a.json {
                print_json(&u)?;
            } else {
                print_metered(&u.metered);
            }
        }
        Ok(ExitCode::SUCCESS)
    })
    .await
}

const FIGURES: [&str; 8] = [
    "VCPU-S",
    "MEM-GIB-S",
    "STORAGE-GIB-H",
    "EGRESS-B",
    "INGRESS-B",
    "INVOCATIONS",
    "INVOCATION-S",
    "DATABASE-S",
];

fn cells(f: &UsageFigures) -> Vec<String> {
    vec![
        format!("{:.3}", f.vcpu_seconds),
        format!("{:.3}", f.memory_gib_seconds),
        format!("{:.6}", f.storage_gib_hours),
        f.egress_bytes.to_string(),
        f.ingress_bytes.to_string(),
        f.invocations.to_string(),
        format!("{:.3}", f.invocation_seconds),
        format!("{:.3}", f.database_seconds),
    ]
}

fn print_metered(m: &MeteredUsage) {
    println!("usage from {} to {}", m.from, m.to);
    let keys: Vec<&str> = m
        .group_by
        .iter()
        .filter(|d| d.as_str() != "kind" || !m.group_by.iter().any(|x| x == "resource"))
        .map(|d| match d.as_str() {
            "kind" => "KIND",
            "resource" => "RESOURCE",
            "day" => "DAY",
            _ => "HOUR",
        })
        .collect();
    let mut header: Vec<&str> = keys.clone();
    header.extend(FIGURES);
    let mut rows = Vec::new();
    for g in &m.groups {
        let mut row = Vec::new();
        for k in &keys {
            row.push(match *k {
                "KIND" => g.kind.clone().unwrap_or_default(),
                "RESOURCE" => format!(
                    "{}/{}",
                    g.kind.as_deref().unwrap_or(""),
                    g.resource_id.as_deref().unwrap_or("")
                ),
                _ => g.start.clone().unwrap_or_default(),
            });
        }
        row.extend(cells(&g.usage));
        rows.push(row);
    }
    let mut total: Vec<String> = keys.iter().map(|_| String::new()).collect();
    if let Some(first) = total.first_mut() {
        *first = "TOTAL".into();
    }
    total.extend(cells(&m.totals));
    rows.push(total);
    print_table(&header, &rows);
}
