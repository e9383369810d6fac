//! `Idempotency-Key` (the contract's conventions: retries are safe): a repeat answers
//! the first answer without writing again; another request with the key is a
//! 409; keys are per tenant; answers survive a restart; bad keys are 422s.

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::TestServer;
use futures::future::join_all;
use serde_json::{Value, json};

/// A raw answer with its body as text (to compare byte for byte).
struct Answer {
    status: u16,
    replayed: bool,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }
}

/// `POST path body` with the key `auth` and the header `Idempotency-Key: idem` (raw bytes).
async fn post_with(s: &TestServer, auth: &str, path: &str, body: &Value, idem: &[u8]) -> Answer {
    let resp = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .header("authorization", format!("Bearer {auth}"))
        .header("content-type", "application/json")
        .header("idempotency-key", reqwest::header::HeaderValue::from_bytes(idem).unwrap())
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = resp.status().as_u16();
    let replayed = resp.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
    agent_platform_tests::record::answer("POST", path, status, &body);
    Answer { status, replayed, text }
}

async fn post(s: &TestServer, path: &str, body: &Value, idem: &str) -> Answer {
    post_with(s, &s.key, path, body, idem.as_bytes()).await
}

async fn count(s: &TestServer, path: &str) -> usize {
    let r = s.raw("GET", &format!("{path}?limit=1000"), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn a_repeat_answers_the_first_status_and_body_and_writes_nothing() {
    let s = TestServer::start().await;
    let agent = json!({"name": "Once", "metadata": {"n": 1}});
    let first = post(&s, "/api/agents", &agent, "create-agent-1").await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert!(!first.replayed);
    let again = post(&s, "/api/agents", &agent, "create-agent-1").await;
    assert_eq!(
        (again.status, again.text.as_str()),
        (201, first.text.as_str()),
        "the first answer, byte for byte"
    );
    assert!(again.replayed, "a replay says so in `Idempotent-Replayed: true`");
    assert_eq!(count(&s, "/api/agents").await, 1, "the repeat created nothing");

    // A child record: a message of a session.
    let agent_id = first.json()["id"].as_str().unwrap().to_owned();
    let session = post(&s, "/api/sessions", &json!({"agent": agent_id}), "create-session-1").await;
    assert_eq!(session.status, 201, "{}", session.text);
    let messages = format!("/api/sessions/{}/messages", session.json()["id"].as_str().unwrap());
    let hello = json!({"role": "user", "content": "hello"});
    let first = post(&s, &messages, &hello, "message-1").await;
    assert_eq!(first.status, 201, "{}", first.text);
    for _ in 0..3 {
        let again = post(&s, &messages, &hello, "message-1").await;
        assert_eq!((again.status, again.text.as_str()), (201, first.text.as_str()));
    }
    assert_eq!(count(&s, &messages).await, 1, "the repeats appended nothing");

    // A document: written once, searchable once.
    let docs = format!("/api/agents/{agent_id}/docs");
    let doc = json!({"title": "notes", "content": ["the analytical engine"]});
    let first = post(&s, &docs, &doc, "doc-1").await;
    let again = post(&s, &docs, &doc, "doc-1").await;
    assert_eq!((first.status, again.status, again.text.as_str()), (201, 201, first.text.as_str()));
    assert_eq!(count(&s, &docs).await, 1);
    s.stop().await;
}

#[tokio::test]
async fn the_same_key_on_another_body_or_route_is_a_409_and_writes_nothing() {
    let s = TestServer::start().await;
    let first = post(&s, "/api/users", &json!({"name": "Ada"}), "k").await;
    assert_eq!(first.status, 201, "{}", first.text);
    let other_body = post(&s, "/api/users", &json!({"name": "Bob"}), "k").await;
    assert_eq!(other_body.status, 409, "{}", other_body.text);
    assert_eq!(other_body.json()["code"], "conflict");
    assert!(other_body.json()["detail"].as_str().unwrap().contains("Idempotency-Key"), "{}", other_body.text);
    let other_route = post(&s, "/api/agents", &json!({"name": "Ada"}), "k").await;
    assert_eq!(other_route.status, 409, "{}", other_route.text);
    assert_eq!(count(&s, "/api/users").await, 1);
    assert_eq!(count(&s, "/api/agents").await, 0);
    // The first request still replays.
    let again = post(&s, "/api/users", &json!({"name": "Ada"}), "k").await;
    assert_eq!((again.status, again.text), (201, first.text));
    s.stop().await;
}

#[tokio::test]
async fn another_tenants_same_key_is_its_own() {
    let s = TestServer::start().await;
    let other = s.key_for("other-tenant").await;
    let body = json!({"name": "Ada"});
    let mine = post(&s, "/api/agents", &body, "shared-key").await;
    let theirs = post_with(&s, &other, "/api/agents", &body, b"shared-key").await;
    assert_eq!((mine.status, theirs.status), (201, 201), "{} {}", mine.text, theirs.text);
    assert!(!theirs.replayed, "another tenant's request is not a repeat of mine");
    assert_ne!(mine.json()["id"], theirs.json()["id"]);
    let theirs_again = post_with(&s, &other, "/api/agents", &body, b"shared-key").await;
    assert_eq!(theirs_again.text, theirs.text);
    assert_eq!(count(&s, "/api/agents").await, 1, "my tenant has one agent");
    s.stop().await;
}

#[tokio::test]
async fn a_repeat_after_a_restart_answers_the_first_result() {
    let mut s = TestServer::start().await;
    let body = json!({"name": "Durable"});
    let first = post(&s, "/api/agents", &body, "across-restart").await;
    assert_eq!(first.status, 201, "{}", first.text);
    s.restart().await;
    let again = post(&s, "/api/agents", &body, "across-restart").await;
    assert_eq!((again.status, again.text.as_str()), (201, first.text.as_str()));
    assert!(again.replayed);
    assert_eq!(count(&s, "/api/agents").await, 1);
    s.stop().await;
}

#[tokio::test]
async fn concurrent_requests_with_one_key_write_once_and_answer_alike() {
    let s = TestServer::start().await;
    let body = json!({"name": "Racer"});
    let answers = join_all((0..16).map(|_| post(&s, "/api/agents", &body, "race"))).await;
    for a in &answers {
        assert_eq!((a.status, a.text.as_str()), (201, answers[0].text.as_str()));
    }
    assert_eq!(answers.iter().filter(|a| !a.replayed).count(), 1, "one ran, the others replayed it");
    assert_eq!(count(&s, "/api/agents").await, 1);
    s.stop().await;
}

#[tokio::test]
async fn a_failed_request_is_not_remembered_and_its_retry_runs_again() {
    let s = TestServer::start().await;
    let agent = s.create_agent("Tools").await;
    let tools = format!("/api/agents/{}/tools", agent.id);
    let tool = json!({"name": "lookup", "type": "function", "function": {}});
    let taken = s.raw("POST", &tools, Some(&tool.to_string())).await;
    assert_eq!(taken.status, 201, "{}", taken.body);
    let clash = post(&s, &tools, &tool, "tool-1").await;
    assert_eq!(clash.status, 409, "the name is taken: {}", clash.text);
    let id = taken.body["id"].as_str().unwrap();
    assert_eq!(s.raw("DELETE", &format!("{tools}/{id}"), None).await.status, 204);
    let retry = post(&s, &tools, &tool, "tool-1").await;
    assert_eq!(retry.status, 201, "the retry ran again: {}", retry.text);
    assert!(!retry.replayed);
    s.stop().await;
}

#[tokio::test]
async fn a_key_that_is_empty_too_long_or_not_printable_is_a_422_naming_the_header() {
    let s = TestServer::start().await;
    let body = json!({"name": "Ada"});
    let loc = json!(["header", "idempotency-key"]);
    let cases: [(&[u8], &str); 4] = [
        (b"", "string_too_short"),
        (&[b'k'; 256], "string_too_long"),
        (b"tab\there", "string_pattern_mismatch"),
        (b"caf\xe9", "string_pattern_mismatch"),
    ];
    for (key, kind) in cases {
        let r = post_with(&s, &s.key, "/api/users", &body, key).await;
        assert_eq!(r.status, 422, "{:?}: {}", String::from_utf8_lossy(key), r.text);
        let detail = r.json()["detail"].clone();
        assert!(
            detail.as_array().unwrap().iter().any(|i| i["loc"] == loc && i["type"] == kind),
            "{:?}: expected {kind} at {loc}, got {detail}",
            String::from_utf8_lossy(key)
        );
    }
    let longest = post_with(&s, &s.key, "/api/users", &body, &[b'~'; 255]).await;
    assert_eq!(longest.status, 201, "255 printable characters are a key: {}", longest.text);
    assert_eq!(count(&s, "/api/users").await, 1);
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_chat_calls_the_model_once_and_saves_the_exchange_once() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 30.0)).await;
    let agent = s.create_agent("Ada").await;
    let session = s.create_session(&[agent.id], &[]).await;
    let chat = format!("/api/sessions/{}/chat", session.id);
    let body = json!({"messages": [{"role": "user", "content": "Hi"}]});
    fake.push(Behaviour::Text("Hello once".into()));
    let first = post(&s, &chat, &body, "chat-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.json()["choices"][0]["message"]["content"], "Hello once");
    let again = post(&s, &chat, &body, "chat-1").await;
    assert_eq!((again.status, again.text.as_str()), (200, first.text.as_str()));
    assert_eq!(fake.requests().len(), 1, "the model was called once");
    let messages = format!("/api/sessions/{}/messages", session.id);
    assert_eq!(count(&s, &messages).await, 2, "the question and the answer, saved once");
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_streamed_chat_or_response_saves_the_turn_once_and_streams_it_again() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 30.0)).await;
    let agent = s.create_agent("Ada").await;
    let session = s.create_session(&[agent.id], &[]).await;
    let chat = format!("/api/sessions/{}/chat", session.id);
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "stream": true});
    fake.push(Behaviour::Text("Hello once".into()));
    let first = post(&s, &chat, &body, "stream-1").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(first.text.contains("Hello") && first.text.ends_with("data: [DONE]\n\n"), "{}", first.text);
    let again = post(&s, &chat, &body, "stream-1").await;
    assert_eq!((again.status, again.replayed), (200, true), "{}", again.text);
    assert_eq!(again.text, first.text, "the same events, byte for byte");
    assert_eq!(fake.requests().len(), 1, "the model was called once");
    let messages = format!("/api/sessions/{}/messages", session.id);
    assert_eq!(count(&s, &messages).await, 2, "the question and the answer, saved once");

    // A streamed `/v1` response in a conversation: one turn, its events again.
    let conversation = post(&s, "/v1/conversations", &json!({}), "conv-1").await.json();
    let id = conversation["id"].as_str().unwrap().to_owned();
    fake.push(Behaviour::Text("Once".into()));
    let turn = json!({"model": agent.id.to_string(), "input": "Hello?", "conversation": id, "stream": true});
    let first = post(&s, "/v1/responses", &turn, "stream-2").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert!(first.text.contains("event: response.completed"), "{}", first.text);
    let again = post(&s, "/v1/responses", &turn, "stream-2").await;
    assert_eq!((again.status, again.replayed, again.text == first.text), (200, true, true), "{}", again.text);
    assert_eq!(fake.requests().len(), 2, "the model was called once more");
    let items = format!("/api/sessions/{}/messages", agent_platform_tests::session_of(&id));
    assert_eq!(count(&s, &items).await, 2, "the conversation's input and answer, saved once");
    s.stop().await;
}

/// `POST path body` twice with the key `idem`: the first answers 200 with `field`
/// (a JSON pointer) equal to `expected`, the second replays it byte for byte.
async fn once_then_replayed(
    s: &TestServer,
    path: &str,
    body: &Value,
    idem: &str,
    field: &str,
    expected: Value,
) -> Answer {
    let first = post(s, path, body, idem).await;
    assert_eq!((first.status, first.json().pointer(field).cloned()), (200, Some(expected)), "{}", first.text);
    let again = post(s, path, body, idem).await;
    assert_eq!((again.status, again.text.as_str(), again.replayed), (200, first.text.as_str(), true));
    first
}

#[tokio::test]
async fn the_v1_posts_replay_their_first_answer_and_write_once() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 30.0)).await;
    let agent = s.create_agent("Ada").await.id.to_string();

    // A conversation with one item: the answer is the conversation, not its session.
    let create =
        json!({"items": [{"type": "message", "role": "user", "content": "Hi"}], "metadata": {"n": "1"}});
    let first = once_then_replayed(
        &s,
        "/v1/conversations",
        &create,
        "conversation-1",
        "/object",
        json!("conversation"),
    )
    .await;
    assert_eq!(count(&s, "/api/sessions").await, 1, "the repeat created no session");
    let id = first.json()["id"].as_str().unwrap().to_owned();
    let messages = format!("/api/sessions/{}/messages", agent_platform_tests::session_of(&id));
    assert_eq!(count(&s, &messages).await, 1);

    // One item appended: the answer is the item list.
    let item = json!({"items": [{"type": "message", "role": "assistant", "content": "Hello"}]});
    once_then_replayed(
        &s,
        &format!("/v1/conversations/{id}/items"),
        &item,
        "items-1",
        "/object",
        json!("list"),
    )
    .await;
    assert_eq!(count(&s, &messages).await, 2, "the repeat appended nothing");

    let update = json!({"metadata": {"n": "2"}});
    once_then_replayed(
        &s,
        &format!("/v1/conversations/{id}"),
        &update,
        "update-1",
        "/metadata/n",
        json!("2"),
    )
    .await;

    // A response: the model is called once, the turn saved once.
    fake.push(Behaviour::Text("Once".into()));
    let turn = json!({"model": agent, "input": "Hello?", "conversation": id});
    once_then_replayed(&s, "/v1/responses", &turn, "response-1", "/status", json!("completed")).await;
    assert_eq!(fake.requests().len(), 1, "the model was called once");
    assert_eq!(count(&s, &messages).await, 4, "the input and the answer, saved once");

    // A chat completion: nothing saved, the model called once.
    fake.push(Behaviour::Text("Twice?".into()));
    let completion = json!({"model": agent, "messages": [{"role": "user", "content": "Hi"}]});
    let path = "/v1/chat/completions";
    once_then_replayed(&s, path, &completion, "completion-1", "/object", json!("chat.completion")).await;
    assert_eq!(fake.requests().len(), 2, "the model was called once more, not twice");

    // The key on another body: a 409 in OpenAI's shape, nothing written.
    let other = json!({"items": [{"type": "message", "role": "user", "content": "Other"}]});
    let conflict = post(&s, "/v1/conversations", &other, "conversation-1").await;
    assert_eq!(conflict.status, 409, "{}", conflict.text);
    let message = conflict.json()["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains("Idempotency-Key"), "{}", conflict.text);
    assert_eq!(count(&s, "/api/sessions").await, 1);
    // A key that is no key: a 400 naming the header, in OpenAI's shape.
    let bad = post_with(&s, &s.key, "/v1/conversations", &create, b"").await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(
        bad.json()["error"]["param"].as_str().is_some_and(|p| p.contains("idempotency-key")),
        "{}",
        bad.text
    );
    s.stop().await;
}
