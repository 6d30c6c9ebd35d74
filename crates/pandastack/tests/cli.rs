//! The client side of the `pandastack` binary, end to end: `auth`, `sandbox …` and
//! `template ls` run as real processes against a real server with real guests — login and
//! status with a private config home, create/ls/info, exec with exit-code passthrough and
//! separate stdout/stderr, a 5 MiB copy both ways, `top` and `metrics`, a file watch, fork, snapshot, hibernate/wake, logs, kill,
//! the error reports with their hints, the interactive shell driven through a pseudo-
//! terminal, `volume …` with `sandbox create --volume`, and the operator's `host …` verbs with
//! a key from `keys create --admin`.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, start_with, Server};
use pandastack_testkit::{bake, runtime, within, RuntimeGuard};
use serde_json::Value;
use sha2::{Digest, Sha256};

async fn server() -> (Server, RuntimeGuard) {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let server = start_with(guard.dir.path(), free_port(), &["--network", "off"]).await;
    (server, guard)
}

/// A server whose `minimal` template has two volume slots (its servers find no spec to bake it
/// again from).
async fn server_with_volume_slots() -> (Server, RuntimeGuard) {
    let guard = runtime().await;
    pandastack_testkit::bake_with_slots(&guard, "minimal", 2).await;
    let server = start_with(guard.dir.path(), free_port(), &["--network", "off"]).await;
    (server, guard)
}

/// The CLI with a private HOME and XDG_CONFIG_HOME and no PANDASTACK_* variables inherited.
struct Cli {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl Cli {
    fn new() -> Self {
        Self {
            home: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pandastack"));
        cmd.args(args)
            .env_remove("PANDASTACK_API_KEY")
            .env_remove("PANDASTACK_TOKEN")
            .env_remove("PANDASTACK_BASE_URL")
            .env("HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path().join("xdg"))
            .env("PANDASTACK_LOG", "warn");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Runs the CLI (stdin from `input`), at most `limit`.
    async fn run_with(&self, args: &[&str], input: &str, limit: Duration) -> Output {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let input = input.to_owned();
        let what = format!("pandastack {args:?}");
        within(limit, &what, async move {
            tokio::task::spawn_blocking(move || {
                let mut child = cmd.spawn().expect("spawn pandastack");
                let mut stdin = child.stdin.take().unwrap();
                stdin.write_all(input.as_bytes()).unwrap();
                drop(stdin);
                child.wait_with_output().unwrap()
            })
            .await
            .unwrap()
        })
        .await
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, "", Duration::from_secs(180)).await
    }

    /// Runs the CLI, which must succeed; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "pandastack {args:?} failed ({:?}): {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the CLI, which must fail; returns (exit code, stderr).
    async fn fails(&self, args: &[&str]) -> (i32, String) {
        let out = self.run(args).await;
        assert!(
            !out.status.success(),
            "pandastack {args:?} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn sha256(p: &Path) -> String {
    hex(&Sha256::digest(std::fs::read(p).unwrap()))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_drives_a_sandbox_end_to_end() {
    let (server, _guard) = server().await;
    let cli = Cli::new();
    let t0 = Instant::now();

    // Login checks the key and stores URL and key, privately; status reads them back.
    let out = cli
        .run_with(
            &["auth", "login", "--base-url", &server.url],
            &format!("{}\n", server.key),
            Duration::from_secs(60),
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = cli.home.path().join("xdg/pandastack/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.contains(&server.key) && text.contains(&server.url),
        "{text}"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let status = cli.ok(&["auth", "status"]).await;
    assert!(
        status.contains(&server.url) && status.contains("ok"),
        "{status}"
    );

    // A bad key is refused, with the login hint, and nothing is stored.
    let (_, err) = cli
        .fails(&[
            "auth",
            "login",
            "--base-url",
            &server.url,
            "--api-key",
            "pds_bogus",
        ])
        .await;
    assert!(
        err.contains("unauthorized") && err.contains("pandastack auth login"),
        "{err}"
    );
    assert!(std::fs::read_to_string(&config)
        .unwrap()
        .contains(&server.key));

    // Templates through the API (this server has no specs: just the table's header).
    let templates = cli.ok(&["template", "ls"]).await;
    assert!(templates.starts_with("NAME"), "{templates}");
    let templates: Value =
        serde_json::from_str(&cli.ok(&["template", "ls", "--json"]).await).unwrap();
    assert!(templates.is_array(), "{templates}");

    // Create, then list (table and JSON) and inspect.
    let id = cli
        .ok(&[
            "sandbox",
            "create",
            "--template",
            "minimal",
            "--meta",
            "task=cli",
            "--env",
            "GREETING=hello",
            "--ttl",
            "900",
        ])
        .await
        .trim()
        .to_owned();
    assert!(id.starts_with("sb"), "{id}");
    let table = cli.ok(&["sb", "ls"]).await;
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("STATE"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("running") && l.contains("task=cli")),
        "{table}"
    );
    let listed: Value =
        serde_json::from_str(&cli.ok(&["sb", "ls", "--json", "--meta", "task=cli"]).await).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], id.as_str());
    let none: Value = serde_json::from_str(
        &cli.ok(&["sb", "ls", "--json", "--meta", "task=other"])
            .await,
    )
    .unwrap();
    assert_eq!(none, serde_json::json!([]));
    let info: Value = serde_json::from_str(&cli.ok(&["sb", "info", &id, "--json"]).await).unwrap();
    assert_eq!(info["template"], "minimal");
    assert_eq!(info["metadata"]["task"], "cli");
    let human = cli.ok(&["sb", "info", &id]).await;
    assert!(
        human.contains("state") && human.contains("running"),
        "{human}"
    );

    // Exec: output on the right streams, the guest's exit code is the CLI's.
    let out = cli
        .run(&[
            "sb",
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo out $GREETING; echo err >&2; exit 7",
        ])
        .await;
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out hello\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    let out = cli
        .run(&["sb", "exec", &id, "--shell", "echo shell; exit 3"])
        .await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "shell\n");
    assert_eq!(cli.ok(&["sb", "exec", &id, "--", "true"]).await, "");

    // Copy 5 MiB both ways, byte for byte.
    let local = tempfile::tempdir().unwrap();
    let up = local.path().join("blob.bin");
    let data: Vec<u8> = (0..5 * 1024 * 1024).map(|_| rand::random::<u8>()).collect();
    std::fs::write(&up, &data).unwrap();
    let dest = format!("{id}:/tmp/blob.bin");
    cli.ok(&["sb", "cp", up.to_str().unwrap(), &dest]).await;
    let size = cli
        .ok(&["sb", "exec", &id, "--", "wc", "-c", "/tmp/blob.bin"])
        .await;
    assert!(size.starts_with("5242880"), "{size}");
    let down = local.path().join("back.bin");
    cli.ok(&["sb", "cp", &dest, down.to_str().unwrap()]).await;
    assert_eq!(sha256(&up), sha256(&down));
    // Into a directory: the guest file's name is kept.
    cli.ok(&["sb", "cp", &dest, local.path().to_str().unwrap()])
        .await;
    assert_eq!(sha256(&local.path().join("blob.bin")), sha256(&up));

    // A signed URL for it: downloaded by curl with no API key.
    let url = cli
        .ok(&["sb", "file-url", &id, "/tmp/blob.bin", "--expires-in", "60"])
        .await
        .trim()
        .to_owned();
    assert!(
        url.starts_with("http") && url.contains("/files/signed?"),
        "{url}"
    );
    let signed = local.path().join("signed.bin");
    let got = std::process::Command::new("curl")
        .args(["-sSf", "-o", signed.to_str().unwrap(), &url])
        .status()
        .unwrap();
    assert!(got.success());
    assert_eq!(sha256(&signed), sha256(&up));

    // The code interpreter: Bash keeps its variables between runs; Python's final value is
    // printed; an error exits 1 with its message.
    cli.ok(&[
        "sb",
        "run-code",
        &id,
        "--language",
        "bash",
        "cd /tmp && N=21",
    ])
    .await;
    let out = cli
        .ok(&["sb", "run-code", &id, "-l", "bash", "echo \"$PWD $N\""])
        .await;
    assert_eq!(out, "/tmp 21\n");
    assert_eq!(cli.ok(&["sb", "run-code", &id, "6 * 7"]).await, "42\n");
    let (code, err) = cli.fails(&["sb", "run-code", &id, "1 / 0"]).await;
    assert!(
        code == 1 && err.contains("ZeroDivisionError: division by zero"),
        "{code} {err}"
    );

    // Resource use: the running sandboxes' table once, and one sandbox's history as JSON.
    let out = cli.ok(&["sb", "top", "--once"]).await;
    assert!(out.contains("CPU%") && out.contains(&id), "{out}");
    let m: Value = serde_json::from_str(
        &cli.ok(&["sb", "metrics", &id, "--since", "5m", "--step", "10"])
            .await,
    )
    .unwrap();
    assert_eq!(
        (m["state"].as_str(), m["step"].as_u64()),
        (Some("running"), Some(10)),
        "{m}"
    );
    assert!(m["samples"].is_array(), "{m}");

    // Watch: a JSON line per event, `ready` first, then what a command changes.
    cli.ok(&["sb", "exec", &id, "-c", "mkdir -p /tmp/cliw"])
        .await;
    let mut watch = cli
        .command(&["sb", "watch", &id, "/tmp/cliw", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let next_line = || {
        lines_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a watch line")
    };
    let ready: Value = serde_json::from_str(&next_line()).unwrap();
    assert_eq!(
        (&ready["type"], &ready["path"]),
        (&"ready".into(), &"/tmp/cliw".into())
    );
    cli.ok(&["sb", "exec", &id, "-c", "touch /tmp/cliw/x"])
        .await;
    let created: Value = serde_json::from_str(&next_line()).unwrap();
    assert_eq!(
        created,
        serde_json::json!({"type": "create", "path": "/tmp/cliw/x", "dir": false})
    );
    watch.kill().unwrap();
    watch.wait().unwrap();

    // Logs: the guest console so far.
    let logs = cli.ok(&["sb", "logs", &id]).await;
    assert!(!logs.is_empty());

    // Fork and snapshot.
    let children = cli.ok(&["sb", "fork", &id, "--count", "1"]).await;
    let child = children.trim().to_owned();
    assert!(child.starts_with("sb") && child != id, "{children}");
    let out = cli
        .ok(&["sb", "exec", &child, "--", "wc", "-c", "/tmp/blob.bin"])
        .await;
    assert!(out.starts_with("5242880"), "{out}");
    let snap = cli.ok(&["sb", "snapshot", &id]).await.trim().to_owned();
    assert!(!snap.is_empty() && !snap.contains(' '), "{snap}");

    // Hibernate and wake.
    let out = cli.ok(&["sb", "hibernate", &id]).await;
    assert_eq!(out.trim(), format!("{id} hibernated"));
    let info: Value = serde_json::from_str(&cli.ok(&["sb", "info", &id, "--json"]).await).unwrap();
    assert_eq!(info["state"], "hibernated");
    let out = cli.ok(&["sb", "wake", &id]).await;
    assert_eq!(out.trim(), format!("{id} running"));
    assert_eq!(
        cli.ok(&["sb", "exec", &id, "--shell", "cat /tmp/blob.bin | wc -c"])
            .await
            .trim(),
        "5242880"
    );

    // Pause and resume.
    assert_eq!(
        cli.ok(&["sb", "pause", &id]).await.trim(),
        format!("{id} paused")
    );
    assert_eq!(
        cli.ok(&["sb", "resume", &id]).await.trim(),
        format!("{id} running")
    );

    // A followed log ends when the sandbox is deleted.
    let follower = cli
        .command(&["sb", "logs", "-f", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Kill both; then the id is unknown, with a clear message and a hint.
    let out = cli.ok(&["sb", "kill", &id, &child]).await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![id.as_str(), child.as_str()]
    );
    let followed = within(Duration::from_secs(60), "logs -f ends", async {
        tokio::task::spawn_blocking(move || follower.wait_with_output().unwrap())
            .await
            .unwrap()
    })
    .await;
    assert!(followed.status.success());
    assert!(!followed.stdout.is_empty());
    let err = String::from_utf8_lossy(&followed.stderr);
    assert!(err.contains("log ended: deleted"), "{err}");
    let (code, err) = cli.fails(&["sb", "info", &id]).await;
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: ")
            && err.contains("sandbox_not_found")
            && err.contains("request id"),
        "{err}"
    );
    assert!(err.contains("pandastack sandbox ls"), "{err}");
    let (_, err) = cli
        .fails(&["sb", "exec", "sb-0000000000000000", "--", "true"])
        .await;
    assert!(err.contains("sandbox_not_found"), "{err}");

    // A bad key from the environment beats the config file, and is refused with the hint.
    let mut bad = Cli::new();
    bad.env
        .push(("PANDASTACK_BASE_URL".into(), server.url.clone()));
    bad.env
        .push(("PANDASTACK_API_KEY".into(), "pds_wrong".into()));
    let (code, err) = bad.fails(&["sb", "ls"]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("unauthorized") && err.contains("pandastack auth login"),
        "{err}"
    );

    // Nothing listening: the hint names the URL.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let (_, err) = cli.fails(&["sb", "ls", "--base-url", &nowhere]).await;
    assert!(
        err.contains("cannot connect") && err.contains(&format!("running at {nowhere}")),
        "{err}"
    );

    // Logout forgets the key.
    cli.ok(&["auth", "logout"]).await;
    assert!(!config.exists());
    eprintln!("cli end-to-end took {:?}", t0.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_shell_runs_through_a_pty() {
    use std::os::fd::OwnedFd;

    let (server, _guard) = server().await;
    let mut cli = Cli::new();
    cli.env
        .push(("PANDASTACK_BASE_URL".into(), server.url.clone()));
    cli.env
        .push(("PANDASTACK_API_KEY".into(), server.key.clone()));
    let id = cli
        .ok(&["sb", "create", "--template", "minimal"])
        .await
        .trim()
        .to_owned();

    // The CLI's standard streams are the slave of a fresh pseudo-terminal.
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave: OwnedFd = pty.slave;
    let mut cmd = cli.command(&["sb", "shell", &id]);
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().expect("spawn shell");
    drop(cmd); // closes this process's copies of the slave
    let mut master = std::fs::File::from(pty.master);
    let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let seen = Arc::clone(&seen);
        let mut m = master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the last slave is closed.
            while let Ok(n) = m.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    // Wait for the remote shell to say something (its prompt), then type.
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    master.write_all(b"echo hi; exit 3\n").unwrap();
    let status = within(Duration::from_secs(120), "shell exit", async {
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    drop(master);
    let _ = reader.join();
    let text = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
    assert_eq!(status.code(), Some(3), "{text}");
    assert!(text.contains("hi\r\n"), "{text:?}");

    // An unknown sandbox fails before the terminal is touched.
    let (_, err) = cli.fails(&["sb", "shell", "sb-0000000000000001"]).await;
    assert!(err.contains("sandbox_not_found"), "{err}");
    cli.ok(&["sb", "kill", &id]).await;
}

/// `pandastack volume …` and `sandbox create --volume`: create (and its 422/409 answers), ls,
/// get, grow; a workspace written by one sandbox, busy for a second read-write mount while the
/// first lives; snapshot and backup (`--wait`); restore from the backup and create from the
/// snapshot, read back read-only in a new sandbox; rm.
#[tokio::test(flavor = "multi_thread")]
async fn cli_drives_volumes() {
    let (server, _guard) = server_with_volume_slots().await;
    let mut cli = Cli::new();
    cli.env = vec![
        ("PANDASTACK_BASE_URL".into(), server.url.clone()),
        ("PANDASTACK_API_KEY".into(), server.key.clone()),
    ];

    assert_eq!(
        cli.ok(&["volume", "create", "ws", "--size-gb", "1"]).await,
        "ws\n"
    );
    let (_, err) = cli
        .fails(&["volume", "create", "Not_A_Name", "--size-gb", "1"])
        .await;
    assert!(err.contains("invalid_argument"), "{err}");
    let (_, err) = cli.fails(&["volume", "create", "nosize"]).await;
    assert!(
        err.contains("invalid_argument") && err.contains("size_gb"),
        "{err}"
    );
    let (_, err) = cli.fails(&["vol", "create", "ws", "--size-gb", "1"]).await;
    assert!(err.contains("conflict"), "{err}");
    let (_, err) = cli.fails(&["volume", "get", "nope"]).await;
    assert!(
        err.contains("volume_not_found") && err.contains("pandastack volume ls"),
        "{err}"
    );

    let table = cli.ok(&["volume", "ls"]).await;
    assert!(
        table.starts_with("NAME") && table.contains("\nws "),
        "{table}"
    );
    let list: Value = serde_json::from_str(&cli.ok(&["volume", "ls", "--json"]).await).unwrap();
    assert_eq!(list[0]["name"], "ws", "{list}");
    assert_eq!(
        cli.ok(&["volume", "grow", "ws", "--size-gb", "2"]).await,
        "ws 2 GiB\n"
    );
    let v: Value = serde_json::from_str(&cli.ok(&["volume", "get", "ws", "--json"]).await).unwrap();
    assert_eq!(v["size_gb"], 2, "{v}");

    // A workspace: written by one sandbox; a second read-write mount is refused meanwhile.
    let sb = |extra: &[&str]| {
        let mut a = vec!["sandbox", "create", "--template", "minimal", "--ttl", "900"];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let args = sb(&["--volume", "ws:/workspace"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = cli.ok(&args).await.trim().to_owned();
    cli.ok(&[
        "sb",
        "exec",
        &first,
        "--shell",
        "mkdir -p /workspace/repo && echo kept > /workspace/repo/f && sync",
    ])
    .await;
    let info = cli.ok(&["sb", "info", &first]).await;
    assert!(info.contains("ws:/workspace"), "{info}");
    let (_, err) = cli.fails(&args).await;
    assert!(err.contains("volume_busy") && err.contains(&first), "{err}");
    let (_, err) = cli.fails(&["volume", "rm", "ws"]).await;
    assert!(err.contains("volume_busy"), "{err}");
    let v: Value = serde_json::from_str(&cli.ok(&["volume", "get", "ws", "--json"]).await).unwrap();
    assert_eq!(v["attached_to"], first.as_str(), "{v}");

    // Snapshot and backup while it is mounted.
    let snap = cli
        .ok(&["volume", "snapshot", "ws"])
        .await
        .trim()
        .to_owned();
    assert!(
        cli.ok(&["volume", "snapshots", "ws"]).await.contains(&snap),
        "{snap}"
    );
    let backup = cli
        .ok(&["volume", "backup", "ws", "--wait"])
        .await
        .trim()
        .to_owned();
    let backups: Value =
        serde_json::from_str(&cli.ok(&["volume", "backups", "ws", "--json"]).await).unwrap();
    let b = backups
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["id"] == backup.as_str())
        .unwrap_or_else(|| panic!("{backup} not in {backups}"));
    assert_eq!(b["state"], "done", "{b}");
    cli.ok(&["sb", "kill", &first]).await;

    // Restore the backup, copy the snapshot; both have the file.
    assert_eq!(
        cli.ok(&["volume", "restore", "ws-restored", "--from-backup", &backup])
            .await,
        "ws-restored\n"
    );
    cli.ok(&["volume", "create", "ws-copy", "--from-snapshot", &snap])
        .await;
    let args = sb(&[
        "--volume",
        "ws-restored:/restored:ro",
        "-v",
        "ws-copy:/copy",
        "--json",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let second: Value = serde_json::from_str(&cli.ok(&args).await).unwrap();
    let second = second["id"].as_str().unwrap().to_owned();
    let out = cli
        .ok(&[
            "sb",
            "exec",
            &second,
            "--shell",
            "cat /restored/repo/f /copy/repo/f",
        ])
        .await;
    assert_eq!(out, "kept\nkept\n");
    cli.ok(&["sb", "kill", &second]).await;
    assert_eq!(
        cli.ok(&["volume", "rm", "ws", "ws-restored", "ws-copy"])
            .await,
        "ws\nws-restored\nws-copy\n"
    );
    assert_eq!(cli.ok(&["volume", "ls"]).await.lines().count(), 1);
}

/// `pandastack keys create --admin` makes an operator's key (`keys list` says so); with it
/// `host ls` shows the server's own host (JSON and a table) and `host drain`/`undrain` change its
/// state; the server's first key (a workspace's) is refused with 403 and the hint to make an
/// admin key, and an unknown host with its 404 and the hint to list them. No guest boots here.
#[tokio::test(flavor = "multi_thread")]
async fn cli_host_verbs_need_an_admin_key() {
    let data = tempfile::tempdir().unwrap();
    let server = start_with(data.path(), free_port(), &["--network", "off"]).await;
    let (ok, out, err) = common::cli(
        &["keys", "create", "--admin", "--name", "ops", "--json"],
        data.path(),
    );
    assert!(ok, "keys create --admin: {err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(created["admin"], true, "{created}");
    let admin = created["secret"].as_str().unwrap().to_owned();
    let (ok, out, err) = common::cli(&["keys", "list"], data.path());
    assert!(ok, "keys list: {err}");
    let ops = out
        .lines()
        .find(|l| l.contains(" ops "))
        .unwrap_or_default();
    assert!(ops.contains(" yes "), "{out}");

    let mut cli = Cli::new();
    cli.env = vec![
        ("PANDASTACK_BASE_URL".into(), server.url.clone()),
        ("PANDASTACK_API_KEY".into(), admin.clone()),
    ];
    let hosts: Value = serde_json::from_str(&cli.ok(&["host", "ls", "--json"]).await).unwrap();
    let hosts = hosts.as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{hosts:?}");
    let own = hosts[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (&hosts[0]["state"], &hosts[0]["lease_expires_at"]),
        (&Value::from("ready"), &Value::Null),
        "{hosts:?}"
    );
    let table = cli.ok(&["host", "ls"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(
        lines[0].starts_with("ID ") && lines[0].contains("STATE"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&format!("{own} ")) && lines[1].contains(" ready "),
        "{table}"
    );

    let drained: Value =
        serde_json::from_str(&cli.ok(&["host", "drain", &own, "--json"]).await).unwrap();
    assert_eq!(drained["state"], "draining", "{drained}");
    let table = cli.ok(&["host", "ls"]).await;
    assert!(table.contains(" draining "), "{table}");
    let row = cli.ok(&["host", "undrain", &own]).await;
    assert!(
        row.lines().nth(1).unwrap_or_default().contains(" ready "),
        "{row}"
    );

    // The server's first key is a workspace's: refused, with the hint.
    let (code, err) = cli.fails(&["host", "ls", "--api-key", &server.key]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("forbidden") && err.contains("request id"),
        "{err}"
    );
    assert!(err.contains("pandastack keys create --admin"), "{err}");
    let (code, err) = cli.fails(&["host", "drain", "host-nope"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("host_not_found"), "{err}");
    assert!(err.contains("pandastack host ls"), "{err}");
}

/// `members …` and `audit` against a real server (no guest boots): the workspace key adds a
/// developer and makes it a key; that key lists sandboxes but is refused the audit log and
/// member changes, naming what it needed; the audit log (the CLI's table and `--json`) shows
/// each change with the key that made it and the caller's address (loopback), and never a
/// secret; removing the member revokes its key.
#[tokio::test(flavor = "multi_thread")]
async fn cli_members_and_the_audit_log() {
    let data = tempfile::tempdir().unwrap();
    let server = start_with(data.path(), free_port(), &["--network", "off"]).await;
    let mut cli = Cli::new();
    cli.env = vec![
        ("PANDASTACK_BASE_URL".into(), server.url.clone()),
        ("PANDASTACK_API_KEY".into(), server.key.clone()),
    ];
    let added: Value = serde_json::from_str(
        &cli.ok(&[
            "members",
            "add",
            "dev@example.org",
            "--role",
            "developer",
            "--json",
        ])
        .await,
    )
    .unwrap();
    let member = added["id"].as_str().unwrap().to_owned();
    assert_eq!(added["role"], "developer", "{added}");
    let (code, err) = cli
        .fails(&["members", "add", "x@example.org", "--role", "boss"])
        .await;
    assert_eq!(code, 2, "{err}");
    let dev_key = cli
        .ok(&["members", "key", &member, "--name", "laptop"])
        .await
        .trim()
        .to_owned();
    assert!(dev_key.starts_with("pds_"), "{dev_key}");
    let table = cli.ok(&["members", "ls"]).await;
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(&member) && l.contains(" developer ") && l.contains(" 1 ")),
        "{table}"
    );

    // The developer's key works for sandboxes, not for the audit log or members.
    cli.ok(&["sandbox", "ls", "--api-key", &dev_key]).await;
    let (code, err) = cli.fails(&["audit", "--api-key", &dev_key]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("forbidden") && err.contains("audit:read"),
        "{err}"
    );
    let (_, err) = cli
        .fails(&["members", "rm", &member, "--api-key", &dev_key])
        .await;
    assert!(err.contains("members:write"), "{err}");

    let rows: Value = serde_json::from_str(&cli.ok(&["audit", "--json"]).await).unwrap();
    let rows = rows.as_array().unwrap();
    let actions: Vec<&str> = rows.iter().map(|r| r["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["delete_member", "create_key", "create_member"],
        "{rows:#?}"
    );
    assert_eq!(rows[0]["result"], "forbidden");
    assert_eq!(rows[0]["key_name"], "laptop");
    assert_eq!(rows[0]["member_id"], member.as_str());
    assert_eq!(rows[2]["resource"], format!("members/{member}"));
    for r in rows {
        assert_eq!(r["source"], "127.0.0.1", "{r}");
    }
    assert!(!serde_json::to_string(rows).unwrap().contains(&dev_key[4..]));
    let table = cli.ok(&["audit", "--action", "create_member"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(
        lines[0].starts_with("AT ") && lines[0].contains("RESULT"),
        "{table}"
    );
    assert!(
        lines[1].contains(&format!("members/{member}")) && lines[1].contains(" ok "),
        "{table}"
    );

    cli.ok(&["members", "rm", &member]).await;
    let (_, err) = cli.fails(&["sandbox", "ls", "--api-key", &dev_key]).await;
    assert!(err.contains("unauthorized"), "{err}");
}
