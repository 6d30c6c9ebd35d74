//! Managed PostgreSQL through the real server, real guests (the `postgres` template: Debian's
//! PostgreSQL 17 with pgvector and PgBouncer) and real clients: `psql` through the TLS front
//! (by SNI and by `options=endpoint=`, direct and pooled), the HTTP query broker and its
//! Neon-compatible `/sql`, password rotation, branches, hibernate and wake on connect, a VM
//! killed under a database (acknowledged commits kept), a server restart, backups, and every
//! refusal as a clear error with nothing left behind — one test in named steps
//! ([`common::step`]); the refusals that need no VM are fast tests in
//! `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{free_port, start_with, step, Api, Server};
use pandastack_testkit::{runtime, within};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

fn api(s: &Server) -> Api<'_> {
    Api {
        s,
        c: Client::new(),
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or_default()
}

/// `psql -XAt -c SQL` against `uri` (the front is on 127.0.0.1: `hostaddr` connects there,
/// while the URI's host name is what TLS sends as SNI). Returns (success, stdout, stderr).
async fn psql(uri: &str, sql: &str) -> (bool, String, String) {
    let out = tokio::process::Command::new("psql")
        .arg(uri)
        .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "120")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

/// The URI as given, connected to the front at `front` (`127.0.0.1:port`).
fn via(uri: &str, front: &str) -> String {
    let port = front.rsplit_once(':').unwrap().1;
    assert!(
        uri.contains(&format!(":{port}/")),
        "{uri} names port {port}"
    );
    format!("{uri}&hostaddr=127.0.0.1")
}

async fn ok_psql(uri: &str, sql: &str) -> String {
    let (ok, out, err) = psql(uri, sql).await;
    assert!(ok, "psql {sql:?} failed: {err}");
    out
}

async fn create_db(api: &Api<'_>, body: Value) -> Value {
    let resp = api
        .c
        .post(format!("{}/v1/databases", api.s.url))
        .bearer_auth(&api.s.key)
        .json(&body)
        .timeout(Duration::from_secs(900))
        .send()
        .await
        .expect("create database");
    let st = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["state"], "ready", "{v}");
    v
}

async fn get_db(api: &Api<'_>, id: &str) -> Value {
    let (st, v) = api.call("GET", &format!("/v1/databases/{id}"), None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

async fn query(api: &Api<'_>, id: &str, sql: &str, params: Value) -> (StatusCode, Value) {
    api.call(
        "POST",
        &format!("/v1/databases/{id}/query"),
        Some(json!({ "sql": sql, "params": params })),
    )
    .await
}

async fn neon_sql(api: &Api<'_>, id: &str, conn: &str, body: Value) -> (StatusCode, Value) {
    let resp = api
        .c
        .post(format!("{}/v1/databases/{id}/sql", api.s.url))
        .header("Neon-Connection-String", conn)
        .json(&body)
        .timeout(Duration::from_secs(180))
        .send()
        .await
        .unwrap();
    let st = resp.status();
    (st, resp.json().await.unwrap())
}

async fn counts(api: &Api<'_>) -> (usize, usize, usize) {
    let mut out = Vec::new();
    for path in ["/v1/databases", "/v1/sandboxes", "/v1/volumes"] {
        let (st, v) = api.call("GET", path, None).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        out.push(v["data"].as_array().unwrap().len());
    }
    (out[0], out[1], out[2])
}

/// One database through its life, as named steps (see [`common::step`]): each step is one
/// behaviour and a failure names it. They share one server, one database VM and what earlier
/// steps wrote, because a test of their own each would boot its database again (minutes under
/// TCG). Refusals that need no VM (a bad create, an unknown id, the extension list) are in
/// `pandastack-testkit/tests/api_fast/no_vm_refusals.rs`.
#[tokio::test(flavor = "multi_thread")]
async fn databases_end_to_end() {
    let guard = runtime().await;
    let data = guard.dir.path();
    common::catalog(data, "postgres");
    let port = free_port();
    let db_listen = format!("127.0.0.1:{}", free_port());
    let args = [
        "--db-listen",
        db_listen.as_str(),
        "--network",
        "off",
        "--pool-size",
        "0",
    ];
    let server = start_with(data, port, &args).await;
    let api = api(&server);

    // A database, reachable with its connection string as given (SNI routes it). Its VM has
    // the memory asked for (the template baked at that size on first use).
    let db = step(
        "create: a ready database of the memory asked for, named by its connection string",
        async {
            let db = create_db(
                &api,
                json!({"name": "app", "idle_seconds": 0, "memory_mb": 768}),
            )
            .await;
            assert_eq!(db["memory_mb"], 768, "{db}");
            let id = db["id"].as_str().unwrap();
            let uri = db["connection_uri"].as_str().unwrap();
            assert!(
                uri.starts_with("postgres://app:")
                    && uri.contains(&format!("@{id}.db.localhost:"))
                    && uri.ends_with("/app?sslmode=require"),
                "{uri}"
            );
            let (st, v) = api
                .call("POST", "/v1/databases", Some(json!({"name": "app"})))
                .await;
            assert_eq!((st, code(&v)), (StatusCode::CONFLICT, "conflict"), "{v}");

            let (st, mem) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{}/exec", db["sandbox_id"].as_str().unwrap()),
                    Some(json!({"cmd": "awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo"})),
                )
                .await;
            assert_eq!(st, StatusCode::OK, "{mem}");
            let total: u32 = mem["stdout"].as_str().unwrap().trim().parse().unwrap();
            assert!(
                (640..=768).contains(&total),
                "MemTotal {total} MiB in a 768 MiB VM"
            );
            db
        },
    )
    .await;
    let id = db["id"].as_str().unwrap().to_owned();
    let uri = db["connection_uri"].as_str().unwrap().to_owned();
    let direct = via(&uri, &server.db);
    let password = uri.split(':').nth(2).unwrap().split('@').next().unwrap();

    step(
        "psql through the TLS front by SNI: PostgreSQL 17 with pgvector",
        async {
            assert!(ok_psql(&direct, "select version()")
                .await
                .contains("PostgreSQL 17"));
            ok_psql(
                &direct,
                "create extension vector; \
                 create table items (id int primary key, note text, embedding vector(3)); \
                 insert into items values (1, 'a', '[1,0,0]'), (2, 'b', '[0,1,0]'), (3, 'c', '[0,0,1]')",
            )
            .await;
            assert_eq!(
                ok_psql(
                    &direct,
                    "select note from items order by embedding <-> '[0.1,0.9,0]' limit 1"
                )
                .await,
                "b"
            );
        },
    )
    .await;

    step(
        "dump: `pandastack db dump` runs the database's own pg_dump in its VM (plain SQL with \
         the rows; custom format for pg_restore; options after --), leaving nothing behind; \
         `db psql --in-vm` its own psql",
        async {
            let dump = |extra: &[&str]| {
                let out = std::process::Command::new(env!("CARGO_BIN_EXE_pandastack"))
                    .args(["db", "dump", "app"])
                    .args(extra)
                    .env("PANDASTACK_BASE_URL", &server.url)
                    .env("PANDASTACK_API_KEY", &server.key)
                    .output()
                    .expect("run pandastack db dump");
                (
                    out.status.success(),
                    out.stdout,
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            };
            let (ok, sql, err) = dump(&[]);
            let sql = String::from_utf8(sql).unwrap();
            assert!(ok, "{err}");
            assert!(sql.contains("PostgreSQL database dump"), "{sql}");
            assert!(
                sql.contains("COPY public.items (id, note, embedding) FROM stdin;"),
                "{sql}"
            );
            assert!(sql.contains("2\tb\t[0,1,0]"), "{sql}");
            let (ok, custom, err) = dump(&["--format", "custom", "--", "--table=items"]);
            assert!(ok && custom.starts_with(b"PGDMP"), "{err}");
            let (ok, _, err) = dump(&["--", "--no-such-option"]);
            assert!(!ok && err.contains("unrecognized option"), "{err}");
            // The database's own psql too, in its VM over a terminal.
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_pandastack"))
                .args(["db", "psql", "app", "--in-vm", "--", "-Atc"])
                .arg("select count(*) || ' items, ' || current_setting('server_version_num')::int / 10000 from items")
                .env("PANDASTACK_BASE_URL", &server.url)
                .env("PANDASTACK_API_KEY", &server.key)
                .stdin(std::process::Stdio::null())
                .output()
                .expect("run pandastack db psql --in-vm");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(text.trim(), "3 items, 17", "{text}");
            let (st, left) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{}/exec", db["sandbox_id"].as_str().unwrap()),
                    Some(json!({"cmd": "ls /var/tmp"})),
                )
                .await;
            assert_eq!(st, StatusCode::OK, "{left}");
            assert_eq!(left["stdout"], "", "{left}");
        },
    )
    .await;

    // Without SNI (an IP address as host): Neon's endpoint option routes it.
    step("without SNI, options=endpoint= routes the connection", async {
        let no_sni = format!(
            "host=127.0.0.1 port={} user=app password={password} dbname=app sslmode=require options=endpoint={id}",
            server.db.rsplit_once(':').unwrap().1
        );
        assert_eq!(ok_psql(&no_sni, "select count(*) from items").await, "3");
    })
    .await;

    step("the pooled URI goes through PgBouncer", async {
        let pooled = via(db["pooled_uri"].as_str().unwrap(), &server.db);
        assert!(
            pooled.contains(&format!("@{id}-pooler.db.localhost:")),
            "{pooled}"
        );
        assert_eq!(ok_psql(&pooled, "select count(*) from items").await, "3");
    })
    .await;

    // A cancel request (psql's Ctrl-C: a new plaintext connection naming only the backend's
    // key) reaches the backend through the front.
    step("a cancel request reaches the backend through the front", async {
        let sleeper = tokio::process::Command::new("psql")
            .arg(&direct)
            .args(["-X", "-c", "select pg_sleep(60)"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        within(Duration::from_secs(60), "the sleep running", async {
            loop {
                let (st, v) = query(
                    &api,
                    &id,
                    "select count(*)::int from pg_stat_activity where query = 'select pg_sleep(60)'",
                    json!([]),
                )
                .await;
                assert_eq!(st, StatusCode::OK, "{v}");
                if v["rows"] == json!([[1]]) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .await;
        let pid = sleeper.id().unwrap().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
        let out = within(
            Duration::from_secs(30),
            "psql after its cancel",
            sleeper.wait_with_output(),
        )
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("canceling statement due to user request"),
            "{err}"
        );
    })
    .await;

    step(
        "the front's refusals are PostgreSQL errors: wrong password, unknown database, no TLS",
        async {
            let wrong = direct.replace(password, "wrong-password");
            let (ok, _, err) = psql(&wrong, "select 1").await;
            assert!(
                !ok && err.contains("password authentication failed"),
                "{err}"
            );
            let unknown = direct.replace(&format!("@{id}."), "@db-0000000000000000.");
            let (ok, _, err) = psql(&unknown, "select 1").await;
            assert!(!ok && err.contains("does not exist"), "{err}");
            let plain = direct.replace("sslmode=require", "sslmode=disable");
            let (ok, _, err) = psql(&plain, "select 1").await;
            assert!(!ok && err.contains("requires TLS"), "{err}");
        },
    )
    .await;

    step(
        "the HTTP query broker: typed rows, SQL errors by SQLSTATE, timeout_ms",
        async {
            let (st, v) = query(
                &api,
                &id,
                "select id, note, $1::int + 1 as n, true as t from items where id <= $2 order by id",
                json!([41, 2]),
            )
            .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(
                v["rows"],
                json!([[1, "a", 42, true], [2, "b", 42, true]]),
                "{v}"
            );
            assert_eq!(v["fields"][0]["name"], "id");
            let (st, v) = query(&api, &id, "selec 1", json!([])).await;
            assert_eq!(
                (st, code(&v)),
                (StatusCode::BAD_REQUEST, "query_failed"),
                "{v}"
            );
            assert!(
                v["error"]["message"].as_str().unwrap().contains("42601"),
                "{v}"
            );
            let (st, v) = query(&api, &id, "select pg_sleep(5)", json!([])).await;
            assert_eq!(st, StatusCode::OK, "{v}");
            let (st, v) = api
                .call(
                    "POST",
                    &format!("/v1/databases/{id}/query"),
                    Some(json!({"sql": "select pg_sleep(5)", "timeout_ms": 300})),
                )
                .await;
            assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains("57014"),
                "{v}"
            );
        },
    )
    .await;

    step(
        "Neon-compatible /sql: the connection string logs in, a failed batch rolls back",
        async {
            let (st, v) = neon_sql(
                &api,
                &id,
                &uri,
                json!({"query": "select note from items where id = $1", "params": ["3"]}),
            )
            .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(v["rows"], json!([{"note": "c"}]), "{v}");
            assert_eq!(v["command"], "SELECT");
            let (st, v) = neon_sql(
                &api,
                &id,
                &uri,
                json!({"queries": [
                    {"query": "insert into items values (4, 'd', '[1,1,1]')"},
                    {"query": "insert into items values (4, 'dup', '[1,1,1]')"}
                ]}),
            )
            .await;
            assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
            assert_eq!(v["code"], "23505", "{v}");
            assert_eq!(
                ok_psql(&direct, "select count(*) from items").await,
                "3",
                "the failed batch rolled back"
            );
            let (st, v) = neon_sql(
                &api,
                &id,
                &uri.replace(password, "nope"),
                json!({"query": "select 1"}),
            )
            .await;
            assert_eq!(
                (st, v["code"].as_str()),
                (StatusCode::BAD_REQUEST, Some("28P01")),
                "{v}"
            );
        },
    )
    .await;

    let direct = step(
        "password rotation: the old one stops working, the new one works direct and pooled",
        async {
            let (st, rotated) = api
                .call("POST", &format!("/v1/databases/{id}/password"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{rotated}");
            let new_uri = rotated["connection_uri"].as_str().unwrap().to_owned();
            assert_ne!(new_uri, uri);
            let (ok, _, err) = psql(&direct, "select 1").await;
            assert!(
                !ok && err.contains("password authentication failed"),
                "{err}"
            );
            let direct = via(&new_uri, &server.db);
            assert_eq!(ok_psql(&direct, "select count(*) from items").await, "3");
            let pooled = via(rotated["pooled_uri"].as_str().unwrap(), &server.db);
            assert_eq!(ok_psql(&pooled, "select count(*) from items").await, "3");
            direct
        },
    )
    .await;

    let (br_id, branch) = step(
        "a branch: the data as of now, its parent's size, writes stay on its side",
        async {
            let t = std::time::Instant::now();
            let (st, br) = api
                .call(
                    "POST",
                    &format!("/v1/databases/{id}/branches"),
                    // Short, so the next step waits little for it to hibernate (a connection
                    // that finds it hibernated wakes it, so the steps before do not mind).
                    Some(json!({"name": "app_branch", "idle_seconds": 4})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{br}");
            eprintln!("branch ready in {:?}", t.elapsed());
            assert_eq!(br["parent"], json!(id));
            assert_eq!(
                br["memory_mb"], 768,
                "a branch keeps its parent's size: {br}"
            );
            let br_id = br["id"].as_str().unwrap().to_owned();
            let branch = via(br["connection_uri"].as_str().unwrap(), &server.db);
            assert_eq!(ok_psql(&branch, "select count(*) from items").await, "3");
            ok_psql(
                &branch,
                "insert into items values (10, 'branch only', '[1,1,0]')",
            )
            .await;
            assert_eq!(ok_psql(&branch, "select count(*) from items").await, "4");
            assert_eq!(ok_psql(&direct, "select count(*) from items").await, "3");
            (br_id, branch)
        },
    )
    .await;

    // The branch hibernates by itself after its idle_seconds without connections or queries,
    // and the next connection wakes it.
    step(
        "an idle branch hibernates by itself and a connection wakes it",
        async {
            within(
                Duration::from_secs(120),
                "the idle branch hibernated",
                async {
                    loop {
                        if get_db(&api, &br_id).await["state"] == "hibernated" {
                            return;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
            )
            .await;
            assert_eq!(ok_psql(&branch, "select count(*) from items").await, "4");
            assert_eq!(get_db(&api, &br_id).await["state"], "ready");
        },
    )
    .await;

    // Hibernate (as the idle timeout would) and wake on the next connection.
    let sandbox = step(
        "a hibernated database wakes on the next connection",
        async {
            let sandbox = get_db(&api, &id).await["sandbox_id"]
                .as_str()
                .unwrap()
                .to_owned();
            let (st, v) = api
                .call("POST", &format!("/v1/sandboxes/{sandbox}/hibernate"), None)
                .await;
            assert_eq!(st, StatusCode::OK, "{v}");
            assert_eq!(get_db(&api, &id).await["state"], "hibernated");
            let t = std::time::Instant::now();
            assert_eq!(ok_psql(&direct, "select count(*) from items").await, "3");
            eprintln!("hibernated database answered in {:?}", t.elapsed());
            assert_eq!(get_db(&api, &id).await["state"], "ready");
            sandbox
        },
    )
    .await;

    step(
        "a VM killed under the database: a committed row is there on the next VM",
        async {
            ok_psql(
                &direct,
                "insert into items values (5, 'acknowledged', '[0,1,1]')",
            )
            .await;
            let pid =
                std::fs::read_to_string(data.join("sandboxes").join(&sandbox).join("qemu.pid"))
                    .expect("the VM's qemu.pid");
            let st = std::process::Command::new("kill")
                .args(["-9", pid.trim()])
                .status()
                .unwrap();
            assert!(st.success(), "kill -9 of {sandbox}'s QEMU ({pid})");
            within(Duration::from_secs(300), "a new VM after the kill", async {
                loop {
                    let (st, v) =
                        query(&api, &id, "select note from items where id = 5", json!([])).await;
                    if st == StatusCode::OK {
                        assert_eq!(v["rows"], json!([["acknowledged"]]), "{v}");
                        return;
                    }
                    eprintln!("after the kill: {st} {v}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
            .await;
            let after = get_db(&api, &id).await;
            assert_eq!(after["state"], "ready");
            assert_ne!(after["sandbox_id"].as_str().unwrap(), sandbox, "a new VM");
        },
    )
    .await;

    step(
        "a backup of the database to the object store completes",
        async {
            let (st, b) = api
                .call("POST", &format!("/v1/databases/{id}/backups"), None)
                .await;
            assert_eq!(st, StatusCode::ACCEPTED, "{b}");
            within(Duration::from_secs(120), "backup done", async {
                loop {
                    let (st, v) = api
                        .call("GET", &format!("/v1/databases/{id}/backups"), None)
                        .await;
                    assert_eq!(st, StatusCode::OK, "{v}");
                    let all = v["data"].as_array().unwrap();
                    assert!(all.iter().any(|x| x["id"] == b["id"]), "{v}");
                    if all.iter().all(|x| x["state"] == "done") {
                        return;
                    }
                    assert!(all.iter().all(|x| x["state"] != "failed"), "{v}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            })
            .await;
        },
    )
    .await;

    // Point in time: rows written before and after a moment T; a branch from T and a restore
    // in place to T have the first and not the second (the base backup above plus the WAL
    // archived since).
    let (t, pitr) = step(
        "point in time: a branch from T has the rows written before T only",
        async {
            ok_psql(
                &direct,
                "insert into items values (20, 'before T', '[0,0,1]')",
            )
            .await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
            // T on the clock that stamps the commits: the guest's, which under a loaded TCG
            // host can fall seconds behind the host's between its clock steps.
            let t = ok_psql(
                &direct,
                "select to_char(clock_timestamp() at time zone 'UTC', \
                 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
            )
            .await
            .trim()
            .to_owned();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            ok_psql(
                &direct,
                "insert into items values (21, 'after T', '[1,0,1]')",
            )
            .await;
            let started = std::time::Instant::now();
            let (st, pitr) = api
                .call(
                    "POST",
                    &format!("/v1/databases/{id}/branches"),
                    Some(json!({"name": "app_at_t", "from_time": t})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{pitr}");
            eprintln!("branch from {t} ready in {:?}", started.elapsed());
            let at_t = via(pitr["connection_uri"].as_str().unwrap(), &server.db);
            assert_eq!(
                ok_psql(
                    &at_t,
                    "select string_agg(id::text, ',' order by id) from items where id >= 20"
                )
                .await,
                "20"
            );
            (t, pitr)
        },
    )
    .await;
    let pitr_id = pitr["id"].as_str().unwrap().to_owned();
    let at_t = via(pitr["connection_uri"].as_str().unwrap(), &server.db);

    // The restored database keeps its id and connection string and takes writes on its new
    // timeline; a session open on the old data during the restore is told why it ends.
    step(
        "restore in place to T: open sessions told why, same id and URI, a new timeline",
        async {
            let open = tokio::process::Command::new("psql")
                .arg(&direct)
                .args(["-X", "-A", "-t", "-c", "select pg_sleep(600)"])
                .env("PGCONNECT_TIMEOUT", "120")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run psql");
            within(Duration::from_secs(60), "the session open", async {
                loop {
                    let (st, v) = query(
                        &api,
                        &id,
                        "select count(*)::int from pg_stat_activity where query = 'select pg_sleep(600)'",
                        json!([]),
                    )
                    .await;
                    assert_eq!(st, StatusCode::OK, "{v}");
                    if v["rows"] == json!([[1]]) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
            .await;
            let started = std::time::Instant::now();
            let (st, restored) = api
                .call(
                    "POST",
                    &format!("/v1/databases/{id}/restore"),
                    Some(json!({"to_time": t})),
                )
                .await;
            assert_eq!(st, StatusCode::OK, "{restored}");
            eprintln!("restore to {t} in {:?}", started.elapsed());
            assert_eq!(restored["id"], json!(id));
            let out = within(
                Duration::from_secs(60),
                "the open session ended",
                open.wait_with_output(),
            )
            .await
            .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("administrator command"),
                "{err}"
            );
            assert_eq!(
                restored["connection_uri"],
                get_db(&api, &id).await["connection_uri"]
            );
            assert_eq!(
                ok_psql(
                    &direct,
                    "select string_agg(id::text, ',' order by id) from items"
                )
                .await,
                "1,2,3,5,20"
            );
            ok_psql(
                &direct,
                "insert into items values (22, 'new timeline', '[1,1,1]')",
            )
            .await;
            assert!(
                ok_psql(&direct, "select timeline_id from pg_control_checkpoint()")
                    .await
                    .parse::<u32>()
                    .unwrap()
                    >= 2
            );
        },
    )
    .await;

    // A full volume (a file fills all but 40 MiB of it): the statement that runs out of space
    // fails — with PostgreSQL's own message when a table file could not grow, or with the
    // cluster's restart when the WAL could not (its writer PANICs and every backend is ended:
    // CI saw both). A cluster that did not restart answers while the disk is still full; one
    // that did cannot until space is freed (crash recovery removes the relation-cache init
    // files, and a backend that cannot write one ends with "could not write init file": CI saw
    // that too). Once space is freed, it answers consistent and takes writes again.
    step(
        "a full volume fails the statement; with space freed the database answers and writes",
        async {
            let pitr_sb = pitr["sandbox_id"].as_str().unwrap().to_owned();
            let fill = "avail=$(df -Pk /var/lib/pandastack-db | awk 'NR == 2 {print $4}'); \
                        fallocate -l $(( (avail - 40 * 1024) * 1024 )) /var/lib/pandastack-db/ballast";
            let (st, v) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{pitr_sb}/exec"),
                    Some(json!({ "cmd": fill })),
                )
                .await;
            assert_eq!((st, &v["exit_code"]), (StatusCode::OK, &json!(0)), "{v}");
            let (ok, _, err) = psql(
                &at_t,
                "create table fill (x text); alter table fill alter x set storage external; \
                 insert into fill select repeat(md5(i::text), 64) from generate_series(1, 100000) i",
            )
            .await;
            let restarted = err.contains("PANIC")
                || err.contains("crash of another server process")
                || err.contains("server closed the connection");
            assert!(
                !ok && (err.contains("No space left on device") || restarted),
                "{err}"
            );
            eprintln!("full volume: the cluster restarted: {restarted}");
            if !restarted {
                // Unless the WAL writer PANICs just after (writing the abort, say): then the
                // restart shows here instead.
                let (ok, out, err) =
                    psql(&at_t, "select count(*) from items where id >= 20").await;
                assert!(
                    (ok && out == "1")
                        || [
                            "recovery mode",
                            "crash of another",
                            "not yet accepting",
                            "init file"
                        ]
                        .iter()
                        .any(|m| err.contains(m)),
                    "{out} {err}"
                );
            }
            let (st, v) = api
                .call(
                    "POST",
                    &format!("/v1/sandboxes/{pitr_sb}/exec"),
                    Some(json!({"cmd": "rm /var/lib/pandastack-db/ballast"})),
                )
                .await;
            assert_eq!((st, &v["exit_code"]), (StatusCode::OK, &json!(0)), "{v}");
            within(
                Duration::from_secs(120),
                "answers after the disk filled",
                async {
                    loop {
                        let (ok, out, err) =
                            psql(&at_t, "select count(*) from items where id >= 20").await;
                        if ok {
                            assert_eq!(out, "1");
                            return;
                        }
                        eprintln!("full volume: {err}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                },
            )
            .await;
            ok_psql(
                &at_t,
                "insert into items values (30, 'after the disk filled', '[0,0,0]')",
            )
            .await;
            let (st, v) = api
                .call("DELETE", &format!("/v1/databases/{pitr_id}"), None)
                .await;
            assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        },
    )
    .await;

    step(
        "restore and branch times outside the window or malformed are 422 invalid_argument",
        async {
            // Outside the window (before the first base backup, in the future) and bad times.
            for (path, body) in [
                ("restore", json!({"to_time": "2001-01-01T00:00:00Z"})),
                ("restore", json!({"to_time": "2999-01-01T00:00:00Z"})),
                ("restore", json!({"to_time": "yesterday"})),
                ("branches", json!({"from_time": "2001-01-01T00:00:00Z"})),
            ] {
                let (st, v) = api
                    .call(
                        "POST",
                        &format!("/v1/databases/{id}/{path}"),
                        Some(body.clone()),
                    )
                    .await;
                assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {v}");
                assert_eq!(code(&v), "invalid_argument", "{v}");
            }
            let (_, v) = api
                .call(
                    "POST",
                    &format!("/v1/databases/{id}/restore"),
                    Some(json!({"to_time": "2001-01-01T00:00:00Z"})),
                )
                .await;
            assert!(
                v["error"]["message"].as_str().unwrap().contains("window"),
                "{v}"
            );
        },
    )
    .await;

    // A server restart: the database answers again with the same connection string.
    drop(server);
    let server = step("the server starts again over the same data", async {
        start_with(data, port, &args).await
    })
    .await;
    let api = self::api(&server);
    step(
        "after a server restart the database answers with the same connection string",
        async {
            assert_eq!(ok_psql(&direct, "select count(*) from items").await, "6");
            let (st, list) = api.call("GET", "/v1/databases", None).await;
            assert_eq!(st, StatusCode::OK);
            assert_eq!(list["data"].as_array().unwrap().len(), 2, "{list}");
        },
    )
    .await;

    step(
        "deletes leave nothing: no database, sandbox or volume",
        async {
            for d in [&br_id, &id] {
                let (st, v) = api
                    .call("DELETE", &format!("/v1/databases/{d}"), None)
                    .await;
                assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
            }
            let (ok, _, err) = psql(&direct, "select 1").await;
            assert!(!ok && err.contains("does not exist"), "{err}");
            assert_eq!(counts(&api).await, (0, 0, 0));
        },
    )
    .await;
}
