//! Planning a turn: from an [`Ask`] to a [`Plan`], the request the provider is sent.
//!
//! In order: the model and its provider (the one asked for, else the agent's,
//! else the configured default; with no agent, the model asked for, as sent),
//! the settings (the request's over the agent's `default_settings`), recall
//! (the agent's and the users' docs that best match the last new user
//! message), the system message (the session's `system_template`, else the
//! default template, over the agent, users, session, tools and docs), the new
//! messages (rendered as templates when the session asks), then the history
//! within the session's token budget.

use serde_json::{Value, json};
use uuid::Uuid;

use super::super::chat_lock::SessionLease;
use super::super::history::{History, HistoryItem, Lookup};
use super::super::locks::KeyedGuard;
use super::super::records::decode;
use super::super::{App, Error, Result, Tenant};
use super::convert::{history_item, new_message, template_error, usage_or_count};
use crate::api::types::{
    Agent, Block, ChatSettings, DocOwner, DocReference, OwnerRole, SearchMode, SearchRequest, User,
};
use crate::api::types::{ChatTool, ChatToolChoice, ChatUsage, ToolChoiceMode};
use crate::api::types::{ContextOverflow, CreateMessageRequest, Message, Role, Session};
use crate::api::types::{Tool, ToolType};
use crate::models::template::BLOCKS_SECTION;
use crate::models::tokens::{REPLY_PRIMING_TOKENS, message_tokens};
use crate::models::{self, DEFAULT_SYSTEM_TEMPLATE, Provider, wire};
use crate::store::{Kind, ListQuery};

/// The most document snippets one turn recalls.
pub const RECALL_LIMIT: usize = 5;

/// What a turn is asked to send.
pub struct Ask<'a> {
    /// The agent that answers, if any: its model, default settings, system
    /// message and docs.
    pub agent: Option<&'a Agent>,
    /// The model asked for: over the agent's (see [`App::choose_model`]); with
    /// no agent, the provider's model name, as sent.
    pub model: Option<&'a str>,
    /// The request's own settings (under the agent's defaults: [`merge_settings`]).
    pub settings: ChatSettings,
    /// The tools on offer, in the provider's shape ([`tool_specs`]).
    pub tools: Vec<wire::ToolSpec>,
    /// Recall, on the last new user message, from the agent's docs and these users'.
    pub recall: Option<&'a [Uuid]>,
    /// The agent's system message (with an agent only), rendered for these.
    pub system: Option<SystemFor<'a>>,
    /// A system message sent after the agent's (`/v1/responses`' `instructions`).
    pub instructions: Option<String>,
    /// The session's history, fitted to its token budget; `None`: no history.
    pub history: Option<(&'a History, &'a Session)>,
    /// The new messages: saved with the turn ([`New::Saved`]) or only sent.
    pub new: New,
    /// Render the saved new messages as templates when the session has `render_templates`.
    pub render_templates: bool,
    pub tool_choice: Option<wire::ToolChoice>,
    pub response_format: Option<Value>,
    pub stream: bool,
}

/// Whom the system message is rendered for.
#[derive(Clone, Copy)]
pub struct SystemFor<'a> {
    pub users: &'a [User],
    /// Its `system_template` (and `situation`) when it has one; else the default template.
    pub session: Option<&'a Session>,
}

/// A turn's new messages.
pub enum New {
    /// Saved with the turn: plan gives them back (rendered) in [`Plan::new_messages`].
    Saved(Vec<CreateMessageRequest>),
    /// Only sent (a stateless completion, a prompt step).
    Sent(Vec<wire::ChatMessage>),
}

impl New {
    /// The text of the last user message, when it has some.
    fn last_user_text(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            New::Saved(ms) => {
                ms.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_str().into())
            }
            New::Sent(ms) => {
                ms.iter().rev().find(|m| m.role == wire::Role::User).and_then(|m| m.content_text())
            }
        }
        .filter(|text| !text.trim().is_empty())
    }
}

/// A planned turn: the provider and the request to send it.
pub struct Plan {
    pub provider: Provider,
    pub request: wire::CompletionRequest,
    /// The docs recalled (in the system message).
    pub docs: Vec<DocReference>,
    /// [`New::Saved`]'s messages, rendered (a turn moves them into its [`super::Saving`]).
    pub new_messages: Vec<CreateMessageRequest>,
}

/// A session a turn runs in, held until dropped: turns on one session run one
/// after the other (its chat lock; on a shared store, its lease too: see
/// [`super::super::chat_lock`]).
pub struct HeldSession {
    pub session: Session,
    /// The session record's version, where other servers write (see [`App::history`]).
    pub version: Option<u64>,
    pub lease: Option<SessionLease>,
    pub lock: KeyedGuard<(Tenant, Uuid)>,
}

impl App {
    /// Waits for the session's other turns, then holds it and reads it.
    pub(in crate::app) async fn hold_session(&self, t: Tenant, id: Uuid) -> Result<HeldSession> {
        let lock = self.chat_locks.lock((t, id)).await;
        let lease = self.session_lease(t, id).await?;
        let record = self.load(t, Kind::Session, id).await?;
        let session: Session = decode(&record)?;
        let version = self.store.shared().then_some(record.version);
        Ok(HeldSession { session, version, lease, lock })
    }

    /// The users of a session.
    pub(in crate::app) async fn session_users(&self, t: Tenant, session: &Session) -> Result<Vec<User>> {
        let mut users = Vec::with_capacity(session.users.len());
        for u in &session.users {
            users.push(self.user_get(t, *u).await?);
        }
        Ok(users)
    }

    /// The plan of a turn (see the module's docs).
    pub async fn plan(&self, t: Tenant, ask: Ask<'_>) -> Result<Plan> {
        let (provider, model) = match ask.agent {
            Some(agent) => self.choose_model(ask.model, agent)?,
            None => {
                let model = ask.model.unwrap_or_default();
                (self.models.resolve(model)?.clone(), model.to_owned())
            }
        };
        let settings = match ask.agent {
            Some(agent) => merge_settings(agent.default_settings.as_ref(), &ask.settings),
            None => ask.settings,
        };
        let docs = match (ask.agent, ask.recall, ask.new.last_user_text()) {
            (Some(agent), Some(users), Some(text)) => self.recall(t, agent.id, users, &text).await?,
            _ => Vec::new(),
        };
        let mut system = Vec::new();
        let mut new = ask.new;
        if let (Some(agent), Some(to)) = (ask.agent, ask.system) {
            let blocks = self.turn_blocks(t, agent.id, to.users).await?;
            let context = template_context(agent, to.users, to.session, &ask.tools, &docs, &blocks);
            system.push(wire::ChatMessage::system(system_message(to.session, &context)?));
            if let (true, Some(session), New::Saved(messages)) = (ask.render_templates, to.session, &mut new)
            {
                render_new_messages(session, messages, &context)?;
            }
        }
        system.extend(ask.instructions.map(wire::ChatMessage::system));
        let (new_wire, new_messages) = match new {
            New::Saved(messages) => (messages.iter().map(new_message).collect(), messages),
            New::Sent(wire) => (wire, Vec::new()),
        };
        let messages = match ask.history {
            Some((history, session)) => {
                self.fit_history(history, session, &provider, &model, system, new_wire).await?
            }
            None => {
                system.extend(new_wire);
                system
            }
        };
        let request = completion_request(
            model,
            messages,
            ask.tools,
            settings,
            ask.tool_choice,
            ask.response_format,
            ask.stream,
        );
        Ok(Plan { provider, request, docs, new_messages })
    }

    /// The memory blocks in a turn's system message: the agent's, then each
    /// user's, each by label.
    async fn turn_blocks(&self, t: Tenant, agent: Uuid, users: &[User]) -> Result<Vec<Block>> {
        let mut blocks = self.blocks_of(t, agent).await?;
        for user in users {
            blocks.extend(self.blocks_of(t, user.id).await?);
        }
        Ok(blocks)
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

    /// The session's history, oldest first, from the cache or the store.
    /// `version`: the session record's, read before (on a shared store; see
    /// [`super::super::history`]).
    pub(in crate::app) async fn history(
        &self,
        t: Tenant,
        session: Uuid,
        version: Option<u64>,
    ) -> Result<History> {
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

    /// The snippets of the agent's and the users' documents that best match
    /// `text` (hybrid search when an embedding model is configured, else
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

    /// The history to send after `system`, within the session's token budget,
    /// then the new messages. Each message's cost is known (stored token
    /// counts), so the budget is kept with sums, not recounts. Over the budget,
    /// `context_overflow` decides: an error, the oldest messages dropped, or
    /// those summarised by the model.
    async fn fit_history(
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
                        let (text, _) =
                            self.summarise(provider, model, SUMMARY_PROMPT, &dropped, room).await?;
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

    /// A summary of `messages` written by the model as `how` (a system
    /// message) asks, in at most `max_tokens` tokens, and the call's usage.
    /// The model reads them as one transcript: a line per message, with the
    /// tools called and their results.
    pub(in crate::app) async fn summarise(
        &self,
        provider: &Provider,
        model: &str,
        how: &str,
        messages: &[wire::ChatMessage],
        max_tokens: usize,
    ) -> Result<(String, ChatUsage)> {
        if messages.is_empty() {
            return Ok((String::new(), ChatUsage::default()));
        }
        let mut req = wire::CompletionRequest::new(
            model,
            vec![wire::ChatMessage::system(how), wire::ChatMessage::user(transcript(messages))],
        );
        req.max_tokens = Some(max_tokens.max(16) as u32);
        let answer = provider.chat(&req).await?;
        let usage = usage_or_count(&req, answer.usage, &answer.text());
        Ok((answer.text().trim().to_owned(), usage))
    }
}

/// How the model is asked to summarise the history a session's token budget drops.
const SUMMARY_PROMPT: &str = "Summarise the following conversation in a few sentences, keeping the facts, \
     names and decisions a reader would need to continue it.";

/// Messages as one text for a model to read: `role: text` a line each, an
/// assistant's tool calls after its text, a tool's result after its call's id.
fn transcript(messages: &[wire::ChatMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        out.push_str(m.role.as_str());
        if let Some(id) = &m.tool_call_id {
            out.push_str(&format!(" (result of call {id})"));
        }
        out.push_str(": ");
        out.push_str(&m.content_text().unwrap_or_default());
        for call in m.tool_calls.iter().flatten() {
            out.push_str(&format!(
                " [calls {} with {} as call {}]",
                call.function.name, call.function.arguments, call.id
            ));
        }
        out.push('\n');
    }
    out
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
/// seed, penalties) of `settings`.
fn with_sampling(request: wire::CompletionRequest, settings: ChatSettings) -> wire::CompletionRequest {
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

/// The tools the model may call: the stored function tools, then the request's.
pub fn tool_specs(stored: &[Tool], request_tools: Option<&[ChatTool]>) -> Vec<wire::ToolSpec> {
    let no_parameters = || json!({"type": "object", "properties": {}});
    let mut tools: Vec<wire::ToolSpec> = stored
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

/// The contract's tool choice as the provider takes it.
pub fn wire_tool_choice(choice: ChatToolChoice) -> wire::ToolChoice {
    match choice {
        ChatToolChoice::Mode(ToolChoiceMode::Auto) => wire::ToolChoice::auto(),
        ChatToolChoice::Mode(ToolChoiceMode::None) => wire::ToolChoice::none(),
        ChatToolChoice::Mode(ToolChoiceMode::Required) => wire::ToolChoice::required(),
        ChatToolChoice::Function(f) => wire::ToolChoice::function(f.function.name),
    }
}

/// What templates see: `agent`, `user`, `users`, `session`, `tools`, `docs`,
/// `blocks` (each: `label`, `value`, `description`, `limit`, `chars`,
/// `read_only`, `owner`: `agent` or `user`).
fn template_context(
    agent: &Agent,
    users: &[User],
    session: Option<&Session>,
    tools: &[wire::ToolSpec],
    docs: &[DocReference],
    blocks: &[Block],
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
        "blocks": blocks.iter().map(|b| json!({
            "label": b.label, "value": b.value, "description": b.description, "limit": b.limit,
            "chars": b.value.chars().count(), "read_only": b.read_only, "owner": b.owner.role,
        })).collect::<Vec<_>>(),
    })
}

/// The system message: the session's template (then its situation), or the default template.
fn system_message(session: Option<&Session>, context: &Value) -> Result<String> {
    let system = match session.and_then(|s| s.system_template.as_deref().map(|src| (s, src))) {
        None => models::render(DEFAULT_SYSTEM_TEMPLATE, context)
            .map_err(|e| Error::Internal(format!("the default system template: {e}")))?,
        Some((session, src)) => {
            let mut text = models::render(src, context).map_err(|e| template_error("system_template", e))?;
            // A template that does not place the memory blocks has them after it.
            if !src.contains("blocks") && context["blocks"].as_array().is_some_and(|b| !b.is_empty()) {
                let blocks = models::render(BLOCKS_SECTION, context)
                    .map_err(|e| Error::Internal(format!("the memory blocks' section: {e}")))?;
                text = format!("{}\n{}", text.trim_end(), blocks.trim_end());
            }
            // The default template places the situation itself.
            if let Some(situation) = session.situation.as_deref().filter(|s| !s.is_empty()) {
                text = format!("{}\n\n{situation}", text.trim_end());
            }
            text
        }
    };
    Ok(system.trim_end().to_owned())
}

/// The new messages rendered as templates, when the session has `render_templates`.
fn render_new_messages(
    session: &Session,
    messages: &mut [CreateMessageRequest],
    context: &Value,
) -> Result<()> {
    if session.render_templates {
        for (i, m) in messages.iter_mut().enumerate() {
            // A tool's result the server ran (approved calls) is data, not a template.
            let server_ran = m.metadata.as_ref().is_some_and(|md| md.0.contains_key("tool_run"));
            if !server_ran && (m.content.contains("{{") || m.content.contains("{%")) {
                m.content = models::render(&m.content, context)
                    .map_err(|e| template_error(&format!("messages[{i}].content"), e))?;
            }
        }
    }
    Ok(())
}

/// The request to the provider: the messages, the tools, and the settings.
fn completion_request(
    model: String,
    messages: Vec<wire::ChatMessage>,
    tools: Vec<wire::ToolSpec>,
    settings: ChatSettings,
    tool_choice: Option<wire::ToolChoice>,
    response_format: Option<Value>,
    stream: bool,
) -> wire::CompletionRequest {
    let request = wire::CompletionRequest {
        model,
        messages,
        tool_choice: if tools.is_empty() { None } else { tool_choice },
        tools: (!tools.is_empty()).then_some(tools),
        response_format,
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
