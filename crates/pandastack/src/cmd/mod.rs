//! Subcommands of the `pandastack` binary.

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {}

pub async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {}
}
