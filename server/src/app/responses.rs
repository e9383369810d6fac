//! OpenAI's Responses API (`/v1/responses`) over sessions: a stored response
//! is a turn of a session (its input items become messages, its answer an
//! assistant message) plus a `response` record in the session's scope that
//! remembers the turn's settings and which messages it made.
//!
//! `previous_response_id` continues the session of that response;
//! `conversation` names the session; neither starts a new session (the
//! agent's, when `model` is an agent's id; else one with no agent), created
//! in the same commit as the turn, so a failed call leaves nothing behind.
//! The prompt is assembled from [`super::chat_prepare`]'s steps: the agent's
//! system message, then `instructions`, the session's history within its
//! token budget, then the new input.

use chrono::Utc;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::OwnedMutexGuard;
use uuid::Uuid;

use super::chat::{from_wire_call, merge_settings, usage_or_count};
use super::chat_lock::SessionLease;
use super::chat_prepare::{completion_request, system_message, template_context, tool_specs};
use super::conversations::{items_of, messages_of_items};
use super::history::History;
use super::messages::message_records;
use super::records::{decode, encode};
use super::sessions::{plain_session, session_record};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    ChatFunction, ChatSettings, ChatTool, ChatToolChoice, ChatUsage, ConversationId, ConversationItem,
    CreateResponseRequest, InputItemListParams, ItemContent, ItemList, ItemOrder, Metadata, ModelResponse,
    NamedFunction, NamedToolChoice, ResponseDeleted, ResponseError, ResponseInput, ResponseStreamEvent,
    ResponseTool, ResponseToolChoice, ResponseUsage, Tool, ToolCallType, User,
};
use crate::api::types_sessions::{CreateMessageRequest, Message, Role, Session};
use crate::models::provider::CompletionStream as UpstreamStream;
use crate::models::{ChunkAccumulator, Provider, wire};
use crate::store::{Expect, Kind, ListQuery, Op, Record, StoreError};

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
}

/// The fields a response echoes from its request.
#[derive(Clone, Debug)]
struct Head {
    id: Uuid,
    created_at: chrono::DateTime<Utc>,
    model: String,
    instructions: Option<String>,
    previous_response_id: Option<String>,
    conversation: Option<Uuid>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_output_tokens: Option<i64>,
    tools: Vec<ResponseTool>,
    tool_choice: Value,
    parallel_tool_calls: bool,
    store: bool,
    metadata: Metadata,
}

/// `resp_` and the id's 32 hex digits.
pub fn response_id(id: Uuid) -> String {
    format!("resp_{}", id.simple())
}

/// The uuid of a response id (`resp_<hex>`); `None` for anything else.
pub fn parse_response_id(id: &str) -> Option<Uuid> {
    Uuid::try_parse(id.strip_prefix("resp_")?).ok()
}

/// A response ready for the model call. Holds the session's chat lock (and
/// lease on a shared store) until dropped, as a chat does.
pub struct PreparedResponse {
    provider: Provider,
    request: wire::CompletionRequest,
    head: Head,
    tenant: Tenant,
    session: Uuid,
    /// A new session's record and ops, committed with the turn.
    new_session: Option<(Record, Vec<Op>)>,
    new_messages: Vec<CreateMessageRequest>,
    /// Ids of the input's messages, then of the answer: made now, in order, so
    /// that a streamed answer names its items before they are saved.
    ids: Vec<Uuid>,
    lease: Option<SessionLease>,
    _lock: Option<OwnedMutexGuard<()>>,
}

impl PreparedResponse {
    fn answer_id(&self) -> Uuid {
        *self.ids.last().expect("the answer has an id")
    }
}

impl App {
    /// The session and prompt of a response (see the module's docs).
    pub async fn response_prepare(&self, t: Tenant, req: CreateResponseRequest) -> Result<PreparedResponse> {
        let agent = self.completion_agent(t, &req.model).await?;
        // The session: continued, named, or new.
        let (session_id, conversation) = match (&req.previous_response_id, &req.conversation) {
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
        let (lock, lease, session, users, version, new_session) = match session_id {
            Some(sid) => {
                let lock = self.chat_lock(t, sid).await;
                let lease = self.session_lease(t, sid).await?;
                let record = self.load(t, Kind::Session, sid).await?;
                let session: Session = decode(&record)?;
                if let Some(a) = &agent
                    && !session.agents.is_empty()
                    && !session.agents.contains(&a.id)
                {
                    return Err(Error::BadRequest(format!(
                        "model: agent {} is not an agent of session {sid}",
                        a.id
                    )));
                }
                let mut users: Vec<User> = Vec::with_capacity(session.users.len());
                for u in &session.users {
                    users.push(self.user_get(t, *u).await?);
                }
                let version = self.store.shared().then_some(record.version);
                (Some(lock), lease, session, users, version, None)
            }
            None => {
                let (rec, ops) = session_record(plain_session(agent.as_ref().map(|a| a.id), None))?;
                let session: Session = decode(&rec)?;
                (None, None, session, Vec::new(), None, Some((rec, ops)))
            }
        };

        // Settings, model and provider.
        let request_settings = ChatSettings {
            temperature: req.temperature,
            top_p: req.top_p,
            max_tokens: req.max_output_tokens,
            ..ChatSettings::default()
        };
        let (provider, model, settings) = match &agent {
            Some(a) => {
                let (provider, model) = self.choose_model(None, a)?;
                (provider, model, merge_settings(a.default_settings.as_ref(), &request_settings))
            }
            None => (self.models.resolve(&req.model)?.clone(), req.model.clone(), request_settings),
        };
        // The new messages; recall on the last user message.
        let new_messages = match req.input.clone() {
            ResponseInput::Text(text) => vec![CreateMessageRequest {
                role: Role::User,
                content: text,
                name: None,
                tool_calls: None,
                tool_call_id: None,
                metadata: None,
            }],
            ResponseInput::Items(items) => messages_of_items(items),
        };
        let request_tools: Vec<ChatTool> = req.tools.iter().flatten().map(chat_tool).collect();
        let mut system = Vec::new();
        let tools = match &agent {
            Some(a) => {
                let all = ListQuery::oldest_first(0, usize::MAX);
                let agent_tools: Vec<Tool> = self.list_resources(t, a.id, &all).await?;
                let tools = tool_specs(&agent_tools, Some(&request_tools));
                let docs = match new_messages.iter().rev().find(|m| m.role == Role::User) {
                    Some(m) if !m.content.trim().is_empty() => {
                        self.recall(t, a.id, &session.users, &m.content).await?
                    }
                    _ => Vec::new(),
                };
                let context = template_context(a, &users, Some(&session), &tools, &docs);
                system.push(wire::ChatMessage::system(system_message(&session, &context)?));
                tools
            }
            None => tool_specs(&[], Some(&request_tools)),
        };
        system.extend(req.instructions.clone().map(wire::ChatMessage::system));
        let new_wire: Vec<wire::ChatMessage> = new_messages.iter().map(super::chat::new_message).collect();
        let history: History = match new_session {
            Some(_) => History::default(),
            None => self.history(t, session.id, version).await?,
        };
        let messages = self.fit_history(&history, &session, &provider, &model, system, new_wire).await?;
        let tool_choice = req.tool_choice.clone().map(|c| match c {
            ResponseToolChoice::Mode(m) => ChatToolChoice::Mode(m),
            ResponseToolChoice::Function(f) => ChatToolChoice::Function(NamedToolChoice {
                kind: ToolCallType::Function,
                function: NamedFunction { name: f.name },
            }),
        });
        let mut request =
            completion_request(model.clone(), messages, tools, settings, tool_choice, None, req.stream);
        if let Some(v) = req.parallel_tool_calls {
            request.extra.insert("parallel_tool_calls".into(), Value::Bool(v));
        }
        let ids = (0..=new_messages.len()).map(|_| Uuid::now_v7()).collect();
        let head = Head {
            id: Uuid::now_v7(),
            created_at: crate::store::now(),
            model,
            instructions: req.instructions,
            previous_response_id: req.previous_response_id,
            conversation,
            temperature: req.temperature,
            top_p: req.top_p,
            max_output_tokens: req.max_output_tokens,
            tools: req.tools.unwrap_or_default(),
            tool_choice: req
                .tool_choice
                .map_or_else(|| json!("auto"), |c| serde_json::to_value(c).unwrap_or_default()),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            store: req.store.unwrap_or(true),
            metadata: req.metadata.unwrap_or_default(),
        };
        Ok(PreparedResponse {
            provider,
            request,
            head,
            tenant: t,
            session: session.id,
            new_session,
            new_messages,
            ids,
            lease,
            _lock: lock,
        })
    }

    /// A response, whole.
    pub async fn response_create(&self, t: Tenant, req: CreateResponseRequest) -> Result<ModelResponse> {
        let prepared = self.response_prepare(t, req).await?;
        let answer = prepared.provider.chat(&prepared.request).await?;
        let usage = usage_or_count(&prepared.request, answer.usage, answer.text());
        self.response_save(&prepared, &answer, usage).await
    }

    /// Saves the turn (when `store`), and answers the completed response.
    async fn response_save(
        &self,
        prepared: &PreparedResponse,
        answer: &wire::CompletionResponse,
        usage: ChatUsage,
    ) -> Result<ModelResponse> {
        let mut messages = prepared.new_messages.clone();
        let reply = answer.message().cloned().unwrap_or_default();
        let calls = reply.tool_calls.as_ref().filter(|c| !c.is_empty());
        messages.push(CreateMessageRequest {
            role: Role::Assistant,
            content: reply.content.clone().unwrap_or_default(),
            name: None,
            tool_calls: calls.map(|cs| cs.iter().map(from_wire_call).collect()),
            tool_call_id: None,
            metadata: None,
        });
        let (mut created, puts) = message_records(prepared.session, messages).await?;
        let puts = with_ids(puts, &mut created, &prepared.ids);
        let output = items_of(created.last().expect("the answer"));
        let response = model_response(&prepared.head, output, Some(&usage), "completed", None);
        if !prepared.head.store {
            if let Some(lease) = &prepared.lease {
                lease.release().await;
            }
            return Ok(response);
        }
        let t = prepared.tenant;
        let mut ops = match &prepared.new_session {
            Some((rec, ops)) => {
                let mut all = vec![Op::Put { record: rec.clone(), expect: Expect::Absent }];
                all.extend(ops.iter().cloned());
                all
            }
            None => vec![self.session_changes(prepared.session)],
        };
        if let Some(lease) = &prepared.lease {
            ops.push(lease.release_op().await?);
        }
        ops.extend(puts);
        let (inputs, answer_message) = created.split_at(created.len() - 1);
        let data = ResponseData {
            model: prepared.head.model.clone(),
            instructions: prepared.head.instructions.clone(),
            previous_response_id: prepared.head.previous_response_id.clone(),
            conversation: prepared.head.conversation,
            input_messages: inputs.iter().map(|m| m.id).collect(),
            output_message: answer_message[0].id,
            usage: (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
            temperature: prepared.head.temperature,
            top_p: prepared.head.top_p,
            max_output_tokens: prepared.head.max_output_tokens,
            tools: serde_json::to_value(&prepared.head.tools).unwrap_or_default(),
            tool_choice: prepared.head.tool_choice.clone(),
            parallel_tool_calls: prepared.head.parallel_tool_calls,
        };
        let mut record = Record::fresh(Kind::Response, prepared.session, encode(&data)?);
        record.id = prepared.head.id;
        // The response's time, as answered.
        (record.created_at, record.updated_at) = (prepared.head.created_at, prepared.head.created_at);
        record.metadata = Some(prepared.head.metadata.0.clone());
        ops.push(Op::Put { record, expect: Expect::Absent });
        // The answer is remembered with the turn (an `Idempotency-Key`'s).
        let committed = self.commit_answering(t, ops, || Some(&response)).await;
        match &committed {
            Ok(()) if prepared.new_session.is_none() => {
                let items: Vec<_> = created.iter().map(super::chat::history_item).collect();
                self.history.appended(t, prepared.session, &items);
            }
            Ok(()) => {}
            Err(_) => self.history.forget(t, prepared.session),
        }
        committed.map_err(|e| match e {
            StoreError::Stale | StoreError::NotFound { kind: Kind::SessionLock, .. } => {
                super::chat_lock::lost(prepared.session)
            }
            e => e.into(),
        })?;
        if let Some(lease) = &prepared.lease {
            lease.released().await;
        }
        Ok(response)
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
        let data: ResponseData = serde_json::from_value(rec.data.clone())
            .map_err(|e| Error::Internal(format!("response {id} does not decode: {e}")))?;
        let output = match self.store.get(t.0, Kind::Message, data.output_message).await? {
            Some(m) => items_of(&decode::<Message>(&m)?),
            None => Vec::new(),
        };
        let head = Head {
            id: rec.id,
            created_at: rec.created_at,
            model: data.model,
            instructions: data.instructions,
            previous_response_id: data.previous_response_id,
            conversation: data.conversation,
            temperature: data.temperature,
            top_p: data.top_p,
            max_output_tokens: data.max_output_tokens,
            tools: serde_json::from_value(data.tools).unwrap_or_default(),
            tool_choice: data.tool_choice,
            parallel_tool_calls: data.parallel_tool_calls,
            store: true,
            metadata: Metadata(rec.metadata.clone().unwrap_or_default()),
        };
        let (input, output_tokens, total) = data.usage;
        let usage = ChatUsage { prompt_tokens: input, completion_tokens: output_tokens, total_tokens: total };
        Ok(model_response(&head, output, Some(&usage), "completed", None))
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
            Some(after) => match items.iter().position(|i| i.id() == after) {
                Some(at) => at + 1,
                None => {
                    let item =
                        NotFound::ResponseInputItem { response: id.to_string(), item: after.to_string() };
                    return Err(Error::NotFound(item.in_field("after")));
                }
            },
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
        let mut ops = vec![
            Op::Delete { kind: Kind::Response, id: rec.id, version: Some(rec.version) },
            self.session_changes(session),
        ];
        for mid in data.input_messages.iter().chain([&data.output_message]) {
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

/// Puts the prepared ids on the new messages' records.
fn with_ids(puts: Vec<Op>, created: &mut [Message], ids: &[Uuid]) -> Vec<Op> {
    for (m, id) in created.iter_mut().zip(ids) {
        m.id = *id;
    }
    puts.into_iter()
        .zip(ids)
        .map(|(op, id)| match op {
            Op::Put { mut record, expect } => {
                record.id = *id;
                Op::Put { record, expect }
            }
            other => other,
        })
        .collect()
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

fn model_response(
    head: &Head,
    output: Vec<ConversationItem>,
    usage: Option<&ChatUsage>,
    status: &str,
    error: Option<ResponseError>,
) -> ModelResponse {
    ModelResponse {
        id: response_id(head.id),
        object: "response".into(),
        created_at: head.created_at.timestamp(),
        status: status.into(),
        error,
        incomplete_details: None,
        instructions: head.instructions.clone(),
        max_output_tokens: head.max_output_tokens,
        model: head.model.clone(),
        output,
        parallel_tool_calls: head.parallel_tool_calls,
        previous_response_id: head.previous_response_id.clone(),
        conversation: head.conversation.map(|id| ConversationId { id }),
        temperature: head.temperature,
        top_p: head.top_p,
        tool_choice: head.tool_choice.clone(),
        tools: head.tools.clone(),
        store: head.store,
        usage: usage.map(|u| ResponseUsage {
            input_tokens: u.prompt_tokens,
            output_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
            ..ResponseUsage::default()
        }),
        metadata: head.metadata.0.clone(),
        background: false,
    }
}

// ---------------------------------------------------------------- streaming

/// A failure after a streamed response started: what the last event,
/// `response.failed`, carries (the HTTP layer adds the error's code).
pub struct StreamFailure {
    pub error: Error,
    /// The response as it stands, `failed`, its `error` to fill in.
    pub response: ModelResponse,
    pub sequence_number: u64,
}

/// The events of a streamed response: it ends after `response.completed`, or
/// with one `Err` (to be sent as `response.failed`).
pub type ResponseEvents =
    std::pin::Pin<Box<dyn Stream<Item = std::result::Result<ResponseStreamEvent, StreamFailure>> + Send>>;

impl App {
    /// A response answered event by event. The provider's stream is opened
    /// first, so that a provider failing at once is an ordinary error.
    pub async fn response_stream(&self, t: Tenant, req: CreateResponseRequest) -> Result<ResponseEvents> {
        let prepared = self.response_prepare(t, req).await?;
        let upstream = prepared.provider.chat_stream(&prepared.request).await?;
        let mut streaming = Streaming {
            app: self.clone(),
            prepared,
            upstream,
            acc: ChunkAccumulator::new(),
            seq: 0,
            queue: std::collections::VecDeque::new(),
            text: None,
            calls: Vec::new(),
            next_index: 0,
            done: false,
        };
        let head = model_response(&streaming.prepared.head, Vec::new(), None, "in_progress", None);
        streaming.push(event(
            "response.created",
            ResponseStreamEvent { response: Some(Box::new(head.clone())), ..Default::default() },
        ));
        streaming.push(event(
            "response.in_progress",
            ResponseStreamEvent { response: Some(Box::new(head)), ..Default::default() },
        ));
        Ok(Box::pin(futures::stream::unfold(Some(streaming), |streaming| async move {
            let mut streaming = streaming?;
            match streaming.next().await {
                Some(Ok(e)) => Some((Ok(e), Some(streaming))),
                Some(Err(f)) => Some((Err(f), None)),
                None => None,
            }
        })))
    }
}

fn event(kind: &str, e: ResponseStreamEvent) -> ResponseStreamEvent {
    ResponseStreamEvent { kind: kind.into(), ..e }
}

/// A function call being streamed: its output index and item id.
struct OpenCall {
    output_index: u32,
    item_id: String,
    call_id: String,
    name: String,
}

struct Streaming {
    app: App,
    prepared: PreparedResponse,
    upstream: UpstreamStream,
    acc: ChunkAccumulator,
    seq: u64,
    queue: std::collections::VecDeque<ResponseStreamEvent>,
    /// The output index of the assistant's text item, once it has text.
    text: Option<u32>,
    calls: Vec<OpenCall>,
    next_index: u32,
    done: bool,
}

impl Streaming {
    fn push(&mut self, mut e: ResponseStreamEvent) {
        e.sequence_number = self.seq;
        self.seq += 1;
        self.queue.push_back(e);
    }

    fn answer_item_id(&self) -> String {
        self.prepared.answer_id().to_string()
    }

    async fn next(&mut self) -> Option<std::result::Result<ResponseStreamEvent, StreamFailure>> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                return Some(Ok(e));
            }
            if self.done {
                return None;
            }
            match self.upstream.next().await {
                Some(Ok(chunk)) => self.chunk(chunk),
                Some(Err(e)) => return Some(Err(self.failure(e.into()))),
                None => {
                    if let Err(e) = self.finish().await {
                        return Some(Err(self.failure(e)));
                    }
                }
            }
        }
    }

    fn failure(&mut self, error: Error) -> StreamFailure {
        self.done = true;
        let response = model_response(&self.prepared.head, Vec::new(), None, "failed", None);
        let sequence_number = self.seq;
        self.seq += 1;
        StreamFailure { error, response, sequence_number }
    }

    /// Opens the text item.
    fn open_text(&mut self) -> u32 {
        if let Some(i) = self.text {
            return i;
        }
        let i = self.next_index;
        self.next_index += 1;
        self.text = Some(i);
        let item_id = self.answer_item_id();
        let item = ConversationItem::Message {
            id: item_id.clone(),
            status: "in_progress".into(),
            role: "assistant".into(),
            content: Vec::new(),
        };
        self.push(event(
            "response.output_item.added",
            ResponseStreamEvent { output_index: Some(i), item: Some(item), ..Default::default() },
        ));
        let part = ItemContent::OutputText { text: String::new(), annotations: Vec::new() };
        self.push(event(
            "response.content_part.added",
            ResponseStreamEvent {
                output_index: Some(i),
                content_index: Some(0),
                item_id: Some(item_id),
                part: Some(part),
                ..Default::default()
            },
        ));
        i
    }

    fn chunk(&mut self, chunk: wire::CompletionChunk) {
        self.acc.push(&chunk);
        let Some(choice) = chunk.choices.into_iter().find(|c| c.index == 0) else { return };
        if let Some(text) = choice.delta.content.filter(|t| !t.is_empty()) {
            let i = self.open_text();
            let item_id = self.answer_item_id();
            self.push(event(
                "response.output_text.delta",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(item_id),
                    delta: Some(text),
                    logprobs: Some(Vec::new()),
                    ..Default::default()
                },
            ));
        }
        for call in choice.delta.tool_calls.into_iter().flatten() {
            let n = call.index.unwrap_or(0) as usize;
            if n >= self.calls.len() {
                let output_index = self.next_index;
                self.next_index += 1;
                let function = call.function.clone().unwrap_or_default();
                let open = OpenCall {
                    output_index,
                    item_id: super::conversations::call_item_id(self.prepared.answer_id(), self.calls.len()),
                    call_id: call.id.clone().unwrap_or_default(),
                    name: function.name.clone().unwrap_or_default(),
                };
                let item = ConversationItem::FunctionCall {
                    id: open.item_id.clone(),
                    call_id: open.call_id.clone(),
                    name: open.name.clone(),
                    arguments: String::new(),
                    status: "in_progress".into(),
                };
                self.calls.push(open);
                self.push(event(
                    "response.output_item.added",
                    ResponseStreamEvent {
                        output_index: Some(output_index),
                        item: Some(item),
                        ..Default::default()
                    },
                ));
            }
            let Some(open) = self.calls.get(n.min(self.calls.len() - 1)) else { continue };
            let (output_index, item_id) = (open.output_index, open.item_id.clone());
            if let Some(piece) = call.function.and_then(|f| f.arguments).filter(|a| !a.is_empty()) {
                self.push(event(
                    "response.function_call_arguments.delta",
                    ResponseStreamEvent {
                        output_index: Some(output_index),
                        item_id: Some(item_id),
                        delta: Some(piece),
                        ..Default::default()
                    },
                ));
            }
        }
    }

    /// Closes the items, saves the turn, and queues `response.completed`.
    async fn finish(&mut self) -> Result<()> {
        self.done = true;
        if self.text.is_none() && self.calls.is_empty() {
            self.open_text();
        }
        let acc = std::mem::take(&mut self.acc);
        let usage = usage_or_count(&self.prepared.request, acc.usage(), acc.content());
        let text = acc.content().to_owned();
        let final_calls = acc.tool_calls().to_vec();
        let answer = acc.finish();
        if let Some(i) = self.text {
            let item_id = self.answer_item_id();
            let part = ItemContent::OutputText { text: text.clone(), annotations: Vec::new() };
            self.push(event(
                "response.output_text.done",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(item_id.clone()),
                    text: Some(text.clone()),
                    logprobs: Some(Vec::new()),
                    ..Default::default()
                },
            ));
            self.push(event(
                "response.content_part.done",
                ResponseStreamEvent {
                    output_index: Some(i),
                    content_index: Some(0),
                    item_id: Some(item_id.clone()),
                    part: Some(part.clone()),
                    ..Default::default()
                },
            ));
            let item = ConversationItem::Message {
                id: item_id,
                status: "completed".into(),
                role: "assistant".into(),
                content: vec![part],
            };
            self.push(event(
                "response.output_item.done",
                ResponseStreamEvent { output_index: Some(i), item: Some(item), ..Default::default() },
            ));
        }
        let calls = std::mem::take(&mut self.calls);
        for (open, call) in calls.iter().zip(final_calls.iter()) {
            self.push(event(
                "response.function_call_arguments.done",
                ResponseStreamEvent {
                    output_index: Some(open.output_index),
                    item_id: Some(open.item_id.clone()),
                    arguments: Some(call.function.arguments.clone()),
                    ..Default::default()
                },
            ));
            let item = ConversationItem::FunctionCall {
                id: open.item_id.clone(),
                call_id: call.id.clone(),
                name: call.function.name.clone(),
                arguments: call.function.arguments.clone(),
                status: "completed".into(),
            };
            self.push(event(
                "response.output_item.done",
                ResponseStreamEvent {
                    output_index: Some(open.output_index),
                    item: Some(item),
                    ..Default::default()
                },
            ));
        }
        let response = self.app.response_save(&self.prepared, &answer, usage).await?;
        self.push(event(
            "response.completed",
            ResponseStreamEvent { response: Some(Box::new(response)), ..Default::default() },
        ));
        Ok(())
    }
}
