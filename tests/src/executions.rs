//! What tests of executions share: the contract's table of transitions,
//! written out here from the contract (not taken from the server's code, so
//! that a mistake there is caught), a check of an execution's transitions
//! against it, a compact rendering of transitions for exact assertions, and
//! a raw HTTP driver that polls with deadlines.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

/// The statuses after which nothing changes an execution.
pub const TERMINAL: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// The transition types after which nothing follows.
pub const TERMINAL_TYPES: [&str; 3] = ["finish", "error", "cancelled"];

/// Whether a transition of type `next` may follow one of type `prev` (the
/// contract's "allowed next type" table).
pub fn allows_next(prev: &str, next: &str) -> bool {
    let allowed: &[&str] = match prev {
        "init" => &["wait", "error", "step", "cancelled", "init_branch", "finish"],
        "init_branch" => &["wait", "error", "step", "cancelled", "finish_branch"],
        "wait" => &["resume", "step", "cancelled", "finish", "finish_branch"],
        "step" | "resume" => {
            &["wait", "error", "cancelled", "step", "finish", "finish_branch", "init_branch"]
        }
        "finish_branch" => &["wait", "error", "cancelled", "step", "finish", "init_branch"],
        _ => &[],
    };
    allowed.contains(&next)
}

/// The status an execution has after a transition of type `kind`.
pub fn status_after(kind: &str) -> &'static str {
    match kind {
        "init" => "starting",
        "init_branch" | "step" | "resume" | "finish_branch" => "running",
        "wait" => "awaiting_input",
        "finish" => "succeeded",
        "error" => "failed",
        "cancelled" => "cancelled",
        other => panic!("no transition type {other:?} in the contract"),
    }
}

fn place(p: &Value) -> String {
    match p {
        Value::Null => "null".into(),
        p => format!("{}:{}", p["workflow"].as_str().unwrap_or("?"), p["step"]),
    }
}

/// A transition in one line: `step main:0 -> main:1`, `wait main:1`, `finish`.
/// Terminal ones show only their type (where they point is not the contract's).
pub fn render(t: &Value) -> String {
    let kind = t["type"].as_str().unwrap_or("?");
    if TERMINAL_TYPES.contains(&kind) {
        kind.to_owned()
    } else if kind == "wait" {
        format!("wait {}", place(&t["current"]))
    } else {
        format!("{kind} {} -> {}", place(&t["current"]), place(&t["next"]))
    }
}

/// Everything in an execution's transitions (oldest first) that the contract
/// forbids; `ended`: the execution is in a terminal status, so its last
/// transition must be terminal too. Empty when all is well.
pub fn transition_problems(transitions: &[Value], ended: bool) -> Vec<String> {
    let mut problems = Vec::new();
    let kinds: Vec<&str> = transitions.iter().map(|t| t["type"].as_str().unwrap_or("?")).collect();
    match kinds.first() {
        None if ended => problems.push("an ended execution has no transition".into()),
        Some(first) if !matches!(*first, "init" | "cancelled") => {
            problems.push(format!("the first transition is {first}, not init (or cancelled)"))
        }
        _ => {}
    }
    let mut ids = HashSet::new();
    for (i, t) in transitions.iter().enumerate() {
        if !ids.insert(t["id"].as_str().unwrap_or("").to_owned()) {
            problems.push(format!("transition {i} repeats the id {}", t["id"]));
        }
        if matches!(kinds[i], "finish" | "error" | "cancelled" | "wait") && !t["next"].is_null() {
            problems.push(format!("transition {i} ({}) has a next: {}", kinds[i], t["next"]));
        }
        if i == 0 {
            continue;
        }
        let prev = &transitions[i - 1];
        if !allows_next(kinds[i - 1], kinds[i]) {
            problems.push(format!("{} then {}: the table forbids it (at {i})", render(prev), render(t)));
        }
        if kinds[i] == kinds[i - 1] && t["current"] == prev["current"] {
            problems.push(format!("{} twice in a row (at {i}): a repeated transition", render(t)));
        }
    }
    if ended && kinds.last().is_some_and(|k| !TERMINAL_TYPES.contains(k)) {
        problems.push(format!("an ended execution's last transition is {}", kinds.last().unwrap()));
    }
    problems
}

/// A raw HTTP client of a server, as one tenant.
#[derive(Clone)]
pub struct Api {
    pub http: reqwest::Client,
    pub base: String,
    pub key: String,
}

impl Api {
    pub fn new(base: &str, key: &str) -> Api {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Api { http, base: base.to_owned(), key: key.to_owned() }
    }

    /// Sends a request; answers the status and the body as JSON (Null if empty,
    /// a string if it is not JSON).
    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut req =
            self.http.request(method.parse().unwrap(), format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, body)
    }

    /// A call that must answer `status`; its body.
    #[track_caller]
    pub fn expect(&self, status: u16, got: (u16, Value), what: &str) -> Value {
        assert_eq!(got.0, status, "{what}: {}", got.1);
        got.1
    }

    pub async fn agent(&self, name: &str) -> Uuid {
        let got = self.call("POST", "/api/agents", Some(&json!({"name": name}))).await;
        id_of(&self.expect(201, got, "POST /api/agents"))
    }

    /// Creates a task of `agent` (`POST /api/agents/{id}/tasks`, 201).
    pub async fn task(&self, agent: Uuid, body: &Value) -> Uuid {
        let got = self.call("POST", &format!("/api/agents/{agent}/tasks"), Some(body)).await;
        id_of(&self.expect(201, got, &format!("POST task {body}")))
    }

    /// Starts an execution (201, `queued`); answers it.
    pub async fn start(&self, task: Uuid, input: Value) -> Value {
        let got =
            self.call("POST", &format!("/api/tasks/{task}/executions"), Some(&json!({"input": input}))).await;
        let e = self.expect(201, got, "POST executions");
        assert_eq!(e["status"], "queued", "a new execution is queued: {e}");
        e
    }

    pub async fn execution(&self, id: Uuid) -> Value {
        let got = self.call("GET", &format!("/api/executions/{id}"), None).await;
        self.expect(200, got, "GET execution")
    }

    /// Every transition of the execution, oldest first.
    pub async fn transitions(&self, id: Uuid) -> Vec<Value> {
        let mut all = Vec::new();
        loop {
            let path =
                format!("/api/executions/{id}/transitions?limit=1000&offset={}&direction=asc", all.len());
            let got = self.call("GET", &path, None).await;
            let body = self.expect(200, got, "GET transitions");
            let items = body["items"].as_array().expect("a list answers items").clone();
            let n = items.len();
            all.extend(items);
            if n < 1000 {
                return all;
            }
        }
    }

    /// PUT /api/executions/{id}: the status and the body.
    pub async fn update(&self, id: Uuid, body: Value) -> (u16, Value) {
        self.call("PUT", &format!("/api/executions/{id}"), Some(&body)).await
    }

    /// Polls the execution (every 10 ms) until its status is one of
    /// `statuses`, at most `within`; answers it. Panics with what it last saw.
    pub async fn wait_for(&self, id: Uuid, statuses: &[&str], within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let e = self.execution(id).await;
            if statuses.iter().any(|s| e["status"] == *s) {
                return e;
            }
            // Ended otherwise: nothing will change it any more.
            let ended = TERMINAL.iter().any(|s| e["status"] == *s);
            if ended || Instant::now() >= deadline {
                let seen: Vec<String> = self.transitions(id).await.iter().map(render).collect();
                panic!("execution {id} not {statuses:?} (within {within:?}): {e}\ntransitions: {seen:#?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for a terminal status (at most `within`).
    pub async fn wait_ended(&self, id: Uuid, within: Duration) -> Value {
        self.wait_for(id, &TERMINAL, within).await
    }

    /// The transitions, checked against the table (panics on a problem).
    #[track_caller]
    pub fn checked(transitions: &[Value], ended: bool) {
        let problems = transition_problems(transitions, ended);
        let seen: Vec<String> = transitions.iter().map(render).collect();
        assert!(problems.is_empty(), "the transitions break the contract: {problems:#?}\n{seen:#?}");
    }
}

pub fn id_of(v: &Value) -> Uuid {
    v["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no id in {v}"))
}
