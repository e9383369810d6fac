//! Secrets of a tenant: `/api/secrets`. A value is written, never read back
//! through the API; tools refer to it as `{{ secrets.NAME }}`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::paging::{Direction, Limit, Offset, SortBy};
use crate::error::LocPart;
use crate::validate::{Check, Issues};

/// A secret's name: what an environment variable's name may be (a letter or
/// `_`, then letters, digits or `_`).
pub const SECRET_NAME_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";
/// The most bytes (UTF-8) a secret's value may have.
pub const SECRET_VALUE_MAX_BYTES: usize = 8192;

/// A secret of the caller's tenant, as answered: never its value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Secret {
    /// Unique within the tenant.
    pub name: String,
    pub description: String,
    pub created_at: DateTime<Utc>,
    /// When the value or the description was last set.
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/secrets`.
#[derive(Clone, Deserialize, JsonSchema)]
pub struct CreateSecretRequest {
    /// The secret's name, unique within the tenant (1 to 64 characters: a
    /// letter or `_`, then letters, digits or `_`, as an environment variable's).
    #[schemars(length(min = 1, max = 64), regex(path = "SECRET_NAME_PATTERN"))]
    pub name: String,
    /// The value: 1 to 8192 bytes of text. Stored encrypted; never answered.
    #[schemars(length(min = 1, max = 8192))]
    pub value: String,
    /// What the secret is for (at most 1,000 characters).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub description: String,
}

/// Body of `PUT /api/secrets/{name}`: a new value (and description) for a
/// secret that exists. PUT overwrites: an omitted description becomes `""`.
#[derive(Clone, Deserialize, JsonSchema)]
pub struct UpdateSecretRequest {
    /// The new value: 1 to 8192 bytes of text. Stored encrypted; never answered.
    #[schemars(length(min = 1, max = 8192))]
    pub value: String,
    /// What the secret is for (at most 1,000 characters).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub description: String,
}

// No `Debug` on the requests: a value must not reach a log through `{:?}`.

/// The schema counts characters; the bound is in bytes.
fn check_value_bytes(value: &str, issues: &mut Issues) {
    if value.len() > SECRET_VALUE_MAX_BYTES {
        issues.push(
            &[LocPart::Key("value".into())],
            "string_too_long",
            format!("String should have at most {SECRET_VALUE_MAX_BYTES} bytes (UTF-8)"),
        );
    }
}

impl Check for CreateSecretRequest {
    fn check(&self, issues: &mut Issues) {
        check_value_bytes(&self.value, issues);
    }
}

impl Check for UpdateSecretRequest {
    fn check(&self, issues: &mut Issues) {
        check_value_bytes(&self.value, issues);
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SecretPath {
    /// The secret's name.
    #[schemars(length(min = 1, max = 64), regex(path = "SECRET_NAME_PATTERN"))]
    pub name: String,
}

impl Check for SecretPath {}

/// Paging and order of a tenant's secrets (a secret has no metadata to filter on).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct SecretListParams {
    /// How many secrets to answer at most (1 to 1000): page on with
    /// `offset += len(items)` until a page comes back empty.
    #[serde(default)]
    pub limit: Limit,
    /// How many secrets to skip first.
    #[serde(default)]
    pub offset: Offset,
    /// The timestamp to order by.
    #[serde(default)]
    pub sort_by: SortBy,
    /// Newest first (`desc`, the default) or oldest first (`asc`).
    #[serde(default)]
    pub direction: Direction,
}

impl Check for SecretListParams {}
