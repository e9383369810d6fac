//! Streamed chats (`"stream": true`): the answer is `text/event-stream`, which
//! the generated code cannot read, so this hand-written helper sends the
//! request and turns the events into typed [`ChatChunk`]s with a real SSE
//! parser (`sse-stream`).
//!
//! Use a client from [`Client::with_key`]: it has a read timeout but no total
//! timeout. (The generated `Client::new` has a 15 s total timeout, which cuts
//! long answers.)

use std::pin::Pin;

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use sse_stream::SseByteStream;

use crate::Client;
use crate::types::{ChatRequest, ChatUsage, DocReference};

/// One event of a streamed chat, in OpenAI's chunk shape. The last chunk has
/// no choices and carries `usage` and `docs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<ChatUsage>,
    #[serde(default)]
    pub docs: Option<Vec<DocReference>>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// What a chunk adds to the answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub content: Option<String>,
    /// Fragments of tool calls (OpenAI's shape: `index`, `id`, `function.name`,
    /// `function.arguments` pieces to concatenate).
    #[serde(default)]
    pub tool_calls: Option<Vec<serde_json::Value>>,
}

/// Why a streamed chat failed.
#[derive(Debug)]
pub enum ChatStreamError {
    /// The request could not be sent, or the connection broke.
    Http(reqwest::Error),
    /// The server answered an error before streaming (its JSON body as text).
    Status { status: u16, body: String },
    /// The server reported an error in the stream (`code`: `upstream_error`, ...).
    Server { code: String, message: String },
    /// An event that is not a chunk.
    Invalid(String),
}

impl std::fmt::Display for ChatStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatStreamError::Http(e) => write!(f, "HTTP error: {e}"),
            ChatStreamError::Status { status, body } => write!(f, "HTTP {status}: {body}"),
            ChatStreamError::Server { code, message } => write!(f, "{code}: {message}"),
            ChatStreamError::Invalid(m) => write!(f, "invalid event: {m}"),
        }
    }
}

impl std::error::Error for ChatStreamError {}

/// The chunks of a streamed chat; it ends after `[DONE]`, or with one `Err`.
pub type ChatChunks = Pin<Box<dyn Stream<Item = Result<ChatChunk, ChatStreamError>> + Send>>;

impl Client {
    /// `POST /api/sessions/{id}/chat` with `stream: true` (set here), as typed chunks.
    pub async fn session_chat_stream(
        &self,
        session: uuid::Uuid,
        mut body: ChatRequest,
    ) -> Result<ChatChunks, ChatStreamError> {
        body.stream = true;
        let url = format!("{}/api/sessions/{session}/chat", self.baseurl);
        let resp = self
            .client
            .post(url)
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .json(&body)
            .send()
            .await
            .map_err(ChatStreamError::Http)?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(ChatStreamError::Status { status: status.as_u16(), body });
        }
        let events = SseByteStream::new(resp.bytes_stream());
        let chunks = events
            .map(|event| -> Option<Result<ChatChunk, ChatStreamError>> {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => return Some(Err(ChatStreamError::Invalid(e.to_string()))),
                };
                let data = event.data?;
                let data = data.trim();
                if data.is_empty() || data == "[DONE]" {
                    return None;
                }
                let value: serde_json::Value = match serde_json::from_str(data) {
                    Ok(v) => v,
                    Err(e) => return Some(Err(ChatStreamError::Invalid(format!("{e}: {data}")))),
                };
                if let Some(err) = value.get("error") {
                    return Some(Err(ChatStreamError::Server {
                        code: err["code"].as_str().unwrap_or("error").to_owned(),
                        message: err["message"].as_str().unwrap_or_default().to_owned(),
                    }));
                }
                Some(serde_json::from_value(value).map_err(|e| ChatStreamError::Invalid(e.to_string())))
            })
            .filter_map(futures::future::ready);
        Ok(Box::pin(chunks))
    }
}
