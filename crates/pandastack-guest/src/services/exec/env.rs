//! Who runs a command and with which environment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid};
use pandastack_guest_proto::v1;
use tonic::Status;

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Who runs the command.
#[derive(Debug)]
pub(super) struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<libc::gid_t>,
    pub home: PathBuf,
    pub name: String,
    pub shell: PathBuf,
}

/// One `/etc/passwd` line.
#[derive(Debug, Clone, PartialEq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
    shell: String,
}

/// Users from `/etc/passwd`-format text. The agent is linked statically and the image may have
/// any libc or none, so users are read from the files, never through NSS.
fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            if f.len() < 7 || f[0].is_empty() {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_owned(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_owned(),
                shell: f[6].to_owned(),
            })
        })
        .collect()
}

/// Groups of `name` from `/etc/group`-format text: `primary` and every group listing it.
fn parse_groups(text: &str, name: &str, primary: u32) -> Vec<u32> {
    let mut out = vec![primary];
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split(':').collect();
        if f.len() < 4 {
            continue;
        }
        let Ok(gid) = f[2].parse::<u32>() else {
            continue;
        };
        if f[3].split(',').any(|m| m == name) && !out.contains(&gid) {
            out.push(gid);
        }
    }
    out
}

fn read_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

impl Identity {
    fn from_entry(u: PasswdEntry, group_text: &str) -> Self {
        let groups = parse_groups(group_text, &u.name, u.gid);
        Self {
            uid: u.uid,
            gid: u.gid,
            groups,
            home: if u.home.is_empty() {
                "/".into()
            } else {
                u.home.into()
            },
            name: u.name,
            shell: if u.shell.is_empty() {
                "/bin/sh".into()
            } else {
                u.shell.into()
            },
        }
    }

    /// A uid without a passwd entry: runs as that uid with the same gid, home `/`.
    fn bare(uid: u32, gid: u32) -> Self {
        Self {
            uid,
            gid,
            groups: vec![gid],
            home: "/".into(),
            name: uid.to_string(),
            shell: "/bin/sh".into(),
        }
    }
}

/// Resolves `user` (name or numeric uid; empty = the agent's own user, root in a guest).
pub(super) fn identity(user: &str) -> Result<Identity, Status> {
    identity_in(user, Path::new("/etc"))
}

fn identity_in(user: &str, etc: &Path) -> Result<Identity, Status> {
    let users = parse_passwd(&read_or_empty(&etc.join("passwd")));
    let group_text = read_or_empty(&etc.join("group"));
    let by_uid = |uid: u32, gid: u32| {
        users
            .iter()
            .find(|u| u.uid == uid)
            .cloned()
            .map(|u| Identity::from_entry(u, &group_text))
            .unwrap_or_else(|| Identity::bare(uid, gid))
    };
    if user.is_empty() {
        return Ok(by_uid(Uid::current().as_raw(), Gid::current().as_raw()));
    }
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(by_uid(uid, uid));
    }
    users
        .into_iter()
        .find(|u| u.name == user)
        .map(|u| Identity::from_entry(u, &group_text))
        .ok_or_else(|| Status::invalid_argument(format!("user: no such user {user:?}")))
}

/// The command's environment: defaults for `who`, overridden by the request's `env`.
pub(super) fn environment(start: &v1::ExecStart, who: &Identity) -> HashMap<String, String> {
    let mut env = HashMap::from([
        ("PATH".to_string(), DEFAULT_PATH.to_string()),
        ("HOME".to_string(), who.home.to_string_lossy().into_owned()),
        ("USER".to_string(), who.name.clone()),
        ("LOGNAME".to_string(), who.name.clone()),
        (
            "SHELL".to_string(),
            who.shell.to_string_lossy().into_owned(),
        ),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ]);
    if start.pty {
        env.insert("TERM".into(), "xterm-256color".into());
    }
    env.extend(start.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::services::exec) fn root() -> Identity {
        Identity {
            uid: 0,
            gid: 0,
            groups: vec![0],
            home: "/root".into(),
            name: "root".into(),
            shell: "/bin/bash".into(),
        }
    }

    #[test]
    fn env_defaults_are_overridden_by_request() {
        let start = v1::ExecStart {
            env: [
                ("PATH".to_string(), "/x".to_string()),
                ("A".to_string(), "1".to_string()),
            ]
            .into(),
            pty: true,
            ..Default::default()
        };
        let env = environment(&start, &root());
        assert_eq!(env["PATH"], "/x");
        assert_eq!(env["A"], "1");
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["USER"], "root");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert_eq!(env["TERM"], "xterm-256color");
        let plain = environment(&v1::ExecStart::default(), &root());
        assert_eq!(plain["PATH"], DEFAULT_PATH);
        assert!(!plain.contains_key("TERM"));
    }

    #[test]
    fn passwd_and_group_files_are_read_without_nss() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("passwd"),
            "# comment\nroot:x:0:0:root:/root:/bin/bash\nbad line\nuser:x:1000:1000::/home/user:\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("group"),
            "root:x:0:\nsudo:x:27:user,other\nuser:x:1000:\ndocker:x:999:user\n",
        )
        .unwrap();
        let u = identity_in("user", dir.path()).unwrap();
        assert_eq!((u.uid, u.gid), (1000, 1000));
        assert_eq!(u.groups, vec![1000, 27, 999]);
        assert_eq!(u.home, PathBuf::from("/home/user"));
        assert_eq!(u.shell, PathBuf::from("/bin/sh"));
        assert_eq!(identity_in("1000", dir.path()).unwrap().name, "user");
        assert_eq!(
            identity_in("0", dir.path()).unwrap().home,
            PathBuf::from("/root")
        );
        // No passwd file at all (a bare image): uids still work, names do not.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(
            identity_in("", empty.path()).unwrap().home,
            PathBuf::from("/")
        );
        assert_eq!(identity_in("55", empty.path()).unwrap().uid, 55);
        assert_eq!(
            identity_in("user", empty.path()).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn users_resolve_by_name_uid_or_default() {
        assert_eq!(identity("root").unwrap().uid, 0);
        assert_eq!(identity("0").unwrap().name, "root");
        assert_eq!(identity("").unwrap().uid, Uid::current().as_raw());
        let bare = identity("4242424").unwrap();
        assert_eq!(
            (bare.uid, bare.gid, bare.home.as_path()),
            (4242424, 4242424, std::path::Path::new("/"))
        );
        assert_eq!(
            identity("no-such-user-here").unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}
