//! One owner's index: postings lists, snippet table, embeddings, scoring.
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

use super::rank::{Ranked, TopK};
use super::tokenize::tokenize;
use super::{DocEntry, Hit, Mode, Query, SearchError};
use crate::store::filter::metadata_matches;

/// BM25 term-frequency saturation.
pub(super) const K1: f64 = 1.2;
/// BM25 length normalisation.
pub(super) const B: f64 = 0.75;

/// Marks a dead slot / absent entry.
const NONE: u32 = u32::MAX;
/// Never compact for less garbage than this (amortises small churn).
const COMPACT_MIN_GARBAGE: usize = 1024;

/// BM25 idf, the always-positive variant: ln(1 + (N - df + 0.5) / (df + 0.5)).
pub(super) fn bm25_idf(live_snippets: usize, df: u32) -> f64 {
    let n = live_snippets as f64;
    let df = f64::from(df);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// The per-snippet length normalisation `k1 * (1 - b + b * dl / avgdl)`.
pub(super) fn bm25_norm(len: u32, avgdl: f64) -> f64 {
    K1 * (1.0 - B + B * f64::from(len) / avgdl)
}

/// One term's contribution to a snippet's BM25 score.
pub(super) fn bm25_term(idf: f64, tf: u32, norm: f64) -> f64 {
    let tf = f64::from(tf);
    idf * (tf * (K1 + 1.0)) / (tf + norm)
}

/// Scales `v` to unit length (a zero vector stays zero), so cosine
/// similarity is a plain dot product and never NaN.
pub(super) fn unit(v: &[f32]) -> Box<[f32]> {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return vec![0.0; v.len()].into();
    }
    v.iter().map(|&x| (f64::from(x) / norm) as f32).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    // Eight independent lanes so the compiler can vectorise; fixed order, so
    // the result is deterministic.
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut tail = 0f32;
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        tail += x * y;
    }
    for (x, y) in ca.zip(cb) {
        for ((lane, x), y) in lanes.iter_mut().zip(x).zip(y) {
            *lane += x * y;
        }
    }
    f64::from(lanes.iter().sum::<f32>() + tail)
}

/// `-0.0` → `0.0`, so that the total order on scores has no sign artefacts.
fn canonical(x: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x }
}

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
struct Posting {
    slot: u32,
    tf: u32,
}

/// Hot per-slot data, read for every posting while scoring.
#[derive(Clone, Copy)]
struct Slot {
    /// Index into `docs`, or `NONE` when the slot is a tombstone.
    doc: u32,
    /// Token count.
    len: u32,
}

/// Cold per-slot data.
struct SlotExtra {
    /// Distinct term ids, to maintain df on removal.
    terms: Box<[u32]>,
    /// Unit-length embedding.
    vector: Option<Box<[f32]>>,
}

struct DocRecord {
    id: Uuid,
    first_slot: u32,
    count: u32,
    metadata: Option<Map<String, Value>>,
}

/// Cursor over one query term's postings (document-at-a-time scoring).
struct Cursor<'a> {
    postings: &'a [Posting],
    pos: usize,
    idf: f64,
}

/// Remembers the filter verdict for the last doc seen; a doc's snippets are
/// consecutive slots, so this evaluates the filter about once per doc.
struct FilterCache<'f> {
    filter: Option<&'f Map<String, Value>>,
    doc: u32,
    verdict: bool,
}

impl<'f> FilterCache<'f> {
    fn new(filter: Option<&'f Map<String, Value>>) -> Self {
        Self { filter, doc: NONE, verdict: true }
    }
}

#[derive(Default)]
pub(super) struct OwnerIndex {
    term_ids: HashMap<String, u32>,
    /// By term id; each sorted by slot; may hold postings of dead slots.
    postings: Vec<Vec<Posting>>,
    /// Live document frequency by term id.
    df: Vec<u32>,
    slots: Vec<Slot>,
    extra: Vec<SlotExtra>,
    docs: Vec<Option<DocRecord>>,
    doc_lookup: HashMap<Uuid, u32>,
    live_snippets: usize,
    /// Sum of live snippet lengths (for avgdl).
    total_len: u64,
    live_vectors: usize,
    /// Dimension of the live vectors; `None` when there are none.
    dim: Option<usize>,
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

    fn locate(&self, slot: u32) -> (Uuid, usize) {
        let doc = self.slots[slot as usize].doc;
        match &self.docs[doc as usize] {
            Some(rec) => (rec.id, (slot - rec.first_slot) as usize),
            None => unreachable!("live slot {slot} points at removed doc {doc}"),
        }
    }

    fn passes(&self, cache: &mut FilterCache<'_>, slot: u32) -> bool {
        let Some(filter) = cache.filter else {
            return true;
        };
        let doc = self.slots[slot as usize].doc;
        if cache.doc != doc {
            let metadata = self.docs[doc as usize].as_ref().and_then(|rec| rec.metadata.as_ref());
            cache.doc = doc;
            cache.verdict = metadata_matches(filter, metadata);
        }
        cache.verdict
    }

    /// Query validation that depends on the owner: the vector dimension.
    /// `Ok(None)` when the owner has no vectors at all.
    fn query_vector(&self, vector: &[f32]) -> Result<Option<Box<[f32]>>, SearchError> {
        match self.dim {
            None => Ok(None),
            Some(expected) if expected != vector.len() => {
                Err(SearchError::DimensionMismatch { expected, got: vector.len() })
            }
            Some(_) => Ok(Some(unit(vector))),
        }
    }

    /// Runs a query that the caller has already validated (mode
    /// requirements, alpha, finite vector, non-zero limit).
    pub(super) fn search(&self, q: &Query) -> Result<Vec<Hit>, SearchError> {
        let filter = q.metadata_filter.as_ref().filter(|f| !f.is_empty());
        let text = q.text.as_deref().unwrap_or_default();
        let vector = q.vector.as_deref().unwrap_or_default();
        Ok(match q.mode {
            Mode::Text => self.search_text(text, filter, q.limit),
            Mode::Vector => match self.query_vector(vector)? {
                Some(unit) => self.search_vector(&unit, filter, q.limit),
                None => Vec::new(),
            },
            Mode::Hybrid => {
                let unit = self.query_vector(vector)?;
                self.search_hybrid(text, unit.as_deref(), q.alpha, filter, q.limit)
            }
        })
    }

    /// Cursors for the distinct known query terms, in term order (so the
    /// summation order, hence the exact score, does not depend on term ids).
    fn cursors(&self, text: &str) -> Vec<Cursor<'_>> {
        let mut terms = tokenize(text);
        terms.sort_unstable();
        terms.dedup();
        terms
            .iter()
            .filter_map(|term| {
                let id = *self.term_ids.get(term)? as usize;
                let df = self.df[id];
                (df > 0).then(|| Cursor {
                    postings: &self.postings[id],
                    pos: 0,
                    idf: bm25_idf(self.live_snippets, df),
                })
            })
            .collect()
    }

    /// Calls `f(slot, bm25)` for every live snippet containing at least one
    /// query term, in slot order (document-at-a-time merge of the postings).
    fn for_each_text_match(&self, text: &str, mut f: impl FnMut(u32, f64)) {
        let mut cursors = self.cursors(text);
        if cursors.is_empty() {
            return;
        }
        // df > 0 for every cursor, so there is at least one live snippet.
        let avgdl = self.total_len as f64 / self.live_snippets as f64;
        loop {
            let mut slot = NONE;
            for c in &cursors {
                if let Some(p) = c.postings.get(c.pos) {
                    slot = slot.min(p.slot);
                }
            }
            if slot == NONE {
                return;
            }
            let Slot { doc, len } = self.slots[slot as usize];
            let norm = bm25_norm(len, avgdl);
            let mut score = 0.0;
            for c in &mut cursors {
                if let Some(p) = c.postings.get(c.pos)
                    && p.slot == slot
                {
                    score += bm25_term(c.idf, p.tf, norm);
                    c.pos += 1;
                }
            }
            if doc != NONE {
                f(slot, score);
            }
        }
    }

    /// Calls `f(slot, cosine)` for every live snippet with an embedding.
    fn for_each_vector(&self, unit_query: &[f32], mut f: impl FnMut(u32, f64)) {
        for (slot, (s, e)) in self.slots.iter().zip(&self.extra).enumerate() {
            if s.doc == NONE {
                continue;
            }
            if let Some(v) = &e.vector {
                f(to_u32(slot), canonical(dot(unit_query, v)));
            }
        }
    }

    fn search_text(&self, text: &str, filter: Option<&Map<String, Value>>, limit: usize) -> Vec<Hit> {
        let mut top = TopK::new(limit);
        let mut cache = FilterCache::new(filter);
        self.for_each_text_match(text, |slot, score| {
            // Filter only candidates good enough to enter the top-k; the
            // filter does not depend on the score, so this is exact.
            if top.admits(score) && self.passes(&mut cache, slot) {
                top.push(self.ranked(slot, score, 0.0));
            }
        });
        top.into_hits()
    }

    fn search_vector(
        &self,
        unit_query: &[f32],
        filter: Option<&Map<String, Value>>,
        limit: usize,
    ) -> Vec<Hit> {
        let mut top = TopK::new(limit);
        let mut cache = FilterCache::new(filter);
        self.for_each_vector(unit_query, |slot, cosine| {
            if top.admits(cosine) && self.passes(&mut cache, slot) {
                top.push(self.ranked(slot, cosine, 0.0));
            }
        });
        top.into_hits()
    }

    /// Normalised weighted sum `alpha * vec_norm + (1 - alpha) * text_norm`.
    ///
    /// * `text_norm = bm25 / max_bm25` over the (filtered) text matches, so
    ///   every text match is in (0, 1];
    /// * `vec_norm = (cos - min_cos) / (max_cos - min_cos)` over the
    ///   (filtered) snippets with embeddings, in [0, 1] (all 1 when equal);
    /// * a candidate missing from one side gets 0 for that side.
    ///
    /// Equal fused scores are broken by the raw score of the side with the
    /// larger weight (missing = -inf), then doc id, then snippet index. Both
    /// normalisations are monotone and at alpha 0 (1) the fused score *is*
    /// the text (vector) norm, so alpha = 0 reproduces the Text order and
    /// alpha = 1 the Vector order exactly, with the other side's
    /// candidates after them.
    fn search_hybrid(
        &self,
        text: &str,
        unit_query: Option<&[f32]>,
        alpha: f64,
        filter: Option<&Map<String, Value>>,
        limit: usize,
    ) -> Vec<Hit> {
        let mut cache = FilterCache::new(filter);
        let mut text_hits = Vec::new();
        self.for_each_text_match(text, |slot, score| {
            if self.passes(&mut cache, slot) {
                text_hits.push((slot, score));
            }
        });
        let mut vector_hits = Vec::new();
        if let Some(unit_query) = unit_query {
            self.for_each_vector(unit_query, |slot, cosine| {
                if self.passes(&mut cache, slot) {
                    vector_hits.push((slot, cosine));
                }
            });
        }

        let max_text = text_hits.iter().map(|&(_, s)| s).fold(0.0, f64::max);
        let (min_vec, max_vec) = vector_hits
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &(_, c)| (lo.min(c), hi.max(c)));
        let text_norm = |s: f64| s / max_text;
        let vec_norm = |c: f64| {
            if max_vec > min_vec { (c - min_vec) / (max_vec - min_vec) } else { 1.0 }
        };
        let vector_leads = alpha > 0.5;

        let mut top = TopK::new(limit);
        let mut consider = |slot: u32, text: Option<f64>, vector: Option<f64>| {
            let t = text.map_or(0.0, text_norm);
            let v = vector.map_or(0.0, vec_norm);
            let fused = canonical(alpha * v + (1.0 - alpha) * t);
            let lead = if vector_leads { vector } else { text };
            let secondary = lead.unwrap_or(f64::NEG_INFINITY);
            if top.admits(fused) {
                top.push(self.ranked(slot, fused, secondary));
            }
        };
        // Merge-join the two slot-ordered candidate lists.
        let (mut ti, mut vi) = (0, 0);
        loop {
            match (text_hits.get(ti), vector_hits.get(vi)) {
                (None, None) => break,
                (Some(&(ts, t)), Some(&(vs, v))) if ts == vs => {
                    consider(ts, Some(t), Some(v));
                    ti += 1;
                    vi += 1;
                }
                (Some(&(ts, t)), Some(&(vs, _))) if ts < vs => {
                    consider(ts, Some(t), None);
                    ti += 1;
                }
                (Some(&(ts, t)), None) => {
                    consider(ts, Some(t), None);
                    ti += 1;
                }
                (_, Some(&(vs, v))) => {
                    consider(vs, None, Some(v));
                    vi += 1;
                }
            }
        }
        top.into_hits()
    }

    fn ranked(&self, slot: u32, primary: f64, secondary: f64) -> Ranked {
        let (doc_id, snippet_index) = self.locate(slot);
        Ranked { primary, secondary, doc_id, snippet_index }
    }
}

/// Slot, doc and term numbers are `u32`; `u32::MAX` is reserved.
fn to_u32(n: usize) -> u32 {
    match u32::try_from(n) {
        Ok(n) if n != NONE => n,
        _ => panic!("search index capacity exceeded ({n} entries in one owner)"),
    }
}
