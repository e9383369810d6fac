//! OpenAI's chat completions and model list (`/v1`), over the same agents,
//! documents and providers as session chat.
//!
//! A completion is one turn (see [`super::turn`]) with no session: the
//! history is the request's messages and nothing is saved. When `model` is
//! one of the tenant's agents' ids, that agent answers as in a session chat
//! (its system message, tools, recall and settings); any other model name
//! goes to the provider that serves it, as sent.

use std::collections::{HashSet, VecDeque};

use chrono::Utc;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use uuid::Uuid;

use super::parts::{of_content, wire_part};
use super::turn::convert::{answer_id, contract_delta, contract_usage, from_wire_call, to_wire_call};
use super::turn::drive::{self, End, Items};
use super::turn::plan::{New, tool_specs};
use super::turn::{Answered, Ask, Driver, Plan, Shape, SystemFor};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    Agent, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatSettings, ChatUsage,
    CompletionAnswerMessage, CompletionChoice, CompletionChunkChoice, CompletionContent, CompletionMessage,
    CompletionRole, CompletionTokensDetails, CompletionUsage, Model, ModelList, PromptTokensDetails,
    StopSequences, Tool,
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
    /// each provider's models: the names its configuration lists, then those
    /// it lists itself (asked of all providers at once; see
    /// [`crate::models::Provider::listed_models`]). Each name once.
    pub async fn model_list(&self, t: Tenant) -> Result<ModelList> {
        let mut data = Vec::new();
        let mut q = ListQuery::oldest_first(0, 0);
        while data.len() < MODEL_LIST_AGENTS {
            q.limit = (MODEL_LIST_AGENTS - data.len()).min(1000);
            let agents = self.agent_list(t, &q).await?;
            let done = agents.len() < q.limit;
            q.after = agents.last().map(|a| (a.created_at, a.id));
            data.extend(agents.iter().map(agent_model));
            if done {
                break;
            }
        }
        let mut seen: HashSet<String> = data.iter().map(|m| m.id.clone()).collect();
        data.extend(self.provider_models().await.into_iter().filter(|m| seen.insert(m.id.clone())));
        Ok(ModelList { object: "list".into(), data })
    }

    /// The providers' models, in order (each provider's configured names, then
    /// those it lists itself); a name may come more than once.
    async fn provider_models(&self) -> Vec<Model> {
        let providers = self.models.list();
        let listed = futures::future::join_all(providers.iter().map(|p| p.listed_models())).await;
        let model = |id: &str, created: i64, owner: &str| Model {
            id: id.to_owned(),
            object: "model".into(),
            created,
            owned_by: owner.to_owned(),
        };
        let mut out = Vec::new();
        for (provider, listed) in providers.iter().zip(listed) {
            out.extend(provider.models().iter().map(|m| model(m, 0, provider.name())));
            out.extend(listed.iter().map(|m| model(&m.id, m.created, provider.name())));
        }
        out
    }

    /// A model: one of the tenant's agents by its id, or a name the providers
    /// list (see [`App::model_list`]); else a 404.
    pub async fn model_get(&self, t: Tenant, model: &str) -> Result<Model> {
        if let Ok(id) = Uuid::parse_str(model) {
            match self.agent_get(t, id).await {
                Ok(agent) => return Ok(agent_model(&agent)),
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let configured = self.models.list().iter().find_map(|p| {
            p.models().iter().any(|m| m == model).then(|| Model {
                id: model.to_owned(),
                object: "model".into(),
                created: 0,
                owned_by: p.name().to_owned(),
            })
        });
        if let Some(found) = configured {
            return Ok(found);
        }
        self.provider_models()
            .await
            .into_iter()
            .find(|m| m.id == model)
            .ok_or_else(|| Error::NotFound(NotFound::Model { model: model.to_owned() }))
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
        let max_part = self.models.max_input_part_bytes();
        let messages = std::mem::take(&mut req.messages)
            .into_iter()
            .enumerate()
            .map(|(i, m)| wire_message(m, i, max_part))
            .collect::<Result<Vec<wire::ChatMessage>>>()?;
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
        let extra = &mut plan.request.extra;
        for (name, value) in [
            ("parallel_tool_calls", req.parallel_tool_calls.map(Value::Bool)),
            ("user", req.user.map(Value::String)),
            ("logprobs", req.logprobs.map(Value::Bool)),
            ("top_logprobs", req.top_logprobs.map(|n| json!(n))),
            ("logit_bias", req.logit_bias.map(Value::Object)),
            ("service_tier", req.service_tier.map(Value::String)),
            ("reasoning_effort", req.reasoning_effort.map(|e| json!(e))),
            ("verbosity", req.verbosity.map(|v| json!(v))),
            ("prompt_cache_key", req.prompt_cache_key.map(Value::String)),
            ("safety_identifier", req.safety_identifier.map(Value::String)),
        ] {
            if let Some(value) = value {
                extra.insert(name.into(), value);
            }
        }
        Ok(CompletionTurn { plan, include_usage })
    }

    /// A chat completion, whole.
    pub async fn completion(&self, t: Tenant, req: ChatCompletionRequest) -> Result<ChatCompletion> {
        let turn = self.completion_turn(t, req).await?;
        let answer = turn.plan.provider.chat(&turn.plan.request).await?;
        let answered = Driver::whole(answer).collect(&turn.plan.request).await?;
        let model = answered.model_or(&turn.plan.request);
        let usage = completion_usage(answered.usage, answered.answer.usage);
        let answer = answered.answer;
        Ok(ChatCompletion {
            id: answer_id(&answered.id),
            object: "chat.completion".into(),
            created: Utc::now().timestamp(),
            model,
            choices: answer
                .choices
                .into_iter()
                .map(|c| {
                    let calls = c.message.tool_calls.filter(|cs| !cs.is_empty());
                    let finish_reason = c
                        .finish_reason
                        .unwrap_or_else(|| if calls.is_some() { "tool_calls" } else { "stop" }.into());
                    CompletionChoice {
                        index: c.index.into(),
                        message: CompletionAnswerMessage {
                            role: "assistant".into(),
                            content: c.message.content.map(|content| content.text().into_owned()),
                            refusal: c.message.refusal,
                            tool_calls: calls.map(|cs| cs.iter().map(from_wire_call).collect()),
                            annotations: c.message.annotations.unwrap_or_default(),
                        },
                        finish_reason: Some(finish_reason),
                        logprobs: c.logprobs,
                    }
                })
                .collect(),
            usage,
            system_fingerprint: answer.system_fingerprint,
            service_tier: answer.service_tier,
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
            system_fingerprint: None,
            service_tier: None,
            usage_sent: false,
        };
        Ok(drive::stream(upstream, shape, Vec::new()))
    }
}

/// An agent as a model.
fn agent_model(a: &Agent) -> Model {
    Model {
        id: a.id.to_string(),
        object: "model".into(),
        created: a.created_at.timestamp(),
        owned_by: OWNED_BY.into(),
    }
}

/// A completion's usage: the counts (the provider's, or ours), with the provider's details.
fn completion_usage(counts: ChatUsage, provider: Option<wire::Usage>) -> CompletionUsage {
    let prompt = provider.and_then(|u| u.prompt_tokens_details).unwrap_or_default();
    let completion = provider.and_then(|u| u.completion_tokens_details).unwrap_or_default();
    CompletionUsage {
        prompt_tokens: counts.prompt_tokens,
        completion_tokens: counts.completion_tokens,
        total_tokens: counts.total_tokens,
        prompt_tokens_details: PromptTokensDetails {
            cached_tokens: prompt.cached_tokens.into(),
            audio_tokens: prompt.audio_tokens.into(),
        },
        completion_tokens_details: CompletionTokensDetails {
            reasoning_tokens: completion.reasoning_tokens.into(),
            audio_tokens: completion.audio_tokens.into(),
            accepted_prediction_tokens: completion.accepted_prediction_tokens.into(),
            rejected_prediction_tokens: completion.rejected_prediction_tokens.into(),
        },
    }
}

/// A streamed completion: chat-completion chunks, and the usage chunk when asked for.
struct CompletionShape {
    turn: CompletionTurn,
    /// The answer's id and model, set at the first chunk.
    id: String,
    model: String,
    created: i64,
    /// The provider's, from the first chunk that has them.
    system_fingerprint: Option<String>,
    service_tier: Option<String>,
    usage_sent: bool,
}

impl CompletionShape {
    fn chunk_of(
        &self,
        choices: Vec<CompletionChunkChoice>,
        usage: Option<CompletionUsage>,
    ) -> ChatCompletionChunk {
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
            system_fingerprint: self.system_fingerprint.clone(),
            service_tier: self.service_tier.clone(),
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
        if chunk.system_fingerprint.is_some() {
            self.system_fingerprint = chunk.system_fingerprint;
        }
        if chunk.service_tier.is_some() {
            self.service_tier = chunk.service_tier;
        }
        let usage = match chunk.usage {
            Some(u) if self.turn.include_usage => Some(completion_usage(contract_usage(u), Some(u))),
            _ => None,
        };
        self.usage_sent |= usage.is_some();
        let choices: Vec<CompletionChunkChoice> = chunk
            .choices
            .into_iter()
            .map(|c| CompletionChunkChoice {
                index: c.index,
                delta: contract_delta(c.delta),
                finish_reason: c.finish_reason,
                logprobs: c.logprobs,
            })
            .collect();
        if choices.is_empty() && usage.is_none() {
            return;
        }
        out.push_back(Ok(self.chunk_of(choices, usage)));
    }

    fn end(&mut self, answered: Answered) -> BoxFuture<'_, Result<End<Self::Item>>> {
        let last = if self.turn.include_usage && !self.usage_sent {
            self.usage_sent = true;
            let usage = completion_usage(answered.usage, answered.answer.usage);
            vec![Ok(self.chunk_of(Vec::new(), Some(usage)))]
        } else {
            Vec::new()
        };
        Box::pin(async move { Ok(End::Done(last)) })
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
/// `system`; text parts are joined by newlines, unless the message has images
/// or files (then its parts go as given; see [`super::parts`]). Taken by
/// value: a long history's texts move, not copied.
fn wire_message(m: CompletionMessage, i: usize, max_part: usize) -> Result<wire::ChatMessage> {
    let role = match m.role {
        CompletionRole::System | CompletionRole::Developer => wire::Role::System,
        CompletionRole::User => wire::Role::User,
        CompletionRole::Assistant => wire::Role::Assistant,
        CompletionRole::Tool => wire::Role::Tool,
    };
    let content = match m.content {
        None => None,
        Some(CompletionContent::Text(text)) => Some(wire::Content::Text(text)),
        Some(parts) => {
            let (text, parts) = of_content(Some(parts), &format!("messages[{i}].content"), max_part)?;
            Some(match parts {
                Some(parts) => wire::Content::Parts(parts.iter().map(wire_part).collect()),
                None => wire::Content::Text(text),
            })
        }
    };
    Ok(wire::ChatMessage {
        role,
        content,
        name: m.name,
        tool_calls: m.tool_calls.as_ref().map(|cs| cs.iter().map(to_wire_call).collect()),
        tool_call_id: m.tool_call_id,
        ..wire::ChatMessage::default()
    })
}
