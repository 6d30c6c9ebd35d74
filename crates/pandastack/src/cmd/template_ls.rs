//! `pandastack template ls`: the templates a running server offers, through `GET /v1/templates`.

use std::process::ExitCode;

use super::client_util::{client, print_json, print_table, run_reported, ConnArgs};

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: LsArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    run_reported(&config, async {
        let templates = client(&config)?.list_templates().await?;
        if a.json {
            print_json(&templates)?;
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<Vec<String>> = templates
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    t.source.clone(),
                    t.version.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                    t.state.clone(),
                    t.cpu.to_string(),
                    t.memory_mb.to_string(),
                    t.disk_mb.to_string(),
                    t.description.clone(),
                ]
            })
            .collect();
        print_table(
            &[
                "NAME",
                "SOURCE",
                "VERSION",
                "STATE",
                "CPU",
                "MEMORY_MB",
                "DISK_MB",
                "DESCRIPTION",
            ],
            &rows,
        );
        Ok(ExitCode::SUCCESS)
    })
    .await
}
