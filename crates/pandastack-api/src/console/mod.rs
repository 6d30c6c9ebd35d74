//! The web console (issue #40), served by the API listener beside `/v1` and outside its route
//! table (so not in the OpenAPI document):
//!
//! - `GET /` is the single-page app and `/console/assets/<build>/…` its files, embedded in the
//!   binary at build time ([`assets`]): nothing is fetched at run time.
//! - `/console/session` signs a browser in with an API key and out again ([`session`]): the
//!   browser keeps an HttpOnly, SameSite=Strict cookie, never the key. [`crate::extract::Caller`]
//!   accepts that cookie on every `/v1` route as the key it stands for, with the CSRF and
//!   Origin checks of [`session::check_browser`].
//!
//! See `docs/console.md`.

mod assets;
pub(crate) mod session;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;

use crate::ApiState;

/// How long a console session lasts unless the operator says otherwise.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The operator's settings of the console.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// How long a sign-in lasts (`--console-session-hours`).
    pub session_ttl: Duration,
    /// The server's public base URL (`--public-url`): an `https://` one makes session cookies
    /// `Secure`, and its origin is accepted as the browser's `Origin` besides the `Host`.
    pub public_url: Option<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            session_ttl: DEFAULT_SESSION_TTL,
            public_url: None,
        }
    }
}

/// The console's routes: the app, its assets and the session.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/", get(assets::index))
        .route("/console/assets/{build}/{*path}", get(assets::asset))
        .route(
            "/console/session",
            get(session::current)
                .post(session::sign_in)
                .delete(session::sign_out),
        )
}
