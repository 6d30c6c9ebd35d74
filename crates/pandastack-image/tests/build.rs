//! Real image builds (root, mmdebstrap and the host's Debian mirror needed; CI has them).

use std::path::Path;
use std::process::Command;

use pandastack_image::{build_base_in, install_agent, BuildError, Progress, TemplateSpec};

fn debugfs(image: &Path, req: &str) -> String {
    let out = Command::new("debugfs")
        .args(["-R", req])
        .arg(image)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spec_in(dir: &Path, text: &str) -> TemplateSpec {
    std::fs::write(dir.join("hello.txt"), "from a source file\n").unwrap();
    let p = dir.join("t.toml");
    std::fs::write(&p, text).unwrap();
    TemplateSpec::load(&p).unwrap()
}

#[test]
fn builds_files_and_setup_into_an_image_then_injects_the_agent() {
    let cache = tempfile::tempdir_in("/var/tmp").unwrap();
    let specs = tempfile::tempdir().unwrap();
    let spec = spec_in(
        specs.path(),
        r#"
name = "itest"
setup = ["python3 -c 'print(6*7)' > /opt/answer", "echo $((1+1)) > /opt/two"]
[debian]
packages = ["python3"]
[[files]]
dest = "/etc/pandastack/inline.conf"
content = "inline = true\n"
mode = 0o600
[[files]]
dest = "/opt/hello.txt"
source = "hello.txt"
[vm]
disk_mb = 1024
"#,
    );
    let mut steps = Vec::new();
    let img = build_base_in(cache.path(), &spec, false, &mut |p| {
        if let Progress::Step { name } = p {
            steps.push(name)
        }
    })
    .expect("build");
    assert!(!img.cached);
    assert_eq!(
        steps,
        [
            "bootstrap",
            "files",
            "setup[0]",
            "setup[1]",
            "guest-prep",
            "mkfs"
        ]
    );
    assert_eq!(img.apparent_bytes, 1024 << 20);
    assert!(
        img.allocated_bytes < img.apparent_bytes / 2,
        "image should be sparse"
    );
    assert!(debugfs(&img.path, "cat /opt/answer").contains("42"));
    assert!(debugfs(&img.path, "cat /opt/two").contains('2'));
    assert!(debugfs(&img.path, "cat /opt/hello.txt").contains("from a source file"));
    assert!(debugfs(&img.path, "stat /etc/pandastack/inline.conf").contains("Mode:  0600"));
    assert!(
        debugfs(&img.path, "stat /usr/bin/ip").contains("Type: regular"),
        "iproute2 is always installed"
    );
    assert!(debugfs(&img.path, "cat /etc/hostname").contains("sandbox"));

    // Second build is a cache hit.
    let again = build_base_in(cache.path(), &spec, false, &mut |_| {}).unwrap();
    assert!(again.cached);
    assert_eq!(again.path, img.path);

    // Agent injection: any executable stands in for the agent here.
    let out = cache.path().join("with-agent.ext4");
    install_agent(&img.path, Path::new("/bin/true"), &out).unwrap();
    let st = debugfs(&out, "stat /usr/local/sbin/pandastack-guest");
    assert!(st.contains("Mode:  0755"), "{st}");
    assert!(st.contains(&format!(
        "Size: {}",
        std::fs::metadata("/bin/true").unwrap().len()
    )));
    // The base image is untouched.
    assert!(!debugfs(&img.path, "stat /usr/local/sbin/pandastack-guest").contains("Mode:"));
}

#[test]
fn a_failing_setup_step_is_named_and_its_log_kept() {
    let cache = tempfile::tempdir_in("/var/tmp").unwrap();
    let specs = tempfile::tempdir().unwrap();
    let spec = spec_in(
        specs.path(),
        "name = \"broken\"\nsetup = [\"echo about to fail\", \"echo boom >&2; exit 7\"]\n",
    );
    let err = build_base_in(cache.path(), &spec, false, &mut |_| {}).expect_err("must fail");
    match err {
        BuildError::Step { step, log, .. } => {
            assert_eq!(step, "setup[1]");
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(text.contains("boom"), "log should keep the step's output");
        }
        other => panic!("unexpected error {other:?}"),
    }
    // Nothing that looks like a cached image is left.
    let images: Vec<_> = std::fs::read_dir(cache.path().join("images"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        images
            .iter()
            .all(|n| n.to_string_lossy().ends_with(".failed")),
        "{images:?}"
    );
}
