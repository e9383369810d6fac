//! A scripted OpenAI-compatible HTTP server for tests: [`FakeUpstream`]
//! listens on `127.0.0.1:0`, records every request, answers
//! `/v1/chat/completions` (streamed or not) from a queue of [`Behaviour`]s,
//! `/v1/embeddings` with deterministic vectors ([`embedding_for`]; shortened
//! to `dimensions` when asked for no more than [`EMBEDDING_DIM`]), and
//! `/v1/models` with the names set by [`FakeUpstream::set_models`]. A
//! message's image and file parts are read as a description of each
//! (`[image_url: …]`, `[file: …]`), so an echo shows what reached the model.
//!
//! Compiled for this crate's tests and, for other crates, with the cargo
//! feature `fake-upstream`. Built on hyper 1 (HTTP/1.1) with SSE framing by
//! `sse-stream`, the same crate the client side parses with.

mod answers;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use self::answers::{chat, embeddings, models};

/// Dimension of the vectors `/v1/embeddings` returns.
pub const EMBEDDING_DIM: usize = 16;

/// How the next chat completion is answered. A text answer over the
/// request's `max_tokens` is cut to it, with `finish_reason: "length"`.
#[derive(Clone, Debug, PartialEq)]
pub enum Behaviour {
    /// Answer this text (streamed: one chunk per word).
    Text(String),
    /// Call tool `name` with `arguments` (JSON text); finish reason
    /// `tool_calls`. Streamed: id and name first, arguments in two pieces.
    ToolCall { name: String, arguments: String },
    /// Call each of these tools `(name, arguments)` in one answer (streamed:
    /// each call's id and name, then its arguments in two pieces).
    ToolCalls(Vec<(String, String)>),
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
    /// Answer the last user message's text; a last message `call <tool>
    /// <arguments>` naming one of the request's tools calls it; a last `tool`
    /// message is answered `the tool answered: <result>`. With a
    /// `json_schema` response format, the answer is the JSON object of the
    /// schema's properties (strings the text, numbers its length).
    Echo,
    /// As [`Behaviour::Echo`], and a last user message that names an offered
    /// tool's subject (a word of four letters or more of its name, as
    /// `weather` of `get_weather`) calls that tool, each required parameter
    /// set to the message's text: a model that uses the tools it is given.
    CallMentionedTools,
    /// Call tool `name` with `arguments` until the request has `rounds`
    /// `tool` messages after its last user message, then answer `text`: a
    /// model that makes the same number of tool rounds in every turn, however
    /// many turns run at once. In `arguments`, `{text}` is the last user
    /// message's text and `{round}` the round (from 1). A request that offers
    /// no tool `name` is answered as [`Behaviour::Echo`] answers it.
    ToolRounds { name: String, arguments: String, rounds: usize, text: String },
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
    /// Not streamed: answer this body as is (a provider's whole answer, with
    /// whatever fields it has). Streamed: the same, as one chunk (its
    /// `message` as the `delta`), then `[DONE]`.
    Json(Value),
    /// Streamed: each of these as a `data:` event, then `[DONE]`. Not
    /// streamed: a 500 (these are chunks).
    Chunks(Vec<Value>),
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
    models: Mutex<Vec<String>>,
    models_queue: Mutex<VecDeque<Behaviour>>,
    default: Mutex<Behaviour>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// How many of the latest requests `requests` keeps (all, unless set).
    keep_requests: AtomicUsize,
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
            models: Mutex::new(vec!["fake-model".to_owned()]),
            models_queue: Mutex::new(VecDeque::new()),
            default: Mutex::new(Behaviour::Echo),
            requests: Mutex::new(Vec::new()),
            keep_requests: AtomicUsize::new(usize::MAX),
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

    /// Model providers of one provider, `fake`: this server, serving every
    /// model, with `default_model` for requests and agents that name none.
    pub fn models_config(&self, default_model: &str) -> super::ModelsConfig {
        super::ModelsConfig {
            providers: vec![super::ProviderConfig {
                name: "fake".into(),
                base_url: self.base_url(),
                api_key_env: None,
                models: Vec::new(),
            }],
            default_model: Some(default_model.into()),
            ..super::ModelsConfig::default()
        }
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

    /// The model names `GET /v1/models` lists (`fake-model` until set).
    pub fn set_models(&self, names: &[&str]) {
        *lock(&self.shared.models) = names.iter().map(|n| (*n).to_owned()).collect();
    }

    /// Queues a behaviour for `GET /v1/models`: `Fail`, `Hang` (then a normal
    /// answer) and `Garbage` apply; anything else means a normal answer.
    pub fn push_models(&self, behaviour: Behaviour) {
        lock(&self.shared.models_queue).push_back(behaviour);
    }

    /// The behaviour used when the queue is empty.
    pub fn set_default(&self, behaviour: Behaviour) {
        *lock(&self.shared.default) = behaviour;
    }

    /// Every request received so far (the latest `n` after
    /// [`FakeUpstream::keep_requests`]), in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Keeps only the latest `n` requests from now on (a benchmark sending
    /// thousands of large prompts would otherwise hold every one of them,
    /// and spend its time faulting in fresh memory for them).
    pub fn keep_requests(&self, n: usize) {
        self.shared.keep_requests.store(n, Ordering::SeqCst);
        trim(&mut lock(&self.shared.requests), n);
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
    let recorded = RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.clone(),
    };
    {
        let mut requests = lock(&shared.requests);
        requests.push(recorded);
        trim(&mut requests, shared.keep_requests.load(Ordering::SeqCst));
    }
    let response = match (&parts.method, parts.uri.path()) {
        (&Method::POST, "/v1/chat/completions") => chat(&shared, &body).await,
        (&Method::POST, "/v1/embeddings") => embeddings(&shared, &body).await,
        (&Method::GET, "/v1/models") => models(&shared).await,
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("no route for {} {}", parts.method, parts.uri.path()), "type": "invalid_request_error"}}),
        ),
    };
    Ok(response)
}

/// Drops all but the latest `keep` of `requests`.
fn trim(requests: &mut Vec<RecordedRequest>, keep: usize) {
    let excess = requests.len().saturating_sub(keep);
    requests.drain(..excess);
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
