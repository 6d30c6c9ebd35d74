//! Schedules (cron): create (with an `Idempotency-Key`), list, get, update, delete, pause,
//! resume, a manual run, and the run history.

use pandastack_api_types::{
    CreateScheduleRequest, List, Schedule, ScheduleRun, UpdateScheduleRequest,
};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::{Client, Error};

/// `/v1/schedules/{name}{rest}`.
fn schedule_path(name: &str, rest: &str) -> String {
    format!("/v1/schedules/{}{rest}", seg(name))
}

impl Client {
    /// `POST /v1/schedules`, with an `Idempotency-Key`.
    pub async fn create_schedule(&self, req: &CreateScheduleRequest) -> Result<Schedule, Error> {
        self.create("/v1/schedules", req).await
    }

    /// One page of `GET /v1/schedules` (by name).
    pub async fn list_schedules(
        &self,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<Schedule>, Error> {
        self.page("/v1/schedules", limit, cursor).await
    }

    /// Every schedule of the workspace, following `next_cursor` to the end.
    pub async fn list_all_schedules(&self) -> Result<Vec<Schedule>, Error> {
        self.all(|cursor| async move { self.list_schedules(None, cursor.as_deref()).await })
            .await
    }

    /// `GET /v1/schedules/{name}` (name or id).
    pub async fn get_schedule(&self, name: &str) -> Result<Schedule, Error> {
        self.json(Call::new(Method::GET, schedule_path(name, "")))
            .await
    }

    /// `PATCH /v1/schedules/{name}`.
    pub async fn update_schedule(
        &self,
        name: &str,
        req: &UpdateScheduleRequest,
    ) -> Result<Schedule, Error> {
        let call = Call::new(Method::PATCH, schedule_path(name, "")).payload(Payload::json(req)?);
        self.json(call).await
    }

    /// `DELETE /v1/schedules/{name}`: runs under way are cancelled.
    pub async fn delete_schedule(&self, name: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, schedule_path(name, "")))
            .await
    }

    /// `POST /v1/schedules/{name}/pause`.
    pub async fn pause_schedule(&self, name: &str) -> Result<Schedule, Error> {
        self.json(Call::new(Method::POST, schedule_path(name, "/pause")))
            .await
    }

    /// `POST /v1/schedules/{name}/resume`.
    pub async fn resume_schedule(&self, name: &str) -> Result<Schedule, Error> {
        self.json(Call::new(Method::POST, schedule_path(name, "/resume")))
            .await
    }

    /// `POST /v1/schedules/{name}/run`: a manual run, queued (or skipped under `forbid`).
    pub async fn run_schedule(&self, name: &str) -> Result<ScheduleRun, Error> {
        self.json(Call::new(Method::POST, schedule_path(name, "/run")))
            .await
    }

    /// One page of `GET /v1/schedules/{name}/runs` (newest due time first).
    pub async fn list_schedule_runs(
        &self,
        name: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<List<ScheduleRun>, Error> {
        self.page(schedule_path(name, "/runs"), limit, cursor).await
    }

    /// `GET /v1/schedules/{name}/runs/{id}`.
    pub async fn get_schedule_run(&self, name: &str, id: &str) -> Result<ScheduleRun, Error> {
        let path = schedule_path(name, &format!("/runs/{}", seg(id)));
        self.json(Call::new(Method::GET, path)).await
    }
}
