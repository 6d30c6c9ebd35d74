//! `pandastack template build`: spec → cached root filesystem image, progress on stderr, the
//! image path (or a JSON summary) on stdout.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use pandastack_image::{BuildOptions, ImageCache, Progress, TemplateSpec};

#[derive(Debug, clap::Args)]
pub struct TemplateArgs {
    #[command(subcommand)]
    command: TemplateCmd,
}

#[derive(Debug, clap::Subcommand)]
enum TemplateCmd {
    /// Build a template's root filesystem image (cached by the spec's hash) and print its path.
    Build(BuildArgs),
    /// List the templates a running server offers (through the API).
    Ls(super::template_ls::LsArgs),
    /// Build a template on a running server from an OCI image tarball or a spec, and follow it.
    Push(super::template_remote::PushArgs),
    /// Re-bake a template on a running server.
    Bake(super::template_remote::NameArgs),
    /// Print the newest build log of a template on a running server.
    Logs(super::template_remote::NameArgs),
    /// Delete a template you built (every version) on a running server.
    Rm(super::template_remote::NameArgs),
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// Template name (looked up as <templates dir>/<name>.toml) or a path to a spec file.
    template: String,
    /// Install this guest agent binary into the image and print that image's path.
    #[arg(long, value_name = "PATH")]
    agent: Option<PathBuf>,
    /// Rebuild even if the image is cached.
    #[arg(long)]
    force: bool,
    /// Print a JSON summary on stdout instead of the path.
    #[arg(long)]
    json: bool,
    /// Print every line of build output on stderr (it always goes to build.log).
    #[arg(long, short)]
    verbose: bool,
    /// Directory of template specs [default: ./templates, then the repository's templates/].
    #[arg(long, env = "PANDASTACK_TEMPLATES_DIR", value_name = "DIR")]
    templates_dir: Option<PathBuf>,
}

pub async fn run(args: TemplateArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        TemplateCmd::Build(a) => tokio::task::spawn_blocking(move || build(a)).await?,
        TemplateCmd::Ls(a) => super::template_ls::run(a).await,
        TemplateCmd::Push(a) => super::template_remote::push(a).await,
        TemplateCmd::Bake(a) => super::template_remote::bake(a).await,
        TemplateCmd::Logs(a) => super::template_remote::logs(a).await,
        TemplateCmd::Rm(a) => super::template_remote::rm(a).await,
    }
}

/// Where template specs are looked for by default: `./templates`, then the repository's
/// `templates/` (development build), then `<prefix>/share/pandastack/templates` (installed).
pub fn template_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("templates")];
    if let Ok(exe) = std::env::current_exe() {
        // Development build: <repo>/target/<profile>/pandastack.
        if let Some(root) = exe.parent().and_then(Path::parent).and_then(Path::parent) {
            dirs.push(root.join("templates"));
        }
        // Installed: <prefix>/bin/pandastack.
        if let Some(prefix) = exe.parent().and_then(Path::parent) {
            dirs.push(prefix.join("share/pandastack/templates"));
        }
    }
    dirs
}

/// Where `template` is: a `.toml` path as given, else `<dir>/<template>.toml` in the first
/// templates directory that has it.
fn spec_path(template: &str, dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    if template.ends_with(".toml") || template.contains('/') {
        return Ok(PathBuf::from(template));
    }
    let dirs = match dir {
        Some(d) => vec![d.to_owned()],
        None => template_dirs(),
    };
    let file = format!("{template}.toml");
    dirs.iter()
        .map(|d| d.join(&file))
        .find(|p| p.is_file())
        .with_context(|| {
            let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            format!(
                "no template {template:?}: {file} is not in {} (set --templates-dir or PANDASTACK_TEMPLATES_DIR)",
                looked.join(", ")
            )
        })
}

/// Prints progress lines on stderr as the build goes.
struct Display {
    name: String,
    started: Instant,
    verbose: bool,
    last_download: Option<Instant>,
    downloaded: u64,
}

impl Display {
    fn show(&mut self, p: Progress) {
        let t = self.started.elapsed().as_secs_f64();
        let mib = |b: u64| b as f64 / 1048576.0;
        let mut e = std::io::stderr().lock();
        let name = &self.name;
        let _ = match p {
            Progress::Cached { image } => {
                writeln!(e, "[{name} {t:6.1}s] cached: {}", image.display())
            }
            Progress::Waiting { lock } => writeln!(
                e,
                "[{name} {t:6.1}s] waiting for another build of this image ({})",
                lock.display()
            ),
            Progress::StepStarted { step } => writeln!(e, "[{name} {t:6.1}s] {step} …"),
            Progress::StepFinished { step, elapsed } => {
                let dl = if step == "bootstrap" && self.downloaded > 0 {
                    format!(", {:.1} MiB downloaded", mib(self.downloaded))
                } else {
                    String::new()
                };
                writeln!(
                    e,
                    "[{name} {t:6.1}s] {step} done in {:.1}s{dl}",
                    elapsed.as_secs_f64()
                )
            }
            Progress::StepFailed { step, elapsed } => writeln!(
                e,
                "[{name} {t:6.1}s] {step} FAILED after {:.1}s",
                elapsed.as_secs_f64()
            ),
            Progress::Log { line, .. } if self.verbose => writeln!(e, "    {line}"),
            // mmdebstrap's phase lines ("I: installing essential packages...").
            Progress::Log { line, .. } => match line.strip_prefix("I: ") {
                Some(info) if !info.starts_with("running --") => {
                    writeln!(e, "[{name} {t:6.1}s]   {info}")
                }
                _ => Ok(()),
            },
            Progress::Downloaded { bytes } => {
                self.downloaded = bytes;
                let due = self
                    .last_download
                    .is_none_or(|at| at.elapsed() >= Duration::from_secs(2));
                if due {
                    self.last_download = Some(Instant::now());
                    writeln!(e, "[{name} {t:6.1}s]   {:.1} MiB downloaded", mib(bytes))
                } else {
                    Ok(())
                }
            }
            Progress::Finished {
                image,
                elapsed,
                downloaded_bytes,
            } => writeln!(
                e,
                "[{name} {t:6.1}s] built in {:.1}s ({:.1} MiB downloaded): {}",
                elapsed.as_secs_f64(),
                mib(downloaded_bytes),
                image.display()
            ),
        };
    }
}

fn build(a: BuildArgs) -> anyhow::Result<ExitCode> {
    let path = spec_path(&a.template, a.templates_dir.as_deref())?;
    let spec = TemplateSpec::load(&path)?;
    let cache = ImageCache::from_env();
    let options = BuildOptions { force: a.force };
    let mut display = Display {
        name: spec.name().to_owned(),
        started: Instant::now(),
        verbose: a.verbose,
        last_download: None,
        downloaded: 0,
    };
    let mut show = |p: Progress| display.show(p);
    let context = || format!("build template {}", spec.name());
    let (image, base, agent) = match &a.agent {
        Some(agent) => {
            let img = cache
                .rootfs_with_agent(&spec, agent, options, &mut show)
                .with_context(context)?;
            let agent = serde_json::json!({ "path": agent, "sha256": img.agent_sha256 });
            (img.path, img.base, Some(agent))
        }
        None => {
            let base = cache
                .build_base(&spec, options, &mut show)
                .with_context(context)?;
            (base.path.clone(), base, None)
        }
    };
    if a.json {
        let md = std::fs::metadata(&image).with_context(|| image.display().to_string())?;
        let m = &base.manifest;
        let summary = serde_json::json!({
            "template": spec.name(),
            "spec": path,
            "hash": m.hash,
            "image": image,
            "base_image": base.path,
            "agent": agent,
            "cached": base.cached,
            "apparent_bytes": md.len(),
            "allocated_bytes": md.blocks() * 512,
            "tree_bytes": m.tree_bytes,
            "downloaded_bytes": m.downloaded_bytes,
            "build_seconds": m.build_seconds,
            "steps": m.steps,
            "built_at": m.built_at,
            "mirror": m.mirror,
            "vm": spec.vm(),
        });
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("{}", image.display());
    }
    Ok(ExitCode::SUCCESS)
}
