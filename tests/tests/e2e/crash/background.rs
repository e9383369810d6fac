//! The crash test's background responses: a client that creates
//! `/v1/responses` with `background: true` whose model (the fake provider's
//! `ToolRounds`) calls the `note` tool of an MCP server (the fake-mcp
//! process, which outlives the server) in 2 rounds, `note {"text":
//! "<input>#<round>"}`, then answers — while the server is killed. After every
//! restart each acknowledged response (answered `queued`) must end
//! `completed` (none lost, none stuck), its output the tool list, one
//! `mcp_call` per round (its output `noted <input>#<round>`, or, for a call in
//! flight at a kill, the error "interrupted: …": `note` is not idempotent),
//! then the answer. At the end no note was written twice: a committed call
//! never runs again, and one in flight is never retried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::Behaviour;
use agent_platform_tests::mcp::FakeMcp;
use serde_json::{Value, json};

use super::{Api, K, Ledger, Outcome, Shared, uuid_of};

/// Concurrent background clients per cycle.
pub(super) const CLIENTS: usize = 1;
/// Responses each client creates per cycle (at most).
const PER_CLIENT: usize = 8;
/// Tool rounds of each response.
const ROUNDS: usize = 2;
/// How long a check waits for a response to end after a restart (on
/// PostgreSQL the restarted server first waits out the killed one's lease).
const ENDS_WITHIN: Duration = Duration::from_secs(90);

/// The model of the whole test: `note` calls for a request that offers it,
/// the crash test's own answer (`Echo`) for any other.
pub(super) fn model() -> Behaviour {
    Behaviour::ToolRounds {
        name: "note".into(),
        arguments: r#"{"text": "{text}#{round}"}"#.into(),
        rounds: ROUNDS,
        text: "noted all".into(),
    }
}

/// The "client" owning this module's agent in the main ledger: none of the write clients.
const OWNER: usize = usize::MAX - 1;

#[derive(Default)]
pub(super) struct Bg {
    /// The agent that answers them (each response a new session of it).
    agent: uuid::Uuid,
    /// Acknowledged responses by id: their input, and whether a check saw them end.
    runs: HashMap<String, (String, bool)>,
    pub created: usize,
    pub completed: usize,
    /// Calls in flight at a kill, answered "interrupted".
    pub interrupted: usize,
    pub problems: Vec<String>,
}

/// The agent of the background responses, in the ledger; its sessions are not.
pub(super) async fn setup(api: &Api, ledger: &Mutex<Ledger>, bg: &Mutex<Bg>) {
    let body = json!({"name": "Noter", "metadata": {"tag": "bg-agent"}});
    let agent = match api.call("POST", "/api/agents", Some(&body)).await {
        Outcome::Answered(201, agent) => agent,
        Outcome::Answered(status, body) => panic!("the background responses' agent: {status} {body}"),
        _ => panic!("the background responses' agent: no answer"),
    };
    let id = uuid_of(&agent);
    let mut l = ledger.lock().unwrap();
    l.add(K::Agent, uuid::Uuid::nil(), "/api/agents".into(), id, OWNER, agent, (0, 0), true);
    l.foreign_agents.push(id);
    bg.lock().unwrap().agent = id;
}

pub(super) async fn client(api: Api, bg: Arc<Mutex<Bg>>, mcp_url: String, shared: Arc<Shared>) {
    let agent = bg.lock().unwrap().agent;
    for _ in 0..PER_CLIENT {
        let n = shared.tags.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let input = format!("bg{n}");
        let tool = json!({"type": "mcp", "server_label": "notes", "server_url": mcp_url,
                          "allowed_tools": ["note"], "require_approval": "never"});
        let body = json!({"model": agent, "input": input, "background": true, "tools": [tool]});
        match api.call("POST", "/v1/responses", Some(&body)).await {
            Outcome::Answered(200, r) if r["status"] == "queued" => {
                let id = r["id"].as_str().unwrap_or_default().to_owned();
                let mut b = bg.lock().unwrap();
                b.created += 1;
                b.runs.insert(id, (input, false));
            }
            Outcome::Answered(status, body) => {
                bg.lock().unwrap().problems.push(format!("POST background response: {status} {body:.300}"));
            }
            // The server is gone (a response sent meanwhile may run: its notes are still counted).
            Outcome::NotSent | Outcome::Unknown => return,
        }
    }
}

/// Waits for every acknowledged response not yet seen to end, and checks how it ended.
pub(super) async fn verify(api: &Api, bg: &Mutex<Bg>) {
    let pending: Vec<(String, String)> = bg
        .lock()
        .unwrap()
        .runs
        .iter()
        .filter(|(_, (_, ended))| !ended)
        .map(|(id, (input, _))| (id.clone(), input.clone()))
        .collect();
    let deadline = Instant::now() + ENDS_WITHIN;
    for (id, input) in pending {
        let response = loop {
            match api.call("GET", &format!("/v1/responses/{id}"), None).await {
                Outcome::Answered(200, r)
                    if !matches!(r["status"].as_str(), Some("queued" | "in_progress")) =>
                {
                    break Some(r);
                }
                Outcome::Answered(200, _) if Instant::now() < deadline => {}
                Outcome::Answered(200, r) => {
                    let status = r["status"].clone();
                    bg.lock()
                        .unwrap()
                        .problems
                        .push(format!("{id} ({input}) still {status} after a restart"));
                    break None;
                }
                Outcome::Answered(status, body) => {
                    bg.lock().unwrap().problems.push(format!("GET {id} ({input}): {status} {body:.300}"));
                    break None;
                }
                Outcome::NotSent | Outcome::Unknown => {
                    bg.lock().unwrap().problems.push(format!("GET {id}: no answer"));
                    break None;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let Some(response) = response else { continue };
        let problems = ended_problems(&response, &input);
        let interrupted = calls(&response)
            .iter()
            .filter(|c| c["error"]["message"].as_str().is_some_and(|m| m.starts_with("interrupted:")))
            .count();
        let mut b = bg.lock().unwrap();
        b.interrupted += interrupted;
        if problems.is_empty() {
            b.completed += 1;
        }
        b.problems.extend(problems.into_iter().map(|p| format!("{id} ({input}): {p}")));
        if let Some(run) = b.runs.get_mut(&id) {
            run.1 = true;
        }
    }
}

fn calls(response: &Value) -> Vec<Value> {
    let output = response["output"].as_array().cloned().unwrap_or_default();
    output.into_iter().filter(|i| i["type"] == "mcp_call").collect()
}

/// What is wrong with how a response ended.
fn ended_problems(response: &Value, input: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if response["status"] != "completed" {
        problems.push(format!("ended {} ({})", response["status"], response["error"]));
        return problems;
    }
    let kinds: Vec<&str> =
        response["output"].as_array().into_iter().flatten().filter_map(|i| i["type"].as_str()).collect();
    if kinds != ["mcp_list_tools", "mcp_call", "mcp_call", "message"] {
        problems.push(format!("its items are {kinds:?}"));
    }
    for (round, call) in calls(response).iter().enumerate() {
        let noted = format!("noted {input}#{}", round + 1);
        let interrupted = call["error"]["message"].as_str().is_some_and(|m| m.starts_with("interrupted:"));
        if call["output"] != noted.as_str() && !interrupted {
            problems.push(format!("round {}: {call}", round + 1));
        }
    }
    problems
}

/// No note written twice.
pub(super) async fn check_notes(mcp: &FakeMcp, bg: &Mutex<Bg>) {
    for (text, n) in mcp.notes().await {
        if n > 1 {
            bg.lock().unwrap().problems.push(format!("note {text:?} was written {n} times"));
        }
    }
}
