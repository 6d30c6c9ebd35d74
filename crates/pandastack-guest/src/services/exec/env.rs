//! Who runs a command and with which environment.

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;

use nix::unistd::{Gid, Uid, User};
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

impl Identity {
    fn from_user(u: User) -> Self {
        let groups = CString::new(u.name.clone())
            .ok()
            .and_then(|c| nix::unistd::getgrouplist(&c, u.gid).ok())
            .map(|g| g.into_iter().map(Gid::as_raw).collect())
            .unwrap_or_else(|| vec![u.gid.as_raw()]);
        Self {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups,
            home: u.dir,
            name: u.name,
            shell: u.shell,
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
    let lookup_err = |e: nix::Error| Status::internal(format!("look up user {user:?}: {e}"));
    if user.is_empty() {
        let uid = Uid::current();
        return Ok(User::from_uid(uid)
            .map_err(lookup_err)?
            .map(Identity::from_user)
            .unwrap_or_else(|| Identity::bare(uid.as_raw(), Gid::current().as_raw())));
    }
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(User::from_uid(Uid::from_raw(uid))
            .map_err(lookup_err)?
            .map(Identity::from_user)
            .unwrap_or_else(|| Identity::bare(uid, uid)));
    }
    User::from_name(user)
        .map_err(lookup_err)?
        .map(Identity::from_user)
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
