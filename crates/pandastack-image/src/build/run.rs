//! Running the build's commands: their output goes line by line to `build.log` and to the
//! progress callback, step markers switch the current step, and apt's download directory is
//! polled to report bytes downloaded.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::plan::STEP_MARKER;
use super::Progress;
use crate::manifest::StepTiming;

/// The log and step bookkeeping of one build; every event also goes to the progress callback.
pub(super) struct Session<'a> {
    log: File,
    log_path: PathBuf,
    progress: &'a mut dyn FnMut(Progress),
    steps: Vec<StepTiming>,
    current: Option<(String, Instant)>,
    downloaded: u64,
}

impl<'a> Session<'a> {
    pub fn new(log_path: PathBuf, progress: &'a mut dyn FnMut(Progress)) -> std::io::Result<Self> {
        Ok(Self {
            log: File::create(&log_path)?,
            log_path,
            progress,
            steps: Vec::new(),
            current: None,
            downloaded: 0,
        })
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    pub fn emit(&mut self, p: Progress) {
        (self.progress)(p);
    }

    /// Ends the current step (if any) and starts `name`.
    pub fn start_step(&mut self, name: &str) {
        self.finish_step();
        let _ = writeln!(self.log, "==> step {name}");
        self.current = Some((name.to_owned(), Instant::now()));
        self.emit(Progress::StepStarted {
            step: name.to_owned(),
        });
    }

    pub fn finish_step(&mut self) {
        if let Some((step, started)) = self.current.take() {
            let elapsed = started.elapsed();
            let _ = writeln!(
                self.log,
                "<== step {step} done in {:.1} s",
                elapsed.as_secs_f64()
            );
            self.steps.push(StepTiming {
                step: step.clone(),
                seconds: elapsed.as_secs_f64(),
            });
            self.emit(Progress::StepFinished { step, elapsed });
        }
    }

    /// Ends the current step (if any) as failed.
    pub fn fail_step(&mut self) {
        if let Some((step, started)) = self.current.take() {
            let elapsed = started.elapsed();
            let _ = writeln!(
                self.log,
                "<== step {step} FAILED after {:.1} s",
                elapsed.as_secs_f64()
            );
            self.emit(Progress::StepFailed { step, elapsed });
        }
    }

    pub fn current_step(&self) -> Option<&str> {
        self.current.as_ref().map(|(s, _)| s.as_str())
    }

    /// A line of command output.
    pub fn output(&mut self, line: String) {
        let _ = writeln!(self.log, "{line}");
        let step = self.current_step().unwrap_or_default().to_owned();
        self.emit(Progress::Log { step, line });
    }

    /// A line of our own (commands run, decisions), in the log only.
    pub fn note(&mut self, line: &str) {
        let _ = writeln!(self.log, "## {line}");
    }

    pub fn steps(&self) -> &[StepTiming] {
        &self.steps
    }

    pub fn downloaded(&self) -> u64 {
        self.downloaded
    }

    fn set_downloaded(&mut self, bytes: u64) {
        if bytes != self.downloaded {
            self.downloaded = bytes;
            self.emit(Progress::Downloaded { bytes });
        }
    }
}

/// What to watch while a command runs.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Lines starting with the step marker switch the session's current step.
    pub step_markers: bool,
    /// apt's archive directory: its growth is reported as bytes downloaded.
    pub downloads: Option<PathBuf>,
}

/// How long to keep reading after the command exited, for output still in the pipes. A daemon a
/// setup command left running may hold them open for ever.
const DRAIN_GRACE: Duration = Duration::from_secs(3);
const POLL_EVERY: Duration = Duration::from_secs(1);

/// Runs `cmd` to completion, streaming its output into the session.
pub(super) fn run(
    session: &mut Session<'_>,
    cmd: &mut Command,
    watch: &Watch,
) -> std::io::Result<ExitStatus> {
    session.note(&format!("$ {}", describe(cmd)));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = mpsc::channel::<String>();
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let tx = tx.clone();
        // Detached: if a leftover daemon holds the pipe, the thread ends with the process.
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).to_owned();
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    drop(tx);

    let mut downloads = DownloadCounter::default();
    let mut last_poll = Instant::now();
    let mut exited: Option<(ExitStatus, Instant)> = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => match line.strip_prefix(STEP_MARKER) {
                Some(step) if watch.step_markers => session.start_step(step.trim()),
                _ => session.output(line),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if let Some(dir) = &watch.downloads {
            if last_poll.elapsed() >= POLL_EVERY {
                last_poll = Instant::now();
                session.set_downloaded(downloads.sample(dir));
            }
        }
        match exited {
            None => {
                if let Some(status) = child.try_wait()? {
                    exited = Some((status, Instant::now()));
                }
            }
            Some((_, at)) if at.elapsed() > DRAIN_GRACE => {
                session.note("output pipes still open after exit; a process left running?");
                break;
            }
            Some(_) => {}
        }
    }
    let status = match exited {
        Some((status, _)) => status,
        None => child.wait()?,
    };
    session.note(&format!("exit: {status}"));
    Ok(status)
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Bytes downloaded so far, from samples of apt's archive directory, whose files come and go
/// (downloads land in `partial/`, move up when complete, and are deleted once installed): the
/// largest size seen for each file name, summed.
#[derive(Debug, Default)]
struct DownloadCounter {
    seen: HashMap<OsString, u64>,
}

impl DownloadCounter {
    fn sample(&mut self, dir: &Path) -> u64 {
        for d in [dir.to_path_buf(), dir.join("partial")] {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(md) = e.metadata() else { continue };
                if md.is_file() {
                    let size = self.seen.entry(e.file_name()).or_default();
                    *size = (*size).max(md.len());
                }
            }
        }
        self.seen.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_downloads_across_moves_and_deletions() {
        let dir = tempfile::tempdir().unwrap();
        let archives = dir.path().join("archives");
        let mut c = DownloadCounter::default();
        assert_eq!(c.sample(&archives), 0, "not created yet");
        std::fs::create_dir_all(archives.join("partial")).unwrap();
        std::fs::write(archives.join("partial/a.deb"), [0u8; 10]).unwrap();
        assert_eq!(c.sample(&archives), 10);
        std::fs::write(archives.join("partial/a.deb"), [0u8; 30]).unwrap();
        std::fs::write(archives.join("b.deb"), [0u8; 5]).unwrap();
        assert_eq!(c.sample(&archives), 35);
        std::fs::rename(archives.join("partial/a.deb"), archives.join("a.deb")).unwrap();
        assert_eq!(
            c.sample(&archives),
            35,
            "a completed download is not counted twice"
        );
        std::fs::remove_file(archives.join("a.deb")).unwrap();
        std::fs::remove_file(archives.join("b.deb")).unwrap();
        std::fs::write(archives.join("c.deb"), [0u8; 1]).unwrap();
        assert_eq!(c.sample(&archives), 36, "installed archives stay counted");
    }

    #[test]
    fn streams_output_and_step_markers_into_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let mut events = Vec::new();
        let mut progress = |p: Progress| events.push(p);
        let mut s = Session::new(dir.path().join("build.log"), &mut progress).unwrap();
        s.start_step("first");
        let status = run(
            &mut s,
            Command::new("sh").args([
                "-c",
                "echo one; echo '@@step second' >&2; echo two >&2; printf 'no newline'; exit 3",
            ]),
            &Watch {
                step_markers: true,
                downloads: Some(dir.path().join("absent")),
            },
        )
        .unwrap();
        assert_eq!(status.code(), Some(3));
        assert_eq!(s.current_step(), Some("second"));
        s.finish_step();
        let steps: Vec<&str> = s.steps().iter().map(|t| t.step.as_str()).collect();
        assert_eq!(steps, ["first", "second"]);
        drop(s);
        let log = std::fs::read_to_string(dir.path().join("build.log")).unwrap();
        for want in ["one", "two", "no newline", "==> step second", "## exit:"] {
            assert!(log.contains(want), "{want:?} missing from {log}");
        }
        let logged: Vec<(String, String)> = events
            .iter()
            .filter_map(|p| match p {
                Progress::Log { step, line } => Some((step.clone(), line.clone())),
                _ => None,
            })
            .collect();
        assert!(
            logged.contains(&("second".into(), "two".into())),
            "{logged:?}"
        );
    }

    #[test]
    fn does_not_wait_for_a_process_left_holding_the_pipes() {
        let dir = tempfile::tempdir().unwrap();
        let mut progress = |_: Progress| {};
        let mut s = Session::new(dir.path().join("build.log"), &mut progress).unwrap();
        let t = Instant::now();
        let status = run(
            &mut s,
            Command::new("sh").args(["-c", "sleep 8 & echo started"]),
            &Watch::default(),
        )
        .unwrap();
        assert!(status.success());
        assert!(t.elapsed() < Duration::from_secs(7), "{:?}", t.elapsed());
    }
}
