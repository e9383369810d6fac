//! The WebSocket mode of `/v1/responses` against a live server on the fake
//! upstream: the generated client upgrades the connection
//! (`openai_response_socket`), tokio-tungstenite reads and writes its frames.
//! Responses in order on one connection, the same events as a streamed
//! response, continuation of stored and not-stored responses, the error
//! messages after which the connection goes on, and the bounds that close it.

use std::time::Duration;

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::output_text;
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{Client, TestServer, fake_models, types};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

/// The longest a test waits for one message from the server.
const MESSAGE_WITHIN: Duration = Duration::from_secs(20);

/// The terminal events of a response.
const TERMINAL: [&str; 3] = ["response.completed", "response.incomplete", "response.failed"];

/// A client's WebSocket of `/v1/responses`.
struct Socket(WebSocketStream<reqwest::Upgraded>);

impl Socket {
    /// Opens one with the generated client (which sends its key).
    async fn open(client: &Client) -> Socket {
        let upgraded = client.openai_response_socket().send().await.expect("the upgrade").into_inner();
        Socket(WebSocketStream::from_raw_socket(upgraded, Role::Client, None).await)
    }

    async fn send(&mut self, message: Value) {
        self.0.send(Message::text(message.to_string())).await.expect("the message is sent");
    }

    /// The next text message, as JSON (panics on anything else, or after [`MESSAGE_WITHIN`]).
    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(MESSAGE_WITHIN, self.0.next())
                .await
                .expect("a message in time")
                .expect("the connection is open")
                .expect("a readable message");
            match message {
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(text.as_str()).expect("a JSON message");
                    let kind = value["type"].as_str();
                    agent_platform_tests::record::event("/v1/responses#socket", 200, kind, text.as_str());
                    return value;
                }
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("expected a text message, got {other:?}"),
            }
        }
    }

    /// The messages of one response: up to its terminal event, or one error message.
    async fn turn(&mut self) -> Vec<Value> {
        let mut messages = Vec::new();
        loop {
            let m = self.next().await;
            let last = m["type"] == "error" || TERMINAL.contains(&m["type"].as_str().unwrap_or_default());
            messages.push(m);
            if last {
                return messages;
            }
        }
    }

    /// Sends `request` and reads its response's messages.
    async fn respond(&mut self, request: Value) -> Vec<Value> {
        self.send(request).await;
        self.turn().await
    }

    /// The close frame the server sends next (panics on a text message, or after `within`).
    async fn closed(&mut self, within: Duration) -> Option<CloseFrame> {
        loop {
            let next = tokio::time::timeout(within, self.0.next()).await.expect("the server closes in time");
            match next {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => panic!("expected the connection to close, got {other:?}"),
                Some(Err(_)) | None => return None,
            }
        }
    }
}

/// A `response.create` message.
fn create(body: Value) -> Value {
    let mut m = json!({"type": "response.create", "model": "fake-model"});
    m.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
    m
}

/// The final response of a turn's messages (its terminal event's).
fn response(messages: &[Value]) -> &Value {
    &messages.last().expect("a message")["response"]
}

fn kinds(messages: &[Value]) -> Vec<String> {
    messages.iter().map(|m| m["type"].as_str().unwrap().to_owned()).collect()
}

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
}

async fn setup() -> Setup {
    setup_with(|_| {}).await
}

async fn setup_with(tweak: impl FnOnce(&mut agent_platform::config::Config)) -> Setup {
    let fake = FakeUpstream::start().await;
    let models = fake_models(&fake, 10.0);
    let s = TestServer::with_config(|cfg| {
        cfg.models = models;
        tweak(cfg);
    })
    .await;
    Setup { s, fake }
}

impl Setup {
    /// The messages the fake received last, as (role, content).
    fn upstream_messages(&self) -> Vec<(String, String)> {
        agent_platform_tests::sent_messages(&self.fake.last_request().expect("a request upstream").body)
    }

    async fn session_count(&self) -> usize {
        self.s.raw("GET", "/api/sessions?limit=1000", None).await.body["items"].as_array().unwrap().len()
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(r, c)| (r.to_string(), c.to_string())).collect()
}

#[tokio::test]
async fn each_response_create_is_answered_in_order_by_the_events_of_a_streamed_response() {
    let t = setup().await;
    let mut socket = Socket::open(&t.s.client).await;
    let first = socket.respond(create(json!({"input": "Count to three.", "store": false}))).await;
    let second = socket.respond(create(json!({"input": [{"role": "user", "content": "Again."}]}))).await;
    for (turn, text) in [(&first, "Count to three."), (&second, "Again.")] {
        assert_eq!(turn.last().unwrap()["type"], "response.completed", "{turn:?}");
        let numbers: Vec<u64> = turn.iter().map(|m| m["sequence_number"].as_u64().unwrap()).collect();
        assert_eq!(numbers, (0..turn.len() as u64).collect::<Vec<_>>(), "numbered from 0 in each response");
        assert_eq!(output_text(response(turn)), text);
        assert_eq!(response(turn)["status"], "completed");
    }
    assert_ne!(response(&first)["id"], response(&second)["id"]);
    assert_eq!(response(&first)["store"], false);
    // The same events as `stream: true` answers over HTTP.
    let sse = reqwest::Client::new()
        .post(format!("{}/v1/responses", t.s.base))
        .bearer_auth(&t.s.key)
        .json(&json!({"model": "fake-model", "input": "Count to three.", "stream": true, "store": false}))
        .send()
        .await
        .unwrap();
    let events = read_events(sse, CHAT_STREAM_WITHIN, |_| {}).await;
    let sse_kinds: Vec<String> =
        events.iter().map(|e| e.json()["type"].as_str().unwrap().to_owned()).collect();
    assert_eq!(kinds(&first), sse_kinds);
    // The stored one is a turn of a session, as over HTTP.
    assert_eq!(t.session_count().await, 1);
    let id = response(&second)["id"].as_str().unwrap();
    assert_eq!(t.s.raw("GET", &format!("/v1/responses/{id}"), None).await.status, 200);
}

#[tokio::test]
async fn messages_sent_while_a_response_runs_wait_their_turn() {
    let t = setup().await;
    let slow = ["one ", "two ", "three"].map(String::from).to_vec();
    t.fake.push(Behaviour::StreamWithDelays { chunks: slow, delay: Duration::from_millis(50) });
    let mut socket = Socket::open(&t.s.client).await;
    socket.send(create(json!({"input": "first", "store": false}))).await;
    socket.send(create(json!({"input": "second", "store": false}))).await;
    let first = socket.turn().await;
    let second = socket.turn().await;
    assert_eq!(output_text(response(&first)), "one two three");
    assert_eq!(output_text(response(&second)), "second");
    assert_eq!(first.iter().filter(|m| TERMINAL.contains(&m["type"].as_str().unwrap())).count(), 1);
}

#[tokio::test]
async fn a_store_false_response_is_continued_on_its_connection_only() {
    let t = setup().await;
    let mut socket = Socket::open(&t.s.client).await;
    let first = socket.respond(create(json!({"input": "The code word is cobalt.", "store": false}))).await;
    let id = response(&first)["id"].as_str().unwrap().to_owned();
    let second = socket
        .respond(create(
            json!({"input": "What is the code word?", "store": false, "previous_response_id": id}),
        ))
        .await;
    assert_eq!(response(&second)["status"], "completed", "{second:?}");
    assert_eq!(response(&second)["previous_response_id"], json!(id));
    assert_eq!(
        t.upstream_messages(),
        pairs(&[
            ("user", "The code word is cobalt."),
            ("assistant", "The code word is cobalt."),
            ("user", "What is the code word?")
        ])
    );
    // And on from the second, which remembers the first.
    let second_id = response(&second)["id"].as_str().unwrap().to_owned();
    let third = socket
        .respond(create(json!({"input": "Third.", "store": false, "previous_response_id": second_id})))
        .await;
    assert_eq!(response(&third)["status"], "completed", "{third:?}");
    assert_eq!(t.upstream_messages().len(), 5);
    // Not stored: not over HTTP, and no session.
    assert_eq!(t.s.raw("GET", &format!("/v1/responses/{id}"), None).await.status, 404);
    assert_eq!(t.session_count().await, 0);
    // A not-stored response continues only without being stored.
    let stored = socket.respond(create(json!({"input": "x", "previous_response_id": second_id}))).await;
    assert_eq!(
        (stored[0]["type"].clone(), stored[0]["status"].clone()),
        (json!("error"), json!(400)),
        "{stored:?}"
    );
    // Another connection does not know it.
    let mut other = Socket::open(&t.s.client).await;
    let missing =
        other.respond(create(json!({"input": "x", "store": false, "previous_response_id": id}))).await;
    assert_eq!(missing.len(), 1, "{missing:?}");
    let error = &missing[0];
    assert_eq!((error["type"].clone(), error["status"].clone()), (json!("error"), json!(404)), "{error}");
    assert_eq!(error["error"]["code"], "previous_response_not_found");
    assert_eq!(error["error"]["param"], "previous_response_id");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    // The connection goes on.
    let recovered = other.respond(create(json!({"input": "Start again.", "store": false}))).await;
    assert_eq!(output_text(response(&recovered)), "Start again.");
}

#[tokio::test]
async fn a_stored_response_is_continued_over_a_socket_and_the_turn_saved() {
    let t = setup().await;
    let r = t
        .s
        .raw("POST", "/v1/responses", Some(&json!({"model": "fake-model", "input": "I am Ann."}).to_string()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.body["id"].as_str().unwrap();
    let mut socket = Socket::open(&t.s.client).await;
    let next = socket.respond(create(json!({"input": "Who am I?", "previous_response_id": id}))).await;
    assert_eq!(response(&next)["status"], "completed", "{next:?}");
    assert_eq!(
        t.upstream_messages(),
        pairs(&[("user", "I am Ann."), ("assistant", "I am Ann."), ("user", "Who am I?")])
    );
    assert_eq!(t.session_count().await, 1);
    let sessions = t.s.raw("GET", "/api/sessions", None).await;
    let sid = sessions.body["items"][0]["id"].as_str().unwrap();
    let messages = t.s.raw("GET", &format!("/api/sessions/{sid}/messages"), None).await;
    assert_eq!(messages.body["items"].as_array().unwrap().len(), 4, "both turns saved");
}

#[tokio::test]
async fn a_function_call_output_that_answers_no_call_fails_and_the_continued_response_is_forgotten() {
    let t = setup().await;
    let mut socket = Socket::open(&t.s.client).await;
    let tools = json!([{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]);
    let first = socket
        .respond(create(json!({"input": "call lookup {\"q\":\"x\"}", "store": false, "tools": tools})))
        .await;
    let id = response(&first)["id"].as_str().unwrap().to_owned();
    let call = response(&first)["output"][0].clone();
    assert_eq!(call["type"], "function_call", "{first:?}");
    // The call's own output continues the chain.
    let output = json!([{"type": "function_call_output", "call_id": call["call_id"], "output": "found"}]);
    let answered = socket
        .respond(create(json!({"input": output, "store": false, "previous_response_id": id, "tools": tools})))
        .await;
    assert_eq!(output_text(response(&answered)), "the tool answered: found", "{answered:?}");
    // An output for no call fails, and forgets the response it continued.
    let stray = json!([{"type": "function_call_output", "call_id": "call_missing", "output": "?"}]);
    let failed = socket
        .respond(create(json!({"input": stray, "store": false, "previous_response_id": id, "tools": tools})))
        .await;
    assert_eq!(
        (failed.len(), failed[0]["type"].clone(), failed[0]["status"].clone()),
        (1, json!("error"), json!(400))
    );
    assert!(failed[0]["error"]["message"].as_str().unwrap().contains("input[0].call_id"), "{}", failed[0]);
    let again =
        socket.respond(create(json!({"input": "x", "store": false, "previous_response_id": id}))).await;
    assert_eq!(again[0]["error"]["code"], "previous_response_not_found", "{again:?}");
}

#[tokio::test]
async fn a_message_that_cannot_start_a_response_is_answered_by_an_error_and_the_connection_goes_on() {
    let t = setup().await;
    let mut socket = Socket::open(&t.s.client).await;
    let cases: [(&str, u64, &str, Value); 5] = [
        ("{not json", 400, "invalid_json", Value::Null),
        (r#"{"type": "response.cancel"}"#, 400, "unknown_message_type", json!("type")),
        (r#"{"type": "response.create", "input": "x"}"#, 400, "missing", json!("model")),
        (
            r#"{"type": "response.create", "model": "m", "input": "x", "temperature": 3}"#,
            400,
            "less_than_equal",
            json!("temperature"),
        ),
        (
            r#"{"type": "response.create", "model": "m", "input": "x", "background": true}"#,
            400,
            "unsupported",
            json!("background"),
        ),
    ];
    for (text, status, code, param) in cases {
        socket.0.send(Message::text(text)).await.unwrap();
        let e = socket.next().await;
        assert_eq!(e["type"], "error", "{text}: {e}");
        assert_eq!((e["status"].as_u64(), e["error"]["param"].clone()), (Some(status), param), "{text}: {e}");
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        if code != "less_than_equal" {
            assert_eq!(e["error"]["code"], code, "{text}: {e}");
        }
    }
    socket.0.send(Message::binary(b"{}".to_vec())).await.unwrap();
    assert_eq!(socket.next().await["error"]["code"], "invalid_message");
    let ok = socket.respond(create(json!({"input": "Still here?", "store": false}))).await;
    assert_eq!(output_text(response(&ok)), "Still here?");
}

#[tokio::test]
async fn a_failure_after_a_response_started_ends_it_with_one_response_failed() {
    let t = setup().await;
    t.fake.push(Behaviour::CutStream { chunks_before_cut: 2 });
    let mut socket = Socket::open(&t.s.client).await;
    let turn = socket.respond(create(json!({"input": "go", "store": false}))).await;
    let last = turn.last().unwrap();
    assert_eq!(last["type"], "response.failed", "{turn:?}");
    assert_eq!(last["response"]["error"]["code"], "upstream_error", "{last}");
    assert_eq!(turn.iter().filter(|m| TERMINAL.contains(&m["type"].as_str().unwrap())).count(), 1);
    let ok = socket.respond(create(json!({"input": "after", "store": false}))).await;
    assert_eq!(output_text(response(&ok)), "after");
}

#[tokio::test]
async fn a_socket_opens_only_with_a_key_and_the_upgrade_headers() {
    let t = setup().await;
    let anonymous = Client::new_with_client(&t.s.base, reqwest::Client::new());
    match anonymous.openai_response_socket().send().await {
        Err(agent_platform_client::Error::ErrorResponse(r)) => {
            assert_eq!(r.status().as_u16(), 401);
            assert_eq!(r.error.type_, "authentication_error");
        }
        Err(e) => panic!("expected a 401, got {e:?}"),
        Ok(_) => panic!("expected a 401, got an upgrade"),
    }
    // A plain GET is no upgrade: a 400 in OpenAI's shape.
    let r = t.s.raw("GET", "/v1/responses", None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["type"], "invalid_request_error", "{}", r.body);
}

#[tokio::test]
async fn a_message_over_the_size_bound_closes_the_connection() {
    let t = setup_with(|cfg| cfg.server.request_body_max_bytes = 64 * 1024).await;
    let mut socket = Socket::open(&t.s.client).await;
    let big = "x".repeat(100 * 1024);
    socket.send(create(json!({"input": big, "store": false}))).await;
    let frame = socket.closed(MESSAGE_WITHIN).await.expect("a close frame");
    assert_eq!(frame.code, CloseCode::Size, "{frame:?}");
}

#[tokio::test]
async fn a_socket_without_a_message_for_the_idle_timeout_is_closed() {
    let t = setup_with(|cfg| cfg.server.websocket_idle_timeout_s = 1).await;
    let mut socket = Socket::open(&t.s.client).await;
    let frame = socket.closed(Duration::from_secs(10)).await.expect("a close frame");
    assert_eq!(frame.code, CloseCode::Normal, "{frame:?}");
    assert!(frame.reason.as_str().contains("websocket_idle_timeout_s"), "{frame:?}");
}

#[tokio::test]
async fn a_client_that_goes_away_during_a_response_does_not_stop_it_and_it_is_saved() {
    let t = setup().await;
    t.fake
        .push(Behaviour::StreamWithDelays { chunks: vec!["a".into(); 20], delay: Duration::from_millis(20) });
    let mut socket = Socket::open(&t.s.client).await;
    socket.send(create(json!({"input": "go on"}))).await;
    loop {
        let m = socket.next().await;
        if m["type"] == "response.output_text.delta" {
            break;
        }
    }
    drop(socket);
    // The response runs on without its client, and is saved whole.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while t.session_count().await == 0 {
        assert!(std::time::Instant::now() < deadline, "the response was not saved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !t.fake.wait_for_aborted_streams(1, Duration::from_millis(10)).await,
        "the upstream was read to its end"
    );
}

#[tokio::test]
async fn a_server_that_shuts_down_closes_its_sockets() {
    let t = setup().await;
    let mut socket = Socket::open(&t.s.client).await;
    let ok = socket.respond(create(json!({"input": "hi", "store": false}))).await;
    assert_eq!(response(&ok)["status"], "completed");
    t.s.stop().await;
    let frame = socket.closed(MESSAGE_WITHIN).await.expect("a close frame");
    assert_eq!(frame.code, CloseCode::Away, "{frame:?}");
}

#[tokio::test]
async fn a_compacted_window_starts_a_new_chain_over_a_socket() {
    let t = setup().await;
    let model = types::CompactResponseRequestModel::try_from("fake-model").unwrap();
    let input = types::ResponseInput::String("Remember the compaction code word: slate.".into());
    let body = types::CompactResponseRequest::builder().model(Some(model)).input(Some(input));
    t.fake.push(Behaviour::Text("The user's code word is slate.".into()));
    let compacted = t.s.client.openai_response_compact().response_id("compact").body(body).send().await;
    let compacted = compacted.expect("a compaction").into_inner();
    let output = serde_json::to_value(&compacted.output).unwrap();
    let mut input = output.as_array().unwrap().clone();
    input.push(json!({"type": "message", "role": "user", "content": "What is the code word?"}));
    let mut socket = Socket::open(&t.s.client).await;
    let turn = socket.respond(create(json!({"input": input, "store": false, "tools": []}))).await;
    assert_eq!(response(&turn)["status"], "completed", "{turn:?}");
    assert_eq!(
        t.upstream_messages(),
        pairs(&[
            ("user", "Remember the compaction code word: slate."),
            ("system", "Summary of the earlier conversation (compacted): The user's code word is slate."),
            ("user", "What is the code word?"),
        ])
    );
}
