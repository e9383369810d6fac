//! Server-sent events, which the generated code reads only as bytes: streamed
//! chats (`"stream": true`) and an execution's transitions. These hand-written
//! helpers only frame: they send the request and read the events with a real
//! SSE parser (`sse-stream`); each event's data is one of the contract's
//! types, generated from the spec. A chat: a [`ChatChunk`], or a
//! [`ChatErrorEvent`] that ends a failed stream, then `[DONE]`. Transitions:
//! a [`Transition`] per event, until a terminal one.
//!
//! Use a client from [`Client::with_key`]: it has a read timeout but no total
//! timeout. (The generated `Client::new` has a 15 s total timeout, which cuts
//! long answers.)

use std::pin::Pin;

use futures::{Stream, StreamExt};
use sse_stream::SseByteStream;

use crate::Client;
use crate::types::ChatRequest;
pub use crate::types::{ChatChunk, ChatErrorEvent, Transition, TransitionType};

/// Why a stream (a chat's, or an execution's transitions) failed.
#[derive(Debug)]
pub enum ChatStreamError {
    /// The request could not be sent, or the connection broke.
    Http(reqwest::Error),
    /// The server answered an error before streaming (its JSON body as text).
    Status { status: u16, body: String },
    /// The server reported an error in the stream (`code`: `upstream_error`, ...).
    Server { code: String, message: String },
    /// An event that is not what the stream carries.
    Invalid(String),
    /// The connection ended before the stream did (transitions without their
    /// terminal one): call again with the id of the last one received.
    Cut,
}

impl std::fmt::Display for ChatStreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatStreamError::Http(e) => write!(f, "HTTP error: {e}"),
            ChatStreamError::Status { status, body } => write!(f, "HTTP {status}: {body}"),
            ChatStreamError::Server { code, message } => write!(f, "{code}: {message}"),
            ChatStreamError::Invalid(m) => write!(f, "invalid event: {m}"),
            ChatStreamError::Cut => write!(f, "the connection ended before the last transition"),
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

/// An execution's transitions, oldest first; it ends after a terminal one
/// (`finish`, `error`, `cancelled`), or with one `Err`.
pub type Transitions = Pin<Box<dyn Stream<Item = Result<Transition, ChatStreamError>> + Send>>;

impl Client {
    /// `GET /api/executions/{id}/transitions.stream`, as typed transitions:
    /// every transition after `last_event_id` (all of them when `None`), then
    /// each new one as it commits. A connection that breaks ends the stream
    /// with an error ([`ChatStreamError::Cut`] or [`ChatStreamError::Http`]):
    /// call again with the id of the last transition received to go on where
    /// it stopped.
    pub async fn execution_transitions_stream(
        &self,
        execution: uuid::Uuid,
        last_event_id: Option<uuid::Uuid>,
    ) -> Result<Transitions, ChatStreamError> {
        let url = format!("{}/api/executions/{execution}/transitions.stream", self.baseurl);
        let mut request = self.client.get(url).header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let resp = request.send().await.map_err(ChatStreamError::Http)?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(ChatStreamError::Status { status: status.as_u16(), body });
        }
        let events = SseByteStream::new(resp.bytes_stream());
        let transitions = events
            .map(|event| -> Option<Result<Transition, ChatStreamError>> {
                let event = match event {
                    Ok(e) => e,
                    Err(e) => return Some(Err(ChatStreamError::Invalid(e.to_string()))),
                };
                // Comments (keep-alives) carry no data.
                let data = event.data?;
                if event.event.as_deref() == Some("error") {
                    return Some(Err(match serde_json::from_str::<ChatErrorEvent>(&data) {
                        Ok(ChatErrorEvent { error }) => {
                            ChatStreamError::Server { code: error.code, message: error.message }
                        }
                        Err(e) => ChatStreamError::Invalid(format!("{e}: {data}")),
                    }));
                }
                Some(
                    serde_json::from_str::<Transition>(&data)
                        .map_err(|e| ChatStreamError::Invalid(format!("{e}: {data}"))),
                )
            })
            .filter_map(futures::future::ready);
        // `(events, over)`: over once a terminal transition or an error came.
        let checked =
            futures::stream::unfold((Box::pin(transitions), false), |(mut events, over)| async move {
                if over {
                    return None;
                }
                match events.next().await {
                    Some(Ok(t)) => {
                        let terminal = matches!(
                            t.type_,
                            TransitionType::Finish | TransitionType::Error | TransitionType::Cancelled
                        );
                        Some((Ok(t), (events, terminal)))
                    }
                    Some(Err(e)) => Some((Err(e), (events, true))),
                    None => Some((Err(ChatStreamError::Cut), (events, true))),
                }
            });
        Ok(Box::pin(checked))
    }
}
