//! Streamed chats (`"stream": true`): the answer is `text/event-stream`, which
//! the generated code cannot read. This hand-written helper only frames: it
//! sends the request and reads the events with a real SSE parser
//! (`sse-stream`); each event's data is one of the contract's types, generated
//! from the spec: a [`ChatChunk`], or a [`ChatErrorEvent`] that ends a failed
//! stream, then `[DONE]`.
//!
//! Use a client from [`Client::with_key`]: it has a read timeout but no total
//! timeout. (The generated `Client::new` has a 15 s total timeout, which cuts
//! long answers.)

use std::pin::Pin;

use futures::{Stream, StreamExt};
use sse_stream::SseByteStream;

use crate::Client;
use crate::types::ChatRequest;
pub use crate::types::{ChatChunk, ChatErrorEvent};

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
                // A chunk, most often; else the error event that ends the stream.
                let chunk = match serde_json::from_str::<ChatChunk>(data) {
                    Ok(chunk) => return Some(Ok(chunk)),
                    Err(e) => e,
                };
                Some(Err(match serde_json::from_str::<ChatErrorEvent>(data) {
                    Ok(ChatErrorEvent { error }) => {
                        ChatStreamError::Server { code: error.code, message: error.message }
                    }
                    Err(_) => ChatStreamError::Invalid(format!("{chunk}: {data}")),
                }))
            })
            .filter_map(futures::future::ready);
        Ok(Box::pin(chunks))
    }
}
