//! The client against a real PostgreSQL.

use pandastack_pgwire::{
    result_to_neon, Client, ClientError, Limits, QueryResult, TransactionStatus,
};
use serde_json::json;
use tokio::net::TcpStream;

use crate::fixture::{Cluster, MD5_USER, PLAIN_USER, TRUST_USER};

fn limits() -> Limits {
    Limits::default()
}

async fn one(client: &mut Client<TcpStream>, sql: &str) -> QueryResult {
    client
        .query(sql, &[], &limits())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

async fn count(client: &mut Client<TcpStream>, table: &str) -> String {
    let result = one(client, &format!("select count(*) from {table}")).await;
    result.rows[0][0].clone().expect("count")
}

#[tokio::test]
async fn scram_login_and_wrong_password() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut client = pg.client().await;
    assert!(
        client
            .parameter("server_version")
            .is_some_and(|v| v.starts_with("15")),
        "{:?}",
        client.parameters()
    );
    assert_eq!(client.parameter("client_encoding"), Some("UTF8"));
    assert!(client.backend_key().is_some());
    assert_eq!(client.transaction_status(), TransactionStatus::Idle);
    let who = one(
        &mut client,
        "select current_user, current_setting('application_name')",
    )
    .await;
    assert_eq!(
        who.rows,
        vec![vec![Some("postgres".into()), Some("pgwire-test".into())]]
    );
    client.close().await.expect("close");

    let mut wrong = pg.options("postgres");
    wrong.password = Some("not-the-password".into());
    let tcp = TcpStream::connect(pg.addr()).await.expect("tcp");
    let error = Client::connect(tcp, &wrong)
        .await
        .expect_err("wrong password");
    assert_eq!(error.code(), Some("28P01"), "{error:?}");
    assert_eq!(error.as_db().map(|db| db.severity.as_str()), Some("FATAL"));

    let mut none = pg.options("postgres");
    none.password = None;
    let tcp = TcpStream::connect(pg.addr()).await.expect("tcp");
    let error = Client::connect(tcp, &none).await.expect_err("no password");
    assert!(matches!(error, ClientError::Auth(_)), "{error:?}");
}

#[tokio::test]
async fn md5_cleartext_and_trust_logins() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    for user in [MD5_USER, PLAIN_USER, TRUST_USER] {
        let mut client = pg.connect(&pg.options(user)).await;
        let who = one(&mut client, "select current_user").await;
        assert_eq!(who.rows, vec![vec![Some(user.to_owned())]]);
    }
    let mut wrong = pg.options(MD5_USER);
    wrong.password = Some("nope".into());
    let tcp = TcpStream::connect(pg.addr()).await.expect("tcp");
    let error = Client::connect(tcp, &wrong)
        .await
        .expect_err("wrong md5 password");
    assert_eq!(error.code(), Some("28P01"), "{error:?}");

    let mut missing = pg.options("postgres");
    missing.database = Some("no_such_db".into());
    let tcp = TcpStream::connect(pg.addr()).await.expect("tcp");
    let error = Client::connect(tcp, &missing)
        .await
        .expect_err("no database");
    assert_eq!(error.code(), Some("3D000"), "{error:?}");
}

#[tokio::test]
async fn query_with_params_and_json() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut client = pg.client().await;
    let sql = r#"select $1::int + 1 as a, $2::text as b, null::int as c, '{1,2,NULL}'::int[] as d,
                 '{"a":[1]}'::jsonb as e, true as f, 1.5::float8 as g, 12345678901234::int8 as h"#;
    let result = client
        .query(
            sql,
            &[Some("41".into()), Some("it's \"x\"".into())],
            &limits(),
        )
        .await
        .expect("query");
    assert_eq!(result.command, "SELECT");
    assert_eq!(result.row_count, Some(1));
    let names: Vec<&str> = result.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", "e", "f", "g", "h"]);
    let types: Vec<u32> = result.fields.iter().map(|f| f.data_type_id).collect();
    assert_eq!(types, [23, 25, 23, 1007, 3802, 16, 701, 20]);
    assert_eq!(result.fields[0].data_type_size, 4);
    assert_eq!(
        result.rows,
        vec![vec![
            Some("42".into()),
            Some("it's \"x\"".into()),
            None,
            Some("{1,2,NULL}".into()),
            Some(r#"{"a": [1]}"#.into()),
            Some("t".into()),
            Some("1.5".into()),
            Some("12345678901234".into()),
        ]]
    );

    let neon = result_to_neon(&result, false, false);
    assert_eq!(
        neon["rows"],
        json!([{"a": 42, "b": "it's \"x\"", "c": null, "d": [1, 2, null],
                "e": {"a": [1]}, "f": true, "g": 1.5, "h": "12345678901234"}])
    );
    assert_eq!(neon["command"], json!("SELECT"));
    assert_eq!(neon["rowCount"], json!(1));
    assert_eq!(neon["fields"][3]["dataTypeID"], json!(1007));
    assert_eq!(neon["fields"][0]["format"], json!("text"));
    let raw = result_to_neon(&result, true, true);
    assert_eq!(raw["rows"][0][0], json!("42"));
    assert_eq!(raw["rows"][0][2], json!(null));
    assert_eq!(raw["rowAsArray"], json!(true));

    // A NULL parameter, a table column (tableID/columnID set), INSERT's row count.
    one(
        &mut client,
        "create table t (id int primary key, name text)",
    )
    .await;
    let inserted = client
        .query(
            "insert into t values ($1, $2), (2, 'b')",
            &[Some("1".into()), None],
            &limits(),
        )
        .await
        .expect("insert");
    assert_eq!(
        (inserted.command.as_str(), inserted.row_count),
        ("INSERT", Some(2))
    );
    let rows = one(&mut client, "select id, name from t order by id").await;
    assert!(rows.fields[0].table_id > 0);
    assert_eq!(rows.fields[1].column_id, 2);
    assert_eq!(rows.rows[0], vec![Some("1".to_owned()), None]);
    let empty = one(&mut client, "").await;
    assert_eq!(empty.command, "");
}

#[tokio::test]
async fn server_errors_keep_the_client_usable() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut client = pg.client().await;
    let error = client
        .query("selec 1", &[], &limits())
        .await
        .expect_err("syntax error");
    let db = error.as_db().expect("server error");
    assert_eq!(db.code, "42601");
    assert_eq!(db.severity, "ERROR");
    assert_eq!(db.position, Some(1));
    assert!(db.message.contains("syntax error"), "{db:?}");
    assert!(client.is_usable());
    assert_eq!(
        one(&mut client, "select 2").await.rows,
        vec![vec![Some("2".into())]]
    );

    one(&mut client, "create table u (id int primary key)").await;
    one(&mut client, "insert into u values (1)").await;
    let error = client
        .query("insert into u values (1)", &[], &limits())
        .await
        .expect_err("duplicate");
    let db = error.as_db().expect("server error");
    assert_eq!(db.code, "23505");
    assert_eq!(db.table.as_deref(), Some("u"));
    assert_eq!(db.constraint.as_deref(), Some("u_pkey"));
    assert!(db.detail.is_some());

    // Several statements are refused in the extended protocol.
    let error = client
        .query("select 1; select 2", &[], &limits())
        .await
        .expect_err("two statements");
    assert_eq!(error.code(), Some("42601"), "{error:?}");

    // COPY FROM STDIN cannot be fed: refused, and the session goes on. COPY TO STDOUT is
    // read past.
    let error = client
        .query("copy u from stdin", &[], &limits())
        .await
        .expect_err("copy in");
    assert_eq!(error.code(), Some("57014"), "{error:?}");
    let copied = one(&mut client, "copy u to stdout").await;
    assert_eq!(
        (copied.command.as_str(), copied.row_count),
        ("COPY", Some(1))
    );
    assert_eq!(count(&mut client, "u").await, "1");
    assert_eq!(client.transaction_status(), TransactionStatus::Idle);
}

#[tokio::test]
async fn row_and_byte_limits() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut client = pg.client().await;
    let ten = Limits {
        max_rows: 10,
        max_bytes: 1 << 20,
    };
    let error = client
        .query("select generate_series(1, 1000)", &[], &ten)
        .await
        .expect_err("row cap");
    match error {
        ClientError::TooLarge { rows, max_rows, .. } => {
            assert_eq!((rows, max_rows), (1000, 10));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(client.is_usable());
    let exactly = client
        .query("select generate_series(1, 10)", &[], &ten)
        .await
        .expect("ten rows fit");
    assert_eq!(exactly.rows.len(), 10);
    let error = client
        .query("select generate_series(1, 11)", &[], &ten)
        .await
        .expect_err("eleven rows do not fit");
    assert!(
        matches!(error, ClientError::TooLarge { rows: 11, .. }),
        "{error:?}"
    );

    let small = Limits {
        max_rows: 1_000_000,
        max_bytes: 10_000,
    };
    let error = client
        .query(
            "select repeat('x', 1000) from generate_series(1, 100)",
            &[],
            &small,
        )
        .await
        .expect_err("byte cap");
    match error {
        ClientError::TooLarge { rows, bytes, .. } => {
            assert_eq!(rows, 100);
            // Each row: value count (2) + length word (4) + 1000 bytes.
            assert_eq!(bytes, 100 * 1006);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // The byte limit is inclusive.
    let three = "select repeat('x', 1000) from generate_series(1, 3)";
    let exact = Limits {
        max_rows: 10,
        max_bytes: 3 * 1006,
    };
    assert_eq!(
        client
            .query(three, &[], &exact)
            .await
            .expect("fits")
            .rows
            .len(),
        3
    );
    let under = Limits {
        max_bytes: 3 * 1006 - 1,
        ..exact
    };
    let error = client
        .query(three, &[], &under)
        .await
        .expect_err("one byte short");
    assert!(
        matches!(error, ClientError::TooLarge { rows: 3, .. }),
        "{error:?}"
    );
    // One row larger than the whole budget is skipped without being buffered.
    let error = client
        .query("select repeat('y', 5000000)", &[], &small)
        .await
        .expect_err("big row");
    assert!(
        matches!(error, ClientError::TooLarge { rows: 1, .. }),
        "{error:?}"
    );
    assert_eq!(
        one(&mut client, "select 3").await.rows,
        vec![vec![Some("3".into())]]
    );
}

#[tokio::test]
async fn transactions_commit_or_roll_back() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut client = pg.client().await;
    one(&mut client, "create table items (id int primary key)").await;

    let batch = vec![
        (
            "insert into items values ($1)".to_owned(),
            vec![Some("1".to_owned())],
        ),
        (
            "insert into items values ($1)".to_owned(),
            vec![Some("2".to_owned())],
        ),
        ("select count(*) from items".to_owned(), vec![]),
    ];
    let results = client
        .transaction(&batch, Some("Serializable"), false, &limits())
        .await
        .expect("commit");
    assert_eq!(results.len(), 3);
    assert_eq!(results[2].rows, vec![vec![Some("2".into())]]);
    assert_eq!(client.transaction_status(), TransactionStatus::Idle);
    assert_eq!(count(&mut client, "items").await, "2");

    let failing = vec![
        ("insert into items values (3)".to_owned(), vec![]),
        ("insert into items values (1)".to_owned(), vec![]),
        ("insert into items values (4)".to_owned(), vec![]),
    ];
    let error = client
        .transaction(&failing, None, false, &limits())
        .await
        .expect_err("duplicate key");
    assert_eq!(error.code(), Some("23505"), "{error:?}");
    assert_eq!(client.transaction_status(), TransactionStatus::Idle);
    assert_eq!(count(&mut client, "items").await, "2");

    let read_only = vec![("insert into items values (5)".to_owned(), vec![])];
    let error = client
        .transaction(&read_only, Some("repeatable read"), true, &limits())
        .await
        .expect_err("read only");
    assert_eq!(error.code(), Some("25006"), "{error:?}");

    let error = client
        .transaction(
            &batch,
            Some("serializable; drop table items"),
            false,
            &limits(),
        )
        .await
        .expect_err("bad isolation");
    assert!(
        matches!(error, ClientError::InvalidIsolation(_)),
        "{error:?}"
    );

    // Limits cover the whole batch; a batch over them is rolled back.
    let big = vec![
        ("insert into items values (10)".to_owned(), vec![]),
        ("select generate_series(1, 50)".to_owned(), vec![]),
    ];
    let error = client
        .transaction(
            &big,
            None,
            false,
            &Limits {
                max_rows: 20,
                max_bytes: 1 << 20,
            },
        )
        .await
        .expect_err("too large");
    assert!(matches!(error, ClientError::TooLarge { .. }), "{error:?}");
    assert_eq!(count(&mut client, "items").await, "2");
    assert_eq!(client.transaction_status(), TransactionStatus::Idle);
}

#[tokio::test]
async fn statement_timeout_from_options() {
    let Some(pg) = Cluster::start().await else {
        return;
    };
    let mut opts = pg.options("postgres");
    opts.options = Some("-c statement_timeout=200".into());
    let mut client = pg.connect(&opts).await;
    let started = std::time::Instant::now();
    let error = client
        .query("select pg_sleep(2)", &[], &limits())
        .await
        .expect_err("timeout");
    assert_eq!(error.code(), Some("57014"), "{error:?}");
    assert!(started.elapsed() < std::time::Duration::from_millis(1500));
    let setting = one(&mut client, "show statement_timeout").await;
    assert_eq!(setting.rows, vec![vec![Some("200ms".into())]]);
}
