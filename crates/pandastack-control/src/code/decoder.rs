//! The kernel client's JSON lines (stdout of `kernel.py run|start|stop`) as [`CodeEvent`]s.

use pandastack_api_types::{CodeError, CodeOutput};
use pandastack_host::{ExecEvent, HostError};
use serde::Deserialize;

/// What a run produces, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeEvent {
    Stdout(String),
    Stderr(String),
    Result(CodeOutput),
    /// An exception in the code, or the kernel's own trouble (`KernelError`, `TimeoutError`,
    /// `ContextNotFound`).
    Error(CodeError),
    /// Always last.
    Done {
        duration_ms: u64,
        truncated: bool,
    },
}

/// A line the guest script prints.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line {
    Stdout { text: String },
    Stderr { text: String },
    Result { data: CodeOutput },
    Error(CodeError),
    Ready,
    Done,
}

fn kernel_error(value: impl Into<String>) -> CodeEvent {
    CodeEvent::Error(CodeError {
        name: "KernelError".into(),
        value: value.into(),
        traceback: String::new(),
    })
}

/// Turns the exec events of one kernel-client run into [`CodeEvent`]s, ending with one `Done`.
#[derive(Default)]
pub struct Decoder {
    line: Vec<u8>,
    stderr: Vec<u8>,
    done: bool,
    errored: bool,
}

impl Decoder {
    /// The code events of one exec event.
    pub fn feed(&mut self, ev: Result<ExecEvent, HostError>) -> Vec<CodeEvent> {
        let mut out = Vec::new();
        match ev {
            Ok(ExecEvent::Stdout(b)) => {
                self.line.extend_from_slice(&b);
                while let Some(pos) = self.line.iter().position(|&c| c == b'\n') {
                    let line: Vec<u8> = self.line.drain(..=pos).collect();
                    self.parse(&line, &mut out);
                }
            }
            Ok(ExecEvent::Stderr(b)) => {
                // The client's own complaints (a Python too old, a broken kernel): kept for the
                // error message; the code's stderr comes as events on stdout.
                if self.stderr.len() < 64 << 10 {
                    self.stderr.extend_from_slice(&b);
                }
            }
            Ok(ExecEvent::Exit {
                exit_code,
                timed_out,
                truncated,
                duration_ms,
            }) => {
                if !self.done && !self.errored {
                    out.push(if exit_code == 127 {
                        kernel_error(
                            "python3 was not found in this sandbox: the code interpreter needs a \
                             template with Python 3 (e.g. code-interpreter or base)",
                        )
                    } else if timed_out {
                        CodeEvent::Error(CodeError {
                            name: "TimeoutError".into(),
                            value: "the kernel did not answer in time".into(),
                            traceback: String::new(),
                        })
                    } else {
                        let err = String::from_utf8_lossy(&self.stderr);
                        kernel_error(if err.trim().is_empty() {
                            format!("the kernel client exited with code {exit_code}")
                        } else {
                            err.trim().to_owned()
                        })
                    });
                }
                out.push(CodeEvent::Done {
                    duration_ms,
                    truncated,
                });
            }
            Err(s) => {
                out.push(kernel_error(s.event_message()));
                out.push(CodeEvent::Done {
                    duration_ms: 0,
                    truncated: false,
                });
            }
        }
        out
    }

    fn parse(&mut self, line: &[u8], out: &mut Vec<CodeEvent>) {
        match serde_json::from_slice::<Line>(line) {
            Ok(Line::Stdout { text }) => out.push(CodeEvent::Stdout(text)),
            Ok(Line::Stderr { text }) => out.push(CodeEvent::Stderr(text)),
            Ok(Line::Result { data }) => out.push(CodeEvent::Result(data)),
            Ok(Line::Error(e)) => {
                self.errored = true;
                out.push(CodeEvent::Error(e));
            }
            Ok(Line::Ready | Line::Done) => self.done = true,
            Err(e) => tracing::warn!(
                error = &e as &dyn std::error::Error,
                "unreadable line from the code kernel"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn out(s: &str) -> Result<ExecEvent, HostError> {
        Ok(ExecEvent::Stdout(Bytes::from(s.to_owned())))
    }

    fn exit(code: i32, timed_out: bool) -> Result<ExecEvent, HostError> {
        Ok(ExecEvent::Exit {
            exit_code: code,
            timed_out,
            truncated: false,
            duration_ms: 5,
        })
    }

    #[test]
    fn lines_split_across_chunks_decode_in_order() {
        let mut d = Decoder::default();
        let mut got = d.feed(out("{\"type\": \"stdout\", \"te"));
        assert!(got.is_empty());
        got.extend(d.feed(out(
            "xt\": \"hi\\n\"}\n{\"type\": \"result\", \"data\": {\"text\": \"2\"}}\n",
        )));
        got.extend(d.feed(out("{\"type\": \"done\"}\n")));
        got.extend(d.feed(exit(0, false)));
        assert_eq!(
            got,
            vec![
                CodeEvent::Stdout("hi\n".into()),
                CodeEvent::Result(CodeOutput {
                    text: "2".into(),
                    ..Default::default()
                }),
                CodeEvent::Done {
                    duration_ms: 5,
                    truncated: false
                },
            ]
        );
    }

    #[test]
    fn missing_python_and_silent_exits_are_kernel_errors() {
        let mut d = Decoder::default();
        let got = d.feed(exit(127, false));
        assert!(matches!(&got[0], CodeEvent::Error(e) if e.value.contains("python3")));
        let mut d = Decoder::default();
        d.feed(Ok(ExecEvent::Stderr(Bytes::from_static(b"boom\n"))));
        let got = d.feed(exit(1, false));
        assert!(
            matches!(&got[0], CodeEvent::Error(e) if e.name == "KernelError" && e.value == "boom")
        );
        let mut d = Decoder::default();
        let got = d.feed(exit(-1, true));
        assert!(matches!(&got[0], CodeEvent::Error(e) if e.name == "TimeoutError"));
        assert!(matches!(got[1], CodeEvent::Done { .. }));
    }
}
