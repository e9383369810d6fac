//! The streamed chat answer: a `text/event-stream` body fed by a task that
//! forwards the provider's chunks as they arrive.
//!
//! The task owns the prepared chat (and so the session's chat lock). When the
//! client goes away the body is dropped, the task's next send fails and it
//! stops, dropping the upstream stream (which aborts the upstream request);
//! nothing is saved. A failure mid-stream is sent as an `error` event and
//! nothing is saved either.

use bytes::Bytes;
use dropshot::Body;
use futures::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::json;
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::api::ChatAnswer;
use crate::api::types_chat::ChatRequest;
use crate::app::chat::usage_of;
use crate::app::{self, App, Tenant};
use crate::chat::ChunkAccumulator;

type Frames = Result<Frame<Bytes>, std::convert::Infallible>;

fn event(data: &str) -> Frames {
    Ok(Frame::data(Bytes::from(format!("data: {data}\n\n"))))
}

/// Prepares the chat and opens the upstream stream (so that a provider that
/// fails at once answers an ordinary 502/503/504), then streams.
pub async fn chat_stream(app: App, t: Tenant, session: Uuid, req: ChatRequest) -> app::Result<ChatAnswer> {
    let prepared = app.chat_prepare(t, session, req).await?;
    let mut upstream = prepared.provider.chat_stream(&prepared.request).await?;
    let (tx, mut rx) = mpsc::channel::<Frames>(16);
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
                    if tx.send(event(&data)).await.is_err() {
                        return; // The client went away: drop the upstream, save nothing.
                    }
                }
                Err(e) => {
                    let e = app::Error::from(e);
                    let code = match &e {
                        app::Error::UpstreamTimeout(_) => "upstream_timeout",
                        _ => "upstream_error",
                    };
                    let data = json!({"error": {"message": e.to_string(), "code": code}});
                    let _ = tx.send(event(&data.to_string())).await;
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
            let data = json!({"error": {"message": e.to_string(), "code": "internal"}});
            let _ = tx.send(event(&data.to_string())).await;
            return;
        }
        let last = json!({
            "id": id, "object": "chat.completion.chunk",
            "model": if model.is_empty() { prepared.request.model.clone() } else { model },
            "choices": [], "usage": usage, "docs": prepared.docs,
        });
        let _ = tx.send(event(&last.to_string())).await;
        let _ = tx.send(event("[DONE]")).await;
    });
    // Answer once the first event is ready, so that the response head and the
    // first chunk leave together. Dropshot's sockets keep Nagle's algorithm
    // on, which holds a chunk written alone after the head until the client
    // acknowledges the head (a delayed ACK: ~40 ms on Linux).
    let first = rx.recv().await;
    let frames = futures::stream::iter(first).chain(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    Ok(ChatAnswer::Stream(Body::wrap(StreamBody::new(frames))))
}
