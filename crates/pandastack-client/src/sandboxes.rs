//! Sandboxes: create, list (with cursors), get, patch, delete, lifecycle (pause, resume,
//! hibernate, wake), fork, snapshots, console logs (plain and followed) and metrics.

use std::collections::BTreeMap;

use pandastack_api_types::{
    CreateSandboxRequest, ForkRequest, ForkResponse, List, LogChunk, LogEnd, PatchSandboxRequest,
    PortUpdate, PortUrl, Sandbox, SandboxState, Snapshot,
};
use reqwest::{Method, Response};

use crate::http::{seg, Call, Payload};
use crate::sse::SseDecoder;
use crate::{Client, Error};

/// Filters and paging of `GET /v1/sandboxes`.
#[derive(Debug, Clone, Default)]
pub struct ListSandboxes {
    pub state: Option<SandboxState>,
    /// `metadata.<key>=<value>` filters, all of which must match.
    pub metadata: BTreeMap<String, String>,
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

impl Client {
    /// `POST /v1/sandboxes`, with an `Idempotency-Key`; returns when the sandbox is exec-ready.
    pub async fn create_sandbox(&self, req: &CreateSandboxRequest) -> Result<Sandbox, Error> {
        self.create("/v1/sandboxes", req).await
    }

    /// One page of `GET /v1/sandboxes`.
    pub async fn list_sandboxes(&self, q: &ListSandboxes) -> Result<List<Sandbox>, Error> {
        let mut call = Call::new(Method::GET, "/v1/sandboxes");
        if let Some(s) = q.state {
            call = call.query("state", s.as_str());
        }
        let meta: Vec<(String, String)> = q
            .metadata
            .iter()
            .map(|(k, v)| (format!("metadata.{k}"), v.clone()))
            .collect();
        if let Some(l) = q.limit {
            call = call.query("limit", l.to_string());
        }
        if let Some(c) = &q.cursor {
            call = call.query("cursor", c.clone());
        }
        // Metadata keys are dynamic: append them to the path's query by hand.
        if !meta.is_empty() {
            let extra = meta
                .iter()
                .map(|(k, v)| format!("{}={}", seg(k), seg(v)))
                .collect::<Vec<_>>()
                .join("&");
            call.path = format!("{}?{extra}", call.path);
        }
        self.json(call).await
    }

    /// Every sandbox matching `q`, following `next_cursor` to the end.
    pub async fn list_all_sandboxes(&self, q: &ListSandboxes) -> Result<Vec<Sandbox>, Error> {
        self.all(|cursor| {
            let q = ListSandboxes {
                cursor,
                ..q.clone()
            };
            async move { self.list_sandboxes(&q).await }
        })
        .await
    }

    /// `GET /v1/sandboxes/{id}`.
    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox, Error> {
        self.json(Call::new(Method::GET, sandbox_path(id, "")))
            .await
    }

    /// `PATCH /v1/sandboxes/{id}`.
    pub async fn patch_sandbox(
        &self,
        id: &str,
        req: &PatchSandboxRequest,
    ) -> Result<Sandbox, Error> {
        let call = Call::new(Method::PATCH, sandbox_path(id, "")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `DELETE /v1/sandboxes/{id}`.
    pub async fn delete_sandbox(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, sandbox_path(id, "")))
            .await
    }

    /// `POST …/pause`: freeze the vCPUs in place.
    pub async fn pause(&self, id: &str) -> Result<Sandbox, Error> {
        self.lifecycle(id, "pause").await
    }

    /// `POST …/resume`.
    pub async fn resume(&self, id: &str) -> Result<Sandbox, Error> {
        self.lifecycle(id, "resume").await
    }

    /// `POST …/hibernate`: save to disk and stop the VM.
    pub async fn hibernate(&self, id: &str) -> Result<Sandbox, Error> {
        self.lifecycle(id, "hibernate").await
    }

    /// `POST …/wake`.
    pub async fn wake(&self, id: &str) -> Result<Sandbox, Error> {
        self.lifecycle(id, "wake").await
    }

    /// `POST …/migrate`: moves the sandbox to another host of a cluster (`host`, or the one
    /// placement chooses).
    pub async fn migrate(&self, id: &str, host: Option<&str>) -> Result<Sandbox, Error> {
        let req = pandastack_api_types::MigrateRequest {
            host: host.map(str::to_owned),
        };
        let call =
            Call::new(Method::POST, sandbox_path(id, "/migrate")).payload(Payload::json(&req)?);
        self.json(call).await
    }

    async fn lifecycle(&self, id: &str, verb: &str) -> Result<Sandbox, Error> {
        self.json(Call::new(
            Method::POST,
            sandbox_path(id, &format!("/{verb}")),
        ))
        .await
    }

    /// `POST …/fork`, with an `Idempotency-Key`.
    pub async fn fork(&self, id: &str, req: &ForkRequest) -> Result<ForkResponse, Error> {
        self.create(sandbox_path(id, "/fork"), req).await
    }

    /// `POST …/snapshots`, with an `Idempotency-Key`; the sandbox keeps running.
    pub async fn create_snapshot(&self, id: &str) -> Result<Snapshot, Error> {
        let call = Call::new(Method::POST, sandbox_path(id, "/snapshots")).idempotent();
        self.json(call).await
    }

    /// `GET …/ports/{port}/url`: the port's preview URL and the token that opens it.
    pub async fn port_url(&self, id: &str, port: u16) -> Result<PortUrl, Error> {
        self.json(Call::new(
            Method::GET,
            sandbox_path(id, &format!("/ports/{port}/url")),
        ))
        .await
    }

    /// `PATCH …/ports/{port}`: make a port public or private.
    pub async fn set_port_public(
        &self,
        id: &str,
        port: u16,
        public: bool,
    ) -> Result<PortUrl, Error> {
        let call = Call::new(Method::PATCH, sandbox_path(id, &format!("/ports/{port}")))
            .payload(Payload::json(&PortUpdate { public })?);
        self.json(call).await
    }

    /// `GET /v1/{kind}/{id}/metrics`: a sandbox's (or a database's, an app's, a function's)
    /// resource use over time, as points of `step` seconds (server default 5) since `since` (an
    /// RFC 3339 time or a span back such as `15m`; server default 10 minutes).
    pub async fn metrics(
        &self,
        of: MetricsOf,
        id: &str,
        since: Option<&str>,
        step: Option<u64>,
    ) -> Result<pandastack_api_types::Metrics, Error> {
        let path = format!("/v1/{}/{}/metrics", of.collection(), seg(id));
        let mut call = Call::new(Method::GET, path);
        if let Some(since) = since {
            call = call.query("since", since);
        }
        if let Some(step) = step {
            call = call.query("step", step.to_string());
        }
        self.json(call).await
    }

    /// `GET …/logs`: the console output so far.
    pub async fn logs(&self, id: &str) -> Result<String, Error> {
        let resp = self
            .send(Call::new(Method::GET, sandbox_path(id, "/logs")))
            .await?;
        resp.text().await.map_err(Error::Http)
    }

    /// `GET …/logs?follow=1`: the console output so far, then everything appended.
    pub async fn follow_logs(&self, id: &str) -> Result<LogStream, Error> {
        let call = Call::new(Method::GET, sandbox_path(id, "/logs")).query("follow", "1");
        let resp = self.send(call).await?;
        Ok(LogStream {
            resp,
            decoder: SseDecoder::default(),
            pending: Default::default(),
        })
    }
}

/// `/v1/sandboxes/{id}{rest}`.
pub(crate) fn sandbox_path(id: &str, rest: &str) -> String {
    format!("/v1/sandboxes/{}{rest}", seg(id))
}

/// An event of a followed console log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogEvent {
    /// Console text, in order.
    Log(String),
    /// The stream ended (`reason`: `deleted`).
    End(String),
}

/// A followed console log; read it with [`LogStream::next`].
#[derive(Debug)]
pub struct LogStream {
    resp: Response,
    decoder: SseDecoder,
    pending: std::collections::VecDeque<LogEvent>,
}

impl LogStream {
    /// The next event; `None` when the server closed the stream.
    pub async fn next(&mut self) -> Result<Option<LogEvent>, Error> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                return Ok(Some(ev));
            }
            let Some(chunk) = self.resp.chunk().await.map_err(Error::Http)? else {
                return Ok(None);
            };
            for ev in self.decoder.push(&chunk) {
                match ev.event.as_str() {
                    "log" => {
                        let c: LogChunk = serde_json::from_str(&ev.data)
                            .map_err(|e| Error::decode("log event", Some(e)))?;
                        self.pending.push_back(LogEvent::Log(c.data));
                    }
                    "end" => {
                        let e: LogEnd = serde_json::from_str(&ev.data)
                            .map_err(|e| Error::decode("end event", Some(e)))?;
                        self.pending.push_back(LogEvent::End(e.reason));
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Whose metrics [`Client::metrics`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsOf {
    Sandbox,
    Database,
    App,
    Function,
}

impl MetricsOf {
    fn collection(self) -> &'static str {
        match self {
            MetricsOf::Sandbox => "sandboxes",
            MetricsOf::Database => "databases",
            MetricsOf::App => "apps",
            MetricsOf::Function => "functions",
        }
    }
}
