//! `pandastack template build`: spec → cached rootfs image, with progress on stderr.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use pandastack_image::{build_base, rootfs_with_agent, Progress, TemplateSpec};

#[derive(Debug, clap::Args)]
pub struct TemplateArgs {
    #[command(subcommand)]
    what: TemplateWhat,
}

#[derive(Debug, clap::Subcommand)]
enum TemplateWhat {
    /// Build a template image from its spec (cached by the spec's hash). Prints the image path.
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// Template name (looked up in the templates directory) or a path to a spec (.toml).
    template: String,
    /// Install this guest agent binary into the image (prints that image's path).
    #[arg(long)]
    agent: Option<PathBuf>,
    /// Rebuild even if a cached image exists.
    #[arg(long)]
    force: bool,
    /// Print a JSON summary instead of the path.
    #[arg(long)]
    json: bool,
    /// Directory of template specs.
    #[arg(long, env = "PANDASTACK_TEMPLATES_DIR")]
    templates_dir: Option<PathBuf>,
}

pub async fn run(args: TemplateArgs) -> anyhow::Result<ExitCode> {
    match args.what {
        TemplateWhat::Build(a) => tokio::task::spawn_blocking(move || build(a)).await?,
    }
}

/// Finds the spec file for a name or path.
fn spec_path(template: &str, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    if template.ends_with(".toml") {
        return Ok(PathBuf::from(template));
    }
    let mut candidates = Vec::new();
    if let Some(d) = dir {
        candidates.push(d.to_owned());
    }
    candidates.push(PathBuf::from("templates"));
    if let Ok(exe) = std::env::current_exe() {
        // target/{debug,release}/pandastack → <repo>/templates
        if let Some(repo) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
            candidates.push(repo.join("templates"));
        }
    }
    candidates
        .iter()
        .map(|d| d.join(format!("{template}.toml")))
        .find(|p| p.is_file())
        .with_context(|| format!("no spec for template {template:?} (looked in {candidates:?})"))
}

fn build(a: BuildArgs) -> anyhow::Result<ExitCode> {
    let path = spec_path(&a.template, a.templates_dir.as_deref())?;
    let spec = TemplateSpec::load(&path)?;
    let started = Instant::now();
    let mut show = |p: Progress| {
        let mut e = std::io::stderr();
        let _ = match p {
            Progress::Cached { path } => {
                writeln!(e, "[template {}] cached: {}", spec.name, path.display())
            }
            Progress::Step { name } => writeln!(e, "[template {}] {name} …", spec.name),
            Progress::StepDone { name, elapsed } => writeln!(
                e,
                "[template {}] {name} done in {:.1} s",
                spec.name,
                elapsed.as_secs_f64()
            ),
            Progress::Downloaded { bytes } => writeln!(
                e,
                "[template {}]   downloaded {:.1} MiB",
                spec.name,
                bytes as f64 / 1048576.0
            ),
            Progress::Done { elapsed, .. } => writeln!(
                e,
                "[template {}] built in {:.1} s",
                spec.name,
                elapsed.as_secs_f64()
            ),
        };
    };
    let image = match &a.agent {
        Some(agent) => rootfs_with_agent(&spec, agent, a.force, &mut show)?,
        None => build_base(&spec, a.force, &mut show)?.path,
    };
    if a.json {
        use std::os::unix::fs::MetadataExt;
        let md = std::fs::metadata(&image)?;
        println!(
            "{}",
            serde_json::json!({
                "template": spec.name, "image": image, "apparent_bytes": md.len(),
                "allocated_bytes": md.blocks() * 512, "seconds": started.elapsed().as_secs_f64(),
                "vm": {"vcpus": spec.vm.vcpus, "memory_mb": spec.vm.memory_mb, "disk_mb": spec.vm.disk_mb},
            })
        );
    } else {
        println!("{}", image.display());
    }
    Ok(ExitCode::SUCCESS)
}
