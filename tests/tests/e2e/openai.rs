//! The OpenAI-compatible routes (`/v1`) against a live server whose model
//! provider is the scripted fake upstream: the model list, chat completions
//! with an agent as the model and with a provider's model name (proxied),
//! streamed and not, tool calls, and errors in OpenAI's shape.

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform::models::{ModelsConfig, ProviderConfig};
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{Raw, TestServer, doc, session_of, types};
use serde_json::{Value, json};
use uuid::Uuid;

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    agent: Uuid,
}

/// A server on the fake (serving every model name, default `fake-model`) and
/// an agent with instructions, default settings, a function tool and a document.
async fn setup() -> Setup {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_models(agent_platform_tests::fake_models(&fake, 5.0)).await;
    let agent = agent_with_tool_and_doc(&s).await;
    Setup { s, fake, agent }
}

async fn agent_with_tool_and_doc(s: &TestServer) -> Uuid {
    let body = json!({"name": "Ada", "about": "a travel assistant", "instructions": ["Answer in one line."],
                      "default_settings": {"temperature": 0.3, "max_tokens": 50}});
    let r = s.raw("POST", "/api/agents", Some(&body.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let agent: Uuid = r.body["id"].as_str().unwrap().parse().unwrap();
    let tool = json!({"name": "get_weather", "type": "function", "description": "The weather",
                      "function": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}});
    let r = s.raw("POST", &format!("/api/agents/{agent}/tools"), Some(&tool.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    s.agent_doc(agent, doc("Lyon", &["Lyon is famous for its traditional bouchons."])).await;
    agent
}

impl Setup {
    async fn complete(&self, body: Value) -> Raw {
        self.s.raw("POST", "/v1/chat/completions", Some(&body.to_string())).await
    }

    /// The body the fake received last.
    fn upstream_body(&self) -> Value {
        self.fake.last_request().expect("a request upstream").body
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[tokio::test]
async fn models_are_the_tenants_agents_then_the_providers_listed_models() {
    let fake = FakeUpstream::start().await;
    let models = ModelsConfig {
        providers: vec![ProviderConfig {
            name: "local".into(),
            base_url: fake.base_url(),
            api_key_env: None,
            models: vec!["small-model".into(), "large-model".into()],
        }],
        default_model: Some("small-model".into()),
        ..ModelsConfig::default()
    };
    let s = TestServer::with_models(models).await;
    let first = s.create_agent("First").await;
    let second = s.create_agent("Second").await;
    let list = s.client.openai_model_list().send().await.unwrap().into_inner();
    assert_eq!(list.object, "list");
    let got: Vec<(String, String, String)> =
        list.data.iter().map(|m| (m.id.clone(), m.object.clone(), m.owned_by.clone())).collect();
    let expected: Vec<(String, String, String)> = [
        (first.id.to_string(), "agent-platform"),
        (second.id.to_string(), "agent-platform"),
        ("small-model".into(), "local"),
        ("large-model".into(), "local"),
        // Then the names the provider lists itself (the fake: `fake-model`).
        ("fake-model".into(), "local"),
    ]
    .into_iter()
    .map(|(id, owner)| (id, "model".to_owned(), owner.to_owned()))
    .collect();
    assert_eq!(got, expected);
    assert_eq!(list.data[0].created, first.created_at.timestamp());
    s.stop().await;
}

#[tokio::test]
async fn an_agent_as_the_model_answers_with_its_system_message_tools_docs_and_settings_and_saves_nothing() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("Try a bouchon.".into()));
    // Through the generated client, in its types.
    let message = |role: types::CompletionRole, text: &str| types::CompletionMessage {
        role,
        content: Some(types::CompletionContent::String(text.into())),
        name: None,
        tool_calls: None,
        tool_call_id: None,
    };
    let body = types::ChatCompletionRequest::builder()
        .model(t.agent.to_string())
        .messages(vec![
            message(types::CompletionRole::Developer, "Be brief."),
            message(types::CompletionRole::User, "Where should I eat in Lyon?"),
        ])
        .temperature(Some(0.9));
    let answer = t.s.client.openai_chat_completion().body(body).send().await.unwrap().into_inner();
    assert_eq!(answer.object, "chat.completion");
    assert_eq!(answer.model, "fake-model");
    assert_eq!(answer.choices.len(), 1);
    assert_eq!(answer.choices[0].message.role, "assistant");
    assert_eq!(answer.choices[0].message.content.as_deref(), Some("Try a bouchon."));
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    assert!(answer.usage.total_tokens > 0);

    let sent = t.upstream_body();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{sent}");
    assert_eq!(messages[0]["role"], "system");
    let system = messages[0]["content"].as_str().unwrap();
    for part in ["Ada", "a travel assistant", "Answer in one line.", "bouchons"] {
        assert!(system.contains(part), "{part:?} missing from the system message {system:?}");
    }
    assert_eq!(messages[1], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(messages[2], json!({"role": "user", "content": "Where should I eat in Lyon?"}));
    assert_eq!(sent["model"], "fake-model");
    assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
    // The request's settings over the agent's.
    assert!((sent["temperature"].as_f64().unwrap() - 0.9).abs() < 1e-6, "{sent}");
    assert_eq!(sent["max_tokens"], 50);
    // Stateless: no session, no message.
    let sessions = t.s.raw("GET", "/api/sessions", None).await;
    assert_eq!(sessions.body["items"], json!([]));
    t.s.stop().await;
}

#[tokio::test]
async fn any_other_model_name_goes_to_its_provider_as_sent() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("proxied".into()));
    let tool = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}});
    let r = t
        .complete(json!({
            "model": "some-upstream-model",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            "tools": [tool],
            "tool_choice": "auto",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
            "parallel_tool_calls": false,
            "user": "end-user-1",
            "max_completion_tokens": 7,
            "max_tokens": 99,
            "stop": "END",
            "seed": 3,
            "logprobs": false,
            "some_future_field": {"ignored": true},
        }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["choices"][0]["message"]["content"], "proxied");
    assert_eq!(r.body["choices"][0]["logprobs"], Value::Null);
    let sent = t.upstream_body();
    assert_eq!(sent["model"], "some-upstream-model");
    assert_eq!(
        sent["messages"],
        json!([{"role": "system", "content": "sys"}, {"role": "user", "content": "a\nb"}])
    );
    assert_eq!(
        sent["tools"],
        json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}])
    );
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["response_format"]["type"], "json_schema");
    assert_eq!(sent["parallel_tool_calls"], false);
    assert_eq!(sent["user"], "end-user-1");
    assert_eq!(sent["max_tokens"], 7);
    assert_eq!(sent["stop"], json!(["END"]));
    assert_eq!(sent["seed"], 3);
    assert!(sent.get("some_future_field").is_none(), "{sent}");
    t.s.stop().await;
}

#[tokio::test]
async fn tool_calls_come_back_and_their_results_go_to_the_model() {
    let t = setup().await;
    t.fake.push(Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city":"Lyon"}"#.into() });
    let r = t.complete(json!({"model": t.agent, "messages": [user("Weather in Lyon?")]})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let choice = &r.body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = choice["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(call["function"]["arguments"], r#"{"city":"Lyon"}"#);

    t.fake.push(Behaviour::Text("Sunny in Lyon.".into()));
    let r = t
        .complete(json!({"model": t.agent, "messages": [
            user("Weather in Lyon?"),
            {"role": "assistant", "content": null, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "sunny"},
        ]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["choices"][0]["message"]["content"], "Sunny in Lyon.");
    let sent = t.upstream_body();
    let messages = sent["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["tool_calls"][0]["id"], call["id"]);
    assert_eq!(messages[n - 2]["content"], Value::Null);
    assert_eq!(messages[n - 1], json!({"role": "tool", "tool_call_id": call["id"], "content": "sunny"}));
    t.s.stop().await;
}

/// The `data:` payloads of a streamed answer, and its status and content type.
async fn stream(t: &Setup, body: Value) -> (u16, String, Vec<String>) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", t.s.base))
        .header("authorization", format!("Bearer {}", t.s.key))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
    let events = read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await.into_iter().map(|e| e.data).collect();
    (status, content_type, events)
}

#[tokio::test]
async fn streamed_completions_are_chunks_then_usage_when_asked_then_done() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("one two three".into()));
    let body = json!({"model": t.agent, "messages": [user("count")], "stream": true,
                      "stream_options": {"include_usage": true}});
    let (status, content_type, events) = stream(&t, body).await;
    assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert_eq!(c["id"], chunks[0]["id"]);
        assert!(c["created"].as_i64().unwrap() > 0);
    }
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "one two three");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["total_tokens"].as_i64().unwrap() > 0, "{last}");
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"));

    // Without include_usage: no usage anywhere.
    t.fake.push(Behaviour::Text("four five".into()));
    let (status, _, events) =
        stream(&t, json!({"model": "fake-model", "messages": [user("more")], "stream": true})).await;
    assert_eq!(status, 200);
    assert_eq!(events.last().unwrap(), "[DONE]");
    for e in &events[..events.len() - 1] {
        let c: Value = serde_json::from_str(e).unwrap();
        assert!(c.get("usage").is_none(), "{c}");
        assert_eq!(c["choices"].as_array().unwrap().len(), 1, "{c}");
    }

    // A stream cut by the provider ends with an error event in OpenAI's shape.
    t.fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let (status, _, events) =
        stream(&t, json!({"model": "fake-model", "messages": [user("cut")], "stream": true})).await;
    assert_eq!(status, 200);
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error", "{last}");
    assert_eq!(last["error"]["code"], "upstream_error", "{last}");
    t.s.stop().await;
}

#[tokio::test]
async fn errors_on_v1_are_in_openais_shape_with_the_usual_statuses() {
    let t = setup().await;
    let error = |r: &Raw| r.body["error"].clone();
    let shape = |r: &Raw| {
        let keys: Vec<&String> =
            r.body["error"].as_object().unwrap_or_else(|| panic!("{}", r.body)).keys().collect();
        assert_eq!(keys, ["code", "message", "param", "type"], "{}", r.body);
        assert_eq!(r.body.as_object().unwrap().len(), 1, "{}", r.body);
    };
    // No key.
    let r = t.s.raw_with("GET", "/v1/models", None, None).await;
    assert_eq!(r.status, 401);
    shape(&r);
    assert_eq!(error(&r)["type"], "authentication_error");
    assert_eq!(error(&r)["code"], "unauthorized");
    assert!(r.headers.contains_key("x-request-id"));
    // A validation failure names the param.
    let r = t.complete(json!({"model": "m"})).await;
    assert_eq!(r.status, 400);
    shape(&r);
    assert_eq!(
        (error(&r)["type"].clone(), error(&r)["param"].clone(), error(&r)["code"].clone()),
        (json!("invalid_request_error"), json!("messages"), json!("missing"))
    );
    let message = error(&r)["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("Invalid request: messages: "), "the field as OpenAI writes it: {message}");
    assert!(!message.contains("Key("), "no Rust debug paths: {message}");
    let r = t.complete(json!({"model": "m", "messages": [user("x")], "temperature": 3})).await;
    assert_eq!((r.status, error(&r)["param"].clone()), (400, json!("temperature")), "{}", r.body);
    let r = t.complete(json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]})).await;
    assert_eq!(
        (r.status, error(&r)["param"].clone()),
        (400, json!("messages[0].tool_call_id")),
        "{}",
        r.body
    );
    // Unsupported features: 400 naming the param.
    let r = t.complete(json!({"model": "m", "messages": [user("x")], "n": 2})).await;
    assert_eq!((r.status, error(&r)["param"].clone()), (400, json!("n")), "{}", r.body);
    shape(&r);
    let audio = json!({"role": "user", "content": [{"type": "text", "text": "hear"}, {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]});
    let r = t.complete(json!({"model": "m", "messages": [audio]})).await;
    assert_eq!(
        (r.status, error(&r)["param"].clone()),
        (400, json!("messages[0].content[1].type")),
        "{}",
        r.body
    );
    // An id that is no agent of the tenant.
    let r = t.complete(json!({"model": Uuid::now_v7(), "messages": [user("x")]})).await;
    assert_eq!((r.status, error(&r)["code"].clone()), (404, json!("not_found")), "{}", r.body);
    // The provider failing: 502, nothing saved.
    t.fake.push(Behaviour::Fail { status: 500, body: "boom".into() });
    let r = t.complete(json!({"model": t.agent, "messages": [user("x")]})).await;
    assert_eq!(
        (r.status, error(&r)["type"].clone(), error(&r)["code"].clone()),
        (502, json!("server_error"), json!("upstream_error")),
        "{}",
        r.body
    );
    t.fake.push(Behaviour::RateLimited { retry_after: Some("7".into()) });
    let r = t.complete(json!({"model": "m", "messages": [user("x")]})).await;
    assert_eq!((r.status, error(&r)["type"].clone()), (429, json!("rate_limit_error")), "{}", r.body);
    assert_eq!(r.headers["retry-after"], "7");
    // Router errors under /v1 too; /api keeps its own shape.
    let r = t.s.raw("GET", "/v1/no-such-route", None).await;
    assert_eq!((r.status, error(&r)["code"].clone()), (404, json!("not_found")), "{}", r.body);
    shape(&r);
    let r = t.s.raw("DELETE", "/v1/models", None).await;
    assert_eq!((r.status, error(&r)["code"].clone()), (405, json!("method_not_allowed")), "{}", r.body);
    let r = t.s.raw("GET", "/api/no-such-route", None).await;
    assert_eq!((r.status, r.body["code"].clone()), (404, json!("not_found")), "{}", r.body);
    t.s.stop().await;
}

// ---------------------------------------------------------------- conversations

#[tokio::test]
async fn a_conversation_is_a_session_and_its_items_are_the_sessions_messages() {
    let s = TestServer::start().await;
    // Created through /v1 with items: a session with those messages, in one write.
    let r = s
        .raw(
            "POST",
            "/v1/conversations",
            Some(
                &json!({"metadata": {"topic": "trip"}, "items": [
                    {"type": "message", "role": "developer", "content": "Be brief."},
                    {"role": "user", "content": [{"type": "input_text", "text": "Plan"}, {"type": "input_text", "text": "a trip"}]},
                    {"type": "function_call", "call_id": "call_1", "name": "search", "arguments": "{\"q\":\"Lyon\"}"},
                    {"type": "function_call", "call_id": "call_2", "name": "search", "arguments": "{\"q\":\"Nice\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "rainy"},
                    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "sunny"}]},
                    {"role": "assistant", "content": [{"type": "output_text", "text": "Go to Nice."}]},
                ]})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["object"], "conversation");
    assert_eq!(r.body["metadata"], json!({"topic": "trip"}));
    let conv = r.body["id"].as_str().unwrap().to_owned();
    let id = session_of(&conv);
    let session = s.raw("GET", &format!("/api/sessions/{id}"), None).await;
    assert_eq!(session.status, 200, "{}", session.body);
    assert_eq!((session.body["agents"].clone(), session.body["users"].clone()), (json!([]), json!([])));
    let messages = s.raw("GET", &format!("/api/sessions/{id}/messages?direction=asc"), None).await;
    let got: Vec<(String, String)> = messages.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap().to_owned()))
        .collect();
    let expected = [
        ("system", "Be brief."),
        ("user", "Plan\na trip"),
        ("assistant", ""),
        ("tool", "rainy"),
        ("tool", "sunny"),
        ("assistant", "Go to Nice."),
    ];
    assert_eq!(got, expected.map(|(r, c)| (r.to_owned(), c.to_owned())));
    let calls = &messages.body["items"][2]["tool_calls"];
    assert_eq!(calls.as_array().unwrap().len(), 2, "consecutive calls are one assistant message: {calls}");

    // Its items, in OpenAI's shapes, oldest first.
    let items = s.raw("GET", &format!("/v1/conversations/{conv}/items?order=asc&limit=100"), None).await;
    assert_eq!(items.status, 200, "{}", items.body);
    let kinds: Vec<&str> =
        items.body["data"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
            "message"
        ]
    );
    let data = items.body["data"].as_array().unwrap();
    assert_eq!(data[0]["role"], "system");
    assert_eq!(data[1]["content"], json!([{"type": "input_text", "text": "Plan\na trip"}]));
    assert_eq!(data[3]["call_id"], "call_2");
    assert_eq!(data[5]["output"], "sunny");
    assert_eq!(
        data[6]["content"],
        json!([{"type": "output_text", "text": "Go to Nice.", "annotations": []}])
    );
    assert_eq!(items.body["has_more"], false);
    assert_eq!(items.body["first_id"], data[0]["id"]);
    assert_eq!(items.body["last_id"], data[6]["id"]);

    // Cursor paging, both orders, pages ending inside a message's items: the
    // pages add up to the whole list.
    for (order, limit) in [("asc", 1), ("asc", 3), ("desc", 2), ("desc", 3)] {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let q = match &after {
                Some(a) => format!("order={order}&limit={limit}&after={a}"),
                None => format!("order={order}&limit={limit}"),
            };
            let page = s.raw("GET", &format!("/v1/conversations/{conv}/items?{q}"), None).await;
            assert_eq!(page.status, 200, "{}", page.body);
            seen.extend(
                page.body["data"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_owned()),
            );
            if page.body["has_more"] == false {
                break;
            }
            after = Some(page.body["last_id"].as_str().unwrap().to_owned());
        }
        let mut all: Vec<String> = data.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect();
        if order == "desc" {
            all.reverse();
        }
        assert_eq!(seen, all, "order {order} limit {limit}");
    }
    let r = s.raw("GET", &format!("/v1/conversations/{conv}/items?after={}", Uuid::now_v7()), None).await;
    assert_eq!(r.status, 404, "{}", r.body);

    // One item, by id; a function call's id too.
    let call_id = data[2]["id"].as_str().unwrap();
    let r = s.raw("GET", &format!("/v1/conversations/{conv}/items/{call_id}"), None).await;
    assert_eq!((r.status, r.body.clone()), (200, data[2].clone()));
    // A message item is `msg_` and its message's id; the UUID names it too.
    let message_id = data[1]["id"].as_str().unwrap();
    let hex = message_id.strip_prefix("msg_").unwrap_or_else(|| panic!("a msg_ id: {message_id}"));
    let by_uuid = Uuid::try_parse(hex).unwrap();
    let r = s.raw("GET", &format!("/v1/conversations/{conv}/items/{by_uuid}"), None).await;
    assert_eq!((r.status, r.body.clone()), (200, data[1].clone()));
    // An id in an item's form that names none is a 404; one in no form of an id a 400.
    let unknown = format!("msg_{}", Uuid::now_v7().simple());
    let r = s.raw("GET", &format!("/v1/conversations/{conv}/items/{unknown}"), None).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (404, json!("not_found")), "{}", r.body);
    let r = s.raw("GET", &format!("/v1/conversations/{conv}/items/nonsense"), None).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("item_id")), "{}", r.body);
    // Conversations alike: an unknown conv_ id is a 404, a malformed one a 400.
    let r = s.raw("GET", &format!("/v1/conversations/conv_{}", Uuid::now_v7().simple()), None).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (404, json!("not_found")), "{}", r.body);
    let r = s.raw("GET", "/v1/conversations/conv_123", None).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("conversation_id")), "{}", r.body);

    // Appending items; deleting one (a call takes its whole message along).
    let r = s
        .raw(
            "POST",
            &format!("/v1/conversations/{conv}/items"),
            Some(&json!({"items": [{"role": "user", "content": "Thanks"}]}).to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"][0]["content"][0]["text"], "Thanks");
    let r = s.raw("DELETE", &format!("/v1/conversations/{conv}/items/{call_id}"), None).await;
    assert_eq!((r.status, r.body["id"].clone()), (200, json!(conv)), "{}", r.body);
    let items = s.raw("GET", &format!("/v1/conversations/{conv}/items?order=asc"), None).await;
    let kinds: Vec<&str> =
        items.body["data"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["message", "message", "function_call_output", "function_call_output", "message", "message"]
    );
    let r = s.raw("DELETE", &format!("/v1/conversations/{conv}/items/{call_id}"), None).await;
    assert_eq!(r.status, 404, "{}", r.body);

    // Metadata replaced; /api sees it.
    let r = s
        .raw("POST", &format!("/v1/conversations/{conv}"), Some(&json!({"metadata": {"k": "v"}}).to_string()))
        .await;
    assert_eq!((r.status, r.body["metadata"].clone()), (200, json!({"k": "v"})), "{}", r.body);
    let session = s.raw("GET", &format!("/api/sessions/{id}"), None).await;
    assert_eq!(session.body["metadata"], json!({"k": "v"}));
    // No agent answers a chat in it through /api: a 400 saying so.
    let r = s
        .raw(
            "POST",
            &format!("/api/sessions/{id}/chat"),
            Some(&json!({"messages": [{"role": "user", "content": "hi"}]}).to_string()),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body["detail"].as_str().unwrap().contains("no agent"), "{}", r.body);

    // A session made through /api is a conversation too.
    let agent = s.create_agent("Ada").await;
    let made = s.create_session(&[agent.id], &[]).await;
    s.say(made.id, "hello").await;
    let r = s.raw("GET", &format!("/v1/conversations/{}", made.id), None).await;
    assert_eq!((r.status, r.body["id"].clone()), (200, json!(format!("conv_{}", made.id.simple()))));
    let r = s.raw("GET", &format!("/v1/conversations/{}/items", made.id), None).await;
    assert_eq!(r.body["data"][0]["content"][0]["text"], "hello");

    // Deleted: gone from both APIs.
    let r = s.raw("DELETE", &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!(r.body, json!({"id": conv, "object": "conversation.deleted", "deleted": true}));
    assert_eq!(s.raw("GET", &format!("/api/sessions/{id}"), None).await.status, 404);
    let r = s.raw("GET", &format!("/v1/conversations/{conv}"), None).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (404, json!("not_found")));
    s.stop().await;
}

#[tokio::test]
async fn conversation_items_are_validated_and_a_refused_request_writes_nothing() {
    let s = TestServer::start().await;
    let before = s.raw("GET", "/api/sessions", None).await.body;
    let post = |body: Value| {
        let s = &s;
        async move { s.raw("POST", "/v1/conversations", Some(&body.to_string())).await }
    };
    let r = post(json!({"items": [{"type": "message", "content": "x"}]})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("items[0].role")), "{}", r.body);
    let r = post(json!({"items": [{"role": "user", "content": "ok"}, {"type": "function_call", "name": "f", "arguments": "{}"}]})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("items[1].call_id")), "{}", r.body);
    let r = post(json!({"items": [{"type": "reasoning", "summary": []}]})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("items[0].type")), "{}", r.body);
    let r = post(
        json!({"items": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA"}}]}]}),
    )
    .await;
    assert_eq!(
        (r.status, r.body["error"]["param"].clone()),
        (400, json!("items[0].content[0].type")),
        "{}",
        r.body
    );
    assert_eq!(s.raw("GET", "/api/sessions", None).await.body, before, "nothing was created");
    s.stop().await;
}

// ---------------------------------------------------------------- responses

impl Setup {
    async fn respond(&self, body: Value) -> Raw {
        self.s.raw("POST", "/v1/responses", Some(&body.to_string())).await
    }

    /// The messages the fake received last, as (role, content).
    fn upstream_messages(&self) -> Vec<(String, String)> {
        agent_platform_tests::sent_messages(&self.upstream_body())
    }

    async fn session_count(&self) -> usize {
        self.s.raw("GET", "/api/sessions?limit=1000", None).await.body["items"].as_array().unwrap().len()
    }
}

fn text_of_output(r: &Raw) -> String {
    agent_platform_tests::output_text(&r.body)
}

#[tokio::test]
async fn responses_chain_by_previous_response_id_as_turns_of_one_session() {
    let t = setup().await;
    let first = t.respond(json!({"model": t.agent, "input": "I am Bob.", "metadata": {"k": "v"}})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        (first.body["object"].clone(), first.body["status"].clone()),
        (json!("response"), json!("completed"))
    );
    let id1 = first.body["id"].as_str().unwrap().to_owned();
    assert!(id1.starts_with("resp_"), "{id1}");
    assert_eq!(text_of_output(&first), "I am Bob.");
    assert!(first.body["usage"]["total_tokens"].as_i64().unwrap() > 0);
    assert_eq!(first.body["metadata"], json!({"k": "v"}));
    // A new session of the agent, with the turn.
    assert_eq!(t.session_count().await, 1);
    let sessions = t.s.raw("GET", "/api/sessions", None).await;
    let session = sessions.body["items"][0].clone();
    assert_eq!(session["agents"], json!([t.agent]));

    let second =
        t.respond(json!({"model": t.agent, "input": "What is my name?", "previous_response_id": id1})).await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.body["previous_response_id"], json!(id1));
    let sent = t.upstream_messages();
    assert_eq!(sent[0].0, "system");
    assert!(sent[0].1.contains("Answer in one line."), "{sent:?}");
    assert_eq!(
        sent[1..].to_vec(),
        [("user", "I am Bob."), ("assistant", "I am Bob."), ("user", "What is my name?")]
            .map(|(r, c)| (r.to_owned(), c.to_owned()))
    );
    let id2 = second.body["id"].as_str().unwrap().to_owned();
    let third = t
        .respond(json!({"model": t.agent, "input": [{"role": "user", "content": "Third."}], "previous_response_id": id2,
                        "instructions": "Answer in French."}))
        .await;
    assert_eq!(third.status, 200, "{}", third.body);
    let sent = t.upstream_messages();
    assert_eq!(sent.len(), 1 + 1 + 4 + 1, "system, instructions, two turns, the new input: {sent:?}");
    assert_eq!(sent[1], ("system".to_owned(), "Answer in French.".to_owned()));
    // One session, three turns; the stored responses read back.
    assert_eq!(t.session_count().await, 1);
    let sid = session["id"].as_str().unwrap();
    let messages = t.s.raw("GET", &format!("/api/sessions/{sid}/messages"), None).await;
    assert_eq!(messages.body["items"].as_array().unwrap().len(), 6);
    let got = t.s.raw("GET", &format!("/v1/responses/{id1}"), None).await;
    assert_eq!(got.status, 200, "{}", got.body);
    assert_eq!(got.body, first.body, "a stored response reads back as it was answered");
    let items = t.s.raw("GET", &format!("/v1/responses/{id2}/input_items"), None).await;
    assert_eq!(items.status, 200, "{}", items.body);
    assert_eq!(items.body["data"][0]["content"][0]["text"], "What is my name?");
    // Deleted: its turn leaves the session; it can no longer be continued.
    let r = t.s.raw("DELETE", &format!("/v1/responses/{id2}"), None).await;
    assert_eq!(r.body, json!({"id": id2, "object": "response.deleted", "deleted": true}));
    assert_eq!(t.s.raw("GET", &format!("/v1/responses/{id2}"), None).await.status, 404);
    let messages = t.s.raw("GET", &format!("/api/sessions/{sid}/messages"), None).await;
    assert_eq!(messages.body["items"].as_array().unwrap().len(), 4);
    let r = t.respond(json!({"model": t.agent, "input": "x", "previous_response_id": id2})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (404, json!("previous_response_not_found")),
        "{}",
        r.body
    );
    // Deleting the session takes its stored responses along.
    assert_eq!(t.s.raw("DELETE", &format!("/api/sessions/{sid}"), None).await.status, 204);
    assert_eq!(t.s.raw("GET", &format!("/v1/responses/{id1}"), None).await.status, 404);
    assert!(t.s.orphans().await.is_empty(), "{:?}", t.s.orphans().await);
    t.s.stop().await;
}

#[tokio::test]
async fn a_response_in_a_conversation_is_appended_to_it_and_tools_round_trip() {
    let t = setup().await;
    let conv =
        t.s.raw(
            "POST",
            "/v1/conversations",
            Some(&json!({"items": [{"role": "user", "content": "Earlier."}]}).to_string()),
        )
        .await;
    let cid = conv.body["id"].as_str().unwrap().to_owned();
    let tools = json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]);
    let r = t
        .respond(json!({"model": "fake-model", "conversation": cid, "tools": tools,
                        "input": "call lookup {\"q\":\"x\"}", "instructions": "Be terse."}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["conversation"], json!({"id": cid}));
    let call = r.body["output"][0].clone();
    assert_eq!((call["type"].clone(), call["name"].clone()), (json!("function_call"), json!("lookup")));
    assert_eq!(call["arguments"], r#"{"q":"x"}"#);
    // No agent: the instructions are the system message; the conversation's items come before.
    let sent = t.upstream_messages();
    assert_eq!(sent[0], ("system".to_owned(), "Be terse.".to_owned()));
    assert_eq!(sent[1], ("user".to_owned(), "Earlier.".to_owned()));
    assert_eq!(t.upstream_body()["tools"][0]["function"]["name"], "lookup");
    // The call's output, as the next input.
    let r = t
        .respond(json!({"model": "fake-model", "previous_response_id": r.body["id"], "tools": tools,
                        "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "found"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(text_of_output(&r), "the tool answered: found");
    let items = t.s.raw("GET", &format!("/v1/conversations/{cid}/items?order=asc"), None).await;
    let kinds: Vec<&str> =
        items.body["data"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "message", "function_call", "function_call_output", "message"]);
    assert_eq!(items.body["data"][2]["id"], call["id"], "the output item is the conversation's item");
    // The agent answers in the agentless conversation when it is the model.
    let r = t.respond(json!({"model": t.agent, "conversation": {"id": cid}, "input": "hello"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(t.upstream_messages()[0].1.contains("Answer in one line."));
    // Items appended by the client, then a response with no input: the model
    // answers the conversation as it stands, and the turn adds only its answer.
    let r =
        t.s.raw(
            "POST",
            &format!("/v1/conversations/{cid}/items"),
            Some(&json!({"items": [{"role": "user", "content": "And now?"}]}).to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = t.respond(json!({"model": "fake-model", "conversation": cid})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(t.upstream_messages().last().unwrap(), &("user".to_owned(), "And now?".to_owned()));
    let id = r.body["id"].as_str().unwrap();
    let inputs = t.s.raw("GET", &format!("/v1/responses/{id}/input_items"), None).await;
    assert_eq!((inputs.status, inputs.body["data"].clone()), (200, json!([])), "{}", inputs.body);
    let items = t.s.raw("GET", &format!("/v1/conversations/{cid}/items?order=desc&limit=2"), None).await;
    assert_eq!(items.body["data"][0]["role"], "assistant", "{}", items.body);
    assert_eq!(items.body["data"][1]["content"][0]["text"], "And now?", "{}", items.body);
    t.s.stop().await;
}

#[tokio::test]
async fn store_false_and_failed_calls_save_nothing_and_unsupported_features_are_400() {
    let t = setup().await;
    let r = t.respond(json!({"model": t.agent, "input": "hi", "store": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["store"], false);
    assert_eq!(
        t.s.raw("GET", &format!("/v1/responses/{}", r.body["id"].as_str().unwrap()), None).await.status,
        404
    );
    assert_eq!(t.session_count().await, 0, "store: false makes no session");
    t.fake.push(Behaviour::Fail { status: 500, body: "down".into() });
    let r = t.respond(json!({"model": t.agent, "input": "hi"})).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (502, json!("upstream_error")), "{}", r.body);
    assert_eq!(t.session_count().await, 0, "a failed call makes no session");
    for (body, param) in [
        (json!({"model": "m", "input": "x", "background": true, "store": false}), "store"),
        (json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}), "tools[0].type"),
        (json!({"model": "m", "input": [{"type": "reasoning", "summary": []}]}), "input[0].type"),
        (
            json!({"model": "m", "input": "x", "previous_response_id": format!("resp_{}", Uuid::now_v7().simple()),
                   "conversation": Uuid::now_v7()}),
            "conversation",
        ),
    ] {
        let r = t.respond(body.clone()).await;
        assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!(param)), "{body}: {}", r.body);
    }
    let r = t.respond(json!({"model": "m", "input": "x", "tools": [{"type": "function"}]})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("tools[0].name")), "{}", r.body);
    // An id in a response's form (`resp_…`) that names none is a 404 with
    // OpenAI's code; one in no form of an id is a 400.
    for unknown in [format!("resp_{}", Uuid::now_v7().simple()), "resp_from_elsewhere".into()] {
        let r = t.respond(json!({"model": "m", "input": "x", "previous_response_id": unknown})).await;
        assert_eq!(
            (r.status, r.body["error"]["code"].clone(), r.body["error"]["param"].clone()),
            (404, json!("previous_response_not_found"), json!("previous_response_id")),
            "{}",
            r.body
        );
    }
    let r = t.respond(json!({"model": "m", "input": "x", "previous_response_id": "nope"})).await;
    assert_eq!(
        (r.status, r.body["error"]["param"].clone()),
        (400, json!("previous_response_id")),
        "{}",
        r.body
    );
    // No input and nothing to continue: the model would have nothing to answer.
    let r = t.respond(json!({"model": "m"})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("input")), "{}", r.body);
    t.s.stop().await;
}

/// The `(event, data)` pairs of a streamed response.
async fn response_events(t: &Setup, body: Value) -> (u16, Vec<(String, Value)>) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/responses", t.s.base))
        .header("authorization", format!("Bearer {}", t.s.key))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let events = read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await;
    let events = events.iter().map(|e| (e.event.clone().unwrap_or_default(), e.json())).collect();
    (status, events)
}

#[tokio::test]
async fn streamed_responses_are_typed_events_in_order_ending_with_the_stored_response() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("one two three".into()));
    let (status, events) =
        response_events(&t, json!({"model": t.agent, "input": "count", "stream": true})).await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(
        kinds[kinds.len() - 4..],
        [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert!(kinds[4..kinds.len() - 4].iter().all(|k| *k == "response.output_text.delta"), "{kinds:?}");
    for (i, (kind, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], json!(kind));
        assert_eq!(data["sequence_number"], json!(i), "{kind}");
    }
    let deltas: String = events.iter().filter_map(|(_, d)| d["delta"].as_str()).collect();
    assert_eq!(deltas, "one two three");
    let completed = &events.last().unwrap().1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"][0]["content"][0]["text"], "one two three");
    assert_eq!(
        events[2].1["item"]["id"], completed["output"][0]["id"],
        "the streamed item is the stored one"
    );
    let id = completed["id"].as_str().unwrap();
    assert_eq!(events[0].1["response"]["id"], json!(id));
    let stored = t.s.raw("GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(&stored.body, completed);

    // A function call, streamed.
    let tools = json!([{"type": "function", "name": "lookup"}]);
    let (_, events) = response_events(
        &t,
        json!({"model": t.agent, "input": "call lookup {\"a\":1}", "stream": true, "tools": tools, "previous_response_id": id}),
    )
    .await;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert!(kinds.contains(&"response.function_call_arguments.delta"), "{kinds:?}");
    let done = events.iter().find(|(k, _)| k == "response.function_call_arguments.done").unwrap();
    assert_eq!(done.1["arguments"], r#"{"a":1}"#);
    assert_eq!(events.last().unwrap().1["response"]["output"][0]["type"], "function_call");

    // A stream cut by the provider ends with response.failed; nothing is saved.
    let before = t.session_count().await;
    t.fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let (status, events) =
        response_events(&t, json!({"model": t.agent, "input": "cut", "stream": true})).await;
    assert_eq!(status, 200);
    let (kind, data) = events.last().unwrap();
    assert_eq!(kind, "response.failed");
    assert_eq!(data["response"]["status"], "failed");
    assert_eq!(data["response"]["error"]["code"], "upstream_error", "{data}");
    assert_eq!(t.session_count().await, before);
    t.s.stop().await;
}

#[tokio::test]
async fn responses_echo_every_setting_and_send_the_provider_those_it_takes() {
    let t = setup().await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let r = t
        .respond(json!({
            "model": t.agent,
            "input": "Where?",
            "text": {"format": {"type": "json_schema", "name": "place", "schema": schema, "strict": true}, "verbosity": "low"},
            "presence_penalty": 0.5,
            "frequency_penalty": -0.5,
            "top_logprobs": 0,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low"},
            "max_tool_calls": 4,
            "service_tier": "flex",
            "safety_identifier": "user-7",
            "prompt_cache_key": "cache-1",
            "user": "end-user",
            "truncation": "auto",
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}, "strict": true},
                      {"type": "function", "name": "plain"}],
        }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = t.upstream_body();
    assert_eq!(
        sent["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": true}})
    );
    for (field, value) in [
        ("presence_penalty", json!(0.5)),
        ("frequency_penalty", json!(-0.5)),
        ("service_tier", json!("flex")),
        ("safety_identifier", json!("user-7")),
        ("prompt_cache_key", json!("cache-1")),
        ("user", json!("end-user")),
        ("reasoning_effort", json!("low")),
        ("verbosity", json!("low")),
    ] {
        assert_eq!(sent[field], value, "{field} is sent: {sent}");
    }
    let tools = sent["tools"].as_array().unwrap();
    let lookup = tools.iter().find(|t| t["function"]["name"] == "lookup").unwrap();
    assert_eq!(lookup["function"]["strict"], true);
    let plain = tools.iter().find(|t| t["function"]["name"] == "plain").unwrap();
    assert!(plain["function"].get("strict").is_none(), "{plain}");

    let b = &r.body;
    assert_eq!(b["text"]["format"]["type"], "json_schema");
    assert_eq!(b["text"]["verbosity"], "low");
    // The agent's default temperature (0.3); top_p as the provider's default.
    assert_eq!((b["temperature"].clone(), b["top_p"].clone()), (json!(0.3), json!(1.0)));
    assert_eq!((b["presence_penalty"].clone(), b["frequency_penalty"].clone()), (json!(0.5), json!(-0.5)));
    assert_eq!(b["top_logprobs"], 0);
    assert_eq!(b["reasoning"], json!({"effort": "low", "summary": null}));
    assert_eq!(b["max_tool_calls"], 4);
    assert_eq!(b["service_tier"], "flex");
    assert_eq!(b["safety_identifier"], "user-7");
    assert_eq!(b["prompt_cache_key"], "cache-1");
    assert_eq!(b["user"], "end-user");
    assert_eq!(b["truncation"], "auto");
    assert_eq!(b["tools"][0]["strict"], true);
    assert_eq!(b["tools"][1]["strict"], Value::Null, "present, null when not sent: {b}");
    assert!(b["completed_at"].as_i64().unwrap() >= b["created_at"].as_i64().unwrap());
    assert_eq!(b["incomplete_details"], Value::Null);
    let id = b["id"].as_str().unwrap();
    let stored = t.s.raw("GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(&stored.body, b, "a stored response reads back as it was answered");

    // The defaults, on a request that sets none of them.
    let r = t.respond(json!({"model": "fake-model", "input": "hi"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = &r.body;
    assert_eq!(b["text"], json!({"format": {"type": "text"}}));
    for (field, value) in [
        ("temperature", json!(1.0)),
        ("top_p", json!(1.0)),
        ("presence_penalty", json!(0.0)),
        ("frequency_penalty", json!(0.0)),
        ("top_logprobs", json!(0)),
        ("truncation", json!("disabled")),
        ("service_tier", json!("default")),
        ("reasoning", Value::Null),
        ("max_tool_calls", Value::Null),
        ("safety_identifier", Value::Null),
        ("prompt_cache_key", Value::Null),
    ] {
        assert_eq!(b[field], value, "{field}: {b}");
    }
    let sent = t.upstream_body();
    for field in
        ["response_format", "service_tier", "reasoning_effort", "verbosity", "user", "presence_penalty"]
    {
        assert!(sent.get(field).is_none(), "{field} is not sent when not asked: {sent}");
    }

    // What is not supported is a 400 naming it.
    for (body, param) in [
        (
            json!({"model": "fake-model", "input": "x", "include": ["message.output_text.logprobs"]}),
            "include[0]",
        ),
        (json!({"model": "fake-model", "input": "x", "reasoning": {"summary": "auto"}}), "reasoning.summary"),
        (json!({"model": "fake-model", "input": "x", "top_logprobs": 3}), "top_logprobs"),
    ] {
        let r = t.respond(body).await;
        assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!(param)), "{}", r.body);
    }
    let r = t.respond(json!({"model": "fake-model", "input": "x", "max_output_tokens": 15})).await;
    assert_eq!(r.body["error"]["param"], "max_output_tokens", "{}", r.body);
    let r = t
        .respond(json!({"model": "fake-model", "input": "x", "text": {"format": {"type": "json_schema"}}}))
        .await;
    assert!(
        r.body["error"]["message"].as_str().unwrap().contains("a json_schema format has a name"),
        "{}",
        r.body
    );
    let sent = t.fake.requests().len();
    let r = t
        .respond(json!({"model": "fake-model", "input": "x", "text": {"format": {"type": "json_object"}}}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(t.upstream_body()["response_format"], json!({"type": "json_object"}));
    assert_eq!(r.body["text"]["format"], json!({"type": "json_object"}));
    assert_eq!(t.fake.requests().len(), sent + 1);
    t.s.stop().await;
}

#[tokio::test]
async fn an_answer_cut_at_max_output_tokens_is_incomplete_whole_streamed_and_stored() {
    let t = setup().await;
    let long = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen \
                sixteen seventeen eighteen nineteen twenty twenty-one twenty-two";
    let r = t.respond(json!({"model": "fake-model", "input": long, "max_output_tokens": 16})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "incomplete");
    assert_eq!(r.body["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(r.body["completed_at"], Value::Null);
    assert!(text_of_output(&r).len() < long.len(), "cut: {}", r.body);
    let id = r.body["id"].as_str().unwrap();
    let stored = t.s.raw("GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(stored.body, r.body);

    let (status, events) = response_events(
        &t,
        json!({"model": "fake-model", "input": long, "max_output_tokens": 16, "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let (kind, last) = events.last().unwrap();
    assert_eq!(kind, "response.incomplete", "{last}");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(last["response"]["incomplete_details"]["reason"], "max_output_tokens");

    // Within the limit: completed.
    let r = t.respond(json!({"model": "fake-model", "input": "short", "max_output_tokens": 16})).await;
    assert_eq!(
        (r.body["status"].clone(), r.body["incomplete_details"].clone()),
        (json!("completed"), Value::Null)
    );
    t.s.stop().await;
}

// ---------------------------------------------------------------- a Rust OpenAI client

/// async-openai, a well-kept Rust client of OpenAI's API (strict about shapes:
/// it deserialises every answer into its own types), against the live server.
#[tokio::test]
async fn async_openai_drives_models_chat_completions_conversations_and_responses() {
    use async_openai::Client;
    use async_openai::config::OpenAIConfig;
    use async_openai::types::Metadata;
    use async_openai::types::chat::{
        ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessageArgs,
        ChatCompletionRequestMessage, ChatCompletionRequestToolMessageArgs,
        ChatCompletionRequestUserMessageArgs, ChatCompletionStreamOptions, CreateChatCompletionRequestArgs,
        FinishReason,
    };
    use async_openai::types::responses::{
        ConversationItem, CreateConversationItemsRequestArgs, CreateConversationRequestArgs,
        CreateResponseArgs, EasyInputContent, EasyInputMessage, InputItem, InputParam, MessageType,
        OutputItem, ResponseStreamEvent, Role, Tool, UpdateConversationRequestArgs,
    };
    use futures::StreamExt;

    let t = setup().await;
    let config = OpenAIConfig::new().with_api_base(format!("{}/v1", t.s.base)).with_api_key(t.s.key.clone());
    let client = Client::with_config(config);
    let agent = t.agent.to_string();

    let models = client.models().list().await.unwrap();
    assert_eq!(models.data[0].id, agent);
    assert_eq!(models.data[0].owned_by, "agent-platform");

    let user = |text: &str| -> ChatCompletionRequestMessage {
        ChatCompletionRequestUserMessageArgs::default().content(text).build().unwrap().into()
    };
    let request = CreateChatCompletionRequestArgs::default()
        .model(&agent)
        .messages([user("hello from rust")])
        .build()
        .unwrap();
    let answer = client.chat().create(request).await.unwrap();
    assert_eq!(answer.choices[0].message.content.as_deref(), Some("hello from rust"));
    assert_eq!(answer.choices[0].finish_reason, Some(FinishReason::Stop));

    let request = CreateChatCompletionRequestArgs::default()
        .model(&agent)
        .messages([user("one two three")])
        .stream(true)
        .stream_options(ChatCompletionStreamOptions { include_usage: Some(true), include_obfuscation: None })
        .build()
        .unwrap();
    let mut stream = client.chat().create_stream(request).await.unwrap();
    let (mut text, mut usage) = (String::new(), None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        text.extend(chunk.choices.iter().filter_map(|c| c.delta.content.clone()));
        usage = usage.or(chunk.usage);
    }
    assert_eq!(text, "one two three");
    assert!(usage.unwrap().total_tokens > 0);

    // A function-tool round trip on the agent's tool (the fake calls it when asked to).
    let ask = user(r#"call get_weather {"city":"Rome"}"#);
    let request =
        CreateChatCompletionRequestArgs::default().model(&agent).messages([ask.clone()]).build().unwrap();
    let called = client.chat().create(request).await.unwrap();
    assert_eq!(called.choices[0].finish_reason, Some(FinishReason::ToolCalls));
    let calls = called.choices[0].message.tool_calls.clone().unwrap();
    let ChatCompletionMessageToolCalls::Function(call) = &calls[0] else { panic!("{calls:?}") };
    assert_eq!(
        (call.function.name.as_str(), call.function.arguments.as_str()),
        ("get_weather", r#"{"city":"Rome"}"#)
    );
    let messages: Vec<ChatCompletionRequestMessage> = vec![
        ask,
        ChatCompletionRequestAssistantMessageArgs::default()
            .tool_calls(calls.clone())
            .build()
            .unwrap()
            .into(),
        ChatCompletionRequestToolMessageArgs::default()
            .tool_call_id(&call.id)
            .content("warm")
            .build()
            .unwrap()
            .into(),
    ];
    let request =
        CreateChatCompletionRequestArgs::default().model(&agent).messages(messages).build().unwrap();
    let last = client.chat().create(request).await.unwrap();
    assert_eq!(last.choices[0].message.content.as_deref(), Some("the tool answered: warm"));

    // Conversations.
    let message = |role: Role, text: &str| -> InputItem {
        EasyInputMessage {
            r#type: MessageType::Message,
            role,
            content: EasyInputContent::Text(text.into()),
            phase: None,
        }
        .into()
    };
    let request = CreateConversationRequestArgs::default()
        .metadata(Metadata::from(json!({"topic": "rust"})))
        .items(vec![message(Role::Developer, "Be brief."), message(Role::User, "Hi")])
        .build()
        .unwrap();
    let conv = client.conversations().create(request).await.unwrap();
    assert_eq!(conv.object, "conversation");
    let session = t.s.raw("GET", &format!("/api/sessions/{}", session_of(&conv.id)), None).await;
    assert_eq!(session.status, 200, "{}", session.body);
    let request = CreateConversationItemsRequestArgs::default()
        .items(vec![message(Role::Assistant, "Hello")])
        .build()
        .unwrap();
    let added = client.conversations().items(&conv.id).create(request).await.unwrap();
    assert_eq!(added.data.len(), 1);
    let items = client.conversations().items(&conv.id).list().await.unwrap();
    assert_eq!(items.data.len(), 3);
    let ConversationItem::Message(newest) = &items.data[0] else { panic!("{:?}", items.data[0]) };
    let item = client.conversations().items(&conv.id).retrieve(&newest.id).await.unwrap();
    assert_eq!(item, items.data[0]);
    let request = UpdateConversationRequestArgs::default()
        .metadata(Metadata::from(json!({"topic": "done"})))
        .build()
        .unwrap();
    let updated = client.conversations().update(&conv.id, request).await.unwrap();
    assert_eq!(updated.metadata, Metadata::from(json!({"topic": "done"})));
    let deleted = client.conversations().delete(&conv.id).await.unwrap();
    assert!(deleted.deleted);
    let err = client.conversations().retrieve(&conv.id).await.unwrap_err();
    assert!(format!("{err:?}").contains("not_found"), "{err:?}");

    // Responses: three turns chained by previous_response_id.
    let mut previous: Option<String> = None;
    for text in ["My name is Ann.", "What is my name?", "Bye."] {
        let mut request = CreateResponseArgs::default();
        request.model(&agent).input(InputParam::Text(text.into()));
        if let Some(p) = &previous {
            request.previous_response_id(p);
        }
        let response = client.responses().create(request.build().unwrap()).await.unwrap();
        assert_eq!(response.output_text().as_deref(), Some(text));
        assert_eq!(response.previous_response_id, previous);
        previous = Some(response.id);
    }
    let last = previous.unwrap();
    let stored = client.responses().retrieve(&last).await.unwrap();
    assert_eq!(stored.output_text().as_deref(), Some("Bye."));
    let sent = t.upstream_messages();
    assert_eq!(sent.len(), 1 + 5, "the system message, two turns, the new input: {sent:?}");

    // A function tool, called and answered.
    let tool: Tool = serde_json::from_value(json!({
        "type": "function", "name": "get_time", "description": "The time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }))
    .unwrap();
    let request = CreateResponseArgs::default()
        .model("any-model")
        .tools(vec![tool.clone()])
        .input(InputParam::Text(r#"call get_time {"city":"Lima"}"#.into()))
        .build()
        .unwrap();
    let called = client.responses().create(request).await.unwrap();
    let OutputItem::FunctionCall(call) = &called.output[0] else { panic!("{:?}", called.output) };
    assert_eq!((call.name.as_str(), call.arguments.as_str()), ("get_time", r#"{"city":"Lima"}"#));
    let output: InputItem = serde_json::from_value(
        json!({"type": "function_call_output", "call_id": call.call_id, "output": "noon"}),
    )
    .unwrap();
    let request = CreateResponseArgs::default()
        .model("any-model")
        .tools(vec![tool])
        .previous_response_id(&called.id)
        .input(InputParam::Items(vec![output]))
        .build()
        .unwrap();
    let answered = client.responses().create(request).await.unwrap();
    assert_eq!(answered.output_text().as_deref(), Some("the tool answered: noon"));

    // Streamed: typed events, numbered, the last the completed response.
    let request = CreateResponseArgs::default()
        .model(&agent)
        .input(InputParam::Text("four five six".into()))
        .build()
        .unwrap();
    let mut events = client.responses().create_stream(request).await.unwrap();
    let (mut deltas, mut completed, mut count) = (String::new(), None, 0);
    while let Some(event) = events.next().await {
        match event.unwrap() {
            ResponseStreamEvent::ResponseOutputTextDelta(e) => deltas.push_str(&e.delta),
            ResponseStreamEvent::ResponseCompleted(e) => completed = Some(e.response),
            _ => {}
        }
        count += 1;
    }
    assert_eq!(deltas, "four five six");
    let completed = completed.expect("a response.completed event");
    assert_eq!(completed.output_text().as_deref(), Some("four five six"));
    assert!(count >= 9, "{count} events");
    let deleted = client.responses().delete(&completed.id).await.unwrap();
    assert!(deleted.deleted);
    t.s.stop().await;
}

// ---------------------------------------------------------------- compaction

#[tokio::test]
async fn a_function_call_output_that_answers_no_call_of_the_conversation_is_400_naming_it() {
    let t = setup().await;
    let first = t.respond(json!({"model": "fake-model", "input": "hello"})).await;
    let id = first.body["id"].as_str().unwrap();
    let stray = json!([{"type": "function_call_output", "call_id": "call_missing", "output": "?"}]);
    let r = t.respond(json!({"model": "fake-model", "input": stray, "previous_response_id": id})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().starts_with("input[0].call_id: "), "{}", r.body);
    // A call and its output in one input answer each other.
    let both = json!([
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "found"},
    ]);
    let r = t.respond(json!({"model": "fake-model", "input": both, "previous_response_id": id})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    t.s.stop().await;
}

#[tokio::test]
async fn compact_answers_the_user_messages_then_a_compaction_that_continues_a_new_chain() {
    let t = setup().await;
    let window = json!([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "The code word is slate."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "OK."}]},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":\"slate\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a grey rock"},
        {"role": "user", "content": "Compress this."},
    ]);
    t.fake.push(Behaviour::Text("The code word is slate, a grey rock.".into()));
    let r =
        t.s.raw(
            "POST",
            "/v1/responses/compact",
            Some(
                &json!({"model": "fake-model", "input": window, "instructions": "Keep the code word."})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["object"], "response.compaction");
    assert!(r.body["id"].as_str().unwrap().starts_with("resp_"), "{}", r.body);
    assert!(r.body["usage"]["total_tokens"].as_i64().unwrap() > 0, "{}", r.body);
    let output = r.body["output"].as_array().unwrap().clone();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["message", "message", "compaction"], "the user messages, then the compaction");
    assert_eq!(output[0]["content"][0], json!({"type": "input_text", "text": "The code word is slate."}));
    assert_eq!(output[1]["role"], "user");
    assert!(output[2]["id"].as_str().unwrap().starts_with("cmp_"), "{}", output[2]);
    assert!(output[2]["encrypted_content"].as_str().unwrap().starts_with("apc1."), "{}", output[2]);
    // The model was asked for the summary of the whole window, tool calls included.
    let sent = t.upstream_messages();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[0].1.contains("context checkpoint compaction") && sent[0].1.ends_with("Keep the code word.")
    );
    for part in ["The code word is slate.", "OK.", "calls lookup with {\"q\":\"slate\"}", "a grey rock"] {
        assert!(sent[1].1.contains(part), "{part:?} missing from the transcript {:?}", sent[1].1);
    }
    // A new chain from the compacted window: the summary is a system message, nothing else of it is sent.
    let mut input = output.clone();
    input.push(json!({"type": "message", "role": "user", "content": "What is the code word?"}));
    let r = t.respond(json!({"model": "fake-model", "input": input, "tools": []})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        t.upstream_messages(),
        [
            ("user", "The code word is slate."),
            ("user", "Compress this."),
            (
                "system",
                "Summary of the earlier conversation (compacted): The code word is slate, a grey rock."
            ),
            ("user", "What is the code word?"),
        ]
        .map(|(r, c)| (r.to_owned(), c.to_owned()))
    );
    // Stored, the compaction is the session's system message.
    let id = r.body["id"].as_str().unwrap();
    let items = t.s.raw("GET", &format!("/v1/responses/{id}/input_items?order=asc"), None).await;
    assert_eq!(items.body["data"][2]["role"], "system", "{}", items.body);
    t.s.stop().await;
}

#[tokio::test]
async fn compact_takes_a_stored_responses_conversation_through_its_answer() {
    let t = setup().await;
    let first = t.respond(json!({"model": "fake-model", "input": "One."})).await;
    let id1 = first.body["id"].as_str().unwrap().to_owned();
    let second =
        t.respond(json!({"model": "fake-model", "input": "Two.", "previous_response_id": id1})).await;
    assert_eq!(second.status, 200, "{}", second.body);
    // Through the generated client; from the first response: its turn, not the second's.
    let body = types::CompactResponseRequest::builder()
        .model(Some(types::CompactResponseRequestModel::try_from(t.agent.to_string()).unwrap()))
        .previous_response_id(Some(id1.parse().unwrap()))
        .input(Some(types::ResponseInput::String("Three.".into())));
    t.fake.push(Behaviour::Text("summary".into()));
    let compacted = t.s.client.openai_response_compact().response_id("compact").body(body).send().await;
    let compacted = compacted.unwrap().into_inner();
    let texts: Vec<String> = compacted
        .output
        .iter()
        .filter_map(|i| match i {
            types::CompactedItem::Message { content, .. } => match &content[0] {
                types::ItemContent::InputText { text } => Some(text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["One.", "Three."]);
    let transcript = &t.upstream_messages()[1].1;
    assert!(transcript.contains("assistant: One.") && !transcript.contains("Two."), "{transcript:?}");
    t.s.stop().await;
}

#[tokio::test]
async fn compact_refuses_what_it_cannot_compact_in_openais_error_shape() {
    let t = setup().await;
    let s = &t.s;
    let compact =
        |body: Value| async move { s.raw("POST", "/v1/responses/compact", Some(&body.to_string())).await };
    let r = compact(json!({"input": "x"})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("model")), "{}", r.body);
    assert_eq!(r.body["error"]["type"], "invalid_request_error");
    let r = compact(json!({"model": "fake-model"})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("input")), "{}", r.body);
    let missing = format!("resp_{}", Uuid::now_v7().simple());
    let r = compact(json!({"model": "fake-model", "previous_response_id": missing})).await;
    assert_eq!(
        (r.status, r.body["error"]["code"].clone()),
        (404, json!("previous_response_not_found")),
        "{}",
        r.body
    );
    let r = compact(json!({"model": "fake-model", "input": [{"type": "reasoning"}]})).await;
    assert_eq!((r.status, r.body["error"]["param"].clone()), (400, json!("input[0].type")), "{}", r.body);
    // The route's one id is `compact`.
    let r =
        t.s.raw("POST", "/v1/responses/resp_1", Some(&json!({"model": "m", "input": "x"}).to_string())).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (404, json!("not_found")), "{}", r.body);
    // A compaction item that was altered is refused, naming it.
    let forged = json!([{"type": "compaction", "encrypted_content": "apc1.eyJ9.00"}, {"role": "user", "content": "x"}]);
    let r = t.respond(json!({"model": "fake-model", "input": forged})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.body["error"]["message"].as_str().unwrap().starts_with("input[0].encrypted_content: "),
        "{}",
        r.body
    );
    let r = t.respond(json!({"model": "fake-model", "input": [{"type": "compaction"}]})).await;
    assert_eq!(
        (r.status, r.body["error"]["param"].clone()),
        (400, json!("input[0].encrypted_content")),
        "{}",
        r.body
    );
    assert_eq!(t.session_count().await, 0, "nothing was saved");
    t.s.stop().await;
}
