//! Calling an OpenAI-compatible model provider: `Provider`'s HTTP calls
//! (`/chat/completions`, streamed or not, and `/embeddings`) with their time
//! and size limits, and the mapping of every failure to `UpstreamError`.
//! Reading a streamed answer is `upstream_stream`'s; which provider serves
//! which model is `provider_config`'s.

use std::borrow::Cow;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::Stream;
use serde::Serialize;

use super::upstream_stream;
use super::wire::{
    CompletionChunk, CompletionRequest, CompletionResponse, EmbeddingRequest, EmbeddingResponse,
    StreamOptions, ToolCall,
};

/// An embedding answer may take this much more per input than
/// `max_answer_bytes` (a 4,096-dimension vector is about 90 KB as JSON).
const EMBEDDING_BYTES_PER_INPUT: usize = 128 * 1024;

/// Upstream error bodies are quoted up to this many characters.
pub(super) const ERROR_BODY_LIMIT: usize = 500;
/// Of an upstream error body, at most this much is read (the rest is dropped).
const ERROR_BODY_READ_LIMIT: usize = 64 * 1024;

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
pub(super) struct Limits {
    pub(super) request: Duration,
    pub(super) stream_idle: Duration,
    pub(super) max_answer_bytes: usize,
}

/// One configured provider, ready to call.
#[derive(Clone)]
pub struct Provider {
    pub(super) name: String,
    pub(super) base_url: String,
    pub(super) api_key: Option<String>,
    pub(super) models: Vec<String>,
    pub(super) http: reqwest::Client,
    pub(super) limits: Limits,
    pub(super) listing: Arc<Listing>,
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
        Ok(upstream_stream::chunks(response, idle, max_answer_bytes))
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
            dimensions: None,
            user: None,
        };
        Ok(self.embeddings(&req).await?.data.into_iter().map(|e| e.embedding).collect())
    }

    /// One `/embeddings` call (`encoding_format` is sent as `float`): the
    /// answer's vectors in input order, one per input, checked.
    pub async fn embeddings(&self, req: &EmbeddingRequest) -> Result<EmbeddingResponse, UpstreamError> {
        let max_bytes = (req.input.len().saturating_mul(EMBEDDING_BYTES_PER_INPUT))
            .saturating_add(self.limits.max_answer_bytes);
        let body = self.post_json("/embeddings", req, max_bytes).await?;
        let mut answer: EmbeddingResponse = parse_json(&body)?;
        if answer.data.len() != req.input.len() {
            return Err(UpstreamError::Invalid(format!(
                "asked for {} embeddings, got {}",
                req.input.len(),
                answer.data.len()
            )));
        }
        answer.data.sort_by_key(|e| e.index);
        if answer.data.iter().enumerate().any(|(i, e)| e.index != i) {
            return Err(UpstreamError::Invalid("embedding indexes do not match the inputs".to_owned()));
        }
        Ok(answer)
    }

    /// The models the provider lists itself (`GET {base_url}/models`; at most
    /// [`MAX_LISTED_MODELS`]), from its cache while fresh (`list_cache`); one
    /// call at a time asks the provider, the others wait for its answer. A
    /// provider that fails (or does not answer within `list_timeout`) lists
    /// none, and is asked again after [`LIST_RETRY`] at the soonest.
    pub async fn listed_models(&self) -> Arc<Vec<ListedModel>> {
        let mut cached = self.listing.cache.lock().await;
        if let Some((expires, models)) = &*cached
            && Instant::now() < *expires
        {
            return models.clone();
        }
        let (models, keep) = match tokio::time::timeout(self.listing.timeout, self.fetch_models()).await {
            Ok(Ok(models)) => (models, self.listing.ttl),
            _ => (Vec::new(), self.listing.ttl.min(LIST_RETRY)),
        };
        let models = Arc::new(models);
        *cached = Some((Instant::now() + keep, models.clone()));
        models
    }

    async fn fetch_models(&self) -> Result<Vec<ListedModel>, UpstreamError> {
        let mut request = self.http.get(format!("{}/models", self.base_url)).timeout(self.listing.timeout);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(map_send_error)?;
        if !response.status().is_success() {
            return Err(failure(response).await);
        }
        let body = read_bounded(response, self.limits.max_answer_bytes).await?;
        #[derive(serde::Deserialize)]
        struct List {
            data: Vec<ListedModel>,
        }
        let mut list: List = parse_json(&body)?;
        list.data.truncate(MAX_LISTED_MODELS);
        list.data.retain(|m| !m.id.is_empty());
        Ok(list.data)
    }
}

/// The most models one provider's list keeps.
pub const MAX_LISTED_MODELS: usize = 10_000;

/// How soon a provider whose list failed is asked again.
pub const LIST_RETRY: Duration = Duration::from_secs(30);

/// A model a provider lists.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct ListedModel {
    pub id: String,
    /// Unix seconds; 0 when the provider says none.
    #[serde(default)]
    pub created: i64,
}

/// A provider's list of models, kept between calls (shared by its clones).
#[derive(Debug)]
pub(super) struct Listing {
    pub(super) ttl: Duration,
    pub(super) timeout: Duration,
    /// Until when the list is kept, and the list.
    pub(super) cache: tokio::sync::Mutex<Option<(Instant, Arc<Vec<ListedModel>>)>>,
}

impl Listing {
    pub(super) fn new(ttl: Duration, timeout: Duration) -> Arc<Self> {
        Arc::new(Listing { ttl, timeout, cache: tokio::sync::Mutex::new(None) })
    }
}

/// Gives tool calls without an id a generated one (`call_<uuid>`).
fn fill_missing_call_ids<'a>(calls: impl Iterator<Item = &'a mut ToolCall>) {
    for call in calls.filter(|c| c.id.is_empty()) {
        call.id = new_call_id();
    }
}

pub(super) fn new_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
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

pub(super) fn error_message(v: &serde_json::Value) -> String {
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

pub(super) fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// An error with its sources (reqwest's own Display is terse).
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
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
