//! Schedules (cron) through the real server and real guests (the `minimal` template): a
//! seconds-granular schedule fires repeatedly, each run's sandbox runs the command with the
//! payload and is deleted; a bad cron is 422 naming the field; a manual run; pause stops the
//! firing; `forbid` skips a due time while a run is under way; and `kill -9` of the server in
//! the middle of the schedules, restarted on the same data: no due time fires twice, and the
//! due times of the downtime follow `starting_deadline_seconds`.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{free_port, start_with, Api, Server};
use pandastack_testkit::{bake, runtime};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

const ARGS: [&str; 4] = ["--network", "off", "--pool-size", "1"];

fn api(s: &Server) -> Api<'_> {
    Api {
        s,
        c: Client::new(),
    }
}

fn schedule(name: &str, cron: &str, command: &str, extra: Value) -> Value {
    let mut v = json!({
        "name": name,
        "cron": cron,
        "target": {"type": "sandbox_exec", "template": "minimal", "command": command, "timeout_seconds": 60},
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

async fn runs(api: &Api<'_>, name: &str) -> Vec<Value> {
    let (st, v) = api
        .call(
            "GET",
            &format!("/v1/schedules/{name}/runs?limit=1000"),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["data"].as_array().unwrap().clone()
}

/// Waits (up to `secs`) until `pred` holds for the schedule's runs; returns them.
async fn until(
    api: &Api<'_>,
    name: &str,
    secs: u64,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let t = Instant::now();
    loop {
        let r = runs(api, name).await;
        if pred(&r) {
            return r;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "schedule {name}: condition not met in {secs}s; runs: {r:#?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn count(runs: &[Value], state: &str) -> usize {
    runs.iter().filter(|r| r["state"] == state).count()
}

fn ms(rfc3339: &Value) -> i64 {
    let t = time::OffsetDateTime::parse(
        rfc3339.as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn assert_unique_due_times(runs: &[Value]) {
    let due: BTreeSet<&str> = runs.iter().map(|r| r["due_at"].as_str().unwrap()).collect();
    assert_eq!(due.len(), runs.len(), "a due time fired twice: {runs:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_end_to_end() {
    let guard = runtime().await;
    bake(&guard, "minimal").await;
    let data = guard.dir.path();
    let port = free_port();
    let mut server = start_with(data, port, &ARGS).await;
    let a = api(&server);

    // Bad input: 422 naming what fails.
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule("bad", "*/5 25 * * *", "true", json!({}))),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["code"], "invalid_argument");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("field 2 (hour) \"25\""), "{msg}");
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule("bad", "* * * *", "true", json!({}))),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("4 fields"),
        "{v}"
    );
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule(
                "bad",
                "@daily",
                "true",
                json!({"timezone": "Mars/Base"}),
            )),
        )
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("timezone:"),
        "{v}"
    );
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule("bad", "@daily", "true", json!({"bogus": 1}))),
        )
        .await;
    assert!(st.is_client_error(), "unknown fields are refused: {v}");

    // Every two seconds: fires, runs the command with the payload, deletes its sandbox.
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule(
                "tick",
                "*/2 * * * * *",
                "echo \"$PANDASTACK_PAYLOAD\"",
                json!({"payload": {"n": 7}}),
            )),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert!(v["next_run_at"].is_string(), "{v}");
    let (st, dup) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule("tick", "@daily", "true", json!({}))),
        )
        .await;
    assert_eq!(st, StatusCode::CONFLICT, "{dup}");
    let r = until(&a, "tick", 180, |r| count(r, "succeeded") >= 2).await;
    let mut delays = Vec::new();
    for run in r.iter().filter(|r| r["state"] == "succeeded") {
        assert_eq!(run["output"], "{\"n\":7}\n", "{run}");
        assert_eq!(run["exit_code"], 0);
        assert_eq!(run["trigger"], "scheduled");
        assert_eq!(ms(&run["due_at"]) % 2000, 0, "due on even seconds: {run}");
        delays.push(ms(&run["created_at"]) - ms(&run["due_at"]));
    }
    eprintln!("dispatch delays (ms): {delays:?}");
    assert!(
        delays.iter().all(|d| (0..1000).contains(d)),
        "runs recorded at their due time: {delays:?}"
    );
    let (st, one) = a
        .call(
            "GET",
            &format!(
                "/v1/schedules/tick/runs/{}",
                r[r.len() - 1]["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{one}");

    // Pause: nothing fires; a manual run still runs.
    let (st, v) = a.call("POST", "/v1/schedules/tick/pause", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["paused"], true);
    assert!(v["next_run_at"].is_null(), "{v}");
    let paused_at = ms(&v["updated_at"]);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let r = runs(&a, "tick").await;
    assert!(
        r.iter().all(|x| ms(&x["due_at"]) <= paused_at),
        "nothing due after the pause: {r:#?}"
    );
    let (st, manual) = a.call("POST", "/v1/schedules/tick/run", None).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{manual}");
    assert_eq!(manual["trigger"], "manual");
    // A PATCH without a body (the document says it is optional) changes nothing.
    let (st, v) = a.call("PATCH", "/v1/schedules/tick", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["paused"], &v["cron"]),
        (&json!(true), &json!("*/2 * * * * *")),
        "{v}"
    );
    let id = manual["id"].as_str().unwrap().to_owned();
    until(&a, "tick", 120, |r| {
        r.iter()
            .any(|x| x["id"] == id.as_str() && x["state"] == "succeeded")
    })
    .await;

    // forbid: a run that outlasts the period makes the next due times `skipped`.
    let (st, v) = a
        .call(
            "POST",
            "/v1/schedules",
            Some(schedule(
                "slow",
                "*/2 * * * * *",
                "sleep 5; echo done",
                json!({"concurrency_policy": "forbid"}),
            )),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let r = until(&a, "slow", 180, |r| {
        count(r, "succeeded") >= 1 && count(r, "skipped") >= 1
    })
    .await;
    let skipped = r.iter().find(|x| x["state"] == "skipped").unwrap();
    assert!(
        skipped["error"].as_str().unwrap().contains("still"),
        "{skipped}"
    );
    assert_eq!(
        r.iter().find(|x| x["state"] == "succeeded").unwrap()["output"],
        "done\n"
    );
    let (st, _) = a.call("DELETE", "/v1/schedules/slow", None).await;
    assert_eq!(st, StatusCode::NO_CONTENT);

    // kill -9 in the middle: `late` has a 2 s deadline (the due times of the downtime are
    // missed), `eager` none (the latest one of the downtime runs once, older ones missed).
    for (name, extra) in [
        ("late", json!({"starting_deadline_seconds": 2})),
        ("eager", json!({})),
    ] {
        let (st, v) = a
            .call(
                "POST",
                "/v1/schedules",
                Some(schedule(
                    name,
                    "*/3 * * * * *",
                    "echo $PANDASTACK_PAYLOAD",
                    extra,
                )),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    until(&a, "late", 120, |r| count(r, "succeeded") >= 1).await;
    until(&a, "eager", 120, |r| count(r, "succeeded") >= 1).await;
    drop(a);
    server.child.kill().unwrap(); // SIGKILL
    server.child.wait().unwrap();
    let killed_at = pandastack_store::now_ms();
    drop(server);
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The scheduler may fire before the server answers its health check: what counts as the
    // downtime ends when the new process starts, and a due time within `late`'s 2 s deadline
    // of that start may rightly run.
    let restart_began = pandastack_store::now_ms();
    let server = start_with(data, port, &ARGS).await;
    let restarted_at = pandastack_store::now_ms();
    let a = api(&server);
    for name in ["late", "eager"] {
        // Fires again after the restart, and everything settles.
        let r = until(&a, name, 180, |r| {
            r.iter()
                .any(|x| x["state"] == "succeeded" && ms(&x["due_at"]) > restarted_at)
                && r.iter()
                    .all(|x| x["state"] != "running" && x["state"] != "queued")
        })
        .await;
        assert_unique_due_times(&r);
        let downtime: Vec<&Value> = r
            .iter()
            .filter(|x| {
                let d = ms(&x["due_at"]);
                let end = if name == "late" {
                    restart_began - 2000
                } else {
                    restart_began
                };
                d > killed_at && d < end
            })
            .collect();
        assert!(
            downtime.len() >= 2,
            "{name}: due times of the downtime recorded: {r:#?}"
        );
        let ran = downtime.iter().filter(|x| x["state"] != "missed").count();
        if name == "late" {
            assert_eq!(ran, 0, "{name}: all past the deadline: {downtime:#?}");
        } else {
            assert!(ran <= 1, "{name}: at most the latest ran: {downtime:#?}");
            let caught_up = r
                .iter()
                .filter(|x| {
                    let d = ms(&x["due_at"]);
                    d > killed_at && d < restarted_at && x["state"] != "missed"
                })
                .count();
            assert!(
                caught_up >= 1,
                "{name}: the latest missed due time ran: {r:#?}"
            );
        }
        eprintln!(
            "{name}: {} runs, {} missed in the downtime",
            r.len(),
            downtime.len() - ran
        );
    }

    // Delete: the schedules go and no sandbox is left.
    let (st, v) = a.call("GET", "/v1/schedules", None).await;
    assert_eq!(st, StatusCode::OK);
    for s in v["data"].as_array().unwrap() {
        let (st, _) = a
            .call(
                "DELETE",
                &format!("/v1/schedules/{}", s["name"].as_str().unwrap()),
                None,
            )
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT);
    }
    let (st, v) = a.call("GET", "/v1/schedules/tick", None).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    let t = Instant::now();
    loop {
        let (_, v) = a.call("GET", "/v1/sandboxes", None).await;
        if v["data"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "sandboxes left: {v}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
