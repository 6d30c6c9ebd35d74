//! Real image builds, end to end: mmdebstrap from the host's Debian mirror, chroot steps (pip from
//! PyPI, files, setup), mkfs, agent injection. Needs root, the Debian mirror and PyPI (CI has
//! them).
//!
//! The successful build uses its own cache under `$PANDASTACK_CACHE` (default
//! /var/cache/pandastack), so a second run of this test is a cache hit; the failing build uses a
//! temporary cache. Neither shares a cache directory with other tests.

use std::path::{Path, PathBuf};
use std::process::Command;

use pandastack_image::{
    BuildError, BuildOptions, ImageCache, Progress, TemplateSpec, AGENT_PATH, BASE_IMAGE,
};

fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "image build tests need root (mmdebstrap --mode=root); run them as root, as CI does"
    );
}

fn persistent_cache(name: &str) -> ImageCache {
    let root = std::env::var_os("PANDASTACK_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/pandastack".into());
    ImageCache::new(root.join("tests").join(name))
}

fn debugfs(image: &Path, request: &str) -> String {
    let out = Command::new("debugfs")
        .args(["-R", request])
        .arg(image)
        .output()
        .expect("run debugfs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The token after `label` in debugfs `stat` output.
fn field<'a>(stat: &'a str, label: &str) -> Option<&'a str> {
    let mut words = stat.split_whitespace();
    words.find(|w| *w == label)?;
    words.next()
}

fn no_mounts_under(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    assert!(
        !info.lines().any(|l| l.contains(dir.as_ref())),
        "mounts left under {dir}:\n{info}"
    );
}

fn write_spec(dir: &Path, text: &str) -> TemplateSpec {
    let path = dir.join("spec.toml");
    std::fs::write(&path, text).unwrap();
    TemplateSpec::load(&path).unwrap()
}

const SPEC: &str = r#"
name = "itest-build"
description = "pandastack-image integration test"
setup = [
  "python3 -c 'import tomli_w; print(6 * 7)' > /opt/answer",
  "test -f /opt/hello.txt && echo $((1 + 1)) > /opt/two",
]
[debian]
packages = ["python3", "python3-pip"]
[pip]
packages = ["tomli-w==1.0.0"]
[[files]]
dest = "/etc/pandastack/inline.conf"
content = "inline = true\n"
mode = "0600"
[[files]]
dest = "/opt/hello.txt"
source = "hello.txt"
[vm]
disk_mb = 1024
"#;

#[test]
fn builds_a_spec_end_to_end_then_injects_the_agent() {
    require_root();
    let cache = persistent_cache("pandastack-image-build");
    let specs = tempfile::tempdir().unwrap();
    std::fs::write(specs.path().join("hello.txt"), "from a source file\n").unwrap();
    let spec = write_spec(specs.path(), SPEC);

    let mut events = Vec::new();
    let image = cache
        .build_base(&spec, BuildOptions::default(), &mut |p| events.push(p))
        .unwrap_or_else(|e| panic!("build failed: {e}: {:?}", std::error::Error::source(&e)));
    no_mounts_under(cache.root());
    if image.cached {
        eprintln!("cache hit: {}", image.path.display());
    } else {
        let steps: Vec<&str> = events
            .iter()
            .filter_map(|p| match p {
                Progress::StepStarted { step } => Some(step.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            steps,
            [
                "bootstrap",
                "pip",
                "files",
                "setup[0]",
                "setup[1]",
                "guest-prep",
                "mkfs"
            ]
        );
        assert!(
            events
                .iter()
                .any(|p| matches!(p, Progress::Downloaded { bytes } if *bytes > 1 << 20)),
            "bytes downloaded are reported"
        );
        assert!(matches!(events.last(), Some(Progress::Finished { .. })));
        assert_eq!(image.manifest.steps.len(), 7);
    }

    // The cache entry: image, manifest, spec copy and log; no build leftovers.
    assert_eq!(image.path, image.dir.join(BASE_IMAGE));
    assert!(image
        .dir
        .ends_with(format!("itest-build-{}", &spec.hash().unwrap().short())));
    for f in ["manifest.json", "spec.toml", "build.log"] {
        assert!(image.dir.join(f).is_file(), "{f}");
    }
    assert!(!image.dir.join("tree").exists());
    assert_eq!(image.manifest.hash, spec.hash().unwrap().as_str());
    let md = std::fs::metadata(&image.path).unwrap();
    assert_eq!(md.len(), 1024 << 20);
    use std::os::unix::fs::MetadataExt;
    assert!(md.blocks() * 512 < 400 << 20, "the image is sparse");

    // What the spec asked for is in the image.
    let python = debugfs(&image.path, "stat /usr/bin/python3");
    assert_eq!(field(&python, "Type:"), Some("symlink"), "{python}");
    let listing = debugfs(&image.path, "ls -l /usr/bin");
    assert!(
        listing
            .lines()
            .any(|l| l.contains("100755") && l.trim_end().ends_with(" python3.11")),
        "python3.11 is an executable file:\n{listing}"
    );
    // pip installed the package (the setup step imported it, too).
    let pip = debugfs(&image.path, "ls /usr/local/lib/python3.11/dist-packages");
    assert!(pip.contains("tomli_w"), "{pip}");
    assert_eq!(debugfs(&image.path, "cat /opt/answer"), "42\n");
    assert_eq!(debugfs(&image.path, "cat /opt/two"), "2\n");
    assert_eq!(
        debugfs(&image.path, "cat /opt/hello.txt"),
        "from a source file\n"
    );
    let inline = debugfs(&image.path, "stat /etc/pandastack/inline.conf");
    assert_eq!(field(&inline, "Mode:"), Some("0600"));
    assert_eq!(field(&inline, "User:"), Some("0"));
    // Guest preparation.
    assert_eq!(debugfs(&image.path, "cat /etc/hostname"), "sandbox\n");
    assert_eq!(debugfs(&image.path, "cat /etc/machine-id"), "");
    assert!(!debugfs(&image.path, "cat /etc/fstab")
        .lines()
        .any(|l| !l.starts_with('#') && !l.trim().is_empty()));
    assert!(debugfs(&image.path, "cat /etc/hosts").contains("localhost"));
    let sbin = debugfs(&image.path, "stat /usr/local/sbin");
    assert_eq!(field(&sbin, "Type:"), Some("directory"));
    assert!(!debugfs(&image.path, "ls /usr/share/man").contains("man1"));

    // A second build is a cache hit.
    let again = cache
        .build_base(&spec, BuildOptions::default(), &mut |_| {})
        .unwrap();
    assert!(again.cached);
    assert_eq!(again.path, image.path);

    // Agent injection into a copy (any executable stands in for the agent).
    let agent = specs.path().join("pandastack-guest");
    std::fs::write(&agent, b"#!/bin/sh\necho integration-test agent\n").unwrap();
    let with_agent = cache
        .rootfs_with_agent(&spec, &agent, BuildOptions::default(), &mut |_| {})
        .unwrap();
    assert!(with_agent
        .path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("rootfs-"));
    let st = debugfs(&with_agent.path, &format!("stat {AGENT_PATH}"));
    assert_eq!(field(&st, "Type:"), Some("regular"), "{st}");
    assert_eq!(field(&st, "Mode:"), Some("0755"), "{st}");
    assert_eq!(field(&st, "User:"), Some("0"), "{st}");
    assert_eq!(field(&st, "Group:"), Some("0"), "{st}");
    assert_eq!(
        debugfs(&with_agent.path, &format!("cat {AGENT_PATH}")),
        "#!/bin/sh\necho integration-test agent\n"
    );
    // The base image has no agent; asking again is a cache hit.
    assert!(field(
        &debugfs(&image.path, &format!("stat {AGENT_PATH}")),
        "Mode:"
    )
    .is_none());
    let again = cache
        .rootfs_with_agent(&spec, &agent, BuildOptions::default(), &mut |_| {})
        .unwrap();
    assert!(again.cached && again.path == with_agent.path);
}

#[test]
fn a_failing_setup_step_is_named_and_its_log_kept() {
    require_root();
    let cache_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let cache = ImageCache::new(cache_dir.path());
    let specs = tempfile::tempdir().unwrap();
    // `essential` is the quickest variant that still has bash.
    let spec = write_spec(
        specs.path(),
        "name = \"itest-fail\"\nsetup = [\"echo about to fail\", \"echo boom >&2; exit 7\", \"echo never\"]\n[debian]\nvariant = \"essential\"\n",
    );
    let mut events = Vec::new();
    let err = cache
        .build_base(&spec, BuildOptions::default(), &mut |p| events.push(p))
        .expect_err("the second setup command fails");
    assert!(events
        .iter()
        .any(|p| matches!(p, Progress::StepFinished { step, .. } if step == "setup[0]")));
    assert!(events
        .iter()
        .any(|p| matches!(p, Progress::StepFailed { step, .. } if step == "setup[1]")));
    assert!(!events.iter().any(|p| matches!(
        p,
        Progress::StepStarted { step } if step == "setup[2]" || step == "mkfs"
    )));
    no_mounts_under(cache_dir.path());
    let message = err.to_string();
    let BuildError::Step {
        step, command, log, ..
    } = &err
    else {
        panic!("unexpected error: {err:?}");
    };
    assert_eq!(step, "setup[1]");
    assert_eq!(command, "echo boom >&2; exit 7");
    assert!(
        message.contains("setup[1]") && message.contains("exit 7"),
        "{message}"
    );
    assert!(message.contains(&log.display().to_string()), "{message}");
    let text = std::fs::read_to_string(log).unwrap();
    for want in ["about to fail", "boom", "==> step setup[1]"] {
        assert!(text.contains(want), "log lacks {want:?}");
    }
    assert!(!text.contains("\nnever\n"));

    // The log is kept beside where the image would be; nothing looks cached.
    let images = cache_dir.path().join("images");
    let mut names: Vec<String> = std::fs::read_dir(&images)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let dir = format!("itest-fail-{}", spec.hash().unwrap().short());
    assert_eq!(names, [format!("{dir}.failed"), format!("{dir}.lock")]);
    assert_eq!(log, &images.join(format!("{dir}.failed/build.log")));
    assert!(!images.join(format!("{dir}.failed/tree")).exists());
    assert!(cache.cached_base(&spec).unwrap().is_none());
}
