//! One owner's index and its upkeep: adding, replacing and removing docs
//! (postings lists, snippet table, embeddings, BM25 statistics) and
//! compaction. Searching it is `score`'s.
//!
//! Layout. Every snippet gets a *slot* (a dense `u32`); a doc's snippets
//! occupy consecutive slots, so `snippet_index = slot - doc.first_slot`.
//! Slots are only ever appended, which keeps every postings list sorted by
//! slot for free. Removing a doc turns its slots into tombstones (skipped
//! while scoring) and updates the BM25 statistics (N, total length, df)
//! immediately; once tombstones outnumber live entries the whole owner index
//! is compacted (slots, docs and terms renumbered, dead postings dropped).

use std::collections::HashMap;

use serde_json::{Map, Value};
use uuid::Uuid;

use super::score::unit;
use super::tokenize::tokenize;
use super::{DocEntry, SearchError};

/// Marks a dead slot / absent entry.
pub(super) const NONE: u32 = u32::MAX;
/// Never compact for less garbage than this (amortises small churn).
const COMPACT_MIN_GARBAGE: usize = 1024;

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
    id: Uuid,
    metadata: Option<Map<String, Value>>,
    snippets: Vec<PreparedSnippet>,
}

struct PreparedSnippet {
    /// Token count (BM25 document length).
    len: u32,
    /// Distinct terms with their frequency, sorted by term.
    terms: Vec<(String, u32)>,
    vector: Option<Box<[f32]>>,
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

#[derive(Clone, Copy)]
pub(super) struct Posting {
    pub(super) slot: u32,
    pub(super) tf: u32,
}

/// Hot per-slot data, read for every posting while scoring.
#[derive(Clone, Copy)]
pub(super) struct Slot {
    /// Index into `docs`, or `NONE` when the slot is a tombstone.
    pub(super) doc: u32,
    /// Token count.
    pub(super) len: u32,
}

/// Cold per-slot data.
pub(super) struct SlotExtra {
    /// Distinct term ids, to maintain df on removal.
    terms: Box<[u32]>,
    /// Unit-length embedding.
    pub(super) vector: Option<Box<[f32]>>,
}

pub(super) struct DocRecord {
    pub(super) id: Uuid,
    pub(super) first_slot: u32,
    count: u32,
    pub(super) metadata: Option<Map<String, Value>>,
}

#[derive(Default)]
pub(super) struct OwnerIndex {
    pub(super) term_ids: HashMap<String, u32>,
    /// By term id; each sorted by slot; may hold postings of dead slots.
    pub(super) postings: Vec<Vec<Posting>>,
    /// Live document frequency by term id.
    pub(super) df: Vec<u32>,
    pub(super) slots: Vec<Slot>,
    pub(super) extra: Vec<SlotExtra>,
    pub(super) docs: Vec<Option<DocRecord>>,
    doc_lookup: HashMap<Uuid, u32>,
    pub(super) live_snippets: usize,
    /// Sum of live snippet lengths (for avgdl).
    pub(super) total_len: u64,
    live_vectors: usize,
    /// Dimension of the live vectors; `None` when there are none.
    pub(super) dim: Option<usize>,
    dead_slots: usize,
    dead_docs: usize,
}

impl OwnerIndex {
    pub(super) fn snippet_count(&self) -> usize {
        self.live_snippets
    }

    pub(super) fn doc_count(&self) -> usize {
        self.doc_lookup.len()
    }

    pub(super) fn dimension(&self) -> Option<usize> {
        self.dim
    }

    pub(super) fn is_empty(&self) -> bool {
        self.doc_lookup.is_empty()
    }

    #[cfg(test)]
    pub(super) fn allocated_slots(&self) -> usize {
        self.slots.len()
    }

    /// Inserts `doc`, replacing any doc with the same id.
    ///
    /// An embedding whose dimension differs from the owner's (as it will be
    /// once the replaced version is gone; else from the doc's first
    /// embedding) is an error when `strict`, otherwise it is dropped and the
    /// snippet stays text-searchable. Nothing changes on error.
    pub(super) fn upsert(&mut self, mut doc: PreparedDoc, strict: bool) -> Result<(), SearchError> {
        let old = self.doc_lookup.get(&doc.id).copied();
        let old_vectors = old.map_or(0, |d| self.doc_vector_count(d));
        let mut dim = if self.live_vectors > old_vectors { self.dim } else { None };
        for snippet in &mut doc.snippets {
            let Some(vector) = &snippet.vector else {
                continue;
            };
            match dim {
                None => dim = Some(vector.len()),
                Some(expected) if expected != vector.len() => {
                    if strict {
                        return Err(SearchError::DimensionMismatch { expected, got: vector.len() });
                    }
                    snippet.vector = None;
                }
                Some(_) => {}
            }
        }

        // Capacity checks before anything is mutated.
        let doc_index = to_u32(self.docs.len());
        let first_slot = to_u32(self.slots.len());
        let count = to_u32(doc.snippets.len());
        to_u32(self.slots.len() + doc.snippets.len());

        if let Some(old) = old {
            self.remove_doc_at(old);
        }
        // Removal never shrinks `docs`/`slots` (only compaction does).
        for snippet in doc.snippets {
            let slot = to_u32(self.slots.len());
            let mut term_ids = Vec::with_capacity(snippet.terms.len());
            for (term, tf) in snippet.terms {
                let id = self.intern(term);
                self.postings[id as usize].push(Posting { slot, tf });
                self.df[id as usize] += 1;
                term_ids.push(id);
            }
            if snippet.vector.is_some() {
                self.live_vectors += 1;
            }
            self.total_len += u64::from(snippet.len);
            self.slots.push(Slot { doc: doc_index, len: snippet.len });
            self.extra.push(SlotExtra { terms: term_ids.into(), vector: snippet.vector });
        }
        self.live_snippets += count as usize;
        self.docs.push(Some(DocRecord { id: doc.id, first_slot, count, metadata: doc.metadata }));
        self.doc_lookup.insert(doc.id, doc_index);
        self.dim = if self.live_vectors > 0 { dim } else { None };
        self.maybe_compact();
        Ok(())
    }

    pub(super) fn remove(&mut self, doc_id: Uuid) {
        if let Some(doc) = self.doc_lookup.get(&doc_id).copied() {
            self.remove_doc_at(doc);
            self.maybe_compact();
        }
    }

    fn intern(&mut self, term: String) -> u32 {
        let postings = &mut self.postings;
        let df = &mut self.df;
        *self.term_ids.entry(term).or_insert_with(|| {
            postings.push(Vec::new());
            df.push(0);
            to_u32(postings.len() - 1)
        })
    }

    fn doc_vector_count(&self, doc: u32) -> usize {
        self.docs[doc as usize].as_ref().map_or(0, |rec| {
            let range = rec.first_slot as usize..(rec.first_slot + rec.count) as usize;
            self.extra[range].iter().filter(|e| e.vector.is_some()).count()
        })
    }

    fn remove_doc_at(&mut self, doc: u32) {
        let Some(rec) = self.docs[doc as usize].take() else {
            return;
        };
        self.doc_lookup.remove(&rec.id);
        for slot in rec.first_slot..rec.first_slot + rec.count {
            let slot = slot as usize;
            self.slots[slot].doc = NONE;
            self.total_len -= u64::from(self.slots[slot].len);
            let extra = &mut self.extra[slot];
            for &term in extra.terms.iter() {
                self.df[term as usize] -= 1;
            }
            extra.terms = Box::default();
            if extra.vector.take().is_some() {
                self.live_vectors -= 1;
            }
        }
        self.live_snippets -= rec.count as usize;
        self.dead_slots += rec.count as usize;
        self.dead_docs += 1;
        if self.live_vectors == 0 {
            self.dim = None;
        }
    }

    fn maybe_compact(&mut self) {
        let garbage = self.dead_slots + self.dead_docs;
        if garbage >= COMPACT_MIN_GARBAGE && garbage >= self.live_snippets + self.doc_lookup.len() {
            self.compact();
        }
    }

    /// Drops tombstones and unused terms, renumbering slots, docs and terms.
    /// Relative slot order is preserved, so postings stay sorted.
    fn compact(&mut self) {
        let mut doc_map = vec![NONE; self.docs.len()];
        let mut docs = Vec::with_capacity(self.doc_lookup.len());
        for (old, rec) in self.docs.drain(..).enumerate() {
            if let Some(rec) = rec {
                doc_map[old] = to_u32(docs.len());
                docs.push(Some(rec));
            }
        }

        let mut term_map = vec![NONE; self.df.len()];
        let mut df = Vec::new();
        for (old, &count) in self.df.iter().enumerate() {
            if count > 0 {
                term_map[old] = to_u32(df.len());
                df.push(count);
            }
        }

        let mut slot_map = vec![NONE; self.slots.len()];
        let mut slots = Vec::with_capacity(self.live_snippets);
        let mut extra = Vec::with_capacity(self.live_snippets);
        for (old, (slot, slot_extra)) in self.slots.drain(..).zip(self.extra.drain(..)).enumerate() {
            if slot.doc == NONE {
                continue;
            }
            slot_map[old] = to_u32(slots.len());
            slots.push(Slot { doc: doc_map[slot.doc as usize], len: slot.len });
            extra.push(SlotExtra {
                terms: slot_extra.terms.iter().map(|&t| term_map[t as usize]).collect(),
                vector: slot_extra.vector,
            });
        }

        for rec in docs.iter_mut().flatten() {
            rec.first_slot = if rec.count == 0 { 0 } else { slot_map[rec.first_slot as usize] };
        }

        let mut postings = Vec::with_capacity(df.len());
        for (old, mut list) in self.postings.drain(..).enumerate() {
            if term_map[old] == NONE {
                continue;
            }
            list.retain_mut(|p| {
                p.slot = slot_map[p.slot as usize];
                p.slot != NONE
            });
            list.shrink_to_fit();
            postings.push(list);
        }

        self.term_ids.retain(|_, id| {
            *id = term_map[*id as usize];
            *id != NONE
        });
        self.doc_lookup = docs.iter().flatten().enumerate().map(|(i, rec)| (rec.id, to_u32(i))).collect();
        self.docs = docs;
        self.slots = slots;
        self.extra = extra;
        self.postings = postings;
        self.df = df;
        self.dead_slots = 0;
        self.dead_docs = 0;
    }
}

/// Slot, doc and term numbers are `u32`; `u32::MAX` is reserved.
pub(super) fn to_u32(n: usize) -> u32 {
    match u32::try_from(n) {
        Ok(n) if n != NONE => n,
        _ => panic!("search index capacity exceeded ({n} entries in one owner)"),
    }
}
