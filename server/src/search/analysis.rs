//! Analysis of documents before they are indexed: validation of their
//! embeddings, text analysis into terms with their frequencies, vectors
//! scaled to unit length. Keeping them searchable is [`super::index`]'s (or
//! a database's, which indexes the same analysis).

use serde_json::{Map, Value};
use uuid::Uuid;

use super::score::unit;
use super::tokenize::tokenize;
use super::{DocEntry, SearchError};

/// Rejects vectors that cannot be compared: empty or containing NaN/inf.
pub(super) fn check_vector(v: &[f32]) -> Result<(), SearchError> {
    if v.is_empty() || !v.iter().all(|x| x.is_finite()) { Err(SearchError::InvalidVector) } else { Ok(()) }
}

/// Whole-doc checks for the strict upsert path (no owner state needed).
pub(super) fn validate_doc(doc: &DocEntry) -> Result<(), SearchError> {
    let Some(embeddings) = &doc.embeddings else {
        return Ok(());
    };
    if embeddings.len() != doc.snippets.len() {
        return Err(SearchError::EmbeddingCountMismatch {
            snippets: doc.snippets.len(),
            embeddings: embeddings.len(),
        });
    }
    let mut dim = None;
    for v in embeddings {
        check_vector(v)?;
        match dim {
            None => dim = Some(v.len()),
            Some(expected) if expected != v.len() => {
                return Err(SearchError::DimensionMismatch { expected, got: v.len() });
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A doc analysed outside any lock: tokenised, term-counted, vectors
/// normalised. Invalid embeddings (empty, non-finite) are already dropped.
pub(super) struct AnalysedDoc {
    pub(super) id: Uuid,
    pub(super) metadata: Option<Map<String, Value>>,
    pub(super) snippets: Vec<AnalysedSnippet>,
}

/// One snippet as search sees it: its length in terms (BM25's document
/// length), its distinct terms (sorted) with their frequencies, and its
/// embedding scaled to unit length (`None` when it has none, or an unusable one).
#[derive(Clone, Debug, PartialEq)]
pub struct AnalysedSnippet {
    pub len: u32,
    pub terms: Vec<String>,
    /// `tfs[i]` is how often `terms[i]` occurs.
    pub tfs: Vec<u32>,
    pub vector: Option<Box<[f32]>>,
}

impl AnalysedSnippet {
    /// How often `term` occurs, if it does.
    pub(super) fn tf(&self, term: &str) -> Option<u32> {
        self.terms.binary_search_by(|t| t.as_str().cmp(term)).ok().map(|i| self.tfs[i])
    }
}

/// Analyses a doc (lenient: see [`super::SearchIndex::prepare`]).
pub(super) fn analyse(doc: DocEntry) -> AnalysedDoc {
    let mut embeddings = doc.embeddings.map(Vec::into_iter);
    let snippets = doc
        .snippets
        .iter()
        .map(|text| {
            let vector = embeddings
                .as_mut()
                .and_then(Iterator::next)
                .filter(|v| check_vector(v).is_ok())
                .map(|v| unit(&v));
            let mut tokens = tokenize(text);
            let len = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
            tokens.sort_unstable();
            let mut terms: Vec<String> = Vec::new();
            let mut tfs: Vec<u32> = Vec::new();
            for token in tokens {
                match (terms.last(), tfs.last_mut()) {
                    (Some(last), Some(tf)) if *last == token => *tf += 1,
                    _ => {
                        terms.push(token);
                        tfs.push(1);
                    }
                }
            }
            AnalysedSnippet { len, terms, tfs, vector }
        })
        .collect();
    AnalysedDoc { id: doc.id, metadata: doc.metadata, snippets }
}
