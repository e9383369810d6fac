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
    ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, StreamOptions, ToolCall,
};

/// Default for [`ModelsConfig::connect_timeout_s`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ModelsConfig::request_timeout_s`].
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default for [`ModelsConfig::stream_idle_timeout_s`].
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Base URL used when only `OPENAI_API_KEY` is set.
pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// Name of the provider built from `OPENAI_BASE_URL` / `OPENAI_API_KEY`.
pub const ENV_PROVIDER_NAME: &str = "env";

/// Upstream error bodies are quoted up to this many characters.
const ERROR_BODY_LIMIT: usize = 500;

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
pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatChunk, UpstreamError>> + Send>>;

#[derive(Clone, Copy, Debug)]
struct Timeouts {
    request: Duration,
    stream_idle: Duration,
}

/// One configured provider, ready to call.
#[derive(Clone)]
pub struct Provider {
    name: String,
    base_url: String,
    api_key: Option<String>,
    models: Vec<String>,
    http: reqwest::Client,
    timeouts: Timeouts,
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
        let timeouts = Timeouts {
            request: seconds("request_timeout_s", cfg.request_timeout_s, DEFAULT_REQUEST_TIMEOUT)?,
            stream_idle: seconds(
                "stream_idle_timeout_s",
                cfg.stream_idle_timeout_s,
                DEFAULT_STREAM_IDLE_TIMEOUT,
            )?,
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
                timeouts,
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
                    timeouts,
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
fn with_stream(req: &ChatRequest, stream: bool) -> Cow<'_, ChatRequest> {
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
    /// answer the body of a success response.
    async fn post_json<B: Serialize>(&self, path: &str, body: &B) -> Result<Bytes, UpstreamError> {
        let response =
            self.post(path).timeout(self.timeouts.request).json(body).send().await.map_err(map_send_error)?;
        read_success_body(response).await
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
    pub async fn chat(&self, req: &ChatRequest) -> Result<ChatResponse, UpstreamError> {
        let req = with_stream(req, false);
        let body = self.post_json("/chat/completions", &*req).await?;
        let mut answer: ChatResponse = parse_json(&body)?;
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
    pub async fn chat_stream(&self, req: &ChatRequest) -> Result<ChatStream, UpstreamError> {
        let req = with_stream(req, true);
        let idle = self.timeouts.stream_idle;
        let send = self
            .post("/chat/completions")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&req)
            .send();
        let response = tokio::time::timeout(idle, send)
            .await
            .map_err(|_| UpstreamError::Timeout)?
            .map_err(map_send_error)?;
        let status = response.status();
        if !status.is_success() {
            let body = tokio::time::timeout(idle, response.bytes())
                .await
                .map_err(|_| UpstreamError::Timeout)?
                .unwrap_or_default();
            return Err(status_error(status.as_u16(), &body));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        let state = StreamState {
            events: Box::pin(SseByteStream::new(idle_bounded(response, idle))),
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
        let body = self.post_json("/embeddings", &req).await?;
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
    #[error(transparent)]
    Http(reqwest::Error),
}

/// The response body as it arrives, failing with [`ReadError::Idle`] when
/// no bytes come for `idle` (SSE comments and keep-alives count as bytes).
fn idle_bounded(
    response: reqwest::Response,
    idle: Duration,
) -> impl Stream<Item = Result<Bytes, ReadError>> + Send {
    let body = Box::pin(response.bytes_stream());
    futures::stream::unfold(Some(body), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle, body.next()).await {
            Err(_) => Some((Err(ReadError::Idle(idle)), None)),
            Ok(None) => None,
            Ok(Some(Err(e))) => Some((Err(ReadError::Http(e)), None)),
            Ok(Some(Ok(bytes))) => Some((Ok(bytes), Some(body))),
        }
    })
}

struct StreamState {
    events: EventStream,
    saw_finish: bool,
    done: bool,
    /// Whether any SSE event arrived, and the response's content type, to
    /// explain a stream that ends without one.
    saw_event: bool,
    content_type: String,
    /// Ids given to tool calls that arrived without one, by wire index.
    call_ids: Vec<(Option<u32>, String)>,
}

async fn next_chunk(mut st: StreamState) -> Option<(Result<ChatChunk, UpstreamError>, StreamState)> {
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

fn parse_chunk(data: &str) -> Result<ChatChunk, UpstreamError> {
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
fn fill_stream_call_ids(ids: &mut Vec<(Option<u32>, String)>, chunk: &mut ChatChunk) {
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

async fn read_success_body(response: reqwest::Response) -> Result<Bytes, UpstreamError> {
    let status = response.status();
    let body = response.bytes().await.map_err(|e| {
        if e.is_timeout() {
            UpstreamError::Timeout
        } else if status.is_success() {
            UpstreamError::StreamCut(error_chain(&e))
        } else {
            UpstreamError::Status { status: status.as_u16(), message: error_chain(&e) }
        }
    })?;
    if status.is_success() { Ok(body) } else { Err(status_error(status.as_u16(), &body)) }
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
