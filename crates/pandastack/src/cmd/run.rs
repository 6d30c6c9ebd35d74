//! `pandastack run`: a one-shot local sandbox without a server — bake the template on first use,
//! restore a sandbox from it, run one command, print its output, destroy the sandbox. Exits with
//! the command's exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use pandastack_guest_proto::v1::{self, process_client::ProcessClient};
use pandastack_qemu::{accel, QemuConfig, QemuDriver};
use pandastack_runtime::{BakeError, DataDir, Runtime, Shape};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Template name (baked into the data dir on first use).
    #[arg(long, default_value = "minimal")]
    template: String,
    /// Root filesystem image to bake from when the template is not baked yet.
    #[arg(long)]
    image: Option<PathBuf>,
    #[arg(
        long,
        env = "PANDASTACK_DATA_DIR",
        default_value = "/var/lib/pandastack"
    )]
    data_dir: PathBuf,
    #[arg(long, env = "PANDASTACK_KERNEL")]
    kernel: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    vcpus: u32,
    #[arg(long, default_value_t = 512)]
    memory_mib: u32,
    /// Command and arguments to run in the sandbox.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub async fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let kernel = a
        .kernel
        .or_else(super::doctor::cached_kernel)
        .context("no guest kernel: run scripts/setup-host.sh or pass --kernel")?;
    let choice = accel::detect(Path::new("qemu-system-x86_64"), &kernel).await;
    eprintln!("accelerator: {} ({})", choice.accel, choice.reason);
    let rt = Runtime::new(
        QemuDriver::new(QemuConfig::new(choice.accel)),
        DataDir::open(&a.data_dir)?,
        kernel,
    );
    let template = match rt.template(&a.template) {
        Ok(t) => t,
        Err(BakeError::NotBaked(_)) => {
            let image = a
                .image
                .context("template not baked yet: pass --image <rootfs.ext4> to bake it")?;
            eprintln!(
                "baking template {} (cold boot + snapshot, once)…",
                a.template
            );
            let t = rt
                .bake(
                    &a.template,
                    &image,
                    Shape {
                        vcpus: a.vcpus,
                        memory_mib: a.memory_mib,
                        disk: None,
                    },
                )
                .await?;
            eprintln!(
                "baked in {} ms (guest agent up after {} ms)",
                t.bake_ms, t.boot_ms
            );
            t
        }
        Err(e) => return Err(e.into()),
    };
    let id = format!("run-{:08x}", rand_id());
    let started = Instant::now();
    let sandbox = rt.create(&template, &id).await?;
    eprintln!(
        "sandbox {id} ready in {:.1} ms",
        sandbox.ready_in.as_secs_f64() * 1000.0
    );
    let result = exec(&sandbox.agent, a.command).await;
    rt.destroy(sandbox).await?;
    let code = result?;
    eprintln!(
        "done in {:.1} ms, exit code {code}",
        started.elapsed().as_secs_f64() * 1000.0
    );
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

fn rand_id() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    t.subsec_nanos() ^ std::process::id()
}

async fn exec(ch: &tonic::transport::Channel, argv: Vec<String>) -> anyhow::Result<i32> {
    let start = v1::ExecInput {
        input: Some(v1::exec_input::Input::Start(v1::ExecStart {
            argv,
            ..Default::default()
        })),
    };
    let mut s = ProcessClient::new(ch.clone())
        .exec(futures::stream::iter([start]))
        .await?
        .into_inner();
    while let Some(m) = s.message().await? {
        match m.output {
            Some(v1::exec_output::Output::Stdout(b)) => std::io::stdout().write_all(&b)?,
            Some(v1::exec_output::Output::Stderr(b)) => std::io::stderr().write_all(&b)?,
            Some(v1::exec_output::Output::Exit(e)) => return Ok(e.exit_code),
            _ => {}
        }
    }
    anyhow::bail!("exec stream ended without an exit status")
}
