//! Reading a streamed chat answer: the response body's bytes under an idle
//! timeout and a per-event size bound, SSE events parsed into
//! `CompletionChunk`s under the answer-size bound, ending at `[DONE]` (or a
//! clean end after a `finish_reason`), and ids given to tool calls that open
//! without one.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use sse_stream::{Sse, SseByteStream};

use super::provider::{
    CompletionStream, ERROR_BODY_LIMIT, UpstreamError, error_chain, error_message, new_call_id, truncate,
};
use super::wire::CompletionChunk;

/// The chunks of a success `response` to a streamed chat call, with every
/// wait for bytes bounded by `idle` and the answer's text by
/// `max_answer_bytes` (see [`super::Provider::chat_stream`]).
pub(super) fn chunks(
    response: reqwest::Response,
    idle: Duration,
    max_answer_bytes: usize,
) -> CompletionStream {
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
    Box::pin(futures::stream::unfold(state, next_chunk))
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
