//! HTTP benchmark: the cost of our stack against a bare Dropshot endpoint, and
//! durable writes with group commit. Run with `cargo bench -p agent-platform-benches --bench http`.
//!
//! 1. `GET /api/agents/{id}` (auth, store read, JSON) against a bare Dropshot
//!    endpoint answering a constant JSON of similar size, same load, same run.
//! 2. Durable `POST /api/agents` at 1 and at 32 concurrent clients, then at
//!    32 clients taking turns with the store's own commits at 32 writers on
//!    the same store (what the HTTP layer keeps of group commit).
//!
//! 3. The same GETs and POSTs on each backend, servers as processes: sled,
//!    PostgreSQL with one server, and with two (see `http_backends`; needs
//!    `AGENT_PLATFORM_BENCH_DATABASE_URL`).
//!
//! `cargo bench -p agent-platform-benches --bench http -- backends` runs part 3
//! alone.
//!
//! Targets: GET ≥ 0.5× bare; writes at 32 clients ≥ 4,000/s, ≥ 2.5× the
//! rate at 1 client and ≥ 0.8× the store's own; no request left hanging. On
//! PostgreSQL: GET ≥ 0.5× sled's, writes at 32 clients ≥ 5,000/s, two servers
//! ≥ 1.5× one's GETs (each server given the same CPU: a core each, or on a small
//! machine a share of one, see `http_backends`).

mod http_backends;
mod process;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_platform::config::Config;
use agent_platform::store::sled_store::Durability;
use bytes::Bytes;
use dropshot::{
    ApiDescription, ConfigDropshot, HttpError, HttpResponseOk, RequestContext, ServerBuilder, endpoint,
};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

const READ_SECS: f64 = 4.0;
const WRITE_SECS: f64 = 4.0;
const READ_CLIENTS: usize = 16;
/// Rounds of HTTP writes and the store's own writes, each a turn of both
/// (`TURN_SECS` each, which goes first alternating); the median of the rounds'
/// ratios is the figure. The disk's own rate drifts by up to 2× from second to
/// second here, so short turns close together, many of them, and the median.
const ROUNDS: usize = 9;
const TURN_SECS: f64 = 2.0;

#[endpoint { method = GET, path = "/bare" }]
async fn bare(
    rqctx: RequestContext<Arc<serde_json::Value>>,
) -> Result<HttpResponseOk<serde_json::Value>, HttpError> {
    Ok(HttpResponseOk((**rqctx.context()).clone()))
}

struct Figures {
    count: usize,
    errors: usize,
    secs: f64,
    lat: Vec<Duration>,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.count as f64 / self.secs
    }
    fn pct(&self, p: f64) -> Duration {
        if self.lat.is_empty() {
            return Duration::ZERO;
        }
        self.lat[((self.lat.len() as f64 - 1.0) * p).round() as usize]
    }
    fn line(&self, name: &str) -> String {
        format!(
            "{name:<34} {:>10.0} req/s   p50 {:>8.3} ms   p99 {:>8.3} ms   errors {}",
            self.rate(),
            self.pct(0.50).as_secs_f64() * 1e3,
            self.pct(0.99).as_secs_f64() * 1e3,
            self.errors
        )
    }
}

/// One request of the load: to the server at `base` (`http://host:port`).
struct Req {
    base: String,
    method: hyper::Method,
    path: String,
    auth: Option<String>,
    /// A JSON body.
    body: Option<String>,
}

impl Req {
    fn get(base: &str, path: String, auth: Option<&str>) -> Req {
        Req { base: base.into(), method: hyper::Method::GET, path, auth: auth.map(Into::into), body: None }
    }
    fn post(base: &str, path: &str, auth: &str, body: String) -> Req {
        let (base, path, auth) = (base.into(), path.into(), Some(auth.into()));
        Req { base, method: hyper::Method::POST, path, auth, body: Some(body) }
    }
}

type Conn = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A keep-alive HTTP/1.1 connection to `base`, driven on its own task.
async fn connect(base: &str) -> Option<Conn> {
    let stream = tokio::net::TcpStream::connect(base.strip_prefix("http://")?).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(send)
}

/// Sends `r` on `conn` and reads the whole answer: whether it was a 2xx.
async fn send(conn: &mut Conn, r: Req) -> bool {
    let host = r.base.strip_prefix("http://").unwrap_or(&r.base);
    let mut b = hyper::Request::builder().method(r.method).uri(r.path).header("host", host);
    if let Some(a) = r.auth {
        b = b.header("authorization", a);
    }
    if r.body.is_some() {
        b = b.header("content-type", "application/json");
    }
    let body = Full::new(r.body.map(Bytes::from).unwrap_or_default());
    let Ok(req) = b.body(body) else { return false };
    if conn.ready().await.is_err() {
        return false;
    }
    match conn.send_request(req).await {
        Ok(res) => res.status().is_success() && res.into_body().collect().await.is_ok(),
        Err(_) => false,
    }
}

/// `clients` loops sending `make(i)` for `secs`; every request must finish
/// (within 30 s). Each client keeps one connection of hyper's bare HTTP/1.1
/// client: the load generator shares the cores with the server, so it is kept
/// as light as it can be (with `reqwest`, whose pool and URL handling cost more,
/// our GETs measured 27–33k/s on 2 cores where this client measures 48–50k/s).
async fn load<F>(clients: usize, secs: f64, make: F) -> Figures
where
    F: Fn(usize) -> Req + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let (mut lat, mut errors) = (Vec::new(), 0usize);
            let mut conn: Option<Conn> = None;
            let mut i = c * 1_000_000;
            while Instant::now() < deadline {
                let r = make(i);
                i += 1;
                let t = Instant::now();
                let ok = tokio::time::timeout(Duration::from_secs(30), async {
                    if conn.as_ref().is_none_or(|c| c.is_closed()) {
                        conn = connect(&r.base).await;
                    }
                    match conn.as_mut() {
                        Some(c) => send(c, r).await,
                        None => false,
                    }
                })
                .await;
                match ok {
                    Ok(true) => lat.push(t.elapsed()),
                    Ok(false) | Err(_) => {
                        errors += 1;
                        conn = None;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("a load task finished (no request left hanging)");
        all.extend(l);
        errors += e;
    }
    let secs = start.elapsed().as_secs_f64();
    all.sort();
    Figures { count: all.len(), errors, secs, lat: all }
}

async fn serve(
    durability: Durability,
) -> (agent_platform::server::Running, String, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.bind = "127.0.0.1:0".parse().unwrap();
    cfg.server.data_dir = dir.path().join("data");
    cfg.server.durability = durability;
    cfg.log.level = "error".into();
    let running = agent_platform::server::start(&cfg).await.unwrap();
    let key = running.first_key.clone().unwrap();
    let base = format!("http://{}", running.local_addr());
    (running, base, key, dir)
}

/// Creates the agent the GETs read; answers it as the server did.
async fn create_agent(base: &str, key: &str) -> serde_json::Value {
    reqwest::Client::new()
        .post(format!("{base}/api/agents"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(r#"{"name":"Helper","about":"A helpful agent","model":"gpt-4o-mini","instructions":["be brief"],"metadata":{"team":"bench"}}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The `i`th durable agent create of a load, to the server at `base`.
fn agent_create(base: &str, auth: &str, i: usize) -> Req {
    let body = format!(r#"{{"name":"agent {i}","about":"benchmark agent","instructions":["be brief"]}}"#);
    Req::post(base, "/api/agents", auth, body)
}

async fn writes(base: &str, key: &str, clients: usize) -> Figures {
    writes_for(base, key, clients, WRITE_SECS).await
}

async fn writes_for(base: &str, key: &str, clients: usize, secs: f64) -> Figures {
    let (base, auth) = (base.to_string(), format!("Bearer {key}"));
    load(clients, secs, move |i| agent_create(&base, &auth, i)).await
}

/// Durable agent creates through the domain API directly (no HTTP): what group
/// commit gives on its own, for comparison with the HTTP figures.
/// The latencies of every task, as figures since `start`.
async fn gathered(handles: Vec<tokio::task::JoinHandle<Vec<Duration>>>, start: Instant) -> Figures {
    let mut lat = Vec::new();
    for h in handles {
        lat.extend(h.await.unwrap());
    }
    lat.sort();
    Figures { count: lat.len(), errors: 0, secs: start.elapsed().as_secs_f64(), lat }
}

/// The store's own group commit: `tasks` writers, one small record per commit.
async fn raw_commits(
    store: &Arc<agent_platform::store::sled_store::SledStore>,
    tasks: usize,
    secs: f64,
) -> Figures {
    use agent_platform::store::{Expect, Kind, Op, Record, Store};
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let tenant = uuid::Uuid::now_v7();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while Instant::now() < deadline {
                let data = serde_json::json!({"name": format!("agent {t}"), "about": "benchmark agent"});
                let record = Record::new(Kind::Agent, uuid::Uuid::now_v7(), tenant, data);
                let t0 = Instant::now();
                store.commit(tenant, vec![Op::Put { record, expect: Expect::Absent }]).await.unwrap();
                lat.push(t0.elapsed());
            }
            lat
        }));
    }
    gathered(handles, start).await
}

async fn store_writes(
    app: &agent_platform::app::App,
    tenant: agent_platform::app::Tenant,
    tasks: usize,
) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(WRITE_SECS);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let app = app.clone();
        handles.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut i = 0;
            while Instant::now() < deadline {
                let req: agent_platform::api::types::CreateAgentRequest = serde_json::from_value(
                    serde_json::json!({"name": format!("agent {t} {i}"), "about": "benchmark agent"}),
                )
                .unwrap();
                let t0 = Instant::now();
                app.agent_create(tenant, req).await.unwrap();
                lat.push(t0.elapsed());
                i += 1;
            }
            lat
        }));
    }
    gathered(handles, start).await
}

#[tokio::main]
async fn main() {
    println!(
        "agent-platform HTTP benchmark ({} cores)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    // `-- backends` runs part 3 alone.
    if std::env::args().skip(1).any(|a| a == "backends") {
        http_backends::run().await;
        return;
    }

    // ---- reads: ours vs bare dropshot
    let (ours, base, key, _dir) = serve(Durability::Fsync).await;
    let agent = create_agent(&base, &key).await;
    let id = agent["id"].as_str().unwrap().to_string();

    let mut api = ApiDescription::new();
    api.register(bare).unwrap();
    let log = slog::Logger::root(slog::Discard, slog::o!());
    let bare_server = ServerBuilder::new(api, Arc::new(agent.clone()), log)
        .config(ConfigDropshot { bind_address: "127.0.0.1:0".parse().unwrap(), ..Default::default() })
        .start()
        .unwrap();
    let bare_base = format!("http://{}", bare_server.local_addr());
    let body_len = serde_json::to_string(&agent).unwrap().len();
    println!("\nGET, {READ_CLIENTS} clients, {READ_SECS} s each; response bodies ~{body_len} bytes");

    let b = load(READ_CLIENTS, READ_SECS, move |_| Req::get(&bare_base, "/bare".into(), None)).await;
    let (url_base, auth) = (base.clone(), format!("Bearer {key}"));
    let o =
        load(READ_CLIENTS, READ_SECS, move |_| Req::get(&url_base, format!("/api/agents/{id}"), Some(&auth)))
            .await;
    println!("{}", b.line("bare dropshot GET /bare"));
    println!("{}", o.line("ours GET /api/agents/{id}"));
    let read_ratio = o.rate() / b.rate();
    println!("ratio ours/bare: {read_ratio:.2} (target >= 0.50)");
    bare_server.close().await.unwrap();

    // ---- durable writes, 1 and 32 clients, both durability modes
    println!("\nPOST /api/agents (durable before 2xx), {WRITE_SECS} s each");
    let agent_platform::store::backend::Backend::Sled(sled) = &ours.store else {
        unreachable!("the default store is sled")
    };
    let before = sled.writer_stats();
    let w1 = writes(&base, &key, 1).await;
    let mid = sled.writer_stats();
    let w32 = writes(&base, &key, 32).await;
    let after = sled.writer_stats();
    let per_group = |a: (u64, u64), b: (u64, u64)| (b.1 - a.1) as f64 / (b.0 - a.0).max(1) as f64;
    println!("{}   commits/flush {:.1}", w1.line("fsync, 1 client"), per_group(before, mid));
    println!("{}   commits/flush {:.1}", w32.line("fsync, 32 clients"), per_group(mid, after));
    let write_ratio = w32.rate() / w1.rate();
    println!("ratio 32/1: {write_ratio:.2} (target >= 2.5); 32 clients {:.0}/s (target >= 4000)", w32.rate());

    // What HTTP keeps of the store's own group commit: the same store, the two
    // loads taking turns, so that both see the same disk, tree and moment.
    println!(
        "\nHTTP POST at 32 clients against the store's own commits at 32 writers, same store, taking turns \
         of {TURN_SECS} s (which goes first alternating)"
    );
    let (mut ratios, mut round_errors) = (Vec::new(), 0);
    for round in 1..=ROUNDS {
        let (http, raw) = if round % 2 == 1 {
            let http = writes_for(&base, &key, 32, TURN_SECS).await;
            (http, raw_commits(sled, 32, TURN_SECS).await)
        } else {
            let raw = raw_commits(sled, 32, TURN_SECS).await;
            (writes_for(&base, &key, 32, TURN_SECS).await, raw)
        };
        round_errors += http.errors;
        let (http, raw) = (http.rate(), raw.rate());
        let ratio = http / raw;
        println!("round {round}: HTTP {http:>6.0}/s   store alone {raw:>6.0}/s   ratio {ratio:.2}");
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let http_over_store = ratios[ratios.len() / 2];
    println!(
        "HTTP POST at 32 clients / the store's group commit at 32 writers, median of {ROUNDS}: {http_over_store:.2} (target >= 0.8)"
    );
    ours.shutdown().await.unwrap();

    let (flush_srv, base, key, _dir2) = serve(Durability::Flush).await;
    let f1 = writes(&base, &key, 1).await;
    let f32 = writes(&base, &key, 32).await;
    println!("{}", f1.line("flush (no fsync), 1 client"));
    println!("{}", f32.line("flush (no fsync), 32 clients"));
    println!("fsync costs: {:.2}x at 1 client, {:.2}x at 32", f1.rate() / w1.rate(), f32.rate() / w32.rate());
    flush_srv.shutdown().await.unwrap();

    // ---- the store alone
    println!("\ndomain API (no HTTP): durable agent creates, {WRITE_SECS} s each");
    for durability in [Durability::Fsync, Durability::Flush] {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(agent_platform::store::sled_store::SledStore::open(dir.path(), durability).unwrap());
        let app = agent_platform::app::App::new(store.clone()).await.unwrap();
        let tenant = agent_platform::app::Tenant(uuid::Uuid::now_v7());
        let s1 = store_writes(&app, tenant, 1).await;
        let mid = store.writer_stats();
        let s32 = store_writes(&app, tenant, 32).await;
        let after = store.writer_stats();
        println!("{}", s1.line(&format!("{durability:?}, 1 task")));
        println!(
            "{}   commits/flush {:.1}",
            s32.line(&format!("{durability:?}, 32 tasks")),
            (after.1 - mid.1) as f64 / (after.0 - mid.0).max(1) as f64
        );
        if durability == Durability::Fsync {
            let raw = raw_commits(&store, 32, WRITE_SECS).await;
            println!("{}", raw.line("the store alone, 32 writers"));
        }
        store.close();
    }

    let hung = [&b, &o, &w1, &w32, &f1, &f32].iter().map(|f| f.errors).sum::<usize>() + round_errors;
    println!(
        "\nsummary: read ratio {read_ratio:.2}, write ratio {write_ratio:.2}, writes@32 {:.0}/s, HTTP/store at 32 \
         {http_over_store:.2}, failed or hung requests: {hung}",
        w32.rate()
    );

    http_backends::run().await;
}
