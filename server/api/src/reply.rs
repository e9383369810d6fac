//! `Reply<R>`: a handler's answer, success or error, with full control of headers.
//!
//! Dropshot turns a handler's `Err` into a response with no way to add headers,
//! but a 401 must carry `WWW-Authenticate` and every error body must carry the
//! request id. So handlers answer `Ok(Reply::Err(..))` for their own errors; the
//! `Err` channel of the handler is left to extractor failures. The spec still
//! documents `R` as the success response and `ApiError` as the error schema.

use dropshot::{ApiEndpointResponse, Body, HttpError, HttpResponse, HttpResponseOk};
use http::StatusCode;

use crate::error::ApiError;
use crate::types::chat::ChatResponse;

pub enum Reply<R> {
    Ok(R),
    Err(ApiError),
    /// The remembered answer of an earlier request with the same
    /// `Idempotency-Key`: its status and JSON body, byte for byte.
    Replayed {
        status: StatusCode,
        body: String,
    },
}

/// The header that marks a [`Reply::Replayed`] answer.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

impl<R: HttpResponse> HttpResponse for Reply<R> {
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
                if let ApiError::Other { retry_after: Some(after), .. } = &e
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
pub enum ChatAnswer {
    Json(ChatResponse),
    Stream(Body),
}

impl HttpResponse for ChatAnswer {
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
        HttpResponseOk::<ChatResponse>::response_metadata()
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
