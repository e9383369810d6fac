//! `Reply<R>`: a handler's answer, success or error, with full control of headers.
//!
//! Dropshot turns a handler's `Err` into a response with no way to add headers,
//! but a 401 must carry `WWW-Authenticate` and every error body must carry the
//! request id. So handlers answer `Ok(Reply::Err(..))` for their own errors; the
//! `Err` channel of the handler is left to extractor failures. The spec still
//! documents `R` as the success response and `ApiError` as the error schema.

use dropshot::{ApiEndpointResponse, Body, HttpError, HttpResponse, HttpResponseOk};
use http::StatusCode;

use crate::error::{ApiError, ErrorAnswer};
use crate::types::chat::ChatResponse;

///
/// `E`, the error's shape: the contract's [`ApiError`], or on the
/// OpenAI-compatible routes [`crate::error::OpenAiError`].
pub enum Reply<R, E = ApiError> {
    Ok(R),
    Err(E),
    /// The remembered answer of an earlier request with the same
    /// `Idempotency-Key`: its status and JSON body, byte for byte.
    Replayed {
        status: StatusCode,
        body: String,
    },
    /// The remembered events of an earlier streamed answer with the same
    /// `Idempotency-Key`, byte for byte (a 200 `text/event-stream`).
    ReplayedStream {
        body: String,
    },
}

/// The header that marks a [`Reply::Replayed`] answer.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

impl<R: HttpResponse, E: ErrorAnswer + Send + Sync + 'static> HttpResponse for Reply<R, E> {
    fn to_result(self) -> Result<http::Response<Body>, HttpError> {
        match self {
            Reply::Ok(r) => r.to_result(),
            Reply::Err(e) => {
                let status = e.status().as_status();
                let mut builder = http::Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json");
                if status == StatusCode::UNAUTHORIZED {
                    builder = builder.header(http::header::WWW_AUTHENTICATE, "Bearer");
                }
                if let Some(after) = e.retry_after()
                    && let Ok(value) = http::HeaderValue::from_str(after)
                {
                    builder = builder.header(http::header::RETRY_AFTER, value);
                }
                Ok(builder.body(e.body_json().into())?)
            }
            Reply::Replayed { status, body } => Ok(http::Response::builder()
                .status(status)
                .header(http::header::CONTENT_TYPE, "application/json")
                .header(IDEMPOTENT_REPLAYED, "true")
                .body(body.into())?),
            Reply::ReplayedStream { body } => Ok(http::Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "text/event-stream")
                .header(IDEMPOTENT_REPLAYED, "true")
                .body(body.into())?),
        }
    }

    fn response_metadata() -> ApiEndpointResponse {
        R::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        match self {
            Reply::Ok(r) => r.status_code(),
            Reply::Err(e) => e.status().as_status(),
            Reply::Replayed { status, .. } => *status,
            Reply::ReplayedStream { .. } => StatusCode::OK,
        }
    }
}

/// The answer of a chat: the whole [`ChatResponse`] as JSON, or a
/// `text/event-stream` body. Dropshot has no event-stream response type and
/// documents the JSON answer; [`crate::openapi()`] adds the event-stream media
/// type to the spec, its events' data typed as
/// [`ChatChunk`](crate::types::ChatChunk) and
/// [`ChatErrorEvent`](crate::types::ChatErrorEvent) (the generated client keeps
/// to the JSON answer; its `stream` module reads the events).
///
/// `T`: the JSON answer: a session chat's [`ChatResponse`], or on `/v1` a
/// [`ChatCompletion`](crate::types::ChatCompletion).
pub enum ChatAnswer<T = ChatResponse> {
    Json(T),
    Stream(Body),
}

impl<T: serde::Serialize + schemars::JsonSchema + Send + Sync + 'static> HttpResponse for ChatAnswer<T> {
    fn to_result(self) -> Result<http::Response<Body>, HttpError> {
        match self {
            ChatAnswer::Json(r) => HttpResponseOk(r).to_result(),
            ChatAnswer::Stream(body) => Ok(http::Response::builder()
                .status(StatusCode::OK)
                .header(http::header::CONTENT_TYPE, "text/event-stream")
                .header(http::header::CACHE_CONTROL, "no-cache")
                .body(body)?),
        }
    }

    fn response_metadata() -> ApiEndpointResponse {
        HttpResponseOk::<T>::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::OK
    }
}

/// The answer of a transitions stream: a `text/event-stream` body, one event
/// per [`Transition`](crate::types::Transition). Dropshot has no event-stream
/// response type: the spec's answer is rewritten by [`crate::openapi()`] to
/// the event-stream media type (the generated client reads it as bytes; its
/// `stream` module parses the events).
pub struct EventStream(pub Body);

impl HttpResponse for EventStream {
    fn to_result(self) -> Result<http::Response<Body>, HttpError> {
        Ok(http::Response::builder()
            .status(StatusCode::OK)
            .header(http::header::CONTENT_TYPE, "text/event-stream")
            .header(http::header::CACHE_CONTROL, "no-cache")
            .body(self.0)?)
    }

    fn response_metadata() -> ApiEndpointResponse {
        HttpResponseOk::<crate::types::Transition>::response_metadata()
    }

    fn status_code(&self) -> StatusCode {
        StatusCode::OK
    }
}

/// Dropshot's answer that switches a connection to WebSocket (a 101 with
/// the handshake's headers), which it makes but does not name: the success
/// type of [`dropshot::WebsocketEndpointResult`].
pub type SwitchingToWebsocket = <dropshot::WebsocketEndpointResult as Success>::Ok;

/// The success type of a `Result`.
pub trait Success {
    type Ok;
}

impl<T, E> Success for Result<T, E> {
    type Ok = T;
}

impl<R> Reply<R> {
    /// This answer on a `/v1` route: its error in OpenAI's shape.
    pub fn openai(self) -> Reply<R, crate::error::OpenAiError> {
        match self {
            Reply::Ok(r) => Reply::Ok(r),
            Reply::Err(e) => Reply::Err(e.into()),
            Reply::Replayed { status, body } => Reply::Replayed { status, body },
            Reply::ReplayedStream { body } => Reply::ReplayedStream { body },
        }
    }
}
