//! A spec's own steps (pip and npm packages, files, `setup` commands) for builds sent over the
//! API run in a builder VM, never on the host: the host bootstraps only the Debian part, the
//! image is baked as a throwaway template, a sandbox of it runs the steps through the guest
//! agent (with the sandbox's network, if the server gives sandboxes one), syncs, is hibernated,
//! and its disk becomes the template's image.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pandastack_host::{error_chain, ExecSpec, HostError};
use pandastack_image::{FileContent, TemplateSpec};
use pandastack_runtime::Shape;
use pandastack_vm::VmDriver;

use crate::{guest as rpc, AgentError, HostAgent};

/// Longest one step may run.
const STEP_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Output of a step kept for the log (each of stdout and stderr).
const STEP_OUTPUT: u64 = 256 * 1024;

/// Where the host's CA bundle is put in the builder VM for the steps (under /tmp, which the
/// last step empties, so the image keeps its own CA store): pip, npm and curl in the VM then
/// trust what the host trusts — on a host behind a TLS-inspecting proxy, its CA — as the
/// host-side bootstrap does.
const BUILD_CA: &str = "/tmp/pandastack-build-ca.crt";
/// The variables that name [`BUILD_CA`] to the tools of the steps.
const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
];

/// The host's CA bundle (`SSL_CERT_FILE`, else Debian's), if it has one.
fn host_ca_bundle() -> Option<Vec<u8>> {
    std::env::var_os("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain([std::path::PathBuf::from(
            "/etc/ssl/certs/ca-certificates.crt",
        )])
        .find_map(|p| std::fs::read(p).ok())
}

/// One command of the builder VM, and how the log names it.
struct Step {
    what: String,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
}

fn sh(what: String, script: &str) -> Step {
    Step {
        what,
        argv: vec![
            "/bin/bash".into(),
            "-euo".into(),
            "pipefail".into(),
            "-c".into(),
            script.into(),
        ],
        stdin: None,
    }
}

/// The steps of `spec`, in the order the host builder runs them for catalog images.
fn steps(spec: &TemplateSpec) -> Vec<Step> {
    let mut out = Vec::new();
    if !spec.pip_packages().is_empty() {
        let mut argv: Vec<String> = [
            "python3",
            "-m",
            "pip",
            "install",
            "--break-system-packages",
            "--no-cache-dir",
        ]
        .map(String::from)
        .to_vec();
        argv.extend(spec.pip_packages().iter().cloned());
        out.push(Step {
            what: format!("pip install {}", spec.pip_packages().join(" ")),
            argv,
            stdin: None,
        });
    }
    if !spec.npm_packages().is_empty() {
        let mut argv: Vec<String> = [
            "npm",
            "install",
            "-g",
            "--no-fund",
            "--no-audit",
            "--no-update-notifier",
        ]
        .map(String::from)
        .to_vec();
        argv.extend(spec.npm_packages().iter().cloned());
        out.push(Step {
            what: format!("npm install -g {}", spec.npm_packages().join(" ")),
            argv,
            stdin: None,
        });
    }
    for f in spec.files() {
        if let FileContent::Inline(text) = &f.content {
            out.push(Step {
                what: format!("file {}", f.dest),
                argv: vec![
                    "install".into(),
                    "-D".into(),
                    "-m".into(),
                    format!("{:04o}", f.mode),
                    "/dev/stdin".into(),
                    f.dest.clone(),
                ],
                stdin: Some(text.clone().into_bytes()),
            });
        }
    }
    for (i, cmd) in spec.setup().iter().enumerate() {
        out.push(sh(format!("setup[{i}]: {cmd}"), cmd));
    }
    out.push(sh(
        "clean up and sync".into(),
        "rm -rf /root/.cache /root/.npm /tmp/* /var/tmp/*; sync",
    ));
    out
}

/// Runs `spec`'s steps on `image` (replaced by the result) in a builder VM of `shape`, for
/// build `build_id`. Throwaway template and sandbox are removed whatever happens.
pub(crate) async fn run<D: VmDriver + 'static>(
    agent: &Arc<HostAgent<D>>,
    build_id: &str,
    shape: Shape,
    spec: &TemplateSpec,
    image: &Path,
    log: &mut (dyn FnMut(&str) + Send),
) -> Result<(), String> {
    let temp = format!("{build_id}-b");
    let sandbox = format!("{build_id}-s");
    log("builder VM: booting the bootstrapped image");
    let result = async {
        agent
            .bake_image(&temp, image, shape)
            .await
            .map_err(|e| format!("builder VM bake: {}", error_chain(&e)))?;
        agent
            .create(&temp, &sandbox)
            .await
            .map_err(|e| format!("builder VM: {}", error_chain(&e)))?;
        let ca = host_ca_bundle();
        let mut all = Vec::new();
        if let Some(bundle) = &ca {
            all.push(Step {
                what: "the host's CA bundle".into(),
                argv: ["install", "-D", "-m", "0644", "/dev/stdin", BUILD_CA]
                    .map(String::from)
                    .to_vec(),
                stdin: Some(bundle.clone()),
            });
        }
        all.extend(steps(spec));
        for step in all {
            log(&format!("step: {}", step.what));
            let ch = agent
                .channel(&sandbox)
                .await
                .map_err(|e| format!("builder VM: {}", error_chain(&e)))?;
            let mut env = HashMap::from([
                ("HOME".to_owned(), "/root".to_owned()),
                ("DEBIAN_FRONTEND".to_owned(), "noninteractive".to_owned()),
                ("PIP_ROOT_USER_ACTION".to_owned(), "ignore".to_owned()),
                ("PIP_DISABLE_PIP_VERSION_CHECK".to_owned(), "1".to_owned()),
            ]);
            if ca.is_some() {
                env.extend(
                    CA_VARS
                        .iter()
                        .map(|k| ((*k).to_owned(), BUILD_CA.to_owned())),
                );
            }
            let out = rpc::exec(
                ch,
                ExecSpec {
                    argv: step.argv,
                    env,
                    cwd: "/root".into(),
                    stdin: step.stdin,
                    timeout: STEP_TIMEOUT,
                    max_output_bytes: STEP_OUTPUT,
                    ..ExecSpec::default()
                },
            )
            .await
            .map_err(|e| match e {
                HostError::Guest { message, .. } => format!("{}: {message}", step.what),
                e => format!("{}: {}", step.what, error_chain(&e)),
            })?;
            for text in [&out.stdout, &out.stderr] {
                let text = String::from_utf8_lossy(text);
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    log(&format!("  {line}"));
                }
            }
            if out.timed_out {
                return Err(format!(
                    "{}: timed out after {} s",
                    step.what,
                    STEP_TIMEOUT.as_secs()
                ));
            }
            if out.exit_code != 0 {
                return Err(format!("{}: exit code {}", step.what, out.exit_code));
            }
        }
        log("builder VM: stopping and keeping its disk");
        let out = image.with_extension("steps.ext4");
        let _ = std::fs::remove_file(&out);
        agent
            .export_disk(&sandbox, &out)
            .await
            .map_err(|e| format!("builder VM disk: {}", error_chain(&e)))?;
        std::fs::rename(&out, image).map_err(|e| format!("builder VM disk: {e}"))
    }
    .await;
    if let Err(e) = agent.destroy(&sandbox).await {
        if !matches!(e, AgentError::SandboxNotFound(_)) {
            tracing::warn!(sandbox = %sandbox, error = &e as &dyn std::error::Error, "remove builder VM");
        }
    }
    if let Err(e) = agent.remove_template(&temp).await {
        tracing::warn!(template = %temp, error = &e as &dyn std::error::Error, "remove builder template");
    }
    result
}
