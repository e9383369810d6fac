//! The crash test's executions: clients that start runs of tasks that sleep,
//! wait for input, loop (`foreach`, a `map_reduce` with parallelism, a
//! `yield`) and prompt the fake provider, and resume some of the waiting ones,
//! while the server is killed. After every restart each acknowledged execution
//! (and each whose start was in flight at the kill and is found) must reach a
//! terminal state with the output its task computes (one still awaiting input
//! is resumed by the check), and its transitions must start with `init`, obey
//! the contract's allowed-next table, never repeat one (ids unique, no two of
//! the same type and place in a row, as a re-run would show) and keep every
//! transition seen at an earlier check, in order. Two tasks are poisoned: a
//! step that asks for a terabyte and a workflow that yields to itself; each
//! must fail naming its limit, and the server must never die of them (before
//! their bounds, either one aborted the process at every restart).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_platform_tests::executions::{TERMINAL, render, transition_problems};
use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Api, K, Ledger, Outcome, Rng, Shared, uuid_of};

/// Executions each execution client starts per cycle (at most).
const STARTS_PER_CLIENT: usize = 25;
/// Concurrent execution clients per cycle.
pub(super) const CLIENTS: usize = 2;
/// How long a check waits for an execution to end after a restart.
const ENDS_WITHIN: Duration = Duration::from_secs(90);
/// The "client" owning this module's agent and tasks in the main ledger: none
/// of the write clients, so no one changes or deletes them.
const OWNER: usize = usize::MAX;

/// The tasks the clients start, each with the output it must end with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    Sleep,
    Wait,
    Foreach,
    Prompt,
    Map,
    /// Poisoned: a step whose expression would build a terabyte.
    Bomb,
    /// Poisoned: a workflow that yields to itself without end.
    Recurse,
}

impl Flavor {
    const ALL: [Flavor; 7] = [
        Flavor::Sleep,
        Flavor::Wait,
        Flavor::Foreach,
        Flavor::Prompt,
        Flavor::Map,
        Flavor::Bomb,
        Flavor::Recurse,
    ];

    /// The setting a poisoned task's execution must fail naming.
    fn poison(self) -> Option<&'static str> {
        match self {
            Flavor::Bomb => Some("executions.expression_max_bytes"),
            Flavor::Recurse => Some("executions.max_depth"),
            _ => None,
        }
    }

    fn task(self) -> Value {
        let (name, main) = match self {
            Flavor::Sleep => (
                "exec-sleep",
                json!([{"evaluate": {"n": "_.n"}}, {"sleep": {"seconds": 1}}, {"evaluate": {"done": "outputs[0].n"}}]),
            ),
            Flavor::Wait => (
                "exec-wait",
                json!([
                    {"evaluate": {"n": "_.n"}},
                    {"wait_for_input": {"info": {"n": "_.n"}}},
                    {"evaluate": {"got": "_.v", "n": "outputs[0].n"}},
                ]),
            ),
            Flavor::Foreach => (
                "exec-foreach",
                json!([
                    {"foreach": {"in": "range(_.k)", "do": [{"evaluate": {"v": "_ * 2"}}, {"log": "{{ _.v }}"}]}},
                    {"evaluate": {"n": "len(_)"}},
                ]),
            ),
            Flavor::Prompt => (
                "exec-prompt",
                json!([{"prompt": "say {{ _.n }}", "unwrap": true}, {"evaluate": {"said": "_"}}]),
            ),
            Flavor::Map => (
                "exec-map",
                json!([
                    {"over": "range(_.k)", "map": {"evaluate": {"y": "_ * _"}}, "parallelism": 3,
                     "reduce": "results + _.y", "initial": 0},
                    {"workflow": "wrap", "arguments": {"s": "_"}},
                ]),
            ),
            Flavor::Bomb => (
                "exec-bomb",
                json!([{"evaluate": {"n": "_.n"}}, {"evaluate": {"x": "'a\\nb' | indent(10**12)"}}]),
            ),
            Flavor::Recurse => ("exec-recurse", json!([{"workflow": "again", "arguments": {"n": "_.n"}}])),
        };
        let mut task = json!({"name": name, "main": main, "metadata": {"tag": name}});
        if self == Flavor::Map {
            task["wrap"] = json!([{"return": {"sum": "_.s"}}]);
        }
        if self == Flavor::Recurse {
            task["again"] = json!([{"workflow": "again", "arguments": {"n": "_.n + 1"}}]);
        }
        task
    }

    fn expected(self, n: u64, k: u64) -> Value {
        match self {
            Flavor::Sleep => json!({"done": n}),
            Flavor::Wait => json!({"got": n, "n": n}),
            Flavor::Foreach => json!({"n": k}),
            Flavor::Prompt => json!({"said": format!("say {n}")}),
            Flavor::Map => json!({"sum": (0..k).map(|i| i * i).sum::<u64>()}),
            Flavor::Bomb | Flavor::Recurse => Value::Null,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resume {
    No,
    /// A resume was answered 200.
    Acknowledged,
    /// A resume was in flight at the kill: it may or may not have happened.
    InFlight,
}

#[derive(Clone)]
struct Run {
    flavor: Flavor,
    n: u64,
    k: u64,
    resume: Resume,
    /// Ended, and checked so since.
    ended: bool,
    /// The transition ids seen at the last check, in order.
    seen: Vec<String>,
}

/// What the execution clients did and the checks found.
#[derive(Default)]
pub(super) struct Execs {
    tasks: Vec<(Flavor, Uuid)>,
    runs: HashMap<Uuid, Run>,
    /// Starts with no answer: their tags (in the execution's metadata) and parameters.
    in_flight: HashMap<String, (Flavor, u64, u64)>,
    pub(super) fig: Figures,
}

#[derive(Debug, Default)]
pub(super) struct Figures {
    pub(super) started: u64,
    pub(super) adopted: u64,
    pub(super) finished: u64,
    pub(super) resumed: u64,
    pub(super) resumed_by_check: u64,
    /// Not ended when first read after a restart: carried on by the restarted server.
    pub(super) carried_over: u64,
    pub(super) transitions: u64,
    pub(super) lost: Vec<String>,
    /// Ended otherwise than the task computes (failed, or another output).
    pub(super) wrong: Vec<String>,
    pub(super) repeated: Vec<String>,
    pub(super) broken: Vec<String>,
    pub(super) unexpected: Vec<String>,
}

impl Figures {
    pub(super) fn problems(&self) -> usize {
        self.lost.len() + self.wrong.len() + self.repeated.len() + self.broken.len() + self.unexpected.len()
    }

    pub(super) fn print(&self) {
        eprintln!(
            "  executions: {} started and acknowledged, {} more found after a start in flight; {} not ended \
             at a kill and carried on after the restart; {} finished as their task computes (poisoned ones failing naming their limit), \
             {} resumed by clients, {} by the checks after a restart; {} transitions checked\n  \
             executions lost: {}, ended wrong: {}, repeated transitions: {}, transitions against the table: {}, \
             unexpected: {}",
            self.started,
            self.adopted,
            self.carried_over,
            self.finished,
            self.resumed,
            self.resumed_by_check,
            self.transitions,
            self.lost.len(),
            self.wrong.len(),
            self.repeated.len(),
            self.broken.len(),
            self.unexpected.len(),
        );
        for (what, list) in [
            ("execution lost", &self.lost),
            ("ended wrong", &self.wrong),
            ("repeated", &self.repeated),
            ("against the table", &self.broken),
            ("unexpected", &self.unexpected),
        ] {
            for p in list.iter().take(20) {
                eprintln!("  {what}: {p}");
            }
        }
    }
}

/// Creates the agent and the tasks the execution clients run, and enters them
/// in the main ledger (owned by no write client: never changed).
pub(super) async fn setup(api: &Api, ledger: &Mutex<Ledger>, execs: &Mutex<Execs>) {
    let created = |what: &str, outcome: Outcome| match outcome {
        Outcome::Answered(201, body) => body,
        Outcome::Answered(status, body) => panic!("{what}: {status} {body}"),
        _ => panic!("{what}: no answer"),
    };
    let agent = created(
        "the executions' agent",
        api.call("POST", "/api/agents", Some(&json!({"name": "Runner", "metadata": {"tag": "exec-agent"}})))
            .await,
    );
    let agent_id = uuid_of(&agent);
    let collection = format!("/api/agents/{agent_id}/tasks");
    let mut tasks = Vec::new();
    for flavor in Flavor::ALL {
        let task = created("a task to execute", api.call("POST", &collection, Some(&flavor.task())).await);
        tasks.push((flavor, task));
    }
    let mut l = ledger.lock().unwrap();
    l.add(K::Agent, Uuid::nil(), "/api/agents".into(), agent_id, OWNER, agent, (0, 0), true);
    let mut e = execs.lock().unwrap();
    for (flavor, task) in tasks {
        let id = uuid_of(&task);
        l.add(K::Task, agent_id, collection.clone(), id, OWNER, task, (0, 0), true);
        e.tasks.push((flavor, id));
    }
}

/// One execution client: starts executions (and resumes about half of the
/// waiting ones at once) until it has started its share or the server is gone.
pub(super) async fn client(api: Api, execs: Arc<Mutex<Execs>>, mut rng: Rng, shared: Arc<Shared>) {
    for _ in 0..STARTS_PER_CLIENT {
        let (flavor, task) = {
            let e = execs.lock().unwrap();
            *rng.pick(&e.tasks)
        };
        let n = shared.tags.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let k = 1 + rng.below(6);
        let tag = format!("ex{n}");
        let body = json!({"input": {"n": n, "k": k}, "metadata": {"tag": tag}});
        let id = match api.call("POST", &format!("/api/tasks/{task}/executions"), Some(&body)).await {
            Outcome::Answered(201, e) => {
                let id = uuid_of(&e);
                let mut x = execs.lock().unwrap();
                x.fig.started += 1;
                let run = Run { flavor, n, k, resume: Resume::No, ended: false, seen: Vec::new() };
                x.runs.insert(id, run);
                id
            }
            Outcome::Answered(status, body) => {
                let mut x = execs.lock().unwrap();
                x.fig.unexpected.push(format!("POST execution of {flavor:?}: {status} {body:.300}"));
                continue;
            }
            Outcome::NotSent => return,
            Outcome::Unknown => {
                execs.lock().unwrap().in_flight.insert(tag, (flavor, n, k));
                return;
            }
        };
        if flavor == Flavor::Wait && rng.below(2) == 0 && !resume_when_waiting(&api, &execs, id).await {
            return;
        }
    }
}

/// Waits (at most 10 s) for the execution to await input, and resumes it;
/// false when the server is gone.
async fn resume_when_waiting(api: &Api, execs: &Mutex<Execs>, id: Uuid) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let e = match api.call("GET", &format!("/api/executions/{id}"), None).await {
            Outcome::Answered(200, e) => e,
            Outcome::Answered(status, body) => {
                execs
                    .lock()
                    .unwrap()
                    .fig
                    .unexpected
                    .push(format!("GET execution {id}: {status} {body:.300}"));
                return true;
            }
            _ => return false,
        };
        if e["status"] == "awaiting_input" {
            let n = execs.lock().unwrap().runs[&id].n;
            let body = json!({"status": "running", "input": {"v": n}});
            let outcome = api.call("PUT", &format!("/api/executions/{id}"), Some(&body)).await;
            let mut x = execs.lock().unwrap();
            return match outcome {
                Outcome::Answered(200, _) => {
                    x.fig.resumed += 1;
                    x.runs.get_mut(&id).unwrap().resume = Resume::Acknowledged;
                    true
                }
                Outcome::Answered(status, body) => {
                    x.fig.unexpected.push(format!("resume of {id}: {status} {body:.300}"));
                    true
                }
                Outcome::NotSent => false,
                Outcome::Unknown => {
                    x.runs.get_mut(&id).unwrap().resume = Resume::InFlight;
                    false
                }
            };
        }
        if TERMINAL.iter().any(|s| e["status"] == *s) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// After a restart: finds the executions whose start was in flight, drives
/// every unended one to its end (resuming those that await input), and checks
/// each one's status, output and transitions. `last`: the final check, which
/// also reads again the executions that ended at earlier checks.
pub(super) async fn verify(api: &Api, execs: &Mutex<Execs>, last: bool) {
    let (tasks, in_flight) = {
        let mut x = execs.lock().unwrap();
        (x.tasks.clone(), std::mem::take(&mut x.in_flight))
    };
    // Every execution listed is one acknowledged, or one whose start was in flight.
    let mut listed = HashSet::new();
    for (_, task) in &tasks {
        let mut offset = 0;
        loop {
            let path = format!("/api/tasks/{task}/executions?limit=1000&offset={offset}&direction=asc");
            let page = match api.call("GET", &path, None).await {
                Outcome::Answered(200, body) => body["items"].as_array().cloned().unwrap_or_default(),
                _ => panic!("GET {path}: no list"),
            };
            offset += page.len();
            let mut x = execs.lock().unwrap();
            for e in &page {
                let id = uuid_of(e);
                listed.insert(id);
                if x.runs.contains_key(&id) {
                    continue;
                }
                let tag = e["metadata"]["tag"].as_str().unwrap_or("");
                match in_flight.get(tag) {
                    Some(&(flavor, n, k)) => {
                        x.fig.adopted += 1;
                        x.runs.insert(
                            id,
                            Run { flavor, n, k, resume: Resume::No, ended: false, seen: Vec::new() },
                        );
                    }
                    None => x.fig.unexpected.push(format!("execution {id} that nobody started: {e}")),
                }
            }
            if page.len() < 1000 {
                break;
            }
        }
    }
    let to_check: Vec<(Uuid, Run)> = {
        let mut x = execs.lock().unwrap();
        let mut missing = Vec::new();
        for (id, run) in &x.runs {
            if !listed.contains(id) {
                missing.push(format!("execution {id} ({:?}, acknowledged) is not listed", run.flavor));
            }
        }
        x.fig.lost.extend(missing);
        x.runs
            .iter()
            .filter(|(id, r)| listed.contains(*id) && (last || !r.ended))
            .map(|(id, r)| (*id, r.clone()))
            .collect()
    };
    let checked: Vec<_> = futures::stream::iter(to_check)
        .map(|(id, run)| async move {
            let mut notes = Notes::default();
            let (resume, ids) = if run.ended {
                // Checked at its end already: only its transitions must not have changed.
                (run.resume, again(api, id, &run.seen, &mut notes).await)
            } else {
                let resume = drive(api, id, run.flavor, run.n, run.resume, &mut notes).await;
                (resume, check(api, id, &run, resume, &mut notes).await)
            };
            (id, resume, ids, notes)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let mut x = execs.lock().unwrap();
    for (id, resume, ids, notes) in checked {
        let run = x.runs.get_mut(&id).unwrap();
        let newly = !run.ended;
        run.resume = resume;
        run.ended = true;
        run.seen = ids.clone();
        let fig = &mut x.fig;
        if newly {
            fig.transitions += ids.len() as u64;
            fig.finished += u64::from(notes.succeeded);
        }
        fig.resumed_by_check += u64::from(notes.resumed);
        fig.carried_over += u64::from(notes.carried_over);
        fig.lost.extend(notes.lost);
        fig.wrong.extend(notes.wrong);
        fig.repeated.extend(notes.repeated);
        fig.broken.extend(notes.broken);
        fig.unexpected.extend(notes.unexpected);
    }
}

#[derive(Default)]
struct Notes {
    succeeded: bool,
    carried_over: bool,
    resumed: bool,
    lost: Vec<String>,
    wrong: Vec<String>,
    repeated: Vec<String>,
    broken: Vec<String>,
    unexpected: Vec<String>,
}

/// Polls the execution until it ends, resuming it if it awaits input; answers
/// what is known of its resume.
async fn drive(api: &Api, id: Uuid, flavor: Flavor, n: u64, mut resume: Resume, notes: &mut Notes) -> Resume {
    let deadline = Instant::now() + ENDS_WITHIN;
    let mut first = true;
    loop {
        let (status, e) = api.get(&format!("/api/executions/{id}")).await;
        if status != 200 {
            notes.lost.push(format!("execution {id} ({flavor:?}): GET answers {status} {e}"));
            return resume;
        }
        if TERMINAL.iter().any(|s| e["status"] == *s) {
            return resume;
        }
        notes.carried_over |= first;
        first = false;
        if e["status"] == "awaiting_input" {
            if resume == Resume::Acknowledged {
                notes
                    .lost
                    .push(format!("execution {id} awaits input again after an acknowledged resume: {e}"));
                return resume;
            }
            let body = json!({"status": "running", "input": {"v": n}});
            match api.call("PUT", &format!("/api/executions/{id}"), Some(&body)).await {
                Outcome::Answered(200, _) => {
                    resume = Resume::Acknowledged;
                    notes.resumed = true;
                }
                Outcome::Answered(409, _) => {}
                Outcome::Answered(status, body) => {
                    notes.unexpected.push(format!("resume of {id} by the check: {status} {body}"));
                    return resume;
                }
                _ => panic!("PUT /api/executions/{id}: no answer"),
            }
            continue;
        }
        if Instant::now() >= deadline {
            notes.lost.push(format!("execution {id} ({flavor:?}) did not end within {ENDS_WITHIN:?}: {e}"));
            return resume;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks an ended execution: succeeded with its output, its transitions
/// against the table, the ones seen before kept. Answers its transition ids.
async fn check(api: &Api, id: Uuid, run: &Run, resume: Resume, notes: &mut Notes) -> Vec<String> {
    let (flavor, n, k, seen) = (run.flavor, run.n, run.k, &run.seen);
    let (_, e) = api.get(&format!("/api/executions/{id}")).await;
    let expected = flavor.expected(n, k);
    let as_expected = match flavor.poison() {
        Some(setting) => e["status"] == "failed" && e["error"].as_str().is_some_and(|m| m.contains(setting)),
        None => e["status"] == "succeeded" && e["output"] == expected,
    };
    if as_expected {
        notes.succeeded = true;
    } else if TERMINAL.iter().any(|s| e["status"] == *s) {
        let wanted = flavor.poison().map_or(expected.to_string(), |s| format!("a failure naming {s}"));
        notes
            .wrong
            .push(format!("execution {id} ({flavor:?}) ended {}, not with {wanted}: {e}", e["status"]));
    }
    let Some(ts) = transitions(api, id, notes).await else { return seen.to_vec() };
    let ended = TERMINAL.iter().any(|s| e["status"] == *s);
    for p in transition_problems(&ts, ended) {
        let line = format!("execution {id} ({flavor:?}): {p}");
        if p.contains("twice in a row") || p.contains("repeats the id") {
            notes.repeated.push(line);
        } else {
            notes.broken.push(line);
        }
    }
    let ids: Vec<String> = ts.iter().map(|t| t["id"].as_str().unwrap_or("").to_owned()).collect();
    if !ids.starts_with(seen) {
        let shown: Vec<String> = ts.iter().map(render).collect();
        notes
            .lost
            .push(format!("execution {id}: transitions seen before are gone or changed: now {shown:?}"));
    }
    if flavor == Flavor::Wait && resume == Resume::Acknowledged {
        let resumed = ts.iter().any(|t| t["type"] == "resume" && t["output"] == json!({"v": n}));
        if !resumed {
            notes.lost.push(format!("execution {id}: an acknowledged resume has no resume transition"));
        }
    }
    ids
}

/// The execution's transitions, oldest first (None, noted as lost, if they cannot be read).
async fn transitions(api: &Api, id: Uuid, notes: &mut Notes) -> Option<Vec<Value>> {
    let mut ts = Vec::new();
    loop {
        let path = format!("/api/executions/{id}/transitions?limit=1000&offset={}&direction=asc", ts.len());
        let (status, body) = api.get(&path).await;
        if status != 200 {
            notes.lost.push(format!("GET {path}: {status} {body}"));
            return None;
        }
        let page = body["items"].as_array().cloned().unwrap_or_default();
        let more = page.len() == 1000;
        ts.extend(page);
        if !more {
            return Some(ts);
        }
    }
}

/// An execution that ended at an earlier check: its transitions are exactly those seen then.
async fn again(api: &Api, id: Uuid, seen: &[String], notes: &mut Notes) -> Vec<String> {
    let Some(ts) = transitions(api, id, notes).await else { return seen.to_vec() };
    let ids: Vec<String> = ts.iter().map(|t| t["id"].as_str().unwrap_or("").to_owned()).collect();
    if ids != seen {
        let shown: Vec<String> = ts.iter().map(render).collect();
        notes.lost.push(format!("execution {id} ended, but its transitions changed since: now {shown:?}"));
    }
    ids
}
