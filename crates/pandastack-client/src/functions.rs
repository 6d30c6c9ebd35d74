//! Functions: create (with an `Idempotency-Key`), list (with cursors), get, update, delete;
//! versions (a new build, their list and state, their build log, a wait for one to leave the
//! building states), rollback to an earlier version, and invoke (a JSON or text event, the
//! outcome as data: the result, or the handler's error with its traceback), also queued
//! (`?async=1`, retried on the server, its outcome fetched by id).

use std::time::Duration;

use pandastack_api_types::{
    CreateFunctionRequest, CreateVersionRequest, Function, FunctionRollbackRequest,
    FunctionVersion, Invocation, List, UpdateFunctionRequest,
};
use reqwest::Method;
use serde::Serialize;

use crate::http::{seg, Call, Payload};
use crate::{Client, Error};

/// How often [`Client::wait_for_function_version`] asks about a version being built.
const VERSION_POLL: Duration = Duration::from_secs(1);

/// `/v1/functions/{name}{rest}`.
fn function_path(name: &str, rest: &str) -> String {
    format!("/v1/functions/{}{rest}", seg(name))
}

/// `/v1/functions/{name}/versions/{version}{rest}`.
fn version_path(name: &str, version: u64, rest: &str) -> String {
    function_path(name, &format!("/versions/{version}{rest}"))
}

impl Client {
    /// `POST /v1/functions`, with an `Idempotency-Key`. Its first version is built at once:
    /// follow it with [`Client::list_function_versions`] (newest first) and
    /// [`Client::wait_for_function_version`].
    pub async fn create_function(&self, req: &CreateFunctionRequest) -> Result<Function, Error> {
        self.create("/v1/functions", req).await
    }

    /// One page of `GET /v1/functions` (by name).
    pub async fn list_functions(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<Function>, Error> {
        self.page("/v1/functions", limit, cursor).await
    }

    /// Every function of the workspace, following `next_cursor` to the end.
    pub async fn list_all_functions(&self) -> Result<Vec<Function>, Error> {
        self.all(|cursor| async move { self.list_functions(None, cursor.as_deref()).await })
            .await
    }

    /// `GET /v1/functions/{name}`.
    pub async fn get_function(&self, name: &str) -> Result<Function, Error> {
        self.json(Call::new(Method::GET, function_path(name, "")))
            .await
    }

    /// `PATCH /v1/functions/{name}`: limits and visibility (no rebuild; the next instance and
    /// call use them).
    pub async fn update_function(
        &self,
        name: &str,
        req: &UpdateFunctionRequest,
    ) -> Result<Function, Error> {
        let call = Call::new(Method::PATCH, function_path(name, "")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `DELETE /v1/functions/{name}`: its instances, its versions' snapshots and logs.
    pub async fn delete_function(&self, name: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, function_path(name, "")))
            .await
    }

    /// `POST /v1/functions/{name}/versions`, with an `Idempotency-Key`: a new version (the
    /// fields given replace the function's; without files or git the previous source is built
    /// again), answered at once; it goes live once its handler imports (a version that fails
    /// leaves the live one serving). Follow it with [`Client::wait_for_function_version`].
    pub async fn create_function_version(
        &self,
        name: &str,
        req: &CreateVersionRequest,
    ) -> Result<FunctionVersion, Error> {
        self.create(function_path(name, "/versions"), req).await
    }

    /// One page of `GET /v1/functions/{name}/versions`, newest first.
    pub async fn list_function_versions(
        &self,
        name: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<FunctionVersion>, Error> {
        self.page(function_path(name, "/versions"), limit, cursor)
            .await
    }

    /// Every version of a function, newest first, following `next_cursor` to the end.
    pub async fn list_all_function_versions(
        &self,
        name: &str,
    ) -> Result<Vec<FunctionVersion>, Error> {
        self.all(|cursor| async move {
            self.list_function_versions(name, None, cursor.as_deref())
                .await
        })
        .await
    }

    /// `GET /v1/functions/{name}/versions/{version}`.
    pub async fn get_function_version(
        &self,
        name: &str,
        version: u64,
    ) -> Result<FunctionVersion, Error> {
        self.json(Call::new(Method::GET, version_path(name, version, "")))
            .await
    }

    /// `GET …/versions/{version}/logs`: the version's build log (fetch, install, the runtime's
    /// import of the handler, bake).
    pub async fn function_version_logs(&self, name: &str, version: u64) -> Result<String, Error> {
        self.plain_text(Call::new(Method::GET, version_path(name, version, "/logs")))
            .await
    }

    /// `POST /v1/functions/{name}/rollback`: version `version` (default: the one before the
    /// live one) is live again, nothing rebuilt; answered with that version.
    pub async fn rollback_function(
        &self,
        name: &str,
        req: &FunctionRollbackRequest,
    ) -> Result<FunctionVersion, Error> {
        let call =
            Call::new(Method::POST, function_path(name, "/rollback")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `POST /v1/functions/{name}/invoke` with `event` as JSON: calls the live version and
    /// answers with the outcome. A handler that raises or runs past the function's time limit
    /// is not an [`Error`]: it is the [`Invocation`]'s `status` (`error`, `timeout`) and
    /// `error`.
    pub async fn invoke_function<T: Serialize>(
        &self,
        name: &str,
        event: &T,
    ) -> Result<Invocation, Error> {
        self.invoke(name, Payload::json(event)?).await
    }

    /// Like [`Client::invoke_function`], the event a text (`text/plain`): the handler gets it
    /// as a string.
    pub async fn invoke_function_text(
        &self,
        name: &str,
        event: impl Into<String>,
    ) -> Result<Invocation, Error> {
        self.invoke(name, Payload::Text(event.into())).await
    }

    /// `POST /v1/functions/{name}/invoke?async=1` with `event` as JSON: the call is queued
    /// (answered 202 with the [`Invocation`] `queued` and its `id`), runs on the function's
    /// host even across a restart, and is tried again up to `retries` times (server default
    /// 2, at most 10) when it ends in `error` or `timeout`. Fetch its outcome with
    /// [`Client::get_function_invocation`].
    pub async fn invoke_function_async<T: Serialize>(
        &self,
        name: &str,
        event: &T,
        retries: Option<u32>,
    ) -> Result<Invocation, Error> {
        let mut call = Call::new(Method::POST, function_path(name, "/invoke"))
            .query("async", "1")
            .payload(Payload::json(event)?);
        if let Some(r) = retries {
            call = call.query("retries", r.to_string());
        }
        self.json(call).await
    }

    /// `GET /v1/functions/{name}/invocations/{id}`: a queued call, `queued` or `running` until
    /// it ends, then its outcome.
    pub async fn get_function_invocation(&self, name: &str, id: &str) -> Result<Invocation, Error> {
        let path = function_path(name, &format!("/invocations/{}", seg(id)));
        self.json(Call::new(Method::GET, path)).await
    }

    /// Polls a version until it is no longer being built (queued, cloning, building, baking,
    /// checking) and returns it (`live`, `failed`, `standby`…: the caller decides what that
    /// means), or [`Error::Timeout`] after `timeout` (the build goes on on the server).
    pub async fn wait_for_function_version(
        &self,
        name: &str,
        version: u64,
        timeout: Duration,
    ) -> Result<FunctionVersion, Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let v = self.get_function_version(name, version).await?;
            if !v.state.active() {
                return Ok(v);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Timeout(format!(
                    "version {version} of function {name} still {} after {}s",
                    v.state.as_str(),
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(VERSION_POLL.min(timeout)).await;
        }
    }

    async fn invoke(&self, name: &str, event: Payload) -> Result<Invocation, Error> {
        let call = Call::new(Method::POST, function_path(name, "/invoke")).payload(event);
        self.json(call).await
    }
}
