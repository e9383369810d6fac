//! OpenAI's chat completions and model list (`/v1`), over the same agents,
//! documents and providers as session chat.
//!
//! A completion is one turn (see [`super::turn`]) with no session: the
//! history is the request's messages and nothing is saved. When `model` is
//! one of the tenant's agents' ids, that agent answers as in a session chat
//! (its system message, tools, recall and settings); any other model name
//! goes to the provider that serves it, as sent.

use std::collections::VecDeque;

use chrono::Utc;
use futures::future::BoxFuture;
use serde_json::Value;
use uuid::Uuid;

use super::conversations::text_of;
use super::turn::convert::{answer_id, contract_chunk, contract_usage, from_wire_call, to_wire_call};
use super::turn::drive::{self, Items};
use super::turn::plan::{New, tool_specs};
use super::turn::{Answered, Ask, Driver, Plan, Shape, SystemFor};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    Agent, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatSettings,
    ChatUsage, CompletionAnswerMessage, CompletionChoice, CompletionContent, CompletionMessage,
    CompletionRole, Model, ModelList, StopSequences, Tool,
};
use crate::models::wire;
use crate::store::ListQuery;

/// The most agents `GET /v1/models` lists.
pub const MODEL_LIST_AGENTS: usize = 10_000;

/// What `owned_by` says of an agent.
const OWNED_BY: &str = "agent-platform";

/// A completion, planned.
pub struct CompletionTurn {
    plan: Plan,
    /// Whether a streamed answer ends with a usage chunk (`stream_options.include_usage`).
    include_usage: bool,
}

/// The chunks of a streamed completion; it ends after the last chunk, or with one `Err`.
pub type CompletionChunks = Items<Result<ChatCompletionChunk>>;

impl App {
    /// The tenant's agents (oldest first, at most [`MODEL_LIST_AGENTS`]), then
    /// the model names the providers list.
    pub async fn model_list(&self, t: Tenant) -> Result<ModelList> {
        let mut data = Vec::new();
        let mut q = ListQuery::oldest_first(0, 0);
        while data.len() < MODEL_LIST_AGENTS {
            q.limit = (MODEL_LIST_AGENTS - data.len()).min(1000);
            let agents = self.agent_list(t, &q).await?;
            let done = agents.len() < q.limit;
            q.after = agents.last().map(|a| (a.created_at, a.id));
            data.extend(agents.into_iter().map(|a| Model {
                id: a.id.to_string(),
                object: "model".into(),
                created: a.created_at.timestamp(),
                owned_by: OWNED_BY.into(),
            }));
            if done {
                break;
            }
        }
        for provider in self.models.list() {
            data.extend(provider.models().iter().map(|m| Model {
                id: m.clone(),
                object: "model".into(),
                created: 0,
                owned_by: provider.name().to_owned(),
            }));
        }
        Ok(ModelList { object: "list".into(), data })
    }

    /// The agent a completion's `model` names, if it names one. A uuid that is
    /// no agent of the tenant and no provider's listed model is a 404, as
    /// another tenant's agent is.
    pub(super) async fn completion_agent(&self, t: Tenant, model: &str) -> Result<Option<Agent>> {
        let Ok(id) = Uuid::parse_str(model) else { return Ok(None) };
        match self.agent_get(t, id).await {
            Ok(agent) => Ok(Some(agent)),
            Err(Error::NotFound(_))
                if self.models.list().iter().any(|p| p.models().iter().any(|m| m == model)) =>
            {
                Ok(None)
            }
            Err(Error::NotFound(_)) => {
                Err(Error::NotFound(NotFound::ModelAgent { model: model.to_string() }))
            }
            Err(e) => Err(e),
        }
    }

    /// The stored tools of an agent (oldest first).
    pub(super) async fn agent_tools(&self, t: Tenant, agent: Uuid) -> Result<Vec<Tool>> {
        let all = ListQuery::oldest_first(0, usize::MAX);
        self.list_resources(t, agent, &all).await
    }

    /// Plans a completion.
    async fn completion_turn(&self, t: Tenant, mut req: ChatCompletionRequest) -> Result<CompletionTurn> {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let messages: Vec<wire::ChatMessage> =
            std::mem::take(&mut req.messages).into_iter().map(wire_message).collect();
        let agent = self.completion_agent(t, &req.model).await?;
        let stored_tools = match &agent {
            Some(agent) => self.agent_tools(t, agent.id).await?,
            None => Vec::new(),
        };
        let mut plan = self
            .plan(
                t,
                Ask {
                    agent: agent.as_ref(),
                    model: if agent.is_some() { None } else { Some(&req.model) },
                    settings: settings_of(&req),
                    tools: tool_specs(&stored_tools, req.tools.as_deref()),
                    recall: Some(&[]),
                    system: Some(SystemFor { users: &[], session: None }),
                    instructions: None,
                    history: None,
                    new: New::Sent(messages),
                    render_templates: false,
                    tool_choice: req.tool_choice.map(super::turn::plan::wire_tool_choice),
                    response_format: req.response_format.map(Value::Object),
                    stream: req.stream,
                },
            )
            .await?;
        if let Some(v) = req.parallel_tool_calls {
            plan.request.extra.insert("parallel_tool_calls".into(), Value::Bool(v));
        }
        if let Some(user) = req.user {
            plan.request.extra.insert("user".into(), Value::String(user));
        }
        Ok(CompletionTurn { plan, include_usage })
    }

    /// A chat completion, whole.
    pub async fn completion(&self, t: Tenant, req: ChatCompletionRequest) -> Result<ChatCompletion> {
        let turn = self.completion_turn(t, req).await?;
        let answer = turn.plan.provider.chat(&turn.plan.request).await?;
        let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
        let model = answered.model_or(&turn.plan.request);
        Ok(ChatCompletion {
            id: answer_id(&answered.id),
            object: "chat.completion".into(),
            created: Utc::now().timestamp(),
            model,
            choices: answered
                .answer
                .choices
                .into_iter()
                .map(|c| CompletionChoice {
                    index: c.index.into(),
                    message: CompletionAnswerMessage {
                        role: "assistant".into(),
                        content: c.message.content,
                        refusal: None,
                        tool_calls: c
                            .message
                            .tool_calls
                            .filter(|cs| !cs.is_empty())
                            .map(|cs| cs.iter().map(from_wire_call).collect()),
                    },
                    finish_reason: c.finish_reason,
                    logprobs: None,
                })
                .collect(),
            usage: answered.usage,
        })
    }

    /// A chat completion, chunk by chunk. The provider's stream is opened
    /// first, so a provider that fails at once is an ordinary error.
    pub async fn completion_stream(&self, t: Tenant, req: ChatCompletionRequest) -> Result<CompletionChunks> {
        let turn = self.completion_turn(t, req).await?;
        let upstream = turn.plan.provider.chat_stream(&turn.plan.request).await?;
        let shape = CompletionShape {
            turn,
            id: String::new(),
            model: String::new(),
            created: Utc::now().timestamp(),
            usage_sent: false,
        };
        Ok(drive::stream(upstream, shape, Vec::new()))
    }
}

/// A streamed completion: chat-completion chunks, and the usage chunk when asked for.
struct CompletionShape {
    turn: CompletionTurn,
    /// The answer's id and model, set at the first chunk.
    id: String,
    model: String,
    created: i64,
    usage_sent: bool,
}

impl CompletionShape {
    fn chunk_of(&self, choices: Vec<ChatChunkChoice>, usage: Option<ChatUsage>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: if self.id.is_empty() { answer_id("") } else { self.id.clone() },
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: if self.model.is_empty() {
                self.turn.plan.request.model.clone()
            } else {
                self.model.clone()
            },
            choices,
            usage,
        }
    }
}

impl Shape for CompletionShape {
    type Item = Result<ChatCompletionChunk>;

    fn request(&self) -> &wire::CompletionRequest {
        &self.turn.plan.request
    }

    fn chunk(&mut self, chunk: wire::CompletionChunk, first: (&str, &str), out: &mut VecDeque<Self::Item>) {
        if self.id.is_empty() {
            self.id = answer_id(first.0);
            self.model =
                if first.1.is_empty() { self.turn.plan.request.model.clone() } else { first.1.to_owned() };
        }
        let usage = if self.turn.include_usage { chunk.usage.map(contract_usage) } else { None };
        self.usage_sent |= usage.is_some();
        let choices = contract_chunk(chunk).choices;
        if choices.is_empty() && usage.is_none() {
            return;
        }
        out.push_back(Ok(self.chunk_of(choices, usage)));
    }

    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<Vec<Self::Item>>> {
        let last = if self.turn.include_usage && !self.usage_sent {
            self.usage_sent = true;
            vec![Ok(self.chunk_of(Vec::new(), Some(answered.usage)))]
        } else {
            Vec::new()
        };
        Box::pin(async move { Ok(last) })
    }

    fn failure(&mut self, error: Error) -> Self::Item {
        Err(error)
    }
}

/// The request's sampling settings, as an agent's `default_settings` are.
fn settings_of(req: &ChatCompletionRequest) -> ChatSettings {
    ChatSettings {
        temperature: req.temperature,
        top_p: req.top_p,
        max_tokens: req.max_completion_tokens.or(req.max_tokens),
        frequency_penalty: req.frequency_penalty,
        presence_penalty: req.presence_penalty,
        stop: req.stop.clone().map(|s| match s {
            StopSequences::One(one) => vec![one],
            StopSequences::Many(many) => many,
        }),
        seed: req.seed,
    }
}

/// A request message as the provider takes it: `developer` is sent as
/// `system`, text parts are joined by newlines. Taken by value: a long
/// history's texts move, not copied.
fn wire_message(m: CompletionMessage) -> wire::ChatMessage {
    let role = match m.role {
        CompletionRole::System | CompletionRole::Developer => wire::Role::System,
        CompletionRole::User => wire::Role::User,
        CompletionRole::Assistant => wire::Role::Assistant,
        CompletionRole::Tool => wire::Role::Tool,
    };
    let content = m.content.map(|c| match c {
        CompletionContent::Text(text) => text,
        parts => text_of(Some(&parts)),
    });
    wire::ChatMessage {
        role,
        content,
        name: m.name,
        tool_calls: m.tool_calls.as_ref().map(|cs| cs.iter().map(to_wire_call).collect()),
        tool_call_id: m.tool_call_id,
        reasoning_content: None,
    }
}
