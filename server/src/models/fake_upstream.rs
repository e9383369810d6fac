//! A scripted OpenAI-compatible HTTP server for tests: [`FakeUpstream`]
//! listens on `127.0.0.1:0`, records every request, answers
//! `/v1/chat/completions` (streamed or not) from a queue of [`Behaviour`]s
//! and `/v1/embeddings` with deterministic vectors ([`embedding_for`]).
//!
//! Compiled for this crate's tests and, for other crates, with the cargo
//! feature `fake-upstream`. Built on hyper 1 (HTTP/1.1) with SSE framing by
//! `sse-stream`, the same crate the client side parses with.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use sse_stream::{Sse, SseBody};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use super::tokens::{count_chat_tokens, count_tokens};
use super::wire::ChatMessage;

/// Dimension of the vectors `/v1/embeddings` returns.
pub const EMBEDDING_DIM: usize = 16;

/// How the next chat completion is answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Answer this text (streamed: one chunk per word).
    Text(String),
    /// Call tool `name` with `arguments` (JSON text); finish reason
    /// `tool_calls`. Streamed: id and name first, arguments in two pieces.
    ToolCall { name: String, arguments: String },
    /// Streamed: one chunk per entry, `delay` between chunks. Not streamed:
    /// the joined text, after the same total delay.
    StreamWithDelays { chunks: Vec<String>, delay: Duration },
    /// Answer HTTP `status` with `body` (sent as JSON when it parses as JSON).
    Fail { status: u16, body: String },
    /// Sleep this long, then answer like `Echo` (to outlast client timeouts).
    Hang(Duration),
    /// 200 with a body that is not JSON (streamed: non-JSON `data:`).
    Garbage,
    /// Send this many text chunks (not streamed: part of the JSON), then
    /// drop the connection without `[DONE]`.
    CutStream { chunks_before_cut: usize },
    /// Answer the last user message's text.
    Echo,
    /// Answer `summary of N messages`, N being the request's message count.
    Summary,
    /// Answer `bytes` bytes of text (streamed: in chunks of [`PIECE`] bytes).
    Huge { bytes: usize },
    /// An answer that never ends: text for as long as the client reads
    /// (streamed: chunks of [`PIECE`] bytes). Counted in `streams_aborted`
    /// when the client goes away.
    Endless,
    /// Answer 429 (OpenAI's rate-limit error) with this `Retry-After` header, if any.
    RateLimited { retry_after: Option<String> },
}

/// The text of one chunk of [`Behaviour::Huge`] and [`Behaviour::Endless`].
pub const PIECE: usize = 64 * 1024;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    /// E.g. `/v1/chat/completions`.
    pub path: String,
    /// Lower-case names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::Null` if it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<VecDeque<Behaviour>>,
    embedding_queue: Mutex<VecDeque<Behaviour>>,
    default: Mutex<Behaviour>,
    requests: Mutex<Vec<RecordedRequest>>,
    streams_completed: AtomicUsize,
    streams_aborted: AtomicUsize,
    ids: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not poison the fake for the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running server; dropping it stops the server and its connections.
#[derive(Debug)]
pub struct FakeUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeUpstream {
    /// Starts listening on `127.0.0.1:0`. The default behaviour is [`Behaviour::Echo`].
    pub async fn start() -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            embedding_queue: Mutex::new(VecDeque::new()),
            default: Mutex::new(Behaviour::Echo),
            requests: Mutex::new(Vec::new()),
            streams_completed: AtomicUsize::new(0),
            streams_aborted: AtomicUsize::new(0),
            ids: AtomicU64::new(0),
        });
        let server = tokio::spawn(serve(listener, shared.clone()));
        FakeUpstream { addr, shared, server }
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues the behaviour for the next chat completion not yet scripted.
    pub fn push(&self, behaviour: Behaviour) {
        lock(&self.shared.queue).push_back(behaviour);
    }

    /// Queues a behaviour for `/v1/embeddings`: `Fail`, `Hang` (then a normal
    /// answer) and `Garbage` apply; anything else means a normal answer.
    pub fn push_embeddings(&self, behaviour: Behaviour) {
        lock(&self.shared.embedding_queue).push_back(behaviour);
    }

    /// The behaviour used when the queue is empty.
    pub fn set_default(&self, behaviour: Behaviour) {
        *lock(&self.shared.default) = behaviour;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.shared.requests).last().cloned()
    }

    /// Streams that were sent to the end (`[DONE]` included).
    pub fn streams_completed(&self) -> usize {
        self.shared.streams_completed.load(Ordering::SeqCst)
    }

    /// Streams whose client went away before the end.
    pub fn streams_aborted(&self) -> usize {
        self.shared.streams_aborted.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` streams were aborted by their client;
    /// false if that did not happen within `timeout`.
    pub async fn wait_for_aborted_streams(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.streams_aborted() < n {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// The deterministic embedding of `text`: a bag of lower-cased words, each
/// hashed (FNV-1a) into one of [`EMBEDDING_DIM`] buckets, L2-normalised.
/// Texts sharing words are close; text without words is the zero vector.
pub fn embedding_for(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; EMBEDDING_DIM];
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.to_lowercase().bytes() {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        v[(hash % EMBEDDING_DIM as u64) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    // Connections live in this set, so aborting this task closes them all.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                // As real model servers do (uvicorn, llama.cpp, nginx): each
                // streamed chunk leaves at once, not after the client's delayed ACK.
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| handle(shared.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    lock(&shared.requests).push(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.clone(),
    });
    let response = match (&parts.method, parts.uri.path()) {
        (&Method::POST, "/v1/chat/completions") => chat(&shared, &body).await,
        (&Method::POST, "/v1/embeddings") => embeddings(&shared, &body).await,
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "fake"}]}),
        ),
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("no route for {} {}", parts.method, parts.uri.path()), "type": "invalid_request_error"}}),
        ),
    };
    Ok(response)
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    full(status, "application/json", body.to_string())
}

fn fail(status: u16, body: String) -> Response<Body> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    full(status, content_type, body)
}

/// What a chat answer consists of, streamed or not.
enum Answer {
    Text(Vec<String>, Duration),
    ToolCall { name: String, arguments: String },
}

fn messages_of(body: &Value) -> Vec<ChatMessage> {
    body.get("messages").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default()
}

fn words(text: &str) -> Vec<String> {
    let chunks: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if chunks.is_empty() { vec![String::new()] } else { chunks }
}

fn echo_text(body: &Value) -> String {
    messages_of(body)
        .iter()
        .rev()
        .find(|m| m.role == super::wire::Role::User)
        .and_then(|m| m.content.clone())
        .unwrap_or_default()
}

async fn chat(shared: &Arc<Shared>, body: &Value) -> Response<Body> {
    let behaviour = lock(&shared.queue).pop_front().unwrap_or_else(|| lock(&shared.default).clone());
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let answer = match behaviour {
        Behaviour::Text(text) => Answer::Text(words(&text), Duration::ZERO),
        Behaviour::Echo => Answer::Text(words(&echo_text(body)), Duration::ZERO),
        Behaviour::Summary => {
            Answer::Text(words(&format!("summary of {} messages", messages_of(body).len())), Duration::ZERO)
        }
        Behaviour::ToolCall { name, arguments } => Answer::ToolCall { name, arguments },
        Behaviour::StreamWithDelays { chunks, delay } => Answer::Text(chunks, delay),
        Behaviour::Fail { status, body } => return fail(status, body),
        Behaviour::Hang(duration) => {
            tokio::time::sleep(duration).await;
            Answer::Text(words(&echo_text(body)), Duration::ZERO)
        }
        Behaviour::Garbage if stream => {
            let events = vec![
                (Duration::ZERO, Event::Data("this is not json".to_owned())),
                (Duration::ZERO, Event::Data("[DONE]".to_owned())),
            ];
            return sse_response(shared, events);
        }
        Behaviour::Garbage => {
            return full(StatusCode::OK, "application/json", "this is not json {");
        }
        Behaviour::CutStream { chunks_before_cut } => {
            return cut(shared, body, stream, chunks_before_cut);
        }
        Behaviour::Huge { bytes } => return huge(shared, stream, bytes),
        Behaviour::Endless => return endless(shared, stream),
        Behaviour::RateLimited { retry_after } => {
            let mut response = fail(
                429,
                json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}).to_string(),
            );
            if let Some(after) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from_str(&after).expect("a header value"));
            }
            return response;
        }
    };
    let model = body.get("model").and_then(Value::as_str).unwrap_or("fake-model").to_owned();
    let id = format!("chatcmpl-fake-{}", shared.ids.fetch_add(1, Ordering::SeqCst));
    let prompt_tokens = count_chat_tokens(&messages_of(body));
    if stream {
        let include_usage =
            body.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
        let events = stream_events(shared, &id, &model, answer, prompt_tokens, include_usage);
        return sse_response(shared, events);
    }
    let (message, finish_reason, completion_tokens, delay) = match answer {
        Answer::Text(chunks, delay) => {
            let text = chunks.concat();
            let n = count_tokens(&text);
            let total_delay = delay * u32::try_from(chunks.len().saturating_sub(1)).unwrap_or(0);
            (json!({"role": "assistant", "content": text}), "stop", n, total_delay)
        }
        Answer::ToolCall { name, arguments } => {
            let n = count_tokens(&name) + count_tokens(&arguments);
            let call_id = format!("call_fake_{}", shared.ids.fetch_add(1, Ordering::SeqCst));
            (
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                ]}),
                "tool_calls",
                n,
                Duration::ZERO,
            )
        }
    };
    tokio::time::sleep(delay).await;
    json_response(
        StatusCode::OK,
        &json!({
            "id": id,
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage(prompt_tokens, completion_tokens),
        }),
    )
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

enum Event {
    Data(String),
    /// Break the connection (no terminating chunk, no `[DONE]`).
    Cut,
}

fn chunk_json(id: &str, model: &str, delta: Value, finish_reason: Option<&str>) -> String {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
    .to_string()
}

fn stream_events(
    shared: &Shared,
    id: &str,
    model: &str,
    answer: Answer,
    prompt_tokens: usize,
    include_usage: bool,
) -> Vec<(Duration, Event)> {
    let mut events = Vec::new();
    let mut push = |delay: Duration, data: String| events.push((delay, Event::Data(data)));
    let (finish_reason, completion_tokens) = match answer {
        Answer::Text(chunks, delay) => {
            let mut n = 0;
            for (i, text) in chunks.iter().enumerate() {
                n += count_tokens(text);
                let delta = if i == 0 {
                    json!({"role": "assistant", "content": text})
                } else {
                    json!({"content": text})
                };
                let wait = if i == 0 { Duration::ZERO } else { delay };
                push(wait, chunk_json(id, model, delta, None));
            }
            ("stop", n)
        }
        Answer::ToolCall { name, arguments } => {
            let call_id = format!("call_fake_{}", shared.ids.fetch_add(1, Ordering::SeqCst));
            push(
                Duration::ZERO,
                chunk_json(
                    id,
                    model,
                    json!({"role": "assistant", "content": null, "tool_calls": [
                        {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                    ]}),
                    None,
                ),
            );
            let mid = arguments
                .char_indices()
                .nth(arguments.chars().count() / 2)
                .map_or(arguments.len(), |(i, _)| i);
            for piece in [&arguments[..mid], &arguments[mid..]] {
                push(
                    Duration::ZERO,
                    chunk_json(
                        id,
                        model,
                        json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                        None,
                    ),
                );
            }
            ("tool_calls", count_tokens(&name) + count_tokens(&arguments))
        }
    };
    push(Duration::ZERO, chunk_json(id, model, json!({}), Some(finish_reason)));
    if include_usage {
        push(
            Duration::ZERO,
            json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage(prompt_tokens, completion_tokens),
            })
            .to_string(),
        );
    }
    push(Duration::ZERO, "[DONE]".to_owned());
    events
}

/// Sends `events` as an SSE body from a separate task, so the client gets
/// each event as it is produced; counts completed and aborted streams.
fn sse_response(shared: &Arc<Shared>, events: Vec<(Duration, Event)>) -> Response<Body> {
    let (mut tx, rx) = mpsc::channel::<Result<Sse, BoxError>>(0);
    let shared = shared.clone();
    tokio::spawn(async move {
        for (delay, event) in events {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let item = match event {
                Event::Data(data) => Ok(Sse::default().data(data)),
                Event::Cut => Err(BoxError::from("cut by the fake upstream")),
            };
            let cut = item.is_err();
            if tx.send(item).await.is_err() {
                shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if cut {
                return;
            }
        }
        tx.close_channel();
        shared.streams_completed.fetch_add(1, Ordering::SeqCst);
    });
    let mut response = Response::new(SseBody::new(rx).map_err(BoxError::from).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// [`Behaviour::Huge`], built directly: counting the tokens of megabytes of
/// text would take the fake longer than the test.
fn huge(shared: &Arc<Shared>, stream: bool, bytes: usize) -> Response<Body> {
    let id = "chatcmpl-huge";
    if !stream {
        let message = json!({"role": "assistant", "content": "x".repeat(bytes)});
        return json_response(
            StatusCode::OK,
            &json!({
                "id": id, "object": "chat.completion", "created": 0, "model": "fake-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": usage(1, bytes / 4),
            }),
        );
    }
    let mut events: Vec<(Duration, Event)> = (0..bytes.div_ceil(PIECE))
        .map(|i| {
            let text = "x".repeat(PIECE.min(bytes - i * PIECE));
            (Duration::ZERO, Event::Data(chunk_json(id, "fake-model", json!({"content": text}), None)))
        })
        .collect();
    events.push((Duration::ZERO, Event::Data(chunk_json(id, "fake-model", json!({}), Some("stop")))));
    events.push((Duration::ZERO, Event::Data("[DONE]".to_owned())));
    sse_response(shared, events)
}

/// [`Behaviour::Endless`]: the start of an answer, then text for as long as the client reads.
fn endless(shared: &Arc<Shared>, stream: bool) -> Response<Body> {
    let text = "x".repeat(PIECE);
    let (first, piece, content_type) = if stream {
        let chunk = chunk_json("chatcmpl-endless", "fake-model", json!({"content": text}), None);
        let event = Bytes::from(format!("data: {chunk}\n\n"));
        (event.clone(), event, "text/event-stream")
    } else {
        let start = r#"{"id":"chatcmpl-endless","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""#;
        (Bytes::from(start), Bytes::from(text), "application/json")
    };
    let (mut tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(0);
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut next = first;
        while tx.send(Ok(Frame::data(next))).await.is_ok() {
            next = piece.clone();
        }
        shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
    });
    let mut response = Response::new(StreamBody::new(rx).boxed_unsync());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn cut(shared: &Arc<Shared>, body: &Value, stream: bool, chunks_before_cut: usize) -> Response<Body> {
    let text: Vec<String> = (0..chunks_before_cut).map(|i| format!("part{i} ")).collect();
    if stream {
        let model = body.get("model").and_then(Value::as_str).unwrap_or("fake-model");
        let mut events: Vec<(Duration, Event)> = text
            .iter()
            .map(|t| {
                (Duration::ZERO, Event::Data(chunk_json("chatcmpl-cut", model, json!({"content": t}), None)))
            })
            .collect();
        events.push((Duration::from_millis(20), Event::Cut));
        return sse_response(shared, events);
    }
    let partial = format!(
        r#"{{"id":"chatcmpl-cut","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"{}"#,
        text.concat()
    );
    // Let the headers and the partial body reach the client before the cut.
    let frames =
        futures::stream::iter([Ok(Frame::data(Bytes::from(partial)))]).chain(futures::stream::once(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err(BoxError::from("cut by the fake upstream"))
        }));
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

async fn embeddings(shared: &Shared, body: &Value) -> Response<Body> {
    let behaviour = lock(&shared.embedding_queue).pop_front();
    match behaviour {
        Some(Behaviour::Fail { status, body }) => return fail(status, body),
        Some(Behaviour::Garbage) => {
            return full(StatusCode::OK, "application/json", "this is not json {");
        }
        Some(Behaviour::Hang(duration)) => tokio::time::sleep(duration).await,
        _ => {}
    }
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            items.iter().map(|i| i.as_str().unwrap_or_default().to_owned()).collect()
        }
        _ => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": {"message": "'input' must be a string or an array of strings", "type": "invalid_request_error"}}),
            );
        }
    };
    let tokens: usize = inputs.iter().map(|i| count_tokens(i)).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"object": "embedding", "index": i, "embedding": embedding_for(text)}))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": data,
            "model": body.get("model").cloned().unwrap_or(Value::Null),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}
