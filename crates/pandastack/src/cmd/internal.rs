//! Hidden subcommands the server runs as helper processes (not for people).

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct InternalArgs {
    #[command(subcommand)]
    command: InternalCmd,
}

#[derive(Debug, clap::Subcommand)]
enum InternalCmd {
    /// Apply OCI layers to a directory and make an ext4 image of it (run confined by the
    /// template builder, in a user namespace; refuses to run where host root is mapped).
    #[command(hide = true)]
    OciUnpack(OciUnpackArgs),
}

#[derive(Debug, clap::Args)]
struct OciUnpackArgs {
    #[arg(long)]
    root: PathBuf,
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    disk_mb: Option<u32>,
    #[arg(long, num_args = 1.., required = true)]
    layers: Vec<PathBuf>,
}

pub fn run(a: InternalArgs) -> anyhow::Result<ExitCode> {
    match a.command {
        InternalCmd::OciUnpack(a) => {
            pandastack_image::unpack_main(pandastack_image::UnpackArgs {
                root: a.root,
                out: a.out,
                disk_mb: a.disk_mb,
                layers: a.layers,
            })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
