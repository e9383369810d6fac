//! Server-sent events: a streamed chat's chunks framed as `text/event-stream`.
//!
//! The domain yields the chunks ([`App::chat_stream`]); this module only frames
//! them: one `data: <chunk>` event each, then `data: [DONE]`, or, when the
//! stream fails after it started, one `data: <error event>` whose code is the
//! one the same failure has as an ordinary answer ([`super::error`]).

use bytes::Bytes;
use dropshot::Body;
use futures::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::error::api_error;
use crate::api::types_chat::{ChatChunk, ChatErrorDetail, ChatErrorEvent, ChatRequest};
use crate::api::{ApiError, ChatAnswer};
use crate::app::{self, App, Tenant};

type Frames = Result<Frame<Bytes>, std::convert::Infallible>;

fn event(data: &str) -> Frames {
    Ok(Frame::data(Bytes::from(format!("data: {data}\n\n"))))
}

/// The event that ends a stream that failed.
fn error_event(e: app::Error) -> Frames {
    let message = e.to_string();
    let code = match api_error(e, "") {
        ApiError::Other { body, .. } => body.code,
        ApiError::Validation(_) => "bad_request".to_owned(),
    };
    let event_data = ChatErrorEvent { error: ChatErrorDetail { message, code } };
    event(&serde_json::to_string(&event_data).expect("an error event serialises"))
}

/// The chat's answer as a stream of events. A failure before the first chunk
/// (the provider refusing at once, an answer over the size bound in one
/// piece) is still an ordinary error answer.
///
/// A task drives the domain's stream into a channel the body reads: the body
/// must be `Sync`, the provider's stream is not. When the client goes away the
/// body is dropped, the task sees the channel closed, and stops (dropping the
/// stream: nothing is saved).
pub async fn chat_stream(app: App, t: Tenant, session: Uuid, req: ChatRequest) -> app::Result<ChatAnswer> {
    let mut chunks = app.chat_stream(t, session, req).await?;
    let (tx, mut rx) = mpsc::channel::<app::Result<ChatChunk>>(16);
    tokio::spawn(async move {
        while !tx.is_closed() {
            let Some(item) = chunks.next().await else { return };
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    // Answer once the first event is ready, so that the response head and the
    // first chunk leave together. Dropshot's sockets keep Nagle's algorithm
    // on, which holds a chunk written alone after the head until the client
    // acknowledges the head (a delayed ACK: ~40 ms on Linux).
    let first = match rx.recv().await {
        Some(Err(e)) => return Err(e),
        first => first,
    };
    // `pending`: the item already taken (the first), not yet framed.
    let frames = futures::stream::unfold(Some((Some(first), rx)), |state| async move {
        let (pending, mut rx) = state?;
        let item = match pending {
            Some(item) => item,
            None => rx.recv().await,
        };
        Some(match item {
            Some(Ok(chunk)) => {
                (event(&serde_json::to_string(&chunk).expect("a chunk serialises")), Some((None, rx)))
            }
            Some(Err(e)) => (error_event(e), None),
            // The domain's stream ends after its last chunk only when it went well.
            None => (event("[DONE]"), None),
        })
    });
    Ok(ChatAnswer::Stream(Body::wrap(StreamBody::new(frames))))
}
