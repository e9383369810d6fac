//! Scoring one owner's index: BM25 over the postings (document at a time),
//! cosine similarity over the unit-length embeddings, hybrid fusion of the
//! two, metadata filtering of the candidates, and top-k selection (with
//! `rank`'s order) into hits. Keeping the index up to date is `index`'s.

use serde_json::{Map, Value};
use uuid::Uuid;

use super::index::{NONE, OwnerIndex, Posting, Slot, to_u32};
use super::rank::{Ranked, TopK};
use super::tokenize::tokenize;
use super::{Hit, Mode, Query, SearchError};
use crate::store::filter::metadata_matches;

/// BM25 term-frequency saturation.
pub(super) const K1: f64 = 1.2;
/// BM25 length normalisation.
pub(super) const B: f64 = 0.75;

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

pub(super) fn dot(a: &[f32], b: &[f32]) -> f64 {
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
pub(super) fn canonical(x: f64) -> f64 {
    if x == 0.0 { 0.0 } else { x }
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

impl OwnerIndex {
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

        fuse(&text_hits, &vector_hits, alpha, limit, |slot| self.locate(slot))
    }

    fn ranked(&self, slot: u32, primary: f64, secondary: f64) -> Ranked {
        let (doc_id, snippet_index) = self.locate(slot);
        Ranked { primary, secondary, doc_id, snippet_index }
    }
}

/// Hybrid fusion of a text side and a vector side, each a list of
/// `(candidate, raw score)` sorted by candidate and already filtered (see
/// [`OwnerIndex::search_hybrid`] for the formula and the order of ties);
/// `locate` names a candidate's doc and snippet. Shared by every backend, so
/// hybrid ranks alike wherever the two sides were scored.
pub(super) fn fuse<K: Ord + Copy>(
    text_hits: &[(K, f64)],
    vector_hits: &[(K, f64)],
    alpha: f64,
    limit: usize,
    locate: impl Fn(K) -> (Uuid, usize),
) -> Vec<Hit> {
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
    let mut consider = |key: K, text: Option<f64>, vector: Option<f64>| {
        let t = text.map_or(0.0, text_norm);
        let v = vector.map_or(0.0, vec_norm);
        let fused = canonical(alpha * v + (1.0 - alpha) * t);
        let lead = if vector_leads { vector } else { text };
        let secondary = lead.unwrap_or(f64::NEG_INFINITY);
        if top.admits(fused) {
            let (doc_id, snippet_index) = locate(key);
            top.push(Ranked { primary: fused, secondary, doc_id, snippet_index });
        }
    };
    // Merge-join the two candidate-ordered lists.
    let (mut ti, mut vi) = (0, 0);
    loop {
        match (text_hits.get(ti), vector_hits.get(vi)) {
            (None, None) => break,
            (Some(&(tk, t)), Some(&(vk, v))) if tk == vk => {
                consider(tk, Some(t), Some(v));
                ti += 1;
                vi += 1;
            }
            (Some(&(tk, t)), Some(&(vk, _))) if tk < vk => {
                consider(tk, Some(t), None);
                ti += 1;
            }
            (Some(&(tk, t)), None) => {
                consider(tk, Some(t), None);
                ti += 1;
            }
            (_, Some(&(vk, v))) => {
                consider(vk, None, Some(v));
                vi += 1;
            }
        }
    }
    top.into_hits()
}
