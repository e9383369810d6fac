//! Chat (`POST /api/sessions/{id}/chat`) against a scripted OpenAI-compatible
//! upstream (`FakeUpstream` on 127.0.0.1:0) configured as the server's provider.

use std::time::{Duration, Instant};

use agent_platform::models::ModelsConfig;
use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{Raw, TestServer, types};
use serde_json::{Value, json};
use uuid::Uuid;

fn models(fake: &FakeUpstream) -> ModelsConfig {
    // Short, for the timeout tests; long enough for the tokenizer's first load.
    agent_platform_tests::fake_models(fake, 2.0)
}

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    agent: Uuid,
    session: Uuid,
}

/// A server on a fake upstream, an agent with instructions, a user with an
/// about, and a session of both created with `session_extra` fields.
async fn setup_with(session_extra: Value) -> Setup {
    setup_on(session_extra, models).await
}

/// [`setup_with`] on the providers `models` makes of the fake.
async fn setup_on(session_extra: Value, models: impl Fn(&FakeUpstream) -> ModelsConfig) -> Setup {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(models(&fake)).await;
    let agent = s
        .raw(
            "POST",
            "/api/agents",
            Some(
                &json!({"name": "Ada", "about": "a research assistant", "instructions": ["Always cite sources."],
                        "default_settings": {"temperature": 0.3, "top_p": 0.5}})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(agent.status, 201, "{}", agent.body);
    let agent: Uuid = agent.body["id"].as_str().unwrap().parse().unwrap();
    let user = s.raw("POST", "/api/users", Some(r#"{"name": "Bob", "about": "a marine biologist"}"#)).await;
    let user: Uuid = user.body["id"].as_str().unwrap().parse().unwrap();
    let mut body = json!({"agent": agent, "user": user});
    body.as_object_mut().unwrap().extend(session_extra.as_object().unwrap().clone());
    let session = s.raw("POST", "/api/sessions", Some(&body.to_string())).await;
    assert_eq!(session.status, 201, "{}", session.body);
    let session = session.body["id"].as_str().unwrap().parse().unwrap();
    Setup { s, fake, agent, session }
}

async fn setup() -> Setup {
    setup_with(json!({})).await
}

impl Setup {
    async fn chat(&self, body: Value) -> Raw {
        self.s.raw("POST", &format!("/api/sessions/{}/chat", self.session), Some(&body.to_string())).await
    }

    async fn say(&self, text: &str) -> Raw {
        self.chat(json!({"messages": [{"role": "user", "content": text}]})).await
    }

    /// The session's messages as (role, content), oldest first.
    async fn history(&self) -> Vec<(String, String)> {
        let r = self.s.raw("GET", &format!("/api/sessions/{}/messages", self.session), None).await;
        r.body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
            .collect()
    }

    /// The messages of the last request the upstream received.
    fn sent(&self) -> Vec<Value> {
        self.fake.last_request().expect("a request upstream").body["messages"].as_array().unwrap().clone()
    }
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_owned(), content.to_owned())
}

#[tokio::test]
async fn chat_answers_and_saves_the_exchange_through_the_client() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("Hello Bob".into()));
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("Hi there");
    let answer =
        t.s.client
            .session_chat()
            .id(t.session)
            .body(types::ChatRequest::builder().messages(vec![msg.try_into().unwrap()]))
            .send()
            .await
            .unwrap()
            .into_inner();
    assert_eq!(answer.choices.len(), 1);
    assert_eq!(answer.choices[0].message.content.as_deref(), Some("Hello Bob"));
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    assert!(answer.usage.total_tokens > 0);
    assert!(answer.docs.is_empty());
    assert_eq!(t.history().await, vec![pair("user", "Hi there"), pair("assistant", "Hello Bob")]);
}

#[tokio::test]
async fn system_message_has_the_agents_instructions_and_the_users_about() {
    let t = setup_with(json!({"situation": "Bob prepares a talk."})).await;
    assert_eq!(t.say("hello").await.status, 200);
    let sent = t.sent();
    assert_eq!(sent[0]["role"], "system");
    let system = sent[0]["content"].as_str().unwrap();
    for part in
        ["Ada", "a research assistant", "Always cite sources.", "a marine biologist", "Bob prepares a talk."]
    {
        assert!(system.contains(part), "{part:?} missing from {system:?}");
    }
}

#[tokio::test]
async fn custom_system_template_is_rendered_then_the_situation() {
    let t = setup_with(
        json!({"system_template": "Agent {{ agent.name }} for {{ user.name }}.", "situation": "Late."}),
    )
    .await;
    assert_eq!(t.say("hello").await.status, 200);
    assert_eq!(t.sent()[0]["content"], "Agent Ada for Bob.\n\nLate.");
}

#[tokio::test]
async fn history_is_oldest_first_then_the_new_messages() {
    let t = setup().await;
    t.say("one").await;
    t.say("two").await;
    assert_eq!(t.say("three").await.status, 200);
    let sent: Vec<(String, String)> = t
        .sent()
        .iter()
        .skip(1)
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect();
    let expected = vec![
        pair("user", "one"),
        pair("assistant", "one"),
        pair("user", "two"),
        pair("assistant", "two"),
        pair("user", "three"),
    ];
    assert_eq!(sent, expected);
}

/// The history a chat sends is the stored history, whatever was appended
/// since the last chat and however appends interleaved (the history cache
/// must follow every write, in the store's order).
#[tokio::test]
async fn the_history_sent_is_the_stored_history_after_concurrent_posts_and_chats() {
    let t = setup().await;
    t.fake.set_default(Behaviour::Echo);
    assert_eq!(t.say("first").await.status, 200);
    let path = format!("/api/sessions/{}/messages", t.session);
    let t = &t;
    let posts = (0..12).map(|i| {
        let body =
            json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("post {i}")});
        let path = &path;
        async move { t.s.raw("POST", path, Some(&body.to_string())).await.status }
    });
    let chats = (0..3).map(|i| async move { t.say(&format!("chat {i}")).await.status });
    let (posts, chats) = futures::join!(futures::future::join_all(posts), futures::future::join_all(chats));
    assert!(posts.iter().all(|s| *s == 201), "{posts:?}");
    assert!(chats.iter().all(|s| *s == 200), "{chats:?}");
    let stored = t.history().await;
    assert_eq!(stored.len(), 2 + 12 + 6);
    assert_eq!(t.say("last").await.status, 200);
    let sent = t.sent();
    let sent: Vec<(String, String)> = sent[1..sent.len() - 1]
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(sent, stored);
}

#[tokio::test]
async fn request_settings_override_the_agents_and_the_model_falls_back_to_the_default() {
    let t = setup().await;
    assert_eq!(
        t.chat(json!({"messages": [{"role": "user", "content": "x"}], "temperature": 0.9})).await.status,
        200
    );
    let body = t.fake.last_request().unwrap().body;
    assert_eq!(body["temperature"].as_f64().unwrap() as f32, 0.9);
    assert_eq!(body["top_p"], 0.5, "the agent's default stays");
    assert_eq!(body["model"], "fake-model", "the server's default model");
    assert_eq!(
        t.chat(json!({"messages": [{"role": "user", "content": "x"}], "model": "other"})).await.status,
        200
    );
    assert_eq!(t.fake.last_request().unwrap().body["model"], "other");
    let patch =
        t.s.raw("PATCH", &format!("/api/agents/{}", t.agent), Some(r#"{"model": "agent-model"}"#)).await;
    assert_eq!(patch.status, 200, "{}", patch.body);
    t.say("x").await;
    assert_eq!(t.fake.last_request().unwrap().body["model"], "agent-model");
}

#[tokio::test]
async fn render_templates_renders_the_new_messages() {
    let t = setup().await;
    assert_eq!(t.say("I am talking to {{ agent.name }}").await.status, 200);
    assert_eq!(t.history().await[0], pair("user", "I am talking to Ada"));
}

#[tokio::test]
async fn save_false_saves_nothing() {
    let t = setup().await;
    let r = t.chat(json!({"messages": [{"role": "user", "content": "x"}], "save": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn truncate_drops_the_oldest_history_first() {
    let t = setup_with(json!({"token_budget": 110, "context_overflow": "truncate"})).await;
    assert_eq!(t.say(&"first ".repeat(60)).await.status, 200);
    t.say("second").await;
    assert_eq!(t.say("third").await.status, 200);
    let sent = t.sent();
    let contents: Vec<&str> = sent.iter().skip(1).map(|m| m["content"].as_str().unwrap()).collect();
    assert!(!(sent[1]["role"] == "user" && contents[0].contains("first")), "the oldest stayed: {contents:?}");
    assert_eq!(contents[contents.len() - 1], "third");
    assert!(contents.contains(&"second"), "{contents:?}");
}

#[tokio::test]
async fn truncate_is_400_when_the_new_messages_alone_are_over_the_budget() {
    let t = setup_with(json!({"token_budget": 60, "context_overflow": "truncate"})).await;
    let r = t.say(&"word ".repeat(200)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("token_budget of 60"), "{}", r.body);
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn over_the_budget_without_context_overflow_is_400_naming_the_budget() {
    let t = setup_with(json!({"token_budget": 100})).await;
    assert_eq!(t.say(&"first ".repeat(40)).await.status, 200);
    let r = t.say("again").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("token_budget of 100"), "{}", r.body);
}

#[tokio::test]
async fn adaptive_replaces_the_oldest_history_by_a_summary() {
    let t = setup_with(json!({"token_budget": 200, "context_overflow": "adaptive"})).await;
    t.say(&"first ".repeat(60)).await;
    t.say(&"second ".repeat(60)).await;
    t.fake.push(Behaviour::Summary);
    t.fake.push(Behaviour::Text("ok".into()));
    assert_eq!(t.say("third").await.status, 200);
    let sent = t.sent();
    assert_eq!(sent[1]["role"], "system");
    assert!(
        sent[1]["content"].as_str().unwrap().starts_with("Summary of the earlier conversation: summary of")
    );
    assert!(!sent.iter().any(|m| m["content"].as_str().unwrap_or("").contains("first first")));
}

#[tokio::test]
async fn upstream_failures_map_to_502_504_503_and_save_nothing() {
    let t = setup().await;
    t.say("before").await;
    let before = t.history().await;
    let cases = [
        (Behaviour::Fail { status: 500, body: r#"{"error":{"message":"boom"}}"#.into() }, 502, "boom"),
        (
            Behaviour::Fail { status: 400, body: r#"{"error":{"message":"bad model"}}"#.into() },
            502,
            "bad model",
        ),
        (Behaviour::Hang(Duration::from_secs(5)), 504, "upstream_timeout"),
        (Behaviour::Garbage, 502, "upstream_error"),
    ];
    for (behaviour, status, needle) in cases {
        t.fake.push(behaviour.clone());
        let r = t.say("x").await;
        assert_eq!(r.status, status, "{behaviour:?}: {}", r.body);
        assert!(r.body.to_string().contains(needle), "{behaviour:?}: {}", r.body);
        assert_eq!(t.history().await, before, "{behaviour:?} saved something");
    }
}

#[tokio::test]
async fn no_provider_is_503_saying_how_to_configure_one() {
    let s = TestServer::start().await;
    let a = s.create_agent("Ada").await;
    let session = s.create_session(&[a.id], &[]).await;
    let r = s
        .raw(
            "POST",
            &format!("/api/sessions/{}/chat", session.id),
            Some(r#"{"messages":[{"role":"user","content":"x"}]}"#),
        )
        .await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.body["code"], "no_model_provider");
    assert!(r.body["detail"].as_str().unwrap().contains("OPENAI_BASE_URL"), "{}", r.body);
    let msgs = s.raw("GET", &format!("/api/sessions/{}/messages", session.id), None).await;
    assert_eq!(msgs.body["items"], json!([]));
}

#[tokio::test]
async fn tool_calls_are_returned_and_their_results_accepted_back() {
    let t = setup().await;
    let tool = json!({"name": "get_weather", "type": "function", "description": "The weather",
                      "function": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let r = t.s.raw("POST", &format!("/api/agents/{}/tools", t.agent), Some(&tool.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    t.fake.push(Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() });
    let r = t.say("Weather in Paris?").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let tools = &t.fake.last_request().unwrap().body["tools"];
    assert_eq!(tools[0]["function"]["name"], "get_weather");
    let choice = &r.body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let call_id = call["id"].as_str().unwrap();
    t.fake.push(Behaviour::Text("It is sunny.".into()));
    let r =
        t.chat(json!({"messages": [{"role": "tool", "tool_call_id": call_id, "content": "sunny"}]})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = t.sent();
    let n = sent.len();
    assert_eq!(sent[n - 2]["tool_calls"][0]["id"], call_id);
    assert_eq!(sent[n - 1]["role"], "tool");
    assert_eq!(sent[n - 1]["tool_call_id"], call_id);
    let roles: Vec<String> = t.history().await.into_iter().map(|(r, _)| r).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
}

#[tokio::test]
async fn concurrent_chats_on_one_session_keep_each_exchange_together() {
    let t = setup().await;
    t.fake.set_default(Behaviour::StreamWithDelays {
        chunks: vec!["a".into(), "b".into()],
        delay: Duration::from_millis(30),
    });
    let questions: Vec<String> = (0..4).map(|i| format!("q{i}")).collect();
    let chats = questions.iter().map(|q| t.say(q));
    for r in futures::future::join_all(chats).await {
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let h = t.history().await;
    assert_eq!(h.len(), 8);
    for exchange in h.chunks(2) {
        assert_eq!(exchange[0].0, "user");
        assert_eq!(exchange[1], pair("assistant", "ab"));
    }
}

// ---------------------------------------------------------------- streaming

/// Reads a streamed chat: the `data:` payloads with the time each arrived.
async fn stream_events(t: &Setup, body: Value) -> (u16, Vec<(Duration, String)>) {
    let resp = reqwest::Client::new()
        .post(format!("{}/api/sessions/{}/chat", t.s.base, t.session))
        .header("authorization", format!("Bearer {}", t.s.key))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    assert!(status != 200 || resp.headers()["content-type"] == "text/event-stream", "{:?}", resp.headers());
    let events = read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await;
    (status, events.into_iter().map(|e| (e.at, e.data)).collect())
}

#[tokio::test]
async fn streaming_sends_chunks_as_they_come_then_usage_docs_and_done() {
    let t = setup().await;
    let delay = Duration::from_millis(300);
    t.fake.push(Behaviour::StreamWithDelays { chunks: vec!["Hel".into(), "lo".into(), "!".into()], delay });
    let (status, events) =
        stream_events(&t, json!({"messages": [{"role": "user", "content": "hi"}], "stream": true})).await;
    assert_eq!(status, 200);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Hello!");
    let last = chunks.last().unwrap();
    assert!(last["usage"]["total_tokens"].as_i64().unwrap() > 0, "{last}");
    assert_eq!(last["docs"], json!([]));
    // The first text arrived well before the upstream was done.
    let first_text = events.iter().find(|(_, d)| d.contains("Hel")).unwrap().0;
    let done = events.last().unwrap().0;
    assert!(done - first_text >= delay, "first text at {first_text:?}, done at {done:?}");
    assert_eq!(t.history().await, vec![pair("user", "hi"), pair("assistant", "Hello!")]);
}

#[tokio::test]
async fn a_cut_stream_ends_with_an_error_event_and_saves_nothing() {
    let t = setup().await;
    t.fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let (status, events) =
        stream_events(&t, json!({"messages": [{"role": "user", "content": "hi"}], "stream": true})).await;
    assert_eq!(status, 200);
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "upstream_error", "{last}");
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn a_stream_that_fails_at_once_is_an_ordinary_502() {
    let t = setup().await;
    t.fake.push(Behaviour::Fail { status: 500, body: "down".into() });
    let (status, _) =
        stream_events(&t, json!({"messages": [{"role": "user", "content": "hi"}], "stream": true})).await;
    assert_eq!(status, 502);
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn a_client_that_goes_away_does_not_stop_the_turn_which_is_saved_whole() {
    let t = setup().await;
    t.fake
        .push(Behaviour::StreamWithDelays { chunks: vec!["a".into(); 20], delay: Duration::from_millis(20) });
    let mut resp = reqwest::Client::new()
        .post(format!("{}/api/sessions/{}/chat", t.s.base, t.session))
        .header("authorization", format!("Bearer {}", t.s.key))
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "stream": true}))
        .send()
        .await
        .unwrap();
    resp.chunk().await.unwrap();
    drop(resp);
    // The turn goes on without the client, and saves the whole answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let history = loop {
        let history = t.history().await;
        if history.len() == 2 {
            break history;
        }
        assert!(std::time::Instant::now() < deadline, "the turn was not saved: {history:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(history[1], ("assistant".to_owned(), "a".repeat(20)));
    assert!(
        !t.fake.wait_for_aborted_streams(1, Duration::from_millis(10)).await,
        "the upstream was read to its end, not cancelled"
    );
}

#[tokio::test]
async fn the_client_stream_helper_yields_typed_chunks() {
    use futures::StreamExt;
    let t = setup().await;
    t.fake.push(Behaviour::Text("one two three".into()));
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("count");
    let body: types::ChatRequest =
        types::ChatRequest::builder().messages(vec![msg.try_into().unwrap()]).try_into().unwrap();
    let mut chunks = t.s.client.session_chat_stream(t.session, body).await.unwrap();
    let mut text = String::new();
    let mut last = None;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.unwrap();
        text.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
        last = Some(chunk);
    }
    assert_eq!(text, "one two three");
    let last = last.unwrap();
    assert!(last.usage.unwrap().total_tokens > 0);
    assert_eq!(last.docs.unwrap().len(), 0);
}

#[tokio::test]
async fn the_client_stream_helper_reports_a_cut_stream() {
    use futures::StreamExt;
    let t = setup().await;
    t.fake.push(Behaviour::CutStream { chunks_before_cut: 1 });
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("x");
    let body: types::ChatRequest =
        types::ChatRequest::builder().messages(vec![msg.try_into().unwrap()]).try_into().unwrap();
    let chunks: Vec<_> = t.s.client.session_chat_stream(t.session, body).await.unwrap().collect().await;
    let err = chunks.last().unwrap().as_ref().unwrap_err();
    assert!(
        matches!(err, agent_platform_client::stream::ChatStreamError::Server { code, .. } if code == "upstream_error"),
        "{err}"
    );
}

#[tokio::test]
async fn recall_puts_the_matching_snippets_of_the_agent_and_the_user_in_the_system_message() {
    let t = setup().await;
    let user = t.s.raw("GET", &format!("/api/sessions/{}", t.session), None).await.body["users"][0].clone();
    let agent_doc =
        json!({"title": "Octopus facts", "content": ["Octopuses have three hearts.", "Paris is in France."]});
    let r = t.s.raw("POST", &format!("/api/agents/{}/docs", t.agent), Some(&agent_doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let user_doc = json!({"title": "Bob's notes", "content": "Bob's octopus is called Inky."});
    let r =
        t.s.raw("POST", &format!("/api/users/{}/docs", user.as_str().unwrap()), Some(&user_doc.to_string()))
            .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = t.say("How many hearts does an octopus have?").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let system = t.sent()[0]["content"].as_str().unwrap().to_owned();
    assert!(system.contains("Octopuses have three hearts."), "{system}");
    assert!(system.contains("Bob's octopus is called Inky."), "{system}");
    assert!(!system.contains("Paris"), "{system}");
    let docs = r.body["docs"].as_array().unwrap();
    assert_eq!(docs.len(), 2, "{}", r.body);
    assert!(docs.iter().any(|d| d["owner"]["role"] == "user" && d["title"] == "Bob's notes"));
    let r = t.chat(json!({"messages": [{"role": "user", "content": "octopus"}], "recall": false})).await;
    assert_eq!(r.body["docs"], json!([]));
    assert!(!t.sent()[0]["content"].as_str().unwrap().contains("three hearts"));
}

#[tokio::test]
async fn with_an_embedding_model_docs_are_embedded_and_recall_is_hybrid() {
    let fake = FakeUpstream::start().await;
    let s =
        TestServer::with_models(ModelsConfig { embedding_model: Some("embedder".into()), ..models(&fake) })
            .await;
    let agent = s.create_agent("Ada").await;
    let doc = json!({"title": "Octopus facts", "content": ["Octopuses have three hearts."]});
    let r = s.raw("POST", &format!("/api/agents/{}/docs", agent.id), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let embedded = fake.requests().iter().filter(|r| r.path == "/v1/embeddings").count();
    assert_eq!(embedded, 1, "the doc's snippets were embedded");
    let session = s.create_session(&[agent.id], &[]).await;
    let body = json!({"messages": [{"role": "user", "content": "octopus hearts"}]});
    let r = s.raw("POST", &format!("/api/sessions/{}/chat", session.id), Some(&body.to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["docs"][0]["title"], "Octopus facts");
    let embedded = fake.requests().iter().filter(|r| r.path == "/v1/embeddings").count();
    assert_eq!(embedded, 2, "the question was embedded for a hybrid search");
}

// ---------------------------------------------------------------- answers beyond the bounds

/// A setup whose provider waits 30 s: a failure that comes sooner is not a timeout.
async fn patient_setup() -> Setup {
    setup_on(json!({}), |fake| agent_platform_tests::fake_models(fake, 30.0)).await
}

const NINE_MB: usize = 9 * 1024 * 1024;

#[tokio::test]
async fn a_whole_answer_over_8_mib_is_502_and_saves_nothing() {
    let t = patient_setup().await;
    t.fake.push(Behaviour::Huge { bytes: NINE_MB });
    let r = t.say("write a lot").await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.body["code"], "upstream_error");
    assert!(r.body["detail"].as_str().unwrap().contains("max_answer_bytes"), "{}", r.body);
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn a_streamed_answer_over_8_mib_ends_with_an_error_event_and_saves_nothing() {
    let t = patient_setup().await;
    t.fake.push(Behaviour::Huge { bytes: NINE_MB });
    let body = json!({"messages": [{"role": "user", "content": "write a lot"}], "stream": true});
    let (status, events) = stream_events(&t, body).await;
    assert_eq!(status, 200, "the head left with the first chunk");
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "upstream_error", "{last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("max_answer_bytes"), "{last}");
    let sent: usize = events.iter().map(|(_, d)| d.len()).sum();
    assert!(sent < NINE_MB, "the answer was cut at the bound, not relayed whole ({sent} bytes)");
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn an_answer_that_never_ends_is_502_long_before_the_timeout_and_saves_nothing() {
    let t = patient_setup().await;
    t.fake.push(Behaviour::Endless);
    let started = Instant::now();
    let r = t.say("go on forever").await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("max_answer_bytes"), "{}", r.body);
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?} (timeout 30 s)", started.elapsed());
    assert!(t.fake.wait_for_aborted_streams(1, Duration::from_secs(5)).await, "the upstream was dropped");
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn a_stream_that_never_ends_ends_with_an_error_event_long_before_the_timeout() {
    let t = patient_setup().await;
    t.fake.push(Behaviour::Endless);
    let started = Instant::now();
    let body = json!({"messages": [{"role": "user", "content": "go on forever"}], "stream": true});
    let (status, events) = stream_events(&t, body).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?} (timeout 30 s)", started.elapsed());
    let last: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(last["error"]["code"], "upstream_error", "{last}");
    assert!(t.fake.wait_for_aborted_streams(1, Duration::from_secs(5)).await, "the upstream was dropped");
    assert!(t.history().await.is_empty());
}

#[tokio::test]
async fn an_upstream_429_is_429_with_its_retry_after_and_saves_nothing() {
    let t = setup().await;
    for stream in [false, true] {
        t.fake.push(Behaviour::RateLimited { retry_after: Some("7".into()) });
        let body = json!({"messages": [{"role": "user", "content": "hi"}], "stream": stream});
        let r = t.chat(body).await;
        assert_eq!(r.status, 429, "stream {stream}: {}", r.body);
        assert_eq!(r.body["code"], "rate_limited", "{}", r.body);
        assert_eq!(r.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("7"), "stream {stream}");
        assert!(r.body["detail"].as_str().unwrap().contains("Rate limit reached"), "{}", r.body);
    }
    // Without a Retry-After, still a 429 (and no header made up).
    t.fake.push(Behaviour::RateLimited { retry_after: None });
    let r = t.say("hi").await;
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.headers.get("retry-after").is_none());
    assert!(t.history().await.is_empty());
}
