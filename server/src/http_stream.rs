//! The streamed chat answer: a `text/event-stream` body fed by a task that
//! forwards the provider's chunks as they arrive.
//!
//! The task owns the prepared chat (and so the session's chat lock). When the
//! client goes away the body is dropped, the task's next send fails and it
//! stops, dropping the upstream stream (which aborts the upstream request);
//! nothing is saved. A failure mid-stream (the provider's, or an answer past
//! `models.max_answer_bytes`) is sent as an `error` event, the upstream is
//! dropped, and nothing is saved either.

use bytes::Bytes;
use dropshot::Body;
use futures::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::api::types_chat::ChatRequest;
use crate::api::{ApiError, ChatAnswer};
use crate::app::chat::usage_of;
use crate::app::{self, App, Tenant};
use crate::chat::ChunkAccumulator;

type Frames = Result<Frame<Bytes>, std::convert::Infallible>;

fn event(data: &str) -> Frames {
    Ok(Frame::data(Bytes::from(format!("data: {data}\n\n"))))
}

/// The event that ends a stream that failed: `{"error": {"message", "code"}}`,
/// with the code the same failure has as an ordinary answer.
fn error_event(e: app::Error) -> Frames {
    let message = e.to_string();
    let code = match ApiError::from_domain(e, "") {
        ApiError::Other { body, .. } => body.code,
        ApiError::Validation(_) => "bad_request".to_owned(),
    };
    event(&json!({"error": {"message": message, "code": code}}).to_string())
}

/// Prepares the chat and opens the upstream stream (so that a provider that
/// fails at once answers an ordinary 502/503/504), then streams.
pub async fn chat_stream(app: App, t: Tenant, session: Uuid, req: ChatRequest) -> app::Result<ChatAnswer> {
    let prepared = app.chat_prepare(t, session, req).await?;
    let mut upstream = prepared.provider.chat_stream(&prepared.request).await?;
    // The events' data, or the failure that ends the stream.
    let (tx, mut rx) = mpsc::channel::<app::Result<String>>(16);
    tokio::spawn(async move {
        let mut acc = ChunkAccumulator::new();
        let (mut id, mut model) = (String::new(), String::new());
        while let Some(item) = upstream.next().await {
            match item {
                Ok(chunk) => {
                    acc.push(&chunk);
                    if id.is_empty() {
                        id = chunk.id.clone();
                        model = chunk.model.clone();
                    }
                    // The usage-only chunk is replaced by ours, which adds the docs.
                    if chunk.choices.is_empty() {
                        continue;
                    }
                    let data = serde_json::to_string(&chunk).expect("a chunk serialises");
                    if tx.send(Ok(data)).await.is_err() {
                        return; // The client went away: drop the upstream, save nothing.
                    }
                }
                Err(e) => {
                    // Dropping the upstream here stops reading it; nothing is saved.
                    let _ = tx.send(Err(e.into())).await;
                    return;
                }
            }
        }
        if tx.is_closed() {
            return;
        }
        let usage = usage_of(&prepared, acc.usage(), acc.content());
        let answer = acc.finish();
        if let Err(e) = app.chat_save(&prepared, &answer, None).await {
            let _ = tx.send(Err(e)).await;
            return;
        }
        let last = json!({
            "id": id, "object": "chat.completion.chunk",
            "model": if model.is_empty() { prepared.request.model.clone() } else { model },
            "choices": [], "usage": usage, "docs": prepared.docs,
        });
        let _ = tx.send(Ok(last.to_string())).await;
        let _ = tx.send(Ok("[DONE]".to_owned())).await;
    });
    // Answer once the first event is ready, so that the response head and the
    // first chunk leave together. Dropshot's sockets keep Nagle's algorithm
    // on, which holds a chunk written alone after the head until the client
    // acknowledges the head (a delayed ACK: ~40 ms on Linux). A failure before
    // the first chunk (e.g. an answer over the size bound in one piece) is
    // still an ordinary error answer.
    let first = match rx.recv().await {
        Some(Err(e)) => return Err(e),
        first => first,
    };
    let items = futures::stream::iter(first).chain(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let frames = items.map(|item| match item {
        Ok(data) => event(&data),
        Err(e) => error_event(e),
    });
    Ok(ChatAnswer::Stream(Body::wrap(StreamBody::new(frames))))
}
