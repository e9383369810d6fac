//! Benchmark: document search and durable ingest through the application, and
//! the same corpus and queries against SQLite FTS5. Run with
//! `cargo bench -p agent-platform-benches --bench search` (release); it prints figures.
//!
//! Corpus: 100,000 snippets of 20–60 words drawn from a vocabulary of 50,000
//! made-up words with a Zipf(s = 1.07) distribution; fixed seed, fully
//! deterministic (the generator of the search module's scratch bench). All of
//! it belongs to one agent, in documents of 50 snippets.
//!
//! * Ingest: the documents are created with [`App::doc_create`] (the function
//!   behind `POST /api/agents/{id}/docs`) by concurrent creators, committing to
//!   a sled store in a temporary directory with the default durability
//!   (`fsync`), so the store's group commit applies. FTS5 gets the same
//!   documents, one transaction each, in a WAL database with `synchronous=FULL`.
//! * Search: `GET /api/agents/{id}/search`'s domain function [`App::doc_search`]
//!   (owner check, index, titles and snippets read from the store), single-word
//!   and multi-word (OR) queries; also the bare index, to show the split. FTS5
//!   answers the same queries with `bm25()` order and returns the snippet text.

use std::collections::{HashMap, HashSet};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_platform::api::types::{
    CreateAgentRequest, CreateDocRequest, DocContent, DocOwner, OwnerRole, SearchRequest, TextSearchParams,
};
use agent_platform::app::{App, SearchStart, Tenant};
use agent_platform::search::{OwnerKey, Query};
use agent_platform::store::sled_store::{Durability, SledStore};
use rusqlite::{Connection, params};
use uuid::Uuid;

const SNIPPETS: usize = 100_000;
const SNIPPETS_PER_DOC: usize = 50;
const CREATORS: usize = 16;
const VOCABULARY: usize = 50_000;
const ZIPF_S: f64 = 1.07;
const QUERIES_PER_KIND: usize = 500;
const LIMIT: usize = 10;
const SEED: u64 = 0x5EED_2024;
/// Query words are drawn evenly from these frequency-rank buckets (1-based).
const RANK_BUCKETS: [(usize, usize); 5] =
    [(1, 10), (11, 100), (101, 1_000), (1_001, 10_000), (10_001, VOCABULARY)];
/// Targets of the issue.
const TARGET_P50_MS: f64 = 5.0;
const TARGET_INGEST: f64 = 2_000.0;
/// The PostgreSQL issue's target for search in the database.
const TARGET_PG_P50_MS: f64 = 10.0;

mod splitmix;
use splitmix::Rng;

fn vocabulary(rng: &mut Rng) -> Vec<String> {
    const ONSETS: &[&str] = &[
        "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "tr", "st", "kl", "gr",
        "sh",
    ];
    const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ou"];
    let mut seen = HashSet::new();
    let mut words = Vec::with_capacity(VOCABULARY);
    while words.len() < VOCABULARY {
        let syllables = rng.range(2, 4);
        let mut word = String::new();
        for _ in 0..syllables {
            word.push_str(ONSETS[rng.below(ONSETS.len())]);
            word.push_str(VOWELS[rng.below(VOWELS.len())]);
        }
        if rng.below(3) == 0 {
            word.push(['n', 'r', 'k', 'm'][rng.below(4)]);
        }
        if seen.insert(word.clone()) {
            words.push(word);
        }
    }
    words
}

struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut total = 0.0;
        let cdf = (1..=n)
            .map(|rank| {
                total += 1.0 / (rank as f64).powf(s);
                total
            })
            .collect::<Vec<_>>();
        Self { cdf: cdf.into_iter().map(|c| c / total).collect() }
    }
    /// 0-based rank.
    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

fn query_words(rng: &mut Rng, words: &[String], count: usize, salt: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let (lo, hi) = RANK_BUCKETS[(salt + i) % RANK_BUCKETS.len()];
            words[rng.range(lo, hi) - 1].clone()
        })
        .collect()
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Timings {
    p50: Duration,
    p99: Duration,
}

fn time_queries<T>(queries: &[Vec<String>], mut run: impl FnMut(&[String]) -> T) -> (Timings, Vec<T>) {
    for q in queries.iter().take(50) {
        black_box(run(q)); // warm-up
    }
    let mut samples = Vec::with_capacity(queries.len());
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let start = Instant::now();
        let r = black_box(run(q));
        samples.push(start.elapsed());
        results.push(r);
    }
    let t = Timings { p50: percentile(&mut samples, 0.50), p99: percentile(&mut samples, 0.99) };
    (t, results)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn main() {
    let total = Instant::now();
    let mut rng = Rng(SEED);
    let words = vocabulary(&mut rng);
    let zipf = Zipf::new(VOCABULARY, ZIPF_S);
    let snippets: Vec<String> = (0..SNIPPETS)
        .map(|_| {
            let len = rng.range(20, 60);
            (0..len).map(|_| words[zipf.sample(&mut rng)].as_str()).collect::<Vec<_>>().join(" ")
        })
        .collect();
    let corpus_words: usize = snippets.iter().map(|s| s.split(' ').count()).sum();
    let docs: Vec<&[String]> = snippets.chunks(SNIPPETS_PER_DOC).collect();
    println!(
        "corpus: {SNIPPETS} snippets ({} docs of {SNIPPETS_PER_DOC}), {corpus_words} words, \
         vocabulary {VOCABULARY}, Zipf s={ZIPF_S}, seed {SEED:#x}",
        docs.len()
    );

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temp dir");

    // --- ours: durable ingest through the application
    let store = Arc::new(SledStore::open(&dir.path().join("sled"), Durability::Fsync).expect("sled opens"));
    // The index on disk, where the server keeps it.
    let index_dir = dir.path().join("search-index");
    let app =
        rt.block_on(App::open_in(store.clone(), SearchStart::Now, Some(&index_dir))).expect("the app opens");
    let (tenant, owner) = rt.block_on(async {
        let key = app.key_create("bench").await.expect("a key").0;
        let tenant: Tenant = app.authenticate(&key).await.expect("auth").expect("a tenant");
        let req: CreateAgentRequest = serde_json::from_value(serde_json::json!({"name": "bench"})).unwrap();
        let agent = app.agent_create(tenant, req).await.expect("an agent");
        (tenant, DocOwner { id: agent.id, role: OwnerRole::Agent })
    });
    let next = Arc::new(AtomicUsize::new(0));
    let shared: Arc<Vec<Vec<String>>> = Arc::new(docs.iter().map(|d| d.to_vec()).collect());
    let start = Instant::now();
    let doc_numbers: HashMap<Uuid, usize> = rt.block_on(async {
        let creators: Vec<_> = (0..CREATORS)
            .map(|_| {
                let (app, next, docs) = (app.clone(), next.clone(), shared.clone());
                tokio::spawn(async move {
                    let mut created = Vec::new();
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let Some(content) = docs.get(n) else { break };
                        let req = CreateDocRequest {
                            title: format!("doc {n}"),
                            content: DocContent::Many(content.clone()),
                            metadata: None,
                            embeddings: None,
                        };
                        let doc = app.doc_create(tenant, owner, req).await.expect("doc_create");
                        created.push((doc.id, n));
                    }
                    created
                })
            })
            .collect();
        let mut all = HashMap::new();
        for c in creators {
            all.extend(c.await.expect("a creator"));
        }
        all
    });
    let ours_ingest = start.elapsed();
    let key = OwnerKey { tenant: tenant.0, owner: owner.id };
    assert_eq!(app.search.snippet_count(key), SNIPPETS);
    assert_eq!(doc_numbers.len(), docs.len());

    drop(app);
    let start = Instant::now();
    let app = rt
        .block_on(App::open_in(store.clone(), SearchStart::Now, Some(&index_dir)))
        .expect("the app reopens");
    let rebuild = start.elapsed();
    assert_eq!(app.search.snippet_count(key), SNIPPETS);

    // --- FTS5: durable ingest, one transaction per document
    let db = Connection::open(dir.path().join("fts.sqlite")).expect("sqlite");
    db.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61 remove_diacritics 2');",
    )
    .expect("fts5 table");
    let start = Instant::now();
    for (d, doc) in docs.iter().enumerate() {
        let tx = db.unchecked_transaction().expect("tx");
        {
            let mut insert =
                tx.prepare_cached("INSERT INTO t(rowid, body) VALUES (?1, ?2)").expect("prepare");
            for (i, s) in doc.iter().enumerate() {
                insert.execute(params![(d * SNIPPETS_PER_DOC + i) as i64 + 1, s]).expect("insert");
            }
        }
        tx.commit().expect("commit");
    }
    let fts_ingest = start.elapsed();

    let ours_rate = SNIPPETS as f64 / ours_ingest.as_secs_f64();
    let fts_rate = SNIPPETS as f64 / fts_ingest.as_secs_f64();
    println!();
    println!("durable ingest (snippets/s), target ≥ {TARGET_INGEST:.0}:");
    println!(
        "  ours   {ours_rate:>10.0}  ({:.2} s; App::doc_create, {CREATORS} concurrent creators, sled fsync) {}",
        ours_ingest.as_secs_f64(),
        verdict(ours_rate >= TARGET_INGEST)
    );
    println!(
        "  fts5   {fts_rate:>10.0}  ({:.2} s; one transaction per doc, WAL, synchronous=FULL)",
        fts_ingest.as_secs_f64()
    );
    println!("  ratio  {:>10.2}  (ours / fts5, higher is better for ours)", ours_rate / fts_rate);
    println!("  index opened at start and checked against the store: {:.2} s", rebuild.as_secs_f64());

    // --- queries
    let single: Vec<Vec<String>> =
        (0..QUERIES_PER_KIND).map(|i| query_words(&mut rng, &words, 1, i)).collect();
    let multi: Vec<Vec<String>> = (0..QUERIES_PER_KIND)
        .map(|i| {
            let count = rng.range(2, 3);
            query_words(&mut rng, &words, count, i)
        })
        .collect();

    let mut fts_query = db
        .prepare("SELECT rowid, body FROM t WHERE t MATCH ?1 ORDER BY bm25(t) LIMIT ?2")
        .expect("prepare query");
    let mut run_fts = |q: &[String]| -> Vec<usize> {
        let expr = q.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" OR ");
        fts_query
            .query_map(params![expr, LIMIT as i64], |row| {
                Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
            })
            .expect("fts query")
            .map(|r| r.expect("row").0 as usize - 1)
            .collect()
    };
    let run_app = |q: &[String]| -> Vec<usize> {
        let params = TextSearchParams { text: q.join(" "), limit: LIMIT as i64, metadata_filter: None };
        let req: SearchRequest = params.into();
        rt.block_on(app.doc_search(tenant, owner, req))
            .expect("search")
            .docs
            .into_iter()
            .map(|d| doc_numbers[&d.id] * SNIPPETS_PER_DOC + d.snippet.index)
            .collect()
    };
    let run_index = |q: &[String]| -> usize {
        app.search.search(key, &Query::text(q.join(" ")).with_limit(LIMIT)).expect("search").len()
    };

    println!();
    println!(
        "text search: {QUERIES_PER_KIND} queries per kind, top {LIMIT}, words drawn evenly from rank buckets {RANK_BUCKETS:?}"
    );
    println!(
        "  app = App::doc_search (owner check + index + titles/snippets from the store); index = SearchIndex alone"
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9} {:>10}",
        "kind",
        "app p50",
        "app p99",
        "index p50",
        "index p99",
        "fts5 p50",
        "fts5 p99",
        "p50 ratio",
        "p99 ratio",
        "overlap@10"
    );
    let mut met = true;
    for (kind, queries) in [("single-word", &single), ("multi-word OR", &multi)] {
        let (ours, ours_hits) = time_queries(queries, run_app);
        let (index, _) = time_queries(queries, run_index);
        let (fts, fts_hits) = time_queries(queries, &mut run_fts);
        let overlap: f64 = ours_hits
            .iter()
            .zip(&fts_hits)
            .map(|(a, b)| {
                let denom = a.len().max(b.len());
                if denom == 0 {
                    1.0
                } else {
                    a.iter().filter(|x| b.contains(x)).count() as f64 / denom as f64
                }
            })
            .sum::<f64>()
            / queries.len() as f64;
        met &= ms(ours.p50) <= TARGET_P50_MS && ours.p50 <= fts.p50;
        println!(
            "{:<14} {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>8.3}ms {:>9.3} {:>9.3} {:>10.2}",
            kind,
            ms(ours.p50),
            ms(ours.p99),
            ms(index.p50),
            ms(index.p99),
            ms(fts.p50),
            ms(fts.p99),
            ms(ours.p50) / ms(fts.p50),
            ms(ours.p99) / ms(fts.p99),
            overlap
        );
    }
    println!();
    println!("ratio = app / fts5 (lower is better for ours); overlap@10 = mean shared top-10 hits");
    println!("(rankings differ slightly: Snowball vs Porter stemmer, different idf formula)");
    println!(
        "targets: app text search p50 ≤ {TARGET_P50_MS} ms and ≤ fts5 p50: {}; ingest ≥ {TARGET_INGEST:.0} snippets/s: {}",
        verdict(met),
        verdict(ours_rate >= TARGET_INGEST)
    );
    let sled_hits: Vec<Vec<usize>> = single.iter().chain(&multi).map(|q| run_app(q)).collect();
    drop(app);
    store.close();
    postgres(&rt, &shared, &single, &multi, &sled_hits);
    println!("total bench time {:.1} s", total.elapsed().as_secs_f64());
}

/// The same ingest and queries on PostgreSQL, where search runs in the
/// database, when `AGENT_PLATFORM_BENCH_DATABASE_URL` names a server (a URL
/// whose user may create databases; a cluster with fsync on, for durable figures).
fn postgres(
    rt: &tokio::runtime::Runtime,
    docs: &Arc<Vec<Vec<String>>>,
    single: &[Vec<String>],
    multi: &[Vec<String>],
    sled_hits: &[Vec<usize>],
) {
    let Ok(admin) = std::env::var("AGENT_PLATFORM_BENCH_DATABASE_URL") else {
        println!(
            "\npostgres: skipped (set AGENT_PLATFORM_BENCH_DATABASE_URL to a PostgreSQL URL whose user may \
             create databases to measure search in the database)"
        );
        return;
    };
    use agent_platform::config::{StoreBackend, StoreConfig};
    use agent_platform::store::pg_store::{self, PgStore};
    let name = format!("bench_search_{}", Uuid::now_v7().simple());
    let (app, store) = rt.block_on(async {
        let url = pg_store::create_database(&admin, &name).await.expect("a bench database");
        let cfg = StoreConfig {
            backend: StoreBackend::Postgres,
            url: Some(url),
            pool_size: 2 * CREATORS,
            statement_timeout_s: 60.0,
            connect_timeout_s: 10.0,
        };
        let store = Arc::new(
            PgStore::connect(&cfg, agent_platform::app::records::STORE_DOMAIN).await.expect("connect"),
        );
        (App::new(store.clone()).await.expect("the app opens"), store)
    });
    let (tenant, owner) = rt.block_on(async {
        let key = app.key_create("bench").await.expect("a key").0;
        let tenant: Tenant = app.authenticate(&key).await.expect("auth").expect("a tenant");
        let req: CreateAgentRequest = serde_json::from_value(serde_json::json!({"name": "bench"})).unwrap();
        let agent = app.agent_create(tenant, req).await.expect("an agent");
        (tenant, DocOwner { id: agent.id, role: OwnerRole::Agent })
    });
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let doc_numbers: HashMap<Uuid, usize> = rt.block_on(async {
        let creators: Vec<_> = (0..CREATORS)
            .map(|_| {
                let (app, next, docs) = (app.clone(), next.clone(), docs.clone());
                tokio::spawn(async move {
                    let mut created = Vec::new();
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        let Some(content) = docs.get(n) else { break };
                        let req = CreateDocRequest {
                            title: format!("doc {n}"),
                            content: DocContent::Many(content.clone()),
                            metadata: None,
                            embeddings: None,
                        };
                        let doc = app.doc_create(tenant, owner, req).await.expect("doc_create");
                        created.push((doc.id, n));
                    }
                    created
                })
            })
            .collect();
        let mut all = HashMap::new();
        for c in creators {
            all.extend(c.await.expect("a creator"));
        }
        all
    });
    let ingest = start.elapsed();
    assert_eq!(rt.block_on(app.searchable_snippets(tenant, owner.id)).expect("count"), SNIPPETS);
    let run_app = |q: &[String]| -> Vec<usize> {
        let params = TextSearchParams { text: q.join(" "), limit: LIMIT as i64, metadata_filter: None };
        rt.block_on(app.doc_search(tenant, owner, params.into()))
            .expect("search")
            .docs
            .into_iter()
            .map(|d| doc_numbers[&d.id] * SNIPPETS_PER_DOC + d.snippet.index)
            .collect()
    };
    println!();
    println!(
        "postgres: the same {} docs through App::doc_create ({CREATORS} creators) into a new database; \
         search in the database (GIN + BM25 in SQL), through App::doc_search",
        docs.len()
    );
    println!(
        "  durable ingest {:.0} snippets/s ({:.2} s)",
        SNIPPETS as f64 / ingest.as_secs_f64(),
        ingest.as_secs_f64()
    );
    println!("{:<14} {:>10} {:>10} {:>16}", "kind", "p50", "p99", "overlap w/ sled");
    let mut met = true;
    let mut expected = sled_hits.iter();
    for (kind, queries) in [("single-word", single), ("multi-word OR", multi)] {
        let (t, hits) = time_queries(queries, run_app);
        // Equal scores are ordered by doc id, and the ids differ between the
        // two runs: at the cut, ties may keep other snippets.
        let overlap = hits
            .iter()
            .map(|h| {
                let sled = expected.next().expect("as many queries");
                let denom = h.len().max(sled.len());
                if denom == 0 {
                    1.0
                } else {
                    h.iter().filter(|x| sled.contains(x)).count() as f64 / denom as f64
                }
            })
            .sum::<f64>()
            / queries.len() as f64;
        met &= ms(t.p50) <= TARGET_PG_P50_MS;
        println!("{:<14} {:>8.3}ms {:>8.3}ms {:>16.3}", kind, ms(t.p50), ms(t.p99), overlap);
    }
    println!("target: p50 ≤ {TARGET_PG_P50_MS} ms at {SNIPPETS} snippets: {}", verdict(met));
    drop(app);
    store.close();
    let _ = rt.block_on(pg_store::drop_database(&admin, &name));
}
