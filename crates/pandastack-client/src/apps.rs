//! Apps deployed from git: create (with an `Idempotency-Key`), list (with cursors), get,
//! update, delete; deploys from the app's git ref or from an uploaded gzip tarball of a
//! directory, their list and state, their build log (plain or followed as Server-Sent Events)
//! and a wait for one to end; rollback to a `standby` version; the running app's own output.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pandastack_api_types::{
    App, CreateAppRequest, CreateDeployRequest, Deploy, List, LogChunk, LogEnd, RollbackRequest,
    UpdateAppRequest,
};
use reqwest::{Method, Response};

use crate::error::api_error;
use crate::http::{seg, Call, Payload};
use crate::sse::SseDecoder;
use crate::{Client, Error, LogEvent};

/// How often [`Client::wait_for_deploy`] asks about a deploy under way.
const DEPLOY_POLL: Duration = Duration::from_secs(1);

/// The `Content-Type` of an uploaded tarball.
const GZIP: &str = "application/gzip";

impl Client {
    /// `POST /v1/apps`, with an `Idempotency-Key`. The app's first deploy is queued at once
    /// (unless `deploy: Some(false)`): find it with [`Client::list_deploys`] (newest first).
    pub async fn create_app(&self, req: &CreateAppRequest) -> Result<App, Error> {
        self.create("/v1/apps", req).await
    }

    /// One page of `GET /v1/apps` (by name).
    pub async fn list_apps(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<App>, Error> {
        self.page("/v1/apps", limit, cursor).await
    }

    /// Every app of the workspace, following `next_cursor` to the end.
    pub async fn list_all_apps(&self) -> Result<Vec<App>, Error> {
        self.all(|cursor| async move { self.list_apps(None, cursor.as_deref()).await })
            .await
    }

    /// `GET /v1/apps/{name}` (name or id).
    pub async fn get_app(&self, name: &str) -> Result<App, Error> {
        self.json(Call::new(Method::GET, app_path(name, ""))).await
    }

    /// `PATCH /v1/apps/{name}`: the fields given replace the app's; the next deploy builds
    /// with them (scaling settings apply to the running version at once).
    pub async fn update_app(&self, name: &str, req: &UpdateAppRequest) -> Result<App, Error> {
        let call = Call::new(Method::PATCH, app_path(name, "")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `DELETE /v1/apps/{name}`: every version's VM, its deploys and their logs.
    pub async fn delete_app(&self, name: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, app_path(name, "")))
            .await
    }

    /// `POST /v1/apps/{name}/deploys` with `{"ref"?}`: a new deploy of the app's `git.ref`
    /// (or of `ref`), queued; follow it with [`Client::follow_deploy_logs`] or
    /// [`Client::wait_for_deploy`].
    pub async fn deploy_app(&self, name: &str, req: &CreateDeployRequest) -> Result<Deploy, Error> {
        self.create(app_path(name, "/deploys"), req).await
    }

    /// `POST /v1/apps/{name}/deploys` with a gzip tarball of the app's files in memory
    /// (`Content-Type: application/gzip`; regular files and directories only, at most 512 MiB),
    /// deployed as ref `upload`. Retried like other calls.
    pub async fn deploy_app_tarball(
        &self,
        name: &str,
        tarball: impl Into<bytes::Bytes>,
    ) -> Result<Deploy, Error> {
        self.upload_tarball(name, Upload::Bytes(tarball.into()))
            .await
    }

    /// Like [`Client::deploy_app_tarball`], the tarball streamed from a local file (reopened
    /// for each attempt).
    pub async fn deploy_app_tarball_file(
        &self,
        name: &str,
        tarball: &Path,
    ) -> Result<Deploy, Error> {
        self.upload_tarball(name, Upload::File(tarball.to_owned()))
            .await
    }

    /// Like [`Client::deploy_app_tarball`], the tarball from a stream of chunks (sent once:
    /// a stream cannot be replayed, so answers 429/502/503 are not retried).
    pub async fn deploy_app_tarball_stream<S>(&self, name: &str, stream: S) -> Result<Deploy, Error>
    where
        S: futures::TryStream + Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        bytes::Bytes: From<S::Ok>,
    {
        let body = reqwest::Body::wrap_stream(stream);
        self.upload_tarball(name, Upload::Stream(Some(body))).await
    }

    /// One page of `GET /v1/apps/{name}/deploys`, newest first.
    pub async fn list_deploys(
        &self,
        name: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<Deploy>, Error> {
        self.page(app_path(name, "/deploys"), limit, cursor).await
    }

    /// Every deploy of an app, newest first, following `next_cursor` to the end.
    pub async fn list_all_deploys(&self, name: &str) -> Result<Vec<Deploy>, Error> {
        self.all(|cursor| async move { self.list_deploys(name, None, cursor.as_deref()).await })
            .await
    }

    /// `GET /v1/apps/{name}/deploys/{id}`.
    pub async fn get_deploy(&self, name: &str, id: &str) -> Result<Deploy, Error> {
        self.json(Call::new(Method::GET, deploy_path(name, id, "")))
            .await
    }

    /// `GET …/deploys/{id}/logs`: the deploy's log so far (fetch, plan, install, build, start,
    /// health check).
    pub async fn deploy_logs(&self, name: &str, id: &str) -> Result<String, Error> {
        self.plain_text(Call::new(Method::GET, deploy_path(name, id, "/logs")))
            .await
    }

    /// `GET …/deploys/{id}/logs?follow=1`: the deploy's log so far, then everything appended,
    /// then [`LogEvent::End`] with `live`, `failed`, `superseded` or `deleted` once it ended.
    pub async fn follow_deploy_logs(&self, name: &str, id: &str) -> Result<AppLogStream, Error> {
        let call = Call::new(Method::GET, deploy_path(name, id, "/logs")).query("follow", "1");
        Ok(AppLogStream::new(self.send(call).await?))
    }

    /// `POST /v1/apps/{name}/rollback`: the deploy `deploy_id` (default: the newest `standby`
    /// one) is woken, checked and takes the traffic; answered once it is live.
    pub async fn rollback_app(&self, name: &str, req: &RollbackRequest) -> Result<Deploy, Error> {
        let call =
            Call::new(Method::POST, app_path(name, "/rollback")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `POST /v1/apps/{name}/deploy-key`: a new SSH deploy key pair replaces the app's; the
    /// answer's `deploy_key` is the public key to put on the repository.
    pub async fn rotate_app_deploy_key(&self, name: &str) -> Result<App, Error> {
        self.json(Call::new(Method::POST, app_path(name, "/deploy-key")))
            .await
    }

    /// `GET /v1/apps/{name}/logs`: the newest MiB of the running app's own output.
    pub async fn app_logs(&self, name: &str) -> Result<String, Error> {
        self.plain_text(Call::new(Method::GET, app_path(name, "/logs")))
            .await
    }

    /// `GET /v1/apps/{name}/logs?follow=1`: the running app's output and everything it writes
    /// next; [`LogEvent::End`] (`stopped`) when its VM stops.
    pub async fn follow_app_logs(&self, name: &str) -> Result<AppLogStream, Error> {
        let call = Call::new(Method::GET, app_path(name, "/logs")).query("follow", "1");
        Ok(AppLogStream::new(self.send(call).await?))
    }

    /// Polls a deploy until it is no longer on its way (queued, cloning, building, baking,
    /// checking) and returns it (`live`, `failed`, `superseded`…: the caller decides what that
    /// means), or [`Error::Timeout`] after `timeout` (the deploy goes on on the server).
    pub async fn wait_for_deploy(
        &self,
        name: &str,
        id: &str,
        timeout: Duration,
    ) -> Result<Deploy, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let d = self.get_deploy(name, id).await?;
            if !d.state.active() {
                return Ok(d);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "deploy {id} of app {name} still {} after {}s",
                    d.state.as_str(),
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(DEPLOY_POLL.min(timeout)).await;
        }
    }

    /// Sends `call` and returns its body as text (lossy UTF-8).
    pub(crate) async fn plain_text(&self, call: Call<'_>) -> Result<String, Error> {
        let body = self.send(call).await?.bytes().await.map_err(Error::Http)?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `POST …/deploys` with a gzip body: like [`Client::send`] (auth, one `Idempotency-Key`,
    /// retries on 429/502/503 when the body can be sent again), with `application/gzip`.
    async fn upload_tarball(&self, name: &str, mut body: Upload) -> Result<Deploy, Error> {
        let path = app_path(name, "/deploys");
        let url = self.url(&path);
        let key = format!("cli-{}", hex::encode(rand::random::<[u8; 16]>()));
        let mut retry = 0;
        loop {
            let mut req = self
                .http
                .post(&url)
                .header(reqwest::header::CONTENT_TYPE, GZIP)
                .header("Idempotency-Key", &key);
            if let Some(k) = &self.config.api_key {
                req = req.bearer_auth(k);
            }
            let replayable = !matches!(body, Upload::Stream(_));
            req = match &mut body {
                Upload::Bytes(b) => req.body(b.clone()),
                Upload::File(p) => {
                    let f = tokio::fs::File::open(p.as_path())
                        .await
                        .map_err(|e| Error::io(format!("cannot open {}", p.display()), e))?;
                    let len = f
                        .metadata()
                        .await
                        .map_err(|e| Error::io(format!("cannot stat {}", p.display()), e))?
                        .len();
                    let stream = tokio_util::io::ReaderStream::with_capacity(f, 256 * 1024);
                    req.header(reqwest::header::CONTENT_LENGTH, len)
                        .body(reqwest::Body::wrap_stream(stream))
                }
                Upload::Stream(s) => match s.take() {
                    Some(s) => req.body(s),
                    None => return Err(Error::Config("the tarball stream was used up".into())),
                },
            };
            let resp = req
                .send()
                .await
                .map_err(|e| Error::transport(&self.config.base_url, e))?;
            let status = resp.status().as_u16();
            if resp.status().is_success() {
                let bytes = resp.bytes().await.map_err(Error::Http)?;
                return serde_json::from_slice(&bytes)
                    .map_err(|e| Error::decode(format!("POST {path}"), Some(e)));
            }
            let err = error_of(resp).await;
            let retryable = replayable && matches!(status, 429 | 502 | 503);
            if !retryable || retry + 1 >= self.retry.attempts {
                return Err(Error::Api(err));
            }
            tokio::time::sleep(self.retry.delay(retry, err.retry_after)).await;
            retry += 1;
        }
    }
}

/// What a tarball upload sends.
enum Upload {
    Bytes(bytes::Bytes),
    File(PathBuf),
    /// Taken by the first attempt.
    Stream(Option<reqwest::Body>),
}

/// An error answer as [`crate::ApiError`] (what `http::read_error` does for [`Client::send`]).
async fn error_of(resp: Response) -> crate::ApiError {
    let status = resp.status().as_u16();
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let request_id = header("x-request-id");
    let retry_after = header("retry-after").and_then(|v| v.trim().parse().ok());
    let body = resp.bytes().await.unwrap_or_default();
    api_error(status, request_id, retry_after, &body)
}

/// `/v1/apps/{name}{rest}`.
fn app_path(name: &str, rest: &str) -> String {
    format!("/v1/apps/{}{rest}", seg(name))
}

/// `/v1/apps/{name}/deploys/{id}{rest}`.
fn deploy_path(name: &str, id: &str, rest: &str) -> String {
    app_path(name, &format!("/deploys/{}{rest}", seg(id)))
}

/// A followed deploy log or app output; read it with [`AppLogStream::next`]: text chunks in
/// order ([`LogEvent::Log`]), then [`LogEvent::End`] with the reason.
#[derive(Debug)]
pub struct AppLogStream {
    resp: Response,
    decoder: SseDecoder,
    pending: VecDeque<LogEvent>,
}

impl AppLogStream {
    fn new(resp: Response) -> Self {
        Self {
            resp,
            decoder: SseDecoder::default(),
            pending: VecDeque::new(),
        }
    }

    /// The next event; `None` when the server closed the stream (after `End`, or early when
    /// the connection dropped).
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
