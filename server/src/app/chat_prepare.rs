//! Preparing a chat (steps 1 to 4 of [`super::chat`]): the model, the recalled
//! docs, the system message, and the history that fits the token budget, as a
//! [`PreparedChat`] ready for the model call.

use serde_json::{Value, json};
use uuid::Uuid;

use super::chat::{
    PreparedChat, RECALL_LIMIT, history_item, merge_settings, new_message, template_error, with_sampling,
};
use super::history::{History, HistoryItem, Lookup};
use super::records::decode;
use super::{App, Error, Result, Tenant};
use crate::api::types::{
    Agent, ChatSettings, DocOwner, DocReference, OwnerRole, SearchMode, SearchRequest, User,
};
use crate::api::types_chat::{ChatRequest, ChatTool, ChatToolChoice, ResponseFormat, ToolChoiceMode};
use crate::api::types_sessions::{ContextOverflow, CreateMessageRequest, Message, Role, Session};
use crate::api::types_tools::{Tool, ToolType};
use crate::models::tokens::{REPLY_PRIMING_TOKENS, message_tokens};
use crate::models::{self, DEFAULT_SYSTEM_TEMPLATE, Provider, wire};
use crate::store::{Kind, ListQuery};

impl App {
    /// The session's history, oldest first, from the cache or the store.
    /// `version`: the session record's, read before (on a shared store; see
    /// [`super::history`]).
    pub(super) async fn history(&self, t: Tenant, session: Uuid, version: Option<u64>) -> Result<History> {
        let ticket = match self.history.lookup(t, session, version) {
            Lookup::Hit(history) => return Ok(history),
            Lookup::Miss(ticket) => ticket,
        };
        let mut items = Vec::new();
        let mut q = ListQuery::oldest_first(0, 1000);
        loop {
            let page: Vec<Message> = match self.message_list(t, session, &q).await {
                Ok(page) => page,
                Err(e) => {
                    self.history.forget(t, session);
                    return Err(e);
                }
            };
            let done = page.len() < 1000;
            // The next page goes on after this one's last message (through the index).
            q.after = page.last().map(|m| (m.created_at, m.id));
            items.extend(page.iter().map(history_item));
            if done {
                return Ok(self.history.loaded(t, session, ticket, version, items));
            }
        }
    }

    /// Step 2: the snippets of the agent's and the users' documents that best
    /// match `text` (hybrid search when an embedding model is configured, else
    /// text), best first, at most [`RECALL_LIMIT`].
    pub(super) async fn recall(
        &self,
        t: Tenant,
        agent: Uuid,
        users: &[Uuid],
        text: &str,
    ) -> Result<Vec<DocReference>> {
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
        let lease = self.session_lease(t, session_id).await?;
        let record = self.load(t, Kind::Session, session_id).await?;
        let session: Session = decode(&record)?;
        // What the cached history must be at (see `history`): only where other servers write.
        let version = self.store.shared().then_some(record.version);
        let agent_id = match req.agent {
            Some(a) if !session.agents.contains(&a) => {
                return Err(Error::BadRequest(format!("agent {a} is not an agent of session {session_id}")));
            }
            Some(a) => a,
            None => *session.agents.first().ok_or_else(|| {
                Error::BadRequest(format!(
                    "session {session_id} has no agent to answer (a conversation made through \
                     POST /v1/conversations): chat in it with an agent's id as the model through /v1"
                ))
            })?,
        };
        let agent: Agent = self.agent_get(t, agent_id).await?;
        let mut users: Vec<User> = Vec::with_capacity(session.users.len());
        for u in &session.users {
            users.push(self.user_get(t, *u).await?);
        }

        // 1. Settings and model.
        let settings = merge_settings(agent.default_settings.as_ref(), &req.settings);
        let (provider, model) = self.choose_model(req.model.as_deref(), &agent)?;
        // 2. Recall.
        let docs = if req.recall {
            self.recall_for(t, &req.messages, agent_id, &session).await?
        } else {
            Vec::new()
        };
        // 3. System message (and the new messages, rendered as templates when the session asks).
        let tools = tool_specs(&self.session_tools(t, session_id).await?, req.tools.as_deref());
        let context = template_context(&agent, &users, Some(&session), &tools, &docs);
        let system = wire::ChatMessage::system(system_message(&session, &context)?);
        let new_messages = render_new_messages(&session, req.messages, &context)?;
        // 4. History within the token budget.
        let new_wire: Vec<wire::ChatMessage> = new_messages.iter().map(new_message).collect();
        let history = self.history(t, session_id, version).await?;
        let messages =
            self.fit_history(&history, &session, &provider, &model, vec![system], new_wire).await?;

        let request = completion_request(
            model,
            messages,
            tools,
            settings,
            req.tool_choice,
            req.response_format,
            req.stream,
        );
        Ok(PreparedChat {
            provider,
            request,
            docs,
            save: req.save,
            tenant: t,
            session: session_id,
            new_messages,
            lease,
            _lock: lock,
        })
    }

    /// The model to call, and its provider: the request's, else the agent's,
    /// else the configured default.
    pub(crate) fn choose_model(&self, requested: Option<&str>, agent: &Agent) -> Result<(Provider, String)> {
        let model = requested
            .map(str::to_owned)
            .or_else(|| (!agent.model.is_empty()).then(|| agent.model.clone()))
            .or_else(|| self.models.default_model().map(str::to_owned));
        match model {
            Some(m) => Ok((self.models.resolve(&m)?.clone(), m)),
            None if self.models.is_empty() => Err(self.models.resolve("").unwrap_err().into()),
            None => Err(Error::BadRequest(
                "no model to use: send `model`, set the agent's `model`, or configure a default \
                 (models.default_model or AGENT_PLATFORM_DEFAULT_MODEL)"
                    .into(),
            )),
        }
    }

    /// The docs recalled for the last new user message (none without one).
    async fn recall_for(
        &self,
        t: Tenant,
        new_messages: &[CreateMessageRequest],
        agent: Uuid,
        session: &Session,
    ) -> Result<Vec<DocReference>> {
        match new_messages.iter().rev().find(|m| m.role == Role::User) {
            Some(m) if !m.content.trim().is_empty() => {
                self.recall(t, agent, &session.users, &m.content).await
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The history to send after `system`, within the session's token budget,
    /// then the new messages. Each message's cost is known (stored token
    /// counts), so the budget is kept with sums, not recounts. Over the budget,
    /// `context_overflow` decides: an error, the oldest messages dropped, or
    /// those summarised by the model.
    pub(super) async fn fit_history(
        &self,
        history: &History,
        session: &Session,
        provider: &Provider,
        model: &str,
        system: Vec<wire::ChatMessage>,
        new_wire: Vec<wire::ChatMessage>,
    ) -> Result<Vec<wire::ChatMessage>> {
        let mut start = 0; // the oldest history message sent
        let mut summary = None;
        if let Some(budget) = session.token_budget {
            let budget = budget.max(0) as usize;
            // The prompt without history: system, new messages, the reply's priming.
            let fixed = system.iter().map(message_tokens).sum::<usize>()
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
                    Some(ContextOverflow::Truncate) => start = drop_oldest(history, 0, fixed, budget),
                    Some(ContextOverflow::Adaptive) => {
                        // Leave room for the summary: a quarter of the budget, at most 512 tokens.
                        let room = (budget / 4).min(512);
                        let target = budget.saturating_sub(room).max(fixed);
                        start = drop_oldest(history, 0, fixed, target);
                        let dropped: Vec<_> = history[..start].iter().map(|h| h.message.clone()).collect();
                        let text = self.summarise(provider, model, &dropped, room).await?;
                        let message =
                            wire::ChatMessage::system(format!("Summary of the earlier conversation: {text}"));
                        let cost = message_tokens(&message);
                        // A summary longer than asked: drop more history, then the summary itself.
                        start = drop_oldest(history, start, fixed + cost, budget);
                        let rest: usize = history[start..].iter().map(|h| h.tokens).sum();
                        if fixed + cost + rest <= budget {
                            summary = Some(message);
                        }
                    }
                }
            }
        }
        let mut messages = Vec::with_capacity(system.len() + 1 + history.len() - start + new_wire.len());
        messages.extend(system);
        messages.extend(summary);
        messages.extend(history[start..].iter().map(|h| h.message.clone()));
        messages.extend(new_wire);
        Ok(messages)
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
}

/// The tools the model may call: the session's function tools, then the request's.
pub(super) fn tool_specs(session_tools: &[Tool], request_tools: Option<&[ChatTool]>) -> Vec<wire::ToolSpec> {
    let no_parameters = || json!({"type": "object", "properties": {}});
    let mut tools: Vec<wire::ToolSpec> = session_tools
        .iter()
        .filter(|tool| tool.kind == ToolType::Function)
        .map(|tool| {
            let params = tool.function.as_ref().map(|f| Value::Object(f.parameters.clone()));
            let description = (!tool.description.is_empty()).then(|| tool.description.clone());
            wire::ToolSpec::function(&tool.name, description, params.unwrap_or_else(no_parameters))
        })
        .collect();
    for tool in request_tools.into_iter().flatten() {
        let params = tool.function.parameters.clone().map(Value::Object);
        tools.push(wire::ToolSpec::function(
            &tool.function.name,
            tool.function.description.clone(),
            params.unwrap_or_else(no_parameters),
        ));
    }
    tools
}

/// What templates see: `agent`, `user`, `users`, `session`, `tools`, `docs`.
pub(super) fn template_context(
    agent: &Agent,
    users: &[User],
    session: Option<&Session>,
    tools: &[wire::ToolSpec],
    docs: &[DocReference],
) -> Value {
    json!({
        "agent": agent,
        "user": users.first(),
        "users": users,
        "session": session,
        "tools": tools.iter().map(|t| json!({"name": t.function.name, "description": t.function.description})).collect::<Vec<_>>(),
        "docs": docs.iter().map(|d| json!({
            "id": d.id, "title": d.title, "content": d.snippet.content, "snippet": d.snippet.content, "score": d.score,
        })).collect::<Vec<_>>(),
    })
}

/// The system message: the session's template (then its situation), or the default template.
pub(super) fn system_message(session: &Session, context: &Value) -> Result<String> {
    let system = match &session.system_template {
        None => models::render(DEFAULT_SYSTEM_TEMPLATE, context)
            .map_err(|e| Error::Internal(format!("the default system template: {e}")))?,
        Some(src) => {
            let mut text = models::render(src, context).map_err(|e| template_error("system_template", e))?;
            // The default template places the situation itself.
            if let Some(situation) = session.situation.as_deref().filter(|s| !s.is_empty()) {
                text = format!("{}\n\n{situation}", text.trim_end());
            }
            text
        }
    };
    Ok(system.trim_end().to_owned())
}

/// The new messages, rendered as templates when the session has `render_templates`.
fn render_new_messages(
    session: &Session,
    mut messages: Vec<CreateMessageRequest>,
    context: &Value,
) -> Result<Vec<CreateMessageRequest>> {
    if session.render_templates {
        for (i, m) in messages.iter_mut().enumerate() {
            if m.content.contains("{{") || m.content.contains("{%") {
                m.content = models::render(&m.content, context)
                    .map_err(|e| template_error(&format!("messages[{i}].content"), e))?;
            }
        }
    }
    Ok(messages)
}

/// The request to the provider: the messages, the tools, and the settings.
pub(super) fn completion_request(
    model: String,
    messages: Vec<wire::ChatMessage>,
    tools: Vec<wire::ToolSpec>,
    settings: ChatSettings,
    tool_choice: Option<ChatToolChoice>,
    response_format: Option<ResponseFormat>,
    stream: bool,
) -> wire::CompletionRequest {
    let tool_choice = tool_choice.map(|c| match c {
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
        response_format: response_format.map(|f| serde_json::to_value(f).unwrap_or(Value::Null)),
        // As the provider sends it, so that it need not copy the request.
        stream,
        stream_options: stream.then_some(wire::StreamOptions { include_usage: true }),
        ..wire::CompletionRequest::default()
    };
    with_sampling(request, settings)
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
