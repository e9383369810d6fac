//! Search over agent and user documents: full-text (BM25), vector (cosine)
//! and hybrid, with metadata filtering.
//!
//! This module owns:
//! * text analysis — [`tokenize`]: Unicode word segmentation, lowercasing,
//!   accent folding (NFKD minus combining marks), English Snowball stemming;
//! * the index ([`SearchIndex`]), on tantivy (`index`): BM25 (k1 = 1.2,
//!   b = 0.75) whose corpus statistics (N, avgdl, df) are per owner, vectors
//!   compared by cosine similarity, on disk for a server (memory-mapped
//!   segments, opened rather than rebuilt at start) or in memory;
//! * hybrid fusion (normalised weighted sum), and metadata filters (what
//!   matches is defined once, in [`crate::metadata`]);
//! * the analysis and formulas that a database indexing documents itself
//!   uses too ([`analyse`], [`bm25_idf`], [`fuse_hits`], ...), so that every
//!   backend answers a query alike.
//!
//! Search knows nothing of the store: the store uses search (the PostgreSQL
//! store indexes documents with this analysis; the store's `DocSearch` is
//! answered by [`SearchIndex`] too), never the reverse.
//!
//! The store stays the truth: the domain ([`crate::app::docs`]) changes the
//! index after each committed create or delete, and at start brings an
//! opened index in step with the store (only the documents that differ are
//! indexed or removed). Every operation is scoped to one owner of one
//! tenant; nothing crosses owners. [`SearchIndex`] is `Send + Sync` and meant
//! to be shared in an `Arc`; text analysis ([`SearchIndex::prepare`]) can
//! happen before any lock is taken.

mod analysis;
mod ann;
mod directory;
mod index;
mod rank;
mod score;
#[cfg(test)]
mod tests;
mod tokenize;

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

pub use self::analysis::AnalysedSnippet;
pub use self::ann::GraphEvent;
pub use self::index::Ticket;

/// Owners with at least this many vectors get a vector graph by default
/// (see [`SearchIndex::set_vector_graph_min`]).
pub const DEFAULT_VECTOR_GRAPH_MIN: u64 = ann::DEFAULT_MIN_VECTORS;
use self::rank::{Ranked, TopK};
pub use self::tokenize::tokenize;

/// Whose documents: all search state is partitioned by this key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OwnerKey {
    pub tenant: Uuid,
    pub owner: Uuid,
}

/// A searchable document: several text snippets, optionally one embedding
/// per snippet (`embeddings[i]` belongs to `snippets[i]`), optional metadata.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DocEntry {
    pub id: Uuid,
    pub snippets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<Vec<Vec<f32>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// How a [`Query`] is scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// BM25 over the snippet text; needs [`Query::text`].
    Text,
    /// Cosine similarity to the snippet embeddings; needs [`Query::vector`].
    Vector,
    /// Weighted fusion of both; needs text and vector.
    Hybrid,
}

/// A search request. Use the constructors for the defaults (limit 10,
/// alpha 0.5, no filter); when deserialised, only `mode` is required.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Query {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub vector: Option<Vec<f32>>,
    pub mode: Mode,
    /// Maximum number of hits.
    #[serde(default = "Query::default_limit")]
    pub limit: usize,
    /// Hybrid only: weight of the vector side, in [0, 1].
    #[serde(default = "Query::default_alpha")]
    pub alpha: f64,
    /// Only docs whose metadata has every one of these top-level keys with
    /// an equal JSON value (numbers compare by value: `1 == 1.0`).
    #[serde(default)]
    pub metadata_filter: Option<Map<String, Value>>,
}

impl Query {
    pub const DEFAULT_LIMIT: usize = 10;
    pub const DEFAULT_ALPHA: f64 = 0.5;

    fn default_limit() -> usize {
        Self::DEFAULT_LIMIT
    }

    fn default_alpha() -> f64 {
        Self::DEFAULT_ALPHA
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            vector: None,
            mode: Mode::Text,
            limit: Self::DEFAULT_LIMIT,
            alpha: Self::DEFAULT_ALPHA,
            metadata_filter: None,
        }
    }

    pub fn vector(vector: Vec<f32>) -> Self {
        Self { text: None, vector: Some(vector), mode: Mode::Vector, ..Self::text("") }
    }

    pub fn hybrid(text: impl Into<String>, vector: Vec<f32>, alpha: f64) -> Self {
        Self { text: Some(text.into()), vector: Some(vector), mode: Mode::Hybrid, alpha, ..Self::text("") }
    }

    pub fn with_limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    pub fn with_filter(mut self, filter: Map<String, Value>) -> Self {
        self.metadata_filter = Some(filter);
        self
    }

    /// Owner-independent checks: the mode's text or vector is there, the
    /// vector is usable, alpha is within [0, 1].
    pub fn validate(&self) -> Result<(), SearchError> {
        let needs_text = matches!(self.mode, Mode::Text | Mode::Hybrid);
        let needs_vector = matches!(self.mode, Mode::Vector | Mode::Hybrid);
        if needs_text && self.text.is_none() {
            return Err(SearchError::MissingText);
        }
        if needs_vector {
            let vector = self.vector.as_deref().ok_or(SearchError::MissingVector)?;
            analysis::check_vector(vector)?;
        }
        if self.mode == Mode::Hybrid && !(0.0..=1.0).contains(&self.alpha) {
            return Err(SearchError::InvalidAlpha(self.alpha));
        }
        Ok(())
    }
}

/// One matching snippet. `score` is BM25 (Text), cosine similarity
/// (Vector) or the fused score in [0, 1] (Hybrid); higher is better.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    pub doc_id: Uuid,
    pub snippet_index: usize,
    pub score: f64,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SearchError {
    #[error("vector has dimension {got}, expected {expected}")]
    DimensionMismatch { expected: usize, got: usize },
    #[error("this search mode needs query text")]
    MissingText,
    #[error("this search mode needs a query vector")]
    MissingVector,
    #[error("alpha must be within [0, 1], got {0}")]
    InvalidAlpha(f64),
    #[error("vectors must be non-empty and contain only finite numbers")]
    InvalidVector,
    #[error("doc has {snippets} snippets but {embeddings} embeddings")]
    EmbeddingCountMismatch { snippets: usize, embeddings: usize },
    /// The index could not be read or written (its files): not the query's fault.
    #[error("the search index failed: {0}")]
    Index(String),
}

/// A doc analysed by [`SearchIndex::prepare`] or [`SearchIndex::prepare_strict`],
/// ready for [`SearchIndex::upsert_prepared`].
pub struct PreparedDoc {
    doc: analysis::AnalysedDoc,
    strict: bool,
}

/// One change of a [`SearchIndex::apply`] batch.
pub enum IndexChange {
    /// [`SearchIndex::upsert_prepared`].
    Upsert(OwnerKey, PreparedDoc),
    /// [`SearchIndex::remove_doc`].
    Remove(OwnerKey, Uuid),
    /// [`SearchIndex::remove_owner`].
    RemoveOwner(OwnerKey),
}

/// The search index of all owners. See the module docs.
pub struct SearchIndex {
    tantivy: index::TantivyIndex,
    /// Why the index was created empty when opened, if it was.
    fresh: Option<String>,
}

impl fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SearchIndex").finish_non_exhaustive()
    }
}

impl Default for SearchIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl SearchIndex {
    /// An empty index in memory.
    pub fn new() -> Self {
        Self::in_memory().expect("an index in memory opens")
    }

    fn in_memory() -> Result<Self, SearchError> {
        Ok(Self { tantivy: index::TantivyIndex::in_memory()?, fresh: Some("it is kept in memory".into()) })
    }

    /// The index kept in `dir` (created when missing). One that cannot be
    /// read, or was written by another version, is replaced by an empty one
    /// (see [`Self::fresh`]), which its owner fills from the store.
    pub fn open(dir: &Path) -> Result<Self, SearchError> {
        let (tantivy, fresh) = index::TantivyIndex::open(dir)?;
        Ok(Self { tantivy, fresh })
    }

    /// Stops writing and, on disk, makes the index durable and notes it
    /// closed cleanly (a later start trusts it even after a machine restart).
    pub fn close(&self) -> Result<(), SearchError> {
        self.tantivy.close()
    }

    /// Owners with at least `n` vectors (default 20,000) are searched
    /// through an approximate-nearest-neighbour graph kept on disk, built
    /// in the background; others, and an index in memory, exactly.
    pub fn set_vector_graph_min(&self, n: u64) {
        self.tantivy.set_graph_min_vectors(n);
    }

    /// Calls `report` whenever a vector graph is built or fails to build.
    pub fn on_vector_graph(&self, report: impl Fn(&GraphEvent) + Send + Sync + 'static) {
        self.tantivy.on_graph_event(std::sync::Arc::new(report));
    }

    /// Builds the owner's vector graph now from what is committed (the
    /// background builder does so by itself when a search needs one; a
    /// bench or an operator can use this to wait for it). Answers how many
    /// vectors it holds (0: none was built — no vectors, or an index in memory).
    pub fn build_vector_graph(&self, owner: OwnerKey) -> Result<u64, SearchError> {
        self.tantivy.build_graph(owner)?;
        Ok(self.tantivy.graph_of(owner).map_or(0, |(size, _)| size))
    }

    /// Why the index started empty (`None`: it was opened with its documents).
    pub fn fresh(&self) -> Option<&str> {
        self.fresh.as_deref()
    }

    /// Adds `doc`, replacing the owner's doc with the same id (if any).
    ///
    /// Lenient: embeddings that cannot be used — empty, non-finite, or of
    /// a dimension other than the owner's — are dropped (the snippet stays
    /// text-searchable); missing trailing embeddings mean "no embedding",
    /// extra ones are ignored. Use [`Self::try_upsert_doc`] to reject those.
    pub fn upsert_doc(&self, owner: OwnerKey, doc: DocEntry) -> Result<(), SearchError> {
        self.upsert_prepared(owner, Self::prepare(doc))
    }

    /// Like [`Self::upsert_doc`] but rejects, without changing anything, a
    /// doc whose embeddings are not one valid vector per snippet, all of the
    /// owner's dimension (the owner's dimension is free to change when the
    /// doc being replaced holds all of its vectors).
    pub fn try_upsert_doc(&self, owner: OwnerKey, doc: DocEntry) -> Result<(), SearchError> {
        self.upsert_prepared(owner, Self::prepare_strict(doc)?)
    }

    /// The expensive, lock-free half of [`Self::upsert_doc`]: tokenises the
    /// snippets and normalises the vectors. Lenient (see [`Self::upsert_doc`]).
    pub fn prepare(doc: DocEntry) -> PreparedDoc {
        PreparedDoc { doc: analysis::analyse(doc), strict: false }
    }

    /// What [`Self::prepare_strict`] rejects, without the text analysis:
    /// embeddings that are not one valid vector per snippet, all of one dimension.
    pub fn validate(doc: &DocEntry) -> Result<(), SearchError> {
        analysis::validate_doc(doc)
    }

    /// The lock-free half of [`Self::try_upsert_doc`]: rejects malformed
    /// embeddings now; the owner's dimension is checked at upsert.
    pub fn prepare_strict(doc: DocEntry) -> Result<PreparedDoc, SearchError> {
        Self::validate(&doc)?;
        Ok(PreparedDoc { doc: analysis::analyse(doc), strict: true })
    }

    /// Adds a prepared doc, replacing the owner's doc with the same id. A
    /// strict one is rejected, without any change, when its embeddings are
    /// not of the owner's dimension. Searchable once this returns.
    pub fn upsert_prepared(&self, owner: OwnerKey, doc: PreparedDoc) -> Result<(), SearchError> {
        self.one(IndexChange::Upsert(owner, doc))
    }

    /// Removes the doc; a no-op when it does not exist.
    pub fn remove_doc(&self, owner: OwnerKey, doc_id: Uuid) -> Result<(), SearchError> {
        self.one(IndexChange::Remove(owner, doc_id))
    }

    /// Forgets everything indexed for this owner.
    pub fn remove_owner(&self, owner: OwnerKey) -> Result<(), SearchError> {
        self.one(IndexChange::RemoveOwner(owner))
    }

    fn one(&self, change: IndexChange) -> Result<(), SearchError> {
        self.apply(vec![change])?.pop().unwrap_or(Ok(()))
    }

    /// Applies the changes in order, all searchable once this returns (one
    /// commit of the index: much cheaper than one per change). The outer
    /// error is the index's own (its files: nothing can be assumed applied);
    /// the inner ones say which strict upserts were refused. A batch names
    /// each doc at most once.
    pub fn apply(&self, changes: Vec<IndexChange>) -> Result<Vec<Result<(), SearchError>>, SearchError> {
        let (outcomes, ticket) = self.stage(changes)?;
        self.commit_through(ticket)?;
        Ok(outcomes)
    }

    /// The first half of [`Self::apply`]: the changes are in line, in order
    /// (the next change of the same doc sees them), but not searchable until
    /// [`Self::commit_through`] their ticket. Changes staged meanwhile by
    /// others share that commit.
    pub fn stage(
        &self,
        changes: Vec<IndexChange>,
    ) -> Result<(Vec<Result<(), SearchError>>, Ticket), SearchError> {
        self.tantivy.stage_changes(changes)
    }

    /// Returns once what was staged with `ticket` is committed and searchable.
    pub fn commit_through(&self, ticket: Ticket) -> Result<(), SearchError> {
        self.tantivy.commit_through(ticket)
    }

    /// Commits every change staged so far, the tail of added docs included
    /// (which searches see before a commit too, from memory; a commit is
    /// what a reopened index finds).
    pub fn flush(&self) -> Result<(), SearchError> {
        self.tantivy.flush()
    }

    #[cfg(test)]
    fn set_parallel_min_snippets(&self, n: u64) {
        self.tantivy.set_parallel_min_snippets(n);
    }

    #[cfg(test)]
    fn segments(&self) -> usize {
        self.tantivy.segments()
    }

    /// Dimension of this owner's embeddings; `None` while it has none.
    pub fn dimension(&self, owner: OwnerKey) -> Option<usize> {
        self.tantivy.stats(owner).dim
    }

    /// Number of indexed snippets of this owner.
    pub fn snippet_count(&self, owner: OwnerKey) -> usize {
        self.tantivy.stats(owner).snippets as usize
    }

    /// Number of indexed docs of this owner.
    pub fn doc_count(&self, owner: OwnerKey) -> usize {
        self.tantivy.stats(owner).docs as usize
    }

    /// Every indexed doc, with its owner.
    pub fn doc_keys(&self) -> Result<HashSet<(OwnerKey, Uuid)>, SearchError> {
        self.tantivy.doc_keys()
    }

    /// Best hits first, at most `q.limit`; equal scores ordered by doc id,
    /// then snippet index. Searching an owner with nothing indexed returns
    /// no hits (a query vector's dimension is only checked against an owner
    /// that has vectors).
    pub fn search(&self, owner: OwnerKey, q: &Query) -> Result<Vec<Hit>, SearchError> {
        q.validate()?;
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        self.tantivy.search(owner, q)
    }
}

/// BM25's term-frequency saturation and length normalisation, for a backend
/// that scores in a database: the same constants as the embedded store's index.
pub const BM25_K1: f64 = score::K1;
pub const BM25_B: f64 = score::B;

/// Analyses a doc's snippets for an index kept elsewhere (a database), with
/// the same analysis as the embedded store's index. Lenient, as [`SearchIndex::prepare`].
pub fn analyse(doc: DocEntry) -> Vec<AnalysedSnippet> {
    analysis::analyse(doc).snippets
}

/// A query's distinct terms, sorted: what BM25 sums over, in this order.
pub fn query_terms(text: &str) -> Vec<String> {
    let mut terms = tokenize(text);
    terms.sort_unstable();
    terms.dedup();
    terms
}

/// BM25 idf as the embedded store's index computes it.
pub fn bm25_idf(snippets: usize, df: u32) -> f64 {
    score::bm25_idf(snippets, df)
}

/// `v` scaled to unit length (a zero vector stays zero).
pub fn unit_vector(v: &[f32]) -> Box<[f32]> {
    score::unit(v)
}

/// Cosine similarity of two unit-length vectors, as the embedded store's index computes it.
pub fn cosine_of_units(a: &[f32], b: &[f32]) -> f64 {
    score::canonical(score::dot(a, b))
}

/// The `limit` best of `(doc, snippet index, score)` candidates, best first,
/// ties ordered as everywhere else (doc id, then snippet index).
pub fn top_hits(candidates: impl IntoIterator<Item = (Uuid, usize, f64)>, limit: usize) -> Vec<Hit> {
    let mut top = TopK::new(limit);
    for (doc_id, snippet_index, score) in candidates {
        if top.admits(score) {
            top.push(Ranked { primary: score, secondary: 0.0, doc_id, snippet_index });
        }
    }
    top.into_hits()
}

/// Hybrid fusion of `((doc, snippet index), raw score)` lists, each sorted
/// by `(doc, snippet index)` and already filtered: the embedded store's index's formula.
pub fn fuse_hits(
    text: &[((Uuid, usize), f64)],
    vector: &[((Uuid, usize), f64)],
    alpha: f64,
    limit: usize,
) -> Vec<Hit> {
    score::fuse(text, vector, alpha, limit, |key| key)
}
