//! Between the provider's wire types and the contract's: messages, tool
//! calls, chunks, usage, and the provider's errors.

use uuid::Uuid;

use super::super::Error;
use super::super::history::HistoryItem;
use super::super::parts::wire_part;
use crate::api::types::{
    ChatChunk, ChatChunkChoice, ChatDelta, ChatFunctionCallDelta, ChatToolCallDelta, ChatUsage,
};
use crate::api::types::{
    CreateMessageRequest, FunctionCall, Message, MessagePart, Role, ToolCall, ToolCallType,
};
use crate::models::{self, NoProvider, UpstreamError, count_chat_tokens, wire};

impl From<NoProvider> for Error {
    fn from(e: NoProvider) -> Self {
        Error::NoModelProvider(e.to_string())
    }
}

impl From<UpstreamError> for Error {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Timeout => Error::UpstreamTimeout(
                "the model provider did not answer in time (models.request_timeout_s, \
                 or models.stream_idle_timeout_s when streaming)"
                    .into(),
            ),
            UpstreamError::RateLimited { message, retry_after } => {
                let when = match &retry_after {
                    Some(s) if s.bytes().all(|b| b.is_ascii_digit()) => format!("retry in {s} s"),
                    Some(date) => format!("retry after {date}"),
                    None => "retry later".to_owned(),
                };
                Error::RateLimited {
                    message: format!("the model provider is rate limiting requests: {message}; {when}"),
                    retry_after,
                }
            }
            other => Error::Upstream(other.to_string()),
        }
    }
}

fn to_wire_role(role: Role) -> wire::Role {
    match role {
        Role::System => wire::Role::System,
        Role::User => wire::Role::User,
        Role::Assistant => wire::Role::Assistant,
        Role::Tool => wire::Role::Tool,
    }
}

fn contract_role(role: wire::Role) -> Role {
    match role {
        wire::Role::System => Role::System,
        wire::Role::User => Role::User,
        wire::Role::Assistant => Role::Assistant,
        wire::Role::Tool => Role::Tool,
    }
}

pub fn to_wire_call(c: &ToolCall) -> wire::ToolCall {
    wire::ToolCall {
        id: c.id.clone(),
        kind: "function".into(),
        function: wire::FunctionCall {
            name: c.function.name.clone(),
            arguments: c.function.arguments.clone(),
        },
    }
}

pub fn from_wire_call(c: &wire::ToolCall) -> ToolCall {
    ToolCall {
        id: c.id.clone(),
        kind: ToolCallType::Function,
        function: FunctionCall { name: c.function.name.clone(), arguments: c.function.arguments.clone() },
    }
}

fn to_wire_message(
    role: Role,
    content: &str,
    parts: Option<&[MessagePart]>,
    name: Option<&String>,
    calls: Option<&Vec<ToolCall>>,
    call_id: Option<&String>,
) -> wire::ChatMessage {
    let content = match parts {
        Some(parts) => Some(wire::Content::Parts(parts.iter().map(wire_part).collect())),
        // An assistant message that only calls tools has no text.
        None if content.is_empty() && calls.is_some() => None,
        None => Some(wire::Content::Text(content.to_owned())),
    };
    wire::ChatMessage {
        role: to_wire_role(role),
        content,
        name: name.cloned(),
        tool_calls: calls.map(|cs| cs.iter().map(to_wire_call).collect()),
        tool_call_id: call_id.cloned(),
        ..wire::ChatMessage::default()
    }
}

/// A stored message as the provider is sent it.
pub fn history_message(m: &Message) -> wire::ChatMessage {
    to_wire_message(
        m.role,
        &m.content,
        m.parts.as_deref(),
        m.name.as_ref(),
        m.tool_calls.as_ref(),
        m.tool_call_id.as_ref(),
    )
}

/// A stored message as the history cache keeps it.
pub fn history_item(m: &Message) -> HistoryItem {
    HistoryItem::new((m.created_at, m.id), history_message(m), m.token_count.max(0) as usize)
}

/// A new message as the provider is sent it.
pub fn new_message(m: &CreateMessageRequest) -> wire::ChatMessage {
    to_wire_message(
        m.role,
        &m.content,
        m.parts.as_deref(),
        m.name.as_ref(),
        m.tool_calls.as_ref(),
        m.tool_call_id.as_ref(),
    )
}

/// The provider's reply as the assistant message a turn saves.
pub fn reply_message(reply: &wire::ChatMessage) -> CreateMessageRequest {
    let calls = reply.tool_calls.as_ref().filter(|c| !c.is_empty());
    CreateMessageRequest {
        role: Role::Assistant,
        content: reply.content_text().map(|t| t.into_owned()).unwrap_or_default(),
        name: None,
        tool_calls: calls.map(|cs| cs.iter().map(from_wire_call).collect()),
        tool_call_id: None,
        metadata: None,
        parts: None,
    }
}

/// The contract's chunk from the provider's.
pub fn contract_chunk(chunk: wire::CompletionChunk) -> ChatChunk {
    let choices = chunk
        .choices
        .into_iter()
        .map(|c| ChatChunkChoice {
            index: c.index,
            finish_reason: c.finish_reason,
            delta: contract_delta(c.delta),
        })
        .collect();
    // A provider may report usage on a chunk with choices too: passed on as sent.
    let usage = chunk.usage.map(contract_usage);
    ChatChunk { id: chunk.id, model: chunk.model, choices, usage, ..ChatChunk::default() }
}

/// The contract's delta from the provider's.
pub fn contract_delta(delta: wire::Delta) -> ChatDelta {
    ChatDelta {
        role: delta.role.map(contract_role),
        content: delta.content,
        refusal: delta.refusal,
        reasoning_content: delta.reasoning_content,
        tool_calls: delta.tool_calls.map(|calls| {
            calls
                .into_iter()
                .map(|call| ChatToolCallDelta {
                    index: call.index,
                    id: call.id,
                    kind: call.kind,
                    function: call
                        .function
                        .map(|f| ChatFunctionCallDelta { name: f.name, arguments: f.arguments }),
                })
                .collect()
        }),
    }
}

/// The provider's token counts, in the contract's shape.
pub fn contract_usage(u: wire::Usage) -> ChatUsage {
    ChatUsage {
        prompt_tokens: u.prompt_tokens.into(),
        completion_tokens: u.completion_tokens.into(),
        total_tokens: u.total_tokens.into(),
    }
}

/// The usage the provider reported, or our own count of `request` and the
/// `completion` when it sent none.
pub fn usage_or_count(
    request: &wire::CompletionRequest,
    usage: Option<wire::Usage>,
    completion: &str,
) -> ChatUsage {
    match usage {
        Some(u) => contract_usage(u),
        None => {
            let prompt = count_chat_tokens(&request.messages) as i64;
            let completion = models::count_tokens(completion) as i64;
            ChatUsage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
            }
        }
    }
}

/// The provider's id of an answer, or ours when it sent none.
pub fn answer_id(upstream: &str) -> String {
    if upstream.is_empty() { format!("chatcmpl-{}", Uuid::now_v7().simple()) } else { upstream.to_owned() }
}

/// A template that does not render, as the error naming `what`.
pub fn template_error(what: &str, e: models::TemplateError) -> Error {
    Error::BadRequest(format!("{what}: {e}"))
}
