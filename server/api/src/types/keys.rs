//! API keys: `/api/keys`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::validate::Check;

/// An API key of the caller's tenant, as listed: never the key itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKey {
    pub id: Uuid,
    /// The first characters of the key (`ap_` and 8 more), to recognise it.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

/// A new API key: `key` is shown this once (the service keeps only its hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyCreated {
    pub id: Uuid,
    /// The key, for `Authorization: Bearer <key>`. It cannot be shown again.
    pub key: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeyPath {
    /// The key's id (from `GET /api/keys`).
    pub key_id: Uuid,
}

impl Check for KeyPath {}
