//! Members of the workspace and its audit log.

use pandastack_api_types::{
    AuditEntry, CreateMemberRequest, List, Member, Role, UpdateMemberRequest,
};
use reqwest::Method;

use crate::http::{seg, Call, Payload};
use crate::{Client, Error};

/// What `GET /v1/audit` is narrowed to.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    pub key_id: Option<String>,
    pub resource_id: Option<String>,
    pub action: Option<String>,
    /// RFC 3339.
    pub since: Option<String>,
}

impl Client {
    /// `GET /v1/members`.
    pub async fn list_members(&self) -> Result<Vec<Member>, Error> {
        let list: List<Member> = self.json(Call::new(Method::GET, "/v1/members")).await?;
        Ok(list.data)
    }

    /// `POST /v1/members`.
    pub async fn create_member(
        &self,
        name: &str,
        email: &str,
        role: Role,
    ) -> Result<Member, Error> {
        let body = CreateMemberRequest {
            name: name.to_owned(),
            email: email.to_owned(),
            role,
        };
        let call = Call::new(Method::POST, "/v1/members")
            .payload(Payload::json(&body)?)
            .idempotent();
        self.json(call).await
    }

    /// `GET /v1/members/{id}`.
    pub async fn get_member(&self, id: &str) -> Result<Member, Error> {
        self.json(Call::new(Method::GET, member_path(id))).await
    }

    /// `PATCH /v1/members/{id}`.
    pub async fn update_member(
        &self,
        id: &str,
        body: &UpdateMemberRequest,
    ) -> Result<Member, Error> {
        let call = Call::new(Method::PATCH, member_path(id)).payload(Payload::json(body)?);
        self.json(call).await
    }

    /// `DELETE /v1/members/{id}`: their keys are revoked with them.
    pub async fn delete_member(&self, id: &str) -> Result<(), Error> {
        self.empty(Call::new(Method::DELETE, member_path(id))).await
    }

    /// `GET /v1/audit`: one page, newest first.
    pub async fn audit(&self, q: &AuditQuery) -> Result<List<AuditEntry>, Error> {
        let mut call = Call::new(Method::GET, "/v1/audit");
        if let Some(l) = q.limit {
            call = call.query("limit", l.to_string());
        }
        for (name, v) in [
            ("cursor", &q.cursor),
            ("key_id", &q.key_id),
            ("resource_id", &q.resource_id),
            ("action", &q.action),
            ("since", &q.since),
        ] {
            if let Some(v) = v {
                call = call.query(name, v);
            }
        }
        self.json(call).await
    }
}

fn member_path(id: &str) -> String {
    format!("/v1/members/{}", seg(id))
}
