//! Tenant isolation (the contract's "Authentication and tenants"): another tenant's id
//! answers exactly as a missing one does, in every route, and lists and
//! searches never show another tenant's records.
//!
//! The id routes are taken from `spec/openapi.json`, so a new route that takes
//! an id fails [`sweep::every_id_route_answers_another_tenants_ids_as_unknown_ones`]
//! until it is given a request in its table.

use std::collections::BTreeSet;
use std::time::Duration;

use agent_platform::models::ModelsConfig;
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::{Raw, TestServer};
use serde_json::{Value, json};
use uuid::Uuid;

mod sweep;

fn models(fake: &FakeUpstream) -> ModelsConfig {
    agent_platform_tests::fake_models(fake, 30.0)
}

/// `{"shared": "yes"}`, a filter every record of both tenants matches.
const SHARED: &str = "metadata_filter=%7B%22shared%22%3A%22yes%22%7D";

/// A request as the holder of `key`.
async fn call(s: &TestServer, key: &str, method: &str, path: &str, body: Option<&Value>) -> Raw {
    let body = body.map(Value::to_string);
    s.raw_with(method, path, body.as_deref(), Some(&format!("Bearer {key}"))).await
}

fn id_of(r: &Raw) -> Uuid {
    r.body["id"].as_str().unwrap_or_else(|| panic!("no id in {}", r.body)).parse().unwrap()
}

/// One tenant's records: one of each kind, all with metadata
/// `{"shared": "yes", "tenant": <tag>}`, docs with one snippet and one vector.
struct Records {
    key: String,
    tag: &'static str,
    words: &'static str,
    user: Uuid,
    agent: Uuid,
    session: Uuid,
    message: Uuid,
    tool: Uuid,
    task: Uuid,
    /// An execution of `task`, ended (`succeeded`).
    execution: Uuid,
    /// Its first transition.
    transition: Uuid,
    agent_doc: Uuid,
    user_doc: Uuid,
    /// An API key of the tenant other than `key`.
    api_key: Uuid,
    /// A stored response of OpenAI's Responses API (a turn of a new session of
    /// the agent), when the server has a model provider.
    response: Option<Uuid>,
    /// A run of the session (a background response), ended (with a model provider).
    run: Option<Uuid>,
    /// A secret, named `s_` and this id's hex digits (see [`secret_name`]),
    /// when the server has a secrets key.
    secret: Option<Uuid>,
    /// Memory blocks of the agent and of the user, and their first edits.
    agent_block: Uuid,
    user_block: Uuid,
    agent_block_edit: Uuid,
    user_block_edit: Uuid,
}

/// The name of the secret of [`Records::secret`] `id` (a secret's name is no uuid).
fn secret_name(id: Uuid) -> String {
    format!("s_{}", id.simple())
}

impl Records {
    async fn create(
        s: &TestServer,
        key: &str,
        tag: &'static str,
        words: &'static str,
        vector: [f32; 3],
    ) -> Self {
        let meta = json!({"shared": "yes", "tenant": tag});
        let post = |method: &'static str, path: String, mut body: Value, status: u16| {
            body["metadata"] = meta.clone();
            async move {
                let r = call(s, key, method, &path, Some(&body)).await;
                assert_eq!(r.status, status, "{method} {path}: {}", r.body);
                id_of(&r)
            }
        };
        let user = post("POST", "/api/users".into(), json!({"name": "Uma"}), 201).await;
        let agent = post("POST", "/api/agents".into(), json!({"name": "Ada"}), 201).await;
        let session = post("POST", "/api/sessions".into(), json!({"agent": agent, "user": user}), 201).await;
        let message = post(
            "POST",
            format!("/api/sessions/{session}/messages"),
            json!({"role": "user", "content": words}),
            201,
        )
        .await;
        let tool = post(
            "POST",
            format!("/api/agents/{agent}/tools"),
            json!({"name": "lookup", "type": "function", "function": {"parameters": {"type": "object"}}}),
            201,
        )
        .await;
        let task = post(
            "PUT",
            format!("/api/agents/{agent}/tasks"),
            json!({"name": "t", "main": [{"log": "x"}]}),
            200,
        )
        .await;
        let execution =
            post("POST", format!("/api/tasks/{task}/executions"), json!({"input": {"words": words}}), 201)
                .await;
        let transition = ended_execution_first_transition(s, key, execution).await;
        let doc = json!({"title": format!("doc of {tag}"), "content": [words], "embeddings": [vector]});
        let agent_doc = post("POST", format!("/api/agents/{agent}/docs"), doc.clone(), 201).await;
        let user_doc = post("POST", format!("/api/users/{user}/docs"), doc, 201).await;
        let created = call(s, key, "POST", "/api/keys", None).await;
        assert_eq!(created.status, 201, "POST /api/keys: {}", created.body);
        let api_key = id_of(&created);
        let r = call(s, key, "POST", "/v1/responses", Some(&json!({"model": agent, "input": words}))).await;
        let response = (r.status == 200).then(|| {
            let id = r.body["id"].as_str().unwrap();
            Uuid::try_parse(id.strip_prefix("resp_").unwrap()).unwrap()
        });
        // A run of the session (a background response), once it has ended.
        let body = json!({"messages": [{"role": "user", "content": words}]});
        let r = call(s, key, "POST", &format!("/api/sessions/{session}/runs"), Some(&body)).await;
        let run = match r.status {
            201 => {
                let id = r.body["id"].as_str().unwrap().to_owned();
                let deadline = std::time::Instant::now() + Duration::from_secs(20);
                loop {
                    let got = call(s, key, "GET", &format!("/api/sessions/{session}/runs/{id}"), None).await;
                    if got.body["status"] == "completed" {
                        break;
                    }
                    assert!(std::time::Instant::now() < deadline, "the run did not end: {}", got.body);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Some(Uuid::try_parse(id.strip_prefix("resp_").unwrap()).unwrap())
            }
            _ => None,
        };
        let secret = Uuid::now_v7();
        let body = json!({"name": secret_name(secret), "value": format!("value of {tag}")});
        let r = call(s, key, "POST", "/api/secrets", Some(&body)).await;
        let secret = (r.status == 201).then_some(secret);
        let block = json!({"label": "notes", "value": words});
        let agent_block = post("POST", format!("/api/agents/{agent}/blocks"), block.clone(), 201).await;
        let user_block = post("POST", format!("/api/users/{user}/blocks"), block, 201).await;
        let first_edit = async |path: String| {
            let r = call(s, key, "GET", &path, None).await;
            assert_eq!(r.status, 200, "GET {path}: {}", r.body);
            r.body["items"][0]["id"].as_str().unwrap().parse::<Uuid>().unwrap()
        };
        let agent_block_edit = first_edit(format!("/api/agents/{agent}/blocks/{agent_block}/edits")).await;
        let user_block_edit = first_edit(format!("/api/users/{user}/blocks/{user_block}/edits")).await;
        Records {
            key: key.to_owned(),
            tag,
            words,
            user,
            agent,
            session,
            message,
            tool,
            task,
            execution,
            transition,
            agent_doc,
            user_doc,
            api_key,
            response,
            run,
            secret,
            agent_block,
            user_block,
            agent_block_edit,
            user_block_edit,
        }
    }

    fn all_ids(&self) -> [Uuid; 11] {
        [
            self.execution,
            self.transition,
            self.api_key,
            self.user,
            self.agent,
            self.session,
            self.message,
            self.tool,
            self.task,
            self.agent_doc,
            self.user_doc,
        ]
    }

    /// The id for a `{param}` that follows `collection` in a path under `/api/<root>`.
    fn id_for(&self, root: &str, collection: &str) -> Uuid {
        match (root, collection) {
            ("agents", "agents") => self.agent,
            // A model's id may be an agent's.
            ("models", "models") => self.agent,
            ("users", "users") => self.user,
            ("sessions", "sessions") => self.session,
            // OpenAI's conversations are sessions, their items messages.
            ("conversations", "conversations") => self.session,
            ("conversations", "items") => self.message,
            ("agents", "docs") => self.agent_doc,
            ("users", "docs") => self.user_doc,
            ("agents", "tools") => self.tool,
            ("agents", "tasks") | ("tasks", "tasks") => self.task,
            ("executions", "executions") => self.execution,
            ("executions", "transitions") => self.transition,
            ("keys", "keys") => self.api_key,
            ("responses", "responses") => self.response.expect("a stored response needs a model provider"),
            ("secrets", "secrets") => self.secret.expect("a secret needs a secrets key"),
            ("sessions", "runs") => self.run.expect("a session's run needs a model provider"),
            ("agents", "blocks") => self.agent_block,
            ("users", "blocks") => self.user_block,
            ("agents", "edits") => self.agent_block_edit,
            ("users", "edits") => self.user_block_edit,
            _ => panic!("no record for a {collection} id under /api/{root}: add one to `Records`"),
        }
    }
}

/// Waits (at most 20 s) until the execution has ended; answers its first transition.
async fn ended_execution_first_transition(s: &TestServer, key: &str, execution: Uuid) -> Uuid {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let e = call(s, key, "GET", &format!("/api/executions/{execution}"), None).await;
        if e.body["status"] == "succeeded" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the execution did not end: {}", e.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ts = call(s, key, "GET", &format!("/api/executions/{execution}/transitions"), None).await;
    assert_eq!(ts.status, 200, "{}", ts.body);
    ts.body["items"][0]["id"].as_str().unwrap().parse().unwrap()
}

fn normalised(r: &Raw) -> Value {
    let mut body = r.body.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("request_id");
        if let Some(Value::String(d)) = o.get_mut("detail") {
            *d = mask_ids(d);
        }
    }
    // On `/v1`, OpenAI's shape: `{"error": {"message", ...}}`.
    if let Some(Value::String(m)) = body.pointer_mut("/error/message") {
        *m = mask_ids(m);
    }
    body
}

fn mask_ids(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if rest.len() >= 36 && rest.is_char_boundary(36) && Uuid::try_parse(&rest[..36]).is_ok() {
            out.push_str("<id>");
            rest = &rest[36..];
        } else if let Some(prefix) = ["resp_", "s_"].into_iter().find(|p| {
            let end = p.len() + 32;
            rest.starts_with(p)
                && rest.len() >= end
                && rest.is_char_boundary(end)
                && Uuid::try_parse(&rest[p.len()..end]).is_ok()
        }) {
            // A response's id (`resp_`) or a secret's name (`s_`), and 32 hex digits.
            out.push_str("<id>");
            rest = &rest[prefix.len() + 32..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

async fn snapshot(s: &TestServer, r: &Records) -> Value {
    let (a, u, se) = (r.agent, r.user, r.session);
    let mut reads = vec![
        "/api/keys".to_owned(),
        "/api/secrets".to_owned(),
        "/api/users".to_owned(),
        "/api/agents".to_owned(),
        "/api/sessions".to_owned(),
        format!("/api/users/{u}"),
        format!("/api/agents/{a}"),
        format!("/api/sessions/{se}"),
        format!("/api/sessions/{se}/messages"),
        format!("/api/sessions/{se}/tools"),
        format!("/api/agents/{a}/tools"),
        format!("/api/agents/{a}/tasks"),
        format!("/api/agents/{a}/tasks/{}", r.task),
        format!("/api/tasks/{}", r.task),
        format!("/api/tasks/{}/executions", r.task),
        format!("/api/executions/{}", r.execution),
        format!("/api/executions/{}/transitions", r.execution),
        format!("/api/executions/{}/transitions/{}", r.execution, r.transition),
        format!("/api/agents/{a}/docs"),
        format!("/api/agents/{a}/docs/{}", r.agent_doc),
        format!("/api/users/{u}/docs"),
        format!("/api/users/{u}/docs/{}", r.user_doc),
        format!("/api/agents/{a}/blocks"),
        format!("/api/users/{u}/blocks"),
        format!("/api/agents/{a}/blocks/{}/edits", r.agent_block),
        format!("/api/users/{u}/blocks/{}/edits", r.user_block),
    ];
    reads.extend([format!("/api/agents/{a}/search?text=words"), format!("/api/users/{u}/search?text=words")]);
    let mut out = serde_json::Map::new();
    for path in reads {
        let got = call(s, &r.key, "GET", &path, None).await;
        assert_eq!(got.status, 200, "GET {path}: {}", got.body);
        let mut body = got.body;
        if let Some(o) = body.as_object_mut() {
            o.remove("time");
        }
        out.insert(path, body);
    }
    Value::Object(out)
}

#[track_caller]
fn assert_same_404(what: &str, theirs: &Raw, unknown: &Raw) {
    assert_eq!(theirs.status, 404, "{what} with another tenant's ids: {}", theirs.body);
    assert_eq!(unknown.status, 404, "{what} with unknown ids: {}", unknown.body);
    // `/api`'s error shape, or OpenAI's on `/v1` (whose code for a response
    // to continue is its own).
    let code = theirs.body.get("code").unwrap_or(&theirs.body["error"]["code"]);
    assert!(code == "not_found" || code == "previous_response_not_found", "{what}: {}", theirs.body);
    assert_eq!(
        normalised(theirs),
        normalised(unknown),
        "{what}: another tenant's ids must answer exactly as unknown ones"
    );
}

/// The ids in a list's `items` or a search's `docs`.
fn ids_in(body: &Value, field: &str) -> BTreeSet<Uuid> {
    body[field]
        .as_array()
        .unwrap_or_else(|| panic!("no {field} in {body}"))
        .iter()
        .map(|i| i["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// `me` sees exactly its own records in every list and search, never one of `them`.
async fn sees_only_its_own(s: &TestServer, me: &Records, them: &Records) {
    let their_filter = format!("metadata_filter=%7B%22tenant%22%3A%22{}%22%7D", them.tag);
    let my_filter = format!("metadata_filter=%7B%22tenant%22%3A%22{}%22%7D", me.tag);
    let queries = ["", SHARED, &my_filter, &their_filter, "limit=1000&sort_by=updated_at&direction=asc"];
    let (a, u, se) = (me.agent, me.user, me.session);
    let lists = [
        ("/api/users".to_owned(), me.user),
        ("/api/agents".to_owned(), me.agent),
        ("/api/sessions".to_owned(), me.session),
        (format!("/api/sessions/{se}/messages"), me.message),
        (format!("/api/agents/{a}/tools"), me.tool),
        (format!("/api/agents/{a}/tasks"), me.task),
        (format!("/api/tasks/{}/executions", me.task), me.execution),
        (format!("/api/agents/{a}/docs"), me.agent_doc),
        (format!("/api/users/{u}/docs"), me.user_doc),
    ];
    let check = |what: String, r: Raw, field: &str, expected: BTreeSet<Uuid>| {
        assert_eq!(r.status, 200, "{what}: {}", r.body);
        assert_eq!(ids_in(&r.body, field), expected, "{what} as tenant {}: {}", me.tag, r.body);
        let text = r.body.to_string();
        for id in them.all_ids() {
            assert!(
                !text.contains(&id.to_string()),
                "{what} as tenant {} shows {id} of {}",
                me.tag,
                them.tag
            );
        }
        assert!(!text.contains(&format!("\"{}\"", them.tag)), "{what} shows metadata of {}", them.tag);
    };
    // The OpenAI-compatible model list: the caller's agents, as models.
    let r = call(s, &me.key, "GET", "/v1/models", None).await;
    let agents: BTreeSet<Uuid> = r.body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("GET /v1/models: {}", r.body))
        .iter()
        .filter(|m| m["owned_by"] == "agent-platform")
        .map(|m| m["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(agents, BTreeSet::from([me.agent]), "GET /v1/models as tenant {}: {}", me.tag, r.body);
    for id in them.all_ids() {
        assert!(!r.body.to_string().contains(&id.to_string()), "GET /v1/models shows {id} of {}", them.tag);
    }
    for (path, mine) in &lists {
        for q in queries {
            let r = call(s, &me.key, "GET", &format!("{path}?{q}"), None).await;
            let expected = if q == their_filter { BTreeSet::new() } else { BTreeSet::from([*mine]) };
            check(format!("GET {path}?{q}"), r, "items", expected);
        }
    }
    let r = call(s, &me.key, "GET", &format!("/api/sessions/{se}/tools"), None).await;
    check(format!("GET /api/sessions/{se}/tools"), r, "items", BTreeSet::from([me.tool]));
    // Keys: the caller's own two (the one it calls with, and `api_key`).
    let r = call(s, &me.key, "GET", "/api/keys", None).await;
    let mine = ids_in(&r.body, "items");
    assert!(mine.len() == 2 && mine.contains(&me.api_key), "GET /api/keys as tenant {}: {}", me.tag, r.body);
    check("GET /api/keys".into(), r, "items", mine);

    // Searches, with their words and their vector: my own doc matches too (the
    // shared words, a vector not orthogonal to theirs), theirs never.
    let their_words = them.words.replace(' ', "%20");
    let their_vector =
        call(s, &them.key, "GET", &format!("/api/agents/{}/docs/{}", them.agent, them.agent_doc), None)
            .await
            .body["embeddings"][0]
            .clone();
    for (root, owner, mine) in [("agents", a, me.agent_doc), ("users", u, me.user_doc)] {
        let path = format!("/api/{root}/{owner}/search");
        for q in ["", SHARED, &my_filter, &their_filter] {
            let r = call(s, &me.key, "GET", &format!("{path}?text={their_words}&{q}"), None).await;
            let expected = if q == their_filter { BTreeSet::new() } else { BTreeSet::from([mine]) };
            check(format!("GET {path}?text={their_words}&{q}"), r, "docs", expected);
        }
        let filters = [
            (Value::Null, true),
            (json!({"shared": "yes"}), true),
            (json!({"tenant": me.tag}), true),
            (json!({"tenant": them.tag}), false),
        ];
        for (filter, found) in filters {
            for mut q in [
                json!({"text": them.words}),
                json!({"text": them.words, "mode": "text"}),
                json!({"vector": their_vector}),
                json!({"text": them.words, "vector": their_vector}),
                json!({"text": them.words, "vector": their_vector, "alpha": 1.0, "limit": 100}),
            ] {
                q["metadata_filter"] = filter.clone();
                let r = call(s, &me.key, "POST", &path, Some(&q)).await;
                let expected = if found { BTreeSet::from([mine]) } else { BTreeSet::new() };
                for hit in r.body["docs"].as_array().into_iter().flatten() {
                    assert_eq!(hit["owner"]["id"], json!(owner), "POST {path} {q}: {}", r.body);
                }
                check(format!("POST {path} {q}"), r, "docs", expected);
            }
        }
    }
}

#[tokio::test]
async fn lists_and_searches_show_only_the_callers_records() {
    let s = TestServer::start().await;
    let other_key = s.key_for("other-tenant").await;
    let a = Records::create(&s, &s.key, "alpha-corp", "shared words alpha secret", [1.0, 0.2, 0.0]).await;
    let b = Records::create(&s, &other_key, "beta-corp", "shared words beta", [0.2, 1.0, 0.0]).await;
    sees_only_its_own(&s, &b, &a).await;
    sees_only_its_own(&s, &a, &b).await;
    s.stop().await;
}

/// Ids sent in a body rather than the path answer as unknown ones too.
#[tokio::test]
async fn another_tenants_ids_in_a_body_answer_as_unknown_ones() {
    let s = TestServer::start().await;
    let other_key = s.key_for("other-tenant").await;
    let a = Records::create(&s, &s.key, "alpha-corp", "alpha", [1.0, 0.0, 0.0]).await;
    let b = Records::create(&s, &other_key, "beta-corp", "beta", [0.0, 1.0, 0.0]).await;
    let a_before = snapshot(&s, &a).await;

    // A session naming A's agent or user.
    for (theirs, unknown) in [
        (json!({"agent": a.agent}), json!({"agent": Uuid::now_v7()})),
        (json!({"agent": b.agent, "user": a.user}), json!({"agent": b.agent, "user": Uuid::now_v7()})),
        (json!({"agents": [b.agent, a.agent]}), json!({"agents": [b.agent, Uuid::now_v7()]})),
    ] {
        let t = call(&s, &b.key, "POST", "/api/sessions", Some(&theirs)).await;
        let u = call(&s, &b.key, "POST", "/api/sessions", Some(&unknown)).await;
        assert_same_404(&format!("POST /api/sessions {theirs}"), &t, &u);
    }
    // A chat answered by A's agent (checked before any model is needed).
    let chat = |agent: Uuid| json!({"messages": [{"role": "user", "content": "hi"}], "agent": agent});
    let path = format!("/api/sessions/{}/chat", b.session);
    let t = call(&s, &b.key, "POST", &path, Some(&chat(a.agent))).await;
    let u = call(&s, &b.key, "POST", &path, Some(&chat(Uuid::now_v7()))).await;
    assert_eq!((t.status, u.status), (400, 400), "{} / {}", t.body, u.body);
    assert_eq!(normalised(&t), normalised(&u));
    // An OpenAI response appended to A's session (a conversation): as to one no one has.
    let respond = |conversation: Uuid| json!({"model": "m", "input": "hi", "conversation": conversation});
    let t = call(&s, &b.key, "POST", "/v1/responses", Some(&respond(a.session))).await;
    let u = call(&s, &b.key, "POST", "/v1/responses", Some(&respond(Uuid::now_v7()))).await;
    assert_same_404("POST /v1/responses with conversation", &t, &u);
    // An OpenAI chat completion whose model is A's agent: as a model no one has.
    let completion = |model: Uuid| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let t = call(&s, &b.key, "POST", "/v1/chat/completions", Some(&completion(a.agent))).await;
    let u = call(&s, &b.key, "POST", "/v1/chat/completions", Some(&completion(Uuid::now_v7()))).await;
    assert_eq!((t.status, u.status), (404, 404), "{} / {}", t.body, u.body);
    assert_eq!(t.body["error"]["code"], "not_found", "{}", t.body);
    assert_eq!(normalised(&t), normalised(&u));
    // A task PUT with A's task id: as with an id no one has, a new task of B's.
    let path = format!("/api/agents/{}/tasks", b.agent);
    for id in [a.task, Uuid::now_v7()] {
        let r = call(
            &s,
            &b.key,
            "PUT",
            &path,
            Some(&json!({"id": id, "name": format!("t{id}"), "main": [{"log": "x"}]})),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!((id_of(&r), r.body["agent_id"].clone()), (id, json!(b.agent)));
    }
    assert_eq!(snapshot(&s, &a).await, a_before, "A's records are unchanged");
    s.stop().await;
}

/// A chat on another tenant's session id does not wait for that session's chat
/// under way: it answers 404 at once, as for an unknown id.
#[tokio::test]
async fn a_chat_on_another_tenants_session_does_not_wait_for_its_chats() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(models(&fake)).await;
    let other_key = s.key_for("other-tenant").await;
    let a = Records::create(&s, &s.key, "alpha-corp", "alpha", [1.0, 0.0, 0.0]).await;
    fake.push(Behaviour::Hang(Duration::from_secs(3)));
    let path = format!("/api/sessions/{}/chat", a.session);
    let body = json!({"messages": [{"role": "user", "content": "hi"}]});
    let mine = {
        let (base, key, path, body) = (s.base.clone(), s.key.clone(), path.clone(), body.to_string());
        tokio::spawn(async move {
            let r = reqwest::Client::new()
                .post(format!("{base}{path}"))
                .bearer_auth(key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while fake.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "A's chat never reached the model");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let start = std::time::Instant::now();
    let theirs = call(&s, &other_key, "POST", &path, Some(&body)).await;
    let waited = start.elapsed();
    let unknown =
        call(&s, &other_key, "POST", &format!("/api/sessions/{}/chat", Uuid::now_v7()), Some(&body)).await;
    assert!(waited < Duration::from_millis(1500), "B's chat waited {waited:?}, for A's to finish");
    assert_same_404("POST chat", &theirs, &unknown);
    assert_eq!(mine.await.unwrap(), 200);
    s.stop().await;
}
