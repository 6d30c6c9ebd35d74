//! Resources outside a single sandbox: snapshots, templates and API keys.

use pandastack_api_types::{CreateKeyRequest, CreatedKey, Key, List, Snapshot, Template};
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

    /// `GET /v1/keys`: the workspace's keys, never their secrets.
    pub async fn list_keys(&self) -> Result<Vec<Key>, Error> {
        let list: List<Key> = self.json(Call::new(Method::GET, "/v1/keys")).await?;
        Ok(list.data)
    }

    /// `POST /v1/keys`: the secret is in this answer only.
    pub async fn create_key(&self, name: &str) -> Result<CreatedKey, Error> {
        let body = CreateKeyRequest {
            name: name.to_owned(),
        };
        let call = Call::new(Method::POST, "/v1/keys")
            .payload(Payload::json(&body)?)
            .idempotent();
        self.json(call).await
    }

    /// `DELETE /v1/keys/{id}`.
    pub async fn revoke_key(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, format!("/v1/keys/{}", seg(id))))
            .await
    }
}
