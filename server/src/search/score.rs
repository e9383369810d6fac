//! What every backend scores alike: BM25's constants and idf (tantivy's, and
//! what PostgreSQL's SQL computes), cosine similarity over unit-length
//! vectors, and hybrid fusion of the two sides.

use uuid::Uuid;

use super::Hit;
use super::rank::{Ranked, TopK};

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

/// Hybrid fusion of a text side and a vector side, each a list of
/// `(candidate, raw score)` sorted by candidate and already filtered ;
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
