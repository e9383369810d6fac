//! Chat: one exchange between a session and its model, in six steps
//! (settings, recall, system message, history within the token budget, the
//! model call, the save). [`App::chat_prepare`] ([`super::chat_prepare`]) does steps 1 to 4 and holds the
//! session's chat lock; [`App::chat`] (whole answer) and
//! [`App::chat_stream`](super::chat_stream) (chunk by chunk) then call the
//! model, and both save through [`App::chat_save`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::chat_lock::SessionLease;
use super::history::HistoryItem;
use super::{App, Error, Result, Tenant};
use crate::api::types::{ChatSettings, DocReference};
use crate::api::types_chat::{ChatAnswerMessage, ChatChoice, ChatRequest, ChatResponse, ChatUsage};
use crate::api::types_sessions::{CreateMessageRequest, FunctionCall, Message, Role, ToolCall, ToolCallType};
use crate::models::{self, NoProvider, Provider, UpstreamError, count_chat_tokens, wire};

/// The most document snippets one chat recalls.
pub const RECALL_LIMIT: usize = 5;

/// One async lock per session that has had a chat: chats on one session run
/// one after the other, chats on different sessions in parallel. Keyed by
/// tenant too, so a request naming another tenant's session never waits for
/// (or holds up) that session's chats.
pub type ChatLocks = Arc<Mutex<HashMap<(Tenant, Uuid), Arc<tokio::sync::Mutex<()>>>>>;

/// A chat ready for the model call: the request to send and what to save.
/// Holds the session's chat lock (and, on a shared store, its lease: see
/// [`super::chat_lock`]) until dropped.
pub struct PreparedChat {
    pub provider: Provider,
    pub request: wire::CompletionRequest,
    pub docs: Vec<DocReference>,
    pub save: bool,
    pub(super) tenant: Tenant,
    pub(super) session: Uuid,
    pub(super) new_messages: Vec<CreateMessageRequest>,
    pub(super) lease: Option<SessionLease>,
    pub(super) _lock: OwnedMutexGuard<()>,
}

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

/// The agent's default settings, each overridden by the request's.
pub fn merge_settings(agent: Option<&ChatSettings>, request: &ChatSettings) -> ChatSettings {
    let d = agent.cloned().unwrap_or_default();
    let r = request.clone();
    ChatSettings {
        temperature: r.temperature.or(d.temperature),
        top_p: r.top_p.or(d.top_p),
        max_tokens: r.max_tokens.or(d.max_tokens),
        frequency_penalty: r.frequency_penalty.or(d.frequency_penalty),
        presence_penalty: r.presence_penalty.or(d.presence_penalty),
        stop: r.stop.or(d.stop),
        seed: r.seed.or(d.seed),
    }
}

/// `request` with the sampling settings (temperature, top_p, max_tokens, stop,
/// seed, penalties) of `settings`, as chats and prompt steps send them.
pub fn with_sampling(request: wire::CompletionRequest, settings: ChatSettings) -> wire::CompletionRequest {
    wire::CompletionRequest {
        temperature: settings.temperature.map(|v| v as f32),
        top_p: settings.top_p.map(|v| v as f32),
        max_tokens: settings.max_tokens.map(|v| v.clamp(1, u32::MAX as i64) as u32),
        stop: settings.stop,
        seed: settings.seed,
        frequency_penalty: settings.frequency_penalty.map(|v| v as f32),
        presence_penalty: settings.presence_penalty.map(|v| v as f32),
        ..request
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

pub(super) fn to_wire_call(c: &ToolCall) -> wire::ToolCall {
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
    name: Option<&String>,
    calls: Option<&Vec<ToolCall>>,
    call_id: Option<&String>,
) -> wire::ChatMessage {
    wire::ChatMessage {
        role: to_wire_role(role),
        // An assistant message that only calls tools has no text.
        content: if content.is_empty() && calls.is_some() { None } else { Some(content.to_owned()) },
        name: name.cloned(),
        tool_calls: calls.map(|cs| cs.iter().map(to_wire_call).collect()),
        tool_call_id: call_id.cloned(),
        reasoning_content: None,
    }
}

pub(super) fn history_message(m: &Message) -> wire::ChatMessage {
    to_wire_message(m.role, &m.content, m.name.as_ref(), m.tool_calls.as_ref(), m.tool_call_id.as_ref())
}

/// A stored message as the history cache keeps it.
pub(super) fn history_item(m: &Message) -> HistoryItem {
    HistoryItem::new((m.created_at, m.id), history_message(m), m.token_count.max(0) as usize)
}

pub(super) fn new_message(m: &CreateMessageRequest) -> wire::ChatMessage {
    to_wire_message(m.role, &m.content, m.name.as_ref(), m.tool_calls.as_ref(), m.tool_call_id.as_ref())
}

pub(super) fn template_error(what: &str, e: models::TemplateError) -> Error {
    Error::BadRequest(format!("{what}: {e}"))
}

impl App {
    /// Waits for the session's other chats to finish, then holds its lock.
    pub(super) async fn chat_lock(&self, t: Tenant, session: Uuid) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.chat_locks.lock().unwrap_or_else(|e| e.into_inner());
            if locks.len() > 4096 {
                // Forget the locks nobody holds or waits for.
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry((t, session)).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// Steps 5 and 6 without streaming: calls the model, then saves the exchange.
    pub async fn chat(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatResponse> {
        let prepared = self.chat_prepare(t, session, req).await?;
        let answer = prepared.provider.chat(&prepared.request).await?;
        let response = chat_response(&prepared, answer.clone());
        self.chat_save(&prepared, &answer, Some(&response)).await?;
        Ok(response)
    }

    /// Step 6: when `save`, appends the new messages and the answer in one commit
    /// (with `response`, the request's answer, remembered with its idempotency key,
    /// and the release of the session's lease).
    pub async fn chat_save(
        &self,
        prepared: &PreparedChat,
        answer: &wire::CompletionResponse,
        response: Option<&ChatResponse>,
    ) -> Result<()> {
        if !prepared.save {
            if let Some(lease) = &prepared.lease {
                lease.release().await;
            }
            return Ok(());
        }
        let mut messages = prepared.new_messages.clone();
        if let Some(m) = answer.message() {
            let calls = m.tool_calls.as_ref().filter(|c| !c.is_empty());
            messages.push(CreateMessageRequest {
                role: Role::Assistant,
                content: m.content.clone().unwrap_or_default(),
                name: None,
                tool_calls: calls.map(|cs| cs.iter().map(from_wire_call).collect()),
                tool_call_id: None,
                metadata: None,
            });
        }
        let release = match &prepared.lease {
            Some(lease) => vec![lease.release_op().await?],
            None => Vec::new(),
        };
        self.append_messages_with(prepared.tenant, prepared.session, messages, |_| response, release).await?;
        if let Some(lease) = &prepared.lease {
            lease.released().await;
        }
        Ok(())
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

/// The contract's answer from the provider's.
pub fn chat_response(prepared: &PreparedChat, answer: wire::CompletionResponse) -> ChatResponse {
    let usage = usage_or_count(&prepared.request, answer.usage, answer.text());
    ChatResponse {
        id: answer_id(&answer.id),
        created_at: Utc::now(),
        model: if answer.model.is_empty() { prepared.request.model.clone() } else { answer.model },
        choices: answer
            .choices
            .into_iter()
            .map(|c| ChatChoice {
                index: c.index.into(),
                finish_reason: c.finish_reason,
                message: ChatAnswerMessage {
                    role: Role::Assistant,
                    content: c.message.content,
                    tool_calls: c
                        .message
                        .tool_calls
                        .filter(|cs| !cs.is_empty())
                        .map(|cs| cs.iter().map(from_wire_call).collect()),
                },
            })
            .collect(),
        usage,
        docs: prepared.docs.clone(),
    }
}
