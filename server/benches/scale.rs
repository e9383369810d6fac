//! The embedded store at scale: many messages and snippets written through
//! the application, then a restart of the release server on them (after the
//! index and store closed as a server's do, and a `sync`: the restart is
//! timed on a machine at rest, not under the write-back of the load).
//!
//! ```sh
//! cargo bench -p agent-platform-benches --bench scale -- [MESSAGES] [SNIPPETS]
//! ```
//!
//! Defaults: 100,000 messages (sessions of 1,000) and 100,000 snippets (docs of
//! 100, on one agent), plus an agent of 10,000 snippets and a tenant with
//! almost nothing. The README gives the big run (1,000,000 of each). Prints:
//! the load rates; from the server process's start, the time to its first
//! `/api/healthz` answer and to search being ready; its RSS once ready and
//! after the searches; the data dir's size; one-word and three-word search
//! p50/p99 on the big and the 10,000-snippet agent; page 1 of a session's
//! messages in the big tenant vs the almost empty one. `SCALE_DATA_DIR=DIR`
//! keeps the data dir in DIR (which must not exist yet).

mod process;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_platform::api::types::{
    CreateAgentRequest, CreateDocRequest, CreateMessageRequest, CreateSessionRequest, DocContent, DocOwner,
    OwnerRole,
};
use agent_platform::app::{App, SearchStart, Tenant};
use agent_platform::server::SEARCH_INDEX_DIR;
use agent_platform::store::sled_store::{Durability, SledStore};
use serde_json::json;
use uuid::Uuid;

const SESSION_MESSAGES: usize = 1_000;
const DOC_SNIPPETS: usize = 100;
const SMALL_AGENT_SNIPPETS: usize = 10_000;
const WRITERS: usize = 16;
const QUERIES: usize = 200;
const VOCABULARY: usize = 20_000;

/// xorshift64*: the same corpus every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A word of the vocabulary, the first ones far more often (roughly Zipf).
    fn word(&mut self) -> String {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        let rank = ((VOCABULARY as f64).powf(u) as usize).clamp(1, VOCABULARY);
        format!("w{rank}")
    }

    fn sentence(&mut self, words: usize) -> String {
        (0..words).map(|_| self.word()).collect::<Vec<_>>().join(" ")
    }
}

fn args() -> (usize, usize) {
    let numbers: Vec<usize> =
        std::env::args().skip(1).filter_map(|a| a.replace(['_', ','], "").parse().ok()).collect();
    (numbers.first().copied().unwrap_or(100_000), numbers.get(1).copied().unwrap_or(100_000))
}

/// (RSS, peak RSS, of the RSS: anonymous memory, mapped files) in MB.
fn rss_mb(pid: u32) -> (u64, u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024)
    };
    (field("VmRSS:"), field("VmHWM:"), field("RssAnon:"), field("RssFile:"))
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// What the load left for the measurements.
struct Loaded {
    key: String,
    empty_key: String,
    big_agent: Uuid,
    small_agent: Uuid,
    big_session: Uuid,
    empty_session: Uuid,
}

/// Runs `jobs` jobs on [`WRITERS`] tasks; `job(app, n)` does the n-th.
async fn parallel<F, Fut>(app: &App, jobs: usize, job: F)
where
    F: Fn(App, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let job = Arc::new(job);
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let (app, next, job) = (app.clone(), next.clone(), job.clone());
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= jobs {
                        break;
                    }
                    job(app.clone(), n).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a writer");
    }
}

async fn agent(app: &App, t: Tenant, name: &str) -> Uuid {
    let req: CreateAgentRequest = serde_json::from_value(json!({"name": name})).unwrap();
    app.agent_create(t, req).await.expect("an agent").id
}

async fn session(app: &App, t: Tenant, agent: Uuid) -> Uuid {
    let req: CreateSessionRequest = serde_json::from_value(json!({"agent": agent})).unwrap();
    app.session_create(t, req).await.expect("a session").id
}

async fn docs(app: &App, t: Tenant, owner: Uuid, snippets: usize, seed: u64) {
    let owner = DocOwner { id: owner, role: OwnerRole::Agent };
    parallel(app, snippets.div_ceil(DOC_SNIPPETS), move |app, n| async move {
        let mut rng = Rng(seed ^ (n as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let content = (0..DOC_SNIPPETS).map(|_| rng.sentence(12)).collect();
        let req = CreateDocRequest {
            title: format!("doc {n}"),
            content: DocContent::Many(content),
            metadata: None,
            embeddings: None,
        };
        app.doc_create(t, owner, req).await.expect("doc_create");
    })
    .await;
}

async fn load(data: &Path, messages: usize, snippets: usize) -> Loaded {
    let store = Arc::new(SledStore::open(data, Durability::Fsync).expect("sled opens"));
    // The index where the server keeps it, so that its start opens it.
    let index = data.join(SEARCH_INDEX_DIR);
    let app = App::open_in(store.clone(), SearchStart::Now, Some(&index)).await.expect("the app opens");
    let key = app.key_create("big").await.expect("a key").0;
    let empty_key = app.key_create("empty").await.expect("a key").0;
    let t = app.authenticate(&key).await.unwrap().expect("a tenant");
    let empty = app.authenticate(&empty_key).await.unwrap().expect("a tenant");

    let big_agent = agent(&app, t, "big").await;
    let small_agent = agent(&app, t, "small").await;
    let sessions = messages.div_ceil(SESSION_MESSAGES).max(1);
    let mut ids = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        ids.push(session(&app, t, big_agent).await);
    }
    let ids = Arc::new(ids);
    let start = Instant::now();
    // Appended 100 at a time, as a client that saves a chat's turns would.
    let batches = messages.div_ceil(100);
    let session_ids = ids.clone();
    parallel(&app, batches, move |app, n| {
        let session = session_ids[n * 100 / SESSION_MESSAGES];
        async move {
            let mut rng = Rng(n as u64 + 7);
            let batch = (0..100)
                .map(|i| CreateMessageRequest {
                    role: serde_json::from_value(json!(if i % 2 == 0 { "user" } else { "assistant" }))
                        .expect("a role"),
                    content: rng.sentence(20),
                    name: None,
                    tool_calls: None,
                    tool_call_id: None,
                    metadata: None,
                    parts: None,
                })
                .collect();
            app.append_messages(t, session, batch, |_| None::<()>).await.expect("append");
        }
    })
    .await;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "load: {messages} messages in {sessions} sessions, {:.0} messages/s (durable, 100 per commit)",
        messages as f64 / secs
    );
    let start = Instant::now();
    docs(&app, t, big_agent, snippets, 1).await;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "load: {snippets} snippets on one agent, {:.0} snippets/s (durable, docs of {DOC_SNIPPETS})",
        snippets as f64 / secs
    );
    docs(&app, t, small_agent, SMALL_AGENT_SNIPPETS, 2).await;

    let empty_agent = agent(&app, empty, "lonely").await;
    let empty_session = session(&app, empty, empty_agent).await;
    let few = (0..10)
        .map(|i| CreateMessageRequest {
            role: serde_json::from_value(json!("user")).expect("a role"),
            content: format!("message {i}"),
            name: None,
            tool_calls: None,
            tool_call_id: None,
            metadata: None,
            parts: None,
        })
        .collect();
    app.append_messages(empty, empty_session, few, |_| None::<()>).await.expect("append");
    // As the server stops: the index commits its tail, the store has sled
    // snapshot its page table (so the next start replays no log) and notes a
    // clean close.
    app.search.close().expect("the search index closes");
    drop(app);
    assert!(store.close(), "the store closes cleanly");
    // The restart is timed on a machine at rest, not under the write-back of
    // the 1.5 GB just written.
    let synced = std::process::Command::new("sync").status().is_ok_and(|s| s.success());
    assert!(synced, "`sync` runs");
    Loaded { key, empty_key, big_agent, small_agent, big_session: ids[ids.len() / 2], empty_session }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// p50 and p99 (ms) of GETs of `paths` (cycled) with `key`.
async fn latencies(http: &reqwest::Client, base: &str, key: &str, paths: &[String]) -> (f64, f64) {
    let mut times = Vec::with_capacity(QUERIES);
    for i in 0..QUERIES {
        let start = Instant::now();
        let r =
            http.get(format!("{base}{}", paths[i % paths.len()])).bearer_auth(key).send().await.expect("GET");
        assert!(r.status().is_success(), "{} {}", r.status(), paths[i % paths.len()]);
        r.bytes().await.expect("a body");
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (percentile(&times, 0.5), percentile(&times, 0.99))
}

async fn restart(data: &Path, loaded: &Loaded) {
    let bin = process::binary();
    let started = Instant::now();
    let server = process::serve(&bin, data, None, &[], Duration::from_secs(600));
    let (base, pid) = (server.base.clone(), server.child.id());
    let http = reqwest::Client::new();
    let first = first_health(&http, &base, started).await;
    println!(
        "restart: first /api/healthz answer {:.3} s after the process started (search: {})",
        first.0.as_secs_f64(),
        first.1["search"]
    );
    let page = format!("/api/sessions/{}/messages?limit=100", loaded.big_session);
    let (p50, _) = latencies(&http, &base, &loaded.key, std::slice::from_ref(&page)).await;
    println!("restart: page 1 of messages answers while search warms, p50 {p50:.2} ms");
    let ready = loop {
        if healthz(&http, &base).await.is_some_and(|h| h["search"] == "ready") {
            break started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let (rss, peak, anon, file) = rss_mb(pid);
    println!(
        "restart: search ready {:.2} s after the process started; RSS {rss} MB (peak {peak} MB; \
         anonymous {anon} MB, mapped files {file} MB)",
        ready.as_secs_f64()
    );
    println!(
        "disk: {:.0} MB in the data dir; the search index in {} segments",
        dir_size(data) as f64 / (1u64 << 20) as f64,
        index_segments(data)
    );

    let mut rng = Rng(99);
    let one: Vec<String> = (0..QUERIES).map(|_| rng.word()).collect();
    let three: Vec<String> = (0..QUERIES).map(|_| rng.sentence(3).replace(' ', "+")).collect();
    for (name, agent) in
        [("the big agent", loaded.big_agent), ("the 10,000-snippet agent", loaded.small_agent)]
    {
        for (what, words) in [("one word", &one), ("three words", &three)] {
            let paths: Vec<String> =
                words.iter().map(|w| format!("/api/agents/{agent}/search?text={w}")).collect();
            let (p50, p99) = latencies(&http, &base, &loaded.key, &paths).await;
            println!("search {what} on {name}: p50 {p50:.2} ms, p99 {p99:.2} ms");
        }
    }
    let (big50, big99) = latencies(&http, &base, &loaded.key, std::slice::from_ref(&page)).await;
    let empty_page = format!("/api/sessions/{}/messages?limit=100", loaded.empty_session);
    let (e50, e99) = latencies(&http, &base, &loaded.empty_key, &[empty_page]).await;
    println!(
        "page 1 of a session's messages (100 of 1,000): big tenant p50 {big50:.2} / p99 {big99:.2} ms; \
         almost empty tenant (10 messages) p50 {e50:.2} / p99 {e99:.2} ms"
    );
    let (rss, peak, anon, file) = rss_mb(pid);
    println!(
        "after the searches: RSS {rss} MB (peak {peak} MB; anonymous {anon} MB, mapped files {file} MB)"
    );
    // OpenAI's cursor paging of the same session's items: from the start, and
    // after the 900th message (the 100th newest), which a cursor reaches
    // through the index rather than by reading the 900 before it.
    let newest: serde_json::Value = http
        .get(format!("{base}{page}"))
        .bearer_auth(&loaded.key)
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("a page");
    let deep = newest["items"][99]["id"].as_str().expect("100 messages");
    let items = format!("/v1/conversations/{}/items?order=asc&limit=20", loaded.big_session);
    let (first50, _) = latencies(&http, &base, &loaded.key, std::slice::from_ref(&items)).await;
    let (deep50, _) = latencies(&http, &base, &loaded.key, &[format!("{items}&after={deep}")]).await;
    println!(
        "conversation items (20) of that session: from the start p50 {first50:.2} ms, after its 900th \
         message p50 {deep50:.2} ms"
    );
    drop(server);
    // Once more, after that kill: sled reads its log from the snapshot of its
    // page table written at the start above (an unclean stop writes none).
    let started = Instant::now();
    let server = process::serve(&bin, data, None, &[], Duration::from_secs(600));
    let (again, _) = first_health(&http, &server.base, started).await;
    println!(
        "restart again, after a kill: first /api/healthz answer {:.3} s after the process started",
        again.as_secs_f64()
    );
}

/// How many segments the search index's last commit has (tantivy's `meta.json`).
fn index_segments(data: &Path) -> usize {
    let meta = data.join(SEARCH_INDEX_DIR).join("meta.json");
    std::fs::read(meta)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|m| m["segments"].as_array().map(Vec::len))
        .unwrap_or(0)
}

/// `/api/healthz`'s body, when it answers 2xx.
async fn healthz(http: &reqwest::Client, base: &str) -> Option<serde_json::Value> {
    match http.get(format!("{base}/api/healthz")).send().await {
        Ok(r) if r.status().is_success() => r.json().await.ok(),
        _ => None,
    }
}

/// Polls `/api/healthz` until it answers 2xx: when (since `started`), and its body.
async fn first_health(http: &reqwest::Client, base: &str, started: Instant) -> (Duration, serde_json::Value) {
    loop {
        if let Some(body) = healthz(http, base).await {
            return (started.elapsed(), body);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn main() {
    let (messages, snippets) = args();
    println!(
        "agent-platform scale benchmark ({} cores): {messages} messages, {snippets} snippets + {SMALL_AGENT_SNIPPETS} on a second agent",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    // SCALE_DATA_DIR keeps the data dir for a look afterwards (it must not exist yet).
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = std::env::var_os("SCALE_DATA_DIR").map_or_else(|| dir.path().join("data"), Into::into);
    assert!(!data.exists(), "{} exists already", data.display());
    let loaded = rt.block_on(load(&data, messages, snippets));
    rt.block_on(restart(&data, &loaded));
}
