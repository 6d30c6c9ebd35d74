//! The cluster kit's PostgreSQL: a fresh database per cluster on a server, and a server of
//! the cluster's own that a test may restart.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::process::{free_port, tail};

/// A fresh database on a PostgreSQL server, dropped at the end.
pub(super) struct Database {
    admin: String,
    name: String,
    pub(super) url: String,
}

impl Database {
    pub(super) async fn create(admin: &str) -> Database {
        use sqlx::Connection;
        let name = format!("psc_{:016x}", rand::random::<u64>());
        let mut conn = sqlx::PgConnection::connect(admin)
            .await
            .unwrap_or_else(|e| panic!("connect to the test PostgreSQL {admin}: {e}"));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        let _ = conn.close().await;
        let base = admin.rsplit_once('/').map_or(admin, |(b, _)| b);
        Database {
            admin: admin.to_owned(),
            url: format!("{base}/{name}"),
            name,
        }
    }

    /// Drops the database (its connections forced out) on a thread of its own: a `Drop`
    /// cannot await, and may run inside the test's runtime.
    pub(super) fn drop_blocking(self) {
        let name = self.name.clone();
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the database");
            rt.block_on(async {
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&self.admin).await?;
                sqlx::query(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    self.name
                ))
                .execute(&mut conn)
                .await?;
                conn.close().await
            })
        })
        .join();
        if let Ok(Err(e)) = done {
            eprintln!("cluster: dropping database {name}: {e}");
        }
    }
}

/// A PostgreSQL server of the cluster's own (initdb in a temporary directory, loopback only,
/// trust auth, fsync off), run as the `postgres` user when the test runs as root.
pub(super) struct OwnPostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl OwnPostgres {
    pub(super) fn start() -> OwnPostgres {
        let bin = postgres_bin();
        // Not under the cluster's directory (0700, root's): the server runs as `postgres`.
        let dir = tempfile::Builder::new()
            .prefix("psc-pg-")
            .tempdir_in("/tmp")
            .expect("PostgreSQL temp dir");
        let as_postgres = nix::unistd::geteuid().is_root();
        if as_postgres {
            let user = nix::unistd::User::from_name("postgres")
                .ok()
                .flatten()
                .expect("a `postgres` user (install postgresql)");
            nix::unistd::chown(dir.path(), Some(user.uid), Some(user.gid))
                .expect("chown the PostgreSQL dir");
        }
        let pg = OwnPostgres {
            dir,
            bin,
            port: free_port(),
            as_postgres,
        };
        let data = pg.dir.path().join("data");
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "-N"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = pg.start_command().output().expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            tail(&pg.dir.path().join("server.log"), 40)
        );
        pg
    }

    pub(super) fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn start_command(&self) -> Command {
        let d = self.dir.path();
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(d.join("data"))
            .arg("-l")
            .arg(d.join("server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!(
                "-h 127.0.0.1 -p {} -k {} -c fsync=off -c max_connections=200",
                self.port,
                d.display()
            ))
            .arg("start")
            .stdin(Stdio::null());
        c
    }

    pub(super) async fn ctl_start(&self) {
        let out = tokio::process::Command::from(self.start_command())
            .output()
            .await
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            tail(&self.dir.path().join("server.log"), 40)
        );
    }

    pub(super) async fn ctl(&self, args: &[&str]) {
        let mut c = self.command("pg_ctl");
        c.arg("-D").arg(self.dir.path().join("data")).args(args);
        let out = tokio::process::Command::from(c)
            .output()
            .await
            .expect("run pg_ctl");
        assert!(
            out.status.success(),
            "pg_ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub(super) fn stop_blocking(self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` with `initdb`.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b).expect(
        "no /usr/lib/postgresql/*/bin/initdb: install postgresql (scripts/test-postgres.sh does)",
    )
}
