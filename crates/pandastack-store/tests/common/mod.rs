//! What the store's tests on both backends share: a fresh database per test on a real SQLite
//! file and on a real PostgreSQL server (`PANDASTACK_TEST_POSTGRES`, as in `store.rs`; `skip`
//! runs SQLite only), each reached through two store handles (two replicas).

// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use pandastack_store::Store;

/// Two handles (two replicas) on one fresh database per backend.
pub struct Case {
    pub backend: &'static str,
    pub store: Store,
    pub other: Store,
    pub _dir: Option<tempfile::TempDir>,
}

pub async fn stores() -> Vec<Case> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let mut out = vec![Case {
        backend: "sqlite",
        store: Store::open(&path).await.unwrap(),
        other: Store::open(&path).await.unwrap(),
        _dir: Some(dir),
    }];
    match std::env::var("PANDASTACK_TEST_POSTGRES").as_deref() {
        Ok("skip") => eprintln!("PostgreSQL backend skipped (PANDASTACK_TEST_POSTGRES=skip)"),
        Ok(admin) => {
            use sqlx::Connection;
            let name = format!("t_{:016x}", rand::random::<u64>());
            let mut conn = sqlx::PgConnection::connect(admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&mut conn)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(admin);
            let url = format!("{base}/{name}");
            out.push(Case {
                backend: "postgres",
                store: Store::connect(&url).await.unwrap(),
                other: Store::connect(&url).await.unwrap(),
                _dir: None,
            });
        }
        Err(_) => panic!(
            "PANDASTACK_TEST_POSTGRES is not set: run `eval \"$(scripts/test-postgres.sh start)\"` \
             first (or set it to `skip` to test SQLite only)"
        ),
    }
    out
}

/// A fixed "now" (unix ms) and the lease the tests use.
pub const T0: i64 = 1_700_000_000_000;
pub const LEASE: i64 = 8_000;
