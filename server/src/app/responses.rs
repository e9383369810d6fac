//! OpenAI's Responses API (`/v1/responses`) over sessions: a stored response
//! is a turn (see [`super::turn`]) of a session (its input items become
//! messages, its answer an assistant message) plus a `response` record in the
//! session's scope that remembers the turn's settings and which messages it
//! made.
//!
//! `previous_response_id` continues the session of that response;
//! `conversation` names the session; neither starts a new session (the
//! agent's, when `model` is an agent's id; else one with no agent), created
//! in the same commit as the turn, so a failed call leaves nothing behind.
//! The prompt: the agent's system message, then `instructions`, the
//! session's history within its token budget, then the new input. A streamed
//! response's events are [`events::Events`]'s, a function of the provider's chunks.
//!
//! Over a WebSocket (the HTTP layer's `socket` module) the same streamed
//! response runs with the connection's [`Chains`]: a response that is not
//! stored is remembered there, and continued from there. Compaction
//! (`POST /v1/responses/compact`) is [`compact`]'s.

mod background;
mod chains;
mod compact;
mod events;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use super::learning::LearnAfter;

pub use self::background::BackgroundRuns;
pub use self::chains::{Chain, Chains};
use self::events::Events;
pub use self::events::StreamFailure;
use super::conversations::{items_of, messages_of_items};
use super::history::History;
use super::records::{decode, encode};
use super::sessions::{plain_session, session_record};
use super::turn::convert::history_item;
use super::turn::drive::{self, End, Items};
use super::turn::plan::{New, tool_specs, wire_tool_choice};
use super::turn::rounds::{After, Ending, Rounds, pending_calls};
use super::turn::tools::{Listed, McpSource, Toolbox};
use super::turn::{Answered, Ask, Driver, Plan, Saving, Shape, SystemFor};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    ApprovalDecision, CreateMessageRequest, DocOwner, McpDef, Message, OwnerRole, Role, Session,
};
use crate::api::types::{
    ChatFunction, ChatSettings, ChatTool, ChatToolChoice, ChatUsage, ConvId, ConversationId,
    ConversationItem, CreateResponseRequest, IncompleteDetails, InputItemListParams, ItemList, ItemOrder,
    Metadata, ModelResponse, NamedFunction, NamedToolChoice, ResponseDeleted, ResponseInput,
    ResponseReasoning, ResponseStreamEvent, ResponseText, ResponseTool, ResponseToolChoice, ResponseUsage,
    TextFormat, TextFormatType, ToolCallType, Truncation,
};
use crate::models::wire;
use crate::store::{Expect, Kind, Op, Record};

/// What a `response` record keeps (its id is the response's, its scope the session).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResponseData {
    pub model: String,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub conversation: Option<Uuid>,
    /// The messages the turn's input made, in order.
    pub input_messages: Vec<Uuid>,
    /// The assistant's message.
    pub output_message: Uuid,
    pub usage: (i64, i64, i64),
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub max_output_tokens: Option<i64>,
    pub tools: Value,
    pub tool_choice: Value,
    pub parallel_tool_calls: bool,
    /// `incomplete` when the provider stopped at the token limit, or the
    /// agent loop at one of its limits; a background response's `queued`,
    /// `in_progress`, `failed` or `cancelled`; absent: `completed`.
    #[serde(default)]
    pub status: Option<String>,
    /// Created with `background: true` (see [`background`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Why a background response failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::api::types::ResponseError>,
    /// Why it is incomplete, when not the token limit (`max_tool_rounds`, `max_tool_calls`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete_reason: Option<String>,
    /// Every message the turn made after its input, in order (the agent
    /// loop's calls and results, then the answer); absent in records written
    /// before the agent loop: `output_message` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_messages: Vec<Uuid>,
    /// The `mcp_list_tools` items of the response, first in its output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listed_tools: Vec<ConversationItem>,
    /// Absent in records of release 0.1.0: their `created_at`.
    #[serde(default)]
    pub completed_at: Option<i64>,
    #[serde(default)]
    pub text: Option<ResponseText>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub reasoning: Option<ResponseReasoning>,
    #[serde(default)]
    pub max_tool_calls: Option<i64>,
    #[serde(default)]
    pub service_tier: Option<String>,
    #[serde(default)]
    pub safety_identifier: Option<String>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub truncation: Option<Truncation>,
}

/// The fields a response echoes from its request.
#[derive(Clone, Debug)]
struct Head {
    id: Uuid,
    created_at: chrono::DateTime<chrono::Utc>,
    model: String,
    instructions: Option<String>,
    previous_response_id: Option<String>,
    conversation: Option<Uuid>,
    /// The sampling settings used (see [`ModelResponse`]).
    temperature: f64,
    top_p: f64,
    presence_penalty: f64,
    frequency_penalty: f64,
    top_logprobs: i64,
    max_output_tokens: Option<i64>,
    max_tool_calls: Option<i64>,
    tools: Vec<ResponseTool>,
    tool_choice: Value,
    parallel_tool_calls: bool,
    text: ResponseText,
    reasoning: Option<ResponseReasoning>,
    truncation: Truncation,
    service_tier: String,
    safety_identifier: Option<String>,
    prompt_cache_key: Option<String>,
    user: Option<String>,
    store: bool,
    metadata: Metadata,
    background: bool,
}

/// Where a response stands.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Status {
    /// A background response not begun.
    Queued,
    InProgress,
    /// At these Unix seconds.
    Completed(i64),
    /// The provider stopped at `max_output_tokens`, or the agent loop at a
    /// limit (`incomplete_details.reason`).
    Incomplete(&'static str),
    /// Its `error` is the HTTP layer's to fill in (a background response's is stored).
    Failed,
    /// A background response cancelled.
    Cancelled,
}

impl Status {
    /// The end of an answer the provider finished with `finish_reason`, or
    /// that the agent loop ended (`ending`'s reason).
    /// The name a record keeps (none: `completed`).
    fn stored(self) -> Option<String> {
        match self {
            Status::Completed(_) => None,
            other => Some(other.name().into()),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::InProgress => "in_progress",
            Status::Completed(_) => "completed",
            Status::Incomplete(_) => "incomplete",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn of_answer(finish_reason: Option<&str>, ending: Option<&str>) -> Status {
        match (ending, finish_reason) {
            (Some("max_tool_rounds"), _) => Status::Incomplete("max_tool_rounds"),
            (Some("max_tool_calls"), _) => Status::Incomplete("max_tool_calls"),
            (_, Some("length")) => Status::Incomplete("max_output_tokens"),
            _ => Status::Completed(chrono::Utc::now().timestamp()),
        }
    }

    fn of_record(status: Option<&str>, reason: Option<&str>, completed_at: i64) -> Status {
        match (status, reason) {
            (Some("queued"), _) => Status::Queued,
            (Some("in_progress"), _) => Status::InProgress,
            (Some("failed"), _) => Status::Failed,
            (Some("cancelled"), _) => Status::Cancelled,
            (Some("incomplete"), Some("max_tool_rounds")) => Status::Incomplete("max_tool_rounds"),
            (Some("incomplete"), Some("max_tool_calls")) => Status::Incomplete("max_tool_calls"),
            (Some("incomplete"), _) => Status::Incomplete("max_output_tokens"),
            _ => Status::Completed(completed_at),
        }
    }
}

/// `resp_` and the id's 32 hex digits.
pub fn response_id(id: Uuid) -> String {
    format!("resp_{}", id.simple())
}

/// The uuid of a response id (`resp_<hex>`); `None` for anything else.
pub fn parse_response_id(id: &str) -> Option<Uuid> {
    Uuid::try_parse(id.strip_prefix("resp_")?).ok()
}

/// A response, planned: what to send, what it echoes, and where to save.
/// Holds the session (as a chat does) until dropped.
pub struct ResponseTurn {
    plan: Plan,
    head: Head,
    saving: Saving,
    /// The agent loop over the server-run tools (see [`super::turn::rounds`]).
    rounds: Rounds,
    /// The `mcp_list_tools` items, first in the output.
    listed_tools: Vec<ConversationItem>,
    /// How many of the new messages are the results of the calls the
    /// input's `mcp_approval_response`s decided (first among them): output, not input.
    decided: usize,
    /// Where a response that is not stored is remembered (a WebSocket
    /// connection's [`Chains`]), with the conversation it continued.
    remember: Option<(Chains, Session, History)>,
    /// A background response's run: what it committed before the end.
    background: Option<Arc<background::RunCheckpoint>>,
    /// Learning after the turn, when the agent's policy has it (and the response is stored).
    learning: Option<LearnAfter>,
}

impl ResponseTurn {
    /// The id of the message of the answer under way, chosen in advance.
    fn answer_id(&self) -> Uuid {
        self.rounds.answer_id.expect("a response's answers have ids chosen in advance")
    }
}

impl App {
    /// A request's `input` as the messages it adds: text is one user message;
    /// items as [`messages_of_items`] makes them; none, no message.
    pub(super) fn input_messages(&self, input: Option<ResponseInput>) -> Result<Vec<CreateMessageRequest>> {
        Ok(match input {
            None => Vec::new(),
            Some(ResponseInput::Text(text)) => vec![CreateMessageRequest {
                role: Role::User,
                content: text,
                name: None,
                tool_calls: None,
                tool_call_id: None,
                metadata: None,
                parts: None,
            }],
            Some(ResponseInput::Items(items)) => {
                messages_of_items(items, "input", self.models.max_input_part_bytes())?
            }
        })
    }

    /// The session and plan of a response (see the module's docs). With
    /// `chains` (a WebSocket connection's), `previous_response_id` may name a
    /// response of that connection that was not stored, and a response that
    /// is not stored is remembered there.
    async fn response_turn(
        &self,
        t: Tenant,
        req: CreateResponseRequest,
        chains: Option<&Chains>,
        resume: bool,
    ) -> Result<ResponseTurn> {
        let agent = self.completion_agent(t, &req.model).await?;
        let store = req.store.unwrap_or(true);
        let remembered = match (chains, &req.previous_response_id) {
            (Some(chains), Some(previous)) => parse_response_id(previous).and_then(|id| chains.get(id)),
            _ => None,
        };
        if remembered.is_some() && store {
            return Err(Error::BadRequest(format!(
                "previous_response_id: {} was not stored, so it is continued with `store: false` only",
                req.previous_response_id.as_deref().unwrap_or_default()
            )));
        }
        // The session: continued, named, or new.
        let (session_id, conversation) = match (&req.previous_response_id, &req.conversation) {
            _ if remembered.is_some() => (None, None),
            (Some(previous), _) => {
                let rec = self.response_record(t, previous).await.map_err(|e| match e {
                    Error::NotFound(m) => Error::NotFound(m.in_field("previous_response_id")),
                    e => e,
                })?;
                (Some(rec.scope), None)
            }
            (None, Some(c)) => (Some(c.id()), Some(c.id())),
            (None, None) => (None, None),
        };
        let (held, session, new_session) = match (session_id, &remembered) {
            (_, Some(chain)) => {
                agent_of_session(agent.as_ref(), &chain.session)?;
                (None, chain.session.clone(), None)
            }
            (Some(sid), None) => {
                let held = self.hold_session(t, sid).await?;
                agent_of_session(agent.as_ref(), &held.session)?;
                let session = held.session.clone();
                (Some(held), session, None)
            }
            (None, None) => {
                let (rec, ops) = session_record(plain_session(agent.as_ref().map(|a| a.id), None))?;
                let session: Session = decode(&rec)?;
                (None, session, Some((rec, ops)))
            }
        };
        let users = match (&held, &remembered) {
            (None, None) => Vec::new(),
            _ => self.session_users(t, &session).await?,
        };
        let new_messages = self.input_messages(req.input.clone())?;
        let functions: Vec<&ResponseTool> =
            req.tools.iter().flatten().filter(|t| t.kind == "function").collect();
        let request_tools: Vec<ChatTool> = functions.iter().map(|t| chat_tool(t)).collect();
        let stored_tools = match &agent {
            Some(a) => self.agent_tools(t, a.id).await?,
            None => Vec::new(),
        };
        let mut tools = tool_specs(&stored_tools, Some(&request_tools));
        // The request's tools come last: each keeps its `strict`.
        let first = tools.len() - request_tools.len();
        for (spec, tool) in tools[first..].iter_mut().zip(&functions) {
            spec.function.strict = tool.strict;
        }
        let (toolbox, listed) =
            self.response_toolbox(t, &stored_tools, req.tools.as_deref(), &session).await?;
        let instructions = match (req.instructions.clone(), listed.note()) {
            (Some(i), Some(note)) => Some(format!("{i}\n\n{note}")),
            (i, note) => i.or(note),
        };
        let listed_tools = listed.items;
        tools.extend(toolbox.specs().cloned());
        let settings = ChatSettings {
            temperature: req.temperature,
            top_p: req.top_p,
            max_tokens: req.max_output_tokens,
            presence_penalty: req.presence_penalty,
            frequency_penalty: req.frequency_penalty,
            ..ChatSettings::default()
        };
        // What the response says was used: the request's, else the agent's, else the provider's default.
        let defaults = agent.as_ref().and_then(|a| a.default_settings.clone()).unwrap_or_default();
        let used = |asked: Option<f64>, agent: Option<f64>, default: f64| asked.or(agent).unwrap_or(default);
        let text = req.text.clone().unwrap_or_default();
        let history: History = match (&held, remembered) {
            (_, Some(chain)) => chain.history,
            (None, None) => History::default(),
            (Some(held), None) => self.history(t, session.id, held.version).await?,
        };
        if let Some(ResponseInput::Items(items)) = &req.input {
            calls_answered(&history, items)?;
        }
        // The decisions on the calls the previous response left waiting come first.
        let mut rounds = Rounds::new(toolbox);
        let pending = pending_calls(&history, &rounds.toolbox);
        let decisions: Vec<ApprovalDecision> = match &req.input {
            Some(ResponseInput::Items(items)) => items
                .iter()
                .filter(|i| i.kind() == "mcp_approval_response")
                .map(|i| ApprovalDecision {
                    id: i.approval_request_id.clone().unwrap_or_default(),
                    approve: i.approve.unwrap_or(false),
                    reason: i.reason.clone(),
                })
                .collect(),
            _ => Vec::new(),
        };
        let decided = match resume {
            // A background response resuming: its calls in flight when its server stopped.
            true => self.resume_pending(t, &mut rounds, &pending).await,
            false => {
                self.decide_pending(t, &mut rounds, &pending, &decisions, "input (mcp_approval_response)")
                    .await?
            }
        };
        let decided_count = decided.len();
        let mut new_messages = new_messages;
        new_messages.splice(0..0, decided);
        let tool_choice = req.tool_choice.clone().map(|c| match c {
            ResponseToolChoice::Mode(m) => ChatToolChoice::Mode(m),
            ResponseToolChoice::Function(f) => ChatToolChoice::Function(NamedToolChoice {
                kind: ToolCallType::Function,
                function: NamedFunction { name: f.name },
            }),
        });
        let mut plan = self
            .plan(
                t,
                Ask {
                    agent: agent.as_ref(),
                    model: if agent.is_some() { None } else { Some(&req.model) },
                    settings,
                    tools,
                    recall: Some(session.users.as_slice()),
                    system: Some(SystemFor { users: &users, session: Some(&session) }),
                    instructions,
                    history: Some((&history, &session)),
                    new: New::Saved(new_messages),
                    render_templates: false,
                    tool_choice: tool_choice.map(wire_tool_choice),
                    response_format: text.format.as_ref().and_then(response_format),
                    stream: req.stream,
                },
            )
            .await?;
        let extra = &mut plan.request.extra;
        if let Some(v) = req.parallel_tool_calls {
            extra.insert("parallel_tool_calls".into(), Value::Bool(v));
        }
        let effort = req.reasoning.as_ref().and_then(|r| r.effort);
        let verbosity = text.verbosity;
        for (name, value) in [
            ("service_tier", req.service_tier.clone().map(Value::String)),
            ("safety_identifier", req.safety_identifier.clone().map(Value::String)),
            ("prompt_cache_key", req.prompt_cache_key.clone().map(Value::String)),
            ("user", req.user.clone().map(Value::String)),
            ("reasoning_effort", effort.map(|e| json!(e))),
            ("verbosity", verbosity.map(|v| json!(v))),
        ] {
            if let Some(value) = value {
                extra.insert(name.into(), value);
            }
        }
        // The answer's ids follow, once known (see `Rounds::answer_id`).
        let ids = (0..plan.new_messages.len()).map(|_| Uuid::now_v7()).collect();
        let head = Head {
            id: Uuid::now_v7(),
            created_at: crate::store::now(),
            model: plan.request.model.clone(),
            instructions: req.instructions,
            previous_response_id: req.previous_response_id,
            conversation,
            temperature: used(req.temperature, defaults.temperature, 1.0),
            top_p: used(req.top_p, defaults.top_p, 1.0),
            presence_penalty: used(req.presence_penalty, defaults.presence_penalty, 0.0),
            frequency_penalty: used(req.frequency_penalty, defaults.frequency_penalty, 0.0),
            top_logprobs: req.top_logprobs.unwrap_or(0),
            max_output_tokens: req.max_output_tokens,
            max_tool_calls: req.max_tool_calls,
            text: ResponseText {
                format: Some(text.format.unwrap_or_else(TextFormat::text)),
                verbosity: text.verbosity,
            },
            reasoning: req.reasoning,
            truncation: req.truncation.unwrap_or_default(),
            service_tier: req.service_tier.unwrap_or_else(|| "default".into()),
            safety_identifier: req.safety_identifier,
            prompt_cache_key: req.prompt_cache_key,
            user: req.user,
            tools: req.tools.unwrap_or_default(),
            tool_choice: req
                .tool_choice
                .map_or_else(|| json!("auto"), |c| serde_json::to_value(c).unwrap_or_default()),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            store,
            metadata: req.metadata.unwrap_or_default(),
            background: resume,
        };
        let (lease, lock) = match held {
            Some(held) => (held.lease, Some(held.lock)),
            None => (None, None),
        };
        let saving = Saving {
            tenant: t,
            session: session.id,
            save: head.store,
            new_session,
            new_messages: std::mem::take(&mut plan.new_messages),
            ids: Some(ids),
            lease,
            lock,
        };
        // A response not stored keeps nothing, and learns nothing.
        let learning = match (&agent, store) {
            (Some(agent), true) => self.learn_after(t, agent.id, &session).await?,
            _ => None,
        };
        let remember = match chains {
            Some(chains) if !store => Some((chains.clone(), session, history)),
            _ => None,
        };
        rounds.answer_id = Some(Uuid::now_v7());
        rounds.max_calls = head.max_tool_calls.map(|m| m.max(0) as usize);
        Ok(ResponseTurn {
            plan,
            head,
            saving,
            remember,
            rounds,
            listed_tools,
            decided: decided_count,
            background: None,
            learning,
        })
    }

    /// The server-run tools of a response: the agent's (its `api_call`,
    /// `mcp` and `file_search` tools) and the session's MCP servers' (see
    /// [`App::session_toolbox`]), and the request's `mcp` and `file_search` tools. A
    /// `file_search` over an id that is no agent or user of the tenant is a
    /// 400 naming it.
    async fn response_toolbox(
        &self,
        t: Tenant,
        stored: &[crate::api::types::Tool],
        tools: Option<&[ResponseTool]>,
        session: &Session,
    ) -> Result<(Toolbox, Listed)> {
        let (mut toolbox, mut listed) = self.session_toolbox(t, stored, session).await;
        let defs: Vec<(String, McpDef)> = tools
            .into_iter()
            .flatten()
            .filter(|tool| tool.kind == "mcp")
            .map(|tool| {
                let def = McpDef {
                    server_url: tool.server_url.clone().unwrap_or_default(),
                    allowed_tools: tool.allowed_tools.clone(),
                    require_approval: tool.require_approval.clone(),
                    headers: tool.headers.clone(),
                };
                (tool.server_label.clone().unwrap_or_default(), def)
            })
            .collect();
        let sources: Vec<McpSource<'_>> =
            defs.iter().map(|(label, def)| McpSource { label, def, approval_by_default: true }).collect();
        let more = self.add_mcp_tools(t, &mut toolbox, &sources).await;
        listed.items.extend(more.items);
        listed.unavailable.extend(more.unavailable);
        let mut owners = Vec::new();
        for (i, tool) in tools.into_iter().flatten().enumerate() {
            if tool.kind != "file_search" {
                continue;
            }
            for (j, id) in tool.vector_store_ids.iter().flatten().enumerate() {
                let field = format!("tools[{i}].vector_store_ids[{j}]");
                let owner = self.doc_owner_of(t, id).await?.ok_or_else(|| {
                    Error::BadRequest(format!(
                        "{field}: {id:?} is no agent or user id: a file_search searches the documents of                          agents and users, whose ids stand for vector stores"
                    ))
                })?;
                if !owners.contains(&owner) {
                    owners.push(owner);
                }
            }
        }
        if !owners.is_empty() {
            toolbox = toolbox.with_file_search(owners);
        }
        Ok((toolbox, listed))
    }

    /// The agent or user an id names, as a document owner (`None`: neither).
    async fn doc_owner_of(&self, t: Tenant, id: &str) -> Result<Option<DocOwner>> {
        let Ok(id) = Uuid::try_parse(id) else { return Ok(None) };
        for (kind, role) in [(Kind::Agent, OwnerRole::Agent), (Kind::User, OwnerRole::User)] {
            if self.store.get(t.0, kind, id).await?.is_some() {
                return Ok(Some(DocOwner { id, role }));
            }
        }
        Ok(None)
    }

    /// A response, whole (after the rounds of the server-run tools it calls).
    pub async fn response_create(&self, t: Tenant, req: CreateResponseRequest) -> Result<ModelResponse> {
        let mut turn = self.response_turn(t, req, None, false).await?;
        loop {
            let answer = turn.plan.provider.chat(&turn.plan.request).await?;
            let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
            match turn.rounds.after(self, t, &answered, &mut turn.plan.request).await? {
                After::Again => continue,
                After::End(ending) => return self.response_save(&mut turn, answered, ending).await,
            }
        }
    }

    /// Saves the turn and its `response` record (when `store`), and answers
    /// the completed response. A background response's run also ends here:
    /// its record is replaced and its `Run` deleted (see [`background`]).
    async fn response_save(
        &self,
        turn: &mut ResponseTurn,
        answered: Answered,
        ending: Ending,
    ) -> Result<ModelResponse> {
        let replies = turn.rounds.to_save(&answered, &ending);
        turn.saving.with_round_ids(&turn.rounds, &ending);
        let turn = &*turn;
        let usage = turn.rounds.total_usage(&answered.usage);
        let status = Status::of_answer(answered.answer.finish_reason(), ending.finish_reason.as_deref());
        let head = &turn.head;
        let made_count = replies.len();
        let mut conversation = Vec::new();
        let mut job = None;
        let answer = self
            .save_turn(&turn.saving, replies, |made| {
                if turn.remember.is_some() {
                    conversation = made.iter().map(history_item).collect();
                }
                let (inputs, outputs) = made.split_at(made.len() - made_count);
                let (decided, inputs) = inputs.split_at(turn.decided);
                let (committed, input_messages, tail) = match &turn.background {
                    Some(run) => run.ending(),
                    None => (Vec::new(), inputs.iter().map(|m| m.id).collect(), Vec::new()),
                };
                let made_now: Vec<&Message> = committed.iter().chain(decided).chain(outputs).collect();
                let mut output = turn.listed_tools.clone();
                output.extend(made_now.iter().flat_map(|m| items_of(m)));
                let response = model_response(head, status, output, Some(&usage));
                let reply = made_now.last().expect("the turn made its answer");
                let data = response_data(
                    head,
                    status,
                    &usage,
                    input_messages,
                    (reply.id, made_now.iter().map(|m| m.id).collect()),
                    turn.listed_tools.clone(),
                );
                let mut record = Record::fresh(Kind::Response, turn.saving.session, encode(&data)?);
                record.id = head.id;
                // The response's time, as answered.
                (record.created_at, record.updated_at) = (head.created_at, head.created_at);
                record.metadata = Some(head.metadata.0.clone());
                let expect = match &turn.background {
                    Some(run) => Expect::Version(run.response_version()),
                    None => Expect::Absent,
                };
                let mut ops = vec![Op::Put { record, expect }];
                ops.extend(tail);
                let turn_messages =
                    data.input_messages.iter().chain(&data.output_messages).copied().collect();
                ops.extend(LearnAfter::ops(turn.learning.as_ref(), turn_messages, &mut job)?);
                Ok((ops, Some(response)))
            })
            .await?;
        if let (Some(job), true) = (job, turn.saving.save) {
            self.learning_enqueue(turn.saving.tenant, job);
        }
        if let Some((chains, session, history)) = &turn.remember {
            chains.insert(head.id, Chain::then(session.clone(), history, conversation));
        }
        Ok(answer.expect("the response is made"))
    }

    /// The stored `response` record of a response id (404 when there is none).
    async fn response_record(&self, t: Tenant, id: &str) -> Result<Record> {
        let missing = || Error::NotFound(NotFound::Response { id: id.to_string() });
        let uuid = parse_response_id(id).ok_or_else(missing)?;
        match self.store.get(t.0, Kind::Response, uuid).await? {
            Some(rec) => Ok(rec),
            None => Err(missing()),
        }
    }

    /// A stored response.
    pub async fn response_get(&self, t: Tenant, id: &str) -> Result<ModelResponse> {
        let rec = self.response_record(t, id).await?;
        self.response_of(t, &rec).await
    }

    /// The response a `response` record keeps, as it stands: a background
    /// response under way shows what its run committed so far.
    async fn response_of(&self, t: Tenant, rec: &Record) -> Result<ModelResponse> {
        let id = response_id(rec.id);
        let data: ResponseData = serde_json::from_value(rec.data.clone())
            .map_err(|e| Error::Internal(format!("response {id} does not decode: {e}")))?;
        let under_way = data.background && matches!(data.status.as_deref(), Some("queued" | "in_progress"));
        let (mut output, outputs) = match under_way {
            true => self.background_output(t, rec.id).await?,
            false if data.output_messages.is_empty() => {
                (data.listed_tools.clone(), vec![data.output_message])
            }
            false => (data.listed_tools.clone(), data.output_messages.clone()),
        };
        for id in outputs {
            if let Some(m) = self.store.get(t.0, Kind::Message, id).await? {
                output.extend(items_of(&decode::<Message>(&m)?));
            }
        }
        let head = Head {
            id: rec.id,
            created_at: rec.created_at,
            model: data.model,
            instructions: data.instructions,
            previous_response_id: data.previous_response_id,
            conversation: data.conversation,
            temperature: data.temperature.unwrap_or(1.0),
            top_p: data.top_p.unwrap_or(1.0),
            presence_penalty: data.presence_penalty.unwrap_or(0.0),
            frequency_penalty: data.frequency_penalty.unwrap_or(0.0),
            top_logprobs: data.top_logprobs.unwrap_or(0),
            max_output_tokens: data.max_output_tokens,
            max_tool_calls: data.max_tool_calls,
            tools: serde_json::from_value(data.tools).unwrap_or_default(),
            tool_choice: data.tool_choice,
            parallel_tool_calls: data.parallel_tool_calls,
            text: data.text.unwrap_or(ResponseText { format: Some(TextFormat::text()), verbosity: None }),
            reasoning: data.reasoning,
            truncation: data.truncation.unwrap_or_default(),
            service_tier: data.service_tier.unwrap_or_else(|| "default".into()),
            safety_identifier: data.safety_identifier,
            prompt_cache_key: data.prompt_cache_key,
            user: data.user,
            store: true,
            metadata: Metadata(rec.metadata.clone().unwrap_or_default()),
            background: data.background,
        };
        let (input, output_tokens, total) = data.usage;
        let usage = ChatUsage { prompt_tokens: input, completion_tokens: output_tokens, total_tokens: total };
        let completed_at = data.completed_at.unwrap_or(rec.created_at.timestamp());
        let status =
            Status::of_record(data.status.as_deref(), data.incomplete_reason.as_deref(), completed_at);
        let usage = (!under_way).then_some(&usage);
        let mut response = model_response(&head, status, output, usage);
        response.error = data.error;
        Ok(response)
    }

    /// The items of a stored response's input (see the operation's description).
    pub async fn response_input_items(
        &self,
        t: Tenant,
        id: &str,
        params: InputItemListParams,
    ) -> Result<ItemList> {
        let rec = self.response_record(t, id).await?;
        let data: ResponseData = serde_json::from_value(rec.data.clone())
            .map_err(|e| Error::Internal(format!("response {id} does not decode: {e}")))?;
        let mut items = Vec::new();
        for mid in &data.input_messages {
            if let Some(m) = self.store.get(t.0, Kind::Message, *mid).await? {
                items.extend(items_of(&decode::<Message>(&m)?));
            }
        }
        if params.order == ItemOrder::Desc {
            items.reverse();
        }
        let start = match params.after.as_deref() {
            None => 0,
            Some(after) => {
                let wanted = super::conversations::canonical_item_id(after);
                match items.iter().position(|i| i.id() == wanted) {
                    Some(at) => at + 1,
                    None => {
                        let item =
                            NotFound::ResponseInputItem { response: id.to_string(), item: after.to_string() };
                        return Err(Error::NotFound(item.in_field("after")));
                    }
                }
            }
        };
        let limit = params.limit.unwrap_or(20).clamp(1, 100) as usize;
        let has_more = items.len() > start + limit;
        let data: Vec<ConversationItem> = items.into_iter().skip(start).take(limit).collect();
        Ok(super::conversations::item_list(data, has_more))
    }

    /// Deletes a stored response and the messages of its turn.
    pub async fn response_delete(&self, t: Tenant, id: &str) -> Result<ResponseDeleted> {
        let rec = self.response_record(t, id).await?;
        let data: ResponseData = serde_json::from_value(rec.data.clone())
            .map_err(|e| Error::Internal(format!("response {id} does not decode: {e}")))?;
        let session = rec.scope;
        if self.store.get(t.0, Kind::Run, rec.id).await?.is_some() {
            return Err(Error::Conflict(format!(
                "response {id} is running in the background: cancel it first (POST /v1/responses/{id}/cancel)"
            )));
        }
        let mut ops = vec![
            Op::Delete { kind: Kind::Response, id: rec.id, version: Some(rec.version) },
            self.session_changes(session),
        ];
        let mut outputs = data.output_messages.clone();
        if !outputs.contains(&data.output_message) {
            outputs.push(data.output_message);
        }
        for mid in data.input_messages.iter().chain(&outputs) {
            if self.store.get(t.0, Kind::Message, *mid).await?.is_some() {
                ops.push(Op::Delete { kind: Kind::Message, id: *mid, version: None });
            }
        }
        let committed = self.commit_answering(t, ops, || None::<()>).await;
        self.history.forget(t, session);
        committed?;
        Ok(ResponseDeleted { id: id.to_owned(), object: "response.deleted".into(), deleted: true })
    }
}

/// Whether `agent` (the model, when it names one) may answer in `session`: a
/// session of other agents is a 400 naming `model`.
fn agent_of_session(agent: Option<&crate::api::types::Agent>, session: &Session) -> Result<()> {
    match agent {
        Some(a) if !session.agents.is_empty() && !session.agents.contains(&a.id) => {
            Err(Error::BadRequest(format!("model: agent {} is not an agent of session {}", a.id, session.id)))
        }
        _ => Ok(()),
    }
}

/// Each `function_call_output` of `items` answers a call of the conversation:
/// one of `history`'s, or a `function_call` item before it. One that answers
/// no call is a 400 naming its `call_id` (as OpenAI's API answers it).
fn calls_answered(history: &History, items: &[crate::api::types::InputItem]) -> Result<()> {
    if !items.iter().any(|i| i.kind() == "function_call_output") {
        return Ok(());
    }
    let mut calls: std::collections::HashSet<&str> =
        history.iter().flat_map(|h| h.message.tool_calls.iter().flatten()).map(|c| c.id.as_str()).collect();
    for (i, item) in items.iter().enumerate() {
        let Some(id) = item.call_id.as_deref() else { continue };
        match item.kind() {
            "function_call" => {
                calls.insert(id);
            }
            "function_call_output" if !calls.contains(id) => {
                return Err(Error::BadRequest(format!(
                    "input[{i}].call_id: no function call with call_id {id:?} in this conversation: a \
                     function_call_output answers a function_call of the previous response, or of \
                     this input before it"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A request's function tool as a chat's.
fn chat_tool(t: &ResponseTool) -> ChatTool {
    ChatTool {
        kind: ToolCallType::Function,
        function: ChatFunction {
            name: t.name.clone().unwrap_or_default(),
            description: t.description.clone(),
            parameters: t.parameters.clone(),
        },
    }
}

/// The provider's `response_format` for a text format (`None` for plain text).
fn response_format(format: &TextFormat) -> Option<Value> {
    match format.kind {
        TextFormatType::Text => None,
        TextFormatType::JsonObject => Some(json!({"type": "json_object"})),
        TextFormatType::JsonSchema => {
            let mut spec = json!({"name": format.name, "schema": format.schema});
            if let Some(d) = &format.description {
                spec["description"] = json!(d);
            }
            if let Some(s) = format.strict {
                spec["strict"] = json!(s);
            }
            Some(json!({"type": "json_schema", "json_schema": spec}))
        }
    }
}

fn model_response(
    head: &Head,
    status: Status,
    output: Vec<ConversationItem>,
    usage: Option<&ChatUsage>,
) -> ModelResponse {
    let status_name = status.name();
    let completed_at = match status {
        Status::Completed(at) => Some(at),
        _ => None,
    };
    ModelResponse {
        id: response_id(head.id),
        object: "response".into(),
        created_at: head.created_at.timestamp(),
        completed_at,
        status: status_name.into(),
        error: None,
        incomplete_details: match status {
            Status::Incomplete(reason) => Some(IncompleteDetails { reason: reason.into() }),
            _ => None,
        },
        instructions: head.instructions.clone(),
        max_output_tokens: head.max_output_tokens,
        max_tool_calls: head.max_tool_calls,
        model: head.model.clone(),
        output,
        parallel_tool_calls: head.parallel_tool_calls,
        previous_response_id: head.previous_response_id.clone(),
        conversation: head.conversation.map(|id| ConversationId { id: ConvId(id) }),
        temperature: head.temperature,
        top_p: head.top_p,
        presence_penalty: head.presence_penalty,
        frequency_penalty: head.frequency_penalty,
        top_logprobs: head.top_logprobs,
        tool_choice: head.tool_choice.clone(),
        tools: head.tools.clone(),
        text: head.text.clone(),
        reasoning: head.reasoning.clone(),
        truncation: head.truncation,
        service_tier: head.service_tier.clone(),
        safety_identifier: head.safety_identifier.clone(),
        prompt_cache_key: head.prompt_cache_key.clone(),
        user: head.user.clone(),
        store: head.store,
        usage: usage.map(|u| ResponseUsage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            ..ResponseUsage::default()
        }),
        metadata: head.metadata.0.clone(),
        background: head.background,
    }
}

/// What a `response` record keeps of `head` ended (or standing) as
/// `status`: its input messages, its answer and every message it made
/// (`output`), and its `mcp_list_tools` items.
fn response_data(
    head: &Head,
    status: Status,
    usage: &ChatUsage,
    input_messages: Vec<Uuid>,
    (output_message, output_messages): (Uuid, Vec<Uuid>),
    listed_tools: Vec<ConversationItem>,
) -> ResponseData {
    ResponseData {
        model: head.model.clone(),
        instructions: head.instructions.clone(),
        previous_response_id: head.previous_response_id.clone(),
        conversation: head.conversation,
        input_messages,
        output_message,
        output_messages,
        listed_tools,
        usage: (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        temperature: Some(head.temperature),
        top_p: Some(head.top_p),
        max_output_tokens: head.max_output_tokens,
        tools: serde_json::to_value(&head.tools).unwrap_or_default(),
        tool_choice: head.tool_choice.clone(),
        parallel_tool_calls: head.parallel_tool_calls,
        status: status.stored(),
        background: head.background,
        error: None,
        incomplete_reason: match status {
            Status::Incomplete(reason) if reason != "max_output_tokens" => Some(reason.into()),
            _ => None,
        },
        completed_at: match status {
            Status::Completed(at) => Some(at),
            _ => None,
        },
        text: Some(head.text.clone()),
        presence_penalty: Some(head.presence_penalty),
        frequency_penalty: Some(head.frequency_penalty),
        top_logprobs: Some(head.top_logprobs),
        reasoning: head.reasoning.clone(),
        max_tool_calls: head.max_tool_calls,
        service_tier: Some(head.service_tier.clone()),
        safety_identifier: head.safety_identifier.clone(),
        prompt_cache_key: head.prompt_cache_key.clone(),
        user: head.user.clone(),
        truncation: Some(head.truncation),
    }
}

// ---------------------------------------------------------------- streaming

/// The events of a streamed response: it ends after `response.completed`, or
/// with one `Err` (to be sent as `response.failed`).
pub type ResponseEvents = Items<std::result::Result<ResponseStreamEvent, StreamFailure>>;

impl App {
    /// A response answered event by event. The provider's stream is opened
    /// first, so that a provider failing at once is an ordinary error.
    ///
    /// With `chains` (a WebSocket connection's; see [`Chains`]): the response
    /// may continue one of the connection's that was not stored, is
    /// remembered there when it is not stored either, and when it fails (an
    /// error, or a failure after it started) its `previous_response_id` is
    /// forgotten there.
    pub async fn response_stream(
        &self,
        t: Tenant,
        req: CreateResponseRequest,
        chains: Option<Chains>,
    ) -> Result<ResponseEvents> {
        let continued = match (&chains, &req.previous_response_id) {
            (Some(chains), Some(previous)) => parse_response_id(previous).map(|id| (chains.clone(), id)),
            _ => None,
        };
        let forget = |e: Error| {
            if let Some((chains, id)) = &continued {
                chains.forget(*id);
            }
            e
        };
        let turn = self.response_turn(t, req, chains.as_ref(), false).await.map_err(forget)?;
        let upstream =
            turn.plan.provider.chat_stream(&turn.plan.request).await.map_err(|e| forget(e.into()))?;
        let mut events = Events::new(turn.answer_id());
        events.hide(turn.rounds.toolbox.specs().map(|s| s.function.name.clone()));
        let mut head = events.start(&model_response(&turn.head, Status::InProgress, Vec::new(), None));
        head.extend(events.listed(&turn.listed_tools));
        // The calls the input's approvals decided ran already: their items come next.
        let decided: Vec<ConversationItem> = turn.saving.new_messages[..turn.decided]
            .iter()
            .zip(turn.saving.ids.iter().flatten())
            .flat_map(|(m, id)| items_of(&preview(*id, m)))
            .collect();
        head.extend(events.ran(decided));
        let shape = ResponseShape { app: self.clone(), turn, events, continued };
        Ok(drive::stream(upstream, shape, head.into_iter().map(Ok).collect()))
    }
}

/// A streamed response: its events ([`Events`]), the turn saved before the last.
struct ResponseShape {
    app: App,
    turn: ResponseTurn,
    events: Events,
    /// The connection's memory and the response this one continues, forgotten there if it fails.
    continued: Option<(Chains, Uuid)>,
}

impl ResponseShape {
    /// The items of the server's runs of the last round (from `made`, the
    /// round's messages): its calls of `api_call` tools as `function_call`
    /// items, then an item per result — as the saved messages show them.
    fn round_items(&self, from: usize) -> Vec<ConversationItem> {
        let rounds = &self.turn.rounds;
        let ids = &rounds.made_ids;
        let made = &rounds.made;
        let mut items = Vec::new();
        for (i, m) in made.iter().enumerate().skip(from) {
            let message = preview(ids.get(i).copied().unwrap_or_else(Uuid::now_v7), m);
            let of = items_of(&message);
            if m.role == Role::Assistant {
                // The text and the client's calls were streamed already.
                let server: std::collections::HashSet<&str> = m
                    .tool_calls
                    .iter()
                    .flatten()
                    .filter(|c| rounds.toolbox.get(&c.function.name).is_some())
                    .map(|c| c.id.as_str())
                    .collect();
                items.extend(of.into_iter().filter(|item| match item {
                    ConversationItem::FunctionCall { call_id, .. } => server.contains(call_id.as_str()),
                    ConversationItem::McpApprovalRequest { .. } => true,
                    _ => false,
                }));
            } else {
                items.extend(of);
            }
        }
        items
    }
}

/// A message about to be saved under `id`, as it will read.
fn preview(id: Uuid, m: &CreateMessageRequest) -> Message {
    Message {
        id,
        session_id: Uuid::nil(),
        role: m.role,
        content: m.content.clone(),
        name: m.name.clone(),
        tool_calls: m.tool_calls.clone(),
        tool_call_id: m.tool_call_id.clone(),
        parts: m.parts.clone(),
        token_count: 0,
        metadata: m.metadata.clone(),
        created_at: chrono::Utc::now(),
    }
}

impl Shape for ResponseShape {
    type Item = std::result::Result<ResponseStreamEvent, StreamFailure>;

    fn request(&self) -> &wire::CompletionRequest {
        &self.turn.plan.request
    }

    fn chunk(
        &mut self,
        chunk: wire::CompletionChunk,
        _first: (&str, &str),
        out: &mut std::collections::VecDeque<Self::Item>,
    ) {
        out.extend(self.events.chunk(chunk).into_iter().map(Ok));
    }

    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<End<Self::Item>>> {
        Box::pin(async move {
            let t = self.turn.saving.tenant;
            let made_before = self.turn.rounds.made.len();
            let after = self.turn.rounds.after(&self.app, t, &answered, &mut self.turn.plan.request).await?;
            let text = answered.answer.text();
            let toolbox = &self.turn.rounds.toolbox;
            let client_calls: Vec<wire::ToolCall> = answered
                .answer
                .tool_calls()
                .iter()
                .filter(|c| toolbox.get(&c.function.name).is_none())
                .cloned()
                .collect();
            let ran = self.turn.rounds.made.len() > made_before;
            let mut items = if ran {
                self.events.close_round(&text, &client_calls)
            } else {
                self.events.close(&text, &client_calls)
            };
            if ran {
                items.extend(self.events.ran(self.round_items(made_before)));
            }
            match after {
                After::Again => {
                    self.events.next_round(self.turn.answer_id());
                    let upstream = self.turn.plan.provider.chat_stream(&self.turn.plan.request).await?;
                    Ok(End::Again(upstream, items.into_iter().map(Ok).collect()))
                }
                After::End(ending) => {
                    let response = self.app.response_save(&mut self.turn, answered, ending).await?;
                    items.push(self.events.completed(response));
                    Ok(End::Done(items.into_iter().map(Ok).collect()))
                }
            }
        })
    }

    fn failure(&mut self, error: Error) -> Self::Item {
        if let Some((chains, id)) = &self.continued {
            chains.forget(*id);
        }
        let response = model_response(&self.turn.head, Status::Failed, Vec::new(), None);
        Err(self.events.failed(error, response))
    }
}
