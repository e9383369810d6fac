//! OpenAI's chat completions and model list (`/v1`), over the same agents,
//! documents and providers as session chat.
//!
//! A completion is stateless: the history is the request's messages and
//! nothing is saved. When `model` is one of the tenant's agents' ids, that
//! agent answers as in a session chat (its system message, tools, recall and
//! settings: [`super::chat_prepare`]'s pieces, with no session); any other
//! model name goes to the provider that serves it, as sent.

use chrono::Utc;
use futures::{Stream, StreamExt};
use serde_json::Value;
use uuid::Uuid;

use super::chat::{answer_id, contract_usage, merge_settings, to_wire_call, usage_or_count};
use super::chat_prepare::{completion_request, template_context, tool_specs};
use super::chat_stream::contract_chunk;
use super::conversations::text_of;
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    Agent, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest, ChatSettings, ChatUsage,
    CompletionAnswerMessage, CompletionChoice, CompletionContent, CompletionMessage, CompletionRole,
    DocReference, Model, ModelList, StopSequences, Tool,
};
use crate::models::provider::CompletionStream as UpstreamStream;
use crate::models::{self, ChunkAccumulator, DEFAULT_SYSTEM_TEMPLATE, Provider, wire};
use crate::store::ListQuery;

/// The most agents `GET /v1/models` lists.
pub const MODEL_LIST_AGENTS: usize = 10_000;

/// What `owned_by` says of an agent.
const OWNED_BY: &str = "agent-platform";

/// A completion ready for the model call.
pub struct PreparedCompletion {
    pub provider: Provider,
    pub request: wire::CompletionRequest,
    /// Whether a streamed answer ends with a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// The chunks of a streamed completion; it ends after the last chunk, or with one `Err`.
pub type CompletionChunks = std::pin::Pin<Box<dyn Stream<Item = Result<ChatCompletionChunk>> + Send>>;

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

    /// The request to send and its provider.
    pub async fn completion_prepare(
        &self,
        t: Tenant,
        mut req: ChatCompletionRequest,
    ) -> Result<PreparedCompletion> {
        let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
        let mut messages: Vec<wire::ChatMessage> =
            std::mem::take(&mut req.messages).into_iter().map(wire_message).collect();
        let request_settings = settings_of(&req);
        let mut extra = serde_json::Map::new();
        if let Some(v) = req.parallel_tool_calls {
            extra.insert("parallel_tool_calls".into(), Value::Bool(v));
        }
        if let Some(user) = &req.user {
            extra.insert("user".into(), Value::String(user.clone()));
        }
        let (provider, model, tools, settings) = match self.completion_agent(t, &req.model).await? {
            None => {
                let provider = self.models.resolve(&req.model)?.clone();
                (provider, req.model.clone(), tool_specs(&[], req.tools.as_deref()), request_settings)
            }
            Some(agent) => {
                let (provider, model) = self.choose_model(None, &agent)?;
                let settings = merge_settings(agent.default_settings.as_ref(), &request_settings);
                let all = ListQuery::oldest_first(0, usize::MAX);
                let agent_tools: Vec<Tool> = self.list_resources(t, agent.id, &all).await?;
                let tools = tool_specs(&agent_tools, req.tools.as_deref());
                let docs = match last_user_text(&messages) {
                    Some(text) => self.recall(t, agent.id, &[], text).await?,
                    None => Vec::new(),
                };
                messages.insert(0, wire::ChatMessage::system(agent_system_message(&agent, &tools, &docs)?));
                (provider, model, tools, settings)
            }
        };
        let mut request =
            completion_request(model, messages, tools, settings, req.tool_choice, None, req.stream);
        request.response_format = req.response_format.map(Value::Object);
        request.extra = extra;
        Ok(PreparedCompletion { provider, request, include_usage })
    }

    /// A chat completion, whole.
    pub async fn completion(&self, t: Tenant, req: ChatCompletionRequest) -> Result<ChatCompletion> {
        let prepared = self.completion_prepare(t, req).await?;
        let answer = prepared.provider.chat(&prepared.request).await?;
        let usage = usage_or_count(&prepared.request, answer.usage, answer.text());
        Ok(ChatCompletion {
            id: answer_id(&answer.id),
            object: "chat.completion".into(),
            created: Utc::now().timestamp(),
            model: if answer.model.is_empty() { prepared.request.model.clone() } else { answer.model },
            choices: answer
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
                            .map(|cs| cs.iter().map(super::chat::from_wire_call).collect()),
                    },
                    finish_reason: c.finish_reason,
                    logprobs: None,
                })
                .collect(),
            usage,
        })
    }

    /// A chat completion, chunk by chunk. The provider's stream is opened
    /// first, so a provider that fails at once is an ordinary error.
    pub async fn completion_stream(&self, t: Tenant, req: ChatCompletionRequest) -> Result<CompletionChunks> {
        let prepared = self.completion_prepare(t, req).await?;
        let upstream = prepared.provider.chat_stream(&prepared.request).await?;
        let streaming = Streaming {
            prepared,
            upstream,
            acc: ChunkAccumulator::new(),
            id: String::new(),
            model: String::new(),
            created: Utc::now().timestamp(),
            usage_sent: false,
        };
        Ok(Box::pin(futures::stream::unfold(Some(streaming), |streaming| async move {
            let mut streaming = streaming?;
            match streaming.next().await {
                Some(Ok(chunk)) => Some((Ok(chunk), Some(streaming))),
                Some(Err(e)) => Some((Err(e), None)),
                None => None,
            }
        })))
    }
}

/// A stream under way.
struct Streaming {
    prepared: PreparedCompletion,
    upstream: UpstreamStream,
    acc: ChunkAccumulator,
    id: String,
    model: String,
    created: i64,
    usage_sent: bool,
}

impl Streaming {
    /// The next chunk to send; `None` once done.
    async fn next(&mut self) -> Option<Result<ChatCompletionChunk>> {
        while let Some(item) = self.upstream.next().await {
            let chunk = match item {
                Ok(chunk) => chunk,
                Err(e) => return Some(Err(e.into())),
            };
            self.acc.push(&chunk);
            if self.id.is_empty() {
                self.id = answer_id(&chunk.id);
                self.model = if chunk.model.is_empty() {
                    self.prepared.request.model.clone()
                } else {
                    chunk.model.clone()
                };
            }
            let usage = if self.prepared.include_usage { chunk.usage.map(contract_usage) } else { None };
            self.usage_sent |= usage.is_some();
            let choices = contract_chunk(chunk).choices;
            if choices.is_empty() && usage.is_none() {
                continue;
            }
            return Some(Ok(self.chunk(choices, usage)));
        }
        if self.prepared.include_usage && !self.usage_sent {
            self.usage_sent = true;
            let usage = usage_or_count(&self.prepared.request, None, self.acc.content());
            return Some(Ok(self.chunk(Vec::new(), Some(usage))));
        }
        None
    }

    fn chunk(
        &self,
        choices: Vec<crate::api::types::ChatChunkChoice>,
        usage: Option<ChatUsage>,
    ) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: if self.id.is_empty() { answer_id("") } else { self.id.clone() },
            object: "chat.completion.chunk".into(),
            created: self.created,
            model: if self.model.is_empty() {
                self.prepared.request.model.clone()
            } else {
                self.model.clone()
            },
            choices,
            usage,
        }
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

/// The text of the last user message, when it has some.
fn last_user_text(messages: &[wire::ChatMessage]) -> Option<&str> {
    messages
        .iter()
        .rev()
        .find(|m| m.role == wire::Role::User)
        .and_then(|m| m.content.as_deref())
        .filter(|c| !c.trim().is_empty())
}

/// The agent's system message: the default system template, with no users and no session.
fn agent_system_message(agent: &Agent, tools: &[wire::ToolSpec], docs: &[DocReference]) -> Result<String> {
    let context = template_context(agent, &[], None, tools, docs);
    let text = models::render(DEFAULT_SYSTEM_TEMPLATE, &context)
        .map_err(|e| Error::Internal(format!("the default system template: {e}")))?;
    Ok(text.trim_end().to_owned())
}
