//! API keys: `/api/keys`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::paging::{Direction, Limit, Offset};
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

/// Paging of a tenant's keys: newest first unless asked (a key never changes,
/// so it has no `sort_by`, and it has no metadata to filter on).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct KeyListParams {
    /// How many keys to answer at most (1 to 1000): page on with
    /// `offset += len(items)` until a page comes back empty.
    #[serde(default)]
    pub limit: Limit,
    /// How many keys to skip first.
    #[serde(default)]
    pub offset: Offset,
    /// Newest first (`desc`, the default) or oldest first (`asc`).
    #[serde(default)]
    pub direction: Direction,
}

impl Check for KeyListParams {}
