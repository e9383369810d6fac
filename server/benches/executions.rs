//! Executions benchmark: what running a task costs over the store's own
//! commits. Run with `cargo bench -p agent-platform-benches --bench executions`.
//!
//! 1. One execution of a 1,000-step task of `evaluate` steps, over HTTP
//!    against the server (release build): the time per step at p50, from
//!    the differences of its transitions' `created_at`.
//! 2. 1,000 executions of a 10-step task started at once: transitions
//!    committed per second, from the first start to the last finish.
//! 3. The floor: the same number of commits made directly on a sled store
//!    (each a transition-sized record put and an execution-sized record
//!    replaced at its version, as a step commits), one after another for (1)
//!    and from 1,000 concurrent tasks for (2).
//!
//! Targets: (1) ≤ 0.5 ms per step at p50; (2) ≥ 5,000 durable transitions/s
//! on 2 cores. Both durable (`fsync`, the default), as the floor is.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_platform::api::types::{Execution, ExecutionStatus, ListResponse, Transition, TransitionType};
use agent_platform::config::Config;
use agent_platform::store::sled_store::{Durability, SledStore};
use agent_platform::store::{Expect, Kind, Op, Record, Store};
use serde_json::{Value, json};
use uuid::Uuid;

const LONG_TASK_STEPS: usize = 1_000;
const SHORT_TASK_STEPS: usize = 10;
const CONCURRENT_EXECUTIONS: usize = 1_000;
/// How long an execution may take before the bench gives up on it.
const DEADLINE: Duration = Duration::from_secs(600);

struct Server {
    running: agent_platform::server::Running,
    base: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = Config::default();
        cfg.server.bind = "127.0.0.1:0".parse().unwrap();
        cfg.server.data_dir = dir.path().join("data");
        cfg.server.durability = Durability::Fsync;
        cfg.server.request_body_max_bytes = cfg.server.request_body_max_bytes.max(1 << 20);
        cfg.log.level = "error".into();
        let running = agent_platform::server::start(&cfg).await.unwrap();
        let key = running.first_key.clone().unwrap();
        let base = format!("http://{}", running.local_addr());
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(reqwest::header::AUTHORIZATION, format!("Bearer {key}").parse().unwrap());
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(256)
            .build()
            .unwrap();
        Server { running, base, http, _dir: dir }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<&Value>) -> Value {
        let mut req = self.http.request(method.clone(), format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status();
        let text = resp.text().await.unwrap();
        assert!(status.is_success(), "{method} {path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        self.send(reqwest::Method::GET, path, None).await
    }

    /// A task of `steps` `evaluate` steps, each adding 1 to `_.n`.
    async fn counting_task(&self, name: &str, steps: usize) -> Uuid {
        let agent = self.post("/api/agents", &json!({"name": "Bench", "about": "executions bench"})).await;
        let main: Vec<Value> = (0..steps).map(|_| json!({"evaluate": {"n": "_.n + 1"}})).collect();
        let task = self
            .post(
                &format!("/api/agents/{}/tasks", agent["id"].as_str().unwrap()),
                &json!({"name": name, "main": main}),
            )
            .await;
        task["id"].as_str().unwrap().parse().unwrap()
    }

    async fn start_execution(&self, task: Uuid) -> Execution {
        serde_json::from_value(
            self.post(&format!("/api/tasks/{task}/executions"), &json!({"input": {"n": 0}})).await,
        )
        .unwrap()
    }

    /// Every transition of an execution, oldest first.
    async fn transitions(&self, execution: Uuid) -> Vec<Transition> {
        let mut all = Vec::new();
        loop {
            let page: ListResponse<Transition> = serde_json::from_value(
                self.get(&format!(
                    "/api/executions/{execution}/transitions?limit=1000&offset={}&direction=asc",
                    all.len()
                ))
                .await,
            )
            .unwrap();
            if page.items.is_empty() {
                return all;
            }
            all.extend(page.items);
        }
    }

    /// Waits for an execution to end; it must succeed.
    async fn finished(&self, execution: Uuid) -> Execution {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let e: Execution =
                serde_json::from_value(self.get(&format!("/api/executions/{execution}")).await).unwrap();
            if e.status.is_terminal() {
                assert_eq!(e.status, ExecutionStatus::Succeeded, "execution {execution}: {:?}", e.error);
                return e;
            }
            assert!(Instant::now() < deadline, "execution {execution} did not end in {DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The time each step took: the gaps between consecutive transitions.
fn step_times(transitions: &[Transition]) -> Vec<Duration> {
    let mut gaps: Vec<Duration> = transitions
        .windows(2)
        .filter(|w| w[1].kind == TransitionType::Step)
        .map(|w| (w[1].created_at - w[0].created_at).to_std().unwrap_or_default())
        .collect();
    gaps.sort();
    gaps
}

/// The floor: a store opened by the bench, and the commits a step makes on
/// it: a transition put, and its execution replaced at the version read.
struct Floor {
    store: Arc<SledStore>,
    tenant: Uuid,
    _dir: tempfile::TempDir,
}

impl Floor {
    fn open() -> Floor {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SledStore::open(dir.path(), Durability::Fsync).unwrap());
        Floor { store, tenant: Uuid::now_v7(), _dir: dir }
    }

    /// An execution-sized record, written as a new one.
    async fn execution(&self) -> Record {
        let rec = Record::fresh(
            Kind::Session,
            Uuid::nil(),
            json!({
                "task_id": Uuid::now_v7(), "status": "running", "input": {"n": 0}, "output": null,
                "error": null, "sleeping_until": null,
                "position": {"workflow": "main", "step": 0}, "state": {}, "outputs": [{"n": 1}],
                "last_transition": Uuid::now_v7(), "transitions": 0,
            }),
        );
        self.store
            .commit(self.tenant, vec![Op::Put { record: rec.clone(), expect: Expect::Absent }])
            .await
            .unwrap();
        rec
    }

    /// `steps` commits of one execution, one after another; each one's time.
    async fn run(&self, mut execution: Record, steps: usize) -> Vec<Duration> {
        let mut times = Vec::with_capacity(steps);
        for step in 0..steps {
            let transition = Record::fresh(
                Kind::Message,
                execution.id,
                json!({
                    "type": "step", "output": {"n": step + 1},
                    "current": {"workflow": "main", "step": step},
                    "next": {"workflow": "main", "step": step + 1},
                }),
            );
            execution.data["position"]["step"] = json!(step + 1);
            execution.data["last_transition"] = json!(transition.id);
            execution.data["transitions"] = json!(step + 1);
            let ops = vec![
                Op::Put { record: transition, expect: Expect::Absent },
                Op::Put { record: execution.clone(), expect: Expect::Version(execution.version) },
            ];
            let t = Instant::now();
            self.store.commit(self.tenant, ops).await.unwrap();
            times.push(t.elapsed());
            execution.version += 1;
        }
        times
    }
}

#[tokio::main]
async fn main() {
    println!(
        "agent-platform executions benchmark ({} cores), durable (fsync)",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let server = Server::start().await;

    // ---- (a) one long execution
    let long_task = server.counting_task("long", LONG_TASK_STEPS).await;
    let execution = server.start_execution(long_task).await;
    let t = Instant::now();
    let done = server.finished(execution.id).await;
    let wall = t.elapsed();
    assert_eq!(
        done.output.as_ref().and_then(|o| o["n"].as_u64()),
        Some(LONG_TASK_STEPS as u64),
        "{:?}",
        done.output
    );
    let transitions = server.transitions(execution.id).await;
    let steps = step_times(&transitions);
    let a_p50 = percentile(&steps, 0.5);
    println!("\n(a) one execution of {LONG_TASK_STEPS} evaluate steps: {} transitions", transitions.len());
    println!(
        "    per step p50 {:.3} ms   p99 {:.3} ms   whole run {:.0} ms (target p50 <= 0.5 ms)",
        ms(a_p50),
        ms(percentile(&steps, 0.99)),
        ms(wall)
    );

    // ---- (b) many short executions at once
    let short_task = server.counting_task("short", SHORT_TASK_STEPS).await;
    let server = Arc::new(server);
    let first_start = chrono::Utc::now();
    let t = Instant::now();
    let starts: Vec<_> = (0..CONCURRENT_EXECUTIONS)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.start_execution(short_task).await.id })
        })
        .collect();
    let mut ids = Vec::with_capacity(starts.len());
    for s in starts {
        ids.push(s.await.unwrap());
    }
    let started_in = t.elapsed();
    // Wait on them one by one: most have ended by the time their turn comes.
    let mut last_finish = first_start;
    for id in &ids {
        let e = server.finished(*id).await;
        last_finish = last_finish.max(e.updated_at);
    }
    let mut committed = 0;
    for id in &ids {
        committed += server.transitions(*id).await.len();
    }
    let b_secs = (last_finish - first_start).to_std().unwrap_or_default().as_secs_f64();
    let b_rate = committed as f64 / b_secs;
    println!(
        "\n(b) {CONCURRENT_EXECUTIONS} executions of {SHORT_TASK_STEPS} steps started at once (all started in {:.0} ms)",
        ms(started_in)
    );
    println!("    {committed} transitions in {b_secs:.2} s: {b_rate:.0} transitions/s (target >= 5000)");
    let server = Arc::into_inner(server).expect("no request is left");
    server.running.shutdown().await.unwrap();

    // ---- (c) the floor: the store's commits alone
    let floor = Floor::open();
    let execution = floor.execution().await;
    let mut times = floor.run(execution, transitions.len()).await;
    times.sort();
    let c_a_p50 = percentile(&times, 0.5);
    println!("\n(c) the store alone (sled, fsync): a transition put + an execution replaced at its version");
    println!(
        "    {} commits one after another: p50 {:.3} ms   p99 {:.3} ms",
        times.len(),
        ms(c_a_p50),
        ms(percentile(&times, 0.99))
    );
    let per_execution = committed.div_ceil(CONCURRENT_EXECUTIONS);
    let mut executions = Vec::with_capacity(CONCURRENT_EXECUTIONS);
    for _ in 0..CONCURRENT_EXECUTIONS {
        executions.push(floor.execution().await);
    }
    let floor = Arc::new(floor);
    let t = Instant::now();
    let runs: Vec<_> = executions
        .into_iter()
        .map(|e| {
            let floor = floor.clone();
            tokio::spawn(async move { floor.run(e, per_execution).await.len() })
        })
        .collect();
    let mut floor_commits = 0;
    for r in runs {
        floor_commits += r.await.unwrap();
    }
    let c_b_rate = floor_commits as f64 / t.elapsed().as_secs_f64();
    println!(
        "    {floor_commits} commits from {CONCURRENT_EXECUTIONS} concurrent tasks: {c_b_rate:.0} commits/s"
    );
    floor.store.close();

    println!(
        "\nsummary: (a) {:.3} ms per step at p50, {:.1}x the floor's {:.3} ms; (b) {b_rate:.0} transitions/s, {:.2} of the floor's {c_b_rate:.0}/s",
        ms(a_p50),
        a_p50.as_secs_f64() / c_a_p50.as_secs_f64().max(1e-9),
        ms(c_a_p50),
        b_rate / c_b_rate
    );
}
