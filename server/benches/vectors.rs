//! Benchmark: vector search of one owner holding many vectors, exact (every
//! vector scored, what owners below the graph threshold get) against its
//! approximate-nearest-neighbour graph (usearch HNSW, memory-mapped from its
//! file, candidates scored again exactly), in one run: recall@10 of the graph
//! against the exact answers, p50/p99 of both, the graph's build time and
//! file size, and the time to reopen the index and answer the first search.
//!
//! `cargo bench -p agent-platform-benches --bench vectors -- [vectors] [dim]`
//! (default 200,000 × 384). Vectors: unit vectors around 1,000 random centres
//! (fixed seed; noise as wide as the centres' spread, so clusters overlap), one per snippet, in docs of 10 snippets, written through the
//! search index on disk (the index the embedded store's documents go to);
//! queries: 300 more drawn the same way. Targets (issue 14): recall@10 ≥ 0.95,
//! the graph faster than the exact scan.

use std::time::{Duration, Instant};

use agent_platform::search::{DocEntry, Hit, IndexChange, OwnerKey, Query, SearchIndex};
use uuid::Uuid;

const CENTRES: usize = 1_000;
const QUERIES: usize = 300;
const PER_DOC: usize = 10;
const SEED: u64 = 0x7EC7_0125;
const TARGET_RECALL: f64 = 0.95;

mod splitmix;
use splitmix::Rng;

fn args() -> (usize, usize) {
    let numbers: Vec<usize> =
        std::env::args().skip(1).filter_map(|a| a.replace(['_', ','], "").parse().ok()).collect();
    (numbers.first().copied().unwrap_or(200_000), numbers.get(1).copied().unwrap_or(384))
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort_unstable();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1e3
}

fn time_all(index: &SearchIndex, owner: OwnerKey, queries: &[Query]) -> (f64, f64, Vec<Vec<Hit>>) {
    let mut times = Vec::with_capacity(queries.len());
    let mut answers = Vec::with_capacity(queries.len());
    for q in queries {
        let t = Instant::now();
        let hits = index.search(owner, q).expect("search");
        times.push(t.elapsed());
        answers.push(hits);
    }
    (percentile(&mut times, 0.5), percentile(&mut times, 0.99), answers)
}

fn recall(exact: &[Vec<Hit>], got: &[Vec<Hit>]) -> f64 {
    let mut same = 0usize;
    let mut total = 0usize;
    for (want, got) in exact.iter().zip(got) {
        total += want.len();
        same += got
            .iter()
            .filter(|h| want.iter().any(|w| (w.doc_id, w.snippet_index) == (h.doc_id, h.snippet_index)))
            .count();
    }
    same as f64 / total.max(1) as f64
}

fn main() {
    let (n, dim) = args();
    println!("vector search: {n} vectors of {dim} dimensions in one owner, {QUERIES} queries, top 10");
    let mut rng = Rng(SEED);
    let centres: Vec<Vec<f32>> = (0..CENTRES).map(|_| (0..dim).map(|_| rng.signed()).collect()).collect();
    let draw = |rng: &mut Rng| -> Vec<f32> {
        let c = &centres[(rng.next_u64() % CENTRES as u64) as usize];
        c.iter().map(|x| x + rng.signed()).collect()
    };
    let owner = OwnerKey { tenant: Uuid::from_u128(1), owner: Uuid::from_u128(2) };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("index");
    let index = SearchIndex::open(&path).expect("open");
    index.set_vector_graph_min(u64::MAX);

    let t = Instant::now();
    let mut written = 0;
    while written < n {
        let changes: Vec<IndexChange> = (0..100)
            .map_while(|_| {
                if written >= n {
                    return None;
                }
                let k = PER_DOC.min(n - written);
                written += k;
                let doc = DocEntry {
                    id: Uuid::now_v7(),
                    snippets: vec!["v".to_string(); k],
                    embeddings: Some((0..k).map(|_| draw(&mut rng)).collect()),
                    metadata: None,
                };
                Some(IndexChange::Upsert(owner, SearchIndex::prepare(doc)))
            })
            .collect();
        index.apply(changes).expect("apply");
    }
    index.flush().expect("flush");
    println!("  indexed in {:.1} s", t.elapsed().as_secs_f64());
    let queries: Vec<Query> = (0..QUERIES).map(|_| Query::vector(draw(&mut rng))).collect();

    let (exact_p50, exact_p99, exact) = time_all(&index, owner, &queries);
    println!("  exact (every vector scored): p50 {exact_p50:.2} ms, p99 {exact_p99:.2} ms");

    let t = Instant::now();
    let size = index.build_vector_graph(owner).expect("build");
    let built = t.elapsed();
    let file: u64 = std::fs::read_dir(path.join("ann"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "  graph: {size} vectors, built in {:.1} s (one thread), file {:.0} MB",
        built.as_secs_f64(),
        file as f64 / 1e6
    );
    index.set_vector_graph_min(1);
    let (graph_p50, graph_p99, approx) = time_all(&index, owner, &queries);
    let r = recall(&exact, &approx);
    println!("  graph: p50 {graph_p50:.2} ms, p99 {graph_p99:.2} ms, recall@10 {r:.4}");

    index.close().expect("close");
    drop(index);
    let t = Instant::now();
    let index = SearchIndex::open(&path).expect("reopen");
    index.set_vector_graph_min(1);
    let first = index.search(owner, &queries[0]).expect("search");
    let reopened = t.elapsed();
    assert_eq!(first.len(), exact[0].len());
    let (again_p50, _, again) = time_all(&index, owner, &queries);
    println!(
        "  reopened and first search answered in {:.0} ms; p50 then {again_p50:.2} ms, recall@10 {:.4}",
        reopened.as_secs_f64() * 1e3,
        recall(&exact, &again)
    );

    let recall_ok = r >= TARGET_RECALL;
    let faster = graph_p50 < exact_p50;
    println!(
        "targets: recall@10 >= {TARGET_RECALL}: {} ({r:.4}); graph p50 below exact p50: {} ({:.1}x)",
        if recall_ok { "met" } else { "NOT met" },
        if faster { "met" } else { "NOT met" },
        exact_p50 / graph_p50
    );
    if !recall_ok {
        std::process::exit(1);
    }
}
