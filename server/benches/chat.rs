//! Chat overhead: the same chat (a) through the service, on a session with
//! 1,000 messages, and (b) sent directly to the fake upstream (zero latency),
//! in one run. Prints p50/p99 of the latency the service adds, and of the
//! time to the first streamed byte it adds; then the same for OpenAI's
//! `POST /v1/chat/completions` with the agent as the model and the history
//! in the request, and for `POST /v1/responses` continuing a chain of 1,000
//! responses (`previous_response_id`) beside session chat on that chain's
//! session (the same prompt); and session chat whose agent has 4 memory
//! blocks beside the same chat without them.
//!
//! `cargo bench -p agent-platform-benches --bench chat`
//!
//! The service side includes auth, loading the session, agent, users, tools
//! and 1,000 messages, rendering the system template, token counting, the
//! provider call and (not here: `save: false` keeps the history constant) the
//! save. 100 documents (half the agent's, half the user's) match the question,
//! so recall puts 5 snippets in the system message.
//!
//! The routes compared (session chat and chat completions; the Responses
//! chain and session chat on its session) are measured in the same rounds,
//! one request of each in turn, each followed by its direct twin: they see the
//! machine in the same state, so their difference is theirs. The last line of
//! each comparison is that difference, the figure the target (1 ms) is on.
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
/// The memory blocks of the agent of the second session (each value this text 8 times).
const BLOCKS: [(&str, &str); 4] = [
    ("persona", "I am Ada, a research assistant who reads biology papers closely. "),
    ("human", "Bob is a biologist who studies membranes and asks short questions. "),
    ("project", "We are writing a review of membrane proteins for a journal, due soon. "),
    ("style", "Answers are brief, cite their sources, and avoid jargon where possible. "),
];

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One request: (total latency, time to the first body byte). The body is
/// JSON already written: the client's own serialising (of an 80 KB history
/// for chat completions) is not what the service adds, so it is not timed.
async fn once(http: &reqwest::Client, url: &str, auth: Option<&str>, body: &[u8]) -> (Duration, Duration) {
    let body = body.to_vec();
    let started = Instant::now();
    let mut req = http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
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

/// One request through the service and the same one sent straight to the provider.
#[derive(Clone)]
struct Case {
    label: &'static str,
    url: String,
    body: Value,
    /// What the service sends upstream for `body`, as sent direct.
    upstream: Value,
}

/// The latencies of one case: (service totals, service first bytes, direct totals, direct first bytes).
type Timings = [Vec<Duration>; 4];

/// `ROUNDS` rounds, each one request of every case through the service and
/// then its direct one: the cases compared, and each with its baseline, see
/// the machine in the same state.
async fn measure(http: &reqwest::Client, auth: &str, upstream_url: &str, cases: &[Case]) -> Vec<Timings> {
    let mut out: Vec<Timings> = cases.iter().map(|_| Default::default()).collect();
    let bodies: Vec<[Vec<u8>; 2]> = cases
        .iter()
        .map(|c| [serde_json::to_vec(&c.body).unwrap(), serde_json::to_vec(&c.upstream).unwrap()])
        .collect();
    for _ in 0..ROUNDS {
        for ((c, t), [body, upstream]) in cases.iter().zip(&mut out).zip(&bodies) {
            let (total, first) = once(http, &c.url, Some(auth), body).await;
            t[0].push(total);
            t[1].push(first);
            let (total, first) = once(http, upstream_url, None, upstream).await;
            t[2].push(total);
            t[3].push(first);
        }
    }
    out
}

/// Prints one line; answers the added p50 (ms).
fn report(name: &str, service: &mut [Duration], direct: &mut [Duration]) -> f64 {
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
    ms(s50) - ms(d50)
}

#[tokio::main]
async fn main() {
    let fake = FakeUpstream::start().await;
    fake.set_default(Behaviour::Text("The quick brown fox jumps over the lazy dog.".into()));
    // Only the last request is read (what the service sent, to send it direct).
    fake.keep_requests(1);
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
    // The same agent again, with memory blocks, in a session of the same
    // messages and docs: what the blocks cost is the difference between the two.
    let remembering: Value = post(
        "/api/agents",
        json!({"name": "Ada", "about": "a research assistant", "instructions": ["Be brief.", "Cite sources."]}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let rid = remembering["id"].as_str().unwrap().to_owned();
    for (label, text) in BLOCKS {
        let block =
            json!({"label": label, "value": text.repeat(8), "description": format!("The {label} block.")});
        assert_eq!(post(&format!("/api/agents/{rid}/blocks"), block).await.unwrap().status(), 201);
    }
    let with_blocks: Value =
        post("/api/sessions", json!({"agent": rid, "user": user["id"]})).await.unwrap().json().await.unwrap();
    let bid = with_blocks["id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    for session in [&sid, &bid] {
        for chunk in (0..MESSAGES).collect::<Vec<_>>().chunks(50) {
            let posts = chunk.iter().map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                post(
                    &format!("/api/sessions/{session}/messages"),
                    json!({"role": role, "content": format!("Message {i} about cells, membranes and proteins.")}),
                )
            });
            for r in futures::future::join_all(posts).await {
                assert_eq!(r.unwrap().status(), 201);
            }
        }
    }
    for i in 0..DOCS {
        let owners = if i % 2 == 0 {
            vec![
                format!("/api/agents/{}/docs", agent["id"].as_str().unwrap()),
                format!("/api/agents/{rid}/docs"),
            ]
        } else {
            vec![format!("/api/users/{}/docs", user["id"].as_str().unwrap())]
        };
        for owner in owners {
            let doc = json!({"title": format!("Doc {i}"), "content": [format!("Notes {i} on cells and membranes."), format!("Summary {i}: proteins fold.")]});
            assert_eq!(post(&owner, doc).await.unwrap().status(), 201);
        }
    }
    println!(
        "setup: two sessions with {MESSAGES} messages, {DOCS} docs in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let chat_url = format!("{base}/api/sessions/{sid}/chat");
    let chat =
        json!({"messages": [{"role": "user", "content": "What did we say about cells?"}], "save": false});
    let upstream_url = format!("{}/chat/completions", fake.base_url());
    let upstream = capture(&http, &fake, &chat_url, &auth, &chat).await;
    let session_case = Case { label: "session ", url: chat_url, body: chat.clone(), upstream };

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
    let upstream = capture(&http, &fake, &v1_url, &auth, &completion).await;
    let completion_case = Case { label: "/v1 agent ", url: v1_url, body: completion, upstream };
    let prompt = |c: &Case| c.upstream["messages"].as_array().unwrap().len();
    let (session_prompt, completion_prompt) = (prompt(&session_case), prompt(&completion_case));
    // Session chat with the agent's 4 memory blocks in the system message.
    let blocks_url = format!("{base}/api/sessions/{bid}/chat");
    let upstream = capture(&http, &fake, &blocks_url, &auth, &chat).await;
    let system_chars = |u: &Value| u["messages"][0]["content"].as_str().unwrap().chars().count();
    let (plain_system, blocks_system) = (system_chars(&session_case.upstream), system_chars(&upstream));
    let blocks_case = Case { label: "session, 4 blocks ", url: blocks_url, body: chat.clone(), upstream };
    let session_again = Case { label: "session ", ..session_case.clone() };
    compare(&http, &auth, &upstream_url, &[session_again, blocks_case]).await;
    println!(
        "(session chat on two sessions of {MESSAGES} messages and the same docs, one agent without memory \
         blocks, the other with 4 of about {} characters each: system messages of {plain_system} and \
         {blocks_system} characters)",
        BLOCKS[0].1.len() * 8
    );
    compare(&http, &auth, &upstream_url, &[session_case, completion_case]).await;
    println!(
        "({ROUNDS} rounds, each one request of each case through the service then direct; session chat: a \
         prompt of {session_prompt} messages; /v1/chat/completions with the agent's id as the model and the \
         {} messages of history in the request, recall over the agent's docs: a prompt of \
         {completion_prompt})",
        messages.len(),
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
    let upstream = capture(&http, &fake, &responses_url, &auth, &turn).await;
    let responses_case = Case { label: "/v1/responses ", url: responses_url, body: turn, upstream };
    // The same work through session chat: the chain's session (the newest), the
    // same question, nothing saved — the prompt the same length.
    let newest = get("/api/sessions?limit=1").await;
    let chain_session = newest["items"][0]["id"].as_str().unwrap().to_owned();
    let chain_chat_url = format!("{base}/api/sessions/{chain_session}/chat");
    let upstream = capture(&http, &fake, &chain_chat_url, &auth, &chat).await;
    let chain_case = Case { label: "chain session ", url: chain_chat_url, body: chat, upstream };
    let (chain_prompt, responses_prompt) = (prompt(&chain_case), prompt(&responses_case));
    compare(&http, &auth, &upstream_url, &[chain_case, responses_case]).await;
    println!(
        "(/v1/responses continuing a {TURNS}-turn chain, the agent as the model: a prompt of {responses_prompt} \
         messages; session chat on the chain's session, the same question: {chain_prompt})"
    );
    running.shutdown().await.unwrap();
}

/// What the service sends upstream for `body` (after a warm-up), as a
/// request to send direct: not streamed.
async fn capture(http: &reqwest::Client, fake: &FakeUpstream, url: &str, auth: &str, body: &Value) -> Value {
    for _ in 0..5 {
        measure_once(http, url, auth, body).await;
    }
    let mut upstream = fake.last_request().unwrap().body;
    upstream["stream"] = json!(false);
    upstream.as_object_mut().unwrap().remove("stream_options");
    upstream
}

/// The cases, interleaved, not streamed then streamed; reports each, then
/// what the second adds over the first (p50), the figure the target is on.
async fn compare(http: &reqwest::Client, auth: &str, upstream_url: &str, cases: &[Case; 2]) {
    let streamed: Vec<Case> = cases
        .iter()
        .map(|c| {
            let (mut body, mut upstream) = (c.body.clone(), c.upstream.clone());
            body["stream"] = json!(true);
            upstream["stream"] = json!(true);
            upstream["stream_options"] = json!({"include_usage": true});
            Case { label: c.label, url: c.url.clone(), body, upstream }
        })
        .collect();
    let mut plain = measure(http, auth, upstream_url, cases).await;
    let mut streamed = measure(http, auth, upstream_url, &streamed).await;
    let mut added = [[0.0; 3]; 2];
    for (i, c) in cases.iter().enumerate() {
        let [svc, _, direct, _] = &mut plain[i];
        added[i][0] = report(&format!("{}latency", c.label), svc, direct);
        let [svc_total, svc_first, direct_total, direct_first] = &mut streamed[i];
        added[i][1] = report(&format!("{}streamed: first byte", c.label), svc_first, direct_first);
        added[i][2] = report(&format!("{}streamed: whole", c.label), svc_total, direct_total);
    }
    println!(
        "{} over {}: added p50 {:+.3} ms, streamed first byte {:+.3} ms, whole {:+.3} ms",
        cases[1].label.trim(),
        cases[0].label.trim(),
        added[1][0] - added[0][0],
        added[1][1] - added[0][1],
        added[1][2] - added[0][2],
    );
}

async fn measure_once(http: &reqwest::Client, url: &str, auth: &str, body: &Value) {
    let resp = http.post(url).header("authorization", auth).json(body).send().await.unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.bytes().await.unwrap();
}
