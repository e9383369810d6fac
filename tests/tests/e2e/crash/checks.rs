//! The checks after a restart: the whole ledger against what the restarted
//! server lists and answers, what was in flight at the kill settled to what
//! it shows, and after the last kill the store itself, opened in-process.

use std::collections::{HashMap, HashSet};

use agent_platform::store::Store;
use futures::StreamExt;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Api, ChatExpect, K, Ledger, Pending, PendingCreate, uuid_of, uuids};

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
pub(super) async fn verify(api: &Api, l: &mut Ledger, kill_seq: u64) {
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
    // The sessions the background responses made (of their agent, unknown to
    // the ledger) are not the ledger's: checked by `background::verify`.
    let sessions: Vec<Value> = sessions
        .into_iter()
        .filter(|s| {
            let foreign = uuids(&s["agents"]).iter().any(|a| l.foreign_agents.contains(a));
            !foreign || l.entries.contains_key(&uuid_of(s))
        })
        .collect();
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
pub(super) async fn compare_store(store: &dyn Store, l: &mut Ledger) {
    // The sessions the background responses made (of their agent, unknown to
    // the ledger), and their messages, are not the ledger's.
    let foreign: HashSet<Uuid> = store
        .scan_kind(K::Session.stored())
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, r)| {
            r.refs.iter().any(|a| l.foreign_agents.contains(a)) && !l.entries.contains_key(&r.id)
        })
        .map(|(_, r)| r.id)
        .collect();
    for kind in K::ALL {
        let stored: HashSet<Uuid> = store
            .scan_kind(kind.stored())
            .await
            .unwrap()
            .into_iter()
            .filter(|(_, r)| !(foreign.contains(&r.id) || kind == K::Message && foreign.contains(&r.scope)))
            .map(|(_, r)| r.id)
            .collect();
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
