//! Contract types of the OpenAI-compatible routes (`/v1`), in OpenAI's shapes.
//!
//! Field names and meanings follow OpenAI's API reference; unknown fields are
//! ignored (clients send many). What we bound, OpenAI bounds too, or the
//! bound keeps one request's memory and time in check.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::chat::{ChatChunkChoice, ChatTool, ChatToolChoice, ChatUsage};
use super::sessions::ToolCall;
use crate::error::LocPart;
use crate::types::JsonObject;
use crate::validate::{Check, Issues};

// ---------------------------------------------------------------- models

/// `GET /v1/models`: the models a client can name.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<Model>,
}

/// A model: one of the tenant's agents (its id), or a model name a
/// configured provider serves.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Model {
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// When it was created (an agent), or 0 (a provider's model), in Unix seconds.
    pub created: i64,
    /// `agent-platform` for an agent; the provider's name for a provider's model.
    pub owned_by: String,
}

// ---------------------------------------------------------------- chat completions

/// Who wrote a message of a chat completion request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CompletionRole {
    System,
    /// OpenAI's newer name for `system` messages; sent to the provider as `system`.
    Developer,
    User,
    Assistant,
    Tool,
}

/// A part of a message's content. Only `text` parts are supported: other
/// kinds (images, audio, files) answer 400 naming the part.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 64))]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// A message's content: text, or a list of parts (at most 1,000).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CompletionContent {
    Text(String),
    Parts(#[schemars(length(max = 1000))] Vec<ContentPart>),
}

/// One message of a chat completion request.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionMessage {
    pub role: CompletionRole,
    /// Null or absent for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<CompletionContent>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Only for `assistant` messages: the tools it called.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Required for `tool` messages: the call it answers.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub tool_call_id: Option<String>,
}

/// Stop sequences: one, or a list of up to 4.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StopSequences {
    One(String),
    Many(#[schemars(length(max = 4))] Vec<String>),
}

/// What a streamed answer includes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionStreamOptions {
    /// Send a last chunk, before `data: [DONE]`, with no choices and the `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// Body of `POST /v1/chat/completions` (OpenAI's request; unknown fields are ignored).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ChatCompletionRequest {
    /// An agent's id (that agent answers), or a model name its provider serves.
    #[schemars(length(min = 1, max = 255))]
    pub model: String,
    /// The conversation so far (1 to 10,000 messages): the whole history, as
    /// nothing is kept between requests.
    #[schemars(length(min = 1, max = 10000))]
    pub messages: Vec<CompletionMessage>,
    /// Answer `text/event-stream`: `chat.completion.chunk` events, then `data: [DONE]`.
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<CompletionStreamOptions>,
    /// Function tools the model may call (besides the agent's, when `model` is an agent).
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tools: Option<Vec<ChatTool>>,
    #[serde(default)]
    pub tool_choice: Option<ChatToolChoice>,
    /// Passed to the provider as sent (`{"type": "json_object"}`, `json_schema`, ...).
    #[serde(default)]
    pub response_format: Option<JsonObject>,
    /// Passed to the provider as sent.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature, 0 to 2.
    #[serde(default)]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// The most tokens the answer may have (OpenAI's older name of `max_completion_tokens`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
    /// The most tokens the answer may have; wins over `max_tokens`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_completion_tokens: Option<i64>,
    /// -2 to 2.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub stop: Option<StopSequences>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// How many answers: only 1 is supported (another value answers 400).
    #[serde(default)]
    pub n: Option<i64>,
    /// An end-user id, for the provider's abuse monitoring: passed on as sent.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub user: Option<String>,
}

impl ChatCompletionRequest {
    /// The first feature of the request this service does not support, as
    /// `(param, message)`: a 400 naming it. Everything else is answered.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if let Some(n) = self.n.filter(|n| *n != 1) {
            return Some(("n".into(), format!("n = {n}: only one choice (n = 1) is supported")));
        }
        for (i, m) in self.messages.iter().enumerate() {
            if let Some(CompletionContent::Parts(parts)) = &m.content {
                for (j, p) in parts.iter().enumerate() {
                    if p.kind != "text" {
                        return Some((
                            format!("messages[{i}].content[{j}].type"),
                            format!(
                                "content parts of type {:?} are not supported: only \"text\" parts are",
                                p.kind
                            ),
                        ));
                    }
                }
            }
        }
        None
    }
}

impl Check for ChatCompletionRequest {
    fn check(&self, issues: &mut Issues) {
        for (i, m) in self.messages.iter().enumerate() {
            let at = |k: &str| [LocPart::Key("messages".into()), LocPart::Index(i), LocPart::Key(k.into())];
            if m.tool_calls.is_some() && m.role != CompletionRole::Assistant {
                issues.push(&at("tool_calls"), "value_error", "only assistant messages have tool_calls");
            }
            if m.role == CompletionRole::Tool && m.tool_call_id.is_none() {
                issues.push(
                    &at("tool_call_id"),
                    "missing",
                    "Field required: a tool message names the tool call it answers",
                );
            }
            if let Some(CompletionContent::Parts(parts)) = &m.content {
                for (j, p) in parts.iter().enumerate() {
                    if p.kind == "text" && p.text.is_none() {
                        let loc = [
                            LocPart::Key("messages".into()),
                            LocPart::Index(i),
                            LocPart::Key("content".into()),
                            LocPart::Index(j),
                            LocPart::Key("text".into()),
                        ];
                        issues.push(&loc, "missing", "Field required: a text part has `text`");
                    }
                }
            }
        }
    }
}

/// The assistant's message in a [`ChatCompletion`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionAnswerMessage {
    /// Always `assistant`.
    pub role: String,
    /// The text; null when the answer only calls tools.
    pub content: Option<String>,
    /// Always null: refusals come as text.
    pub refusal: Option<String>,
    /// The tools the model calls; send their results back as `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One answer of a [`ChatCompletion`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionChoice {
    pub index: i64,
    pub message: CompletionAnswerMessage,
    /// `stop`, `length`, `tool_calls`, ... as the model said.
    pub finish_reason: Option<String>,
    /// Always null.
    pub logprobs: Option<Value>,
}

/// The answer of `POST /v1/chat/completions` (OpenAI's `chat.completion`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: i64,
    /// The model that answered.
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: ChatUsage,
}

/// One event of a streamed chat completion (`data: <chunk>`, OpenAI's
/// `chat.completion.chunk`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    /// Unix seconds.
    pub created: i64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    /// On the last chunk (no choices) when `stream_options.include_usage`; else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChatUsage>,
}

// ---------------------------------------------------------------- conversations

/// `/v1/conversations/{conversation_id}`: a conversation is a session.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ConversationPath {
    /// The conversation's id: its session's id.
    pub conversation_id: uuid::Uuid,
}

impl Check for ConversationPath {}

/// `/v1/conversations/{conversation_id}/items/{item_id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ConversationItemPath {
    pub conversation_id: uuid::Uuid,
    /// The item's id, as the item lists show it.
    #[schemars(length(min = 1, max = 100))]
    pub item_id: String,
}

impl Check for ConversationItemPath {}

/// A conversation (OpenAI's `conversation`), which is a session of the
/// service: `GET /api/sessions/{id}` shows it too, its items are the
/// session's messages.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Conversation {
    pub id: uuid::Uuid,
    /// Always `conversation`.
    pub object: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The session's metadata (`{}` when it has none).
    pub metadata: JsonObject,
}

/// The answer of `DELETE /v1/conversations/{conversation_id}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ConversationDeleted {
    pub id: uuid::Uuid,
    /// Always `conversation.deleted`.
    pub object: String,
    pub deleted: bool,
}

/// Who wrote an input message item.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    User,
    Assistant,
    System,
    /// Kept as `system`.
    Developer,
}

/// An item sent to a conversation (or as a response's input): a `message`
/// (the default `type`: `role` and `content`), a `function_call` the model made
/// (`call_id`, `name`, `arguments`), a `function_call_output` (`call_id`,
/// `output`), or a `compaction` (`encrypted_content`, as
/// `POST /v1/responses/compact` answered it: the summary it holds becomes a
/// system message). Other item types answer 400 naming the item's `type`;
/// content parts other than text (`input_text`, `output_text`, `text`) too.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct InputItem {
    /// `message` (default), `function_call`, `function_call_output` or `compaction`.
    #[serde(rename = "type", default)]
    #[schemars(length(min = 1, max = 64))]
    pub kind: Option<String>,
    /// A message's author.
    #[serde(default)]
    pub role: Option<InputRole>,
    /// A message's text, or its parts.
    #[serde(default)]
    pub content: Option<CompletionContent>,
    /// A function call's id, named again by its output.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub call_id: Option<String>,
    /// A function call's function.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub name: Option<String>,
    /// A function call's arguments, as JSON text.
    #[serde(default)]
    pub arguments: Option<String>,
    /// A function call's result: text, or text parts.
    #[serde(default)]
    pub output: Option<CompletionContent>,
    /// A compaction's content, as `POST /v1/responses/compact` gave it (a 400
    /// naming it when it is not one of its).
    #[serde(default)]
    #[schemars(length(min = 1, max = 10485760))]
    pub encrypted_content: Option<String>,
}

/// The item types [`InputItem`] takes.
pub const INPUT_ITEM_TYPES: [&str; 4] = ["message", "function_call", "function_call_output", "compaction"];

impl InputItem {
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("message")
    }

    /// The first unsupported feature of the item, as `(param under the item, message)`.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if !INPUT_ITEM_TYPES.contains(&self.kind()) {
            return Some((
                "type".into(),
                format!(
                    "items of type {:?} are not supported: only {}",
                    self.kind(),
                    INPUT_ITEM_TYPES.join(", ")
                ),
            ));
        }
        for (field, content) in [("content", &self.content), ("output", &self.output)] {
            if let Some(CompletionContent::Parts(parts)) = content {
                for (j, p) in parts.iter().enumerate() {
                    if !["input_text", "output_text", "text"].contains(&p.kind.as_str()) {
                        return Some((
                            format!("{field}[{j}].type"),
                            format!(
                                "content parts of type {:?} are not supported: only text parts are",
                                p.kind
                            ),
                        ));
                    }
                }
            }
        }
        None
    }

    /// Pushes what the item misses for its type, its fields under `at`.
    pub fn check_at(&self, at: &[LocPart], issues: &mut Issues) {
        let missing = |issues: &mut Issues, field: &str, what: &str| {
            let mut loc = at.to_vec();
            loc.push(LocPart::Key(field.into()));
            issues.push(&loc, "missing", format!("Field required: {what}"));
        };
        match self.kind() {
            "message" => {
                if self.role.is_none() {
                    missing(issues, "role", "a message item has a role");
                }
                if self.content.is_none() {
                    missing(issues, "content", "a message item has content");
                }
            }
            "function_call" => {
                for (field, value) in
                    [("call_id", &self.call_id), ("name", &self.name), ("arguments", &self.arguments)]
                {
                    if value.is_none() {
                        missing(issues, field, "a function_call item has call_id, name and arguments");
                    }
                }
            }
            "function_call_output" => {
                if self.call_id.is_none() {
                    missing(issues, "call_id", "a function_call_output item names its call");
                }
                if self.output.is_none() {
                    missing(issues, "output", "a function_call_output item has an output");
                }
            }
            "compaction" if self.encrypted_content.is_none() => {
                missing(issues, "encrypted_content", "a compaction item has encrypted_content");
            }
            _ => {}
        }
    }
}

/// The first unsupported feature of `items`, as `(param, message)`.
pub fn unsupported_item(field: &str, items: &[InputItem]) -> Option<(String, String)> {
    items
        .iter()
        .enumerate()
        .find_map(|(i, item)| item.unsupported().map(|(param, msg)| (format!("{field}[{i}].{param}"), msg)))
}

fn check_items(field: &str, items: &[InputItem], issues: &mut Issues) {
    for (i, item) in items.iter().enumerate() {
        item.check_at(&[LocPart::Key(field.into()), LocPart::Index(i)], issues);
    }
}

/// Body of `POST /v1/conversations`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct CreateConversationRequest {
    /// Items to start with (at most 256), saved in one write.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub items: Option<Vec<InputItem>>,
    #[serde(default)]
    pub metadata: Option<super::Metadata>,
}

impl Check for CreateConversationRequest {
    fn check(&self, issues: &mut Issues) {
        check_items("items", self.items.as_deref().unwrap_or_default(), issues);
    }
}

/// Body of `POST /v1/conversations/{conversation_id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct UpdateConversationRequest {
    /// The conversation's new metadata: it replaces the old.
    pub metadata: super::Metadata,
}

impl Check for UpdateConversationRequest {}

/// Body of `POST /v1/conversations/{conversation_id}/items`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateItemsRequest {
    /// The items to append (1 to 256), in one write.
    #[schemars(length(min = 1, max = 256))]
    pub items: Vec<InputItem>,
}

impl Check for CreateItemsRequest {
    fn check(&self, issues: &mut Issues) {
        check_items("items", &self.items, issues);
    }
}

/// Oldest first (`asc`) or newest first (`desc`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ItemOrder {
    Asc,
    #[default]
    Desc,
}

/// Query of `GET /v1/conversations/{conversation_id}/items` (OpenAI's cursor paging).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ItemListParams {
    /// Answer the items after this one (an item id of an earlier page's `last_id`).
    #[serde(default)]
    #[schemars(length(min = 1, max = 100))]
    pub after: Option<String>,
    /// How many items at most, 1 to 100 (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<i64>,
    /// `desc` (newest first, the default) or `asc`.
    #[serde(default)]
    pub order: ItemOrder,
}

impl Check for ItemListParams {}

/// A part of a message item's content.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemContent {
    /// Text of a user or system message.
    InputText { text: String },
    /// Text of an assistant message.
    OutputText { text: String, annotations: Vec<Value> },
}

/// An item of a conversation: a view of one of its session's messages (an
/// assistant message that calls tools is one `function_call` item per call,
/// after its `message` item if it has text).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConversationItem {
    Message {
        /// The message's id.
        id: String,
        /// Always `completed`.
        status: String,
        /// `user`, `assistant` or `system`.
        role: String,
        content: Vec<ItemContent>,
    },
    FunctionCall {
        /// `fc_<message id without dashes>_<index of the call>`.
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        /// Always `completed`.
        status: String,
    },
    FunctionCallOutput {
        /// The `tool` message's id.
        id: String,
        call_id: String,
        output: String,
        /// Always `completed`.
        status: String,
    },
}

impl ConversationItem {
    pub fn id(&self) -> &str {
        match self {
            ConversationItem::Message { id, .. }
            | ConversationItem::FunctionCall { id, .. }
            | ConversationItem::FunctionCallOutput { id, .. } => id,
        }
    }
}

/// A page of items (OpenAI's cursor list).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ItemList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ConversationItem>,
    /// The first item's id, null when `data` is empty.
    pub first_id: Option<String>,
    /// The last item's id (send it as `after` for the next page), null when `data` is empty.
    pub last_id: Option<String>,
    /// Whether more items follow this page.
    pub has_more: bool,
}
