//! Hardening 2, item 7: workspace isolation of volumes, databases, apps, functions and
//! schedules. On every route of one of workspace A's objects, workspace B's key gets exactly
//! the answer it gets for a made-up name or id of the same shape (status and body, the request
//! id aside: the kind's 404), B's lists show none of A's objects, and nothing changes: A reads
//! each object back as it was. Key-less routes give nothing away either: a database's
//! Neon-compatible `/sql` answers a wrong password for A's database as it answers any password
//! for a database that does not exist (PostgreSQL's failed login), and an app's webhooks answer
//! a bad signature for A's app as for no app. The stacks run no workers: A's deploys and runs
//! stay queued, so only B's requests could change anything.
//!
//! A database needs a VM with PostgreSQL to be created, so A's database rows are written to the
//! store as a create leaves them; no call here gets as far as a cluster.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use pandastack_store::{DatabaseRow, DatabaseRowState};
use pandastack_testkit::fake::{fake_stack_without_workers as fake_stack, FakeStack};
use serde_json::{json, Value};

use super::{answer, call};

/// What a call sends after its headers.
#[derive(Clone)]
enum Payload {
    None,
    Json(Value),
    /// A body of this content type.
    Raw(&'static str, &'static [u8]),
}

/// `method path` with `key` as the API key (none when `None`).
async fn request(
    s: &FakeStack,
    key: Option<&str>,
    method: &str,
    path: &str,
    headers: &[(&'static str, String)],
    payload: &Payload,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(k) = key {
        req = req.header("authorization", format!("Bearer {k}"));
    }
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let body = match payload {
        Payload::None => Body::empty(),
        Payload::Json(v) => {
            req = req.header("content-type", "application/json");
            Body::from(v.to_string())
        }
        Payload::Raw(ctype, bytes) => {
            req = req.header("content-type", *ctype);
            Body::from(*bytes)
        }
    };
    answer(s, req.body(body).unwrap()).await
}

/// A call with `key` and a JSON body (or none).
async fn call_with(
    s: &FakeStack,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let payload = body.map_or(Payload::None, Payload::Json);
    request(s, Some(key), method, path, &[], &payload).await
}

/// Workspace B: a second workspace with a key of its own.
async fn workspace_b(s: &FakeStack) -> String {
    let (_, _, key) = s
        .store
        .keys()
        .create_workspace_with_key("other", 50, 1000)
        .await
        .expect("second workspace");
    key
}

/// The answer's `field` (`id`) after asserting `status`.
fn made(status: StatusCode, (st, v): (StatusCode, Value), field: &str) -> String {
    assert_eq!(st, status, "{v}");
    v[field].as_str().expect("the object's field").to_owned()
}

/// `field` of each object of a list.
fn listed(v: &Value, field: &str) -> Vec<String> {
    v["data"]
        .as_array()
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|o| o[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// What A reads at `paths` (each must answer 200).
async fn read(s: &FakeStack, paths: &[String]) -> Vec<Value> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let (st, v) = call(s, "GET", p, None).await;
        assert_eq!(st, StatusCode::OK, "A reads {p}: {v}");
        out.push(v);
    }
    out
}

/// `real` (a name or id) with its last four letters or digits changed (rot13, digits +5): the
/// same length and character classes, so it passes the same checks, and exists nowhere.
fn ghost(real: &str) -> String {
    let mut out: Vec<char> = real.chars().collect();
    let mut changed = 0;
    for c in out.iter_mut().rev() {
        if changed == 4 {
            break;
        }
        let n = match *c {
            'a'..='z' => (b'a' + (*c as u8 - b'a' + 13) % 26) as char,
            '0'..='9' => (b'0' + (*c as u8 - b'0' + 5) % 10) as char,
            _ => continue,
        };
        *c = n;
        changed += 1;
    }
    out.into_iter().collect()
}

/// One call of workspace B's on A's objects.
#[derive(Clone)]
struct Case {
    method: &'static str,
    path: String,
    headers: Vec<(&'static str, String)>,
    payload: Payload,
    /// Sent without B's key (a route whose credential is something else).
    keyless: bool,
    /// The answer both to A's objects and to made-up ones.
    status: StatusCode,
}

impl Case {
    fn new(method: &'static str, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            headers: Vec::new(),
            payload: Payload::None,
            keyless: false,
            status: StatusCode::NOT_FOUND,
        }
    }

    fn json(mut self, v: Value) -> Self {
        self.payload = Payload::Json(v);
        self
    }

    fn raw(mut self, ctype: &'static str, bytes: &'static [u8]) -> Self {
        self.payload = Payload::Raw(ctype, bytes);
        self
    }

    fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    fn keyless(mut self) -> Self {
        self.keyless = true;
        self
    }

    fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// Sends the call with `swap` applied to its path, headers and JSON body; the answer
    /// without its request id.
    async fn send(
        &self,
        s: &FakeStack,
        key: &str,
        swap: &dyn Fn(&str) -> String,
    ) -> (StatusCode, Value) {
        let headers: Vec<_> = self.headers.iter().map(|(n, v)| (*n, swap(v))).collect();
        let payload = match &self.payload {
            Payload::Json(v) => Payload::Json(serde_json::from_str(&swap(&v.to_string())).unwrap()),
            p => p.clone(),
        };
        let key = (!self.keyless).then_some(key);
        let (st, mut v) = request(s, key, self.method, &swap(&self.path), &headers, &payload).await;
        if let Some(e) = v.get_mut("error").and_then(Value::as_object_mut) {
            e.remove("request_id");
        }
        (st, v)
    }
}

/// Workspace B (`key`) calls `cases` on A's objects, which `real` names (names and ids in the
/// calls' paths, headers and bodies): each answers with the case's status, and exactly as the
/// same call on made-up names and ids ([`ghost`]) answers — the request id aside, with the
/// made-up names read as the real ones.
async fn answers_as_missing(s: &FakeStack, key: &str, real: &[&str], cases: &[Case]) {
    let mut pairs: Vec<(String, String)> = real.iter().map(|r| (r.to_string(), ghost(r))).collect();
    // Longer names first, so that no name is replaced inside another.
    pairs.sort_by_key(|(r, _)| std::cmp::Reverse(r.len()));
    let to_ghost = |t: &str| {
        pairs
            .iter()
            .fold(t.to_owned(), |t, (r, g)| t.replace(r.as_str(), g))
    };
    let to_real = |t: &str| {
        pairs
            .iter()
            .fold(t.to_owned(), |t, (r, g)| t.replace(g.as_str(), r))
    };
    for c in cases {
        let what = format!("{} {}", c.method, c.path);
        let (st, v) = c.send(s, key, &|t| t.to_owned()).await;
        let (gst, gv) = c.send(s, key, &to_ghost).await;
        let gv: Value = serde_json::from_str(&to_real(&gv.to_string())).unwrap();
        assert_eq!(
            (st, &v),
            (gst, &gv),
            "{what}: A's object answers unlike a missing one"
        );
        assert_eq!(st, c.status, "{what}: {v}");
    }
}

/// Volumes: the volume, its snapshots and backups are B's to reach by no route, not even to
/// mount in a sandbox, restore from, or replay through a shared `Idempotency-Key`.
#[tokio::test(flavor = "multi_thread")]
async fn volumes_of_another_workspace_are_not_found_and_unchanged() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let b = workspace_b(&s).await;
    let v = "iso-vol";
    let body = json!({"name": v, "size_gb": 1});
    made(
        StatusCode::CREATED,
        call(&s, "POST", "/v1/volumes", Some(body)).await,
        "id",
    );
    let vs = made(
        StatusCode::CREATED,
        call(&s, "POST", &format!("/v1/volumes/{v}/snapshots"), None).await,
        "id",
    );
    let vb = made(
        StatusCode::ACCEPTED,
        call(&s, "POST", &format!("/v1/volumes/{v}/backups"), None).await,
        "id",
    );
    let body = json!({"name": "bee-vol", "size_gb": 1});
    made(
        StatusCode::CREATED,
        call_with(&s, &b, "POST", "/v1/volumes", Some(body)).await,
        "id",
    );
    let views = [
        format!("/v1/volumes/{v}"),
        format!("/v1/volumes/{v}/snapshots"),
        format!("/v1/volumes/{v}/backups"),
        format!("/v1/volumes/{v}/backups/{vb}"),
        "/v1/volumes".to_owned(),
    ];
    let before = read(&s, &views).await;

    let vol = format!("/v1/volumes/{v}");
    let cases = [
        Case::new("GET", &vol),
        Case::new("PATCH", &vol).json(json!({"size_gb": 2})),
        Case::new("DELETE", &vol),
        Case::new("POST", format!("{vol}/snapshots")),
        Case::new("GET", format!("{vol}/snapshots")),
        Case::new("DELETE", format!("{vol}/snapshots/{vs}")),
        Case::new("DELETE", format!("/v1/volumes/bee-vol/snapshots/{vs}")),
        Case::new("POST", format!("{vol}/backups")),
        // Backups are listed by volume name, also after the volume is gone: B's own (none).
        Case::new("GET", format!("{vol}/backups")).status(StatusCode::OK),
        Case::new("GET", format!("{vol}/backups/{vb}")),
        Case::new("GET", format!("/v1/volumes/bee-vol/backups/{vb}")),
        Case::new("POST", "/v1/volumes").json(json!({"name": "bee-copy", "from_snapshot": vs})),
        Case::new("POST", "/v1/volumes").json(json!({"name": "bee-copy", "from_backup": vb})),
        Case::new("POST", "/v1/sandboxes")
            .json(json!({"template": "fake", "volumes": [{"name": v, "path": "/data"}]})),
    ];
    answers_as_missing(&s, &b, &[v, &vs, &vb], &cases).await;

    let (st, l) = call_with(&s, &b, "GET", "/v1/volumes", None).await;
    assert_eq!(
        (st, listed(&l, "name")),
        (StatusCode::OK, vec!["bee-vol".into()])
    );
    let (_, l) = call_with(&s, &b, "GET", "/v1/volumes/bee-vol/backups", None).await;
    assert_eq!(listed(&l, "id"), Vec::<String>::new());
    let (_, u) = call_with(&s, &b, "GET", "/v1/usage", None).await;
    assert_eq!(u["volumes"]["count"], json!(1), "{u}");
    assert_eq!(u["volumes"]["snapshots"], json!(0), "{u}");
    assert_eq!(read(&s, &views).await, before, "A's volume changed");

    // An `Idempotency-Key` A used is B's own: B's create makes B's volume, not a replay of A's.
    let body = json!({"name": "iso-idem", "size_gb": 1});
    let key = [("idempotency-key", "shared-key".to_owned())];
    let (st, va) = request(
        &s,
        Some(&s.key),
        "POST",
        "/v1/volumes",
        &key,
        &Payload::Json(body.clone()),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{va}");
    let (st, vb) = request(
        &s,
        Some(&b),
        "POST",
        "/v1/volumes",
        &key,
        &Payload::Json(body),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{vb}");
    assert_ne!(va["id"], vb["id"], "B got A's volume replayed");
    let (_, again) = call(&s, "GET", "/v1/volumes/iso-idem", None).await;
    assert_eq!(again["id"], va["id"]);
}

/// The row a finished create leaves for database `name` of workspace `ws` (`state`).
async fn database_row(s: &FakeStack, ws: &str, name: &str, state: DatabaseRowState) -> DatabaseRow {
    let row = DatabaseRow {
        id: pandastack_store::new_id("db-"),
        workspace_id: ws.to_owned(),
        name: name.to_owned(),
        version: 17,
        host_id: "host-fake".into(),
        state,
        volume_id: String::new(),
        sandbox_id: None,
        role_name: name.to_owned(),
        password: format!("pw{}", rand::random::<u64>()),
        size_gb: 1,
        memory_mb: 512,
        idle_seconds: 300,
        parent_id: None,
        created_at: pandastack_store::now_ms(),
    };
    s.store
        .databases()
        .insert(&row)
        .await
        .expect("database row");
    row
}

/// A's workspace id.
async fn workspace_a(s: &FakeStack) -> String {
    s.store
        .keys()
        .verify(&s.key)
        .await
        .unwrap()
        .expect("A's key")
        .workspace_id
}

/// Databases: by id or by name, reading, changing, branching, restoring, backing up and
/// querying A's database answer B as a database that does not exist, and start nothing.
#[tokio::test(flavor = "multi_thread")]
async fn databases_of_another_workspace_are_not_found_and_unchanged() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let b = workspace_b(&s).await;
    let ws = workspace_a(&s).await;
    let db = database_row(&s, &ws, "iso_db", DatabaseRowState::Ready).await;
    let views = [
        format!("/v1/databases/{}", db.id),
        "/v1/databases".to_owned(),
        "/v1/sandboxes".to_owned(),
    ];
    let before = read(&s, &views).await;
    assert_eq!(listed(&before[1], "id"), vec![db.id.clone()]);

    let by_id = format!("/v1/databases/{}", db.id);
    let cases = [
        Case::new("GET", &by_id),
        Case::new("GET", format!("/v1/databases/{}", db.name)),
        Case::new("DELETE", &by_id),
        Case::new("DELETE", format!("/v1/databases/{}", db.name)),
        Case::new("POST", format!("{by_id}/password")),
        Case::new("POST", format!("{by_id}/branches")).json(json!({})),
        Case::new("POST", format!("{by_id}/restore"))
            .json(json!({"to_time": "2025-01-01T00:00:00Z"})),
        Case::new("POST", format!("{by_id}/backups")),
        Case::new("GET", format!("{by_id}/backups")),
        Case::new("POST", format!("{by_id}/query")).json(json!({"sql": "select 1"})),
    ];
    answers_as_missing(&s, &b, &[&db.id, &db.name], &cases).await;

    let (st, l) = call_with(&s, &b, "GET", "/v1/databases", None).await;
    assert_eq!(
        (st, listed(&l, "id")),
        (StatusCode::OK, Vec::<String>::new())
    );
    assert_eq!(read(&s, &views).await, before, "A's database changed");
}

/// The key-less `/sql` is no existence oracle: a wrong password for A's database, any password
/// (A's right one included) for an id no database has, and the right password of a database
/// still being created all get one answer — PostgreSQL's failed login (`28P01`, 400) — and a
/// failed login does not wake or start the database's VM.
#[tokio::test(flavor = "multi_thread")]
async fn the_sql_route_answers_a_wrong_password_as_a_missing_database() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let ws = workspace_a(&s).await;
    let db = database_row(&s, &ws, "iso_db", DatabaseRowState::Ready).await;
    let creating = database_row(&s, &ws, "iso_new", DatabaseRowState::Creating).await;
    let views = [
        format!("/v1/databases/{}", db.id),
        "/v1/sandboxes".to_owned(),
    ];
    let before = read(&s, &views).await;

    let sql = |id: &str, user: &str, password: &str| {
        Case::new("POST", format!("/v1/databases/{id}/sql"))
            .keyless()
            .header(
                "neon-connection-string",
                format!("postgres://{user}:{password}@{id}.db.localhost/{user}"),
            )
            .json(json!({"query": "select 1"}))
            .status(StatusCode::BAD_REQUEST)
    };
    let batch = |c: Case| c.json(json!({"queries": [{"query": "select 1"}]}));
    let cases = [
        sql(&db.id, &db.role_name, "wrong"),
        batch(sql(&db.id, &db.role_name, "wrong")),
        sql(&creating.id, &creating.role_name, &creating.password),
    ];
    answers_as_missing(&s, "", &[&db.id, &creating.id], &cases).await;

    // One answer for all, whatever the id: no such id, an id of another shape, A's right
    // password on an id that is not A's.
    let (st, first) = cases[0].send(&s, "", &|t| t.to_owned()).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{first}");
    assert_eq!(
        (
            first["code"].as_str(),
            first["error"]["code"].as_str(),
            first["message"].as_str()
        ),
        (
            Some("28P01"),
            Some("query_failed"),
            Some(r#"password authentication failed for user "iso_db""#)
        ),
        "{first}"
    );
    let other = ghost(&db.id);
    for c in [
        sql(&other, &db.role_name, &db.password),
        sql("db-nope", &db.role_name, "wrong"),
        sql(&creating.id, &db.role_name, "wrong"),
    ] {
        let (st, v) = c.send(&s, "", &|t| t.to_owned()).await;
        assert_eq!((st, &v), (StatusCode::BAD_REQUEST, &first), "{}", c.path);
    }
    assert_eq!(
        read(&s, &views).await,
        before,
        "a failed login touched A's database"
    );
}

/// Apps: by name or id, every route of A's app — its deploys (also through B's own app), logs,
/// rollback, deploy key — answers B as no app, and the key-less webhooks answer a bad
/// signature for A's app as for no app.
#[tokio::test(flavor = "multi_thread")]
async fn apps_of_another_workspace_are_not_found_and_unchanged() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let b = workspace_b(&s).await;
    let git = json!({"url": "https://git.example.com/x.git"});
    let a = "iso-app";
    let body = json!({"name": a, "git": git, "deploy": false});
    let app_id = made(
        StatusCode::CREATED,
        call(&s, "POST", "/v1/apps", Some(body)).await,
        "id",
    );
    // Queued: the fast stack runs no deploy worker.
    let dep = made(
        StatusCode::ACCEPTED,
        call(
            &s,
            "POST",
            &format!("/v1/apps/{a}/deploys"),
            Some(json!({})),
        )
        .await,
        "id",
    );
    let body = json!({"name": "bee-app", "git": git, "deploy": false});
    made(
        StatusCode::CREATED,
        call_with(&s, &b, "POST", "/v1/apps", Some(body)).await,
        "id",
    );
    let views = [
        format!("/v1/apps/{a}"),
        format!("/v1/apps/{a}/deploys"),
        format!("/v1/apps/{a}/deploys/{dep}"),
        "/v1/apps".to_owned(),
    ];
    let before = read(&s, &views).await;

    let app = format!("/v1/apps/{a}");
    let signed = |c: Case, header: &'static str| {
        c.keyless()
            .header(header, format!("sha256={}", "0".repeat(64)))
            .header("x-github-event", "push")
            .raw("application/json", br#"{"ref": "refs/heads/main"}"#)
            .status(StatusCode::UNAUTHORIZED)
    };
    let cases = [
        Case::new("GET", &app),
        Case::new("GET", format!("/v1/apps/{app_id}")),
        Case::new("PATCH", &app).json(json!({"env": {"STOLEN": "1"}})),
        Case::new("DELETE", &app),
        Case::new("DELETE", format!("/v1/apps/{app_id}")),
        Case::new("POST", format!("{app}/deploys")).json(json!({})),
        Case::new("POST", format!("{app}/deploys"))
            .raw("application/gzip", b"\x1f\x8b not a tarball"),
        Case::new("GET", format!("{app}/deploys")),
        Case::new("GET", format!("{app}/deploys/{dep}")),
        Case::new("GET", format!("{app}/deploys/{dep}/logs")),
        Case::new("GET", format!("/v1/apps/bee-app/deploys/{dep}")),
        Case::new("GET", format!("/v1/apps/bee-app/deploys/{dep}/logs")),
        Case::new("POST", format!("{app}/rollback")).json(json!({})),
        Case::new("POST", "/v1/apps/bee-app/rollback").json(json!({"deploy_id": dep})),
        Case::new("POST", format!("{app}/deploy-key")),
        Case::new("GET", format!("{app}/logs")),
        signed(
            Case::new("POST", format!("{app}/webhooks/github")),
            "x-hub-signature-256",
        ),
        signed(
            Case::new("POST", format!("{app}/webhooks/generic")),
            "x-pandastack-signature-256",
        ),
    ];
    answers_as_missing(&s, &b, &[a, &app_id, &dep], &cases).await;

    let (st, l) = call_with(&s, &b, "GET", "/v1/apps", None).await;
    assert_eq!(
        (st, listed(&l, "name")),
        (StatusCode::OK, vec!["bee-app".into()])
    );
    let (_, l) = call_with(&s, &b, "GET", "/v1/apps/bee-app/deploys", None).await;
    assert_eq!(listed(&l, "id"), Vec::<String>::new());
    assert_eq!(read(&s, &views).await, before, "A's app changed");
}

/// Functions: every route of A's function — versions, logs, rollback, calls and their
/// results (also through B's own function) — answers B as no function.
#[tokio::test(flavor = "multi_thread")]
async fn functions_of_another_workspace_are_not_found_and_unchanged() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let b = workspace_b(&s).await;
    let function = |name: &str| {
        json!({"name": name, "runtime": "python", "handler": "main.handler",
               "files": {"main.py": "def handler(event):\n    return 1\n"}})
    };
    let f = "iso-fn";
    let fn_id = made(
        StatusCode::CREATED,
        call(&s, "POST", "/v1/functions", Some(function(f))).await,
        "id",
    );
    // Queued: the fast stack runs no invocation runner (nor builds the version).
    let inv = made(
        StatusCode::ACCEPTED,
        call(
            &s,
            "POST",
            &format!("/v1/functions/{f}/invoke?async=1"),
            Some(json!({"x": 1})),
        )
        .await,
        "id",
    );
    made(
        StatusCode::CREATED,
        call_with(&s, &b, "POST", "/v1/functions", Some(function("bee-fn"))).await,
        "id",
    );
    let views = [
        format!("/v1/functions/{f}"),
        format!("/v1/functions/{f}/versions"),
        format!("/v1/functions/{f}/versions/1"),
        format!("/v1/functions/{f}/invocations/{inv}"),
        "/v1/functions".to_owned(),
    ];
    let before = read(&s, &views).await;

    let func = format!("/v1/functions/{f}");
    let cases = [
        Case::new("GET", &func),
        Case::new("PATCH", &func).json(json!({"timeout_seconds": 5, "public": true})),
        Case::new("DELETE", &func),
        Case::new("POST", format!("{func}/versions")).json(json!({"handler": "main.other"})),
        Case::new("POST", format!("{func}/versions"))
            .raw("application/gzip", b"\x1f\x8b not a tarball"),
        Case::new("GET", format!("{func}/versions")),
        Case::new("GET", format!("{func}/versions/1")),
        Case::new("GET", format!("{func}/versions/1/logs")),
        Case::new("POST", format!("{func}/rollback")).json(json!({})),
        Case::new("POST", format!("{func}/rollback")).json(json!({"version": 1})),
        Case::new("POST", format!("{func}/invoke")).json(json!({"x": 1})),
        Case::new("POST", format!("{func}/invoke?async=1")).json(json!({"x": 1})),
        Case::new("GET", format!("{func}/invocations/{inv}")),
        Case::new("GET", format!("/v1/functions/bee-fn/invocations/{inv}")),
        // A function is stored as an app: not reachable as one either.
        Case::new("GET", format!("/v1/apps/{fn_id}")),
    ];
    answers_as_missing(&s, &b, &[f, &fn_id, &inv], &cases).await;

    let (st, l) = call_with(&s, &b, "GET", "/v1/functions", None).await;
    assert_eq!(
        (st, listed(&l, "name")),
        (StatusCode::OK, vec!["bee-fn".into()])
    );
    assert_eq!(read(&s, &views).await, before, "A's function changed");
}

/// Schedules: by name or id, reading, changing, pausing, resuming, running A's schedule and
/// reading its runs (also through B's own schedule) answer B as no schedule.
#[tokio::test(flavor = "multi_thread")]
async fn schedules_of_another_workspace_are_not_found_and_unchanged() {
    let s = fake_stack(Duration::from_secs(10)).await;
    let b = workspace_b(&s).await;
    let schedule = |name: &str| {
        json!({"name": name, "cron": "0 0 1 1 *", "paused": true,
               "target": {"type": "sandbox_exec", "template": "fake", "command": "true"}})
    };
    let n = "iso-sched";
    let sched_id = made(
        StatusCode::CREATED,
        call(&s, "POST", "/v1/schedules", Some(schedule(n))).await,
        "id",
    );
    // Queued: the fast stack runs no scheduler.
    let (st, run) = call(&s, "POST", &format!("/v1/schedules/{n}/run"), None).await;
    assert!(st.is_success(), "{run}");
    let run = run["id"].as_str().unwrap().to_owned();
    made(
        StatusCode::CREATED,
        call_with(&s, &b, "POST", "/v1/schedules", Some(schedule("bee-sched"))).await,
        "id",
    );
    let views = [
        format!("/v1/schedules/{n}"),
        format!("/v1/schedules/{n}/runs"),
        format!("/v1/schedules/{n}/runs/{run}"),
        "/v1/schedules".to_owned(),
    ];
    let before = read(&s, &views).await;

    let sch = format!("/v1/schedules/{n}");
    let cases = [
        Case::new("GET", &sch),
        Case::new("GET", format!("/v1/schedules/{sched_id}")),
        Case::new("PATCH", &sch).json(json!({"cron": "*/5 * * * *"})),
        Case::new("DELETE", &sch),
        Case::new("DELETE", format!("/v1/schedules/{sched_id}")),
        Case::new("POST", format!("{sch}/pause")),
        Case::new("POST", format!("{sch}/resume")),
        Case::new("POST", format!("{sch}/run")),
        Case::new("GET", format!("{sch}/runs")),
        Case::new("GET", format!("{sch}/runs/{run}")),
        Case::new("GET", format!("/v1/schedules/bee-sched/runs/{run}")),
    ];
    answers_as_missing(&s, &b, &[n, &sched_id, &run], &cases).await;

    let (st, l) = call_with(&s, &b, "GET", "/v1/schedules", None).await;
    assert_eq!(
        (st, listed(&l, "name")),
        (StatusCode::OK, vec!["bee-sched".into()])
    );
    let (_, l) = call_with(&s, &b, "GET", "/v1/schedules/bee-sched/runs", None).await;
    assert_eq!(listed(&l, "id"), Vec::<String>::new());
    assert_eq!(read(&s, &views).await, before, "A's schedule changed");
}
