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
//!   and none lost (see [`executions`]);
//! - every background response acknowledged ends `completed`, its tool
//!   rounds each run once or answered "interrupted", and no call of the MCP
//!   server's non-idempotent tool ever runs twice (see [`background`]).
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::store::Kind;
use agent_platform::store::sled_store::{Durability, SledStore};
use agent_platform_tests::{Process, orphans_in};
use serde_json::{Value, json};
use uuid::Uuid;

mod background;
mod checks;
mod executions;
mod plumbing;

use checks::{compare_store, verify};
use plumbing::{Api, Outcome, Rng};

/// Concurrent clients per cycle.
const CLIENTS: usize = 6;
/// The kill lands this long (ms, at random) after the first message was saved.
const KILL_AFTER_MS: (u64, u64) = (50, 500);
/// The chat answer is the input (the fake upstream's `Echo`, which
/// `background::model()` gives every request that offers no `note` tool), so
/// each saved answer is unique.
fn answers() -> Behaviour {
    background::model()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill_intact_and_without_orphans() {
    let cycles: u64 = env_number("CRASH_CYCLES").unwrap_or(5);
    let seed = env_number("CRASH_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("crash test: {cycles} cycles, {CLIENTS} clients, CRASH_SEED={seed}");
    let started = Instant::now();

    let upstream = FakeUpstream::start().await;
    upstream.set_default(answers());
    let upstream_url = upstream.base_url();
    // The MCP server of the background responses' tool: a process of its own, outliving every kill.
    let mcp = agent_platform_tests::mcp::FakeMcp::start();
    let env = [
        ("OPENAI_BASE_URL", upstream_url.as_str()),
        ("OPENAI_API_KEY", "sk-crash-test"),
        ("AGENT_PLATFORM_DEFAULT_MODEL", "crash-model"),
        ("AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS", "127.0.0.1"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let shared = Arc::new(Shared::default());
    let execs = Arc::new(Mutex::new(executions::Execs::default()));
    let bg = Arc::new(Mutex::new(background::Bg::default()));
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
            background::setup(&api, &ledger, &bg).await;
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
            background::verify(&api, &bg).await;
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
            .chain((0..background::CLIENTS).map(|_| {
                tokio::spawn(background::client(api.clone(), bg.clone(), mcp.url.clone(), shared.clone()))
            }))
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
        // On PostgreSQL, what the killed server sent may still be carried out
        // until its connections are gone: the checks start after that.
        let settled = tokio::task::block_in_place(|| {
            agent_platform_tests::backend::wait_until_no_server_is_connected(&data)
        });
        if settled > Duration::from_millis(100) {
            eprintln!(
                "  the killed server's last database connection ended {:.2} s after the kill",
                settled.as_secs_f64()
            );
        }
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
    let store: std::sync::Arc<dyn agent_platform::store::Store> =
        match agent_platform_tests::backend::database_for(&data) {
            Some((url, _)) => {
                let cfg = agent_platform::config::StoreConfig {
                    backend: agent_platform::config::StoreBackend::Postgres,
                    url: Some(url),
                    ..Default::default()
                };
                std::sync::Arc::new(
                    agent_platform::store::pg_store::PgStore::connect(
                        &cfg,
                        agent_platform::app::records::STORE_DOMAIN,
                    )
                    .await
                    .expect("the database opens"),
                )
            }
            None => std::sync::Arc::new(
                SledStore::open(&data, Durability::Flush).expect("the store opens in-process"),
            ),
        };
    let orphans = orphans_in(store.as_ref()).await;
    l.fig.orphans.extend(orphans);
    compare_store(store.as_ref(), &mut l).await;
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
    background::check_notes(&mcp, &bg).await;
    let b = bg.lock().unwrap();
    eprintln!(
        "  background responses: {} acknowledged, {} completed as their rounds say, {} calls in flight at a kill \
         answered interrupted; problems: {}",
        b.created,
        b.completed,
        b.interrupted,
        b.problems.len()
    );
    for p in b.problems.iter().take(20) {
        eprintln!("  background: {p}");
    }
    assert!(b.created > 0 && b.completed > 0, "no background response was created and completed");
    assert!(
        b.problems.is_empty(),
        "the crash test found problems with background responses (CRASH_SEED={seed})"
    );
    drop(b);
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
    /// Agents whose sessions (and their messages) the background responses
    /// make: those the ledger does not know are not compared with it.
    foreign_agents: Vec<Uuid>,
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
