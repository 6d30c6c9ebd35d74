//! Starting the unpacker confined. Between fork and exec the child (still root) gets a private
//! mount namespace with the work directory bind-mounted on `/tmp` (so it needs no access to the
//! work directory's ancestors), then a new user namespace. `Command::spawn` returns only after
//! the exec, but the uid/gid maps must be written by a process outside the namespace before the
//! child can become uid 0 in it; so a helper thread reads the child's pid from a pipe, writes the
//! maps, and lets the child go on through a second pipe.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::unpack::Report;
use super::{io, OciError, OciOptions, UNPACK_ID_BASE, UNPACK_ID_COUNT};

/// Where the work directory appears in the unpacker's mount namespace.
pub(super) const INSIDE: &str = "/tmp";

/// Lines of the unpacker's output passed on to the log, at most (each dropped entry is one; a
/// hostile layer can have millions).
const MAX_LOG_LINES: usize = 200;
/// The tail of the unpacker's stderr kept for the error message.
const MAX_STDERR: usize = 16 << 10;

/// What the unpacker did.
#[derive(Debug)]
pub(super) struct Summary {
    pub entries: u64,
    pub neutralised: u64,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), OciError> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if r != 0 {
        return Err(io("pipe")(std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Runs `<unpacker> internal oci-unpack` over `work` confined; returns its summary.
pub(super) fn run_unpacker(
    work: &Path,
    layers: &[PathBuf],
    opts: &OciOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Summary, OciError> {
    let exe = std::fs::File::open(&opts.unpacker)
        .map_err(io(format!("unpacker {}", opts.unpacker.display())))?;
    let work_c = CString::new(work.as_os_str().as_encoded_bytes())
        .map_err(|_| OciError::Unpacker("work path has a NUL byte".into()))?;
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;

    let mut cmd = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    cmd.args(["internal", "oci-unpack", "--root"])
        .arg(format!("{INSIDE}/root"))
        .arg("--out")
        .arg(format!("{INSIDE}/out/rootfs.ext4"));
    if let Some(mb) = opts.disk_mb {
        cmd.arg("--disk-mb").arg(mb.to_string());
    }
    cmd.arg("--layers");
    for l in layers {
        let name = l.file_name().map(|n| n.to_string_lossy().into_owned());
        cmd.arg(format!("{INSIDE}/{}", name.unwrap_or_default()));
    }
    cmd.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("PANDASTACK_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let exe_fd = exe.as_raw_fd();
    let (pid_w_fd, go_r_fd) = (pid_w.as_raw_fd(), go_r.as_raw_fd());
    // The parent's ends, which the forked child holds copies of until it execs.
    let (pid_r_fd, go_w_fd) = (pid_r.as_raw_fd(), go_w.as_raw_fd());
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec. It only makes async-signal-safe
    // system calls on values prepared above (raw fds, a C string, C string literals) and builds
    // errors with `from_raw_os_error`/`last_os_error`, which do not allocate: no allocation, no
    // lock, nothing another thread of the parent could have held at the fork.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            // Until it execs, the child holds a copy of every descriptor of ours, the API's
            // listening sockets among them. Should we die before the mapper releases it, it
            // must end rather than wait: it drops its copy of the release pipe's write end (so
            // the read below sees the end of the pipe once ours is gone) and dies with us.
            libc::close(go_w_fd);
            libc::close(pid_r_fd);
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // The executable stays open across exec (it is run through /proc/self/fd, so a
            // mount over its directory cannot hide it).
            let flags = libc::fcntl(exe_fd, libc::F_GETFD);
            if flags < 0 {
                return Err(std::io::Error::last_os_error());
            }
            check(libc::fcntl(
                exe_fd,
                libc::F_SETFD,
                flags & !libc::FD_CLOEXEC,
            ))?;
            // Still real root here: a private mount namespace showing the work directory on
            // /tmp. The mount namespace belongs to the host's user namespace, so once in the new
            // user namespace the child cannot mount or unmount anything in it.
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::mount(
                work_c.as_ptr(),
                c"/tmp".as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            check(libc::unshare(libc::CLONE_NEWUSER))?;
            // The parent's mapper thread writes our uid/gid maps, then lets us go on.
            let pid = libc::getpid().to_ne_bytes();
            if libc::write(pid_w_fd, pid.as_ptr().cast(), pid.len()) != pid.len() as isize {
                return Err(std::io::Error::last_os_error());
            }
            let mut go = [0u8; 1];
            if libc::read(go_r_fd, go.as_mut_ptr().cast(), 1) != 1 {
                // End of pipe without the byte: the maps could not be written.
                return Err(std::io::Error::from_raw_os_error(libc::EPERM));
            }
            check(libc::setresgid(0, 0, 0))?;
            check(libc::setgroups(0, std::ptr::null()))?;
            check(libc::setresuid(0, 0, 0))?;
            // Set again after the credential change, which clears it: the unpacker dies with
            // the thread that started it rather than run on unattended.
            check(libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ))?;
            check(libc::chdir(c"/tmp".as_ptr()))?;
            Ok(())
        });
    }

    // Started before the spawn, since `spawn` returns only once the child has exec'd, which it
    // does only after the maps are written.
    let mapper = std::thread::spawn(move || -> Result<(), String> {
        let mut pid_r = std::fs::File::from(pid_r);
        let mut go_w = std::fs::File::from(go_w);
        let mut pid = [0u8; 4];
        pid_r
            .read_exact(&mut pid)
            .map_err(|e| format!("child pid: {e}"))?;
        let pid = i32::from_ne_bytes(pid);
        let map = format!("0 {UNPACK_ID_BASE} {UNPACK_ID_COUNT}\n");
        for file in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{file}"), &map)
                .map_err(|e| format!("write {file}: {e}"))?;
        }
        go_w.write_all(&[1])
            .map_err(|e| format!("release child: {e}"))
        // go_w closes here: without the byte, the child's read ends and its pre_exec fails.
    });
    let spawned = cmd.spawn();
    // Our copies of the child's pipe ends: with them closed, the mapper sees the end of the
    // pipe (and stops) if the child died or never started before writing its pid.
    drop(pid_w);
    drop(go_r);
    drop(cmd);
    let mapped = mapper
        .join()
        .unwrap_or_else(|_| Err("mapper thread panicked".into()));
    let mut child = spawned.map_err(|e| match &mapped {
        Err(m) => OciError::Unpacker(format!("start: {e} ({m})")),
        Ok(()) => OciError::Unpacker(format!("start: {e}")),
    })?;

    // stderr on a thread (only its tail is kept), stdout here: `log` stays on this thread.
    let stderr = child.stderr.take();
    let err_reader = std::thread::spawn(move || {
        let mut tail = Vec::new();
        if let Some(mut e) = stderr {
            let mut buf = [0u8; 8192];
            while let Ok(n) = e.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * MAX_STDERR {
                    tail.drain(..tail.len() - MAX_STDERR);
                }
            }
        }
        tail
    });
    let mut report = None;
    let mut logged = 0usize;
    let mut skipped = 0usize;
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).split(b'\n') {
            let Ok(line) = line else { break };
            if let Ok(r) = serde_json::from_slice::<Report>(&line) {
                report = Some(r);
            } else if logged < MAX_LOG_LINES {
                logged += 1;
                log(String::from_utf8_lossy(&line).trim_end());
            } else {
                skipped += 1;
            }
        }
    }
    if skipped > 0 {
        log(&format!("… and {skipped} more such lines"));
    }
    let status = child.wait().map_err(io("wait for the unpacker"))?;
    let stderr = err_reader.join().unwrap_or_default();
    match report {
        Some(Report::Done {
            entries,
            neutralised,
        }) if status.success() => Ok(Summary {
            entries,
            neutralised,
        }),
        Some(Report::TooSmall { need_mb, disk_mb }) if !status.success() => {
            Err(OciError::TooSmall { need_mb, disk_mb })
        }
        _ if status.success() => Err(OciError::Unpacker("no summary from the unpacker".into())),
        _ => {
            let stderr = String::from_utf8_lossy(&stderr);
            let msg = stderr.trim().lines().last().unwrap_or("").trim();
            let msg = msg.strip_prefix("Error: ").unwrap_or(msg);
            let msg = msg.strip_prefix("error: ").unwrap_or(msg);
            Err(OciError::Unpacker(if msg.is_empty() {
                status.to_string()
            } else {
                format!("{msg} ({status})")
            }))
        }
    }
}
