//! The WebSocket mode of `/v1/responses` (the Open Responses WebSocket
//! transport): on one connection, `response.create` messages answered one
//! after the other, each by the events a streamed response sends.
//!
//! The handler authenticates the upgrade ([`super::openai`]); [`serve`] then
//! owns the connection. It reads a message and checks it as
//! `POST /v1/responses` checks its body (the same schema, the same
//! unsupported features), runs the domain's streamed response
//! ([`App::response_stream`]) with the connection's memory of its
//! `store: false` responses ([`Chains`]), and sends each event as one text
//! message. While a response runs, the client's next messages wait (at most
//! [`MAX_WAITING`]); a client that goes away stops the response (nothing is
//! saved), as a server that shuts down does. A message that cannot start a
//! response is answered by one error message ([`ResponseSocketError`]), and
//! the connection goes on.
//!
//! Bounded: a message over [`Limits::max_message_bytes`] closes the
//! connection (1009), as does [`Limits::idle_timeout`] without a message
//! while no response runs (1000), and [`Limits::lifetime`] (after an error
//! `websocket_connection_limit_reached`, as the Open Responses specification
//! asks).

use std::collections::VecDeque;
use std::time::Duration;

use dropshot::{ErrorStatusCode, WebsocketChannelResult, WebsocketConnection, WebsocketConnectionRaw};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::Value;
use slog::{Logger, error};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message, Utf8Bytes};

use super::error::api_error;
use super::stream::failed_event;
use crate::api::types::{CreateResponseRequest, ResponseSocketError};
use crate::api::validate::{Source, validate_value};
use crate::api::{ApiError, OpenAiError};
use crate::app::responses::Chains;
use crate::app::{self, App, Tenant};

/// How long a connection may stay open (the Open Responses specification's 60 minutes).
pub const LIFETIME: Duration = Duration::from_secs(60 * 60);
/// How many messages may wait while a response runs.
pub const MAX_WAITING: usize = 16;

/// The bounds of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest message (the server's `request_body_max_bytes`).
    pub max_message_bytes: usize,
    /// How long the connection may go without a message while no response runs.
    pub idle_timeout: Duration,
    /// How long the connection may stay open.
    pub lifetime: Duration,
}

type Socket = WebSocketStream<WebsocketConnectionRaw>;

/// Serves one upgraded connection of the tenant `tenant` until it closes.
pub async fn serve(
    app: App,
    tenant: Tenant,
    conn: WebsocketConnection,
    limits: Limits,
    closing: watch::Receiver<bool>,
    log: Logger,
) -> WebsocketChannelResult {
    let config = WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes));
    let socket = Socket::from_raw_socket(conn.into_inner(), Role::Server, Some(config)).await;
    let (out, incoming) = socket.split();
    let connection = Connection {
        app,
        tenant,
        chains: Chains::default(),
        out,
        incoming,
        waiting: VecDeque::new(),
        closing,
        limits,
        log,
    };
    // A connection that breaks is no error of the server's.
    let _ = connection.run().await;
    Ok(())
}

/// A connection being served.
struct Connection {
    app: App,
    tenant: Tenant,
    /// What the connection remembers of its `store: false` responses.
    chains: Chains,
    out: SplitSink<Socket, Message>,
    incoming: SplitStream<Socket>,
    /// The messages that came while a response ran, in order.
    waiting: VecDeque<Utf8Bytes>,
    closing: watch::Receiver<bool>,
    limits: Limits,
    log: Logger,
}

/// Whether the connection goes on after a response.
enum After {
    Next,
    Closed,
}

impl Connection {
    async fn run(mut self) -> Result<(), tungstenite::Error> {
        let ends = Instant::now() + self.limits.lifetime;
        loop {
            let text = match self.waiting.pop_front() {
                Some(text) => text,
                None => match self.next_message(ends).await? {
                    Some(text) => text,
                    None => return Ok(()),
                },
            };
            if Instant::now() >= ends {
                return self.limit_reached().await;
            }
            let req = match request_of(text.as_str()) {
                Ok(req) => req,
                Err(e) => {
                    self.send(&e).await?;
                    continue;
                }
            };
            if let After::Closed = self.respond(req).await? {
                return Ok(());
            }
        }
    }

    /// The next message, once no response runs: `None` when the connection
    /// ends (the client closed it, it was idle too long, its time is up, or
    /// the server shuts down).
    async fn next_message(&mut self, ends: Instant) -> Result<Option<Utf8Bytes>, tungstenite::Error> {
        if *self.closing.borrow() {
            return self.close(CloseCode::Away, "the server is shutting down").await.map(|()| None);
        }
        loop {
            let idle = Instant::now() + self.limits.idle_timeout;
            tokio::select! {
                _ = self.closing.changed() => {
                    return self.close(CloseCode::Away, "the server is shutting down").await.map(|()| None);
                }
                () = tokio::time::sleep_until(ends) => return self.limit_reached().await.map(|()| None),
                () = tokio::time::sleep_until(idle) => {
                    let reason = format!(
                        "no message for {} s (the server's websocket_idle_timeout_s)",
                        self.limits.idle_timeout.as_secs()
                    );
                    return self.close(CloseCode::Normal, &reason).await.map(|()| None);
                }
                message = self.incoming.next() => match self.read(message).await? {
                    Read::Text(text) => return Ok(Some(text)),
                    Read::Other => continue,
                    Read::End => return Ok(None),
                },
            }
        }
    }

    /// Runs one response, sending its events as they come. Messages that
    /// come meanwhile wait for their turn. A connection that ends does not
    /// stop it: it runs to its end, unseen, and is saved (see [`finish`]).
    async fn respond(&mut self, req: CreateResponseRequest) -> Result<After, tungstenite::Error> {
        let started = self.app.response_stream(self.tenant, req, Some(self.chains.clone())).await;
        let mut events = match started {
            Ok(events) => events,
            Err(e) => {
                let e = self.socket_error(e);
                self.send(&e).await?;
                return Ok(After::Next);
            }
        };
        loop {
            tokio::select! {
                biased;
                _ = self.closing.changed() => {
                    self.close(CloseCode::Away, "the server is shutting down").await?;
                    return Ok(After::Closed);
                }
                message = self.incoming.next() => match self.read(message).await? {
                    Read::Text(text) if self.waiting.len() < MAX_WAITING => self.waiting.push_back(text),
                    Read::Text(_) => {
                        let e = error_message(
                            ErrorStatusCode::TOO_MANY_REQUESTS,
                            "too_many_waiting",
                            format!(
                                "{MAX_WAITING} messages already wait for the response under way: \
                                 this one is dropped; send the next when a response has ended"
                            ),
                            None,
                        );
                        self.send(&e).await?;
                    }
                    Read::Other => {}
                    Read::End => {
                        finish(events);
                        return Ok(After::Closed);
                    }
                },
                event = events.next() => match event {
                    None => return Ok(After::Next),
                    Some(Ok(event)) => {
                        if let Err(e) = self.send(&event).await {
                            finish(events);
                            return Err(e);
                        }
                    }
                    Some(Err(failure)) => {
                        self.send(&failed_event(failure)).await?;
                        return Ok(After::Next);
                    }
                },
            }
        }
    }

    /// What a read from the client means.
    async fn read(
        &mut self,
        message: Option<Result<Message, tungstenite::Error>>,
    ) -> Result<Read, tungstenite::Error> {
        match message {
            Some(Ok(Message::Text(text))) => Ok(Read::Text(text)),
            Some(Ok(Message::Binary(_))) => {
                let e = error_message(
                    ErrorStatusCode::BAD_REQUEST,
                    "invalid_message",
                    "binary messages are not read: send each response.create as a JSON text message".into(),
                    None,
                );
                self.send(&e).await?;
                Ok(Read::Other)
            }
            // Pings are answered by the socket itself.
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => Ok(Read::Other),
            Some(Ok(Message::Close(_))) => {
                let _ = self.out.close().await;
                Ok(Read::End)
            }
            Some(Err(tungstenite::Error::Capacity(e))) => {
                let reason = format!("{e} (the server's request_body_max_bytes)");
                self.close(CloseCode::Size, &reason).await?;
                Ok(Read::End)
            }
            Some(Err(_)) | None => Ok(Read::End),
        }
    }

    /// Says the connection's time is up, and closes it.
    async fn limit_reached(&mut self) -> Result<(), tungstenite::Error> {
        let minutes = self.limits.lifetime.as_secs() / 60;
        let e = error_message(
            ErrorStatusCode::BAD_REQUEST,
            "websocket_connection_limit_reached",
            format!("a connection stays open {minutes} minutes at most: open a new one"),
            None,
        );
        self.send(&e).await?;
        self.close(CloseCode::Normal, "the connection's time is up").await
    }

    async fn send(&mut self, message: &impl Serialize) -> Result<(), tungstenite::Error> {
        let text = serde_json::to_string(message).expect("a message serialises");
        self.out.send(Message::text(text)).await
    }

    async fn close(&mut self, code: CloseCode, reason: &str) -> Result<(), tungstenite::Error> {
        // A reason is at most 123 bytes.
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let frame = CloseFrame { code, reason: reason[..end].into() };
        match self.out.send(Message::Close(Some(frame))).await {
            Ok(()) | Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A domain error as the message that answers it: the status and body
    /// it has on `POST /v1/responses`, with the field it names as `param`
    /// (and OpenAI's code for a missing previous response).
    fn socket_error(&self, e: app::Error) -> ResponseSocketError {
        if let app::Error::Internal(m) = &e {
            error!(self.log, "internal error"; "error" => m.as_str());
        }
        envelope(OpenAiError::from(api_error(e, "")))
    }
}

/// What [`Connection::read`] read.
enum Read {
    Text(Utf8Bytes),
    /// Nothing for the connection to act on (a ping, a binary message answered).
    Other,
    /// The connection ended.
    End,
}

/// The request a message carries: `{"type": "response.create", ...}` and
/// the body of `POST /v1/responses`, checked as that body is (`stream` is
/// implied). Anything else is the error message that answers it.
fn request_of(text: &str) -> Result<CreateResponseRequest, Box<ResponseSocketError>> {
    let bad = |code: &str, message: String, param: Option<&str>| {
        Box::new(error_message(ErrorStatusCode::BAD_REQUEST, code, message, param.map(str::to_owned)))
    };
    let mut value: Value = serde_json::from_str(text)
        .map_err(|e| bad("invalid_json", format!("the message is not JSON: {e}"), None))?;
    let Some(fields) = value.as_object_mut() else {
        return Err(bad("invalid_message", "a message is a JSON object".into(), None));
    };
    match fields.remove("type") {
        Some(Value::String(kind)) if kind == "response.create" => {}
        kind => {
            let message = format!(
                "unknown message type {}: the one this server takes is \"response.create\"",
                kind.map_or("(none)".to_owned(), |k| k.to_string())
            );
            return Err(bad("unknown_message_type", message, Some("type")));
        }
    }
    // Every response on a socket streams.
    fields.remove("stream");
    let mut req = validate_value::<CreateResponseRequest>(Source::Body, &value)
        .map_err(|issues| Box::new(envelope(OpenAiError::from(ApiError::Validation(issues)))))?;
    if let Some((param, message)) = req.unsupported() {
        return Err(Box::new(envelope(OpenAiError::unsupported(param, message, ""))));
    }
    if req.background == Some(true) {
        let message = "background responses are created over HTTP (`POST /v1/responses`): omit `background`";
        return Err(Box::new(envelope(OpenAiError::unsupported("background".into(), message.into(), ""))));
    }
    req.stream = true;
    Ok(req)
}

fn error_message(
    status: ErrorStatusCode,
    code: &str,
    message: String,
    param: Option<String>,
) -> ResponseSocketError {
    envelope(OpenAiError { error: ApiError::new(status, code, message, ""), param })
}

/// `e` as an error message: its status and OpenAI's error body.
fn envelope(e: OpenAiError) -> ResponseSocketError {
    ResponseSocketError { kind: "error".into(), status: e.status().as_u16(), error: e.body().error }
}

/// Runs a response whose client went away to its end, its events dropped:
/// the client does not decide what is saved (a tool the server ran is never
/// lost). The turn's own bounds (the provider's timeouts, the answer's size,
/// the loop's rounds) end it.
fn finish(mut events: crate::app::responses::ResponseEvents) {
    tokio::spawn(async move { while events.next().await.is_some() {} });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_a_response_create_with_a_valid_body() {
        let req = request_of(r#"{"type": "response.create", "model": "m", "input": "hi", "stream": false}"#)
            .expect("a request");
        assert!(req.stream, "a socket's responses stream");
        let cases = [
            ("{", 400, "invalid_json", None),
            ("[]", 400, "invalid_message", None),
            (r#"{"model": "m", "input": "hi"}"#, 400, "unknown_message_type", Some("type")),
            (r#"{"type": "response.cancel"}"#, 400, "unknown_message_type", Some("type")),
            (r#"{"type": "response.create", "input": "hi"}"#, 400, "missing", Some("model")),
            (
                r#"{"type": "response.create", "model": "m", "input": "x", "background": true}"#,
                400,
                "unsupported",
                Some("background"),
            ),
        ];
        for (text, status, code, param) in cases {
            let e = request_of(text).expect_err(text);
            assert_eq!(e.kind, "error");
            assert_eq!(
                (e.status, e.error.code.as_deref(), e.error.param.as_deref()),
                (status, Some(code), param),
                "{text}: {}",
                e.error.message
            );
            assert_eq!(e.error.kind, "invalid_request_error");
        }
    }
}
