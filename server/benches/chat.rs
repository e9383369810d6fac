//! Chat overhead: the same chat (a) through the service, on a session with
//! 1,000 messages, and (b) sent directly to the fake upstream (zero latency),
//! in one run. Prints p50/p99 of the latency the service adds, and of the
//! time to the first streamed byte it adds; then the same for OpenAI's
//! `POST /v1/chat/completions` with the agent as the model and the history
//! in the request, and for `POST /v1/responses` continuing a chain of 1,000
//! responses (`previous_response_id`) beside session chat on that chain's
//! session (the same prompt).
//!
//! `cargo bench -p agent-platform-benches --bench chat`
//!
//! The service side includes auth, loading the session, agent, users, tools
//! and 1,000 messages, rendering the system template, token counting, the
//! provider call and (not here: `save: false` keeps the history constant) the
//! save. 100 documents (half the agent's, half the user's) match the question,
//! so recall puts 5 snippets in the system message.
//!
//! An added p99 below zero is noise: the two tails are measured at different
//! moments and the upstream's own time varies more than the service adds.

use std::time::{Duration, Instant};

use agent_platform::config::Config;
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::models::{ModelsConfig, ProviderConfig};
use agent_platform::store::sled_store::Durability;
use serde_json::{Value, json};

const MESSAGES: usize = 1000;
const ROUNDS: usize = 500;
const DOCS: usize = 100;
/// The length of the chain of responses the Responses API is measured on.
const TURNS: usize = 1000;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One request: (total latency, time to the first body byte).
async fn once(http: &reqwest::Client, url: &str, auth: Option<&str>, body: &Value) -> (Duration, Duration) {
    let started = Instant::now();
    let mut req = http.post(url).json(body);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let mut resp = req.send().await.unwrap();
    assert!(resp.status().is_success(), "{} from {url}", resp.status());
    let mut first = None;
    while let Some(bytes) = resp.chunk().await.unwrap() {
        if first.is_none() && !bytes.is_empty() {
            first = Some(started.elapsed());
        }
    }
    (started.elapsed(), first.expect("a body"))
}

/// `ROUNDS` rounds of one request through the service then the same one
/// direct, interleaved so that both see the machine in the same state.
/// Answers (service, direct), each as (totals, first bytes).
async fn measure(
    http: &reqwest::Client,
    service: (&str, &str, &Value),
    direct: (&str, &Value),
) -> ((Vec<Duration>, Vec<Duration>), (Vec<Duration>, Vec<Duration>)) {
    let (mut s, mut d) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    for _ in 0..ROUNDS {
        let (total, first) = once(http, service.0, Some(service.1), service.2).await;
        s.0.push(total);
        s.1.push(first);
        let (total, first) = once(http, direct.0, None, direct.1).await;
        d.0.push(total);
        d.1.push(first);
    }
    (s, d)
}

fn report(name: &str, service: &mut [Duration], direct: &mut [Duration]) {
    let (s50, s99, d50, d99) = (pct(service, 0.5), pct(service, 0.99), pct(direct, 0.5), pct(direct, 0.99));
    println!(
        "{name:<34} service p50 {:>8.3} ms p99 {:>8.3} ms | direct p50 {:>8.3} ms p99 {:>8.3} ms | added p50 {:>+8.3} ms p99 {:>+8.3} ms",
        ms(s50),
        ms(s99),
        ms(d50),
        ms(d99),
        ms(s50) - ms(d50),
        ms(s99) - ms(d99),
    );
}

#[tokio::main]
async fn main() {
    let fake = FakeUpstream::start().await;
    fake.set_default(Behaviour::Text("The quick brown fox jumps over the lazy dog.".into()));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.server.bind = "127.0.0.1:0".parse().unwrap();
    cfg.server.data_dir = dir.path().join("data");
    cfg.server.durability = Durability::Flush;
    cfg.log.level = "error".into();
    cfg.models = ModelsConfig {
        providers: vec![ProviderConfig {
            name: "fake".into(),
            base_url: fake.base_url(),
            api_key_env: None,
            models: Vec::new(),
        }],
        default_model: Some("bench-model".into()),
        ..ModelsConfig::default()
    };
    let running = agent_platform::server::start_with_env(&cfg, |_| None).await.unwrap();
    let base = format!("http://{}", running.local_addr());
    let auth = format!("Bearer {}", running.first_key.clone().unwrap());
    let http = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        http.post(format!("{base}{path}")).header("authorization", &auth).json(&body).send()
    };
    let get = |path: &str| {
        let req = http.get(format!("{base}{path}")).header("authorization", &auth);
        async move { req.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let agent: Value = post(
        "/api/agents",
        json!({"name": "Ada", "about": "a research assistant", "instructions": ["Be brief.", "Cite sources."]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let user: Value = post("/api/users", json!({"name": "Bob", "about": "a biologist"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let session: Value = post("/api/sessions", json!({"agent": agent["id"], "user": user["id"]}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = session["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(50) {
        let posts = chunk.iter().map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            post(
                &format!("/api/sessions/{sid}/messages"),
                json!({"role": role, "content": format!("Message {i} about cells, membranes and proteins.")}),
            )
        });
        for r in futures::future::join_all(posts).await {
            assert_eq!(r.unwrap().status(), 201);
        }
    }
    for i in 0..DOCS {
        let owner = if i % 2 == 0 {
            format!("/api/agents/{}/docs", agent["id"].as_str().unwrap())
        } else {
            format!("/api/users/{}/docs", user["id"].as_str().unwrap())
        };
        let doc = json!({"title": format!("Doc {i}"), "content": [format!("Notes {i} on cells and membranes."), format!("Summary {i}: proteins fold.")]});
        assert_eq!(post(&owner, doc).await.unwrap().status(), 201);
    }
    println!(
        "setup: session with {MESSAGES} messages, {DOCS} docs in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let chat_url = format!("{base}/api/sessions/{sid}/chat");
    let chat =
        json!({"messages": [{"role": "user", "content": "What did we say about cells?"}], "save": false});
    let upstream_url = format!("{}/chat/completions", fake.base_url());
    let upstream_body = compare(&http, &fake, (&chat_url, &auth, &chat), &upstream_url, "").await;
    println!(
        "({ROUNDS} rounds of one request each way, interleaved; prompt of {} messages)",
        upstream_body["messages"].as_array().unwrap().len(),
    );

    // The same work through OpenAI's chat completions, the agent as the model:
    // stateless, so the client sends the session's history itself.
    let history = get(&format!("/api/sessions/{sid}/messages?limit=1000&direction=asc")).await;
    let mut messages: Vec<Value> = history["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"role": m["role"], "content": m["content"]}))
        .collect();
    messages.push(json!({"role": "user", "content": "What did we say about cells?"}));
    let v1_url = format!("{base}/v1/chat/completions");
    let completion = json!({"model": agent["id"], "messages": messages});
    compare(&http, &fake, (&v1_url, &auth, &completion), &upstream_url, "/v1 agent ").await;
    println!(
        "(/v1/chat/completions with the agent's id as the model and the {} messages of history in the \
         request, recall over the agent's docs; upstream requests seen: {})",
        messages.len(),
        fake.requests().len()
    );

    // OpenAI's Responses: a chain of TURNS turns by previous_response_id, then
    // one more turn on it, measured (`store: false` keeps the chain as it is).
    let started = Instant::now();
    let responses_url = format!("{base}/v1/responses");
    let mut previous: Option<String> = None;
    for i in 0..TURNS {
        let mut body = json!({"model": agent["id"], "input": format!("Turn {i} about cells and membranes.")});
        if let Some(p) = &previous {
            body["previous_response_id"] = json!(p);
        }
        let r: Value = http
            .post(&responses_url)
            .header("authorization", &auth)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        previous = Some(r["id"].as_str().unwrap_or_else(|| panic!("{r}")).to_owned());
    }
    println!("setup: a chain of {TURNS} responses in {:.1} s", started.elapsed().as_secs_f64());
    let turn = json!({"model": agent["id"], "input": "What did we say about cells?", "previous_response_id": previous,
                      "store": false});
    let upstream_body =
        compare(&http, &fake, (&responses_url, &auth, &turn), &upstream_url, "/v1/responses ").await;
    println!(
        "(/v1/responses continuing a {TURNS}-turn chain, the agent as the model: a prompt of {} messages)",
        upstream_body["messages"].as_array().unwrap().len()
    );
    // The same work through session chat: the chain's session (the newest), the
    // same question, nothing saved — the prompt the same length.
    let newest = get("/api/sessions?limit=1").await;
    let chain_session = newest["items"][0]["id"].as_str().unwrap().to_owned();
    let chain_chat_url = format!("{base}/api/sessions/{chain_session}/chat");
    let upstream_body =
        compare(&http, &fake, (&chain_chat_url, &auth, &chat), &upstream_url, "chain session ").await;
    println!(
        "(session chat on the chain's session, the same question: a prompt of {} messages)",
        upstream_body["messages"].as_array().unwrap().len()
    );
    running.shutdown().await.unwrap();
}

/// The same request through the service and direct to the upstream, not
/// streamed then streamed: after a warm-up, which captures the exact request
/// the service sends upstream. Reports each, its lines labelled `label`;
/// answers the upstream request.
async fn compare(
    http: &reqwest::Client,
    fake: &FakeUpstream,
    (url, auth, body): (&str, &str, &Value),
    upstream_url: &str,
    label: &str,
) -> Value {
    for _ in 0..5 {
        measure_once(http, url, auth, body).await;
    }
    let mut upstream_body = fake.last_request().unwrap().body;
    upstream_body["stream"] = json!(false);
    upstream_body.as_object_mut().unwrap().remove("stream_options");
    let ((mut svc, _), (mut direct, _)) =
        measure(http, (url, auth, body), (upstream_url, &upstream_body)).await;
    report(&format!("{label}latency"), &mut svc, &mut direct);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    upstream_body["stream"] = json!(true);
    upstream_body["stream_options"] = json!({"include_usage": true});
    let ((mut svc_total, mut svc_first), (mut direct_total, mut direct_first)) =
        measure(http, (url, auth, &streamed), (upstream_url, &upstream_body)).await;
    report(&format!("{label}streamed: first byte"), &mut svc_first, &mut direct_first);
    report(&format!("{label}streamed: whole"), &mut svc_total, &mut direct_total);
    upstream_body
}

async fn measure_once(http: &reqwest::Client, url: &str, auth: &str, body: &Value) {
    let resp = http.post(url).header("authorization", auth).json(body).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.bytes().await.unwrap();
}
