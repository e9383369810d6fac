//! Background responses at load: many at once, each a few tool rounds.
//!
//! `cargo bench -p agent-platform-benches --bench background [-- TURNS]`
//!
//! TURNS (200 unless given) `/v1/responses` turns on an agent whose
//! `api_call` tool (a GET on a local HTTP server that answers at once) the
//! model calls 3 rounds running before it answers (the fake provider's
//! `ToolRounds`, so every turn makes the same rounds however many run at
//! once), on the embedded store with every commit flushed. Each phase sends
//! all TURNS at once:
//!
//! - **foreground**: `POST /v1/responses`, each request waiting for its answer
//!   (the baseline: the same turns, saved once at their end);
//! - **background**: `POST /v1/responses` with `background: true` (answered
//!   `queued`), then each followed to its end with `GET ?stream=true`; each
//!   round is committed as it goes (the calls before they run, the results
//!   after), so a background turn makes 7 more commits than a foreground one.
//!
//! Every turn must end `completed` with its 3 calls and their results (none
//! lost): the bench fails otherwise. The phases alternate, 3 times each; it
//! prints turns per second of each and background over foreground.

use std::time::{Duration, Instant};

use agent_platform::config::Config;
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::store::sled_store::Durability;
use agent_platform_tests::http_target::HttpTarget;
use futures::StreamExt;
use serde_json::{Value, json};

const ROUNDS_PER_TURN: usize = 3;
const PHASES: usize = 3;

struct Bench {
    http: reqwest::Client,
    base: String,
    auth: String,
    agent: String,
}

impl Bench {
    async fn post(&self, path: &str, body: Value) -> Value {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("authorization", &self.auth)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{} from {path}", resp.status());
        resp.json().await.unwrap()
    }

    /// The events of a response, followed to its end: its last event's response.
    async fn follow(&self, id: &str) -> Value {
        let resp = self
            .http
            .get(format!("{}/v1/responses/{id}?stream=true", self.base))
            .header("authorization", &self.auth)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{} following {id}", resp.status());
        let mut body = resp.bytes_stream();
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        let last = text.lines().rev().find(|l| l.starts_with("data: ")).expect("an event");
        let event: Value = serde_json::from_str(&last["data: ".len()..]).unwrap();
        event["response"].clone()
    }

    fn body(&self, background: bool) -> Value {
        json!({"model": self.agent, "input": "What is the weather in Paris?", "background": background})
    }

    /// All `turns` at once, each waiting for its answer.
    async fn foreground(&self, turns: usize) -> Duration {
        let started = Instant::now();
        let answers =
            futures::future::join_all((0..turns).map(|_| self.post("/v1/responses", self.body(false)))).await;
        let took = started.elapsed();
        answers.iter().for_each(check);
        took
    }

    /// All `turns` at once in the background, each followed to its end.
    async fn background(&self, turns: usize) -> Duration {
        let started = Instant::now();
        let answers = futures::future::join_all((0..turns).map(|_| async {
            let created = self.post("/v1/responses", self.body(true)).await;
            assert_eq!(created["status"], "queued", "{created}");
            self.follow(created["id"].as_str().unwrap()).await
        }))
        .await;
        let took = started.elapsed();
        answers.iter().for_each(check);
        took
    }
}

/// A turn that ended well: completed, its calls and their results, then the answer.
fn check(response: &Value) {
    assert_eq!(response["status"], "completed", "{response}");
    let output = response["output"].as_array().unwrap();
    let count = |kind: &str| output.iter().filter(|i| i["type"] == kind).count();
    assert_eq!(
        (count("function_call"), count("function_call_output")),
        (ROUNDS_PER_TURN, ROUNDS_PER_TURN),
        "{response}"
    );
    assert_eq!(output.last().unwrap()["type"], "message", "{response}");
}

fn per_s(turns: usize, d: Duration) -> f64 {
    turns as f64 / d.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let turns: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(200);
    let fake = FakeUpstream::start().await;
    fake.set_default(Behaviour::ToolRounds {
        name: "get_weather".into(),
        arguments: r#"{"city": "Paris"}"#.into(),
        rounds: ROUNDS_PER_TURN,
        text: "It is sunny in Paris.".into(),
    });
    let target = HttpTarget::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.bind = "127.0.0.1:0".parse().unwrap();
    cfg.server.data_dir = dir.path().join("data");
    cfg.server.durability = Durability::Flush;
    cfg.log.level = "error".into();
    cfg.models = fake.models_config("bench-model");
    cfg.tools.allowed_hosts = vec!["127.0.0.1".into()];
    cfg.tools.background_runs = turns.max(1);
    let running = agent_platform::server::start_with_env(&cfg, |_| None).await.unwrap();
    let base = format!("http://{}", running.local_addr());
    let auth = format!("Bearer {}", running.first_key.clone().unwrap());
    let http = reqwest::Client::builder().pool_max_idle_per_host(turns).build().unwrap();
    let mut bench = Bench { http, base, auth, agent: String::new() };
    let agent = bench.post("/api/agents", json!({"name": "Ada", "about": "a weather assistant"})).await;
    bench.agent = agent["id"].as_str().unwrap().to_owned();
    let tool = json!({"name": "get_weather", "type": "api_call", "description": "The weather in a city",
                      "api_call": {"method": "GET", "url": format!("{}/weather", target.url())}});
    bench.post(&format!("/api/agents/{}/tools", bench.agent), tool).await;

    println!(
        "{turns} turns at once, {ROUNDS_PER_TURN} tool rounds each (api_call), sled with every commit flushed"
    );
    let (mut fg, mut bg) = (Vec::new(), Vec::new());
    for phase in 1..=PHASES {
        let f = bench.foreground(turns).await;
        let b = bench.background(turns).await;
        println!(
            "phase {phase}: foreground {:>7.1} turns/s ({:.2} s) | background {:>7.1} turns/s ({:.2} s) | background / foreground {:.2}×",
            per_s(turns, f),
            f.as_secs_f64(),
            per_s(turns, b),
            b.as_secs_f64(),
            f.as_secs_f64() / b.as_secs_f64(),
        );
        fg.push(per_s(turns, f));
        bg.push(per_s(turns, b));
    }
    let range = |v: &[f64]| {
        let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        format!("{lo:.1}–{hi:.1}")
    };
    println!(
        "foreground {} turns/s, background {} turns/s; every turn completed with its {ROUNDS_PER_TURN} calls ({} turns)",
        range(&fg),
        range(&bg),
        2 * PHASES * turns
    );
    running.shutdown().await.unwrap();
}
