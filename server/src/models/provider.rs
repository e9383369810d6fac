//! OpenAI-compatible model providers: their configuration, which provider
//! serves which model, and the HTTP calls (`/chat/completions`, streamed or
//! not, and `/embeddings`) with timeouts and error mapping.

use std::borrow::Cow;
use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use sse_stream::{Sse, SseByteStream};

use super::wire::{
    CompletionChunk, CompletionRequest, CompletionResponse, EmbeddingRequest, EmbeddingResponse,
    StreamOptions, ToolCall,
};

/// Default for [`ModelsConfig::connect_timeout_s`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ModelsConfig::request_timeout_s`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default for [`ModelsConfig::stream_idle_timeout_s`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for [`ModelsConfig::max_answer_bytes`]: 8 MiB.
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// An embedding answer may take this much more per input than
/// `max_answer_bytes` (a 4,096-dimension vector is about 90 KB as JSON).
const EMBEDDING_BYTES_PER_INPUT: usize = 128 * 1024;
/// Base URL used when only `OPENAI_API_KEY` is set.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Name of the provider built from `OPENAI_BASE_URL` / `OPENAI_API_KEY`.
pub const ENV_PROVIDER_NAME: &str = "env";

/// Upstream error bodies are quoted up to this many characters.
const ERROR_BODY_LIMIT: usize = 500;
/// Of an upstream error body, at most this much is read (the rest is dropped).
const ERROR_BODY_READ_LIMIT: usize = 64 * 1024;

/// One `[[models.providers]]` entry.
#[derive(Deserialize, Serialize, Clone, Debug)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub name: String,
    /// E.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Name of the environment variable holding the API key (the key itself
    /// never goes in the config file).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model names this provider serves; empty = every model.
    #[serde(default)]
    pub models: Vec<String>,
}

/// The `[models]` config section.
#[derive(Deserialize, Serialize, Clone, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(default)]
    pub providers: Vec<ProviderConfig>,
    #[serde(default)]
    pub default_model: Option<String>,
    #[serde(default)]
    pub embedding_model: Option<String>,
    /// TCP (and TLS) connect timeout; default 10.
    #[serde(default)]
    pub connect_timeout_s: Option<f64>,
    /// Whole non-streamed call (and embeddings); default 120.
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
    /// Longest wait for the next bytes of a streamed answer, the first ones
    /// (response headers) included; default 60.
    #[serde(default)]
    pub stream_idle_timeout_s: Option<f64>,
    /// The largest model answer accepted, in bytes: a whole answer's body, or
    /// the text of a streamed one (content, reasoning and tool calls); default
    /// 8 MiB (`AGENT_PLATFORM_MODELS_MAX_ANSWER_BYTES`). A larger answer is
    /// dropped as soon as it passes the bound: the chat fails with 502
    /// `upstream_error` and saves nothing.
    #[serde(default)]
    pub max_answer_bytes: Option<usize>,
}

/// An invalid `[models]` section.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ConfigError {
    #[error("models.providers: a provider has an empty name")]
    EmptyName,
    #[error("models.providers: provider name '{0}' is used twice")]
    DuplicateName(String),
    #[error("models.providers '{name}': base_url '{url}' is not an http(s) URL: {reason}")]
    BadBaseUrl { name: String, url: String, reason: String },
    #[error(
        "models.providers '{name}': api_key_env names the environment variable '{var}', which is not set"
    )]
    MissingApiKey { name: String, var: String },
    #[error("models.{field} must be a positive number of seconds, got {value}")]
    BadTimeout { field: &'static str, value: f64 },
    #[error("models.max_answer_bytes must be at least 1")]
    BadMaxAnswerBytes,
    #[error("models.{field} is '{model}', but no configured provider serves that model")]
    UnservedModel { field: &'static str, model: String },
    #[error("could not build the HTTP client: {0}")]
    Client(String),
}

/// No provider serves the requested model.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub struct NoProvider {
    pub model: String,
    /// Names of the configured providers (empty: none at all).
    pub configured: Vec<String>,
}

impl fmt::Display for NoProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.configured.is_empty() {
            write!(
                f,
                "no model provider is configured for model '{}'; set OPENAI_BASE_URL (and \
                 OPENAI_API_KEY) or add a [[models.providers]] entry to the config file",
                self.model
            )
        } else {
            write!(
                f,
                "no model provider serves model '{}' (configured providers: {}); add the model \
                 to a provider's `models` list, or leave a provider's `models` empty to let it \
                 serve every model",
                self.model,
                self.configured.join(", ")
            )
        }
    }
}

/// A failed call to a provider.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum UpstreamError {
    /// The provider answered 4xx/5xx. `message` is the OpenAI-style
    /// `error.message` when present, else the (truncated) body.
    #[error("model provider answered HTTP {status}: {message}")]
    Status { status: u16, message: String },
    /// The provider answered 429: it is rate limiting us. `retry_after` is
    /// its `Retry-After` header, when it sent a usable one.
    #[error("model provider is rate limiting requests: {message}")]
    RateLimited { message: String, retry_after: Option<String> },
    /// The answer passed `models.max_answer_bytes`; the rest was not read.
    #[error(
        "model provider's answer is over {limit} bytes (models.max_answer_bytes); it was dropped: \
         ask for a shorter answer (max_tokens) or raise the bound"
    )]
    TooLarge { limit: usize },
    /// Connect, request or stream-idle timeout.
    #[error("model provider timed out")]
    Timeout,
    /// The answer could not be understood.
    #[error("model provider sent an invalid answer: {0}")]
    Invalid(String),
    /// The provider could not be reached.
    #[error("could not reach the model provider: {0}")]
    Connect(String),
    /// A streamed answer broke off (or ended without `[DONE]`).
    #[error("model provider stream broke off: {0}")]
    StreamCut(String),
}

/// A streamed chat answer: chunks as they arrive, ending after `[DONE]`, or
/// with one `Err` item. Dropping it aborts the upstream request.
pub type CompletionStream = Pin<Box<dyn Stream<Item = Result<CompletionChunk, UpstreamError>> + Send>>;

/// How long a call may take and how much of its answer is read.
#[derive(Clone, Copy, Debug)]
struct Limits {
    request: Duration,
    stream_idle: Duration,
    max_answer_bytes: usize,
}

/// One configured provider, ready to call.
#[derive(Clone)]
pub struct Provider {
    name: String,
    base_url: String,
    api_key: Option<String>,
    models: Vec<String>,
    http: reqwest::Client,
    limits: Limits,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("models", &self.models)
            .finish_non_exhaustive()
    }
}

/// All configured providers.
#[derive(Clone, Debug)]
pub struct Providers {
    providers: Vec<Provider>,
    default_model: Option<String>,
    embedding_model: Option<String>,
}

fn seconds(field: &'static str, value: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => Duration::try_from_secs_f64(v)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or(ConfigError::BadTimeout { field, value: v }),
    }
}

fn check_base_url(name: &str, url: &str) -> Result<String, ConfigError> {
    let bad = |reason: String| ConfigError::BadBaseUrl { name: name.to_owned(), url: url.to_owned(), reason };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(format!("unsupported scheme '{}'", parsed.scheme())));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

impl Providers {
    /// Builds the providers from the `[models]` section.
    ///
    /// With no providers configured, `OPENAI_BASE_URL` / `OPENAI_API_KEY`
    /// (the OpenAI SDKs' own variables) define one provider, named
    /// [`ENV_PROVIDER_NAME`], serving every model; its base URL defaults to
    /// [`OPENAI_DEFAULT_BASE_URL`] only when the key is set. With neither,
    /// there is no provider (and [`Providers::resolve`] says how to add one).
    /// `env` looks up environment variables (empty values count as unset).
    pub fn from_config(
        cfg: &ModelsConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let env = |var: &str| env(var).filter(|v| !v.trim().is_empty());
        let connect = seconds("connect_timeout_s", cfg.connect_timeout_s, DEFAULT_CONNECT_TIMEOUT)?;
        let limits = Limits {
            request: seconds("request_timeout_s", cfg.request_timeout_s, DEFAULT_REQUEST_TIMEOUT)?,
            stream_idle: seconds(
                "stream_idle_timeout_s",
                cfg.stream_idle_timeout_s,
                DEFAULT_STREAM_IDLE_TIMEOUT,
            )?,
            max_answer_bytes: match cfg.max_answer_bytes {
                None => DEFAULT_MAX_ANSWER_BYTES,
                Some(0) => return Err(ConfigError::BadMaxAnswerBytes),
                Some(n) => n,
            },
        };
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .user_agent(concat!("agent-platform/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ConfigError::Client(error_chain(&e)))?;

        let mut providers: Vec<Provider> = Vec::new();
        for p in &cfg.providers {
            if p.name.trim().is_empty() {
                return Err(ConfigError::EmptyName);
            }
            if providers.iter().any(|q| q.name == p.name) {
                return Err(ConfigError::DuplicateName(p.name.clone()));
            }
            let api_key =
                match &p.api_key_env {
                    None => None,
                    Some(var) => Some(env(var).ok_or_else(|| ConfigError::MissingApiKey {
                        name: p.name.clone(),
                        var: var.clone(),
                    })?),
                };
            providers.push(Provider {
                name: p.name.clone(),
                base_url: check_base_url(&p.name, &p.base_url)?,
                api_key,
                models: p.models.clone(),
                http: http.clone(),
                limits,
            });
        }
        if cfg.providers.is_empty() {
            let api_key = env("OPENAI_API_KEY");
            let base_url = env("OPENAI_BASE_URL")
                .or_else(|| api_key.as_ref().map(|_| OPENAI_DEFAULT_BASE_URL.to_owned()));
            if let Some(base_url) = base_url {
                providers.push(Provider {
                    name: ENV_PROVIDER_NAME.to_owned(),
                    base_url: check_base_url(ENV_PROVIDER_NAME, &base_url)?,
                    api_key,
                    models: Vec::new(),
                    http,
                    limits,
                });
            }
        }

        let this = Providers {
            providers,
            default_model: cfg.default_model.clone(),
            embedding_model: cfg.embedding_model.clone(),
        };
        if !this.providers.is_empty() {
            for (field, model) in
                [("default_model", &this.default_model), ("embedding_model", &this.embedding_model)]
            {
                if let Some(model) = model
                    && this.resolve(model).is_err()
                {
                    return Err(ConfigError::UnservedModel { field, model: model.clone() });
                }
            }
        }
        Ok(this)
    }

    /// No provider at all: every [`Providers::resolve`] fails.
    pub fn none() -> Self {
        Providers { providers: Vec::new(), default_model: None, embedding_model: None }
    }

    /// The provider for `model`: the first one listing it by name, else the
    /// first one with an empty `models` list.
    pub fn resolve(&self, model: &str) -> Result<&Provider, NoProvider> {
        self.providers
            .iter()
            .find(|p| p.models.iter().any(|m| m == model))
            .or_else(|| self.providers.iter().find(|p| p.models.is_empty()))
            .ok_or_else(|| NoProvider {
                model: model.to_owned(),
                configured: self.providers.iter().map(|p| p.name.clone()).collect(),
            })
    }

    pub fn default_model(&self) -> Option<&str> {
        self.default_model.as_deref()
    }

    pub fn embedding_model(&self) -> Option<&str> {
        self.embedding_model.as_deref()
    }

    /// All providers, in config order.
    pub fn list(&self) -> &[Provider] {
        &self.providers
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }
}

/// `req` with its stream fields as a streamed (`stream_options.include_usage`)
/// or whole answer needs them: borrowed when they already are (a prepared
/// chat's request), else copied, with all its history.
fn with_stream(req: &CompletionRequest, stream: bool) -> Cow<'_, CompletionRequest> {
    let options = stream.then_some(StreamOptions { include_usage: true });
    if req.stream == stream && req.stream_options == options {
        return Cow::Borrowed(req);
    }
    let mut req = req.clone();
    req.stream = stream;
    req.stream_options = options;
    Cow::Owned(req)
}

impl Provider {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The configured model names (empty = every model).
    pub fn models(&self) -> &[String] {
        &self.models
    }

    /// A non-streamed call: POST `body` as JSON within the request timeout and
    /// answer the body of a success response, read up to `max_bytes`.
    async fn post_json<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        max_bytes: usize,
    ) -> Result<Bytes, UpstreamError> {
        let response =
            self.post(path).timeout(self.limits.request).json(body).send().await.map_err(map_send_error)?;
        if !response.status().is_success() {
            return Err(failure(response).await);
        }
        read_bounded(response, max_bytes).await
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.post(format!("{}{path}", self.base_url));
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// One non-streamed chat completion (`stream: false` is forced). Fails
    /// with [`UpstreamError::Timeout`] after `request_timeout_s`, and with
    /// [`UpstreamError::Invalid`] when the answer has no choices.
    pub async fn chat(&self, req: &CompletionRequest) -> Result<CompletionResponse, UpstreamError> {
        let req = with_stream(req, false);
        let body = self.post_json("/chat/completions", &*req, self.limits.max_answer_bytes).await?;
        let mut answer: CompletionResponse = parse_json(&body)?;
        if answer.choices.is_empty() {
            return Err(UpstreamError::Invalid(format!(
                "the answer has no choices: {}",
                truncate(&String::from_utf8_lossy(&body), ERROR_BODY_LIMIT)
            )));
        }
        for choice in &mut answer.choices {
            fill_missing_call_ids(choice.message.tool_calls.iter_mut().flatten());
        }
        Ok(answer)
    }

    /// A streamed chat completion (`stream: true` with
    /// `stream_options.include_usage` is forced). Resolves once the response
    /// headers arrived; chunks are then yielded as their bytes arrive.
    ///
    /// Every wait (for the headers, then between any two reads) is bounded by
    /// `stream_idle_timeout_s`; exceeding it yields [`UpstreamError::Timeout`].
    /// A body that breaks, or ends without `[DONE]` and without any
    /// `finish_reason`, yields [`UpstreamError::StreamCut`]; a `data:` line
    /// that is not a chunk yields [`UpstreamError::Invalid`]. After an `Err`
    /// item the stream ends. Tool calls lacking an `id` get one in the
    /// fragment that opens them (same as `chat`).
    pub async fn chat_stream(&self, req: &CompletionRequest) -> Result<CompletionStream, UpstreamError> {
        let req = with_stream(req, true);
        let idle = self.limits.stream_idle;
        let max_answer_bytes = self.limits.max_answer_bytes;
        let send = self
            .post("/chat/completions")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&req)
            .send();
        let response = tokio::time::timeout(idle, send)
            .await
            .map_err(|_| UpstreamError::Timeout)?
            .map_err(map_send_error)?;
        if !response.status().is_success() {
            return Err(tokio::time::timeout(idle, failure(response))
                .await
                .map_err(|_| UpstreamError::Timeout)?);
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        let state = StreamState {
            events: Box::pin(SseByteStream::new(idle_bounded(response, idle, max_answer_bytes))),
            answer_bytes: 0,
            max_answer_bytes,
            saw_finish: false,
            done: false,
            saw_event: false,
            content_type,
            call_ids: Vec::new(),
        };
        Ok(Box::pin(futures::stream::unfold(state, next_chunk)))
    }

    /// Embeds `inputs` with `model`, one vector per input, in input order.
    pub async fn embed(&self, model: &str, inputs: &[String]) -> Result<Vec<Vec<f32>>, UpstreamError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let req = EmbeddingRequest {
            model: model.to_owned(),
            input: inputs.to_vec(),
            encoding_format: Some("float".to_owned()),
        };
        let max_bytes = (inputs.len().saturating_mul(EMBEDDING_BYTES_PER_INPUT))
            .saturating_add(self.limits.max_answer_bytes);
        let body = self.post_json("/embeddings", &req, max_bytes).await?;
        let mut answer: EmbeddingResponse = parse_json(&body)?;
        if answer.data.len() != inputs.len() {
            return Err(UpstreamError::Invalid(format!(
                "asked for {} embeddings, got {}",
                inputs.len(),
                answer.data.len()
            )));
        }
        answer.data.sort_by_key(|e| e.index);
        if answer.data.iter().enumerate().any(|(i, e)| e.index != i) {
            return Err(UpstreamError::Invalid("embedding indexes do not match the inputs".to_owned()));
        }
        Ok(answer.data.into_iter().map(|e| e.embedding).collect())
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// Why reading a streamed body stopped.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("no bytes arrived for {0:?}")]
    Idle(Duration),
    /// One event is larger than a chunk carrying a whole answer of this many bytes could be.
    #[error("an event is over the answer bound of {0} bytes")]
    TooLarge(usize),
    #[error(transparent)]
    Http(reqwest::Error),
}

/// The response body as it arrives, failing with [`ReadError::Idle`] when
/// no bytes come for `idle` (SSE comments and keep-alives count as bytes),
/// and with [`ReadError::TooLarge`] when one event (the bytes since the last
/// blank line, which the SSE parser holds) is larger than a chunk carrying a
/// whole answer of `max_answer_bytes` (plus its envelope) could be.
fn idle_bounded(
    response: reqwest::Response,
    idle: Duration,
    max_answer_bytes: usize,
) -> impl Stream<Item = Result<Bytes, ReadError>> + Send {
    let max_event = max_answer_bytes.saturating_add(64 * 1024);
    let body = Box::pin(response.bytes_stream());
    let event = EventSize::default();
    futures::stream::unfold(Some((body, event)), move |state| async move {
        let (mut body, mut event) = state?;
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Some((Err(ReadError::Idle(idle)), None)),
            Ok(None) => None,
            Ok(Some(Err(e))) => Some((Err(ReadError::Http(e)), None)),
            Ok(Some(Ok(bytes))) => {
                if event.add(&bytes) > max_event {
                    return Some((Err(ReadError::TooLarge(max_answer_bytes)), None));
                }
                Some((Ok(bytes), Some((body, event))))
            }
        }
    })
}

/// The size of the SSE event being received: bytes since the last blank line.
#[derive(Default)]
struct EventSize {
    bytes: usize,
    /// Whether the last byte seen ended a line (so a line break now ends the event).
    at_line_start: bool,
}

impl EventSize {
    /// Counts `chunk` in; answers the size of the event still open after it.
    fn add(&mut self, chunk: &[u8]) -> usize {
        for &b in chunk {
            match b {
                b'\n' if self.at_line_start => self.bytes = 0,
                b'\n' => self.at_line_start = true,
                b'\r' => {}
                _ => {
                    self.at_line_start = false;
                    self.bytes += 1;
                }
            }
        }
        self.bytes
    }
}

struct StreamState {
    events: EventStream,
    /// Text of the answer so far (content, reasoning, tool calls), and its bound.
    answer_bytes: usize,
    max_answer_bytes: usize,
    saw_finish: bool,
    done: bool,
    /// Whether any SSE event arrived, and the response's content type, to
    /// explain a stream that ends without one.
    saw_event: bool,
    content_type: String,
    /// Ids given to tool calls that arrived without one, by wire index.
    call_ids: Vec<(Option<u32>, String)>,
}

impl StreamState {
    /// Counts the text `chunk` adds to the answer; true once past the bound.
    fn over_bound(&mut self, chunk: &CompletionChunk) -> bool {
        let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        for choice in &chunk.choices {
            let delta = &choice.delta;
            self.answer_bytes += len(&delta.content) + len(&delta.reasoning_content);
            for call in delta.tool_calls.iter().flatten() {
                self.answer_bytes += len(&call.id);
                if let Some(f) = &call.function {
                    self.answer_bytes += len(&f.name) + len(&f.arguments);
                }
            }
        }
        self.answer_bytes > self.max_answer_bytes
    }
}

async fn next_chunk(mut st: StreamState) -> Option<(Result<CompletionChunk, UpstreamError>, StreamState)> {
    if st.done {
        return None;
    }
    loop {
        let error = match st.events.next().await {
            Some(Ok(event)) => {
                st.saw_event = true;
                // Comments, keep-alives and metadata-only blocks carry no data.
                let Some(data) = event.data else { continue };
                let data = data.trim();
                if data.is_empty() {
                    continue;
                }
                if data == "[DONE]" {
                    st.done = true;
                    return None;
                }
                match parse_chunk(data) {
                    Ok(chunk) if st.over_bound(&chunk) => {
                        UpstreamError::TooLarge { limit: st.max_answer_bytes }
                    }
                    Ok(mut chunk) => {
                        st.saw_finish |= chunk.choices.iter().any(|c| c.finish_reason.is_some());
                        fill_stream_call_ids(&mut st.call_ids, &mut chunk);
                        return Some((Ok(chunk), st));
                    }
                    Err(e) => e,
                }
            }
            Some(Err(e)) => map_sse_error(e),
            None if st.saw_finish => {
                // Ended cleanly (no [DONE]) after the model said it was
                // done: some servers do that; accept it.
                st.done = true;
                return None;
            }
            None if st.saw_event => UpstreamError::StreamCut("the stream ended before [DONE]".to_owned()),
            None => UpstreamError::StreamCut(format!(
                "the answer ended without any event (content type: {})",
                st.content_type
            )),
        };
        st.done = true;
        return Some((Err(error), st));
    }
}

fn parse_chunk(data: &str) -> Result<CompletionChunk, UpstreamError> {
    let value: serde_json::Value = serde_json::from_str(data).map_err(|e| {
        UpstreamError::Invalid(format!("stream data is not JSON ({e}): {}", truncate(data, ERROR_BODY_LIMIT)))
    })?;
    if let Some(message) = value.get("error").map(error_message) {
        return Err(UpstreamError::StreamCut(format!(
            "the provider reported an error mid-stream: {message}"
        )));
    }
    serde_json::from_value(value).map_err(|e| {
        UpstreamError::Invalid(format!(
            "stream data is not a chat chunk ({e}): {}",
            truncate(data, ERROR_BODY_LIMIT)
        ))
    })
}

/// Gives tool calls without an id a generated one (`call_<uuid>`).
fn fill_missing_call_ids<'a>(calls: impl Iterator<Item = &'a mut ToolCall>) {
    for call in calls.filter(|c| c.id.is_empty()) {
        call.id = new_call_id();
    }
}

fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

/// In a stream, a tool call opens with the fragment that carries its name;
/// if that fragment has no id, give it one (remembered per wire index so a
/// later fragment of the same call does not get a second one).
fn fill_stream_call_ids(ids: &mut Vec<(Option<u32>, String)>, chunk: &mut CompletionChunk) {
    for choice in chunk.choices.iter_mut().filter(|c| c.index == 0) {
        for fragment in choice.delta.tool_calls.iter_mut().flatten() {
            let opens =
                fragment.function.as_ref().and_then(|f| f.name.as_deref()).is_some_and(|n| !n.is_empty());
            if !opens || fragment.id.as_deref().is_some_and(|id| !id.is_empty()) {
                continue;
            }
            let known = fragment
                .index
                .and_then(|i| ids.iter().find(|(k, _)| *k == Some(i)))
                .map(|(_, id)| id.clone());
            let id = known.unwrap_or_else(|| {
                let id = new_call_id();
                ids.push((fragment.index, id.clone()));
                id
            });
            fragment.id = Some(id);
        }
    }
}

/// The body of a success response, read as it arrives and dropped (with
/// the connection) as soon as it passes `max_bytes`: never more than that
/// plus one network read is held.
async fn read_bounded(mut response: reqwest::Response, max_bytes: usize) -> Result<Bytes, UpstreamError> {
    let too_large = UpstreamError::TooLarge { limit: max_bytes };
    let announced = response.content_length().and_then(|n| usize::try_from(n).ok());
    if announced.is_some_and(|n| n > max_bytes) {
        return Err(too_large);
    }
    let mut body = bytes::BytesMut::with_capacity(announced.unwrap_or(0));
    loop {
        match response.chunk().await {
            Ok(Some(piece)) => {
                if body.len() + piece.len() > max_bytes {
                    return Err(too_large);
                }
                body.extend_from_slice(&piece);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(e) if e.is_timeout() => return Err(UpstreamError::Timeout),
            Err(e) => return Err(UpstreamError::StreamCut(error_chain(&e))),
        }
    }
}

/// The error of a response that is not a success: its message from (the
/// first [`ERROR_BODY_READ_LIMIT`] bytes of) the body; a 429 keeps the
/// provider's `Retry-After`, to pass on to our client.
async fn failure(mut response: reqwest::Response) -> UpstreamError {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty() && v.len() <= 64)
        .map(str::to_owned);
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_READ_LIMIT {
        match response.chunk().await {
            Ok(Some(piece)) => {
                body.extend_from_slice(&piece[..piece.len().min(ERROR_BODY_READ_LIMIT - body.len())])
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return UpstreamError::Timeout,
            Err(e) => return UpstreamError::Status { status, message: error_chain(&e) },
        }
    }
    match status_error(status, &body) {
        UpstreamError::Status { status: 429, message } => UpstreamError::RateLimited { message, retry_after },
        other => other,
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, UpstreamError> {
    serde_json::from_slice(body).map_err(|e| {
        UpstreamError::Invalid(format!(
            "{e}; the answer starts with: {}",
            truncate(&String::from_utf8_lossy(body), ERROR_BODY_LIMIT)
        ))
    })
}

/// Builds [`UpstreamError::Status`], extracting the message from the shapes
/// servers use: `{"error":{"message":..}}` (OpenAI, llama.cpp),
/// `{"error":".."}` (Ollama), `{"message":..}` (vLLM), `{"detail":..}`.
fn status_error(status: u16, body: &[u8]) -> UpstreamError {
    let json = serde_json::from_slice::<serde_json::Value>(body).ok();
    let from_json = json.as_ref().and_then(|v| {
        v.get("error").or_else(|| v.get("message")).or_else(|| v.get("detail")).map(error_message)
    });
    let message = from_json.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if text.is_empty() {
            reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no message")
                .to_owned()
        } else {
            truncate(text, ERROR_BODY_LIMIT)
        }
    });
    UpstreamError::Status { status, message }
}

fn error_message(v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => match o.get("message") {
            Some(serde_json::Value::String(s)) => s.clone(),
            _ => v.to_string(),
        },
        other => other.to_string(),
    };
    truncate(&text, ERROR_BODY_LIMIT)
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// An error with its sources (reqwest's own Display is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

fn map_send_error(e: reqwest::Error) -> UpstreamError {
    if e.is_timeout() {
        UpstreamError::Timeout
    } else if e.is_decode() {
        UpstreamError::Invalid(error_chain(&e))
    } else {
        UpstreamError::Connect(error_chain(&e))
    }
}

fn map_sse_error(e: sse_stream::Error) -> UpstreamError {
    match e {
        sse_stream::Error::Body(inner) => match inner.downcast_ref::<ReadError>() {
            Some(ReadError::Idle(_)) => UpstreamError::Timeout,
            Some(ReadError::TooLarge(limit)) => UpstreamError::TooLarge { limit: *limit },
            Some(ReadError::Http(e)) if e.is_timeout() => UpstreamError::Timeout,
            _ => UpstreamError::StreamCut(error_chain(inner.as_ref())),
        },
        other => UpstreamError::Invalid(format!("bad event stream: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages() {
        let m = |body: &str| match status_error(500, body.as_bytes()) {
            UpstreamError::Status { message, .. } => message,
            other => panic!("{other:?}"),
        };
        assert_eq!(m(r#"{"error":{"message":"boom","type":"x"}}"#), "boom");
        assert_eq!(m(r#"{"error":"model not found"}"#), "model not found");
        assert_eq!(m(r#"{"object":"error","message":"bad","code":400}"#), "bad");
        assert_eq!(m("plain text"), "plain text");
        assert_eq!(m(""), "Internal Server Error");
        assert_eq!(m(&"x".repeat(2000)).chars().count(), ERROR_BODY_LIMIT + 1);
    }
}
