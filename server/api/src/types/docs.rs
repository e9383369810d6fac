//! Documents of agents and users: `/api/agents/{id}/docs`, `/api/users/{user_id}/docs`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::common::Metadata;
use crate::error::LocPart;
use crate::validate::{Check, Issues};

/// The most snippets one document may have.
pub const MAX_SNIPPETS: usize = 1000;

/// Whether a document belongs to an agent or to a user.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum OwnerRole {
    Agent,
    User,
}

/// The agent or user a document belongs to.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub struct DocOwner {
    pub id: Uuid,
    pub role: OwnerRole,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentDocPath {
    /// The agent's id.
    pub id: Uuid,
    /// The document's id.
    pub doc_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserDocPath {
    /// The user's id.
    pub user_id: Uuid,
    /// The document's id.
    pub doc_id: Uuid,
}

impl Check for AgentDocPath {}
impl Check for UserDocPath {}

/// A document of an agent or a user: a title and text snippets, searchable
/// by text, by vector and both.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Doc {
    pub id: Uuid,
    pub owner: DocOwner,
    pub title: String,
    /// The snippets, each searched (and found) on its own.
    pub content: Vec<String>,
    pub metadata: Option<Metadata>,
    /// One vector per snippet, or null when the document has none.
    pub embeddings: Option<Vec<Vec<f32>>>,
    pub created_at: DateTime<Utc>,
}

/// A document's text: one string, or a list of 1 to 1000 snippets; each at
/// most 100,000 characters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DocContent {
    One(#[schemars(length(max = 100000))] String),
    Many(#[schemars(length(min = 1, max = 1000), inner(length(max = 100000)))] Vec<String>),
}

impl DocContent {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            DocContent::One(s) => vec![s],
            DocContent::Many(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            DocContent::One(_) => 1,
            DocContent::Many(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Body of `POST /api/agents/{id}/docs` and `POST /api/users/{user_id}/docs`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateDocRequest {
    /// The title (1 to 800 characters).
    #[schemars(length(min = 1, max = 800))]
    pub title: String,
    /// A string, or a list of 1 to 1000 snippets (each at most 100,000
    /// characters); stored as a list.
    pub content: DocContent,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// One vector per snippet, all of one dimension: the dimension of the
    /// owner's other vectors, if it has any. When omitted and an embedding
    /// model is configured, the server computes them.
    #[serde(default)]
    #[schemars(inner(length(min = 1)))]
    pub embeddings: Option<Vec<Vec<f32>>>,
}

/// Reports vectors that cannot be compared (non-finite numbers) at `at`.
pub(crate) fn check_finite(vector: &[f32], at: &[LocPart], issues: &mut Issues) {
    if vector.iter().any(|x| !x.is_finite()) {
        issues.push(at, "finite_number", "Input should be a finite number (too large for a 32-bit float)");
    }
}

impl Check for CreateDocRequest {
    fn check(&self, issues: &mut Issues) {
        let Some(embeddings) = &self.embeddings else { return };
        let key = || LocPart::Key("embeddings".into());
        if embeddings.len() != self.content.len() {
            issues.push(
                &[key()],
                "value_error",
                format!(
                    "expected one vector per snippet: {} snippets but {} vectors",
                    self.content.len(),
                    embeddings.len()
                ),
            );
            return;
        }
        let dim = embeddings.first().map_or(0, Vec::len);
        for (i, v) in embeddings.iter().enumerate() {
            let at = [key(), LocPart::Index(i)];
            if v.len() != dim {
                issues.push(
                    &at,
                    "value_error",
                    format!(
                        "all vectors must have one dimension: vector {i} has {} but vector 0 has {dim}",
                        v.len()
                    ),
                );
            }
            check_finite(v, &at, issues);
        }
    }
}
