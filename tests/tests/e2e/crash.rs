//! The crash test: the real binary under concurrent writes of every kind
//! (users, agents, sessions, messages, chats that save, docs, tools, tasks,
//! updates, and deletes that cascade) from several clients, killed with
//! SIGKILL at a random moment, restarted on the same data dir, and checked
//! through the API after every restart:
//!
//! - the store opens every time;
//! - every write answered 2xx is there and intact (a chat that saved: its
//!   input and its answer are in the session, in that order);
//! - every delete answered 2xx is gone, with everything it cascades to;
//! - nothing is orphaned, and nothing is there that no request wrote;
//! - every execution started reaches its end with the output its task
//!   computes, its transitions obeying the contract's table, none repeated
//!   and none lost (see [`executions`]).
//!
//! A request in flight at the kill may or may not have happened; either is
//! accepted, but only whole: a record equals its old or its new state, a
//! chat's exchange is saved entirely or not at all. Every record written is
//! kept in a ledger that carries over, so each restart checks all earlier
//! cycles too. After the last restart the store is also opened in-process and
//! compared with the ledger record by record.
//!
//! `CRASH_CYCLES` (default 5) sets the number of kills; `CRASH_SEED` the seed
//! (printed; it fixes each client's choices and the kill delays, not the
//! interleaving). The long run:
//! `CRASH_CYCLES=100 cargo test --release -p agent-platform-tests --test e2e -- crash:: --nocapture`

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::store::sled_store::{Durability, SledStore};
use agent_platform::store::{Kind, Store};
use agent_platform_tests::{Process, orphans_in};
use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

mod executions;

/// Concurrent clients per cycle.
const CLIENTS: usize = 6;
/// The kill lands this long (ms, at random) after the first message was saved.
const KILL_AFTER_MS: (u64, u64) = (50, 500);
/// The chat answer is the input (the fake upstream's `Echo`), so each saved answer is unique.
const ANSWER: Behaviour = Behaviour::Echo;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill_intact_and_without_orphans() {
    let cycles: u64 = env_number("CRASH_CYCLES").unwrap_or(5);
    let seed = env_number("CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("crash test: {cycles} cycles, {CLIENTS} clients, CRASH_SEED={seed}");
    let started = Instant::now();

    let upstream = FakeUpstream::start().await;
    upstream.set_default(ANSWER);
    let upstream_url = upstream.base_url();
    let env = [
        ("OPENAI_BASE_URL", upstream_url.as_str()),
        ("OPENAI_API_KEY", "sk-crash-test"),
        ("AGENT_PLATFORM_DEFAULT_MODEL", "crash-model"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let shared = Arc::new(Shared::default());
    let execs = Arc::new(Mutex::new(executions::Execs::default()));
    let mut master = Rng(seed);
    let mut key = None;
    let mut kill_seq = 0;
    for cycle in 0..=cycles {
        // Asserts that it starts: the store opens every time.
        let mut p = Process::serve_with_env(&data, &env);
        if cycle == 0 {
            key = p.key.clone();
        }
        let api = Api::new(&p.base, key.as_deref().expect("the first start printed a key"));
        if cycle == 0 {
            executions::setup(&api, &ledger, &execs).await;
        }
        if cycle > 0 {
            let restarted = Instant::now();
            let mut l = std::mem::take(&mut *ledger.lock().unwrap());
            let checked_before = l.fig.checked;
            verify(&api, &mut l, kill_seq).await;
            eprintln!(
                "  restart {cycle}: {} records checked in {:.1} s ({} present, {} gone)",
                l.fig.checked - checked_before,
                restarted.elapsed().as_secs_f64(),
                l.entries.values().filter(|e| !e.gone).count(),
                l.entries.values().filter(|e| e.gone).count(),
            );
            *ledger.lock().unwrap() = l;
            let restarted = Instant::now();
            executions::verify(&api, &execs, cycle == cycles).await;
            let x = execs.lock().unwrap();
            eprintln!(
                "  restart {cycle}: executions checked in {:.1} s ({} started so far, {} problems)",
                restarted.elapsed().as_secs_f64(),
                x.fig.started + x.fig.adopted,
                x.fig.problems(),
            );
        }
        if cycle == cycles {
            p.kill();
            break;
        }

        let acknowledged_before = ledger.lock().unwrap().fig.acknowledged;
        shared.warm.store(false, Ordering::SeqCst);
        let clients: Vec<_> = (0..CLIENTS)
            .map(|me| {
                let rng = Rng(master.next());
                tokio::spawn(client(api.clone(), ledger.clone(), me, rng, shared.clone()))
            })
            .collect();
        let exec_clients: Vec<_> = (0..executions::CLIENTS)
            .map(|_| {
                let rng = Rng(master.next());
                tokio::spawn(executions::client(api.clone(), execs.clone(), rng, shared.clone()))
            })
            .collect();
        // Load flows once a message was saved (the server's tokenizer is built by then).
        let deadline = Instant::now() + Duration::from_secs(120);
        while !shared.warm.load(Ordering::SeqCst) {
            let stopped = clients.iter().all(|c| c.is_finished());
            assert!(
                !stopped && Instant::now() < deadline,
                "no message saved: {:?}",
                ledger.lock().unwrap().fig
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let delay = KILL_AFTER_MS.0 + master.below(KILL_AFTER_MS.1 - KILL_AFTER_MS.0);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        assert!(p.child.try_wait().unwrap().is_none(), "the server exited before it was killed");
        p.kill();
        kill_seq = shared.clock.fetch_add(1, Ordering::SeqCst);
        for c in clients.into_iter().chain(exec_clients) {
            c.await.unwrap();
        }
        let l = ledger.lock().unwrap();
        eprintln!(
            "cycle {}: {} writes acknowledged, killed {delay} ms after the first message, {} in flight",
            cycle + 1,
            l.fig.acknowledged - acknowledged_before,
            l.creates.len()
                + l.chats.iter().filter(|c| !c.certain).count()
                + l.entries.values().filter(|e| e.pending.is_some()).count(),
        );
    }

    // The last process is dead: open its store here and compare it with the ledger.
    let mut l = std::mem::take(&mut *ledger.lock().unwrap());
    let store = SledStore::open(&data, Durability::Flush).expect("the store opens in-process");
    let orphans = orphans_in(&store).await;
    l.fig.orphans.extend(orphans);
    compare_store(&store, &mut l).await;
    drop(store);

    let f = &l.fig;
    eprintln!(
        "crash test figures (CRASH_SEED={seed}):\n  \
         cycles: {cycles} (SIGKILL, restart, check)\n  \
         writes acknowledged: {} (creates {}, updates {}, deletes {}, messages {}, chats {}), each checked after the next restart\n  \
         in flight at a kill: {} (found applied: {}); answered 404 after a concurrent delete: {}\n  \
         records checked present and intact: {} over all restarts ({} also read one by one, {} searched)\n  \
         deletes checked: {} records gone ({} of them by cascade)\n  \
         at the end: {} records present, {} gone; the store holds exactly the ledger's records\n  \
         lost: {}, orphans: {}, phantoms: {}, unexpected answers: {}\n  \
         time: {:.1} s",
        f.acknowledged,
        f.creates,
        f.updates,
        f.deletes,
        f.messages,
        f.chats,
        f.in_flight,
        f.applied,
        f.raced,
        f.checked,
        f.read_back,
        f.searched,
        f.deletes_checked,
        f.cascaded,
        l.entries.values().filter(|e| !e.gone).count(),
        l.entries.values().filter(|e| e.gone).count(),
        f.lost.len(),
        f.orphans.len(),
        f.phantoms.len(),
        f.unexpected.len(),
        started.elapsed().as_secs_f64(),
    );
    let x = execs.lock().unwrap();
    x.fig.print();
    for (what, list) in
        [("lost", &f.lost), ("orphan", &f.orphans), ("phantom", &f.phantoms), ("unexpected", &f.unexpected)]
    {
        for p in list.iter().take(20) {
            eprintln!("  {what}: {p}");
        }
    }
    assert!(f.acknowledged > 0 && f.checked > 0, "the test wrote and checked nothing");
    assert!(x.fig.started > 0 && x.fig.finished > 0, "no execution was started and finished");
    assert_eq!(
        x.fig.problems(),
        0,
        "the crash test found problems with executions (CRASH_SEED={seed}); see above"
    );
    assert!(
        f.lost.is_empty() && f.orphans.is_empty() && f.phantoms.is_empty() && f.unexpected.is_empty(),
        "the crash test found problems (CRASH_SEED={seed}); see above"
    );
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let n = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(n.unwrap_or_else(|_| panic!("{name}={v} is not a number")))
}

// ---- the clients ----

#[derive(Default)]
struct Shared {
    /// Ticks before each request is sent and after each answer: orders acknowledgements.
    clock: AtomicU64,
    /// Makes every record's tag unique.
    tags: AtomicU64,
    /// A message was saved in this cycle.
    warm: AtomicBool,
}

/// One client: random writes, one at a time, until the server is gone.
async fn client(api: Api, ledger: Arc<Mutex<Ledger>>, me: usize, mut rng: Rng, shared: Arc<Shared>) {
    loop {
        let tag = format!("zq{}", shared.tags.fetch_add(1, Ordering::SeqCst));
        let plan = ledger.lock().unwrap().plan(me, &mut rng, tag);
        let sent = shared.clock.fetch_add(1, Ordering::SeqCst);
        let outcome = api.call(plan.method, &plan.path, plan.body.as_ref()).await;
        let acked = shared.clock.fetch_add(1, Ordering::SeqCst);
        let mut l = ledger.lock().unwrap();
        match outcome {
            Outcome::Answered(status, body) if (200..300).contains(&status) => {
                if matches!(plan.what, What::Create { kind: K::Message, .. } | What::Chat { .. }) {
                    shared.warm.store(true, Ordering::SeqCst);
                }
                l.acknowledged(me, plan, body, (sent, acked));
            }
            // The target (or its owner) was deleted by another client meanwhile.
            Outcome::Answered(404, _) => l.fig.raced += 1,
            Outcome::Answered(status, body) => {
                let body = body.to_string();
                l.fig
                    .unexpected
                    .push(format!("{} {} answered {status}: {body:.300}", plan.method, plan.path));
            }
            // Refused: the server is gone and this request never reached it.
            Outcome::NotSent => return,
            Outcome::Unknown => {
                l.in_flight(me, plan, sent);
                return;
            }
        }
    }
}

/// A write to send, and what it means for the ledger.
struct Plan {
    method: &'static str,
    path: String,
    body: Option<Value>,
    what: What,
}

enum What {
    /// A new record in the collection `path` (a message: `tag` is its content).
    Create {
        kind: K,
        parent: Uuid,
        tag: String,
    },
    /// A PUT or PATCH of `id`: the record as it would be if the write happened (but `updated_at`).
    Update {
        id: Uuid,
        predicted: Value,
    },
    Delete {
        id: Uuid,
    },
    /// A chat that saves: the input `content`, answered by the same text.
    Chat {
        session: Uuid,
        content: String,
    },
}

const NAMES: [&str; 8] = ["Ada", "Brit", "Chen", "Dana", "Émile", "Farah", "Zoë", "Łukasz"];
const WORDS: [&str; 16] = [
    "river", "stone", "lantern", "orbit", "maple", "signal", "harbor", "copper", "meadow", "quartz", "ember",
    "violet", "canyon", "falcon", "glacier", "willow",
];

impl Ledger {
    /// The next write of client `me`: creates anywhere, changes only to its own records.
    fn plan(&self, me: usize, rng: &mut Rng, tag: String) -> Plan {
        loop {
            let roll = rng.below(100);
            let plan = match roll {
                0..6 => Some(self.create_user(rng, tag.clone())),
                6..12 => Some(self.create_agent(rng, tag.clone())),
                12..20 => self.create_session(rng, tag.clone()),
                20..38 => self.pick(K::Session, rng, None).map(|(s, _)| {
                    let content = format!("{tag} {}", rng.words(6));
                    Plan {
                        method: "POST",
                        path: format!("/api/sessions/{s}/messages"),
                        body: Some(json!({"role": "user", "content": content})),
                        what: What::Create { kind: K::Message, parent: s, tag: content },
                    }
                }),
                38..46 => self.pick(K::Session, rng, None).map(|(s, _)| {
                    let content = format!("{tag} {}?", rng.words(5));
                    Plan {
                        method: "POST",
                        path: format!("/api/sessions/{s}/chat"),
                        body: Some(json!({"messages": [{"role": "user", "content": content}], "save": true})),
                        what: What::Chat { session: s, content },
                    }
                }),
                46..58 => self.create_doc(rng, tag.clone()),
                58..62 => self.pick(K::Agent, rng, None).map(|(a, _)| Plan {
                    method: "POST",
                    path: format!("/api/agents/{a}/tools"),
                    body: Some(json!({
                        "name": tag, "type": "function", "description": rng.words(4),
                        "function": {"parameters": {"type": "object", "properties": {}}},
                        "metadata": {"tag": tag},
                    })),
                    what: What::Create { kind: K::Tool, parent: a, tag: tag.clone() },
                }),
                62..66 => self.pick(K::Agent, rng, None).map(|(a, _)| Plan {
                    method: "PUT",
                    path: format!("/api/agents/{a}/tasks"),
                    body: Some(json!({
                        "name": tag, "description": rng.words(4),
                        "main": [{"prompt": rng.words(3)}], "metadata": {"tag": tag},
                    })),
                    what: What::Create { kind: K::Task, parent: a, tag: tag.clone() },
                }),
                66..74 => self.update_participant(me, rng),
                74..78 => self.pick(K::Session, rng, Some(me)).map(|(id, e)| {
                    // PUT merges here, as PATCH does.
                    let method = if rng.below(2) == 0 { "PUT" } else { "PATCH" };
                    let change = match rng.below(3) {
                        0 => json!({"situation": rng.words(5)}),
                        1 => json!({"metadata": {"rev": rng.below(1000)}}),
                        _ => json!({"situation": rng.words(3), "metadata": {"note": rng.words(1)}}),
                    };
                    update(method, &e.path, id, &e.body, change, true)
                }),
                78..81 => {
                    let kind = if rng.below(2) == 0 { K::Tool } else { K::Task };
                    self.pick(kind, rng, Some(me)).map(|(id, e)| match kind {
                        K::Tool => {
                            let change = match rng.below(2) {
                                0 => json!({"description": rng.words(4)}),
                                _ => json!({"metadata": {"rev": rng.below(1000)}}),
                            };
                            update("PATCH", &e.path, id, &e.body, change, true)
                        }
                        _ => {
                            // Overwrites: every field this test ever sets is sent.
                            let b = &e.body;
                            let body = json!({
                                "id": id, "name": b["name"], "description": rng.words(4),
                                "main": [{"log": rng.words(2)}, {"return": {"ok": true}}],
                                "metadata": {"tag": b["metadata"]["tag"], "rev": rng.below(1000)},
                            });
                            update("PUT", &e.collection, id, b, body, false)
                        }
                    })
                }
                81..86 => self.delete_own(K::Doc, me, rng),
                86..89 => self.delete_own(K::Session, me, rng),
                89..91 => self.delete_own(K::User, me, rng),
                91..93 => self.delete_own(K::Agent, me, rng),
                93..95 => self.delete_own(if rng.below(2) == 0 { K::Tool } else { K::Task }, me, rng),
                _ => Some(self.create_agent(rng, tag.clone())),
            };
            if let Some(p) = plan {
                return p;
            }
        }
    }

    fn create_user(&self, rng: &mut Rng, tag: String) -> Plan {
        let project = if rng.below(3) == 0 { json!(format!("p_{tag}")) } else { Value::Null };
        Plan {
            method: "POST",
            path: "/api/users".into(),
            body: Some(json!({
                "name": format!("{} {}", rng.pick(&NAMES), rng.below(100)), "about": rng.words(8),
                "metadata": {"tag": tag}, "project": project,
            })),
            what: What::Create { kind: K::User, parent: Uuid::nil(), tag },
        }
    }

    fn create_agent(&self, rng: &mut Rng, tag: String) -> Plan {
        let model = if rng.below(4) == 0 { "crash-model-2" } else { "" };
        Plan {
            method: "POST",
            path: "/api/agents".into(),
            body: Some(json!({
                "name": format!("{} {}", rng.pick(&NAMES), rng.below(100)), "about": rng.words(8),
                "model": model, "instructions": [rng.words(6), rng.words(4)], "metadata": {"tag": tag},
            })),
            what: What::Create { kind: K::Agent, parent: Uuid::nil(), tag },
        }
    }

    fn create_session(&self, rng: &mut Rng, tag: String) -> Option<Plan> {
        let mut agents = vec![self.pick(K::Agent, rng, None)?.0];
        if rng.below(3) == 0
            && let Some((a, _)) = self.pick(K::Agent, rng, None)
            && !agents.contains(&a)
        {
            agents.push(a);
        }
        let mut users = Vec::new();
        for _ in 0..rng.below(3) {
            if let Some((u, _)) = self.pick(K::User, rng, None)
                && !users.contains(&u)
            {
                users.push(u);
            }
        }
        Some(Plan {
            method: "POST",
            path: "/api/sessions".into(),
            body: Some(json!({
                "agents": agents, "users": users, "situation": rng.words(6), "metadata": {"tag": tag},
            })),
            what: What::Create { kind: K::Session, parent: Uuid::nil(), tag },
        })
    }

    fn create_doc(&self, rng: &mut Rng, tag: String) -> Option<Plan> {
        let (owner, role) = if rng.below(10) < 7 {
            (self.pick(K::Agent, rng, None)?.0, "agents")
        } else {
            (self.pick(K::User, rng, None)?.0, "users")
        };
        let mut snippets = vec![format!("{tag} {}", rng.words(12))];
        snippets.extend((0..rng.below(3)).map(|_| rng.words(10)));
        Some(Plan {
            method: "POST",
            path: format!("/api/{role}/{owner}/docs"),
            body: Some(json!({
                "title": format!("{tag} {}", rng.words(3)), "content": snippets, "metadata": {"tag": tag},
            })),
            what: What::Create { kind: K::Doc, parent: owner, tag },
        })
    }

    fn update_participant(&self, me: usize, rng: &mut Rng) -> Option<Plan> {
        let kind = if rng.below(2) == 0 { K::User } else { K::Agent };
        let (id, e) = self.pick(kind, rng, Some(me))?;
        let b = &e.body;
        let name = json!(format!("{} {}", rng.pick(&NAMES), rng.below(100)));
        let rev = rng.below(1000);
        Some(if rng.below(2) == 0 {
            // PUT overwrites: every field this test ever sets is sent.
            let body = match kind {
                K::User => json!({
                    "name": name, "about": rng.words(5), "metadata": {"tag": b["metadata"]["tag"], "rev": rev},
                    "project": b["project"],
                }),
                _ => json!({
                    "name": name, "about": rng.words(5), "model": b["model"], "instructions": [rng.words(3)],
                    "metadata": {"tag": b["metadata"]["tag"], "rev": rev},
                }),
            };
            update("PUT", &e.path, id, b, body, false)
        } else {
            let change = match rng.below(3) {
                0 => json!({"about": rng.words(6)}),
                1 => json!({"metadata": {"rev": rev}}),
                _ => json!({"name": name, "metadata": {"note": rng.words(1)}}),
            };
            update("PATCH", &e.path, id, b, change, true)
        })
    }

    fn delete_own(&self, kind: K, me: usize, rng: &mut Rng) -> Option<Plan> {
        let (id, e) = self.pick(kind, rng, Some(me))?;
        Some(Plan { method: "DELETE", path: e.path.clone(), body: None, what: What::Delete { id } })
    }

    /// A random record of `kind` not known to be deleted (of client `mine`, if given).
    fn pick(&self, kind: K, rng: &mut Rng, mine: Option<usize>) -> Option<(Uuid, &Entry)> {
        let ids = self.live.get(&kind).filter(|ids| !ids.is_empty())?;
        (0..16).find_map(|_| {
            let id = *rng.pick(ids);
            let e = &self.entries[&id];
            let usable = !e.deleted && !e.gone && e.pending.is_none() && mine.is_none_or(|m| e.client == m);
            usable.then_some((id, e))
        })
    }
}

/// A PUT or PATCH of the record `id` at `path`; `merge`: metadata is merged key by key.
fn update(method: &'static str, path: &str, id: Uuid, body: &Value, change: Value, merge: bool) -> Plan {
    let predicted = apply(body, &change, merge);
    Plan { method, path: path.into(), body: Some(change), what: What::Update { id, predicted } }
}

/// `record` with the fields of `change` written over it (`updated_at` aside).
fn apply(record: &Value, change: &Value, merge_metadata: bool) -> Value {
    let mut out = record.clone();
    for (k, v) in change.as_object().expect("a change is an object") {
        match (k.as_str(), out.get_mut(k).and_then(Value::as_object_mut), v.as_object()) {
            ("metadata", Some(stored), Some(new)) if merge_metadata => {
                stored.extend(new.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            _ => out[k] = v.clone(),
        }
    }
    out
}

// ---- the ledger ----

/// What the store must hold: every record written, as last acknowledged.
#[derive(Default)]
struct Ledger {
    entries: HashMap<Uuid, Entry>,
    /// Ids by kind, for picking targets; pruned of records gone.
    live: HashMap<K, Vec<Uuid>>,
    /// Creates in flight at the kill: their ids are unknown, their tags are not.
    creates: Vec<PendingCreate>,
    /// Chats that saved (or were in flight at the kill), not yet found in their session.
    chats: Vec<ChatExpect>,
    fig: Figures,
}

struct Entry {
    kind: K,
    /// The owner (doc, tool, task) or session (message); nil for the others.
    parent: Uuid,
    /// The collection it is listed in, e.g. `/api/agents/{parent}/docs`.
    collection: String,
    /// Its own path, e.g. `/api/agents/{parent}/docs/{id}`.
    path: String,
    /// The client that may change or delete it.
    client: usize,
    /// The record as last acknowledged (or read back after a restart).
    body: Value,
    /// A write of it in flight at the kill.
    pending: Option<Pending>,
    /// Its delete was acknowledged.
    deleted: bool,
    /// Checked gone after a restart (deleted, or by cascade); never to come back.
    gone: bool,
    /// Written since the last restart: read it back one by one too.
    dirty: bool,
    /// Messages: the clock when sent and when acknowledged.
    order: (u64, u64),
}

enum Pending {
    Update(Value),
    Delete,
}

struct PendingCreate {
    collection: String,
    tag: String,
    request: Value,
    client: usize,
    parent: Uuid,
    sent: u64,
}

struct ChatExpect {
    session: Uuid,
    content: String,
    /// Answered 2xx (else in flight at the kill).
    certain: bool,
    order: (u64, u64),
}

#[derive(Debug, Default)]
struct Figures {
    acknowledged: u64,
    creates: u64,
    updates: u64,
    deletes: u64,
    messages: u64,
    chats: u64,
    raced: u64,
    in_flight: u64,
    applied: u64,
    checked: u64,
    read_back: u64,
    searched: u64,
    deletes_checked: u64,
    cascaded: u64,
    lost: Vec<String>,
    orphans: Vec<String>,
    phantoms: Vec<String>,
    unexpected: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum K {
    User,
    Agent,
    Session,
    Message,
    Doc,
    Tool,
    Task,
}

impl K {
    const ALL: [K; 7] = [K::User, K::Agent, K::Session, K::Message, K::Doc, K::Tool, K::Task];

    fn stored(self) -> Kind {
        match self {
            K::User => Kind::User,
            K::Agent => Kind::Agent,
            K::Session => Kind::Session,
            K::Message => Kind::Message,
            K::Doc => Kind::Doc,
            K::Tool => Kind::Tool,
            K::Task => Kind::Task,
        }
    }

    fn name(self) -> &'static str {
        self.stored().name()
    }

    /// The tag that identifies a record whose create had no answer.
    fn tag_of(self, record: &Value) -> Option<String> {
        let tag = match self {
            K::Message => &record["content"],
            _ => &record["metadata"]["tag"],
        };
        tag.as_str().map(str::to_owned)
    }
}

impl Ledger {
    fn acknowledged(&mut self, me: usize, plan: Plan, body: Value, order: (u64, u64)) {
        self.fig.acknowledged += 1;
        match plan.what {
            What::Create { kind, parent, .. } => {
                let id = uuid_of(&body);
                if kind == K::Message {
                    self.fig.messages += 1;
                } else {
                    self.fig.creates += 1;
                }
                self.add(kind, parent, plan.path, id, me, body, order, true);
            }
            What::Update { id, .. } => {
                self.fig.updates += 1;
                let e = self.entries.get_mut(&id).expect("an updated record is in the ledger");
                e.body = body;
                e.dirty = true;
            }
            What::Delete { id } => {
                self.fig.deletes += 1;
                let e = self.entries.get_mut(&id).expect("a deleted record is in the ledger");
                e.deleted = true;
                e.dirty = true;
            }
            What::Chat { session, content } => {
                self.fig.chats += 1;
                self.chats.push(ChatExpect { session, content, certain: true, order });
            }
        }
    }

    fn in_flight(&mut self, me: usize, plan: Plan, sent: u64) {
        self.fig.in_flight += 1;
        match plan.what {
            What::Create { parent, tag, .. } => {
                let request = plan.body.expect("a create has a body");
                self.creates.push(PendingCreate {
                    collection: plan.path,
                    tag,
                    request,
                    client: me,
                    parent,
                    sent,
                });
            }
            What::Update { id, predicted } => {
                self.entries.get_mut(&id).unwrap().pending = Some(Pending::Update(predicted));
            }
            What::Delete { id } => self.entries.get_mut(&id).unwrap().pending = Some(Pending::Delete),
            What::Chat { session, content } => {
                self.chats.push(ChatExpect { session, content, certain: false, order: (sent, u64::MAX) });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        kind: K,
        parent: Uuid,
        collection: String,
        id: Uuid,
        client: usize,
        body: Value,
        order: (u64, u64),
        dirty: bool,
    ) {
        let path = format!("{collection}/{id}");
        let entry = Entry {
            kind,
            parent,
            collection,
            path,
            client,
            body,
            pending: None,
            deleted: false,
            gone: false,
            dirty,
            order,
        };
        assert!(self.entries.insert(id, entry).is_none(), "{} {id} was created twice", kind.name());
        self.live.entry(kind).or_default().push(id);
    }
}

fn uuid_of(record: &Value) -> Uuid {
    record["id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a record without id: {record}"))
}

fn uuids(v: &Value) -> Vec<Uuid> {
    v.as_array().into_iter().flatten().filter_map(|x| x.as_str()?.parse().ok()).collect()
}

// ---- the checks after a restart ----

/// What a check found alive (listed) after the restart.
#[derive(Default)]
struct Alive(HashSet<Uuid>);

impl Alive {
    fn has(&self, id: Uuid) -> bool {
        self.0.contains(&id)
    }

    /// A session survives while it has an agent left, and a user left if it had any.
    fn keeps_session(&self, s: &Value) -> bool {
        let (agents, users) = (uuids(&s["agents"]), uuids(&s["users"]));
        agents.iter().any(|a| self.has(*a)) && (users.is_empty() || users.iter().any(|u| self.has(*u)))
    }
}

/// Whether `got` is `expected`: exactly, or (`exact_time` false) but for `updated_at`.
/// A session's participants that are gone have left it (and changed its `updated_at`).
fn same_record(kind: K, expected: &Value, got: &Value, alive: &Alive, mut exact_time: bool) -> bool {
    let mut x = expected.clone();
    if kind == K::Session {
        for field in ["agents", "users"] {
            let before = uuids(&x[field]);
            let after: Vec<Uuid> = before.iter().copied().filter(|p| alive.has(*p)).collect();
            exact_time &= after.len() == before.len();
            x[field] = json!(after);
        }
    }
    if exact_time {
        return &x == got;
    }
    let mut g = got.clone();
    for v in [&mut x, &mut g] {
        if let Some(o) = v.as_object_mut() {
            o.remove("updated_at");
        }
    }
    x == g
}

/// Whether `got` carries every field `request` sent (the participants aside).
fn carries(request: &Value, got: &Value) -> bool {
    request
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| matches!(k.as_str(), "agents" | "users" | "save") || got.get(k) == Some(v))
}

/// Checks the whole ledger against the restarted server, and settles what was
/// in flight at the kill to what the server shows.
async fn verify(api: &Api, l: &mut Ledger, kill_seq: u64) {
    let mut creates: HashMap<(String, String), PendingCreate> =
        l.creates.drain(..).map(|p| ((p.collection.clone(), p.tag.clone()), p)).collect();
    let mut chats: HashMap<Uuid, Vec<ChatExpect>> = HashMap::new();
    for c in l.chats.drain(..) {
        chats.entry(c.session).or_default().push(c);
    }
    let mut children: HashMap<String, Vec<Uuid>> = HashMap::new();
    for (id, e) in &l.entries {
        if !e.gone {
            children.entry(e.collection.clone()).or_default().push(*id);
        }
    }
    let was_gone: HashSet<Uuid> = l.entries.iter().filter(|(_, e)| e.gone).map(|(id, _)| *id).collect();

    // Users and agents, then sessions (which depend on them), then what hangs off each.
    let mut alive = Alive::default();
    let (users, agents) = tokio::join!(api.list("/api/users"), api.list("/api/agents"));
    let (users, agents) = (users.expect("users list"), agents.expect("agents list"));
    alive.0.extend(users.iter().chain(&agents).map(uuid_of));
    reconcile(l, K::User, "/api/users", users.clone(), &mut creates, &children, &alive, kill_seq);
    reconcile(l, K::Agent, "/api/agents", agents.clone(), &mut creates, &children, &alive, kill_seq);

    let sessions = api.list("/api/sessions").await.expect("sessions list");
    for s in &sessions {
        let id = uuid_of(s);
        let (a, u) = (uuids(&s["agents"]), uuids(&s["users"]));
        if a.is_empty() {
            l.fig.orphans.push(format!("session {id} has no agent"));
        }
        for p in a.iter().chain(&u).filter(|p| !alive.has(**p)) {
            l.fig.orphans.push(format!("session {id} names the missing participant {p}"));
        }
    }
    reconcile(l, K::Session, "/api/sessions", sessions.clone(), &mut creates, &children, &alive, kill_seq);
    alive.0.extend(sessions.iter().map(uuid_of));

    let mut collections: Vec<(K, Uuid, String)> = Vec::new();
    for a in agents.iter().map(uuid_of) {
        for (kind, what) in [(K::Doc, "docs"), (K::Tool, "tools"), (K::Task, "tasks")] {
            collections.push((kind, a, format!("/api/agents/{a}/{what}")));
        }
    }
    collections.extend(users.iter().map(uuid_of).map(|u| (K::Doc, u, format!("/api/users/{u}/docs"))));
    collections
        .extend(sessions.iter().map(uuid_of).map(|s| (K::Message, s, format!("/api/sessions/{s}/messages"))));
    let listed: Vec<_> = futures::stream::iter(collections)
        .map(|(kind, parent, c)| async move {
            let items = api.list(&c).await;
            (kind, parent, c, items)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (kind, parent, c, items) in listed {
        let items = items.unwrap_or_else(|| panic!("{c} is 404 though its owner was listed"));
        if kind == K::Message {
            let chats = chats.remove(&parent).unwrap_or_default();
            reconcile_messages(l, parent, &c, items, &mut creates, &children, chats, kill_seq);
        } else {
            reconcile(l, kind, &c, items, &mut creates, &children, &alive, kill_seq);
        }
    }

    // What belonged to an owner now gone went with it.
    for e in l.entries.values_mut() {
        if !e.gone && e.parent != Uuid::nil() && !alive.has(e.parent) {
            e.gone = true;
            l.fig.deletes_checked += 1;
            if !e.deleted {
                l.fig.cascaded += 1;
            }
        }
    }
    // What is left of `chats` was on sessions now gone; what is left of
    // `creates` was not carried out.
    read_back(api, l, &was_gone, &alive).await;

    for e in l.entries.values_mut() {
        e.dirty = false;
        e.pending = None;
    }
    let entries = &l.entries;
    for ids in l.live.values_mut() {
        ids.retain(|id| !entries[id].gone);
    }
}

/// Compares one listed collection with the ledger: acknowledged records there
/// and intact, deleted ones absent, unknown ones only from creates in flight.
#[allow(clippy::too_many_arguments)]
fn reconcile(
    l: &mut Ledger,
    kind: K,
    collection: &str,
    items: Vec<Value>,
    creates: &mut HashMap<(String, String), PendingCreate>,
    children: &HashMap<String, Vec<Uuid>>,
    alive: &Alive,
    kill_seq: u64,
) {
    let mut listed: HashMap<Uuid, Value> = items.into_iter().map(|v| (uuid_of(&v), v)).collect();
    for id in children.get(collection).into_iter().flatten() {
        let e = l.entries.get_mut(id).unwrap();
        let survives = kind != K::Session || alive.keeps_session(&e.body);
        match listed.remove(id) {
            Some(got) => {
                if e.deleted {
                    l.fig
                        .lost
                        .push(format!("the acknowledged delete of {} {id} is undone: {got}", kind.name()));
                } else if !survives {
                    l.fig.orphans.push(format!("session {id} outlived its participants: {got}"));
                } else if !(same_record(kind, &e.body, &got, alive, true)
                    || matches!(&e.pending, Some(Pending::Update(p)) if same_record(kind, p, &got, alive, false)))
                {
                    l.fig.lost.push(format!(
                        "{} {id} is not intact: expected {}, found {got}",
                        kind.name(),
                        e.body
                    ));
                } else {
                    l.fig.checked += 1;
                    if matches!(&e.pending, Some(Pending::Update(p)) if same_record(kind, p, &got, alive, false))
                    {
                        l.fig.applied += 1;
                    }
                }
                e.body = got;
            }
            None if e.deleted || !survives => {
                e.gone = true;
                l.fig.deletes_checked += 1;
                if !e.deleted {
                    l.fig.cascaded += 1;
                }
            }
            None if matches!(e.pending, Some(Pending::Delete)) => {
                e.gone = true;
                l.fig.applied += 1;
            }
            None => {
                l.fig.lost.push(format!("{} {id} is missing: {}", kind.name(), e.body));
                // Reported once; what depends on it is checked as gone from now on.
                e.gone = true;
                e.dirty = false;
            }
        }
    }
    for (id, got) in listed {
        if l.entries.contains_key(&id) {
            l.fig.lost.push(format!("{} {id}, checked gone before, is back: {got}", kind.name()));
            continue;
        }
        let created = kind.tag_of(&got).and_then(|tag| creates.remove(&(collection.to_owned(), tag)));
        match created {
            Some(p) if carries(&p.request, &got) => {
                l.fig.applied += 1;
                l.fig.checked += 1;
                l.add(kind, p.parent, p.collection, id, p.client, got, (p.sent, kill_seq), false);
            }
            Some(p) => {
                l.fig.lost.push(format!("{} {id} is not what was sent: {} vs {got}", kind.name(), p.request))
            }
            None => l.fig.phantoms.push(format!("{} {id} that nobody created: {got}", kind.name())),
        }
    }
}

/// Checks a session's messages: the acknowledged ones there, intact and in
/// order, each saved chat whole (its input, later its answer); unknown ones
/// only from writes in flight at the kill.
#[allow(clippy::too_many_arguments)]
fn reconcile_messages(
    l: &mut Ledger,
    session: Uuid,
    collection: &str,
    items: Vec<Value>,
    creates: &mut HashMap<(String, String), PendingCreate>,
    children: &HashMap<String, Vec<Uuid>>,
    mut chats: Vec<ChatExpect>,
    kill_seq: u64,
) {
    // Where each chat's input and answer were found.
    let mut found: Vec<(Option<usize>, Option<usize>)> = vec![(None, None); chats.len()];
    let mut orders: Vec<Option<(u64, u64)>> = Vec::with_capacity(items.len());
    let mut seen = HashSet::new();
    for (i, m) in items.iter().enumerate() {
        let id = uuid_of(m);
        if let Some(e) = l.entries.get(&id) {
            if &e.body != m {
                l.fig.lost.push(format!("message {id} is not intact: expected {}, found {m}", e.body));
            } else {
                l.fig.checked += 1;
            }
            seen.insert(id);
            orders.push(Some(e.order));
            continue;
        }
        let (role, content) = (m["role"].as_str().unwrap_or(""), m["content"].as_str().unwrap_or(""));
        let chat = chats.iter().position(|c| c.content == content).filter(|c| match role {
            "user" => found[*c].0.is_none(),
            "assistant" => found[*c].0.is_some() && found[*c].1.is_none(),
            _ => false,
        });
        if let Some(c) = chat {
            let slot = &mut found[c];
            if role == "user" {
                slot.0 = Some(i);
            } else {
                slot.1 = Some(i);
            }
            let (sent, acked) = chats[c].order;
            orders.push(Some((sent, acked.min(kill_seq))));
            continue;
        }
        match creates.remove(&(collection.to_owned(), content.to_owned())) {
            Some(p) if carries(&p.request, m) => {
                l.fig.applied += 1;
                l.fig.checked += 1;
                orders.push(Some((p.sent, kill_seq)));
                l.add(K::Message, session, p.collection, id, p.client, m.clone(), (p.sent, kill_seq), false);
            }
            _ => {
                l.fig.phantoms.push(format!("message {id} in session {session} that nobody wrote: {m}"));
                orders.push(None);
            }
        }
    }
    let expected = children.get(collection).into_iter().flatten();
    for id in expected.filter(|id| !seen.contains(*id)) {
        let e = l.entries.get_mut(id).unwrap();
        l.fig.lost.push(format!("message {id} of session {session} is missing: {}", e.body));
        e.gone = true;
    }
    for (c, (input, answer)) in chats.drain(..).zip(found) {
        match (input, answer) {
            (Some(i), Some(a)) => {
                l.fig.checked += 2;
                if !c.certain {
                    l.fig.applied += 1;
                }
                let order = (c.order.0, c.order.1.min(kill_seq));
                for at in [i, a] {
                    let m = items[at].clone();
                    l.add(K::Message, session, collection.to_owned(), uuid_of(&m), 0, m, order, false);
                }
            }
            (None, None) if !c.certain => {}
            (i, a) if !c.certain => l.fig.lost.push(format!(
                "half of chat {:?} in session {session} was saved (input: {}, answer: {})",
                c.content,
                i.is_some(),
                a.is_some()
            )),
            (i, a) => l.fig.lost.push(format!(
                "the saved chat {:?} in session {session} is missing (input found: {}, answer found: {})",
                c.content,
                i.is_some(),
                a.is_some()
            )),
        }
    }
    // Acknowledged before another was sent: listed before it.
    let mut first_ack_after = u64::MAX;
    for (i, o) in orders.iter().enumerate().rev() {
        let Some((sent, acked)) = *o else { continue };
        if first_ack_after < sent {
            l.fig.lost.push(format!(
                "session {session}: message {} is listed before one acknowledged before it was sent",
                items[i]["id"]
            ));
        }
        first_ack_after = first_ack_after.min(acked);
    }
}

/// Reads back one by one what was written since the last restart: present
/// ones equal their listing, deleted ones (and their cascade) 404, docs found
/// (or no more found) by search.
async fn read_back(api: &Api, l: &mut Ledger, was_gone: &HashSet<Uuid>, alive: &Alive) {
    let mut gets: Vec<(String, Option<Value>)> = Vec::new();
    let mut searches: Vec<(String, Uuid, bool)> = Vec::new();
    let mut gone_sessions = Vec::new();
    for (id, e) in &l.entries {
        let newly_gone = e.gone && !was_gone.contains(id);
        if !(e.dirty || newly_gone) {
            continue;
        }
        match e.kind {
            K::User | K::Agent | K::Session | K::Doc | K::Task => {
                gets.push((e.path.clone(), (!e.gone).then(|| e.body.clone())));
            }
            K::Tool | K::Message => {}
        }
        if e.kind == K::Session && newly_gone {
            gone_sessions.push(format!("{}/messages", e.path));
        }
        if e.kind == K::Doc && e.dirty && alive.has(e.parent) {
            let owner = e.collection.trim_end_matches("/docs").to_owned();
            let tag = K::Doc.tag_of(&e.body).expect("a doc's tag");
            searches.push((format!("{owner}/search?text={tag}"), *id, !e.gone));
        }
    }
    gets.extend(gone_sessions.into_iter().map(|p| (p, None)));
    let answers: Vec<_> = futures::stream::iter(gets)
        .map(|(path, expected)| async move {
            let got = api.get(&path).await;
            (path, expected, got)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (path, expected, (status, body)) in answers {
        match expected {
            Some(x) if status == 200 && body == x => l.fig.read_back += 1,
            Some(x) => l.fig.lost.push(format!("GET {path}: {status} {body}, but its listing shows {x}")),
            None if status == 404 => {}
            None => l.fig.lost.push(format!("GET {path} after its delete: {status} {body}")),
        }
    }
    let answers: Vec<_> = futures::stream::iter(searches)
        .map(|(path, doc, present)| async move {
            let got = api.get(&path).await;
            (path, doc, present, got)
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for (path, doc, present, (status, body)) in answers {
        let hits: Vec<Uuid> = body["docs"].as_array().into_iter().flatten().map(uuid_of).collect();
        if status != 200 || hits.contains(&doc) != present {
            l.fig
                .lost
                .push(format!("search {path}: {status}, doc {doc} expected found: {present}; got {body}"));
        } else {
            l.fig.searched += 1;
        }
    }
}

/// After the last kill, in-process: the store holds exactly the ledger's records.
async fn compare_store(store: &SledStore, l: &mut Ledger) {
    for kind in K::ALL {
        let stored: HashSet<Uuid> =
            store.scan_kind(kind.stored()).await.unwrap().into_iter().map(|(_, r)| r.id).collect();
        let expected: HashSet<Uuid> =
            l.entries.iter().filter(|(_, e)| e.kind == kind && !e.gone).map(|(id, _)| *id).collect();
        for id in stored.difference(&expected) {
            let name = kind.name();
            if !l.entries.contains_key(id) {
                l.fig.phantoms.push(format!("{name} {id} is in the store, but nobody created it"));
            } else if !l.fig.orphans.iter().any(|o| o.contains(&id.to_string())) {
                l.fig.orphans.push(format!("{name} {id} is gone through the API but still in the store"));
            }
        }
        for id in expected.difference(&stored) {
            l.fig.lost.push(format!("{} {id} is in the ledger but not in the store", kind.name()));
        }
    }
}

// ---- plumbing ----

#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: String,
    auth: String,
}

enum Outcome {
    Answered(u16, Value),
    /// The connection was refused: the request never reached the server.
    NotSent,
    /// No (whole) answer: the request may or may not have been carried out.
    Unknown,
}

impl Api {
    fn new(base: &str, key: &str) -> Api {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        Api { http, base: base.to_owned(), auth: format!("Bearer {key}") }
    }

    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Outcome {
        let mut req = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .header("authorization", &self.auth);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Outcome::NotSent,
            Err(_) => return Outcome::Unknown,
        };
        let status = resp.status().as_u16();
        match resp.bytes().await {
            Ok(b) if b.is_empty() => Outcome::Answered(status, Value::Null),
            Ok(b) => Outcome::Answered(status, serde_json::from_slice(&b).unwrap_or(Value::Null)),
            Err(_) => Outcome::Unknown,
        }
    }

    /// A read during the checks: the server must answer.
    async fn get(&self, path: &str) -> (u16, Value) {
        match self.call("GET", path, None).await {
            Outcome::Answered(status, body) => (status, body),
            _ => panic!("GET {path}: no answer"),
        }
    }

    /// Every item of a collection, oldest first; None if it is 404.
    async fn list(&self, path: &str) -> Option<Vec<Value>> {
        let mut all = Vec::new();
        loop {
            let page = format!("{path}?limit=1000&offset={}&direction=asc", all.len());
            let (status, body) = self.get(&page).await;
            match status {
                200 => {}
                404 => return None,
                _ => panic!("GET {page}: {status} {body}"),
            }
            let items = body["items"].as_array().expect("a list answers items").clone();
            let n = items.len();
            all.extend(items);
            if n < 1000 {
                return Some(all);
            }
        }
    }
}

/// SplitMix64: small and seedable, enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn words(&mut self, n: usize) -> String {
        (0..n).map(|_| *self.pick(&WORDS)).collect::<Vec<_>>().join(" ")
    }
}
