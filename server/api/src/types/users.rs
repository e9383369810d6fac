//! Users: `/api/users`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::common::{Metadata, NAME_PATTERN, PROJECT_PATTERN, double_option};
use crate::validate::Check;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserPath {
    /// The user's id.
    pub user_id: Uuid,
}
impl Check for UserPath {}

/// A user of the application built on the platform.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct User {
    pub id: Uuid,
    pub name: String,
    pub about: String,
    pub metadata: Option<Metadata>,
    pub project: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/users`: every field optional.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct CreateUserRequest {
    /// The user's name (at most 120 characters, Unicode letters first). Omitted or
    /// null means `""`; a name that is sent must match the pattern.
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    /// About the user (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// A project name: a letter, then letters, digits or `_` (1 to 255 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<String>,
}

/// Body of `PUT /api/users/{user_id}`: overwrites the user; omitted fields take their defaults.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct UpdateUserRequest {
    /// The user's name (at most 120 characters, Unicode letters first). Omitted or
    /// null means `""`; a name that is sent must match the pattern.
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    /// About the user (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// A project name: a letter, then letters, digits or `_` (1 to 255 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<String>,
}

/// Body of `PATCH /api/users/{user_id}`: only the fields sent change; `metadata` is merged key by key.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct PatchUserRequest {
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: Option<String>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<Option<String>>,
}

impl Check for CreateUserRequest {}
impl Check for UpdateUserRequest {}
impl Check for PatchUserRequest {}
