//! The service's own answers: `GET /api/healthz`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /api/healthz`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `"ok"` (a store that cannot write answers 503 instead).
    pub status: String,
    /// Whether document search answers yet. Everything else is served as soon
    /// as the server listens; searches wait for this to be `ready`.
    pub search: SearchStatus,
}

/// Where document search stands on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchStatus {
    /// Every stored document is searchable (always, on PostgreSQL).
    Ready,
    /// The embedded store's search index is being built after a start:
    /// searches (and chats with recall) answer 503 `search_warming` with
    /// `Retry-After` until it is ready.
    Warming,
    /// Building the index failed (the server's log says why): searches answer
    /// 503 `store_unavailable`.
    Failed,
}

/// The path of a web console asset, below `/console` (none: the page itself).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ConsolePath {
    /// The segments after `/console/`, e.g. `["app.js"]`.
    pub path: Vec<String>,
}
