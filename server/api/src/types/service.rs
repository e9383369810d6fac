//! The service's own answers: `GET /api/healthz`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET /api/healthz`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `"ok"` (a store that cannot write answers 503 instead).
    pub status: String,
}
