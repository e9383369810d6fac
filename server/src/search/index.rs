//! Analysis of documents before they are indexed: validation of their
//! embeddings, text analysis into terms with their frequencies, vectors
//! scaled to unit length. Keeping them searchable is [`super::engine`]'s.

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
pub(super) struct PreparedDoc {
    pub(super) id: Uuid,
    pub(super) metadata: Option<Map<String, Value>>,
    pub(super) snippets: Vec<PreparedSnippet>,
}

pub(super) struct PreparedSnippet {
    /// Token count (BM25 document length).
    pub(super) len: u32,
    /// Distinct terms with their frequency, sorted by term.
    pub(super) terms: Vec<(String, u32)>,
    pub(super) vector: Option<Box<[f32]>>,
}

impl PreparedDoc {
    /// The snippets' analysis, for an index kept elsewhere (a database).
    pub(super) fn into_analysed(self) -> Vec<super::AnalysedSnippet> {
        self.snippets
            .into_iter()
            .map(|s| {
                let (terms, tfs) = s.terms.into_iter().unzip();
                super::AnalysedSnippet { len: s.len, terms, tfs, vector: s.vector }
            })
            .collect()
    }
}

pub(super) fn prepare(doc: DocEntry) -> PreparedDoc {
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
            let mut terms: Vec<(String, u32)> = Vec::new();
            for token in tokens {
                match terms.last_mut() {
                    Some((last, tf)) if *last == token => *tf += 1,
                    _ => terms.push((token, 1)),
                }
            }
            PreparedSnippet { len, terms, vector }
        })
        .collect();
    PreparedDoc { id: doc.id, metadata: doc.metadata, snippets }
}
