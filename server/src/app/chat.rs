//! Chat: one exchange between a session and its model, in six steps
//! (settings, recall, system message, history within the token budget, the
//! model call, the save). [`App::chat_prepare`] does steps 1 to 4 and holds the
//! session's chat lock; [`App::chat`] (whole answer) and
//! [`App::chat_stream`](super::chat_stream) (chunk by chunk) then call the
//! model, and both save through [`App::chat_save`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::history::{History, HistoryItem, Lookup};
use super::{App, Error, Result, Tenant};
use crate::api::types::{
    Agent, ChatSettings, DocOwner, DocReference, OwnerRole, SearchMode, SearchRequest, User,
};
use crate::api::types_chat::{
    ChatAnswerMessage, ChatChoice, ChatRequest, ChatResponse, ChatToolChoice, ChatUsage, ToolChoiceMode,
};
use crate::api::types_sessions::{
    ContextOverflow, CreateMessageRequest, FunctionCall, Message, Role, Session, ToolCall, ToolCallType,
};
use crate::api::types_tools::ToolType;
use crate::models::tokens::{REPLY_PRIMING_TOKENS, message_tokens};
use crate::models::{
    self, DEFAULT_SYSTEM_TEMPLATE, NoProvider, Provider, UpstreamError, count_chat_tokens, wire,
};
use crate::store::{Direction, ListQuery, SortBy};

/// The most document snippets one chat recalls.
pub const RECALL_LIMIT: usize = 5;

/// One async lock per session that has had a chat: chats on one session run
/// one after the other, chats on different sessions in parallel. Keyed by
/// tenant too, so a request naming another tenant's session never waits for
/// (or holds up) that session's chats.
pub type ChatLocks = Arc<Mutex<HashMap<(Tenant, Uuid), Arc<tokio::sync::Mutex<()>>>>>;

/// A chat ready for the model call: the request to send and what to save.
/// Holds the session's chat lock until dropped.
pub struct PreparedChat {
    pub provider: Provider,
    pub request: wire::CompletionRequest,
    pub docs: Vec<DocReference>,
    pub save: bool,
    tenant: Tenant,
    session: Uuid,
    new_messages: Vec<CreateMessageRequest>,
    _lock: OwnedMutexGuard<()>,
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

fn to_wire_role(role: Role) -> wire::Role {
    match role {
        Role::System => wire::Role::System,
        Role::User => wire::Role::User,
        Role::Assistant => wire::Role::Assistant,
        Role::Tool => wire::Role::Tool,
    }
}

fn to_wire_call(c: &ToolCall) -> wire::ToolCall {
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

fn history_message(m: &Message) -> wire::ChatMessage {
    to_wire_message(m.role, &m.content, m.name.as_ref(), m.tool_calls.as_ref(), m.tool_call_id.as_ref())
}

/// A stored message as the history cache keeps it.
pub(super) fn history_item(m: &Message) -> HistoryItem {
    HistoryItem::new((m.created_at, m.id), history_message(m), m.token_count.max(0) as usize)
}

fn new_message(m: &CreateMessageRequest) -> wire::ChatMessage {
    to_wire_message(m.role, &m.content, m.name.as_ref(), m.tool_calls.as_ref(), m.tool_call_id.as_ref())
}

fn template_error(what: &str, e: models::TemplateError) -> Error {
    Error::BadRequest(format!("{what}: {e}"))
}

impl App {
    /// Waits for the session's other chats to finish, then holds its lock.
    async fn chat_lock(&self, t: Tenant, session: Uuid) -> OwnedMutexGuard<()> {
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

    /// The session's history, oldest first, from the cache or the store.
    fn history(&self, t: Tenant, session: Uuid) -> Result<History> {
        let ticket = match self.history.lookup(t, session) {
            Lookup::Hit(history) => return Ok(history),
            Lookup::Miss(ticket) => ticket,
        };
        let mut items = Vec::new();
        loop {
            let q = ListQuery {
                limit: 1000,
                offset: items.len(),
                sort_by: SortBy::CreatedAt,
                direction: Direction::Asc,
                metadata_filter: None,
                max_bytes: None,
            };
            let page: Vec<Message> = match self.message_list(t, session, &q) {
                Ok(page) => page,
                Err(e) => {
                    self.history.forget(t, session);
                    return Err(e);
                }
            };
            let done = page.len() < 1000;
            items.extend(page.iter().map(history_item));
            if done {
                return Ok(self.history.loaded(t, session, ticket, items));
            }
        }
    }

    /// Step 2: the snippets of the agent's and the users' documents that best
    /// match `text` (hybrid search when an embedding model is configured, else
    /// text), best first, at most [`RECALL_LIMIT`].
    async fn recall(&self, t: Tenant, agent: Uuid, users: &[Uuid], text: &str) -> Result<Vec<DocReference>> {
        let text: String = text.chars().take(10_000).collect();
        let owners = std::iter::once(DocOwner { id: agent, role: OwnerRole::Agent })
            .chain(users.iter().map(|u| DocOwner { id: *u, role: OwnerRole::User }));
        let mut docs = Vec::new();
        for owner in owners {
            let req = SearchRequest {
                text: Some(text.clone()),
                vector: None,
                mode: Some(if self.embedder.is_some() { SearchMode::Hybrid } else { SearchMode::Text }),
                limit: RECALL_LIMIT as i64,
                alpha: 0.5,
                metadata_filter: None,
            };
            docs.extend(self.doc_search(t, owner, req).await?.docs);
        }
        docs.sort_by(|a, b| b.score.total_cmp(&a.score));
        docs.truncate(RECALL_LIMIT);
        Ok(docs)
    }

    /// Steps 1 to 4: settings, recall, system message, history within the budget.
    pub async fn chat_prepare(&self, t: Tenant, session_id: Uuid, req: ChatRequest) -> Result<PreparedChat> {
        let lock = self.chat_lock(t, session_id).await;
        let session: Session = self.session_get(t, session_id)?;
        let agent_id = match req.agent {
            Some(a) if !session.agents.contains(&a) => {
                return Err(Error::BadRequest(format!("agent {a} is not an agent of session {session_id}")));
            }
            Some(a) => a,
            None => session.agents[0],
        };
        let agent: Agent = self.agent_get(t, agent_id)?;
        let users: Vec<User> = session.users.iter().map(|u| self.user_get(t, *u)).collect::<Result<_>>()?;

        // 1. Settings and model.
        let settings = merge_settings(agent.default_settings.as_ref(), &req.settings);
        let model = req
            .model
            .clone()
            .or_else(|| (!agent.model.is_empty()).then(|| agent.model.clone()))
            .or_else(|| self.models.default_model().map(str::to_owned));
        let provider = match &model {
            Some(m) => self.models.resolve(m)?.clone(),
            None if self.models.is_empty() => return Err(self.models.resolve("").unwrap_err().into()),
            None => {
                return Err(Error::BadRequest(
                    "no model to use: send `model`, set the agent's `model`, or configure a default \
                     (models.default_model or AGENT_PLATFORM_DEFAULT_MODEL)"
                        .into(),
                ));
            }
        };
        let model = model.unwrap_or_default();

        // 2. Recall.
        let docs = if req.recall {
            let last_user = req.messages.iter().rev().find(|m| m.role == Role::User);
            match last_user {
                Some(m) if !m.content.trim().is_empty() => {
                    self.recall(t, agent_id, &session.users, &m.content).await?
                }
                _ => Vec::new(),
            }
        } else {
            Vec::new()
        };

        // 3. System message.
        let session_tools = self.session_tools(t, session_id)?;
        let mut tools: Vec<wire::ToolSpec> = session_tools
            .iter()
            .filter(|tool| tool.kind == ToolType::Function)
            .map(|tool| {
                let params = tool.function.as_ref().map(|f| Value::Object(f.parameters.clone()));
                let description = (!tool.description.is_empty()).then(|| tool.description.clone());
                wire::ToolSpec::function(
                    &tool.name,
                    description,
                    params.unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                )
            })
            .collect();
        for tool in req.tools.iter().flatten() {
            let params = tool.function.parameters.clone().map(Value::Object);
            tools.push(wire::ToolSpec::function(
                &tool.function.name,
                tool.function.description.clone(),
                params.unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            ));
        }
        let context = json!({
            "agent": agent,
            "user": users.first(),
            "users": users,
            "session": session,
            "tools": tools.iter().map(|t| json!({"name": t.function.name, "description": t.function.description})).collect::<Vec<_>>(),
            "docs": docs.iter().map(|d| json!({
                "id": d.id, "title": d.title, "content": d.snippet.content, "snippet": d.snippet.content, "score": d.score,
            })).collect::<Vec<_>>(),
        });
        let mut system = match &session.system_template {
            None => models::render(DEFAULT_SYSTEM_TEMPLATE, &context)
                .map_err(|e| Error::Internal(format!("the default system template: {e}")))?,
            Some(src) => {
                let mut text =
                    models::render(src, &context).map_err(|e| template_error("system_template", e))?;
                // The default template places the situation itself.
                if let Some(situation) = session.situation.as_deref().filter(|s| !s.is_empty()) {
                    text = format!("{}\n\n{situation}", text.trim_end());
                }
                text
            }
        };
        system = system.trim_end().to_owned();

        let mut new_messages = req.messages;
        if session.render_templates {
            for (i, m) in new_messages.iter_mut().enumerate() {
                if m.content.contains("{{") || m.content.contains("{%") {
                    m.content = models::render(&m.content, &context)
                        .map_err(|e| template_error(&format!("messages[{i}].content"), e))?;
                }
            }
        }

        // 4. History within the token budget. Each message's cost is known
        // (stored token counts), so the budget is kept with sums, not recounts.
        let system_msg = wire::ChatMessage::system(system);
        let history = self.history(t, session_id)?;
        let new_wire: Vec<wire::ChatMessage> = new_messages.iter().map(new_message).collect();
        let mut start = 0; // the oldest history message sent
        let mut summary = None;
        if let Some(budget) = session.token_budget {
            let budget = budget.max(0) as usize;
            // The prompt without history: system, new messages, the reply's priming.
            let fixed = message_tokens(&system_msg)
                + new_wire.iter().map(message_tokens).sum::<usize>()
                + REPLY_PRIMING_TOKENS;
            let total = fixed + history.iter().map(|h| h.tokens).sum::<usize>();
            if total > budget {
                if fixed > budget {
                    return Err(Error::BadRequest(format!(
                        "the system message and the new messages alone have {fixed} tokens, over the \
                         session's token_budget of {budget}"
                    )));
                }
                match session.context_overflow {
                    None => {
                        return Err(Error::BadRequest(format!(
                            "the prompt has {total} tokens, over the session's token_budget of {budget}; \
                             raise token_budget or set context_overflow to \"truncate\" or \"adaptive\""
                        )));
                    }
                    Some(ContextOverflow::Truncate) => start = drop_oldest(&history, 0, fixed, budget),
                    Some(ContextOverflow::Adaptive) => {
                        // Leave room for the summary: a quarter of the budget, at most 512 tokens.
                        let room = (budget / 4).min(512);
                        let target = budget.saturating_sub(room).max(fixed);
                        start = drop_oldest(&history, 0, fixed, target);
                        let dropped: Vec<_> = history[..start].iter().map(|h| h.message.clone()).collect();
                        let text = self.summarise(&provider, &model, &dropped, room).await?;
                        let message =
                            wire::ChatMessage::system(format!("Summary of the earlier conversation: {text}"));
                        let cost = message_tokens(&message);
                        // A summary longer than asked: drop more history, then the summary itself.
                        start = drop_oldest(&history, start, fixed + cost, budget);
                        let rest: usize = history[start..].iter().map(|h| h.tokens).sum();
                        if fixed + cost + rest <= budget {
                            summary = Some(message);
                        }
                    }
                }
            }
        }
        let mut messages = Vec::with_capacity(2 + history.len() - start + new_wire.len());
        messages.push(system_msg);
        messages.extend(summary);
        messages.extend(history[start..].iter().map(|h| h.message.clone()));
        messages.extend(new_wire);

        let tool_choice = req.tool_choice.map(|c| match c {
            ChatToolChoice::Mode(ToolChoiceMode::Auto) => wire::ToolChoice::auto(),
            ChatToolChoice::Mode(ToolChoiceMode::None) => wire::ToolChoice::none(),
            ChatToolChoice::Mode(ToolChoiceMode::Required) => wire::ToolChoice::required(),
            ChatToolChoice::Function(f) => wire::ToolChoice::function(f.function.name),
        });
        let request = wire::CompletionRequest {
            model,
            messages,
            tool_choice: if tools.is_empty() { None } else { tool_choice },
            tools: (!tools.is_empty()).then_some(tools),
            temperature: settings.temperature.map(|v| v as f32),
            top_p: settings.top_p.map(|v| v as f32),
            max_tokens: settings.max_tokens.map(|v| v.clamp(1, u32::MAX as i64) as u32),
            stop: settings.stop,
            seed: settings.seed,
            frequency_penalty: settings.frequency_penalty.map(|v| v as f32),
            presence_penalty: settings.presence_penalty.map(|v| v as f32),
            response_format: req.response_format.map(|f| serde_json::to_value(f).unwrap_or(Value::Null)),
            // As the provider sends it, so that it need not copy the request.
            stream: req.stream,
            stream_options: req.stream.then_some(wire::StreamOptions { include_usage: true }),
            ..wire::CompletionRequest::default()
        };
        Ok(PreparedChat {
            provider,
            request,
            docs,
            save: req.save,
            tenant: t,
            session: session_id,
            new_messages,
            _lock: lock,
        })
    }

    /// A summary of `dropped` written by the model, in at most `max_tokens` tokens.
    async fn summarise(
        &self,
        provider: &Provider,
        model: &str,
        dropped: &[wire::ChatMessage],
        max_tokens: usize,
    ) -> Result<String> {
        if dropped.is_empty() {
            return Ok(String::new());
        }
        let transcript: String = dropped
            .iter()
            .map(|m| format!("{}: {}\n", m.role.as_str(), m.content.as_deref().unwrap_or("")))
            .collect();
        let mut req = wire::CompletionRequest::new(
            model,
            vec![
                wire::ChatMessage::system(
                    "Summarise the following conversation in a few sentences, keeping the facts, \
                     names and decisions a reader would need to continue it.",
                ),
                wire::ChatMessage::user(transcript),
            ],
        );
        req.max_tokens = Some(max_tokens.max(16) as u32);
        let answer = provider.chat(&req).await?;
        Ok(answer.text().trim().to_owned())
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
    /// (with `response`, the request's answer, remembered with its idempotency key).
    pub async fn chat_save(
        &self,
        prepared: &PreparedChat,
        answer: &wire::CompletionResponse,
        response: Option<&ChatResponse>,
    ) -> Result<()> {
        if !prepared.save {
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
        self.append_messages(prepared.tenant, prepared.session, messages, response).await?;
        Ok(())
    }
}

/// Where the history sent starts when the prompt without history costs
/// `fixed` and must fit `limit`: the oldest messages from `from` on are
/// dropped until the rest fits, never leaving a `tool` message first (its
/// call would be gone).
fn drop_oldest(history: &[HistoryItem], from: usize, fixed: usize, limit: usize) -> usize {
    let mut rest: usize = history[from..].iter().map(|h| h.tokens).sum();
    let mut n = from;
    while n < history.len() && (fixed + rest > limit || history[n].message.role == wire::Role::Tool) {
        rest -= history[n].tokens;
        n += 1;
    }
    n
}

/// The usage the provider reported, or our own count when it sent none.
pub fn usage_of(prepared: &PreparedChat, usage: Option<wire::Usage>, completion: &str) -> ChatUsage {
    match usage {
        Some(u) => ChatUsage {
            prompt_tokens: u.prompt_tokens.into(),
            completion_tokens: u.completion_tokens.into(),
            total_tokens: u.total_tokens.into(),
        },
        None => {
            let prompt = count_chat_tokens(&prepared.request.messages) as i64;
            let completion = models::count_tokens(completion) as i64;
            ChatUsage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                total_tokens: prompt + completion,
            }
        }
    }
}

/// The contract's answer from the provider's.
pub fn chat_response(prepared: &PreparedChat, answer: wire::CompletionResponse) -> ChatResponse {
    let usage = usage_of(prepared, answer.usage, answer.text());
    ChatResponse {
        id: if answer.id.is_empty() { format!("chatcmpl-{}", Uuid::now_v7().simple()) } else { answer.id },
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
