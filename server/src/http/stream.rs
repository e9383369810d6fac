//! Server-sent events: a streamed turn's items and an execution's
//! transitions, framed as `text/event-stream` by one framer ([`sse`]).
//!
//! The domain yields the items ([`App::chat_stream`], [`App::completion_stream`],
//! [`App::response_stream`], [`App::transition_follow`]); a task drives them into
//! a channel the body reads (and, for a request with an `Idempotency-Key`,
//! keeps the events sent, for a repeat: see [`sse`]). The framings:
//!
//! - a chat or completion: one `data: <chunk>` event each, then `data: [DONE]`,
//!   or, when the stream fails after it started, one `data: <error event>`
//!   whose code is the one the same failure has as an ordinary answer
//!   ([`super::error`]);
//! - a response: `event: <type>` and `data: <event>` each, ending after
//!   `response.completed` or with `response.failed` (no `[DONE]`);
//! - transitions: one `id: <transition id>` and `data: <transition>` event
//!   each, a comment now and then while none comes, and, on a failure, an
//!   `event: error` with the same error body.

use bytes::Bytes;
use dropshot::Body;
use futures::{Stream, StreamExt};
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde::Serialize;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::error::api_error;
use super::run::StreamClaim;
use crate::api::types::Transition;
use crate::api::types::{
    ChatCompletion, ChatCompletionRequest, CreateResponseRequest, ModelResponse, ResponseError,
    ResponseStreamEvent,
};
use crate::api::types::{ChatErrorDetail, ChatErrorEvent, ChatRequest};
use crate::api::{ApiError, ChatAnswer, EventStream, OpenAiError};
use crate::app::idempotency::MAX_STREAM_REMEMBERED;
use crate::app::responses::StreamFailure;
use crate::app::{self, App, Tenant};

/// The data of the event that ends a stream that failed.
fn error_data(e: app::Error) -> String {
    let message = e.to_string();
    let code = match api_error(e, "") {
        ApiError::Other { body, .. } => body.code,
        ApiError::Validation(_) => "bad_request".to_owned(),
    };
    let event_data = ChatErrorEvent { error: ChatErrorDetail { message, code } };
    serde_json::to_string(&event_data).expect("an error event serialises")
}

/// The chat's answer as a stream of events (see [`json_events`]). A failure
/// before the first chunk (the provider refusing at once, an answer over the
/// size bound in one piece) is still an ordinary error answer.
pub async fn chat_stream(
    app: App,
    t: Tenant,
    session: Uuid,
    req: ChatRequest,
    keyed: Option<StreamClaim>,
) -> app::Result<ChatAnswer> {
    let chunks = app.chat_stream(t, session, req).await?;
    Ok(ChatAnswer::Stream(json_events(chunks, error_data, app, keyed, true).await?))
}

/// A `/v1` chat completion's answer as a stream of events: as [`chat_stream`],
/// its failure event in OpenAI's error shape.
pub async fn completion_stream(
    app: App,
    t: Tenant,
    req: ChatCompletionRequest,
) -> app::Result<ChatAnswer<ChatCompletion>> {
    let chunks = app.completion_stream(t, req).await?;
    Ok(ChatAnswer::Stream(json_events(chunks, openai_error_data, app, None, false).await?))
}

/// The data of the event that ends a `/v1` stream that failed.
fn openai_error_data(e: app::Error) -> String {
    let body = OpenAiError::from(api_error(e, "")).body();
    serde_json::to_string(&body).expect("an error body serialises")
}

/// Items as `data: <JSON>` events, then `data: [DONE]`; a failure is one
/// `data: <error_data(e)>` event that ends the stream. A failure before the
/// first item is still an ordinary error answer.
async fn json_events<T: Serialize + Send + Sync + 'static>(
    mut items: std::pin::Pin<Box<dyn Stream<Item = app::Result<T>> + Send>>,
    error_data: fn(app::Error) -> String,
    app: App,
    keyed: Option<StreamClaim>,
    finish: bool,
) -> app::Result<Body> {
    let first = match in_claim(&keyed, items.next()).await {
        Some(Err(e)) => return Err(e),
        first => first,
    };
    let frame = move |item: app::Result<T>| match item {
        Ok(item) => (data_event(&serde_json::to_string(&item).expect("an event serialises")), false),
        Err(e) => (data_event(&error_data(e)), true),
    };
    let framing =
        Framing { frame, end: Some("data: [DONE]\n\n"), first_wait: None, keep_alive: None, finish };
    Ok(sse(items, Some(first), framing, app, keyed).await)
}

fn data_event(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// `next`, run where the request's `Idempotency-Key` claim is seen (so the
/// turn the stream saves commits with the key's record).
async fn in_claim<F: Future>(keyed: &Option<StreamClaim>, next: F) -> F::Output {
    match keyed {
        Some(k) => k.claim.scope(next).await,
        None => next.await,
    }
}

/// How [`sse`] frames a stream's items.
struct Framing<F> {
    /// An item's event, and whether the item is a failure (the last event then).
    frame: F,
    /// What follows the last item, unless a failure came.
    end: Option<&'static str>,
    /// How long the answer waits for the first event before its head leaves
    /// alone; `None`: until it comes.
    first_wait: Option<std::time::Duration>,
    /// How long the stream stays silent before it sends a comment.
    keep_alive: Option<std::time::Duration>,
    /// The items are a turn that saves at its end: it runs to its end when
    /// the client goes away (see [`sse`]).
    finish: bool,
}

/// The events of `items` (after `first`, an item already taken, if any) as
/// a body. A task drives the domain's stream into a channel the body reads,
/// as frames; after the last item, `end`, unless a failure came. The body
/// must be `Sync`, the domain's stream is not.
///
/// When the client goes away the body is dropped. A turn that saves
/// (`finish`: session chat, `/v1/responses`) runs on to its end all the
/// same, its items read and dropped, and is saved as if the client had
/// stayed: the client does not decide what is kept (a tool the server ran is
/// never lost). Any other stream (a chat completion, a follower of
/// transitions or of a background response) stops: the task sees the channel
/// closed, even while it waits for the next item (an execution that waits, a
/// provider that is slow), and drops the stream. With an `Idempotency-Key`
/// (`keyed`) whose turn was saved, the task reads the last items still, and
/// once the stream has ended well, remembers every event sent, for a repeat.
///
/// The answer leaves once the first event is ready (within `first_wait`), so
/// that the response head and the first event leave together: Dropshot's
/// sockets keep Nagle's algorithm on, which holds a chunk written alone after
/// the head until the client acknowledges the head (a delayed ACK: ~40 ms on
/// Linux).
async fn sse<I: Send + 'static>(
    mut items: std::pin::Pin<Box<dyn Stream<Item = I> + Send>>,
    first: Option<Option<I>>,
    framing: Framing<impl Fn(I) -> (Bytes, bool) + Send + 'static>,
    app: App,
    keyed: Option<StreamClaim>,
) -> Body {
    let (tx, mut rx) = mpsc::channel::<Bytes>(16);
    let Framing { frame, end, first_wait, keep_alive, finish } = framing;
    tokio::spawn(async move {
        let saved = || finish || keyed.as_ref().is_some_and(|k| k.claim.saved());
        // The events sent, while they fit what a repeat may be sent again.
        let mut sent = keyed.as_ref().map(|_| String::new());
        let (mut failed, mut pending) = (false, first);
        loop {
            let item = match pending.take() {
                Some(item) => item,
                None if saved() => in_claim(&keyed, items.next()).await,
                None => match until_closed(&tx, in_claim(&keyed, items.next())).await {
                    Some(item) => item,
                    None => return,
                },
            };
            let (bytes, last) = match item {
                Some(item) => {
                    let (bytes, failure) = frame(item);
                    failed |= failure;
                    (bytes, failure)
                }
                None => match end {
                    Some(end) if !failed => (Bytes::from_static(end.as_bytes()), true),
                    _ => break,
                },
            };
            if let Some(kept) = &mut sent {
                if kept.len() + bytes.len() <= MAX_STREAM_REMEMBERED {
                    kept.push_str(&String::from_utf8_lossy(&bytes));
                } else {
                    sent = None;
                }
            }
            if tx.send(bytes).await.is_err() && !saved() {
                return;
            }
            if last {
                break;
            }
        }
        if let (Some(k), Some(sent), false) = (&keyed, sent, failed) {
            // Not remembered (a store failure): a repeat is told where the answer is.
            let _ = app.idempotency_remember_stream(&k.claim, sent).await;
        }
    });
    // `Some(None)`: the stream ended before its first event.
    let first: Option<Option<Bytes>> = match first_wait {
        None => Some(rx.recv().await),
        Some(wait) => tokio::time::timeout(wait, rx.recv()).await.ok(),
    };
    let frames = futures::stream::unfold(Some((first, rx)), move |state| async move {
        let (pending, mut rx) = state?;
        let bytes = match pending {
            Some(bytes) => bytes,
            None => match keep_alive {
                None => rx.recv().await,
                Some(every) => match tokio::time::timeout(every, rx.recv()).await {
                    Ok(bytes) => bytes,
                    Err(_) => {
                        let comment = Frame::data(Bytes::from_static(b": waiting\n\n"));
                        return Some((Ok(comment), Some((None, rx))));
                    }
                },
            },
        }?;
        Some((Ok::<_, std::convert::Infallible>(Frame::data(bytes)), Some((None, rx))))
    });
    Body::wrap(StreamBody::new(frames))
}

/// A `/v1` response's answer as a stream of typed events: `event: <type>` and
/// `data: <event>` each, ending after `response.completed`, or with a
/// `response.failed` event whose response carries the error's code (no
/// `[DONE]`: OpenAI's Responses streams end with their last event). A failure
/// before the first event is an ordinary error answer. With an
/// `Idempotency-Key` (`keyed`), see [`sse`].
pub async fn response_stream(
    app: App,
    t: Tenant,
    req: CreateResponseRequest,
    keyed: Option<StreamClaim>,
) -> app::Result<ChatAnswer<ModelResponse>> {
    let events = app.response_stream(t, req, None).await?;
    let frame = |item: Result<ResponseStreamEvent, StreamFailure>| match item {
        Ok(e) => (typed_event(&e.kind, &e), false),
        Err(failure) => {
            let e = failed_event(failure);
            (typed_event(&e.kind, &e), true)
        }
    };
    let mut events = events;
    let first = in_claim(&keyed, events.next()).await;
    let framing = Framing { frame, end: None, first_wait: None, keep_alive: None, finish: true };
    Ok(ChatAnswer::Stream(sse(events, Some(first), framing, app, keyed).await))
}

/// A background response created and followed (`background` and `stream`).
pub async fn response_background_stream(
    app: App,
    t: Tenant,
    req: CreateResponseRequest,
    keyed: Option<StreamClaim>,
) -> app::Result<ChatAnswer<ModelResponse>> {
    let created = app.response_background(t, req).await?;
    let events = app.response_follow(t, &created.id, None).await?;
    Ok(response_events(app, events, keyed).await)
}

/// A stored response's events, following it while it runs in the background.
pub async fn response_follow(
    app: App,
    t: Tenant,
    id: String,
    starting_after: Option<i64>,
) -> app::Result<ChatAnswer<ModelResponse>> {
    let events = app.response_follow(t, &id, starting_after).await?;
    Ok(response_events(app, events, None).await)
}

async fn response_events(
    app: App,
    mut events: app::responses::ResponseEvents,
    keyed: Option<StreamClaim>,
) -> ChatAnswer<ModelResponse> {
    let frame = |item: Result<ResponseStreamEvent, StreamFailure>| match item {
        Ok(e) => (typed_event(&e.kind, &e), false),
        Err(failure) => {
            let e = failed_event(failure);
            (typed_event(&e.kind, &e), true)
        }
    };
    let first = in_claim(&keyed, events.next()).await;
    let framing = Framing { frame, end: None, first_wait: None, keep_alive: None, finish: false };
    ChatAnswer::Stream(sse(events, Some(first), framing, app, keyed).await)
}

/// The `response.failed` event that ends a response that failed after it
/// started: its response carries the error, with the code the same failure
/// has as an ordinary answer.
pub fn failed_event(failure: StreamFailure) -> ResponseStreamEvent {
    let (error, mut response) = (failure.error, failure.response);
    let message = error.to_string();
    let code = match api_error(error, "") {
        ApiError::Other { body, .. } => body.code,
        ApiError::Validation(_) => "bad_request".to_owned(),
    };
    response.error = Some(ResponseError { code, message });
    ResponseStreamEvent {
        kind: "response.failed".into(),
        sequence_number: failure.sequence_number,
        response: Some(Box::new(response)),
        ..Default::default()
    }
}

/// What `next` gives, or `None` as soon as the body reading `tx`'s channel is
/// dropped (the client went away): a producer waiting for its next item (an
/// execution that waits, a provider that is slow) stops then, dropping the
/// domain's stream, rather than when that item comes.
async fn until_closed<T, I>(tx: &mpsc::Sender<T>, next: impl Future<Output = I>) -> Option<I> {
    tokio::select! {
        biased;
        () = tx.closed() => None,
        item = next => Some(item),
    }
}

fn typed_event(kind: &str, data: &impl Serialize) -> Bytes {
    let data = serde_json::to_string(data).expect("an event serialises");
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// How long a transitions stream stays silent before it sends a comment, so
/// that clients (and proxies) with a read timeout keep a waiting stream open.
const KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(15);

/// How long the answer waits for the first transition before its head leaves
/// alone: transitions already committed are there at once; a stream that
/// resumes after the last one must not keep the client waiting for its head.
const FIRST_EVENT_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// An execution's transitions after `after` as a stream of events, ending
/// after a terminal one. A missing execution is an ordinary error answer.
pub async fn transition_stream(
    app: App,
    t: Tenant,
    execution: Uuid,
    after: Option<Uuid>,
) -> app::Result<EventStream> {
    let transitions = app.transition_follow(t, execution, after).await?;
    let frame = |item: app::Result<Transition>| match item {
        Ok(t) => {
            let data = serde_json::to_string(&t).expect("a transition serialises");
            (Bytes::from(format!("id: {}\ndata: {data}\n\n", t.id)), false)
        }
        Err(e) => (Bytes::from(format!("event: error\ndata: {}\n\n", error_data(e))), true),
    };
    let framing = Framing {
        frame,
        end: None,
        first_wait: Some(FIRST_EVENT_WAIT),
        keep_alive: Some(KEEP_ALIVE),
        finish: false,
    };
    Ok(EventStream(sse(transitions, None, framing, app, None).await))
}
