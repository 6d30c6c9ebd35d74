//! A throwaway PostgreSQL cluster per test: `initdb` with a SCRAM superuser password in a
//! temporary directory, a postmaster on a free loopback port, stopped (`-m immediate`) on
//! drop. As root, everything runs as the `postgres` OS user through `runuser`.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pandastack_pgwire::{Client, ConnectOptions};
use tokio::net::TcpStream;

/// Where Debian puts the PostgreSQL 15 binaries; `PANDASTACK_PG_BIN` overrides.
const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The superuser's password.
pub const PASSWORD: &str = "pw-pandastack-test";

/// Roles created by [`Cluster::start`] for the other login methods (each has password
/// [`PASSWORD`], stored as MD5 for `md5user`).
pub const MD5_USER: &str = "md5user";
pub const PLAIN_USER: &str = "plainuser";
pub const TRUST_USER: &str = "trustuser";

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    pub port: u16,
}

impl Cluster {
    /// A running cluster, or `None` (with a message) when the binaries are not installed.
    pub async fn start() -> Option<Cluster> {
        let bin = PathBuf::from(std::env::var("PANDASTACK_PG_BIN").unwrap_or(DEFAULT_BIN.into()));
        if !bin.join("initdb").exists() || !bin.join("postgres").exists() {
            eprintln!(
                "skipping: no PostgreSQL binaries in {} (set PANDASTACK_PG_BIN)",
                bin.display()
            );
            return None;
        }
        let as_postgres = std::fs::metadata("/proc/self").expect("/proc/self").uid() == 0;
        let dir = tempfile::Builder::new()
            .prefix("pgwire-")
            .tempdir()
            .expect("temp dir");
        let pwfile = dir.path().join("pwfile");
        std::fs::write(&pwfile, format!("{PASSWORD}\n")).expect("pwfile");
        if as_postgres {
            let (uid, gid) = postgres_ids();
            for path in [dir.path(), &pwfile] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown");
            }
        }
        let mut cluster = Cluster {
            dir,
            bin,
            as_postgres,
            port: 0,
        };
        let data = cluster.data();
        cluster.run(
            "initdb",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                "-A".as_ref(),
                "scram-sha-256".as_ref(),
                "--pwfile".as_ref(),
                pwfile.as_os_str(),
                "-E".as_ref(),
                "UTF8".as_ref(),
                "--no-locale".as_ref(),
                "--no-sync".as_ref(),
            ],
        );
        // One role per login method; everyone else (the superuser) logs in with SCRAM.
        std::fs::write(
            data.join("pg_hba.conf"),
            format!(
                "local all all trust\n\
                 host all {MD5_USER} 127.0.0.1/32 md5\n\
                 host all {PLAIN_USER} 127.0.0.1/32 password\n\
                 host all {TRUST_USER} 127.0.0.1/32 trust\n\
                 host all all 127.0.0.1/32 scram-sha-256\n"
            ),
        )
        .expect("pg_hba.conf");
        cluster.port = free_port();
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            cluster.port,
            cluster.dir.path().display()
        );
        let log = cluster.dir.path().join("postgres.log");
        let started = cluster.try_run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "-o".as_ref(),
                options.as_ref(),
                "start".as_ref(),
            ],
        );
        if !started.status.success() {
            panic!(
                "pg_ctl start failed: {}\n{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        cluster.create_roles().await;
        Some(cluster)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// A directory the test may use (e.g. as `HOME` for psql).
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn options(&self, user: &str) -> ConnectOptions {
        ConnectOptions {
            user: user.into(),
            password: Some(PASSWORD.into()),
            database: Some("postgres".into()),
            options: None,
            application_name: Some("pgwire-test".into()),
        }
    }

    /// A client logged in as the superuser.
    pub async fn client(&self) -> Client<TcpStream> {
        self.connect(&self.options("postgres")).await
    }

    pub async fn connect(&self, opts: &ConnectOptions) -> Client<TcpStream> {
        let tcp = TcpStream::connect(self.addr()).await.expect("tcp connect");
        Client::connect(tcp, opts).await.expect("login")
    }

    async fn create_roles(&self) {
        let mut client = self.client().await;
        let limits = pandastack_pgwire::Limits::default();
        for sql in [
            "set password_encryption = 'md5'".to_owned(),
            format!("create role {MD5_USER} login password '{PASSWORD}'"),
            "set password_encryption = 'scram-sha-256'".to_owned(),
            format!("create role {PLAIN_USER} login password '{PASSWORD}'"),
            format!("create role {TRUST_USER} login"),
        ] {
            client.query(&sql, &[], &limits).await.expect(&sql);
        }
        client.close().await.expect("close");
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.current_dir(self.dir.path());
        command
    }

    fn try_run(&self, program: &str, args: &[&std::ffi::OsStr]) -> Output {
        self.command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"))
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) {
        let out = self.try_run(program, args);
        assert!(
            out.status.success(),
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let out = self.try_run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        );
        if !out.status.success() {
            eprintln!(
                "pg_ctl stop: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
}

fn postgres_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("id");
        assert!(out.status.success(), "no postgres OS user");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("numeric id")
    };
    (id("-u"), id("-g"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}
