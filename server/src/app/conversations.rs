//! OpenAI's conversations (`/v1/conversations`) over sessions: a conversation
//! is a session, its items are the session's messages seen through OpenAI's
//! item shapes. Nothing is stored twice: a session made through `/api` is a
//! conversation too, and a conversation made here is a session (with no
//! agent and no user).

use serde_json::Value;
use uuid::Uuid;

use super::compaction;
use super::messages::message_records;
use super::parts::{item_content, of_content};
use super::sessions::{plain_session, session_record};
use super::{App, Error, NotFound, Result, Tenant};
use crate::api::types::{
    ConvId, CreateMessageRequest, FunctionCall, Message, Role, Session, ToolCall, ToolCallType,
};
use crate::api::types::{
    Conversation, ConversationDeleted, ConversationItem, CreateConversationRequest, CreateItemsRequest,
    InputItem, InputRole, ItemContent, ItemList, ItemListParams, ItemOrder, McpCallError, Metadata,
};
use crate::store::{Direction, Kind, ListQuery, SortBy};

impl App {
    /// A new session with no participant, its items appended in the same commit.
    pub async fn conversation_create(
        &self,
        t: Tenant,
        req: CreateConversationRequest,
    ) -> Result<Conversation> {
        let (rec, mut ops) = session_record(plain_session(None, req.metadata))?;
        let session = rec.id;
        let max_part = self.models.max_input_part_bytes();
        let messages = messages_of_items(req.items.unwrap_or_default(), "items", max_part)?;
        let (_, puts) = message_records(session, messages).await?;
        ops.extend(puts);
        self.insert_resource_as(t, rec, ops, |created: Session| conversation(&created)).await
    }

    pub async fn conversation_get(&self, t: Tenant, id: Uuid) -> Result<Conversation> {
        Ok(conversation(&self.session_get(t, id).await?))
    }

    /// Replaces the session's metadata.
    pub async fn conversation_update(&self, t: Tenant, id: Uuid, metadata: Metadata) -> Result<Conversation> {
        let session: Session = self
            .update_resource(t, id, |rec| {
                rec.metadata = Some(metadata.0.clone());
                Ok(())
            })
            .await?;
        Ok(conversation(&session))
    }

    pub async fn conversation_delete(&self, t: Tenant, id: Uuid) -> Result<ConversationDeleted> {
        self.session_delete(t, id).await?;
        Ok(ConversationDeleted { id: ConvId(id), object: "conversation.deleted".into(), deleted: true })
    }

    /// Appends the items' messages in one commit; answers the items made.
    pub async fn conversation_items_create(
        &self,
        t: Tenant,
        id: Uuid,
        req: CreateItemsRequest,
    ) -> Result<ItemList> {
        let messages = messages_of_items(req.items, "items", self.models.max_input_part_bytes())?;
        let created = self.append_messages(t, id, messages, |created| Some(items_made(created))).await?;
        Ok(items_made(&created))
    }

    /// A page of the conversation's items (see the operation's description).
    /// `after` names an item: the page goes on from its message (read by id)
    /// through the session's time index, so a page deep in a long
    /// conversation costs what the first one does.
    pub async fn conversation_items(&self, t: Tenant, id: Uuid, params: ItemListParams) -> Result<ItemList> {
        self.load(t, Kind::Session, id).await?;
        let limit = params.limit.unwrap_or(20).clamp(1, 100) as usize;
        let direction = match params.order {
            ItemOrder::Asc => Direction::Asc,
            ItemOrder::Desc => Direction::Desc,
        };
        // Every message is at least one item: a page of `limit + 1` messages
        // says whether there are more.
        let mut q =
            ListQuery { limit: limit + 1, sort_by: SortBy::CreatedAt, direction, ..ListQuery::default() };
        let mut data = Vec::with_capacity(limit);
        let add = |items: Vec<ConversationItem>, data: &mut Vec<ConversationItem>| {
            for item in items {
                if data.len() == limit {
                    return true;
                }
                data.push(item);
            }
            false
        };
        if let Some(after) = params.after.as_deref() {
            let not_found = || Error::NotFound(missing_item(id, after).in_field("after"));
            let rec = match message_id_of(after) {
                None => return Err(not_found()),
                Some(message) => match self.load_in(t, Kind::Message, id, message).await {
                    Err(Error::NotFound(_)) => return Err(not_found()),
                    other => other?,
                },
            };
            let mut items = items_in_order(&super::records::decode(&rec)?, direction);
            let wanted = canonical_item_id(after);
            let at = items.iter().position(|i| i.id() == wanted).ok_or_else(not_found)?;
            if add(items.split_off(at + 1), &mut data) {
                return Ok(item_list(data, true));
            }
            q = q.after_record(&rec);
        }
        loop {
            let page = self.store.list(t.0, Kind::Message, id, &q).await?;
            for rec in &page {
                if add(items_in_order(&super::records::decode(rec)?, direction), &mut data) {
                    return Ok(item_list(data, true));
                }
            }
            match page.last() {
                Some(last) if page.len() == q.limit => q = q.after_record(last),
                _ => return Ok(item_list(data, false)),
            }
        }
    }

    /// One item of the conversation.
    pub async fn conversation_item(&self, t: Tenant, id: Uuid, item_id: &str) -> Result<ConversationItem> {
        let message = self.item_message(t, id, item_id).await?;
        let wanted = canonical_item_id(item_id);
        items_of(&message).into_iter().find(|i| i.id() == wanted).ok_or_else(|| no_item(id, item_id))
    }

    /// Deletes the item's message; answers the conversation.
    pub async fn conversation_item_delete(&self, t: Tenant, id: Uuid, item_id: &str) -> Result<Conversation> {
        let message = self.item_message(t, id, item_id).await?;
        let wanted = canonical_item_id(item_id);
        if !items_of(&message).iter().any(|i| i.id() == wanted) {
            return Err(no_item(id, item_id));
        }
        self.message_delete(t, id, message.id).await?;
        self.conversation_get(t, id).await
    }

    /// The message an item id names, in conversation `id`.
    async fn item_message(&self, t: Tenant, id: Uuid, item_id: &str) -> Result<Message> {
        self.load(t, Kind::Session, id).await?;
        let message_id = message_id_of(item_id).ok_or_else(|| no_item(id, item_id))?;
        let rec = match self.load_in(t, Kind::Message, id, message_id).await {
            Err(Error::NotFound(_)) => return Err(no_item(id, item_id)),
            other => other?,
        };
        super::records::decode(&rec)
    }
}

fn no_item(conversation: Uuid, item: &str) -> Error {
    Error::NotFound(missing_item(conversation, item))
}

fn missing_item(conversation: Uuid, item: &str) -> NotFound {
    NotFound::ConversationItem { conversation, item: item.to_string() }
}

fn conversation(s: &Session) -> Conversation {
    Conversation {
        id: ConvId(s.id),
        object: "conversation".into(),
        created_at: s.created_at.timestamp(),
        metadata: s.metadata.clone().map(Metadata::into_inner).unwrap_or_default(),
    }
}

pub(super) fn item_list(data: Vec<ConversationItem>, has_more: bool) -> ItemList {
    ItemList {
        object: "list".into(),
        first_id: data.first().map(|i| i.id().to_owned()),
        last_id: data.last().map(|i| i.id().to_owned()),
        data,
        has_more,
    }
}

/// The items that appending `created` made (what an item create answers).
fn items_made(created: &[Message]) -> ItemList {
    item_list(created.iter().flat_map(items_of).collect(), false)
}

/// The id of the `i`-th tool call of message `id`, as a `function_call` item.
pub(super) fn call_item_id(id: Uuid, i: usize) -> String {
    format!("fc_{}_{i}", id.simple())
}

/// The id of a message as one item: `msg_` and its 32 hex digits.
pub(super) fn message_item_id(id: Uuid) -> String {
    format!("msg_{}", id.simple())
}

/// The item of a `tool` message with the result of an MCP call or a file
/// search the server ran (its run is in the message's metadata: see
/// [`super::turn::rounds`]); `None` for other `tool` messages.
fn server_run(m: &Message) -> Option<ConversationItem> {
    let run = m.metadata.as_ref()?.0.get("tool_run")?;
    let text = |k: &str| run.get(k).and_then(Value::as_str).map(str::to_owned);
    let error = text("error");
    let status = if error.is_some() { "failed" } else { "completed" }.to_owned();
    match run.get("type").and_then(Value::as_str)? {
        "mcp" => Some(ConversationItem::McpCall {
            id: format!("mcp_{}", m.id.simple()),
            server_label: text("server").unwrap_or_default(),
            name: text("name").unwrap_or_default(),
            arguments: text("arguments").unwrap_or_default(),
            output: error.is_none().then(|| m.content.clone()),
            error: error.map(|message| match run.get("error_kind").and_then(Value::as_str) {
                Some("tool") => McpCallError::McpToolExecutionError {
                    content: serde_json::json!([{"type": "text", "text": message}]),
                },
                _ => McpCallError::McpProtocolError { code: -32000, message },
            }),
            status,
        }),
        "file_search" => {
            let query = text("arguments")
                .and_then(|a| serde_json::from_str::<Value>(&a).ok())
                .and_then(|a| a.get("query").and_then(Value::as_str).map(str::to_owned));
            Some(ConversationItem::FileSearchCall {
                id: format!("fs_{}", m.id.simple()),
                queries: query.into_iter().collect(),
                status,
                results: None,
            })
        }
        _ => None,
    }
}

/// The message an item id names: `msg_<id>`, `fc_<id>_<i>`, `mcp_<id>`,
/// `fs_<id>`, or the message's UUID.
fn message_id_of(item_id: &str) -> Option<Uuid> {
    if let Some(rest) = item_id.strip_prefix("mcp_").or_else(|| item_id.strip_prefix("fs_")) {
        return Uuid::try_parse(rest).ok();
    }
    if let Some(rest) = item_id.strip_prefix("fc_") {
        let (id, i) = rest.split_once('_')?;
        i.parse::<usize>().ok()?;
        return Uuid::try_parse(id).ok();
    }
    Uuid::try_parse(item_id.strip_prefix("msg_").unwrap_or(item_id)).ok()
}

/// An item id as the lists show it: a message's UUID is its `msg_` id.
pub(super) fn canonical_item_id(item_id: &str) -> std::borrow::Cow<'_, str> {
    match Uuid::try_parse(item_id) {
        Ok(id) if item_id.len() == 36 => message_item_id(id).into(),
        _ => item_id.into(),
    }
}

/// A message's items in the order of a list (newest first: reversed).
fn items_in_order(m: &Message, direction: Direction) -> Vec<ConversationItem> {
    let mut items = items_of(m);
    if direction == Direction::Desc {
        items.reverse();
    }
    items
}

/// A message as OpenAI's items: a `message` (for text; for an assistant
/// message only when it has text or no calls), then a `function_call` per tool
/// call; a `tool` message is a `function_call_output`.
pub fn items_of(m: &Message) -> Vec<ConversationItem> {
    let completed = || "completed".to_owned();
    match m.role {
        Role::Tool => match server_run(m) {
            Some(item) => vec![item],
            None => vec![ConversationItem::FunctionCallOutput {
                id: message_item_id(m.id),
                call_id: m.tool_call_id.clone().unwrap_or_default(),
                output: m.content.clone(),
                status: completed(),
            }],
        },
        Role::User | Role::System => vec![ConversationItem::Message {
            id: message_item_id(m.id),
            status: completed(),
            role: if m.role == Role::User { "user" } else { "system" }.into(),
            content: match &m.parts {
                Some(parts) => parts.iter().map(item_content).collect(),
                None => vec![ItemContent::InputText { text: m.content.clone() }],
            },
        }],
        Role::Assistant => {
            let calls = m.tool_calls.as_deref().unwrap_or_default();
            // Calls of MCP servers and file searches are items of their results.
            let own_item = |id: &str| {
                let kind =
                    m.metadata.as_ref().and_then(|md| md.0.get("server_calls")).and_then(|c| c.get(id));
                matches!(kind.and_then(Value::as_str), Some("mcp" | "file_search"))
            };
            let mut items = Vec::with_capacity(1 + calls.len());
            if !m.content.is_empty() || calls.is_empty() {
                items.push(ConversationItem::Message {
                    id: message_item_id(m.id),
                    status: completed(),
                    role: "assistant".into(),
                    content: vec![ItemContent::OutputText {
                        text: m.content.clone(),
                        annotations: Vec::new(),
                    }],
                });
            }
            let meta = |key: &str| m.metadata.as_ref().and_then(|md| md.0.get(key));
            let waiting: Vec<&str> = meta("awaiting_approval")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            items.extend(calls.iter().filter(|c| waiting.contains(&c.id.as_str())).map(|c| {
                ConversationItem::McpApprovalRequest {
                    id: c.id.clone(),
                    server_label: meta("mcp_servers")
                        .and_then(|s| s.get(&c.id))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    name: c.function.name.clone(),
                    arguments: c.function.arguments.clone(),
                }
            }));
            items.extend(calls.iter().enumerate().filter(|(_, c)| !own_item(&c.id)).map(|(i, c)| {
                ConversationItem::FunctionCall {
                    id: call_item_id(m.id, i),
                    call_id: c.id.clone(),
                    name: c.function.name.clone(),
                    arguments: c.function.arguments.clone(),
                    status: completed(),
                }
            }));
            items
        }
    }
}

/// Items as the session's messages: each `message` a message (`developer`
/// as `system`; its images and files in its `parts`), consecutive
/// `function_call`s one assistant message calling them, each
/// `function_call_output` a `tool` message, each `compaction` a system message
/// with its summary. Validation saw to the fields each type needs, and to the
/// types; an image or file over `max_part` bytes is an error naming it (under
/// `field`, as `input[2].content[1].image_url`), and so is a compaction that
/// does not unseal.
pub fn messages_of_items(
    items: Vec<InputItem>,
    field: &str,
    max_part: usize,
) -> Result<Vec<CreateMessageRequest>> {
    let mut out: Vec<CreateMessageRequest> = Vec::with_capacity(items.len());
    let mut calling = false; // whether the last message is one made of function_call items
    for (i, item) in items.into_iter().enumerate() {
        let message = |role: Role, content: String| CreateMessageRequest {
            role,
            content,
            name: None,
            tool_calls: None,
            tool_call_id: None,
            metadata: None,
            parts: None,
        };
        match item.kind() {
            "function_call" => {
                let call = ToolCall {
                    id: item.call_id.clone().unwrap_or_default(),
                    kind: ToolCallType::Function,
                    function: FunctionCall {
                        name: item.name.clone().unwrap_or_default(),
                        arguments: item.arguments.clone().unwrap_or_default(),
                    },
                };
                match out.last_mut() {
                    Some(last) if calling => last.tool_calls.get_or_insert_with(Vec::new).push(call),
                    _ => out.push(CreateMessageRequest {
                        tool_calls: Some(vec![call]),
                        ..message(Role::Assistant, String::new())
                    }),
                }
                calling = true;
                continue;
            }
            "function_call_output" => {
                let (output, _) = of_content(item.output, &format!("{field}[{i}].output"), max_part)?;
                out.push(CreateMessageRequest { tool_call_id: item.call_id, ..message(Role::Tool, output) })
            }
            "mcp_approval_response" if field != "input" => {
                return Err(Error::BadRequest(format!(
                    "{field}[{i}].type: an mcp_approval_response decides on a call a response left \
                     waiting: send it in the next response's input, with previous_response_id"
                )));
            }
            // Decisions, not messages: the response's turn reads them (see `responses`).
            "mcp_approval_response" => continue,
            "compaction" => {
                let content = item.encrypted_content.as_deref().unwrap_or_default();
                let Some(sealed) = compaction::unseal(content) else {
                    return Err(Error::BadRequest(format!(
                        "{field}[{i}].encrypted_content: not a compaction of this service: pass back \
                         the item POST /v1/responses/compact answered, as it was"
                    )));
                };
                out.push(message(Role::System, compaction::summary_message(&sealed.summary)));
            }
            _ => {
                let role = match item.role {
                    Some(InputRole::Assistant) => Role::Assistant,
                    Some(InputRole::System | InputRole::Developer) => Role::System,
                    Some(InputRole::User) | None => Role::User,
                };
                let (text, parts) = of_content(item.content, &format!("{field}[{i}].content"), max_part)?;
                out.push(CreateMessageRequest { parts, ..message(role, text) });
            }
        }
        calling = false;
    }
    Ok(out)
}
