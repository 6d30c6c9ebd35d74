//! The code interpreter's workflow ([`CodeContexts`]): code runs in a long-lived kernel inside a
//! sandbox, so variables, imports and open files survive between runs. One kernel per context:
//! a default one per language (`default` for Python, `default-javascript`,
//! `default-typescript`, `default-bash`), or one made with [`CodeContexts::create_context`].
//!
//! The guest side is `kernel.py`, run with the guest's own `python3` through the host's ordinary
//! exec, and for JavaScript and TypeScript `kernel.mjs` under the guest's Node.js (passed along
//! by `kernel.py`): nothing of ours is installed in the image, so any template with Python 3 has
//! a code interpreter (and JavaScript with Node.js 20.12+ and Debian's `node-acorn`, TypeScript
//! with `node-typescript` as well). Kernels are plain guest processes that survive
//! hibernate/wake and are copied into every fork child (a fork branches the kernel's variables
//! too). The script prints JSON lines, which [`Decoder`] turns into [`CodeEvent`]s. Checking the caller and waking the sandbox are the
//! caller's (see [`crate::Sandboxes::awake`]); HTTP and SSE framing are the API's.

mod decoder;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use pandastack_api_types::{
    self as wire, CodeContext, CodeContextRequest, CodeError, CodeRequest, CodeResult,
};
use pandastack_host::{ExecSpec, Host, HostError};

pub use decoder::CodeEvent;
use decoder::Decoder;

/// The guest half, passed to `python3 -c` as an argument (see its header).
const KERNEL: &str = include_str!("kernel.py");
/// The JavaScript and TypeScript kernel, passed to `kernel.py` as its first argument.
const KERNEL_JS: &str = include_str!("kernel.mjs");
/// Takes the kernel's source from argv and runs it (must match `BOOT` in kernel.py).
const BOOT: &str =
    "import sys;SOURCE=sys.argv.pop(1);exec(compile(SOURCE,'<pandastack-kernel>','exec'))";
/// Cap on the kernel's event stream (results carry images, base64).
const MAX_CODE_OUTPUT: u64 = 16 << 20;
/// Extra time the host gives a run beyond its own bound (the kernel interrupts the code at the
/// bound and still has to report).
const GRACE: Duration = Duration::from_secs(30);
/// Bound on starting or stopping a context.
const CONTEXT_TIMEOUT: Duration = Duration::from_secs(60);
/// Cap on the output of starting or stopping a context.
const MAX_CONTEXT_OUTPUT: u64 = 1 << 20;

/// Why a code-interpreter call failed. An exception in the code is not one: it is data
/// ([`CodeEvent::Error`], [`CodeResult::error`]).
#[derive(Debug, thiserror::Error)]
pub enum CodeContextError {
    /// The exec could not start (no such sandbox, the guest unreachable, …).
    #[error(transparent)]
    Host(#[from] HostError),
    /// A run named a context that was never created or was deleted.
    #[error("code context {0} not found")]
    ContextNotFound(String),
    /// A run named a context of another language than the one it asked for.
    #[error("{0}")]
    WrongLanguage(String),
    /// The kernel client could not start or stop a context (no `python3`, a broken kernel).
    #[error("{}: {}", .0.name, .0.value)]
    Kernel(CodeError),
}

/// Code contexts of the sandboxes of one host, over the host's exec.
#[derive(Clone)]
pub struct CodeContexts {
    host: Arc<dyn Host>,
}

impl CodeContexts {
    pub fn new(host: Arc<dyn Host>) -> Self {
        Self { host }
    }

    /// Starts a run of `req` (validated by the caller) in sandbox `sandbox_id`, awake, whose
    /// environment from create is `sandbox_env` (the request's goes over it), and returns its
    /// events, ending with one [`CodeEvent::Done`]. A context that does not exist is an
    /// `Error` event named `ContextNotFound`, one of another language than the request's
    /// `WrongLanguage`. Dropping the stream stops waiting; the kernel then interrupts the code.
    pub async fn run(
        &self,
        sandbox_id: &str,
        sandbox_env: &BTreeMap<String, String>,
        req: CodeRequest,
    ) -> Result<impl Stream<Item = CodeEvent> + Send + 'static, HostError> {
        let timeout = req
            .timeout_seconds
            .unwrap_or(wire::DEFAULT_CODE_TIMEOUT_SECONDS);
        let ctx = context_of(&req);
        let language = req.language.clone().unwrap_or_default();
        let spec = ExecSpec {
            argv: argv("run", &[&ctx, &timeout.to_string(), &language]),
            env: guest_env(sandbox_env, req.env),
            stdin: Some(req.code.into_bytes()),
            timeout: Duration::from_secs(timeout) + GRACE,
            max_output_bytes: MAX_CODE_OUTPUT,
            ..ExecSpec::default()
        };
        let events = self.host.exec_stream(sandbox_id, spec).await?;
        let mut decoder = Decoder::default();
        Ok(events.flat_map(move |ev| futures::stream::iter(decoder.feed(ev))))
    }

    /// [`CodeContexts::run`] to its end, collected: what the code printed and produced, and
    /// the exception it ended with, if any. A missing context is
    /// [`CodeContextError::ContextNotFound`], one of another language
    /// [`CodeContextError::WrongLanguage`].
    pub async fn run_to_end(
        &self,
        sandbox_id: &str,
        sandbox_env: &BTreeMap<String, String>,
        req: CodeRequest,
    ) -> Result<CodeResult, CodeContextError> {
        let ctx = context_of(&req);
        let mut events = Box::pin(self.run(sandbox_id, sandbox_env, req).await?);
        let mut out = CodeResult::default();
        while let Some(ev) = events.next().await {
            match ev {
                CodeEvent::Stdout(s) => out.stdout.push_str(&s),
                CodeEvent::Stderr(s) => out.stderr.push_str(&s),
                CodeEvent::Result(r) => out.results.push(r),
                CodeEvent::Error(e) if e.name == "ContextNotFound" => {
                    return Err(CodeContextError::ContextNotFound(ctx))
                }
                CodeEvent::Error(e) if e.name == "WrongLanguage" => {
                    return Err(CodeContextError::WrongLanguage(e.value))
                }
                CodeEvent::Error(e) => out.error = Some(e),
                CodeEvent::Done {
                    duration_ms,
                    truncated,
                } => {
                    out.duration_ms = duration_ms;
                    out.truncated = truncated;
                }
            }
        }
        Ok(out)
    }

    /// Creates a context in sandbox `sandbox_id` (awake, environment `sandbox_env` from
    /// create) for `req` (validated by the caller): a kernel of its own, running when this
    /// returns, with its own variables.
    pub async fn create_context(
        &self,
        sandbox_id: &str,
        sandbox_env: &BTreeMap<String, String>,
        req: CodeContextRequest,
    ) -> Result<CodeContext, CodeContextError> {
        let id = pandastack_store::new_id("ctx-");
        let language = req.language.unwrap_or_else(|| "python".into());
        let env = guest_env(sandbox_env, req.env);
        self.context_cmd(sandbox_id, &["start", &id, &language], env)
            .await?;
        Ok(CodeContext { id, language })
    }

    /// Deletes context `context_id` (validated by the caller) of sandbox `sandbox_id` and stops
    /// its kernel: its variables are gone. Deleting `default` resets it (the next run starts a
    /// fresh kernel); a context that was never created or is already deleted is
    /// [`CodeContextError::ContextNotFound`].
    pub async fn delete_context(
        &self,
        sandbox_id: &str,
        sandbox_env: &BTreeMap<String, String>,
        context_id: &str,
    ) -> Result<(), CodeContextError> {
        let env = guest_env(sandbox_env, BTreeMap::new());
        match self
            .context_cmd(sandbox_id, &["stop", context_id], env)
            .await
        {
            Err(CodeContextError::Kernel(e)) if e.name == "ContextNotFound" => {
                Err(CodeContextError::ContextNotFound(context_id.to_owned()))
            }
            other => other,
        }
    }

    /// Runs a context command (`start CTX LANGUAGE`, `stop CTX`) and returns its first error,
    /// if any.
    async fn context_cmd(
        &self,
        sandbox_id: &str,
        cmd: &[&str],
        env: HashMap<String, String>,
    ) -> Result<(), CodeContextError> {
        let spec = ExecSpec {
            argv: argv(cmd[0], &cmd[1..]),
            env,
            timeout: CONTEXT_TIMEOUT,
            max_output_bytes: MAX_CONTEXT_OUTPUT,
            ..ExecSpec::default()
        };
        let mut events = Box::pin(self.host.exec_stream(sandbox_id, spec).await?);
        let mut decoder = Decoder::default();
        while let Some(ev) = events.next().await {
            for e in decoder.feed(ev) {
                if let CodeEvent::Error(e) = e {
                    return Err(CodeContextError::Kernel(e));
                }
            }
        }
        Ok(())
    }
}

/// The context a run asks for: the one it names, else its language's default context.
fn context_of(req: &CodeRequest) -> String {
    match (&req.context_id, req.language.as_deref()) {
        (Some(ctx), _) => ctx.clone(),
        (None, None | Some("python")) => wire::DEFAULT_CODE_CONTEXT.to_owned(),
        (None, Some(language)) => format!("{}-{language}", wire::DEFAULT_CODE_CONTEXT),
    }
}

/// The sandbox's environment (from create) with `extra` over it.
fn guest_env(
    sandbox_env: &BTreeMap<String, String>,
    extra: BTreeMap<String, String>,
) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = sandbox_env.clone().into_iter().collect();
    env.extend(extra);
    env
}

/// The kernel client's argv: `python3 -c BOOT <kernel.py> <kernel.mjs> CMD ARGS…`.
fn argv(cmd: &str, args: &[&str]) -> Vec<String> {
    ["python3", "-c", BOOT, KERNEL, KERNEL_JS, cmd]
        .iter()
        .chain(args)
        .map(|s| s.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_matches_the_script() {
        assert!(KERNEL.contains(&format!("BOOT = {BOOT:?}").replace("\\'", "'")));
    }

    /// Each language's default context is the one kernel.py knows by that name.
    #[test]
    fn default_contexts_are_the_kernels() {
        for language in wire::CODE_LANGUAGES {
            let req = CodeRequest {
                language: Some((*language).to_owned()),
                ..CodeRequest::default()
            };
            let ctx = context_of(&req);
            if *language == "python" {
                assert_eq!(ctx, "default");
            } else {
                assert!(KERNEL.contains(r#"DEFAULTS.update(("default-" + lang, lang)"#));
                assert_eq!(ctx, format!("default-{language}"));
            }
            assert!(KERNEL.contains(&format!("{language:?}")), "{language}");
        }
        assert_eq!(context_of(&CodeRequest::default()), "default");
    }
}
