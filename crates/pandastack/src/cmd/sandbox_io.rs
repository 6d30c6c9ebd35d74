//! `pandastack sandbox exec|run-code|cp|logs|watch`: data in and out of a sandbox. `exec` prints
//! the command's output as it is produced and exits with the command's exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use pandastack_client::types::ExecRequest;
use pandastack_client::{Client, LogEvent};

use super::client_util::parse_pairs;

#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// Sandbox id.
    id: String,
    /// Run this shell command line (`/bin/sh -c`) instead of argv.
    #[arg(long, short = 'c', value_name = "CMD", conflicts_with = "argv")]
    shell: Option<String>,
    /// Extra environment `NAME=VALUE` (repeatable).
    #[arg(long = "env", short, value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// Working directory in the guest.
    #[arg(long)]
    cwd: Option<String>,
    /// User to run as.
    #[arg(long)]
    user: Option<String>,
    /// Kill the command after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Program and arguments (after `--`).
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct RunCodeArgs {
    /// Sandbox id.
    id: String,
    /// The code; `-` or nothing reads it from stdin.
    code: Option<String>,
    /// `python` (the default), `javascript`, `typescript` or `bash`.
    #[arg(long, short)]
    language: Option<String>,
    /// A context made with the API (`POST …/code/contexts`); by default the language's own.
    #[arg(long)]
    context: Option<String>,
    /// Interrupt the run after this many seconds (the context and its variables stay).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Print the whole result as JSON (stdout, stderr, results, error).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct CpArgs {
    /// `LOCAL` or `ID:/guest/path`.
    src: String,
    /// `ID:/guest/path` or `LOCAL`.
    dst: String,
}

#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// Sandbox id.
    id: String,
    /// Keep printing what is appended until the sandbox is deleted.
    #[arg(long, short)]
    follow: bool,
}

pub async fn exec(c: &Client, a: ExecArgs) -> anyhow::Result<ExitCode> {
    let (cmd, argv) = match (a.shell, a.argv) {
        (Some(s), _) => (Some(s), None),
        (None, v) if !v.is_empty() => (None, Some(v)),
        _ => anyhow::bail!("give a command: `exec ID -- PROGRAM ARGS…` or `exec ID --shell 'CMD'`"),
    };
    let req = ExecRequest {
        cmd,
        argv,
        env: parse_pairs("env", &a.env)?,
        cwd: a.cwd,
        user: a.user,
        stdin: None,
        timeout_seconds: a.timeout,
    };
    let stream = c.exec_stream(&a.id, &req).await?;
    let exit = stream
        .wait(|is_err, text| {
            if is_err {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(text.as_bytes());
                let _ = e.flush();
            } else {
                let mut o = std::io::stdout().lock();
                let _ = o.write_all(text.as_bytes());
                let _ = o.flush();
            }
        })
        .await?;
    if exit.timed_out {
        eprintln!("error: the command timed out");
    }
    if exit.truncated {
        eprintln!("warning: the output was truncated by the server");
    }
    Ok(exit_code(exit.exit_code))
}

pub async fn run_code(c: &Client, a: RunCodeArgs) -> anyhow::Result<ExitCode> {
    let code = match a.code.as_deref() {
        None | Some("-") => {
            let mut code = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut code)
                .context("reading the code from stdin")?;
            code
        }
        Some(code) => code.to_owned(),
    };
    let req = pandastack_client::types::CodeRequest {
        code,
        language: a.language,
        context_id: a.context,
        timeout_seconds: a.timeout,
        ..Default::default()
    };
    let out = c.run_code(&a.id, &req).await?;
    if a.json {
        super::client_util::print_json(&out)?;
    } else {
        print!("{}", out.stdout);
        eprint!("{}", out.stderr);
        for r in &out.results {
            println!("{}", r.text);
        }
        if let Some(e) = &out.error {
            let text = if e.traceback.is_empty() {
                format!("{}: {}", e.name, e.value)
            } else {
                e.traceback.trim_end().to_owned()
            };
            eprintln!("{text}");
        }
        if out.truncated {
            eprintln!("warning: the output was truncated by the server");
        }
    }
    Ok(if out.error.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The guest's exit status as this process's (out-of-range values become 1).
fn exit_code(code: i32) -> ExitCode {
    match u8::try_from(code) {
        Ok(c) => ExitCode::from(c),
        Err(_) => ExitCode::FAILURE,
    }
}

/// `ID:/path` → (id, path); anything else is local.
fn remote(s: &str) -> Option<(&str, &str)> {
    let (id, path) = s.split_once(':')?;
    (!id.is_empty() && !id.contains('/') && path.starts_with('/')).then_some((id, path))
}

pub async fn cp(c: &Client, a: CpArgs) -> anyhow::Result<()> {
    match (remote(&a.src), remote(&a.dst)) {
        (None, Some((id, path))) => {
            let local = Path::new(&a.src);
            let path = if path.ends_with('/') {
                let name = local
                    .file_name()
                    .context("the source has no file name")?
                    .to_string_lossy();
                format!("{path}{name}")
            } else {
                path.to_owned()
            };
            c.upload(id, local, &path).await?;
        }
        (Some((id, path)), None) => {
            let mut local = PathBuf::from(&a.dst);
            if local.is_dir() {
                let name = path.rsplit('/').next().filter(|n| !n.is_empty());
                local.push(name.context("the guest path has no file name")?);
            }
            c.download(id, path, &local).await?;
        }
        (Some(_), Some(_)) => anyhow::bail!("copy between two sandboxes is not supported"),
        (None, None) => anyhow::bail!("one side must be a sandbox path: ID:/path"),
    }
    Ok(())
}

pub async fn logs(c: &Client, a: LogsArgs) -> anyhow::Result<()> {
    if !a.follow {
        let text = c.logs(&a.id).await?;
        let mut o = std::io::stdout().lock();
        o.write_all(text.as_bytes())?;
        return Ok(());
    }
    let mut stream = c.follow_logs(&a.id).await?;
    while let Some(ev) = stream.next().await? {
        match ev {
            LogEvent::Log(t) => {
                let mut o = std::io::stdout().lock();
                o.write_all(t.as_bytes())?;
                o.flush()?;
            }
            LogEvent::End(reason) => {
                eprintln!("(log ended: {reason})");
                break;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths() {
        assert_eq!(remote("sb_1:/tmp/x"), Some(("sb_1", "/tmp/x")));
        assert_eq!(remote("./a:/b"), None);
        assert_eq!(remote("file.txt"), None);
        assert_eq!(remote("sb:rel"), None);
        assert_eq!(remote(":/x"), None);
    }
}

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Sandbox id.
    id: String,
    /// Absolute path of a directory in the sandbox.
    path: String,
    /// Its subdirectories too, at every depth.
    #[arg(long, short)]
    recursive: bool,
    /// Print each event as a JSON line (`{"type", "path", ...}`), `ready` included.
    #[arg(long)]
    json: bool,
}

/// Prints the watch's events until it ends (an error ends it with that error).
pub async fn watch(c: &Client, a: WatchArgs) -> anyhow::Result<()> {
    use pandastack_client::types::WatchFrame;
    let mut events = c.watch_files(&a.id, &a.path, a.recursive).await?;
    let mut out = std::io::stdout();
    while let Some(frame) = events.next().await? {
        if a.json {
            writeln!(out, "{}", serde_json::to_string(&frame)?)?;
        } else {
            match &frame {
                WatchFrame::Ready { path, .. } => eprintln!("watching {path}"),
                WatchFrame::Rename { path, from, .. } => writeln!(out, "rename\t{from} -> {path}")?,
                WatchFrame::Create { path, dir, .. }
                | WatchFrame::Modify { path, dir, .. }
                | WatchFrame::Delete { path, dir, .. } => {
                    let slash = if *dir { "/" } else { "" };
                    writeln!(out, "{}\t{path}{slash}", frame.kind())?
                }
                WatchFrame::Overflow { path } => {
                    writeln!(out, "overflow\t{path} (changes were dropped)")?
                }
                WatchFrame::Error(_) => {} // an error is Err from next()
            }
        }
        out.flush()?;
    }
    Ok(())
}
