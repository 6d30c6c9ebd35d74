//! Resources outside a single sandbox: snapshots, templates and API keys.

use std::path::Path;

use pandastack_api_types::{
    CreateKeyRequest, CreateTemplateRequest, CreatedKey, Key, List, OciTemplateParams, Snapshot,
    Template,
};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::{Client, Error};

impl Client {
    /// `GET /v1/snapshots`, every page.
    pub async fn list_snapshots(&self) -> Result<Vec<Snapshot>, Error> {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut call = Call::new(Method::GET, "/v1/snapshots");
            if let Some(c) = cursor.take() {
                call = call.query("cursor", c);
            }
            let page: List<Snapshot> = self.json(call).await?;
            all.extend(page.data);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(all),
            }
        }
    }

    /// `DELETE /v1/snapshots/{id}`.
    pub async fn delete_snapshot(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(
            Method::DELETE,
            format!("/v1/snapshots/{}", seg(id)),
        ))
        .await
    }

    /// `GET /v1/templates`.
    pub async fn list_templates(&self) -> Result<Vec<Template>, Error> {
        let list: List<Template> = self.json(Call::new(Method::GET, "/v1/templates")).await?;
        Ok(list.data)
    }

    /// `GET /v1/templates/{name}`.
    pub async fn get_template(&self, name: &str) -> Result<Template, Error> {
        self.json(Call::new(
            Method::GET,
            format!("/v1/templates/{}", seg(name)),
        ))
        .await
    }

    /// `POST /v1/templates` with a spec (TOML text); the build runs on the server.
    pub async fn build_template_from_spec(
        &self,
        name: Option<&str>,
        spec: &str,
    ) -> Result<Template, Error> {
        let body = CreateTemplateRequest {
            name: name.map(str::to_owned),
            spec: spec.to_owned(),
        };
        let call = Call::new(Method::POST, "/v1/templates").payload(Payload::json(&body)?);
        self.json(call).await
    }

    /// `POST /v1/templates` with an OCI image layout or `docker save` tarball, streamed.
    pub async fn build_template_from_tarball(
        &self,
        params: &OciTemplateParams,
        tarball: &Path,
    ) -> Result<Template, Error> {
        let mut call = Call::new(Method::POST, "/v1/templates")
            .query("name", params.name.clone())
            .payload(Payload::File(tarball.to_owned()));
        if let Some(v) = params.cpu {
            call = call.query("cpu", v.to_string());
        }
        if let Some(v) = params.memory_mb {
            call = call.query("memory_mb", v.to_string());
        }
        if let Some(v) = params.disk_mb {
            call = call.query("disk_mb", v.to_string());
        }
        if let Some(v) = &params.description {
            call = call.query("description", v.clone());
        }
        self.json(call).await
    }

    /// `GET /v1/templates/{name}/logs`: the newest build's log so far.
    pub async fn template_log(&self, name: &str) -> Result<String, Error> {
        let resp = self
            .send(Call::new(
                Method::GET,
                format!("/v1/templates/{}/logs", seg(name)),
            ))
            .await?;
        let body = resp.bytes().await.map_err(Error::Http)?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// `POST /v1/templates/{name}/bake`.
    pub async fn bake_template(&self, name: &str) -> Result<Template, Error> {
        self.json(Call::new(
            Method::POST,
            format!("/v1/templates/{}/bake", seg(name)),
        ))
        .await
    }

    /// `DELETE /v1/templates/{name}`.
    pub async fn delete_template(&self, name: &str) -> Result<(), Error> {
        self.empty(Call::new(
            Method::DELETE,
            format!("/v1/templates/{}", seg(name)),
        ))
        .await
    }

    /// `GET /v1/keys`: the workspace's keys, never their secrets.
    pub async fn list_keys(&self) -> Result<Vec<Key>, Error> {
        let list: List<Key> = self.json(Call::new(Method::GET, "/v1/keys")).await?;
        Ok(list.data)
    }

    /// `POST /v1/keys`: the secret is in this answer only. The key may do what the calling
    /// key may, and expires with it.
    pub async fn create_key(&self, name: &str) -> Result<CreatedKey, Error> {
        self.create_key_with(&CreateKeyRequest {
            name: name.to_owned(),
            ..Default::default()
        })
        .await
    }

    /// `POST /v1/keys` with scopes and an expiry (see [`CreateKeyRequest`]).
    pub async fn create_key_with(&self, body: &CreateKeyRequest) -> Result<CreatedKey, Error> {
        let call = Call::new(Method::POST, "/v1/keys")
            .payload(Payload::json(body)?)
            .idempotent();
        self.json(call).await
    }

    /// `DELETE /v1/keys/{id}`.
    pub async fn revoke_key(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, format!("/v1/keys/{}", seg(id))))
            .await
    }
}
