//! Templates on a running server (through the API): `template push` builds one there from an
//! OCI image tarball or a spec and follows the build; `template bake`, `template logs`,
//! `template rm`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use pandastack_client::types::{OciTemplateParams, Template};
use pandastack_client::Client;

use super::client_util::{client, print_json, run_reported, ConnArgs, Spinner};

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Template name (a new version if it exists); default: the spec's name.
    name: Option<String>,
    /// An OCI image layout or `docker save` tarball (plain or gzip).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "spec",
        required_unless_present = "spec"
    )]
    oci: Option<PathBuf>,
    /// A template spec (TOML; Debian packages and inline files only over the API).
    #[arg(long, value_name = "FILE")]
    spec: Option<PathBuf>,
    /// vCPUs (tarball builds; a spec says its own).
    #[arg(long)]
    cpu: Option<u32>,
    /// Memory in MiB (tarball builds).
    #[arg(long)]
    memory_mb: Option<u32>,
    /// Root filesystem size in MiB (tarball builds; default: the image plus room).
    #[arg(long)]
    disk_mb: Option<u32>,
    /// One line describing the template (tarball builds).
    #[arg(long)]
    description: Option<String>,
    /// Return once the build is queued instead of following it.
    #[arg(long)]
    no_wait: bool,
    /// Print the template as JSON when done.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct NameArgs {
    #[command(flatten)]
    conn: ConnArgs,
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `template push`.
pub async fn push(a: PushArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    run_reported(&config, async {
        let c = client(&config)?;
        let queued = match (&a.oci, &a.spec) {
            (Some(tar), _) => {
                let name = a
                    .name
                    .clone()
                    .context("a tarball build needs a template name")?;
                let params = OciTemplateParams {
                    name,
                    description: a.description.clone(),
                    cpu: a.cpu,
                    memory_mb: a.memory_mb,
                    disk_mb: a.disk_mb,
                };
                let size = std::fs::metadata(tar)
                    .with_context(|| format!("cannot read {}", tar.display()))?
                    .len();
                let _spin = Spinner::start(&format!("uploading {} MiB", size >> 20));
                c.build_template_from_tarball(&params, tar).await?
            }
            (None, Some(spec)) => {
                let text = std::fs::read_to_string(spec)
                    .with_context(|| format!("cannot read {}", spec.display()))?;
                c.build_template_from_spec(a.name.as_deref(), &text).await?
            }
            (None, None) => anyhow::bail!("give --oci FILE or --spec FILE"),
        };
        eprintln!(
            "template {} version {}: {}",
            queued.name,
            queued.version.unwrap_or(0),
            queued.state
        );
        let done = if a.no_wait {
            queued
        } else {
            follow(&c, &queued.name).await?
        };
        if a.json {
            print_json(&done)?;
        }
        Ok(if done.state == "failed" {
            eprintln!(
                "error: build failed: {}",
                done.error
                    .as_deref()
                    .unwrap_or("see `pandastack template logs`")
            );
            ExitCode::FAILURE
        } else {
            if !a.json {
                println!("{}", done.name);
            }
            ExitCode::SUCCESS
        })
    })
    .await
}

/// Prints the build log as it grows (on stderr) until the build ends; returns the template.
async fn follow(c: &Client, name: &str) -> anyhow::Result<Template> {
    let mut shown = 0;
    loop {
        let t = c.get_template(name).await?;
        let log = c.template_log(name).await?;
        if log.len() > shown {
            eprint!("{}", &log[shown..]);
            shown = log.len();
        }
        if !matches!(t.state.as_str(), "queued" | "building" | "baking") {
            return Ok(t);
        }
        let _spin = Spinner::start(&t.state);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `template bake`.
pub async fn bake(a: NameArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    run_reported(&config, async {
        let t = {
            let _spin = Spinner::start(&format!("baking {}", a.name));
            client(&config)?.bake_template(&a.name).await?
        };
        if a.json {
            print_json(&t)?;
        } else {
            println!(
                "{}: {} (bake {} ms)",
                t.name,
                t.state,
                t.bake_ms.unwrap_or(0)
            );
        }
        Ok(ExitCode::SUCCESS)
    })
    .await
}

/// `template logs`.
pub async fn logs(a: NameArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    run_reported(&config, async {
        print!("{}", client(&config)?.template_log(&a.name).await?);
        Ok(ExitCode::SUCCESS)
    })
    .await
}

/// `template rm`.
pub async fn rm(a: NameArgs) -> anyhow::Result<ExitCode> {
    let config = a.conn.config()?;
    run_reported(&config, async {
        client(&config)?.delete_template(&a.name).await?;
        Ok(ExitCode::SUCCESS)
    })
    .await
}
