//! OpenAI wire compatibility beyond text, against a live server and the fake
//! provider: image and file content parts (sent to the provider as given,
//! bounded, kept with the message and sent again as a chain goes on), the
//! model list asked of each provider and the model lookup, embeddings, and
//! chat completions carrying every field OpenAI's have.

use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::{Behaviour, EMBEDDING_DIM, FakeUpstream, embedding_for};
use agent_platform::models::{ModelsConfig, ProviderConfig};
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{Raw, TestServer, fake_models, types};
use base64::Engine;
use serde_json::{Value, json};

/// A small PNG, as a data URL.
const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
/// A text file, as a data URL.
const NOTES: &str = "data:text/plain;base64,bWVldCBhdCBub29u";
const CAT: &str = "https://example.com/cat.png";

async fn server(fake: &FakeUpstream) -> TestServer {
    TestServer::with_models(fake_models(fake, 5.0)).await
}

async fn post(s: &TestServer, path: &str, body: Value) -> Raw {
    s.raw("POST", path, Some(&body.to_string())).await
}

/// The text of a response's message items.
fn output_text(r: &Raw) -> String {
    agent_platform_tests::output_text(&r.body)
}

/// Asserts a 400 in OpenAI's shape naming `param`.
fn assert_400(r: &Raw, param: &str) {
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["type"], "invalid_request_error", "{}", r.body);
    assert_eq!(r.body["error"]["param"], param, "{}", r.body);
}

/// The messages the fake received last.
fn upstream_messages(fake: &FakeUpstream) -> Vec<Value> {
    fake.last_request().expect("a request upstream").body["messages"].as_array().unwrap().clone()
}

async fn session_count(s: &TestServer) -> usize {
    s.raw("GET", "/api/sessions?limit=1000", None).await.body["items"].as_array().unwrap().len()
}

/// A user message of text, two images (a data URL; an https URL at low
/// detail) and a file, as a response's input item.
fn user_item_with_media() -> Value {
    json!({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": PNG},
        {"type": "input_image", "image_url": CAT, "detail": "low"},
        {"type": "input_file", "filename": "notes.txt", "file_data": NOTES},
    ]})
}

/// That message as the provider is sent it.
fn user_item_on_the_wire() -> Value {
    json!({"role": "user", "content": [
        {"type": "text", "text": "What is in these?"},
        {"type": "image_url", "image_url": {"url": PNG}},
        {"type": "image_url", "image_url": {"url": CAT, "detail": "low"}},
        {"type": "file", "file": {"file_data": NOTES, "filename": "notes.txt"}},
    ]})
}

/// What the fake's echo of that message says (each part described in its place).
fn echo_of_user_item() -> String {
    let head = PNG.split_once(',').unwrap().0;
    format!(
        "What is in these? [image_url: {head}, {} bytes] [image_url: {CAT}, detail low] [file: notes.txt, {} bytes]",
        PNG.len(),
        NOTES.len()
    )
}

// ---------------------------------------------------------------- content parts

#[tokio::test]
async fn image_and_file_parts_reach_the_model_and_go_again_when_the_chain_continues() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let first =
        post(&s, "/v1/responses", json!({"model": "fake-model", "input": [user_item_with_media()]})).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body["status"], "completed");
    assert_eq!(output_text(&first), echo_of_user_item(), "the model saw every part");
    assert_eq!(upstream_messages(&fake), vec![user_item_on_the_wire()]);

    // The input items show the parts as given (an image's detail `auto` when none was).
    let id = first.body["id"].as_str().unwrap().to_owned();
    let items =
        s.client.openai_response_input_items().response_id(id.as_str()).send().await.unwrap().into_inner();
    assert_eq!(items.data.len(), 1);
    let types::ConversationItem::Message { content, role, .. } = &items.data[0] else {
        panic!("{:?}", items.data[0])
    };
    assert_eq!(role, "user");
    assert_eq!(
        serde_json::to_value(content).unwrap(),
        json!([
            {"type": "input_text", "text": "What is in these?"},
            {"type": "input_image", "image_url": PNG, "detail": "auto"},
            {"type": "input_image", "image_url": CAT, "detail": "low"},
            {"type": "input_file", "filename": "notes.txt", "file_data": NOTES},
        ])
    );

    // The chain goes on: the stored message goes to the model again, parts and all.
    let second = post(
        &s,
        "/v1/responses",
        json!({"model": "fake-model", "input": "And the cat?", "previous_response_id": id}),
    )
    .await;
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(output_text(&second), "And the cat?");
    let sent = upstream_messages(&fake);
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0], user_item_on_the_wire());
    assert_eq!(sent[1], json!({"role": "assistant", "content": echo_of_user_item()}));
    assert_eq!(sent[2], json!({"role": "user", "content": "And the cat?"}));

    // On /api the message's content is its text; its parts are all there, in order.
    let sessions = s.raw("GET", "/api/sessions", None).await;
    let session: uuid::Uuid = sessions.body["items"][0]["id"].as_str().unwrap().parse().unwrap();
    let messages = s.client.message_list().id(session).send().await.unwrap().into_inner();
    let m = &messages.items[0];
    assert_eq!(m.content, "What is in these?");
    assert_eq!(
        serde_json::to_value(&m.parts).unwrap(),
        json!([
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": PNG}},
            {"type": "image_url", "image_url": {"url": CAT, "detail": "low"}},
            {"type": "file", "file": {"file_data": NOTES, "filename": "notes.txt"}},
        ])
    );
    // An image counts 765 tokens (85 at low detail), a file 1,024.
    assert!(m.token_count > 765 + 85 + 1024, "{}", m.token_count);
    assert_eq!(messages.items[1].parts, None, "a message of text alone has no parts");
    s.stop().await;
}

#[tokio::test]
async fn a_conversations_items_keep_their_images_for_the_responses_appended_to_it() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let created = post(&s, "/v1/conversations", json!({"items": [user_item_with_media()]})).await;
    assert_eq!(created.status, 200, "{}", created.body);
    let conversation = created.body["id"].as_str().unwrap().to_owned();
    let items = s
        .client
        .openai_item_list()
        .conversation_id(conversation.parse::<agent_platform_tests::types::ConvId>().unwrap())
        .send()
        .await
        .unwrap()
        .into_inner();
    let item = serde_json::to_value(&items.data[0]).unwrap();
    assert_eq!(item["content"][1], json!({"type": "input_image", "image_url": PNG, "detail": "auto"}));
    assert_eq!(item["content"][3]["type"], "input_file");

    let more = json!({"items": [{"role": "user", "content": [
        {"type": "input_image", "image_url": CAT, "detail": "high"}]}]});
    let appended = post(&s, &format!("/v1/conversations/{conversation}/items"), more).await;
    assert_eq!(appended.status, 200, "{}", appended.body);
    assert_eq!(
        appended.body["data"][0]["content"],
        json!([{"type": "input_image", "image_url": CAT, "detail": "high"}])
    );

    let r = post(
        &s,
        "/v1/responses",
        json!({"model": "fake-model", "conversation": conversation, "input": "Describe them."}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = upstream_messages(&fake);
    assert_eq!(sent[0], user_item_on_the_wire());
    assert_eq!(
        sent[1],
        json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": CAT, "detail": "high"}}]})
    );
    assert_eq!(sent[2], json!({"role": "user", "content": "Describe them."}));
    s.stop().await;
}

#[tokio::test]
async fn chat_completion_image_and_file_parts_go_to_the_provider_as_given() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let content = json!([
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": CAT, "detail": "high"}},
        {"type": "file", "file": {"file_data": NOTES, "filename": "notes.txt"}},
        {"type": "text", "text": "please."},
    ]);
    let r = post(
        &s,
        "/v1/chat/completions",
        json!({"model": "fake-model", "messages": [{"role": "user", "content": content}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        format!("Compare [image_url: {CAT}, detail high] [file: notes.txt, {} bytes] please.", NOTES.len())
    );
    assert_eq!(upstream_messages(&fake), vec![json!({"role": "user", "content": content})]);
    s.stop().await;
}

#[tokio::test]
async fn parts_a_provider_cannot_be_given_are_400s_naming_them_and_save_nothing() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let respond = |input: Value| json!({"model": "fake-model", "input": input});
    let message = |role: &str, part: Value| json!([{"type": "message", "role": role, "content": [part]}]);
    let cases = [
        (
            respond(message("assistant", json!({"type": "input_image", "image_url": CAT}))),
            "input[0].content[0].type",
        ),
        (
            respond(message("user", json!({"type": "input_file", "file_id": "file-1"}))),
            "input[0].content[0].file_id",
        ),
        (
            respond(message("user", json!({"type": "input_file", "file_url": "https://example.com/a.pdf"}))),
            "input[0].content[0].file_url",
        ),
        (
            respond(message("user", json!({"type": "input_image", "image_url": "ftp://example.com/a.png"}))),
            "input[0].content[0].image_url",
        ),
        (
            respond(message("user", json!({"type": "input_audio", "input_audio": {"data": "AAAA"}}))),
            "input[0].content[0].type",
        ),
        (
            respond(json!([
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1",
                 "output": [{"type": "input_image", "image_url": CAT}]},
            ])),
            "input[1].output[0].type",
        ),
    ];
    for (body, param) in cases {
        assert_400(&post(&s, "/v1/responses", body).await, param);
    }
    let bad_item =
        json!({"items": [{"role": "system", "content": [{"type": "input_image", "image_url": CAT}]}]});
    assert_400(&post(&s, "/v1/conversations", bad_item).await, "items[0].content[0].type");

    let complete = |role: &str, part: Value| json!({"model": "fake-model", "messages": [{"role": role, "content": [part]}]});
    let cases = [
        (
            complete("system", json!({"type": "image_url", "image_url": {"url": CAT}})),
            "messages[0].content[0].type",
        ),
        (
            complete("user", json!({"type": "file", "file": {"file_id": "file-1"}})),
            "messages[0].content[0].file.file_id",
        ),
        (
            complete("user", json!({"type": "image_url", "image_url": {"url": "/etc/passwd"}})),
            "messages[0].content[0].image_url.url",
        ),
        (complete("user", json!({"type": "input_audio", "input_audio": {}})), "messages[0].content[0].type"),
    ];
    for (body, param) in cases {
        assert_400(&post(&s, "/v1/chat/completions", body).await, param);
    }
    assert_eq!(fake.requests().len(), 0, "the provider was asked nothing");
    assert_eq!(session_count(&s).await, 0, "nothing was saved");
    s.stop().await;
}

#[tokio::test]
async fn an_image_or_file_over_max_input_part_bytes_is_a_400_naming_it() {
    let fake = FakeUpstream::start().await;
    let s = TestServer::with_config(|cfg| {
        cfg.models = ModelsConfig { max_input_part_bytes: Some(64), ..fake_models(&fake, 5.0) };
    })
    .await;
    assert!(PNG.len() > 64 && NOTES.len() <= 64);
    let r =
        post(&s, "/v1/responses", json!({"model": "fake-model", "input": [user_item_with_media()]})).await;
    assert_400(&r, "input[0].content[1].image_url");
    let message = r.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{} bytes", PNG.len())) && message.contains("models.max_input_part_bytes"),
        "{message}"
    );

    let big_file = format!("data:text/plain;base64,{}", "QUFB".repeat(20));
    let file_item = json!([{"role": "user", "content": [{"type": "input_file", "file_data": big_file}]}]);
    assert_400(
        &post(&s, "/v1/responses", json!({"model": "fake-model", "input": file_item})).await,
        "input[0].content[0].file_data",
    );
    let items = json!({"items": [{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}]});
    assert_400(&post(&s, "/v1/conversations", items).await, "items[0].content[0].image_url");
    let chat = json!({"model": "fake-model", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": PNG}}]}]});
    assert_400(&post(&s, "/v1/chat/completions", chat).await, "messages[0].content[1].image_url.url");

    // Within the bound: answered.
    let small = json!([{"role": "user", "content": [{"type": "input_file", "file_data": NOTES}]}]);
    let r = post(&s, "/v1/responses", json!({"model": "fake-model", "input": small, "store": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(fake.requests().len(), 1, "only the request within the bound reached the provider");
    assert_eq!(session_count(&s).await, 0, "nothing was saved");
    s.stop().await;
}

// ---------------------------------------------------------------- models

fn provider(name: &str, fake: &FakeUpstream, models: &[&str]) -> ProviderConfig {
    ProviderConfig {
        name: name.into(),
        base_url: fake.base_url(),
        api_key_env: None,
        models: models.iter().map(|m| (*m).to_owned()).collect(),
    }
}

fn model_list_requests(fake: &FakeUpstream) -> usize {
    fake.requests().iter().filter(|r| r.method == "GET" && r.path == "/v1/models").count()
}

#[tokio::test]
async fn the_model_list_asks_each_provider_once_a_while_and_a_provider_down_keeps_its_names() {
    let (a, b, c) = (FakeUpstream::start().await, FakeUpstream::start().await, FakeUpstream::start().await);
    a.set_models(&["small-model", "listed-model"]);
    b.push_models(Behaviour::Fail { status: 500, body: r#"{"error": "down"}"#.into() });
    c.push_models(Behaviour::Hang(Duration::from_secs(30)));
    let models = ModelsConfig {
        providers: vec![
            provider("a", &a, &["small-model"]),
            provider("b", &b, &["b-model"]),
            provider("c", &c, &["c-model"]),
        ],
        list_timeout_s: Some(0.5),
        ..ModelsConfig::default()
    };
    let s = TestServer::with_models(models).await;
    let agent = s.create_agent("Ada").await;
    let started = Instant::now();
    let list = s.client.openai_model_list().send().await.unwrap().into_inner();
    assert!(started.elapsed() < Duration::from_secs(4), "a provider that hangs is waited for 0.5 s");
    let got: Vec<(String, String)> = list.data.iter().map(|m| (m.id.clone(), m.owned_by.clone())).collect();
    let expected: Vec<(String, String)> = [
        (agent.id.to_string().as_str(), "agent-platform"),
        ("small-model", "a"),
        ("listed-model", "a"),
        ("b-model", "b"),
        ("c-model", "c"),
    ]
    .iter()
    .map(|(id, owner)| ((*id).to_owned(), (*owner).to_owned()))
    .collect();
    assert_eq!(got, expected, "agents, then each provider's configured names and its own list, each once");
    assert_eq!(list.data[2].created, 1_700_000_000, "a listed model keeps its provider's `created`");

    // Kept: the providers are not asked again (nor the failed ones, so soon).
    let again = s.client.openai_model_list().send().await.unwrap().into_inner();
    assert_eq!(again.data.len(), 5);
    assert_eq!((model_list_requests(&a), model_list_requests(&b), model_list_requests(&c)), (1, 1, 1));

    // One model: an agent, a configured name, a listed name; else a 404 in OpenAI's shape.
    let m = s.client.openai_model_get().model(agent.id.to_string()).send().await.unwrap().into_inner();
    assert_eq!(
        (m.id.as_str(), m.object.as_str(), m.owned_by.as_str()),
        (agent.id.to_string().as_str(), "model", "agent-platform")
    );
    assert_eq!(m.created, agent.created_at.timestamp());
    let m = s.client.openai_model_get().model("listed-model").send().await.unwrap().into_inner();
    assert_eq!((m.owned_by.as_str(), m.created), ("a", 1_700_000_000));
    let m = s.client.openai_model_get().model("c-model").send().await.unwrap().into_inner();
    assert_eq!((m.owned_by.as_str(), m.created), ("c", 0));
    for unknown in ["no-such-model".to_owned(), uuid::Uuid::now_v7().to_string()] {
        let r = s.raw("GET", &format!("/v1/models/{unknown}"), None).await;
        assert_eq!(r.status, 404, "{}", r.body);
        assert_eq!(r.body["error"]["type"], "invalid_request_error", "{}", r.body);
        assert!(r.body["error"]["message"].as_str().unwrap().contains(&unknown), "{}", r.body);
    }
    // Another tenant's agent is no model of this one.
    let theirs = s.other_tenant().await;
    let r = theirs.openai_model_get().model(agent.id.to_string()).send().await;
    assert_eq!(r.unwrap_err().status().map(|s| s.as_u16()), Some(404));
    s.stop().await;
}

// ---------------------------------------------------------------- embeddings

fn floats(e: &types::Embedding) -> Vec<f32> {
    match &e.embedding {
        types::EmbeddingVector::Array(v) => v.clone(),
        types::EmbeddingVector::String(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
    }
}

#[tokio::test]
async fn embeddings_come_from_the_provider_in_openais_shape() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let one = types::EmbeddingRequest::builder()
        .model("embedder")
        .input(types::EmbeddingInput::String("hello world".into()));
    let r = s.client.openai_embedding_create().body(one).send().await.unwrap().into_inner();
    assert_eq!((r.object.as_str(), r.model.as_str(), r.data.len()), ("list", "embedder", 1));
    assert_eq!((r.data[0].object.as_str(), r.data[0].index), ("embedding", 0));
    assert_eq!(floats(&r.data[0]), embedding_for("hello world"));
    assert!(r.usage.prompt_tokens > 0 && r.usage.total_tokens == r.usage.prompt_tokens, "{:?}", r.usage);

    // A list, in base64: the same vectors, in input order.
    let texts = ["otters eat fish", "sea otters use stones", "fish"];
    let list = types::EmbeddingRequest::builder()
        .model("embedder")
        .encoding_format(Some(types::EncodingFormat::Base64))
        .input(types::EmbeddingInput::Array(
            texts.iter().map(|t| types::EmbeddingInputItem::String((*t).into())).collect(),
        ));
    let r = s.client.openai_embedding_create().body(list).send().await.unwrap().into_inner();
    assert!(matches!(r.data[0].embedding, types::EmbeddingVector::String(_)));
    for (i, text) in texts.iter().enumerate() {
        assert_eq!(r.data[i].index, i as i64);
        assert_eq!(floats(&r.data[i]), embedding_for(text));
    }
    let sent = fake.last_request().unwrap();
    assert_eq!((sent.path.as_str(), sent.body["input"].clone()), ("/v1/embeddings", json!(texts)));

    // `dimensions`: sent; answered when the provider shortens its vectors, else a 400.
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": "hello", "dimensions": 8})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["data"][0]["embedding"].as_array().unwrap().len(), 8);
    assert_eq!(fake.last_request().unwrap().body["dimensions"], 8);
    let too_many = EMBEDDING_DIM + 1;
    let r =
        post(&s, "/v1/embeddings", json!({"model": "embedder", "input": "hello", "dimensions": too_many}))
            .await;
    assert_400(&r, "dimensions");

    // Token ids, empty text, too many inputs: refused, naming `input`.
    let requests_before = fake.requests().len();
    assert_400(
        &post(&s, "/v1/embeddings", json!({"model": "embedder", "input": [[1, 2, 3]]})).await,
        "input",
    );
    assert_400(
        &post(&s, "/v1/embeddings", json!({"model": "embedder", "input": [15339, 1917]})).await,
        "input",
    );
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": ["a", ""]})).await;
    assert_eq!((r.body["error"]["param"].clone(), r.status / 100), (json!("input[1]"), 4), "{}", r.body);
    let many: Vec<&str> = vec!["word"; 2049];
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": many})).await;
    assert_eq!((r.body["error"]["param"].clone(), r.status / 100), (json!("input"), 4), "{}", r.body);
    let big = "word ".repeat(220_000);
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": [big]})).await;
    assert_eq!(r.status / 100, 4, "{}", r.body);
    assert_eq!(fake.requests().len(), requests_before, "none of those reached the provider");

    // A failing provider: 502 in OpenAI's shape.
    fake.push_embeddings(Behaviour::Fail { status: 500, body: r#"{"error": {"message": "boom"}}"#.into() });
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": "hello"})).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (502, json!("upstream_error")), "{}", r.body);
    s.stop().await;

    // No provider at all: 503 `no_model_provider`.
    let s = TestServer::start().await;
    let r = post(&s, "/v1/embeddings", json!({"model": "embedder", "input": "hello"})).await;
    assert_eq!((r.status, r.body["error"]["code"].clone()), (503, json!("no_model_provider")), "{}", r.body);
    assert_eq!(r.body["error"]["type"], "server_error");
    s.stop().await;
}

// ---------------------------------------------------------------- chat completions to OpenAI's standard

#[tokio::test]
async fn a_completion_carries_every_field_of_openais_even_when_the_provider_gives_none() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    fake.push(Behaviour::Text("plain".into()));
    let r = post(
        &s,
        "/v1/chat/completions",
        json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = &r.body;
    assert_eq!(
        (b["system_fingerprint"].clone(), b["service_tier"].clone()),
        (Value::Null, Value::Null),
        "{b}"
    );
    let choice = &b["choices"][0];
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": "plain", "refusal": null, "annotations": []})
    );
    assert_eq!((choice["finish_reason"].clone(), choice["logprobs"].clone()), (json!("stop"), Value::Null));
    assert_eq!(b["usage"]["prompt_tokens_details"], json!({"cached_tokens": 0, "audio_tokens": 0}));
    assert_eq!(
        b["usage"]["completion_tokens_details"],
        json!({"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0})
    );
    s.stop().await;
}

#[tokio::test]
async fn a_completion_passes_on_what_the_provider_said_and_the_parameters_it_takes() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let logprobs = json!({"content": [{"token": "I", "logprob": -0.1, "bytes": [73], "top_logprobs": []}], "refusal": null});
    let annotations = json!([{"type": "url_citation",
                              "url_citation": {"start_index": 0, "end_index": 1, "title": "t", "url": "https://e.com"}}]);
    fake.push(Behaviour::Json(json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "gpt-x",
        "system_fingerprint": "fp_1", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "content_filter", "logprobs": logprobs,
                     "message": {"role": "assistant", "content": null, "refusal": "I can't help with that.",
                                 "annotations": annotations}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8,
                  "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 1, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
    })));
    let r = post(
        &s,
        "/v1/chat/completions",
        json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
               "logprobs": true, "top_logprobs": 2, "service_tier": "default", "reasoning_effort": "low",
               "verbosity": "low", "prompt_cache_key": "k1", "safety_identifier": "s1",
               "logit_bias": {"50256": -100}, "metadata": {"a": "b"}, "store": false, "modalities": ["text"]}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let b = &r.body;
    assert_eq!((b["id"].clone(), b["model"].clone()), (json!("chatcmpl-x"), json!("gpt-x")));
    assert_eq!(
        (b["system_fingerprint"].clone(), b["service_tier"].clone()),
        (json!("fp_1"), json!("default"))
    );
    let choice = &b["choices"][0];
    assert_eq!(choice["finish_reason"], "content_filter");
    assert_eq!(choice["logprobs"], logprobs);
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that.", "annotations": annotations})
    );
    assert_eq!(b["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
    assert_eq!(b["usage"]["completion_tokens_details"]["reasoning_tokens"], 1);
    let sent = fake.last_request().unwrap().body;
    for (param, value) in [
        ("logprobs", json!(true)),
        ("top_logprobs", json!(2)),
        ("service_tier", json!("default")),
        ("reasoning_effort", json!("low")),
        ("verbosity", json!("low")),
        ("prompt_cache_key", json!("k1")),
        ("safety_identifier", json!("s1")),
        ("logit_bias", json!({"50256": -100})),
    ] {
        assert_eq!(sent[param], value, "{param}: {sent}");
    }
    for absent in ["metadata", "store", "modalities"] {
        assert!(sent.get(absent).is_none(), "{absent}: {sent}");
    }
    s.stop().await;
}

/// The `data:` payloads of a streamed completion, as JSON (`[DONE]` left out, checked last).
async fn completion_chunks(s: &TestServer, body: Value) -> Vec<Value> {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.base))
        .header("authorization", format!("Bearer {}", s.key))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut data: Vec<String> =
        read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await.into_iter().map(|e| e.data).collect();
    assert_eq!(data.pop().as_deref(), Some("[DONE]"));
    data.iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[tokio::test]
async fn streamed_chunks_pass_on_logprobs_finish_reasons_and_usage_details() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let chunk = |delta: Value, finish: Value, logprobs: Value| {
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
               "system_fingerprint": "fp_2",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]})
    };
    let lp = json!({"content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}]});
    fake.push(Behaviour::Chunks(vec![
        chunk(json!({"role": "assistant", "content": "Hi"}), Value::Null, lp.clone()),
        chunk(json!({"content": " there"}), Value::Null, Value::Null),
        chunk(json!({}), json!("length"), Value::Null),
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x", "choices": [],
               "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6,
                         "prompt_tokens_details": {"cached_tokens": 1}}}),
    ]));
    let body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "stream": true,
                      "logprobs": true, "stream_options": {"include_usage": true}});
    let chunks = completion_chunks(&s, body).await;
    assert_eq!(chunks.len(), 4, "{chunks:?}");
    for c in &chunks {
        assert_eq!(
            (c["object"].clone(), c["id"].clone()),
            (json!("chat.completion.chunk"), json!("chatcmpl-s"))
        );
        assert_eq!(
            (c["system_fingerprint"].clone(), c["service_tier"].clone()),
            (json!("fp_2"), Value::Null),
            "{c}"
        );
    }
    for c in &chunks[..3] {
        let choice = c["choices"][0].as_object().unwrap();
        assert!(choice.contains_key("finish_reason") && choice.contains_key("logprobs"), "{c}");
    }
    assert_eq!(chunks[0]["choices"][0]["logprobs"], lp);
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": "Hi"}));
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "length");
    let last = &chunks[3];
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 6);
    assert_eq!(last["usage"]["prompt_tokens_details"], json!({"cached_tokens": 1, "audio_tokens": 0}));
    assert_eq!(last["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
    s.stop().await;
}

#[tokio::test]
async fn completion_parameters_the_service_cannot_honour_are_400s_naming_them() {
    let fake = FakeUpstream::start().await;
    let s = server(&fake).await;
    let with = |param: &str, value: Value| {
        let mut body = json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]});
        body[param] = value;
        body
    };
    for (param, value) in [
        ("n", json!(2)),
        ("store", json!(true)),
        ("modalities", json!(["text", "audio"])),
        ("audio", json!({"voice": "alloy", "format": "mp3"})),
        ("prediction", json!({"type": "content", "content": "x"})),
        ("web_search_options", json!({})),
        ("functions", json!([{"name": "f"}])),
        ("function_call", json!("auto")),
    ] {
        assert_400(&post(&s, "/v1/chat/completions", with(param, value)).await, param);
    }
    assert_eq!(fake.requests().len(), 0);
    s.stop().await;
}
