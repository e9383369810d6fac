//! The fake's answers: what each [`Behaviour`] makes of a chat completion
//! (whole, or streamed as SSE chunks, cut off, huge or endless) and of an
//! embeddings request. Serving, queueing and recording requests is the
//! parent module's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use sse_stream::{Sse, SseBody};

use super::{
    Behaviour, Body, BoxError, EMBEDDING_DIM, PIECE, Shared, embedding_for, fail, full, json_response, lock,
};
use crate::models::tokens::{count_chat_tokens, count_tokens};
use crate::models::wire::{ChatMessage, Content, ContentPart, Role};

/// What a chat answer consists of, streamed or not.
enum Answer {
    Text(Vec<String>, Duration),
    /// Calls of these tools (name, arguments), in one answer.
    ToolCalls(Vec<(String, String)>),
}

fn messages_of(body: &Value) -> Vec<ChatMessage> {
    body.get("messages").cloned().and_then(|m| serde_json::from_value(m).ok()).unwrap_or_default()
}

fn words(text: &str) -> Vec<String> {
    let chunks: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if chunks.is_empty() { vec![String::new()] } else { chunks }
}

/// A message's content as the fake reads it: its text, each image or file
/// part described in its place (`[image_url: https://…]`, `[image_url:
/// data:image/png;base64, 812 bytes, detail low]`, `[file: a.pdf, 120 bytes]`),
/// so that an answer shows what reached the model.
pub(super) fn content_of(m: &ChatMessage) -> String {
    match &m.content {
        None => String::new(),
        Some(Content::Text(text)) => text.clone(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => text.clone(),
                ContentPart::ImageUrl { image_url } => {
                    let url = &image_url.url;
                    let mut described = match url.split_once(',') {
                        Some((head, _)) if url.starts_with("data:") => {
                            format!("[image_url: {head}, {} bytes", url.len())
                        }
                        _ => format!("[image_url: {url}"),
                    };
                    if let Some(detail) = &image_url.detail {
                        described.push_str(&format!(", detail {detail}"));
                    }
                    described + "]"
                }
                ContentPart::File { file } => format!(
                    "[file: {}, {} bytes]",
                    file.filename.as_deref().unwrap_or("unnamed"),
                    file.file_data.as_ref().map_or(0, String::len)
                ),
                ContentPart::Other => "[other part]".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn echo_text(body: &Value) -> String {
    messages_of(body).iter().rev().find(|m| m.role == Role::User).map(content_of).unwrap_or_default()
}

/// [`Behaviour::Echo`]'s answer: the last user message's text; but a last
/// message `call <tool> <arguments>` naming one of the request's tools calls
/// it, and a last `tool` message is answered `the tool answered: <result>`
/// (so that a client can script a tool round trip through the default).
fn echo(body: &Value) -> Answer {
    let messages = messages_of(body);
    let last = messages.last();
    let content = last.map(content_of).unwrap_or_default();
    match last.map(|m| m.role) {
        Some(Role::Tool) => {
            return Answer::Text(words(&format!("the tool answered: {content}")), Duration::ZERO);
        }
        Some(Role::User) => {
            if let Some((name, arguments)) = content.strip_prefix("call ").and_then(|c| c.split_once(' ')) {
                let offered = body["tools"]
                    .as_array()
                    .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == name));
                if offered {
                    return Answer::ToolCalls(vec![(name.to_owned(), arguments.to_owned())]);
                }
            }
        }
        _ => {}
    }
    if let Some(object) = following_schema(body, &echo_text(body)) {
        return Answer::Text(words(&object), Duration::ZERO);
    }
    Answer::Text(words(&echo_text(body)), Duration::ZERO)
}

/// With `response_format: {"type": "json_schema", ...}`, the JSON object its
/// schema's properties make of `text` (a string property is the text, a number
/// its length in characters, a boolean `true`, anything else `null`), so that
/// a client can see the schema reached the model.
fn following_schema(body: &Value, text: &str) -> Option<String> {
    let format = body.get("response_format")?;
    if format["type"] != "json_schema" {
        return None;
    }
    let properties = format["json_schema"]["schema"]["properties"].as_object()?;
    let object: serde_json::Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| {
            let value = match schema["type"].as_str() {
                Some("string") => Value::String(text.to_owned()),
                Some("integer" | "number") => Value::from(text.chars().count()),
                Some("boolean") => Value::Bool(true),
                _ => Value::Null,
            };
            (name.clone(), value)
        })
        .collect();
    Some(Value::Object(object).to_string())
}

/// A text answer cut to the request's `max_tokens` (whole chunks, as many as
/// fit), as a provider stops at the limit; whether it was cut.
fn within_max_tokens(answer: Answer, body: &Value) -> (Answer, bool) {
    let (Answer::Text(chunks, delay), Some(max)) = (&answer, body.get("max_tokens").and_then(Value::as_u64))
    else {
        return (answer, false);
    };
    if count_tokens(&chunks.concat()) as u64 <= max {
        return (answer, false);
    }
    let mut kept = Vec::new();
    for chunk in chunks {
        kept.push(chunk.clone());
        if count_tokens(&kept.concat()) as u64 > max {
            kept.pop();
            break;
        }
    }
    (Answer::Text(kept, *delay), true)
}

/// [`Behaviour::CallMentionedTools`]'s call, when the last user message names an offered tool.
fn mentioned_tool(body: &Value) -> Option<Answer> {
    let messages = messages_of(body);
    let last = messages.last().filter(|m| m.role == Role::User)?;
    let text = content_of(last);
    let lower = text.to_lowercase();
    let tools = body["tools"].as_array()?;
    let function = tools.iter().map(|t| &t["function"]).find(|f| {
        f["name"].as_str().is_some_and(|name| {
            name.split(|c: char| !c.is_ascii_alphanumeric())
                .filter(|w| w.len() >= 4)
                .any(|w| lower.contains(&w.to_lowercase()))
        })
    })?;
    let arguments: serde_json::Map<String, Value> = function["parameters"]["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|p| (p.to_owned(), Value::String(text.clone())))
        .collect();
    Some(Answer::ToolCalls(vec![(
        function["name"].as_str()?.to_owned(),
        Value::Object(arguments).to_string(),
    )]))
}

pub(super) async fn chat(shared: &Arc<Shared>, body: &Value) -> Response<Body> {
    let behaviour = lock(&shared.queue).pop_front().unwrap_or_else(|| lock(&shared.default).clone());
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let answer = match behaviour {
        Behaviour::Text(text) => Answer::Text(words(&text), Duration::ZERO),
        Behaviour::Echo => echo(body),
        Behaviour::CallMentionedTools => mentioned_tool(body).unwrap_or_else(|| echo(body)),
        Behaviour::Summary => {
            Answer::Text(words(&format!("summary of {} messages", messages_of(body).len())), Duration::ZERO)
        }
        Behaviour::ToolCall { name, arguments } => Answer::ToolCalls(vec![(name, arguments)]),
        Behaviour::ToolCalls(calls) => Answer::ToolCalls(calls),
        Behaviour::ToolRounds { name, arguments, rounds, text } => {
            let messages = messages_of(body);
            let since_user = messages.iter().rev().take_while(|m| m.role != Role::User);
            let done = since_user.filter(|m| m.role == Role::Tool).count();
            let offered = body["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == name.as_str()));
            match (offered, done < rounds) {
                (false, _) => echo(body),
                (true, true) => {
                    let said = messages.iter().rev().find(|m| m.role == Role::User).map(content_of);
                    let arguments = arguments
                        .replace("{text}", &said.unwrap_or_default())
                        .replace("{round}", &(done + 1).to_string());
                    Answer::ToolCalls(vec![(name, arguments)])
                }
                (true, false) => Answer::Text(words(&text), Duration::ZERO),
            }
        }
        Behaviour::StreamWithDelays { chunks, delay } => Answer::Text(chunks, delay),
        Behaviour::Fail { status, body } => return fail(status, body),
        Behaviour::Hang(duration) => {
            tokio::time::sleep(duration).await;
            Answer::Text(words(&echo_text(body)), Duration::ZERO)
        }
        Behaviour::Garbage if stream => {
            let events = vec![
                (Duration::ZERO, Event::Data("this is not json".to_owned())),
                (Duration::ZERO, Event::Data("[DONE]".to_owned())),
            ];
            return sse_response(shared, events);
        }
        Behaviour::Garbage => {
            return full(StatusCode::OK, "application/json", "this is not json {");
        }
        Behaviour::CutStream { chunks_before_cut } => {
            return cut(shared, body, stream, chunks_before_cut);
        }
        Behaviour::Huge { bytes } => return huge(shared, stream, bytes),
        Behaviour::Endless => return endless(shared, stream),
        Behaviour::Json(answer) if stream => {
            let mut chunk = answer;
            if let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) {
                for choice in choices {
                    if let Some(message) = choice.as_object_mut().and_then(|c| c.remove("message")) {
                        choice["delta"] = message;
                    }
                }
            }
            chunk["object"] = json!("chat.completion.chunk");
            let events = vec![
                (Duration::ZERO, Event::Data(chunk.to_string())),
                (Duration::ZERO, Event::Data("[DONE]".to_owned())),
            ];
            return sse_response(shared, events);
        }
        Behaviour::Json(answer) => return json_response(StatusCode::OK, &answer),
        Behaviour::Chunks(chunks) if stream => {
            let mut events: Vec<(Duration, Event)> =
                chunks.iter().map(|c| (Duration::ZERO, Event::Data(c.to_string()))).collect();
            events.push((Duration::ZERO, Event::Data("[DONE]".to_owned())));
            return sse_response(shared, events);
        }
        Behaviour::Chunks(_) => {
            return fail(500, json!({"error": {"message": "scripted chunks need stream: true"}}).to_string());
        }
        Behaviour::RateLimited { retry_after } => {
            let mut response = fail(
                429,
                json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}).to_string(),
            );
            if let Some(after) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from_str(&after).expect("a header value"));
            }
            return response;
        }
    };
    let (answer, cut) = within_max_tokens(answer, body);
    let model = body.get("model").and_then(Value::as_str).unwrap_or("fake-model").to_owned();
    let id = format!("chatcmpl-fake-{}", shared.ids.fetch_add(1, Ordering::SeqCst));
    let prompt_tokens = count_chat_tokens(&messages_of(body));
    if stream {
        let include_usage =
            body.pointer("/stream_options/include_usage").and_then(Value::as_bool) == Some(true);
        let events = stream_events(shared, &id, &model, answer, cut, prompt_tokens, include_usage);
        return sse_response(shared, events);
    }
    let (message, finish_reason, completion_tokens, delay) = match answer {
        Answer::Text(chunks, delay) => {
            let text = chunks.concat();
            let n = count_tokens(&text);
            let total_delay = delay * u32::try_from(chunks.len().saturating_sub(1)).unwrap_or(0);
            let finish_reason = if cut { "length" } else { "stop" };
            (json!({"role": "assistant", "content": text}), finish_reason, n, total_delay)
        }
        Answer::ToolCalls(calls) => {
            let n = calls.iter().map(|(name, arguments)| count_tokens(name) + count_tokens(arguments)).sum();
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|(name, arguments)| {
                    let call_id = format!("call_fake_{}", shared.ids.fetch_add(1, Ordering::SeqCst));
                    json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            (
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                "tool_calls",
                n,
                Duration::ZERO,
            )
        }
    };
    tokio::time::sleep(delay).await;
    json_response(
        StatusCode::OK,
        &json!({
            "id": id,
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage(prompt_tokens, completion_tokens),
        }),
    )
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

enum Event {
    Data(String),
    /// Break the connection (no terminating chunk, no `[DONE]`).
    Cut,
}

fn chunk_json(id: &str, model: &str, delta: Value, finish_reason: Option<&str>) -> String {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    })
    .to_string()
}

fn stream_events(
    shared: &Shared,
    id: &str,
    model: &str,
    answer: Answer,
    cut: bool,
    prompt_tokens: usize,
    include_usage: bool,
) -> Vec<(Duration, Event)> {
    let mut events = Vec::new();
    let mut push = |delay: Duration, data: String| events.push((delay, Event::Data(data)));
    let (finish_reason, completion_tokens) = match answer {
        Answer::Text(chunks, delay) => {
            let mut n = 0;
            for (i, text) in chunks.iter().enumerate() {
                n += count_tokens(text);
                let delta = if i == 0 {
                    json!({"role": "assistant", "content": text})
                } else {
                    json!({"content": text})
                };
                let wait = if i == 0 { Duration::ZERO } else { delay };
                push(wait, chunk_json(id, model, delta, None));
            }
            (if cut { "length" } else { "stop" }, n)
        }
        Answer::ToolCalls(calls) => {
            let mut n = 0;
            for (index, (name, arguments)) in calls.iter().enumerate() {
                let call_id = format!("call_fake_{}", shared.ids.fetch_add(1, Ordering::SeqCst));
                let mut delta = json!({"tool_calls": [
                    {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
                ]});
                if index == 0 {
                    delta["role"] = json!("assistant");
                    delta["content"] = Value::Null;
                }
                push(Duration::ZERO, chunk_json(id, model, delta, None));
                let mid = arguments
                    .char_indices()
                    .nth(arguments.chars().count() / 2)
                    .map_or(arguments.len(), |(i, _)| i);
                for piece in [&arguments[..mid], &arguments[mid..]] {
                    push(
                        Duration::ZERO,
                        chunk_json(
                            id,
                            model,
                            json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                            None,
                        ),
                    );
                }
                n += count_tokens(name) + count_tokens(arguments);
            }
            ("tool_calls", n)
        }
    };
    push(Duration::ZERO, chunk_json(id, model, json!({}), Some(finish_reason)));
    if include_usage {
        push(
            Duration::ZERO,
            json!({
                "id": id,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage(prompt_tokens, completion_tokens),
            })
            .to_string(),
        );
    }
    push(Duration::ZERO, "[DONE]".to_owned());
    events
}

/// Sends `events` as an SSE body from a separate task, so the client gets
/// each event as it is produced; counts completed and aborted streams.
fn sse_response(shared: &Arc<Shared>, events: Vec<(Duration, Event)>) -> Response<Body> {
    let (mut tx, rx) = mpsc::channel::<Result<Sse, BoxError>>(0);
    let shared = shared.clone();
    tokio::spawn(async move {
        for (delay, event) in events {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let item = match event {
                Event::Data(data) => Ok(Sse::default().data(data)),
                Event::Cut => Err(BoxError::from("cut by the fake upstream")),
            };
            let cut = item.is_err();
            if tx.send(item).await.is_err() {
                shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
                return;
            }
            if cut {
                return;
            }
        }
        tx.close_channel();
        shared.streams_completed.fetch_add(1, Ordering::SeqCst);
    });
    let mut response = Response::new(SseBody::new(rx).map_err(BoxError::from).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// [`Behaviour::Huge`], built directly: counting the tokens of megabytes of
/// text would take the fake longer than the test.
fn huge(shared: &Arc<Shared>, stream: bool, bytes: usize) -> Response<Body> {
    let id = "chatcmpl-huge";
    if !stream {
        let message = json!({"role": "assistant", "content": "x".repeat(bytes)});
        return json_response(
            StatusCode::OK,
            &json!({
                "id": id, "object": "chat.completion", "created": 0, "model": "fake-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": usage(1, bytes / 4),
            }),
        );
    }
    let mut events: Vec<(Duration, Event)> = (0..bytes.div_ceil(PIECE))
        .map(|i| {
            let text = "x".repeat(PIECE.min(bytes - i * PIECE));
            (Duration::ZERO, Event::Data(chunk_json(id, "fake-model", json!({"content": text}), None)))
        })
        .collect();
    events.push((Duration::ZERO, Event::Data(chunk_json(id, "fake-model", json!({}), Some("stop")))));
    events.push((Duration::ZERO, Event::Data("[DONE]".to_owned())));
    sse_response(shared, events)
}

/// [`Behaviour::Endless`]: the start of an answer, then text for as long as the client reads.
fn endless(shared: &Arc<Shared>, stream: bool) -> Response<Body> {
    let text = "x".repeat(PIECE);
    let (first, piece, content_type) = if stream {
        let chunk = chunk_json("chatcmpl-endless", "fake-model", json!({"content": text}), None);
        let event = Bytes::from(format!("data: {chunk}\n\n"));
        (event.clone(), event, "text/event-stream")
    } else {
        let start = r#"{"id":"chatcmpl-endless","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""#;
        (Bytes::from(start), Bytes::from(text), "application/json")
    };
    let (mut tx, rx) = mpsc::channel::<Result<Frame<Bytes>, BoxError>>(0);
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut next = first;
        while tx.send(Ok(Frame::data(next))).await.is_ok() {
            next = piece.clone();
        }
        shared.streams_aborted.fetch_add(1, Ordering::SeqCst);
    });
    let mut response = Response::new(StreamBody::new(rx).boxed_unsync());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn cut(shared: &Arc<Shared>, body: &Value, stream: bool, chunks_before_cut: usize) -> Response<Body> {
    let text: Vec<String> = (0..chunks_before_cut).map(|i| format!("part{i} ")).collect();
    if stream {
        let model = body.get("model").and_then(Value::as_str).unwrap_or("fake-model");
        let mut events: Vec<(Duration, Event)> = text
            .iter()
            .map(|t| {
                (Duration::ZERO, Event::Data(chunk_json("chatcmpl-cut", model, json!({"content": t}), None)))
            })
            .collect();
        events.push((Duration::from_millis(20), Event::Cut));
        return sse_response(shared, events);
    }
    let partial = format!(
        r#"{{"id":"chatcmpl-cut","object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"{}"#,
        text.concat()
    );
    // Let the headers and the partial body reach the client before the cut.
    let frames =
        futures::stream::iter([Ok(Frame::data(Bytes::from(partial)))]).chain(futures::stream::once(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err(BoxError::from("cut by the fake upstream"))
        }));
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

pub(super) async fn embeddings(shared: &Shared, body: &Value) -> Response<Body> {
    let behaviour = lock(&shared.embedding_queue).pop_front();
    match behaviour {
        Some(Behaviour::Fail { status, body }) => return fail(status, body),
        Some(Behaviour::Garbage) => {
            return full(StatusCode::OK, "application/json", "this is not json {");
        }
        Some(Behaviour::Hang(duration)) => tokio::time::sleep(duration).await,
        _ => {}
    }
    let inputs: Vec<String> = match body.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            items.iter().map(|i| i.as_str().unwrap_or_default().to_owned()).collect()
        }
        _ => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": {"message": "'input' must be a string or an array of strings", "type": "invalid_request_error"}}),
            );
        }
    };
    let tokens: usize = inputs.iter().map(|i| count_tokens(i)).sum();
    // Shortened (and normalised again) to `dimensions`, as OpenAI's text-embedding-3
    // models do; more dimensions than it has are ignored, as other models do.
    let dimensions =
        body.get("dimensions").and_then(Value::as_u64).filter(|d| (1..=EMBEDDING_DIM as u64).contains(d));
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let mut v = embedding_for(text);
            if let Some(d) = dimensions {
                v.truncate(d as usize);
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                if norm > 0.0 {
                    v.iter_mut().for_each(|x| *x /= norm);
                }
            }
            json!({"object": "embedding", "index": i, "embedding": v})
        })
        .collect();
    json_response(
        StatusCode::OK,
        &json!({
            "object": "list",
            "data": data,
            "model": body.get("model").cloned().unwrap_or(Value::Null),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
    )
}

/// `GET /v1/models`: the names set, unless a scripted failure comes first.
pub(super) async fn models(shared: &Shared) -> Response<Body> {
    let behaviour = lock(&shared.models_queue).pop_front();
    match behaviour {
        Some(Behaviour::Fail { status, body }) => return fail(status, body),
        Some(Behaviour::Garbage) => return full(StatusCode::OK, "application/json", "this is not json {"),
        Some(Behaviour::Hang(duration)) => tokio::time::sleep(duration).await,
        _ => {}
    }
    let data: Vec<Value> = lock(&shared.models)
        .iter()
        .map(|id| json!({"id": id, "object": "model", "created": 1700000000, "owned_by": "fake"}))
        .collect();
    json_response(StatusCode::OK, &json!({"object": "list", "data": data}))
}
