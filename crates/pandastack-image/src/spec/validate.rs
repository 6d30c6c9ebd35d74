//! Raw spec → [`TemplateSpec`]: every field checked once, errors as `(field, problem)`.

use std::path::Path;

use super::raw::{RawFile, RawSpec};
use super::{DebianSpec, FileContent, FileSpec, Origin, TemplateSpec, Variant, VmShape};

type Invalid = (String, String);

fn bad(field: impl Into<String>, problem: impl Into<String>) -> Invalid {
    (field.into(), problem.into())
}

pub(super) fn validate(raw: RawSpec, spec_path: &Path) -> Result<TemplateSpec, Invalid> {
    let base_dir = spec_path.parent().unwrap_or(Path::new("."));
    name(&raw.name)?;
    if raw.description.len() > 200 || raw.description.chars().any(char::is_control) {
        return Err(bad("description", "one line of at most 200 characters"));
    }
    let debian = debian(raw.debian)?;
    let pip = tool_packages("pip.packages", raw.pip.packages)?;
    if !pip.is_empty() && !has_package(&debian.packages, "python3-pip") {
        return Err(bad(
            "pip.packages",
            "pip packages need python3-pip in debian.packages",
        ));
    }
    let npm = tool_packages("npm.packages", raw.npm.packages)?;
    if !npm.is_empty() && !has_package(&debian.packages, "npm") {
        return Err(bad(
            "npm.packages",
            "npm packages need npm in debian.packages",
        ));
    }
    let mut files: Vec<FileSpec> = Vec::with_capacity(raw.files.len());
    for (i, f) in raw.files.into_iter().enumerate() {
        let f = file(i, f, base_dir)?;
        if files.iter().any(|g| g.dest == f.dest) {
            return Err(bad(
                format!("files[{i}].dest"),
                format!("{} is written by an earlier entry", f.dest),
            ));
        }
        files.push(f);
    }
    for (i, cmd) in raw.setup.iter().enumerate() {
        if cmd.trim().is_empty() || cmd.contains('\0') {
            return Err(bad(format!("setup[{i}]"), "a non-empty shell command"));
        }
    }
    let vm = VmShape {
        vcpus: raw.vm.vcpus.unwrap_or(1),
        memory_mb: raw.vm.memory_mb.unwrap_or(512),
        disk_mb: raw.vm.disk_mb.unwrap_or(2048),
        disk_mbps: raw.vm.disk_mbps,
        disk_iops: raw.vm.disk_iops,
    };
    if !(1..=16).contains(&vm.vcpus) {
        return Err(bad("vm.vcpus", "between 1 and 16"));
    }
    if !(128..=65536).contains(&vm.memory_mb) {
        return Err(bad("vm.memory_mb", "between 128 and 65536 (MiB)"));
    }
    if !(256..=1_048_576).contains(&vm.disk_mb) {
        return Err(bad("vm.disk_mb", "between 256 and 1048576 (MiB)"));
    }
    if vm
        .disk_mbps
        .is_some_and(|v| !(1..=super::MAX_DISK_MBPS).contains(&v))
    {
        return Err(bad(
            "vm.disk_mbps",
            format!("between 1 and {} (MiB/s)", super::MAX_DISK_MBPS),
        ));
    }
    if vm
        .disk_iops
        .is_some_and(|v| !(1..=super::MAX_DISK_IOPS).contains(&v))
    {
        return Err(bad(
            "vm.disk_iops",
            format!("between 1 and {}", super::MAX_DISK_IOPS),
        ));
    }
    Ok(TemplateSpec {
        name: raw.name,
        description: raw.description,
        debian,
        pip,
        npm,
        files,
        setup: raw.setup,
        vm,
        origin: Origin::default(),
    })
}

fn name(n: &str) -> Result<(), Invalid> {
    let ok = !n.is_empty()
        && n.len() <= 40
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !n.starts_with('-')
        && !n.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(bad(
            "name",
            format!(
                "{n:?}: 1 to 40 characters of a-z, 0-9 and '-', not starting or ending with '-'"
            ),
        ))
    }
}

fn word(s: &str) -> bool {
    s.len() <= 40
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn debian(raw: super::raw::RawDebian) -> Result<DebianSpec, Invalid> {
    let suite = raw.suite.unwrap_or_else(|| "bookworm".into());
    if !word(&suite) {
        return Err(bad(
            "debian.suite",
            format!("{suite:?} is not a Debian suite name such as bookworm"),
        ));
    }
    let variant_name = raw.variant.unwrap_or_else(|| "minbase".into());
    let variant = Variant::ALL
        .into_iter()
        .find(|v| v.as_str() == variant_name)
        .ok_or_else(|| {
            let all: Vec<&str> = Variant::ALL.iter().map(|v| v.as_str()).collect();
            bad(
                "debian.variant",
                format!("{variant_name:?} is not one of {}", all.join(", ")),
            )
        })?;
    let components = raw.components.unwrap_or_else(|| vec!["main".into()]);
    if components.is_empty() {
        return Err(bad("debian.components", "at least one component (main)"));
    }
    for (i, c) in components.iter().enumerate() {
        if !word(c) {
            return Err(bad(
                format!("debian.components[{i}]"),
                format!("{c:?} is not a component name such as main"),
            ));
        }
    }
    for (i, p) in raw.packages.iter().enumerate() {
        let field = format!("debian.packages[{i}]");
        if !debian_package_ok(p) {
            return Err(bad(
                field,
                format!("{p:?} is not a Debian package name (optionally with =version or /suite)"),
            ));
        }
        if raw.packages[..i].contains(p) {
            return Err(bad(field, format!("{p:?} is listed twice")));
        }
    }
    if let Some(m) = &raw.mirror {
        let scheme_ok = ["http://", "https://", "file:/"]
            .iter()
            .any(|s| m.starts_with(s));
        if !scheme_ok || m.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(
                "debian.mirror",
                format!("{m:?} is not an http://, https:// or file:/ URI"),
            ));
        }
    }
    Ok(DebianSpec {
        suite,
        variant,
        components,
        packages: raw.packages,
        mirror: raw.mirror,
    })
}

/// A package name as apt and mmdebstrap's `--include` take it: `name`, `name:arch`,
/// `name=version`, `name/suite`. No commas (the include separator) and no spaces.
fn debian_package_ok(p: &str) -> bool {
    let mut bytes = p.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && p.len() <= 200
        && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.:=~/".contains(&b))
}

/// The package's name without an `=version`, `/suite` or `:arch` suffix.
fn package_base(p: &str) -> &str {
    p.split(['=', '/', ':']).next().unwrap_or(p)
}

fn has_package(packages: &[String], name: &str) -> bool {
    packages.iter().any(|p| package_base(p) == name)
}

/// pip requirement specifiers and npm package specs are passed as single, quoted arguments, so
/// anything printable works; a leading '-' would be read as an option.
fn tool_packages(field: &str, list: Vec<String>) -> Result<Vec<String>, Invalid> {
    for (i, p) in list.iter().enumerate() {
        if p.trim().is_empty()
            || p.starts_with('-')
            || p.len() > 500
            || p.chars().any(char::is_control)
        {
            return Err(bad(
                format!("{field}[{i}]"),
                format!("{p:?} is not a package specifier"),
            ));
        }
    }
    Ok(list)
}

/// Trees mmdebstrap mounts or empties while building: a file put there would not survive.
const NOT_WRITABLE: &[&str] = &["/proc", "/sys", "/dev", "/run", "/tmp"];

fn file(i: usize, f: RawFile, base_dir: &Path) -> Result<FileSpec, Invalid> {
    let field = |name: &str| format!("files[{i}].{name}");
    let d = &f.dest;
    let normal = d.starts_with('/')
        && d.len() > 1
        && d.len() <= 4096
        && !d.ends_with('/')
        && !d.chars().any(char::is_control)
        && d[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if !normal {
        return Err(bad(
            field("dest"),
            format!("{d:?} is not an absolute, normalised file path (like /etc/app.conf)"),
        ));
    }
    if let Some(top) = NOT_WRITABLE
        .iter()
        .find(|t| d.strip_prefix(**t).is_some_and(|r| r.starts_with('/')))
    {
        return Err(bad(
            field("dest"),
            format!("{d:?}: {top} is not part of the image"),
        ));
    }
    let content = match (f.content, f.source) {
        (Some(c), None) => FileContent::Inline(c),
        (None, Some(s)) => {
            if s.is_empty() || Path::new(&s).is_absolute() {
                return Err(bad(
                    field("source"),
                    format!("{s:?}: a path relative to the spec file"),
                ));
            }
            let path = base_dir.join(&s);
            if !path.is_file() {
                return Err(bad(
                    field("source"),
                    format!("{} is not a file", path.display()),
                ));
            }
            FileContent::Source { source: s, path }
        }
        _ => {
            return Err(bad(
                format!("files[{i}]"),
                "exactly one of content or source",
            ))
        }
    };
    let mode = match f.mode {
        None => 0o644,
        Some(m) => u32::from_str_radix(&m, 8)
            .ok()
            .filter(|v| (1..=4).contains(&m.len()) && *v <= 0o7777)
            .ok_or_else(|| {
                bad(
                    field("mode"),
                    format!("{m:?}: octal permission bits as a string, like \"0644\""),
                )
            })?,
    };
    Ok(FileSpec {
        dest: f.dest,
        content,
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{SpecError, TemplateSpec};
    use std::path::Path;

    fn parse(text: &str) -> Result<TemplateSpec, SpecError> {
        TemplateSpec::from_toml(text, Path::new("/nonexistent/t.toml"))
    }

    /// The field an invalid spec is rejected for.
    fn rejected_field(text: &str) -> String {
        match parse(text) {
            Err(SpecError::Invalid { field, .. }) => field,
            other => panic!("expected a validation error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn defaults_apply() {
        let s = parse("name = \"t\"").unwrap();
        assert_eq!(s.debian().suite, "bookworm");
        assert_eq!(s.debian().variant.as_str(), "minbase");
        assert_eq!(s.debian().components, ["main"]);
        assert!(s.debian().packages.is_empty() && s.debian().mirror.is_none());
        let vm = s.vm();
        assert_eq!((vm.vcpus, vm.memory_mb, vm.disk_mb), (1, 512, 2048));
        assert!(s.files().is_empty() && s.setup().is_empty());
    }

    #[test]
    fn a_full_spec_parses() {
        let s = parse(
            r##"
name = "data-science-2"
description = "Python with numpy"
setup = ["echo hi > /etc/motd", "useradd -m user"]
[debian]
suite = "trixie"
variant = "minbase"
components = ["main", "contrib"]
packages = ["python3", "python3-pip", "npm", "libc6:amd64", "curl=7.88.1-10+deb12u8", "git/bookworm-backports"]
mirror = "http://mirror.invalid/debian"
[pip]
packages = ["numpy==1.26.4", "requests[socks] >= 2"]
[npm]
packages = ["@types/node@20", "typescript"]
[[files]]
dest = "/etc/app/app.conf"
content = "x = 1\n"
mode = "0600"
[[files]]
dest = "/usr/local/bin/tool"
content = "#!/bin/sh\n"
mode = "755"
[vm]
vcpus = 16
memory_mb = 65536
disk_mb = 256
disk_mbps = 64
disk_iops = 500
"##,
        )
        .unwrap();
        assert_eq!((s.vm().disk_mbps, s.vm().disk_iops), (Some(64), Some(500)));
        assert_eq!(s.files()[0].mode, 0o600);
        assert_eq!(s.files()[1].mode, 0o755);
        assert_eq!(s.pip_packages().len(), 2);
        assert_eq!(s.npm_packages(), ["@types/node@20", "typescript"]);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: &[(&str, &str)] = &[
            ("name = \"\"", "name"),
            ("name = \"Upper\"", "name"),
            ("name = \"has space\"", "name"),
            ("name = \"-lead\"", "name"),
            (&format!("name = \"{}\"", "a".repeat(41)), "name"),
            ("name = \"t\"\ndescription = \"two\\nlines\"", "description"),
            ("name = \"t\"\n[debian]\nsuite = \"Bookworm\"", "debian.suite"),
            ("name = \"t\"\n[debian]\nvariant = \"fat\"", "debian.variant"),
            ("name = \"t\"\n[debian]\ncomponents = []", "debian.components"),
            ("name = \"t\"\n[debian]\ncomponents = [\"ma in\"]", "debian.components[0]"),
            ("name = \"t\"\n[debian]\npackages = [\"ok\", \"-oops\"]", "debian.packages[1]"),
            ("name = \"t\"\n[debian]\npackages = [\"a,b\"]", "debian.packages[0]"),
            ("name = \"t\"\n[debian]\npackages = [\"jq\", \"jq\"]", "debian.packages[1]"),
            ("name = \"t\"\n[debian]\nmirror = \"ftp://x\"", "debian.mirror"),
            ("name = \"t\"\n[pip]\npackages = [\"numpy\"]", "pip.packages"),
            (
                "name = \"t\"\n[debian]\npackages = [\"python3-pip\"]\n[pip]\npackages = [\"--index-url=x\"]",
                "pip.packages[0]",
            ),
            ("name = \"t\"\n[npm]\npackages = [\"left-pad\"]", "npm.packages"),
            (
                "name = \"t\"\n[debian]\npackages = [\"npm\"]\n[npm]\npackages = [\"\"]",
                "npm.packages[0]",
            ),
            ("name = \"t\"\n[[files]]\ndest = \"etc/x\"\ncontent = \"a\"", "files[0].dest"),
            ("name = \"t\"\n[[files]]\ndest = \"/etc/../x\"\ncontent = \"a\"", "files[0].dest"),
            ("name = \"t\"\n[[files]]\ndest = \"/etc/\"\ncontent = \"a\"", "files[0].dest"),
            ("name = \"t\"\n[[files]]\ndest = \"/proc/x\"\ncontent = \"a\"", "files[0].dest"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"", "files[0]"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\nsource = \"b\"", "files[0]"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"\nsource = \"missing.txt\"", "files[0].source"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"\nsource = \"/etc/passwd\"", "files[0].source"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\nmode = \"0999\"", "files[0].mode"),
            ("name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\nmode = \"17777\"", "files[0].mode"),
            (
                "name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\n[[files]]\ndest = \"/x\"\ncontent = \"b\"",
                "files[1].dest",
            ),
            ("name = \"t\"\nsetup = [\"true\", \"  \"]", "setup[1]"),
            ("name = \"t\"\n[vm]\nvcpus = 0", "vm.vcpus"),
            ("name = \"t\"\n[vm]\nvcpus = 17", "vm.vcpus"),
            ("name = \"t\"\n[vm]\nmemory_mb = 64", "vm.memory_mb"),
            ("name = \"t\"\n[vm]\ndisk_mbps = 0", "vm.disk_mbps"),
            ("name = \"t\"\n[vm]\ndisk_iops = 0", "vm.disk_iops"),
            ("name = \"t\"\n[vm]\nmemory_mb = 70000", "vm.memory_mb"),
            ("name = \"t\"\n[vm]\ndisk_mb = 100", "vm.disk_mb"),
        ];
        for (text, field) in cases {
            assert_eq!(&rejected_field(text), field, "for spec {text:?}");
        }
    }

    #[test]
    fn the_error_message_names_the_field_and_file() {
        let msg = parse("name = \"t\"\n[vm]\nvcpus = 99")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("vm.vcpus") && msg.contains("/nonexistent/t.toml"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_rejected_with_the_key() {
        for (text, key) in [
            ("name = \"t\"\ncolour = \"blue\"", "colour"),
            ("name = \"t\"\n[debian]\npackage = [\"jq\"]", "package"),
            ("name = \"t\"\n[vm]\ncpus = 2", "cpus"),
            ("name = \"t\"\n[pip]\nindex = \"x\"", "index"),
            (
                "name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\nowner = \"me\"",
                "owner",
            ),
            ("name = \"t\"\n[extra]\nx = 1", "extra"),
            ("name = \"t\"\n[vm]\nvcpus = \"two\"", "vcpus"),
            (
                "name = \"t\"\n[[files]]\ndest = \"/x\"\ncontent = \"a\"\nmode = 0o644",
                "mode",
            ),
            ("description = \"no name\"", "name"),
        ] {
            match parse(text) {
                Err(SpecError::Parse { source, .. }) => {
                    let msg = source.to_string();
                    assert!(
                        msg.contains(key),
                        "error for {text:?} should name {key}: {msg}"
                    );
                }
                other => panic!("expected a parse error for {text:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn pip_and_npm_accept_versioned_base_packages() {
        parse("name = \"t\"\n[debian]\npackages = [\"python3-pip/bookworm\"]\n[pip]\npackages = [\"x\"]")
            .unwrap();
        parse(
            "name = \"t\"\n[debian]\npackages = [\"npm=9.2.0~ds1-1\"]\n[npm]\npackages = [\"x\"]",
        )
        .unwrap();
    }
}
