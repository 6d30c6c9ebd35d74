//! Pages of lists: `?limit=` (1 to 1000, default 100) and `?cursor=` (the `next_cursor` of the
//! previous page) in, `next_cursor` out. Stores fetch one row more than the limit, which says
//! whether another page follows.

use std::collections::BTreeMap;

use pandastack_api_types::{Cursor, ErrorCode};

use crate::error::{ApiError, ApiResult};

/// `?limit=` of a list request: 1 to `max`, `default` when absent.
pub(crate) fn limit(q: &BTreeMap<String, String>, default: u32, max: u32) -> ApiResult<u32> {
    q.get("limit")
        .map(|l| l.parse::<u32>().ok().filter(|l| (1..=max).contains(l)))
        .unwrap_or(Some(default))
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidArgument, format!("limit: 1 to {max}")))
}

/// The query of every paged list: its two parameters as the OpenAPI document names them
/// (`params(PageQuery, …)` on a list operation). Handlers read them with [`Page::of`].
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Only its documentation is used: the query is read by `Page::of`.
pub(crate) struct PageQuery {
    /// 1 to 1000 (default 100)
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page
    cursor: Option<String>,
}

/// The page a list request asks for.
pub(crate) struct Page {
    pub limit: u32,
    /// Where the previous page ended.
    pub after: Option<Cursor>,
}

impl Page {
    pub fn of(q: &BTreeMap<String, String>) -> ApiResult<Self> {
        let limit = limit(q, 100, 1000)?;
        let after = q
            .get("cursor")
            .map(|c| Cursor::decode(c))
            .transpose()
            .map_err(|e| ApiError::new(ErrorCode::InvalidArgument, e.to_string()))?;
        Ok(Self { limit, after })
    }

    /// Cuts `rows` (at most one more than the limit) to this page and returns the cursor of
    /// the next one (`key` of the page's last row), if there is a next one.
    pub fn cut<T>(&self, rows: &mut Vec<T>, key: impl Fn(&T) -> Cursor) -> Option<String> {
        if rows.len() <= self.limit as usize {
            return None;
        }
        rows.truncate(self.limit as usize);
        rows.last().map(|r| key(r).encode())
    }
}
