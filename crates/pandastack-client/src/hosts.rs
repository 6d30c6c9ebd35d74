//! The operator routes (an admin key): every host, drain and undrain, forgetting a dead host.

use pandastack_api_types::{Host, List};
use reqwest::Method;

use crate::http::{seg, Call};
use crate::{Client, Error};

impl Client {
    /// `GET /v1/hosts`: every host, by id.
    pub async fn list_hosts(&self) -> Result<Vec<Host>, Error> {
        let list: List<Host> = self.json(Call::new(Method::GET, "/v1/hosts")).await?;
        Ok(list.data)
    }

    /// `GET /v1/hosts/{id}`.
    pub async fn get_host(&self, id: &str) -> Result<Host, Error> {
        self.json(Call::new(Method::GET, host_path(id, ""))).await
    }

    /// `POST /v1/hosts/{id}/drain`: the host keeps what it runs and takes nothing new.
    pub async fn drain_host(&self, id: &str) -> Result<Host, Error> {
        self.json(Call::new(Method::POST, host_path(id, "/drain")))
            .await
    }

    /// `POST /v1/hosts/{id}/undrain`: the host takes work again.
    pub async fn undrain_host(&self, id: &str) -> Result<Host, Error> {
        self.json(Call::new(Method::POST, host_path(id, "/undrain")))
            .await
    }

    /// `DELETE /v1/hosts/{id}`: forgets a dead host nothing lives on any more.
    pub async fn forget_host(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, host_path(id, "")))
            .await
    }
}

fn host_path(id: &str, rest: &str) -> String {
    format!("/v1/hosts/{}{rest}", seg(id))
}
