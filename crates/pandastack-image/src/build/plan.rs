//! The mmdebstrap invocation for a spec: one run bootstraps the tree and then runs every later
//! step (pip, npm, files, setup, guest-prep) as a `--customize-hook`. mmdebstrap mounts /proc,
//! /sys and /dev for the hooks; the whole run happens in private mount and PID namespaces (see
//! `build_image`), so neither a mount nor a process can outlive it on the host.
//!
//! Each hook first prints `@@step <name>` on stderr: the step markers that progress reporting and
//! error messages use. A hook's own output goes to stderr as well, so it stays in order with the
//! markers and with mmdebstrap's messages.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::mirror::DebianSources;
use crate::spec::{FileContent, TemplateSpec};

/// The marker a hook prints when its step starts.
pub(super) const STEP_MARKER: &str = "@@step ";

/// PATH inside the image for every chroot command.
const CHROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Keeps the image small; these settings stay in the image, so `apt-get install` in a sandbox
/// behaves the same (no recommends, no docs).
const APT_OPTIONS: &[&str] = &[
    "APT::Install-Recommends \"false\"",
    "APT::Install-Suggests \"false\"",
    "Acquire::Languages \"none\"",
];
const DPKG_OPTIONS: &[&str] = &[
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
    "path-exclude=/usr/share/linda/*",
];

/// A step and the command it runs (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlannedStep {
    pub name: String,
    pub command: String,
}

#[derive(Debug)]
pub(super) struct Plan {
    /// mmdebstrap's arguments.
    pub args: Vec<String>,
    /// `bootstrap` first, then one entry per hook in the order they run.
    pub steps: Vec<PlannedStep>,
}

impl Plan {
    pub fn command_of(&self, step: &str) -> String {
        self.steps
            .iter()
            .find(|s| s.name == step)
            .map(|s| s.command.clone())
            .unwrap_or_else(|| "mmdebstrap".into())
    }
}

/// Single-quotes `s` for sh.
pub(super) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// What chroot commands take from the host: proxy settings and the CA bundle the host trusts
/// (a TLS-inspecting proxy's CA, say). Nothing else of the host's environment (no PIP_*, no
/// NODE_*) leaks into a build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HostEnv {
    pub proxies: Vec<(String, String)>,
    pub ca_bundle: Option<PathBuf>,
}

const PROXY_VARS: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
];

/// Where the host's CA bundle is copied inside the tree for the build; removed by guest-prep (and
/// mmdebstrap empties /tmp), so the image keeps its own CA store.
const BUILD_CA: &str = "/tmp/pandastack-build-ca.crt";

impl HostEnv {
    pub fn from_host() -> Self {
        let proxies = PROXY_VARS
            .iter()
            .filter_map(|k| Some((k.to_string(), std::env::var(k).ok()?)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let ca_bundle = std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .into_iter()
            .chain([PathBuf::from("/etc/ssl/certs/ca-certificates.crt")])
            .find(|p| p.is_file());
        Self { proxies, ca_bundle }
    }

    /// Shell lines that run `command` (already quoted) in the chroot `$1` with a clean
    /// environment plus `extra` variables.
    fn chroot(&self, extra: &[&str], command: &str) -> String {
        let mut vars: Vec<String> = [
            "HOME=/root".to_string(),
            format!("PATH={CHROOT_PATH}"),
            "LANG=C.UTF-8".into(),
            "LC_ALL=C.UTF-8".into(),
            "TERM=dumb".into(),
            "DEBIAN_FRONTEND=noninteractive".into(),
        ]
        .into();
        vars.extend(
            self.proxies
                .iter()
                .map(|(k, v)| sh_quote(&format!("{k}={v}"))),
        );
        let mut prelude = String::new();
        if let Some(ca) = &self.ca_bundle {
            prelude = format!(
                "mkdir -p \"$1/tmp\" && cp {} \"$1{BUILD_CA}\"\n",
                sh_quote(&ca.to_string_lossy())
            );
            for k in [
                "SSL_CERT_FILE",
                "REQUESTS_CA_BUNDLE",
                "PIP_CERT",
                "NODE_EXTRA_CA_CERTS",
                "CURL_CA_BUNDLE",
                "GIT_SSL_CAINFO",
            ] {
                vars.push(format!("{k}={BUILD_CA}"));
            }
        }
        vars.extend(extra.iter().map(|v| v.to_string()));
        format!(
            "{prelude}chroot \"$1\" /usr/bin/env -i {} {command}\n",
            vars.join(" ")
        )
    }
}

/// The guest's identity files, rewritten per sandbox by the agent; no fstab entries (the agent
/// mounts what it needs); the agent's directory; no caches.
const GUEST_PREP: &str = r#"r="$1"
printf 'sandbox\n' > "$r/etc/hostname"
rm -f "$r/etc/machine-id"
: > "$r/etc/machine-id"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n' > "$r/etc/hosts"
rm -f "$r/etc/resolv.conf"
printf '# Written by pandastack-guest when the sandbox starts.\n' > "$r/etc/resolv.conf"
printf '# No entries: pandastack-guest mounts what the sandbox needs.\n' > "$r/etc/fstab"
mkdir -p "$r/usr/local/sbin"
chmod 0755 "$r/usr/local/sbin"
rm -f "$r/tmp/pandastack-build-ca.crt"
rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/lib/apt/lists/* \
  "$r"/root/.cache "$r"/root/.npm "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old
find "$r/var/log" -type f -delete
"#;

/// Writes the hook scripts into `hooks` and returns the mmdebstrap plan.
pub(super) fn plan(
    spec: &TemplateSpec,
    host: &HostEnv,
    sources: &DebianSources,
    hooks: &Path,
    tree: &Path,
) -> std::io::Result<Plan> {
    std::fs::create_dir_all(hooks)?;
    let deb = spec.debian();
    let mut args = vec![
        "--mode=root".to_string(),
        "--verbose".into(),
        format!("--variant={}", deb.variant.as_str()),
    ];
    if !deb.packages.is_empty() {
        args.push(format!("--include={}", deb.packages.join(",")));
    }
    args.extend(APT_OPTIONS.iter().map(|o| format!("--aptopt={o}")));
    args.extend(DPKG_OPTIONS.iter().map(|o| format!("--dpkgopt={o}")));
    let source_args = sources.mmdebstrap_args(&deb.components);
    let mut steps = vec![PlannedStep {
        name: "bootstrap".into(),
        command: format!(
            "mmdebstrap --variant={} --include={} {} {}",
            deb.variant.as_str(),
            deb.packages.join(","),
            deb.suite,
            source_args.join(" | ")
        ),
    }];

    let mut hook = |name: String, command: String, script: String| -> std::io::Result<()> {
        let file = hooks.join(format!(
            "{:02}-{}.sh",
            steps.len(),
            name.replace(['[', ']'], "")
        ));
        let mut f = std::fs::File::create(&file)?;
        writeln!(f, "# step {name}")?;
        f.write_all(script.as_bytes())?;
        args.push(format!(
            "--customize-hook=echo {} >&2; bash -euo pipefail {} \"$1\" >&2",
            sh_quote(&format!("{STEP_MARKER}{name}")),
            sh_quote(&file.to_string_lossy())
        ));
        steps.push(PlannedStep { name, command });
        Ok(())
    };

    if !spec.pip_packages().is_empty() {
        let pkgs: Vec<String> = spec.pip_packages().iter().map(|p| sh_quote(p)).collect();
        hook(
            "pip".into(),
            format!(
                "pip install --break-system-packages {}",
                spec.pip_packages().join(" ")
            ),
            host.chroot(
                &[
                    "PIP_ROOT_USER_ACTION=ignore",
                    "PIP_DISABLE_PIP_VERSION_CHECK=1",
                    "PIP_NO_CACHE_DIR=1",
                ],
                &format!(
                    "python3 -m pip install --break-system-packages {}",
                    pkgs.join(" ")
                ),
            ),
        )?;
    }
    if !spec.npm_packages().is_empty() {
        let pkgs: Vec<String> = spec.npm_packages().iter().map(|p| sh_quote(p)).collect();
        hook(
            "npm".into(),
            format!("npm install -g {}", spec.npm_packages().join(" ")),
            host.chroot(
                &[],
                &format!(
                    "npm install -g --no-fund --no-audit --no-update-notifier {}",
                    pkgs.join(" ")
                ),
            ) + &host.chroot(&[], "npm cache clean --force"),
        )?;
    }
    if !spec.files().is_empty() {
        let mut script = String::new();
        let mut dests = Vec::new();
        for (i, f) in spec.files().iter().enumerate() {
            let src: PathBuf = match &f.content {
                FileContent::Inline(text) => {
                    let p = hooks.join(format!("file-{i}"));
                    std::fs::write(&p, text)?;
                    p
                }
                FileContent::Source { path, .. } => path.clone(),
            };
            // `install` runs inside the chroot, so the destination (and any symlink on its way)
            // resolves inside the image, never on the host.
            script.push_str(&format!(
                "chroot \"$1\" /usr/bin/install -D -m {:04o} /dev/stdin {} < {}\n",
                f.mode,
                sh_quote(&f.dest),
                sh_quote(&src.to_string_lossy())
            ));
            dests.push(f.dest.as_str());
        }
        hook(
            "files".into(),
            format!("install {}", dests.join(" ")),
            script,
        )?;
    }
    for (i, cmd) in spec.setup().iter().enumerate() {
        let cmd_file = hooks.join(format!("setup-{i}.cmd"));
        std::fs::write(&cmd_file, cmd)?;
        hook(
            format!("setup[{i}]"),
            cmd.clone(),
            host.chroot(
                &[],
                &format!(
                    "/bin/bash -euo pipefail -c \"$(cat {})\" setup",
                    sh_quote(&cmd_file.to_string_lossy())
                ),
            ),
        )?;
    }
    hook(
        "guest-prep".into(),
        "guest preparation (hostname, machine-id, hosts, resolv.conf, fstab, caches)".into(),
        GUEST_PREP.into(),
    )?;

    args.push(deb.suite.clone());
    args.push(tree.to_string_lossy().into_owned());
    args.extend(source_args);
    Ok(Plan { args, steps })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::MirrorOrigin;

    #[test]
    fn plans_hooks_in_order_with_their_commands() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("src.txt"), "x").unwrap();
        let spec_path = dir.path().join("t.toml");
        std::fs::write(
            &spec_path,
            r#"name = "t"
setup = ["echo 'quoted' > /a", "exit 3"]
[debian]
packages = ["python3-pip", "npm", "jq"]
[pip]
packages = ["requests >= 2"]
[npm]
packages = ["typescript"]
[[files]]
dest = "/etc/it's.conf"
content = "a"
mode = "0600"
[[files]]
dest = "/opt/src.txt"
source = "src.txt"
"#,
        )
        .unwrap();
        let spec = TemplateSpec::load(&spec_path).unwrap();
        let sources = DebianSources {
            suite: "bookworm".into(),
            main: "http://m.invalid/debian".into(),
            origin: MirrorOrigin::Host,
            updates: None,
            security: Some("http://s.invalid/debian-security".into()),
        };
        let hooks = dir.path().join("hooks");
        let host = HostEnv::default();
        let plan = plan(&spec, &host, &sources, &hooks, &dir.path().join("tree")).unwrap();
        let names: Vec<&str> = plan.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bootstrap",
                "pip",
                "npm",
                "files",
                "setup[0]",
                "setup[1]",
                "guest-prep"
            ]
        );
        assert_eq!(plan.command_of("setup[1]"), "exit 3");
        assert!(plan.args.contains(&"--variant=minbase".to_string()));
        assert!(plan
            .args
            .contains(&"--include=python3-pip,npm,jq".to_string()));
        let n = plan.args.len();
        assert_eq!(
            &plan.args[n - 4..],
            [
                "bookworm",
                &dir.path().join("tree").to_string_lossy(),
                "deb http://m.invalid/debian bookworm main",
                "deb http://s.invalid/debian-security bookworm-security main",
            ]
        );
        let hooks_args: Vec<&String> = plan
            .args
            .iter()
            .filter(|a| a.starts_with("--customize-hook="))
            .collect();
        assert_eq!(hooks_args.len(), 6);
        assert!(hooks_args[0].contains("'@@step pip'"));

        let script = |prefix: &str| {
            let e = std::fs::read_dir(&hooks)
                .unwrap()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with(prefix))
                .unwrap();
            std::fs::read_to_string(e.path()).unwrap()
        };
        assert!(script("01-pip").contains("--break-system-packages 'requests >= 2'"));
        let files = script("03-files");
        assert!(
            files.contains("-m 0600 /dev/stdin '/etc/it'\\''s.conf'"),
            "{files}"
        );
        assert!(files.contains(&format!("< '{}'", dir.path().join("src.txt").display())));
        assert_eq!(
            std::fs::read_to_string(hooks.join("setup-0.cmd")).unwrap(),
            "echo 'quoted' > /a"
        );
    }

    /// The setup hook really runs the command with bash -euo pipefail, keeps its quoting and
    /// gives it a clean environment with only the proxy and CA settings of the host (checked with
    /// a fake chroot that runs the rest of its arguments on the host).
    #[test]
    fn setup_commands_run_strictly_in_a_clean_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let env_out = dir.path().join("env");
        let q = |p: &Path| sh_quote(&p.to_string_lossy());
        let setup = [
            format!("echo \"a'b\" > {}", q(&out)),
            format!("false; echo not reached > {}", q(&out)),
            "cat /nonexistent | true".to_string(),
            format!("env > {}", q(&env_out)),
        ];
        let text = format!("name = \"t\"\nsetup = {}\n", toml_array(&setup));
        let spec = TemplateSpec::from_toml(&text, &dir.path().join("t.toml")).unwrap();
        let sources = DebianSources {
            suite: "bookworm".into(),
            main: "http://m.invalid/debian".into(),
            origin: MirrorOrigin::Host,
            updates: None,
            security: None,
        };
        let ca = dir.path().join("host-ca.crt");
        std::fs::write(&ca, "CERT").unwrap();
        let host = HostEnv {
            proxies: vec![("https_proxy".into(), "http://proxy.invalid:3128".into())],
            ca_bundle: Some(ca),
        };
        let hooks = dir.path().join("hooks");
        plan(&spec, &host, &sources, &hooks, &dir.path().join("tree")).unwrap();
        let fake = dir.path().join("bin");
        std::fs::create_dir(&fake).unwrap();
        std::fs::write(fake.join("chroot"), "#!/bin/sh\nshift\nexec \"$@\"\n").unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(fake.join("chroot"))
            .status()
            .unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let run = |n: usize| {
            let prefix = format!("{:02}-setup{}", n + 1, n);
            let script = std::fs::read_dir(&hooks)
                .unwrap()
                .flatten()
                .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .unwrap()
                .path();
            std::process::Command::new("bash")
                .args(["-euo", "pipefail"])
                .arg(&script)
                .arg(&root)
                .env("PATH", format!("{}:/usr/bin:/bin", fake.display()))
                .env("PIP_FIND_LINKS", "/host/wheels")
                .status()
                .unwrap()
        };
        assert!(run(0).success());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a'b\n");
        assert!(!run(1).success(), "errexit");
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "a'b\n");
        assert!(!run(2).success(), "pipefail");
        assert!(run(3).success());
        let env = std::fs::read_to_string(&env_out).unwrap();
        for want in [
            "HOME=/root",
            "DEBIAN_FRONTEND=noninteractive",
            "https_proxy=http://proxy.invalid:3128",
            "SSL_CERT_FILE=/tmp/pandastack-build-ca.crt",
            "NODE_EXTRA_CA_CERTS=/tmp/pandastack-build-ca.crt",
        ] {
            assert!(env.lines().any(|l| l == want), "{want} missing:\n{env}");
        }
        assert!(
            !env.contains("PIP_FIND_LINKS"),
            "host variables leak:\n{env}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("tmp/pandastack-build-ca.crt")).unwrap(),
            "CERT"
        );
    }

    fn toml_array(items: &[String]) -> String {
        let quoted: Vec<String> = items
            .iter()
            .map(|i| format!("\"{}\"", i.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect();
        format!("[{}]", quoted.join(", "))
    }
}
