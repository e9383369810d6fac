//! Search of an owner's documents: `/api/agents/{id}/search`, `/api/users/{user_id}/search`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::common::Metadata;
use super::docs::{DocOwner, check_finite};
use super::paging::{metadata_filter_object, parse_metadata_filter};
use crate::error::LocPart;
use crate::validate::{Check, Issues};

fn default_search_limit() -> i64 {
    10
}

fn default_alpha() -> f64 {
    0.5
}

/// How a search scores snippets.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// BM25 over the snippets' words.
    Text,
    /// Cosine similarity of the snippets' embeddings to the query vector.
    Vector,
    /// Both, fused: `alpha` × vector + (1 − `alpha`) × text, each normalised.
    Hybrid,
}

/// Query of `GET /api/agents/{id}/search` and `GET /api/users/{user_id}/search`: a text search.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct TextSearchParams {
    /// The words to look for (1 to 10,000 characters). The whole request line
    /// must stay under 64 KiB, URL-encoded (414 otherwise): search long texts with POST.
    #[schemars(length(min = 1, max = 10000))]
    pub text: String,
    /// How many snippets to answer at most (1 to 100).
    #[serde(default = "default_search_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i64,
    /// A JSON object, e.g. `{"lang":"en"}`: only documents whose metadata has
    /// every given top-level key with an equal value. Bounded as metadata is
    /// (at most 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<String>,
}

impl Check for TextSearchParams {
    fn check(&self, issues: &mut Issues) {
        parse_metadata_filter(self.metadata_filter.as_deref(), issues);
    }
}

/// Body of `POST /api/agents/{id}/search` and `POST /api/users/{user_id}/search`.
///
/// Give `text`, `vector` or both. The mode defaults from what is given: text
/// alone is a text search, a vector alone a vector search, both a hybrid one.
/// A vector or hybrid search without a vector embeds `text` with the embedding
/// model, and is a 400 when none is configured.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct SearchRequest {
    /// The words to look for (1 to 10,000 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 10000))]
    pub text: Option<String>,
    /// A query vector, of the dimension of the owner's embeddings.
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub vector: Option<Vec<f32>>,
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// How many snippets to answer at most (1 to 100).
    #[serde(default = "default_search_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i64,
    /// Hybrid only: the weight of the vector side, 0 to 1 (0 ranks as text search, 1 as vector search).
    #[serde(default = "default_alpha")]
    #[schemars(range(min = 0, max = 1))]
    pub alpha: f64,
    /// Only documents whose metadata has every given top-level key with an
    /// equal value. Bounded as metadata is (at most 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<Metadata>,
}

impl Check for SearchRequest {
    fn check(&self, issues: &mut Issues) {
        let key = |k: &str| [LocPart::Key(k.into())];
        if self.text.is_none() && self.vector.is_none() {
            issues.push(&[], "value_error", "give `text`, `vector` or both");
            return;
        }
        if self.text.is_none() && matches!(self.mode, Some(SearchMode::Text | SearchMode::Hybrid)) {
            issues.push(&key("text"), "missing", "Field required: a text or hybrid search needs `text`");
        }
        if let Some(v) = &self.vector {
            check_finite(v, &key("vector"), issues);
        }
    }
}

impl From<TextSearchParams> for SearchRequest {
    fn from(p: TextSearchParams) -> Self {
        let metadata_filter = metadata_filter_object(p.metadata_filter.as_deref()).map(Metadata);
        SearchRequest {
            text: Some(p.text),
            vector: None,
            mode: Some(SearchMode::Text),
            limit: p.limit,
            alpha: default_alpha(),
            metadata_filter,
        }
    }
}

/// The snippet a search found.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Snippet {
    /// Its position in the document's `content`.
    pub index: usize,
    pub content: String,
}

/// One search result: a snippet of a document.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DocReference {
    /// The document's id.
    pub id: Uuid,
    pub title: String,
    pub owner: DocOwner,
    pub snippet: Snippet,
    /// Higher is better: BM25 (text), cosine similarity (vector) or the fused score in 0..=1 (hybrid).
    pub score: f64,
    pub metadata: Option<Metadata>,
}

/// The answer of a search.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DocSearchResponse {
    /// The matching snippets, best first (one entry per snippet).
    pub docs: Vec<DocReference>,
    /// How long the search took, in seconds.
    pub time: f64,
}
