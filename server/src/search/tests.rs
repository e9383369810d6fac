//! Behavioural specification of the search module.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::*;

fn owner() -> OwnerKey {
    OwnerKey { tenant: Uuid::from_u128(1), owner: Uuid::from_u128(10) }
}

fn id(n: u128) -> Uuid {
    Uuid::from_u128(0x1000 + n)
}

fn text_doc(n: u128, snippets: &[&str]) -> DocEntry {
    DocEntry {
        id: id(n),
        snippets: snippets.iter().map(|s| s.to_string()).collect(),
        embeddings: None,
        metadata: None,
    }
}

fn vec_doc(n: u128, snippet: &str, embedding: Vec<f32>) -> DocEntry {
    DocEntry { embeddings: Some(vec![embedding]), ..text_doc(n, &[snippet]) }
}

fn with_metadata(mut doc: DocEntry, metadata: Value) -> DocEntry {
    let Value::Object(map) = metadata else { panic!("metadata must be an object") };
    doc.metadata = Some(map);
    doc
}

impl DocEntry {
    fn with_snippets(mut self, snippets: Vec<String>) -> Self {
        self.snippets = snippets;
        self
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => panic!("not an object"),
    }
}

fn index_of(docs: Vec<DocEntry>) -> SearchIndex {
    let index = SearchIndex::new();
    let changes = docs.into_iter().map(|d| IndexChange::Upsert(owner(), SearchIndex::prepare(d))).collect();
    assert!(index.apply(changes).unwrap().iter().all(Result::is_ok));
    index
}

fn search(index: &SearchIndex, q: &Query) -> Vec<Hit> {
    index.search(owner(), q).expect("search failed")
}

/// The same ranking up to float rounding (tantivy scores in f32, and sums a
/// snippet's terms in an order that depends on its segments): scores equal
/// within 1e-5, and the same snippets, except that near-equal scores at the
/// cut may keep different ones.
#[track_caller]
fn assert_alike(a: &[Hit], b: &[Hit], what: &str) {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-5 * x.abs().max(y.abs()).max(1.0);
    assert_eq!(a.len(), b.len(), "{what}: {a:?}\n{b:?}");
    assert!(a.iter().zip(b).all(|(x, y)| close(x.score, y.score)), "{what}: {a:?}\n{b:?}");
    let cut = a.last().map_or(0.0, |h| h.score);
    for x in a.iter().filter(|x| !close(x.score, cut)) {
        assert!(
            b.iter().any(|y| (y.doc_id, y.snippet_index) == (x.doc_id, x.snippet_index)),
            "{what}: {x:?} missing\n{a:?}\n{b:?}"
        );
    }
}

fn ids(hits: &[Hit]) -> Vec<(Uuid, usize)> {
    hits.iter().map(|h| (h.doc_id, h.snippet_index)).collect()
}

// ---------------------------------------------------------------- tokenizer

#[test]
fn tokenizer_segments_folds_case_and_accents_and_stems() {
    assert_eq!(tokenize("The Café's RUNNING, naïve runners!"), vec!["the", "cafe", "run", "naiv", "runner"]);
}

#[test]
fn tokenizer_drops_punctuation_and_whitespace() {
    assert!(tokenize("  ... -- !!! \n\t").is_empty());
}

#[test]
fn tokenizer_folds_compatibility_forms_and_apostrophes() {
    assert_eq!(tokenize("ﬁle"), tokenize("file"));
    assert_eq!(tokenize("don’t"), tokenize("don't"));
}

// --------------------------------------------------------------------- text

#[test]
fn unique_phrase_finds_its_doc_first() {
    let index = index_of(vec![
        text_doc(1, &["the weather today is sunny and warm"]),
        text_doc(2, &["a quarterly report on the zebra migration budget"]),
        text_doc(3, &["the budget meeting is today"]),
    ]);
    let hits = search(&index, &Query::text("zebra migration"));
    assert_eq!(hits[0].doc_id, id(2));
}

#[test]
fn stemming_lets_running_find_runs() {
    let index =
        index_of(vec![text_doc(1, &["she runs every morning"]), text_doc(2, &["he swims every morning"])]);
    let hits = search(&index, &Query::text("running"));
    assert_eq!(ids(&hits), vec![(id(1), 0)]);
}

#[test]
fn case_and_accents_are_folded() {
    let index =
        index_of(vec![text_doc(1, &["Meet me at the CAFÉ"]), text_doc(2, &["meet me at the station"])]);
    for query in ["cafe", "Café", "CAFE", "café"] {
        let hits = search(&index, &Query::text(query));
        assert_eq!(ids(&hits), vec![(id(1), 0)], "query {query:?}");
    }
}

#[test]
fn only_snippets_containing_a_query_term_match() {
    let index = index_of(vec![text_doc(1, &["alpha beta", "gamma delta"]), text_doc(2, &["epsilon"])]);
    let hits = search(&index, &Query::text("beta zeta"));
    assert_eq!(ids(&hits), vec![(id(1), 0)]);
    assert!(search(&index, &Query::text("zeta")).is_empty());
}

#[test]
fn every_matching_snippet_is_its_own_hit() {
    let index = index_of(vec![text_doc(1, &["orange juice", "no fruit here", "orange orange orange"])]);
    let hits = search(&index, &Query::text("orange"));
    assert_eq!(ids(&hits), vec![(id(1), 2), (id(1), 0)]);
}

#[test]
fn multi_word_queries_use_or_semantics_and_reward_more_matches() {
    let index = index_of(vec![
        text_doc(1, &["red apple"]),
        text_doc(2, &["red apple pie"]),
        text_doc(3, &["green pie"]),
        text_doc(4, &["blue sky"]),
    ]);
    let hits = search(&index, &Query::text("red pie"));
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].doc_id, id(2));
}

#[test]
fn limit_caps_the_number_of_hits() {
    let index = index_of((0..20).map(|n| text_doc(n, &["common word"])).collect());
    assert_eq!(search(&index, &Query::text("common").with_limit(5)).len(), 5);
    assert_eq!(search(&index, &Query::text("common").with_limit(50)).len(), 20);
    assert!(search(&index, &Query::text("common").with_limit(0)).is_empty());
}

#[test]
fn equal_scores_are_ordered_by_doc_id_then_snippet_index() {
    let index = index_of(vec![
        text_doc(3, &["same text", "same text"]),
        text_doc(1, &["same text"]),
        text_doc(2, &["same text"]),
    ]);
    let hits = search(&index, &Query::text("same"));
    assert_eq!(ids(&hits), vec![(id(1), 0), (id(2), 0), (id(3), 0), (id(3), 1)]);
    assert!(hits.windows(2).all(|w| w[0].score == w[1].score));
}

#[test]
fn scores_are_bm25_with_per_owner_statistics() {
    let mine = vec![text_doc(1, &["cat sat on the mat"]), text_doc(2, &["the dog"])];
    let index = index_of(mine.clone());
    // Another owner's docs must not change this owner's statistics.
    let other = OwnerKey { owner: Uuid::from_u128(99), ..owner() };
    index.upsert_doc(other, text_doc(9, &["cat cat cat cat"])).unwrap();

    let hits = search(&index, &Query::text("cat"));
    assert_eq!(hits.len(), 1);
    // N = 2, df = 1, dl = 5, avgdl = 3.5:
    // ln(1 + 1.5/1.5) * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 5 / 3.5))
    assert!((hits[0].score - 0.5897).abs() < 1e-4, "{}", hits[0].score);
    assert_eq!(hits, search(&index_of(mine), &Query::text("cat")), "as if the other owner had nothing");
}

#[test]
fn text_ranking_after_churn_is_that_of_an_index_of_the_survivors() {
    let mut rng = Lcg(7);
    let vocab: Vec<String> = (0..40).map(|i| format!("w{i}")).collect();
    let mut docs: Vec<DocEntry> = (0..150)
        .map(|n| {
            let snippets = (0..1 + rng.below(3))
                .map(|_| {
                    (0..1 + rng.below(12))
                        .map(|_| vocab[rng.below(vocab.len())].as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            DocEntry {
                id: id(rng.below(1000) as u128 * 1000 + n),
                snippets,
                embeddings: None,
                metadata: None,
            }
        })
        .collect();
    let index = index_of(docs.clone());
    // Churn: remove some docs and re-upsert others with new text.
    for doc in docs.iter_mut().step_by(5) {
        index.remove_doc(owner(), doc.id).unwrap();
        doc.snippets.clear();
    }
    for doc in docs.iter_mut().skip(1).step_by(7) {
        doc.snippets = vec![format!("{} w1 w2", doc.snippets.join(" "))];
        index.upsert_doc(owner(), doc.clone()).unwrap();
    }
    docs.retain(|d| !d.snippets.is_empty());
    let fresh = index_of(docs.clone());

    for query in ["w1", "w3 w7", "w0 w5 w9 w5", "w39 nothing", "w2 w3 w4 w5 w6"] {
        // Exactly the snippets holding a query term match.
        let terms = query_terms(query);
        let mut expected: Vec<(Uuid, usize)> = docs
            .iter()
            .flat_map(|d| d.snippets.iter().enumerate().map(move |(i, s)| (d.id, i, tokenize(s))))
            .filter(|(_, _, tokens)| tokens.iter().any(|t| terms.contains(t)))
            .map(|(d, i, _)| (d, i))
            .collect();
        expected.sort();
        let mut all = ids(&search(&index, &Query::text(query).with_limit(1000)));
        all.sort();
        assert_eq!(all, expected, "query {query:?}");
        for limit in [1, 7, 1000] {
            let q = Query::text(query).with_limit(limit);
            assert_alike(&search(&index, &q), &search(&fresh, &q), &format!("query {query:?} limit {limit}"));
        }
    }
}

#[test]
fn a_rarer_term_and_more_occurrences_rank_higher() {
    let index = index_of(vec![
        text_doc(1, &["common common rare"]),
        text_doc(2, &["common common common"]),
        text_doc(3, &["common filler filler"]),
        text_doc(4, &["common filler words"]),
    ]);
    let hits = search(&index, &Query::text("common rare"));
    assert_eq!(hits[0].doc_id, id(1), "the doc with the rare term first: {hits:?}");
    let two = search(&index, &Query::text("common"));
    assert_eq!(two[0].doc_id, id(2), "the most occurrences first: {two:?}");
}

/// Tiny deterministic PRNG for test corpora.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

// ----------------------------------------------------------------- metadata

#[test]
fn metadata_filter_keeps_only_docs_with_every_key_equal() {
    let index = index_of(vec![
        with_metadata(text_doc(1, &["report"]), json!({"kind": "memo", "year": 2024})),
        with_metadata(text_doc(2, &["report"]), json!({"kind": "memo", "year": 2023})),
        with_metadata(text_doc(3, &["report"]), json!({"kind": "note", "year": 2024})),
        text_doc(4, &["report"]),
    ]);
    let q = Query::text("report").with_filter(object(json!({"kind": "memo", "year": 2024})));
    assert_eq!(ids(&search(&index, &q)), vec![(id(1), 0)]);

    let q = Query::text("report").with_filter(object(json!({"year": 2024.0})));
    assert_eq!(ids(&search(&index, &q)), vec![(id(1), 0), (id(3), 0)]);

    let q = Query::text("report").with_filter(Map::new());
    assert_eq!(search(&index, &q).len(), 4);
}

#[test]
fn metadata_filter_is_applied_before_the_limit() {
    let mut docs: Vec<DocEntry> =
        (0..50).map(|n| text_doc(n, &["needle needle needle in a stack"])).collect();
    docs.push(with_metadata(
        text_doc(99, &["a needle somewhere in a very long and rambling haystack of words"]),
        json!({"wanted": true}),
    ));
    let index = index_of(docs);
    let q = Query::text("needle").with_limit(1).with_filter(object(json!({"wanted": true})));
    assert_eq!(ids(&search(&index, &q)), vec![(id(99), 0)]);

    let unit = vec![1.0, 0.0];
    let index = index_of(vec![
        vec_doc(1, "x", unit.clone()),
        with_metadata(vec_doc(2, "y", vec![0.0, 1.0]), json!({"wanted": true})),
    ]);
    for q in [Query::vector(unit.clone()), Query::hybrid("x y", unit.clone(), 0.5)] {
        let q = q.with_limit(1).with_filter(object(json!({"wanted": true})));
        assert_eq!(ids(&search(&index, &q)), vec![(id(2), 0)], "{:?}", q.mode);
    }
}

// ------------------------------------------------------------------- vector

#[test]
fn vector_search_finds_the_nearest_snippet_first() {
    let index = index_of(vec![
        vec_doc(1, "a", vec![1.0, 0.0, 0.0]),
        vec_doc(2, "b", vec![0.0, 1.0, 0.0]),
        vec_doc(3, "c", vec![0.7, 0.7, 0.0]),
    ]);
    let hits = search(&index, &Query::vector(vec![0.1, 0.9, 0.0]));
    assert_eq!(ids(&hits), vec![(id(2), 0), (id(3), 0), (id(1), 0)]);
    assert!(hits[0].score > 0.99 && hits[0].score <= 1.0 + 1e-6);
}

#[test]
fn vector_search_skips_docs_without_embeddings() {
    let index = index_of(vec![vec_doc(1, "a", vec![1.0, 0.0]), text_doc(2, &["no embedding"])]);
    let hits = search(&index, &Query::vector(vec![1.0, 1.0]));
    assert_eq!(ids(&hits), vec![(id(1), 0)]);
}

#[test]
fn zero_vectors_score_zero_not_nan() {
    let index = index_of(vec![vec_doc(1, "a", vec![0.0, 0.0]), vec_doc(2, "b", vec![1.0, 0.0])]);
    for q in [vec![0.0, 0.0], vec![1.0, 0.0]] {
        let hits = search(&index, &Query::vector(q));
        assert_eq!(hits.len(), 2);
        assert!(hits.iter().all(|h| h.score.is_finite()));
    }
    let hits = search(&index, &Query::hybrid("a b", vec![0.0, 0.0], 0.5));
    assert!(hits.iter().all(|h| h.score.is_finite()));
}

#[test]
fn query_vector_of_the_wrong_dimension_is_an_error() {
    let index = index_of(vec![vec_doc(1, "a", vec![1.0, 0.0, 0.0])]);
    assert_eq!(index.dimension(owner()), Some(3));
    for q in [Query::vector(vec![1.0, 0.0]), Query::hybrid("a", vec![1.0, 0.0], 0.5)] {
        assert_eq!(index.search(owner(), &q), Err(SearchError::DimensionMismatch { expected: 3, got: 2 }));
    }
}

#[test]
fn strict_upsert_rejects_embeddings_of_the_wrong_dimension() {
    let index = index_of(vec![vec_doc(1, "a", vec![1.0, 0.0, 0.0])]);
    let result = index.try_upsert_doc(owner(), vec_doc(2, "b", vec![1.0, 0.0]));
    assert_eq!(result, Err(SearchError::DimensionMismatch { expected: 3, got: 2 }));
    assert_eq!(index.snippet_count(owner()), 1);
    // Replacing the doc that holds every vector may change the dimension.
    assert_eq!(index.try_upsert_doc(owner(), vec_doc(1, "a", vec![1.0, 0.0])), Ok(()));
    assert_eq!(index.dimension(owner()), Some(2));
}

#[test]
fn strict_upsert_rejects_malformed_embeddings() {
    let index = SearchIndex::new();
    let mut doc = text_doc(1, &["a", "b"]);
    doc.embeddings = Some(vec![vec![1.0]]);
    assert_eq!(
        index.try_upsert_doc(owner(), doc.clone()),
        Err(SearchError::EmbeddingCountMismatch { snippets: 2, embeddings: 1 })
    );
    doc.embeddings = Some(vec![vec![1.0], vec![f32::NAN]]);
    assert_eq!(index.try_upsert_doc(owner(), doc), Err(SearchError::InvalidVector));
    assert_eq!(index.snippet_count(owner()), 0);
}

#[test]
fn lenient_upsert_keeps_the_text_but_drops_unusable_embeddings() {
    let index =
        index_of(vec![vec_doc(1, "first", vec![1.0, 0.0, 0.0]), vec_doc(2, "second", vec![1.0, 0.0])]);
    assert_eq!(index.dimension(owner()), Some(3));
    assert_eq!(ids(&search(&index, &Query::text("second"))), vec![(id(2), 0)]);
    let hits = search(&index, &Query::vector(vec![1.0, 0.0, 0.0]));
    assert_eq!(ids(&hits), vec![(id(1), 0)]);
}

#[test]
fn dimension_is_forgotten_when_the_last_vector_is_removed() {
    let index = index_of(vec![vec_doc(1, "a", vec![1.0, 0.0]), text_doc(2, &["b"])]);
    assert_eq!(index.dimension(owner()), Some(2));
    index.remove_doc(owner(), id(1)).unwrap();
    assert_eq!(index.dimension(owner()), None);
    index.upsert_doc(owner(), vec_doc(3, "c", vec![1.0, 0.0, 0.0, 0.0])).unwrap();
    assert_eq!(index.dimension(owner()), Some(4));
}

// ------------------------------------------------------------------- hybrid

/// Text and vector rankings disagree: text prefers 1 > 2 > 3 (4 and 5 tie,
/// 6 has no embedding), vector prefers 3 > 2 > 1, 7 matches only by vector.
fn disagreeing_corpus() -> SearchIndex {
    let docs = vec![
        vec_doc(1, "rust rust rust borrow checker", vec![0.1, 1.0]),
        vec_doc(2, "rust borrow checker and lifetimes", vec![0.6, 0.8]),
        vec_doc(3, "a long text that mentions rust only once among many other words", vec![1.0, 0.1]),
        vec_doc(4, "rust lifetimes", vec![0.5, 0.5]),
        vec_doc(5, "rust lifetimes", vec![0.4, 0.6]),
        text_doc(6, &["rust rust without embedding"]),
        vec_doc(7, "unrelated gardening", vec![0.9, 0.3]),
    ];
    index_of(docs)
}

const Q_VEC: [f32; 2] = [1.0, 0.05];

#[test]
fn hybrid_with_alpha_zero_orders_like_text() {
    let index = disagreeing_corpus();
    let text = search(&index, &Query::text("rust lifetimes").with_limit(100));
    let vector = search(&index, &Query::vector(Q_VEC.to_vec()).with_limit(100));
    assert_ne!(ids(&text), ids(&vector)[..text.len()], "corpus must disagree");

    let hybrid = search(&index, &Query::hybrid("rust lifetimes", Q_VEC.to_vec(), 0.0).with_limit(100));
    assert_eq!(ids(&hybrid)[..text.len()], ids(&text)[..]);
    for limit in 1..=text.len() {
        let q = Query::hybrid("rust lifetimes", Q_VEC.to_vec(), 0.0).with_limit(limit);
        let q_text = Query::text("rust lifetimes").with_limit(limit);
        assert_eq!(ids(&search(&index, &q)), ids(&search(&index, &q_text)));
    }
}

#[test]
fn hybrid_with_alpha_one_orders_like_vector() {
    let index = disagreeing_corpus();
    let vector = search(&index, &Query::vector(Q_VEC.to_vec()).with_limit(100));
    let hybrid = search(&index, &Query::hybrid("rust lifetimes", Q_VEC.to_vec(), 1.0).with_limit(100));
    assert_eq!(ids(&hybrid)[..vector.len()], ids(&vector)[..]);
    // The text-only doc comes last, with fused score 0.
    assert_eq!(ids(&hybrid)[vector.len()..], [(id(6), 0)]);
    for limit in 1..=vector.len() {
        let q = Query::hybrid("rust lifetimes", Q_VEC.to_vec(), 1.0).with_limit(limit);
        let q_vec = Query::vector(Q_VEC.to_vec()).with_limit(limit);
        assert_eq!(ids(&search(&index, &q)), ids(&search(&index, &q_vec)));
    }
}

#[test]
fn hybrid_alpha_endpoints_match_text_and_vector_orders_on_random_corpora() {
    let mut rng = Lcg(3);
    let words = ["ant", "bee", "cat", "dog", "eel"];
    for _ in 0..20 {
        // Few words and tiny integer vectors: lots of exactly tied scores.
        let docs: Vec<DocEntry> = (0..60)
            .map(|n| {
                let text: Vec<&str> = (0..1 + rng.below(4)).map(|_| words[rng.below(5)]).collect();
                let v = vec![rng.below(3) as f32, rng.below(3) as f32];
                if rng.below(4) == 0 {
                    text_doc(n, &[&text.join(" ")])
                } else {
                    vec_doc(n, &text.join(" "), v)
                }
            })
            .collect();
        let index = index_of(docs);
        let text = words[rng.below(5)].to_string() + " " + words[rng.below(5)];
        let v = vec![rng.below(3) as f32, 1.0 + rng.below(2) as f32];
        for limit in [1, 5, 100] {
            let by_text = search(&index, &Query::text(&text).with_limit(limit));
            let by_vec = search(&index, &Query::vector(v.clone()).with_limit(limit));
            let h0 = search(&index, &Query::hybrid(&text, v.clone(), 0.0).with_limit(limit));
            let h1 = search(&index, &Query::hybrid(&text, v.clone(), 1.0).with_limit(limit));
            assert_eq!(ids(&h0)[..by_text.len()], ids(&by_text)[..], "{text:?} {limit}");
            assert_eq!(ids(&h1)[..by_vec.len()], ids(&by_vec)[..], "{v:?} {limit}");
        }
    }
}

#[test]
fn query_deserialises_with_defaults() {
    let q: Query = serde_json::from_value(json!({"mode": "text", "text": "hi"})).unwrap();
    assert_eq!(q, Query::text("hi"));
}

#[test]
fn hybrid_blends_both_sides_into_scores_within_zero_and_one() {
    let index = disagreeing_corpus();
    let hits = search(&index, &Query::hybrid("rust lifetimes", Q_VEC.to_vec(), 0.5).with_limit(100));
    assert_eq!(hits.len(), 7);
    assert!(hits.iter().all(|h| (0.0..=1.0).contains(&h.score)));
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn hybrid_needs_text_and_vector_and_a_valid_alpha() {
    let index = disagreeing_corpus();
    let mut q = Query::hybrid("rust", Q_VEC.to_vec(), 0.5);
    q.text = None;
    assert_eq!(index.search(owner(), &q), Err(SearchError::MissingText));
    let mut q = Query::hybrid("rust", Q_VEC.to_vec(), 0.5);
    q.vector = None;
    assert_eq!(index.search(owner(), &q), Err(SearchError::MissingVector));
    for alpha in [-0.1, 1.1, f64::NAN] {
        let q = Query::hybrid("rust", Q_VEC.to_vec(), alpha);
        assert!(matches!(index.search(owner(), &q), Err(SearchError::InvalidAlpha(_))));
    }
    let mut q = Query::text("rust");
    q.text = None;
    assert_eq!(index.search(owner(), &q), Err(SearchError::MissingText));
    let mut q = Query::vector(vec![]);
    assert_eq!(index.search(owner(), &q), Err(SearchError::InvalidVector));
    q.vector = None;
    assert_eq!(index.search(owner(), &q), Err(SearchError::MissingVector));
}

// ---------------------------------------------------------------- lifecycle

#[test]
fn removed_doc_never_comes_back() {
    let index = index_of(vec![
        vec_doc(1, "ephemeral secret", vec![1.0, 0.0]),
        vec_doc(2, "permanent record", vec![0.0, 1.0]),
    ]);
    index.remove_doc(owner(), id(1)).unwrap();
    index.remove_doc(owner(), id(1)).unwrap(); // idempotent
    let queries = [
        Query::text("ephemeral secret"),
        Query::vector(vec![1.0, 0.0]),
        Query::hybrid("ephemeral", vec![1.0, 0.0], 0.5),
    ];
    for q in &queries {
        assert!(search(&index, q).iter().all(|h| h.doc_id != id(1)), "{:?}", q.mode);
    }
    // Nor after enough churn (commits) for the index to merge its segments.
    for round in 0..60 {
        let batch: Vec<u128> = (0..20).map(|n| 100 + round * 20 + n).collect();
        let adds = batch
            .iter()
            .map(|&n| IndexChange::Upsert(owner(), SearchIndex::prepare(text_doc(n, &["filler secret"]))));
        index.apply(adds.collect()).unwrap();
        index.apply(batch.iter().map(|&n| IndexChange::Remove(owner(), id(n))).collect()).unwrap();
    }
    for q in &queries {
        assert!(search(&index, q).iter().all(|h| h.doc_id != id(1)), "{:?}", q.mode);
    }
    assert_eq!(index.snippet_count(owner()), 1);
}

#[test]
fn upsert_replaces_the_previous_version() {
    let index = index_of(vec![text_doc(1, &["old words", "more old words"]), text_doc(2, &["other"])]);
    index.upsert_doc(owner(), text_doc(1, &["new words"])).unwrap();
    assert_eq!(index.snippet_count(owner()), 2);
    assert_eq!(index.doc_count(owner()), 2);
    assert!(search(&index, &Query::text("old")).is_empty());
    assert_eq!(ids(&search(&index, &Query::text("new"))), vec![(id(1), 0)]);
    // Statistics follow: same scores as an index that only ever saw the new version.
    let fresh = index_of(vec![text_doc(2, &["other"]), text_doc(1, &["new words"])]);
    assert_eq!(search(&index, &Query::text("new words")), search(&fresh, &Query::text("new words")));
}

#[test]
fn removals_leave_results_as_an_index_of_the_rest_would() {
    let mut rng = Lcg(42);
    let words = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"];
    let docs: Vec<DocEntry> = (0..3000)
        .map(|n| {
            let text: Vec<&str> = (0..1 + rng.below(6)).map(|_| words[rng.below(8)]).collect();
            let v = vec![rng.below(100) as f32, rng.below(100) as f32];
            vec_doc(n, &text.join(" "), v)
        })
        .collect();
    let churned = index_of(docs.clone());
    let removals =
        docs.iter().filter(|d| d.id.as_u128() % 6 != 0).map(|d| IndexChange::Remove(owner(), d.id));
    churned.apply(removals.collect()).unwrap();

    let fresh = index_of(docs.into_iter().filter(|d| d.id.as_u128() % 6 == 0).collect());
    assert_eq!(churned.snippet_count(owner()), fresh.snippet_count(owner()));
    for q in [
        Query::text("ant"),
        Query::text("bee cat hen"),
        Query::vector(vec![3.0, 1.0]),
        Query::hybrid("dog eel", vec![1.0, 2.0], 0.3),
    ] {
        let q = q.with_limit(50);
        assert_alike(&search(&churned, &q), &search(&fresh, &q), &format!("{:?}", q.mode));
    }
}

#[test]
fn other_owners_docs_never_appear() {
    let index = index_of(vec![vec_doc(1, "mine", vec![1.0, 0.0])]);
    let other = OwnerKey { owner: Uuid::from_u128(11), ..owner() };
    index.upsert_doc(other, vec_doc(2, "theirs mine", vec![1.0, 0.0])).unwrap();
    let hits = search(&index, &Query::hybrid("mine theirs", vec![1.0, 0.0], 0.5).with_limit(100));
    assert_eq!(ids(&hits), vec![(id(1), 0)]);
    assert_eq!(index.snippet_count(owner()), 1);
}

#[test]
fn other_tenants_docs_never_appear() {
    let index = index_of(vec![vec_doc(1, "mine", vec![1.0, 0.0])]);
    let same_owner_other_tenant = OwnerKey { tenant: Uuid::from_u128(2), ..owner() };
    index.upsert_doc(same_owner_other_tenant, vec_doc(2, "theirs mine", vec![0.0, 1.0])).unwrap();
    for q in [
        Query::text("mine theirs"),
        Query::vector(vec![0.0, 1.0]),
        Query::hybrid("theirs", vec![0.0, 1.0], 0.5),
    ] {
        let hits = search(&index, &q.with_limit(100));
        assert_eq!(ids(&hits), vec![(id(1), 0)]);
    }
    // The same doc id under two tenants is two docs.
    index.upsert_doc(same_owner_other_tenant, vec_doc(1, "shadow", vec![0.0, 1.0])).unwrap();
    assert!(search(&index, &Query::text("shadow")).is_empty());
}

#[test]
fn remove_owner_forgets_everything() {
    let index = index_of(vec![vec_doc(1, "something", vec![1.0, 0.0])]);
    index.remove_owner(owner()).unwrap();
    assert_eq!(index.snippet_count(owner()), 0);
    assert_eq!(index.dimension(owner()), None);
    assert!(search(&index, &Query::text("something")).is_empty());
    // Any dimension is accepted afresh.
    assert!(search(&index, &Query::vector(vec![1.0, 2.0, 3.0])).is_empty());
}

#[test]
fn empty_index_searches_return_empty() {
    let index = SearchIndex::new();
    for q in [
        Query::text("anything"),
        Query::text(""),
        Query::vector(vec![1.0, 2.0]),
        Query::hybrid("anything", vec![1.0], 0.5),
    ] {
        assert_eq!(index.search(owner(), &q), Ok(vec![]), "{:?}", q.mode);
    }
    assert_eq!(index.snippet_count(owner()), 0);
    assert_eq!(index.dimension(owner()), None);

    // An owner whose docs were all removed, or that has only empty docs.
    let index = index_of(vec![text_doc(1, &["gone"]), text_doc(2, &[]), text_doc(3, &[""])]);
    index.remove_doc(owner(), id(1)).unwrap();
    assert!(search(&index, &Query::text("gone")).is_empty());
    assert!(search(&index, &Query::vector(vec![1.0])).is_empty());
    assert!(search(&index, &Query::hybrid("gone", vec![1.0], 0.5)).is_empty());
}

#[test]
fn search_index_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SearchIndex>();
}

#[test]
fn concurrent_readers_and_writers_do_not_interfere() {
    let index = std::sync::Arc::new(SearchIndex::new());
    let writers: Vec<_> = (0..4u128)
        .map(|t| {
            let index = index.clone();
            std::thread::spawn(move || {
                for n in 0..200 {
                    index.upsert_doc(owner(), text_doc(t * 1000 + n, &["shared words here"])).unwrap();
                    let _ = index.search(owner(), &Query::text("shared"));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(index.snippet_count(owner()), 800);
    assert_eq!(search(&index, &Query::text("words").with_limit(1000)).len(), 800);
}

#[test]
fn a_doc_prepared_ahead_is_indexed_as_an_upserted_one() {
    let docs = vec![text_doc(1, &["alpha beta", "gamma"]), vec_doc(2, "beta delta", vec![1.0, 0.0])];
    let upserted = index_of(docs.clone());
    let prepared = SearchIndex::new();
    for doc in docs {
        let doc = SearchIndex::prepare_strict(doc).expect("a valid doc");
        prepared.upsert_prepared(owner(), doc).expect("same dimension");
    }
    for q in [Query::text("beta"), Query::vector(vec![1.0, 0.5]), Query::hybrid("gamma", vec![0.0, 1.0], 0.5)]
    {
        assert_eq!(search(&prepared, &q), search(&upserted, &q), "{q:?}");
    }
    assert_eq!(
        SearchIndex::prepare_strict(vec_doc(3, "x", vec![f32::INFINITY])).err(),
        Some(SearchError::InvalidVector)
    );
    let lenient = SearchIndex::prepare(vec_doc(3, "x", vec![f32::INFINITY]));
    assert_eq!(prepared.upsert_prepared(owner(), lenient), Ok(()), "dropped, the text kept");
    assert_eq!(prepared.snippet_count(owner()), 4);
}

// ------------------------------------------------------------------ on disk

#[test]
fn a_big_owners_segments_searched_side_by_side_rank_as_one_after_another() {
    let dir = tempfile::tempdir().unwrap();
    let index = SearchIndex::open(&dir.path().join("index")).unwrap();
    let words = ["harbour", "dawn", "ship", "tide", "rope", "gull", "anchor", "sail"];
    for batch in 0..4u128 {
        for n in 0..40u128 {
            let i = batch * 40 + n;
            let text: Vec<&str> = (0..6).map(|k| words[((i * 7 + k * (i % 5 + 1)) % 8) as usize]).collect();
            index.upsert_doc(owner(), text_doc(i, &[&text.join(" "), words[(i % 8) as usize]])).unwrap();
        }
        index.flush().unwrap(); // a commit: a segment
    }
    assert!(index.segments() > 1, "several segments: {}", index.segments());
    let queries = ["harbour", "ship tide", "anchor gull sail", "rope dawn harbour ship"];
    let one_thread: Vec<Vec<Hit>> =
        queries.iter().map(|q| search(&index, &Query::text(*q).with_limit(25))).collect();
    assert!(one_thread.iter().all(|hits| hits.len() == 25));
    index.set_parallel_min_snippets(0);
    for (q, expected) in queries.iter().zip(&one_thread) {
        assert_eq!(&search(&index, &Query::text(*q).with_limit(25)), expected, "{q}");
    }
}

#[test]
fn an_index_on_disk_is_reopened_with_its_docs_unless_it_cannot_be_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let q = Query::text("harbour");
    let index = SearchIndex::open(&path).unwrap();
    assert!(index.fresh().is_some(), "a new index says why it is empty");
    index.upsert_doc(owner(), text_doc(1, &["the harbour at dawn"])).unwrap();
    let before = search(&index, &q);
    index.flush().unwrap();
    index.upsert_doc(owner(), text_doc(2, &["a harbour not yet committed"])).unwrap();
    assert_eq!(search(&index, &q).len(), 2, "the uncommitted tail is searched too");
    drop(index); // as a killed process: not closed

    let index = SearchIndex::open(&path).unwrap();
    assert_eq!(index.fresh(), None, "killed on this boot: every file the OS was given is there");
    assert_eq!(search(&index, &q), before, "what was committed, not the tail (the store refills it)");
    assert_eq!(index.doc_keys().unwrap(), [(owner(), id(1))].into_iter().collect());
    index.close().unwrap();
    drop(index);

    let index = SearchIndex::open(&path).unwrap();
    assert_eq!(index.fresh(), None, "closed cleanly");
    assert_eq!(search(&index, &q), before);
    drop(index);

    // Open under another boot: the machine stopped while it was open.
    std::fs::write(path.join("STATE"), "open 00000000-another-boot").unwrap();
    let index = SearchIndex::open(&path).unwrap();
    assert!(index.fresh().unwrap().contains("machine"), "{:?}", index.fresh());
    assert!(search(&index, &q).is_empty(), "rebuilt empty, for the store to fill");
    index.upsert_doc(owner(), text_doc(1, &["the harbour at dawn"])).unwrap();
    index.close().unwrap();
    drop(index);

    // Files that do not read back.
    std::fs::write(path.join("meta.json"), b"{ not json").unwrap();
    let index = SearchIndex::open(&path).unwrap();
    assert!(index.fresh().unwrap().contains("could not be read"), "{:?}", index.fresh());
    assert!(search(&index, &q).is_empty());
    drop(index);

    // Another version.
    std::fs::write(path.join("VERSION"), "agent-platform search index 0").unwrap();
    let index = SearchIndex::open(&path).unwrap();
    assert!(index.fresh().unwrap().contains("another version"), "{:?}", index.fresh());
}

#[test]
fn staged_changes_see_each_other_before_their_commit() {
    let index = index_of(vec![text_doc(1, &["old harbour"])]);
    index.flush().unwrap();
    let stage = |changes| index.stage(changes).unwrap().1;
    // Replaced, then removed, then re-added, all before one commit.
    stage(vec![IndexChange::Upsert(owner(), SearchIndex::prepare(text_doc(1, &["new harbour", "quay"])))]);
    assert_eq!(index.snippet_count(owner()), 2, "statistics follow what is staged");
    stage(vec![IndexChange::Remove(owner(), id(1))]);
    assert_eq!(index.doc_count(owner()), 0);
    stage(vec![IndexChange::Upsert(owner(), SearchIndex::prepare(text_doc(2, &["harbour lights"])))]);
    let other = OwnerKey { owner: Uuid::from_u128(77), ..owner() };
    stage(vec![IndexChange::Upsert(other, SearchIndex::prepare(text_doc(3, &["harbour"])))]);
    let last = stage(vec![IndexChange::RemoveOwner(other)]);
    assert_eq!(index.doc_count(other), 0);
    // Searches see the last commit until the next one, and the docs added
    // since (doc 1's replacement and removal wait for the commit).
    let mut seen = ids(&search(&index, &Query::text("harbour")));
    seen.sort();
    assert_eq!(seen, vec![(id(1), 0), (id(2), 0)]);
    index.commit_through(last).unwrap();
    assert_eq!(ids(&search(&index, &Query::text("harbour"))), vec![(id(2), 0)]);
    assert_eq!((index.doc_count(owner()), index.snippet_count(owner())), (1, 1));
    assert!(index.search(other, &Query::text("harbour")).unwrap().is_empty());
}

#[test]
fn docs_searched_from_the_uncommitted_tail_rank_as_once_committed() {
    let mut rng = Lcg(11);
    let words = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu"];
    let docs: Vec<DocEntry> = (0..120)
        .map(|n| {
            let snippets: Vec<String> = (0..1 + rng.below(3))
                .map(|_| {
                    (0..1 + rng.below(9)).map(|_| words[rng.below(words.len())]).collect::<Vec<_>>().join(" ")
                })
                .collect();
            let embeddings = (rng.below(3) > 0).then(|| {
                snippets.iter().map(|_| vec![rng.below(4) as f32, 1.0, rng.below(3) as f32]).collect()
            });
            let colour = ["red", "blue"][rng.below(2)];
            with_metadata(DocEntry { embeddings, ..text_doc(n, &[]) }, json!({ "colour": colour }))
                .with_snippets(snippets)
        })
        .collect();
    // The first half committed, the second half in the tail (and a removal
    // committed in between, so the committed part has deletes).
    let index = index_of(docs[..60].to_vec());
    index.remove_doc(owner(), docs[3].id).unwrap();
    let changes =
        docs[60..].iter().map(|d| IndexChange::Upsert(owner(), SearchIndex::prepare(d.clone()))).collect();
    assert!(index.apply(changes).unwrap().iter().all(Result::is_ok));
    let queries = [
        Query::text("ant"),
        Query::text("bee cat gnu").with_limit(25),
        Query::text("dog").with_filter(object(json!({ "colour": "red" }))).with_limit(40),
        Query::vector(vec![1.0, 1.0, 0.0]).with_limit(30),
        Query::vector(vec![0.0, 1.0, 2.0]).with_filter(object(json!({ "colour": "blue" }))),
        Query::hybrid("eel fox", vec![2.0, 1.0, 1.0], 0.4).with_limit(50),
    ];
    let before: Vec<Vec<Hit>> = queries.iter().map(|q| search(&index, q)).collect();
    assert!(
        before.iter().flatten().any(|h| h.doc_id >= docs[60].id),
        "the tail's docs are found before a commit"
    );
    index.flush().unwrap();
    for (q, before) in queries.iter().zip(&before) {
        assert_alike(before, &search(&index, q), &format!("{q:?}"));
    }
}

// ------------------------------------------------------------- vector graphs

/// Unit vectors around `centres` (so that near neighbours mean something).
fn clustered(rng: &mut rand::rngs::StdRng, centres: &[Vec<f32>], n: usize) -> Vec<Vec<f32>> {
    use rand::Rng;
    (0..n)
        .map(|i| centres[i % centres.len()].iter().map(|c| c + rng.random_range(-0.35f32..0.35)).collect())
        .collect()
}

#[test]
fn an_owner_with_many_vectors_is_searched_through_its_graph_as_if_exactly() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let dim = 24;
    let centres: Vec<Vec<f32>> =
        (0..40).map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect()).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let index = SearchIndex::open(&path).unwrap();
    let n = 4_000u128;
    let vectors = clustered(&mut rng, &centres, n as usize);
    let changes = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| IndexChange::Upsert(owner(), SearchIndex::prepare(vec_doc(i as u128, "x", v.clone()))))
        .collect();
    assert!(index.apply(changes).unwrap().iter().all(Result::is_ok));
    index.flush().unwrap();
    let queries: Vec<Query> = clustered(&mut rng, &centres, 60).into_iter().map(Query::vector).collect();
    let exact: Vec<Vec<Hit>> = queries.iter().map(|q| search(&index, q)).collect();
    assert_eq!(index.tantivy.graph_of(owner()), None, "below the threshold: exact, no graph asked for");

    // Built as the background thread would (the threshold is still above the owner here).
    index.tantivy.build_graph(owner()).unwrap();
    index.set_vector_graph_min(1_000);
    assert_eq!(index.tantivy.graph_of(owner()), Some((n as u64, 0)));
    let files: Vec<_> =
        std::fs::read_dir(path.join("ann")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(files.len(), 1, "one file per owner: {files:?}");

    let check = |index: &SearchIndex, exact: &[Vec<Hit>]| {
        let mut same = 0;
        let mut total = 0;
        for (q, want) in queries.iter().zip(exact) {
            let got = search(index, q);
            assert_eq!(got.len(), want.len());
            for h in &got {
                // Every hit is scored exactly: a hit the exact search also found has its score.
                if let Some(w) =
                    want.iter().find(|w| (w.doc_id, w.snippet_index) == (h.doc_id, h.snippet_index))
                {
                    assert!((w.score - h.score).abs() < 1e-6, "{w:?} vs {h:?}");
                    same += 1;
                }
            }
            total += want.len();
        }
        same as f64 / total as f64
    };
    let recall = check(&index, &exact);
    assert!(recall >= 0.95, "recall@10 {recall}");
    let (_, searches) = index.tantivy.graph_of(owner()).unwrap();
    assert_eq!(searches, queries.len() as u64, "every search asked the graph");

    // Added after the graph: found at once (in memory), and once committed (after its watermark).
    let probe = queries[0].vector.clone().unwrap();
    index.upsert_doc(owner(), vec_doc(n, "new", probe.clone())).unwrap();
    assert_eq!(ids(&search(&index, &queries[0]))[0], (id(n), 0), "the tail in memory");
    index.flush().unwrap();
    assert_eq!(ids(&search(&index, &queries[0]))[0], (id(n), 0), "committed, after the watermark");

    // Removed or replaced after the graph: gone, though the graph still holds them.
    let top = search(&index, &queries[1])[0].doc_id;
    index.remove_doc(owner(), top).unwrap();
    assert!(!ids(&search(&index, &queries[1])).iter().any(|(d, _)| *d == top), "removed");
    let second = search(&index, &queries[1])[0].doc_id;
    let far: Vec<f32> = probe.iter().map(|x| -x).collect();
    index.upsert_doc(owner(), DocEntry { id: second, ..vec_doc(0, "moved", far) }).unwrap();
    assert!(!ids(&search(&index, &queries[1])).iter().any(|(d, _)| *d == second), "replaced far away");

    // Reopened: the graph is read from its file, not built again, and answers the same.
    let now: Vec<Vec<Hit>> = queries.iter().map(|q| search(&index, q)).collect();
    index.close().unwrap();
    drop(index);
    // What a build killed midway leaves, and a graph file that does not read: removed at open.
    let ann = path.join("ann");
    let other = format!("{:064x}-{:016x}.usearch", 7, 5);
    std::fs::write(ann.join(&other), b"not a graph").unwrap();
    std::fs::write(ann.join(format!("{other}.123.tmp")), b"half a graph").unwrap();
    let index = SearchIndex::open(&path).unwrap();
    assert_eq!(index.fresh(), None);
    assert_eq!(std::fs::read_dir(&ann).unwrap().count(), 1, "only the owner's graph is left");
    index.set_vector_graph_min(1_000);
    assert_eq!(index.tantivy.graph_of(owner()), Some((n as u64, 0)), "opened from its file");
    assert_eq!(queries.iter().map(|q| search(&index, q)).collect::<Vec<_>>(), now);
    let added = vec_doc(n + 1, "after reopening", probe.clone());
    index.upsert_doc(owner(), added).unwrap();
    index.flush().unwrap();
    assert_eq!(
        ids(&search(&index, &queries[0]))[..2],
        [(id(n), 0), (id(n + 1), 0)],
        "numbers go on after the graph's"
    );

    // Every doc of the owner removed: so is its graph.
    index.remove_owner(owner()).unwrap();
    assert_eq!(index.tantivy.graph_of(owner()), None);
    assert_eq!(std::fs::read_dir(path.join("ann")).unwrap().count(), 0);
}
