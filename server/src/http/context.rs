//! The server context every handler gets: the application, the cached
//! OpenAPI document, and the settings the contract's extractors read.

use std::time::Duration;

use serde_json::Value;

use crate::api::BodyReadTimeout;
use crate::app::App;

/// The server context of [`super::Impl`].
pub struct Ctx {
    pub app: App,
    pub spec: serde_json::Map<String, Value>,
    /// How long a request body may take to arrive (read by [`crate::api::JsonBody`]).
    pub body_read_timeout: Duration,
    /// The bounds of the WebSockets of `/v1/responses`.
    pub sockets: super::socket::Limits,
    /// Set when the server shuts down: WebSockets (which the HTTP server no
    /// longer tracks once upgraded) close then.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Whether `/console` serves the web console (`[server] console`).
    pub console: bool,
}

impl BodyReadTimeout for Ctx {
    fn body_read_timeout(&self) -> Duration {
        self.body_read_timeout
    }
}
