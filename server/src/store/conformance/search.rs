//! Search answers alike on both backends: the same documents, written to a
//! PostgreSQL store (which indexes them in its commits and ranks in the
//! database) and to the search index the embedded store's server keeps,
//! give the same hits with the same scores, for text, vector and hybrid
//! queries, with and without metadata filters, after deletes of a doc and of
//! an owner's docs. With `AGENT_PLATFORM_TEST_PGVECTOR=1` the database must
//! have pgvector (the CI run that installs it), so the vectors are ranked by it.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::TestDb;
use crate::search::{DocEntry, Hit, OwnerKey, Query, SearchError, SearchIndex};
use crate::store::DocSearch;
use crate::store::{Expect, Kind, Op, Record, Store, new_id};

const WORDS: &[&str] = &[
    "run",
    "running",
    "runs",
    "café",
    "CAFE",
    "cafés",
    "search",
    "searching",
    "engine",
    "engines",
    "vector",
    "the",
    "the",
    "the",
    "of",
    "a",
    "database",
    "o'neil",
    "naïve",
    "naive",
    "Straße",
    "strasse",
    "3.14",
    "don’t",
    "don't",
    "zebra",
    "quartz",
    "lattice",
    "harbour",
    "ember",
    "ember",
    "tide",
];

/// A word, the first ones of [`WORDS`] far more often than the last ones
/// (as in text: a few words are everywhere, most are rare).
fn word(rng: &mut StdRng) -> &'static str {
    WORDS[(WORDS.len() as f64 * rng.random_range(0.0f64..1.0).powi(3)) as usize]
}

fn snippet(rng: &mut StdRng) -> String {
    let n = rng.random_range(0..12);
    let mut words: Vec<String> = (0..n).map(|_| word(rng).to_string()).collect();
    if rng.random_ratio(1, 15) {
        words.push("y".repeat(300));
    }
    words.join(if rng.random_bool(0.5) { " " } else { ", " })
}

fn vector(rng: &mut StdRng, dim: usize) -> Vec<f32> {
    (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn doc(rng: &mut StdRng, dim: usize) -> DocEntry {
    let snippets: Vec<String> = (0..rng.random_range(1..5)).map(|_| snippet(rng)).collect();
    let embeddings =
        rng.random_bool(0.7).then(|| snippets.iter().map(|_| vector(rng, dim)).collect::<Vec<_>>());
    let metadata = match rng.random_range(0..4) {
        0 => None,
        1 => Some(json!({"g": 1, "n": 1.0})),
        2 => Some(json!({"g": 2, "tags": ["a"]})),
        _ => Some(json!({"g": 1.0, "n": 2})),
    };
    DocEntry {
        id: new_id(),
        snippets,
        embeddings,
        metadata: metadata.map(|m| m.as_object().unwrap().clone()),
    }
}

fn record(owner: Uuid, d: &DocEntry) -> Record {
    let mut data = json!({"role": "agent", "title": "t", "content": d.snippets});
    if let Some(e) = &d.embeddings {
        data["embeddings"] = json!(e);
    }
    let mut rec = Record::new(Kind::Doc, d.id, owner, data);
    rec.metadata = d.metadata.clone();
    rec
}

fn filters() -> Vec<Option<Map<String, Value>>> {
    let m = |v: Value| Some(v.as_object().unwrap().clone());
    vec![None, m(json!({"g": 1})), m(json!({"n": 1})), m(json!({"tags": ["a"]})), m(json!({"g": 3}))]
}

fn queries(rng: &mut StdRng, dim: usize) -> Vec<Query> {
    let mut out = Vec::new();
    for _ in 0..40 {
        let text: String = (0..rng.random_range(1..4))
            .map(|_| if rng.random_bool(0.5) { word(rng) } else { WORDS[rng.random_range(0..WORDS.len())] })
            .collect::<Vec<_>>()
            .join(" ");
        let v = vector(rng, dim);
        let filter = filters()[rng.random_range(0..5)].clone();
        let limit = if rng.random_bool(0.5) { 100 } else { rng.random_range(1..6) };
        let alpha = [0.0, 0.3, 0.5, 0.8, 1.0][rng.random_range(0..5)];
        for mut q in [Query::text(text.clone()), Query::vector(v.clone()), Query::hybrid(text, v, alpha)] {
            q.limit = limit;
            q.metadata_filter = filter.clone();
            out.push(q);
        }
    }
    // More distinct terms than the statement written out per term takes.
    out.push(Query::text(WORDS.join(" ")).with_limit(100));
    out.push(Query::text(WORDS.join(" ")).with_limit(3).with_filter(filters()[1].clone().unwrap()));
    out.push(Query::text("y".repeat(300)).with_limit(100));
    out.push(Query::text("o'neil don't").with_limit(100));
    out.push(Query::text("nothing matches this").with_limit(100));
    out.push(Query::vector(vec![0.0; dim]).with_limit(100));
    out
}

/// The same hits: equal scores (up to rounding: the embedded index scores in
/// f32) in the same order, and the
/// same snippets, except that snippets of equal score may come in either order.
fn assert_alike(q: &Query, memory: &[Hit], database: &[Hit]) {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * a.abs().max(b.abs()).max(1.0);
    assert_eq!(memory.len(), database.len(), "{q:?}\nmemory {memory:?}\ndatabase {database:?}");
    for (m, d) in memory.iter().zip(database) {
        assert!(close(m.score, d.score), "{q:?}\nmemory {memory:?}\ndatabase {database:?}");
    }
    for m in memory {
        // Ties at the cut may keep different snippets; elsewhere the same ones.
        let cut = memory.last().map(|l| l.score).unwrap_or_default();
        if close(m.score, cut) && memory.len() == q.limit {
            continue;
        }
        assert!(
            database.iter().any(|d| d.doc_id == m.doc_id
                && d.snippet_index == m.snippet_index
                && close(d.score, m.score)),
            "{q:?}: {m:?} missing\nmemory {memory:?}\ndatabase {database:?}"
        );
    }
}

async fn compare(index: &SearchIndex, db: &dyn DocSearch, owner: OwnerKey, queries: &[Query]) -> usize {
    let mut nonempty = 0;
    for q in queries {
        let memory = index.search(owner, q).unwrap();
        let database = db.search_owner(owner, q).await.unwrap().unwrap();
        assert_alike(q, &memory, &database);
        nonempty += usize::from(!memory.is_empty());
    }
    nonempty
}

#[tokio::test]
async fn the_database_ranks_as_the_embedded_index_does() {
    let Some(db) = TestDb::create().await else { return };
    let store = db.store().await;
    if std::env::var("AGENT_PLATFORM_TEST_PGVECTOR").as_deref() == Ok("1") {
        assert!(store.pgvector().is_some(), "this database was meant to have pgvector");
    }
    eprintln!("pgvector: {:?}", store.pgvector());
    let search = store.doc_search().expect("PostgreSQL searches in the database");
    let index = SearchIndex::new();
    let mut rng = StdRng::seed_from_u64(0x5ea4c4);
    let tenant = new_id();
    let (a, b) = (new_id(), new_id());
    let (key_a, key_b) = (OwnerKey { tenant, owner: a }, OwnerKey { tenant, owner: b });
    let dim = 4;
    let mut docs_a = Vec::new();
    for i in 0..40 {
        let (owner, key) = if i % 4 == 3 { (b, key_b) } else { (a, key_a) };
        let d = doc(&mut rng, dim);
        store
            .commit(tenant, vec![Op::Put { record: record(owner, &d), expect: Expect::Absent }])
            .await
            .unwrap();
        if owner == a {
            docs_a.push(d.id);
        }
        index.upsert_doc(key, d).unwrap();
    }
    // A vector of another dimension is left out by both (the snippet stays text-searchable).
    let odd = DocEntry { embeddings: Some(vec![vec![1.0; dim + 1]]), ..doc(&mut rng, dim) };
    let odd = DocEntry { snippets: vec!["zebra ember".into()], ..odd };
    store.commit(tenant, vec![Op::Put { record: record(a, &odd), expect: Expect::Absent }]).await.unwrap();
    index.upsert_doc(key_a, odd).unwrap();

    let qs = queries(&mut rng, dim);
    assert!(compare(&index, search, key_a, &qs).await > qs.len() / 2, "most queries find something");
    compare(&index, search, key_b, &qs).await;
    assert_eq!(search.owner_snippets(key_a).await.unwrap(), index.snippet_count(key_a));
    assert_eq!(search.owner_dimension(key_a).await.unwrap(), Some(dim));

    // Deleting docs changes both alike (statistics included).
    for id in docs_a.iter().step_by(3) {
        store.commit(tenant, vec![Op::Delete { kind: Kind::Doc, id: *id, version: None }]).await.unwrap();
        index.remove_doc(key_a, *id).unwrap();
    }
    compare(&index, search, key_a, &qs).await;
    assert_eq!(search.owner_snippets(key_a).await.unwrap(), index.snippet_count(key_a));

    // An owner's docs deleted with its scope: nothing left, and the other owner untouched.
    store.commit(tenant, vec![Op::DeleteScope { kind: Kind::Doc, scope: b }]).await.unwrap();
    index.remove_owner(key_b).unwrap();
    assert_eq!(compare(&index, search, key_b, &qs).await, 0);
    assert_eq!(search.owner_snippets(key_b).await.unwrap(), 0);
    compare(&index, search, key_a, &qs).await;

    // Another tenant sees nothing of these owners.
    let stranger = OwnerKey { tenant: new_id(), owner: a };
    assert!(search.search_owner(stranger, &Query::text("ember")).await.unwrap().unwrap().is_empty());

    // A query vector of another dimension is refused alike.
    let wrong = Query::vector(vec![1.0; dim + 2]);
    assert_eq!(
        search.search_owner(key_a, &wrong).await.unwrap(),
        Err(SearchError::DimensionMismatch { expected: dim, got: dim + 2 })
    );
    assert_eq!(
        index.search(key_a, &wrong),
        Err(SearchError::DimensionMismatch { expected: dim, got: dim + 2 })
    );
    store.close();
    db.drop().await;
}

#[tokio::test]
async fn documents_written_before_search_was_in_the_database_are_indexed_at_start() {
    let Some(db) = TestDb::create().await else { return };
    let store = db.store().await;
    let tenant = new_id();
    let owner = new_id();
    let d = DocEntry { snippets: vec!["harbour lattice".into()], ..DocEntry::default() };
    let d = DocEntry { id: new_id(), ..d };
    store.commit(tenant, vec![Op::Put { record: record(owner, &d), expect: Expect::Absent }]).await.unwrap();
    store.close();
    // As a database migrated from the schema before search: no index rows,
    // the doc listed for indexing.
    let client = db.client().await;
    client
        .batch_execute(
            "DELETE FROM search_snippets; DELETE FROM search_owners; \
             INSERT INTO search_backfill (tenant, doc) SELECT tenant, id FROM records WHERE kind = 9",
        )
        .await
        .unwrap();
    let store = db.store().await;
    assert_eq!(store.indexed_at_start(), 1);
    let key = OwnerKey { tenant, owner };
    let hits =
        store.doc_search().unwrap().search_owner(key, &Query::text("harbours")).await.unwrap().unwrap();
    assert_eq!(hits.iter().map(|h| h.doc_id).collect::<Vec<_>>(), vec![d.id]);
    let left: i64 = client.query_one("SELECT count(*) FROM search_backfill", &[]).await.unwrap().get(0);
    assert_eq!(left, 0);
    store.close();
    drop(client);
    db.drop().await;
}
