//! The workspace's usage: against its limits, and metered over a window.

use pandastack_api_types::Usage;
use reqwest::Method;

use crate::http::Call;
use crate::{Client, Error};

/// The window and grouping of a usage query (each `None`: the server's default).
#[derive(Debug, Clone, Default)]
pub struct UsageQuery {
    /// RFC 3339.
    pub from: Option<String>,
    /// RFC 3339.
    pub to: Option<String>,
    /// `none`, or a comma list of `kind`, `resource`, `day`, `hour`.
    pub group_by: Option<String>,
}

impl UsageQuery {
    fn call(&self) -> Call<'static> {
        let mut c = Call::new(Method::GET, "/v1/usage");
        for (k, v) in [
            ("from", &self.from),
            ("to", &self.to),
            ("group_by", &self.group_by),
        ] {
            if let Some(v) = v {
                c = c.query(k, v.clone());
            }
        }
        c
    }
}

impl Client {
    /// `GET /v1/usage`: limits and what the workspace holds, and its metered usage.
    pub async fn usage(&self, q: &UsageQuery) -> Result<Usage, Error> {
        self.json(q.call()).await
    }

    /// `GET /v1/usage?format=csv`: the metered part as CSV text.
    pub async fn usage_csv(&self, q: &UsageQuery) -> Result<String, Error> {
        let resp = self.send(q.call().query("format", "csv")).await?;
        resp.text().await.map_err(Error::Http)
    }
}
