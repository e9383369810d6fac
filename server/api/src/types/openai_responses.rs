//! Contract types of OpenAI's Responses API (`/v1/responses`), in OpenAI's shapes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::chat::ToolChoiceMode;
use super::openai::{ConvId, ConversationItem, InputItem, unsupported_item};
use crate::error::LocPart;
use crate::types::{JsonObject, Metadata};
use crate::validate::{Check, Issues};

/// The query of `GET /v1/responses/{response_id}`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct ResponseGetParams {
    /// Answer the response's events (`text/event-stream`), as `stream: true`
    /// on its creation does, instead of the response.
    #[serde(default)]
    pub stream: Option<bool>,
    /// With `stream`: only the events after this `sequence_number`.
    #[serde(default)]
    #[schemars(range(min = -1))]
    pub starting_after: Option<i64>,
}

impl Check for ResponseGetParams {}

/// `/v1/responses/{response_id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ResponsePath {
    /// A response's `id`: `resp_` and (here) 32 hex digits; any other `resp_`
    /// id names no response (404).
    #[schemars(regex(pattern = "^resp_[A-Za-z0-9_-]{1,100}$"))]
    pub response_id: String,
}

impl Check for ResponsePath {}

/// A response's input: text (one user message), or items.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ResponseInput {
    Text(String),
    Items(#[schemars(length(min = 1, max = 256))] Vec<InputItem>),
}

/// The conversation a response is a turn of: its id, or `{"id": ...}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ConversationRef {
    Id(ConvId),
    Object { id: ConvId },
}

impl ConversationRef {
    pub fn id(&self) -> Uuid {
        match self {
            ConversationRef::Id(id) | ConversationRef::Object { id } => id.0,
        }
    }
}

/// A tool the model may call, by `type`:
///
/// - `function` (`name`, `description`, `parameters`, `strict`): the client's;
///   the model's calls are `function_call` items for the client to answer.
/// - `mcp` (`server_label`, `server_url`, `allowed_tools`, `require_approval`,
///   `headers`, `server_description`): a Model Context Protocol server
///   (Streamable HTTP) the server calls; its tools are listed (an
///   `mcp_list_tools` item) and the model's calls run in the server
///   (`mcp_call` items). `headers` may name the tenant's secrets
///   (`{{ secrets.NAME }}`) and are never echoed.
/// - `file_search` (`vector_store_ids`, `max_num_results`): searches the
///   documents of these owners — this service's agent and user ids stand
///   for vector stores — with the service's hybrid search (text alone
///   without an embedding model); calls are `file_search_call` items.
///
/// Other types answer 400 naming the tool's `type`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ResponseTool {
    /// `function`, `mcp` or `file_search`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 64))]
    pub kind: String,
    /// The function's name (1 to 64 letters, digits and underscores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: Option<String>,
    /// Echoed as sent (`null` when not sent).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: Option<String>,
    /// The arguments, as a JSON Schema object; echoed as sent (`null` when not sent).
    #[serde(default)]
    pub parameters: Option<JsonObject>,
    /// Strict schema adherence: sent to the provider as the function's
    /// `strict`; echoed as sent (`null` when not sent).
    #[serde(default)]
    pub strict: Option<bool>,
    /// `mcp`: the server's label (1 to 64 letters, digits, `_` and `-`),
    /// naming it in `mcp_call` items.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub server_label: Option<String>,
    /// `mcp`: the server's Streamable HTTP endpoint (http or https, at most
    /// 2,048 characters), under the outbound policy (`tools.allowed_hosts`).
    #[serde(default)]
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://[^\s]+$"))]
    pub server_url: Option<String>,
    /// `mcp`: only these of the server's tools (default all).
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub allowed_tools: Option<Vec<String>>,
    /// `mcp`: which calls wait for approval (default `"always"`, as OpenAI's).
    #[serde(default)]
    pub require_approval: Option<super::tools::RequireApproval>,
    /// `mcp`: headers sent to the server (never echoed).
    #[serde(default)]
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    /// `mcp`: what the server is for, echoed.
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub server_description: Option<String>,
    /// `file_search`: the owners (agent or user ids) whose documents are
    /// searched (1 to 16).
    #[serde(default)]
    #[schemars(length(min = 1, max = 16))]
    pub vector_store_ids: Option<Vec<String>>,
    /// `file_search`: the most results one search gives the model (1 to 50; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 50))]
    pub max_num_results: Option<i64>,
}

impl Serialize for ResponseTool {
    /// Each type with its own fields (an `mcp` tool without its `headers`).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", &self.kind)?;
        match self.kind.as_str() {
            "mcp" => {
                map.serialize_entry("server_label", &self.server_label)?;
                map.serialize_entry("server_url", &self.server_url)?;
                if let Some(tools) = &self.allowed_tools {
                    map.serialize_entry("allowed_tools", tools)?;
                }
                map.serialize_entry(
                    "require_approval",
                    &self
                        .require_approval
                        .clone()
                        .unwrap_or(super::tools::RequireApproval::Mode(super::tools::ApprovalMode::Always)),
                )?;
                if let Some(d) = &self.server_description {
                    map.serialize_entry("server_description", d)?;
                }
            }
            "file_search" => {
                map.serialize_entry("vector_store_ids", &self.vector_store_ids.clone().unwrap_or_default())?;
                if let Some(n) = self.max_num_results {
                    map.serialize_entry("max_num_results", &n)?;
                }
            }
            _ => {
                if let Some(name) = &self.name {
                    map.serialize_entry("name", name)?;
                }
                map.serialize_entry("description", &self.description)?;
                map.serialize_entry("parameters", &self.parameters)?;
                map.serialize_entry("strict", &self.strict)?;
            }
        }
        map.end()
    }
}

/// A named function the model must call.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ResponseNamedTool {
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
}

/// Whether and which tool the model calls.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ResponseToolChoice {
    Mode(ToolChoiceMode),
    Function(ResponseNamedTool),
}

/// How the answer's text is shaped (`text`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResponseText {
    /// `{"type": "text"}` (the default), `{"type": "json_object"}`, or
    /// `{"type": "json_schema", "name", "schema", "description", "strict"}`:
    /// sent to the provider as `response_format` (structured outputs).
    #[serde(default)]
    pub format: Option<TextFormat>,
    /// `low`, `medium` or `high`: sent to the provider as `verbosity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<Verbosity>,
}

/// The format of the answer's text: `{"type": "text"}`, `{"type":
/// "json_object"}`, or `{"type": "json_schema", "name", "schema",
/// "description", "strict"}` (`name` and `schema` required for it). An
/// answer echoes a `json_schema` format with all four (`description` null
/// when not sent, `strict` false), the other two with only their `type`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct TextFormat {
    #[serde(rename = "type")]
    pub kind: TextFormatType,
    /// `json_schema`'s name: 1 to 64 letters, digits, `_` and `-`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: Option<String>,
    /// `json_schema`'s JSON Schema, which the answer follows.
    #[serde(default)]
    pub schema: Option<JsonObject>,
    #[serde(default)]
    pub strict: Option<bool>,
}

impl Serialize for TextFormat {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("type", &self.kind)?;
        if self.kind == TextFormatType::JsonSchema {
            map.serialize_entry("name", &self.name)?;
            map.serialize_entry("description", &self.description)?;
            map.serialize_entry("schema", &self.schema)?;
            map.serialize_entry("strict", &self.strict.unwrap_or(false))?;
        }
        map.end()
    }
}

impl TextFormat {
    /// Plain text, the default.
    pub fn text() -> Self {
        TextFormat { kind: TextFormatType::Text, name: None, description: None, schema: None, strict: None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TextFormatType {
    Text,
    JsonObject,
    JsonSchema,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Verbosity {
    Low,
    Medium,
    High,
}

/// Reasoning options (`reasoning`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResponseReasoning {
    /// `none`, `minimal`, `low`, `medium`, `high` or `xhigh`: sent to the
    /// provider as `reasoning_effort`.
    #[serde(default)]
    pub effort: Option<ReasoningEffort>,
    /// Reasoning summaries are not produced: only `null` is accepted.
    #[serde(default)]
    pub summary: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

/// What happens when the prompt exceeds the context (`truncation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    /// The session's `token_budget` and `context_overflow` decide (a
    /// conversation made through `/v1` has none: the whole history is sent).
    Auto,
    /// The default, as `auto` here.
    #[default]
    Disabled,
}

/// Why a response is `incomplete`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct IncompleteDetails {
    /// `max_output_tokens`: the provider stopped at the token limit.
    pub reason: String,
}

/// `include` values that are accepted: each asks for parts of output items
/// this service does not produce (reasoning, built-in tools), so each is met.
pub const INCLUDE_ACCEPTED: &[&str] = &[
    "reasoning.encrypted_content",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "message.input_image.image_url",
];

/// Body of `POST /v1/responses` (OpenAI's request; unknown fields are ignored).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CreateResponseRequest {
    /// An agent's id (that agent answers), or a model name its provider serves.
    #[schemars(length(min = 1, max = 255))]
    pub model: String,
    /// The new input: text (a user message) or items (at most 256). Optional
    /// when the turn continues `previous_response_id` or `conversation`: the
    /// model then answers their history as it stands.
    #[serde(default)]
    pub input: Option<ResponseInput>,
    /// A system message for this turn only (after the agent's, when `model` is an agent).
    #[serde(default)]
    #[schemars(length(max = 1000000))]
    pub instructions: Option<String>,
    /// Continue after this stored response: the same session, its history before this turn.
    #[serde(default)]
    #[schemars(regex(pattern = "^resp_[A-Za-z0-9_-]{1,100}$"))]
    pub previous_response_id: Option<String>,
    /// The conversation (session) this turn is appended to.
    #[serde(default)]
    pub conversation: Option<ConversationRef>,
    /// Save the turn (default true): the input and the answer become messages of
    /// the session, and the response can be read and continued by its id.
    #[serde(default)]
    pub store: Option<bool>,
    /// Function tools the model may call (besides the agent's).
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tools: Option<Vec<ResponseTool>>,
    #[serde(default)]
    pub tool_choice: Option<ResponseToolChoice>,
    /// Answer `text/event-stream`: typed `response.*` events (see the operation).
    #[serde(default)]
    pub stream: bool,
    /// The most tokens the answer may have (at least 16). An answer the
    /// provider cut at this limit is `incomplete`.
    #[serde(default)]
    #[schemars(range(min = 16))]
    pub max_output_tokens: Option<i64>,
    /// Sampling temperature, 0 to 2.
    #[serde(default)]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// Kept with the response.
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// Passed to the provider as sent.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Run the response in the background: the answer is the response at
    /// once, `queued`; the server runs it (`in_progress`) to its end
    /// (`completed`, `incomplete`, `failed`, or `cancelled` by `POST
    /// /v1/responses/{id}/cancel`) whether or not anyone waits, and across
    /// restarts of the server. Poll it with `GET /v1/responses/{id}`, or follow
    /// its events with `GET /v1/responses/{id}?stream=true`. Needs `store`
    /// (`store: false` is a 400 naming `store`). With `stream: true` the answer
    /// is that event stream from its start.
    #[serde(default)]
    pub background: Option<bool>,
    /// The answer's format (structured outputs): see [`ResponseText`].
    #[serde(default)]
    pub text: Option<ResponseText>,
    /// -2 to 2, sent to the provider.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    /// -2 to 2, sent to the provider.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    /// 0 to 20; log probabilities are not returned on `/v1/responses`, so
    /// any value but 0 is a 400 naming it.
    #[serde(default)]
    #[schemars(range(min = 0, max = 20))]
    pub top_logprobs: Option<i64>,
    /// Extra output data: the values of `INCLUDE_ACCEPTED` (none of which this
    /// service produces); any other is a 400 naming it.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub include: Option<Vec<String>>,
    #[serde(default)]
    pub reasoning: Option<ResponseReasoning>,
    /// The most calls of the tools the server runs (MCP servers' tools,
    /// `file_search`, an agent's `api_call` tools) in this response, under the
    /// server's `tools.max_calls_per_turn`; past it the calls are answered "not
    /// run" and the response is `incomplete` (`max_tool_calls`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_tool_calls: Option<i64>,
    /// Sent to the provider as `service_tier`; echoed (`default` when not sent).
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub service_tier: Option<String>,
    /// Sent to the provider as `safety_identifier`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub safety_identifier: Option<String>,
    /// Sent to the provider as `prompt_cache_key`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1024))]
    pub prompt_cache_key: Option<String>,
    /// Sent to the provider as `user`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 256))]
    pub user: Option<String>,
    #[serde(default)]
    pub truncation: Option<Truncation>,
}

impl CreateResponseRequest {
    /// The first feature of the request this service does not support, as `(param, message)`.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if self.background == Some(true) && self.store == Some(false) {
            return Some(("store".into(), "a background response is stored: omit `store: false`".into()));
        }
        if self.previous_response_id.is_some() && self.conversation.is_some() {
            return Some((
                "conversation".into(),
                "send `previous_response_id` or `conversation`, not both".into(),
            ));
        }
        for (i, value) in self.include.iter().flatten().enumerate() {
            if !INCLUDE_ACCEPTED.contains(&value.as_str()) {
                return Some((
                    format!("include[{i}]"),
                    format!(
                        "include {value:?} is not supported (log probabilities are not returned); \
                         the values accepted: {}",
                        INCLUDE_ACCEPTED.join(", ")
                    ),
                ));
            }
        }
        if self.top_logprobs.is_some_and(|n| n > 0) {
            return Some((
                "top_logprobs".into(),
                "log probabilities are not returned on /v1/responses: omit `top_logprobs` or send 0 \
                 (POST /v1/chat/completions returns them)"
                    .into(),
            ));
        }
        if self.reasoning.as_ref().is_some_and(|r| r.summary.is_some()) {
            return Some((
                "reasoning.summary".into(),
                "reasoning summaries are not supported: omit `reasoning.summary`".into(),
            ));
        }
        for (i, tool) in self.tools.iter().flatten().enumerate() {
            if !matches!(tool.kind.as_str(), "function" | "mcp" | "file_search") {
                return Some((
                    format!("tools[{i}].type"),
                    format!(
                        "tools of type {:?} are not supported: \"function\", \"mcp\" and \"file_search\" tools are",
                        tool.kind
                    ),
                ));
            }
        }
        match &self.input {
            Some(ResponseInput::Items(items)) => unsupported_item("input", items),
            Some(ResponseInput::Text(_)) => None,
            None if self.previous_response_id.is_none() && self.conversation.is_none() => Some((
                "input".into(),
                "send `input`, or continue `previous_response_id` or a `conversation` (then the model \
                 answers their history)"
                    .into(),
            )),
            None => None,
        }
    }
}

impl Check for CreateResponseRequest {
    fn check(&self, issues: &mut Issues) {
        if let Some(format) = self.text.as_ref().and_then(|t| t.format.as_ref())
            && format.kind == TextFormatType::JsonSchema
        {
            for (field, missing) in [("name", format.name.is_none()), ("schema", format.schema.is_none())] {
                if missing {
                    let loc = [
                        LocPart::Key("text".into()),
                        LocPart::Key("format".into()),
                        LocPart::Key(field.into()),
                    ];
                    issues.push(
                        &loc,
                        "missing",
                        "Field required: a json_schema format has a name and a schema",
                    );
                }
            }
        }
        if let Some(ResponseInput::Items(items)) = &self.input {
            for (i, item) in items.iter().enumerate() {
                item.check_at(&[LocPart::Key("input".into()), LocPart::Index(i)], issues);
            }
        }
        for (i, tool) in self.tools.iter().flatten().enumerate() {
            let missing = match tool.kind.as_str() {
                "function" => vec![("name", tool.name.is_none())],
                "mcp" => vec![
                    ("server_label", tool.server_label.is_none()),
                    ("server_url", tool.server_url.is_none()),
                ],
                "file_search" => vec![("vector_store_ids", tool.vector_store_ids.is_none())],
                _ => Vec::new(),
            };
            for (field, missing) in missing {
                if missing {
                    let loc = [LocPart::Key("tools".into()), LocPart::Index(i), LocPart::Key(field.into())];
                    issues.push(
                        &loc,
                        "missing",
                        format!("Field required: a {} tool has `{field}`", tool.kind),
                    );
                }
            }
            for (name, value) in tool.headers.iter().flatten() {
                if let Some(why) = super::tools::api_call_header_refusal(name, value) {
                    let loc = [
                        LocPart::Key("tools".into()),
                        LocPart::Index(i),
                        LocPart::Key("headers".into()),
                        LocPart::Key(name.clone()),
                    ];
                    issues.push(&loc, "value_error", why);
                }
            }
        }
    }
}

/// Tokens of a response, as the provider counted them (or we did).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResponseUsage {
    pub input_tokens: i64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: i64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct InputTokensDetails {
    /// Always 0.
    pub cached_tokens: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct OutputTokensDetails {
    /// Always 0.
    pub reasoning_tokens: i64,
}

/// Why a response failed.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ResponseError {
    /// The same code as the failure has as an error answer (`upstream_error`, ...).
    pub code: String,
    pub message: String,
}

/// The conversation of a response.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ConversationId {
    pub id: ConvId,
}

/// A response (OpenAI's `response`): one turn of a session, its output the
/// assistant's message and tool calls as items.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ModelResponse {
    /// `resp_` and 32 hex digits.
    pub id: String,
    /// Always `response`.
    pub object: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, once `completed`; else null.
    pub completed_at: Option<i64>,
    /// `queued` (a background response not begun), `in_progress` (streamed
    /// or in the background, before the end), `completed`, `incomplete` (the
    /// provider stopped at `max_output_tokens`, or the agent loop at a
    /// limit), `failed` or `cancelled` (a background response cancelled).
    pub status: String,
    /// Set when `failed`.
    pub error: Option<ResponseError>,
    /// Set when `incomplete`: `max_output_tokens`, or the agent loop's
    /// `max_tool_calls` or `max_tool_rounds`.
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub max_tool_calls: Option<i64>,
    /// The model that answered.
    pub model: String,
    pub output: Vec<ConversationItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    /// The conversation it was appended to, when the request named one.
    pub conversation: Option<ConversationId>,
    /// The sampling settings used: the request's, else the agent's defaults, else the provider's (1, 1, 0, 0).
    pub temperature: f64,
    pub top_p: f64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    /// As sent (0 by default).
    pub top_logprobs: i64,
    /// `auto`, `none`, `required`, or `{"type": "function", "name"}`.
    pub tool_choice: Value,
    pub tools: Vec<ResponseTool>,
    /// The answer's format: as sent, `{"format": {"type": "text"}}` by default.
    pub text: ResponseText,
    pub reasoning: Option<ResponseReasoning>,
    /// `disabled` (the default) or `auto`, as sent.
    pub truncation: Truncation,
    /// As sent, else `default`.
    pub service_tier: String,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub user: Option<String>,
    pub store: bool,
    /// Null until completed.
    pub usage: Option<ResponseUsage>,
    pub metadata: JsonObject,
    /// Whether it runs (ran) in the background (the request's `background`).
    pub background: bool,
}

/// The answer of `DELETE /v1/responses/{response_id}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ResponseDeleted {
    pub id: String,
    /// Always `response.deleted`.
    pub object: String,
    pub deleted: bool,
}

/// Query of `GET /v1/responses/{response_id}/input_items`.
pub type InputItemListParams = super::openai::ItemListParams;

/// One event of a streamed response (`event: <type>` and `data: <this>`), in
/// order: `response.created`, `response.in_progress`, then per output item
/// `response.output_item.added`, for text `response.content_part.added`,
/// `response.output_text.delta`…, `response.output_text.done`,
/// `response.content_part.done`, for a function call
/// `response.function_call_arguments.delta`…, `response.function_call_arguments.done`,
/// then `response.output_item.done`; last `response.completed` (or
/// `response.incomplete` when the provider stopped at `max_output_tokens`,
/// or `response.failed`). `sequence_number` counts from 0.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResponseStreamEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub sequence_number: u64,
    /// On `response.created`, `response.in_progress`, `response.completed`,
    /// `response.incomplete`, `response.failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<Box<ModelResponse>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    /// On `response.output_item.added` and `.done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<ConversationItem>,
    /// On `response.content_part.added` and `.done`: `{"type": "output_text", "text", "annotations"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<super::openai::ItemContent>,
    /// A piece of text or of a function call's arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    /// On `response.output_text.done`: the whole text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// On `response.function_call_arguments.done`: the whole arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// On `response.output_text.delta` and `.done`: always `[]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<JsonObject>>,
}

// ---------------------------------------------------------------- compaction

/// `POST /v1/responses/{response_id}`, whose one id is `compact`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CompactPath {
    /// `compact` (the route is `POST /v1/responses/compact`); any other id is a 404.
    #[schemars(length(min = 1, max = 100))]
    pub response_id: String,
}

impl Check for CompactPath {}

/// Body of `POST /v1/responses/compact` (OpenAI's request; unknown fields are ignored).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CompactResponseRequest {
    /// The model that writes the summary: an agent's id (its model) or a model
    /// name its provider serves. Required (OpenAI's schema has it nullable):
    /// absent or null, a 400 naming `model`.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub model: Option<String>,
    /// The conversation to compact, after `previous_response_id`'s, if any:
    /// text (a user message) or items (at most 256).
    #[serde(default)]
    pub input: Option<ResponseInput>,
    /// Compact the stored conversation up to and including this response
    /// (its session's messages until its answer), then `input`.
    #[serde(default)]
    #[schemars(regex(pattern = "^resp_[A-Za-z0-9_-]{1,100}$"))]
    pub previous_response_id: Option<String>,
    /// What the summary should keep, for the model that writes it.
    #[serde(default)]
    #[schemars(length(max = 1000000))]
    pub instructions: Option<String>,
}

impl CompactResponseRequest {
    /// The first feature of the request this service does not support (or
    /// that is missing), as `(param, message)`: a 400 naming it.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if self.model.is_none() {
            return Some(("model".into(), "Missing required parameter: 'model'.".into()));
        }
        if self.input.is_none() && self.previous_response_id.is_none() {
            return Some((
                "input".into(),
                "nothing to compact: send `input`, `previous_response_id`, or both".into(),
            ));
        }
        match &self.input {
            Some(ResponseInput::Items(items)) => unsupported_item("input", items),
            _ => None,
        }
    }
}

impl Check for CompactResponseRequest {
    fn check(&self, issues: &mut Issues) {
        if let Some(ResponseInput::Items(items)) = &self.input {
            for (i, item) in items.iter().enumerate() {
                item.check_at(&[LocPart::Key("input".into()), LocPart::Index(i)], issues);
            }
        }
    }
}

/// An item of a compacted window: a user message kept as it was, or the
/// compaction that stands for the rest.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CompactedItem {
    Message {
        /// A fresh id (the message is not stored).
        id: String,
        /// Always `completed`.
        status: String,
        /// Always `user`.
        role: String,
        content: Vec<super::openai::ItemContent>,
    },
    Compaction {
        /// `cmp_` and 32 hex digits.
        id: String,
        /// Not encrypted, only sealed: `apc1.`, then the summary and the model
        /// that wrote it as base64url JSON, then a SHA-256 checksum of that
        /// JSON. Pass it back as it is: an altered one is a 400.
        encrypted_content: String,
    },
}

/// The answer of `POST /v1/responses/compact` (OpenAI's `response.compaction`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompactedResponse {
    /// `resp_` and 32 hex digits; nothing is stored under it.
    pub id: String,
    /// Always `response.compaction`.
    pub object: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The compacted window, to send as the start of a new chain's `input`
    /// (with no `previous_response_id`): the window's user messages as they
    /// were, then one `compaction` item holding the model's summary of the
    /// whole window (assistant answers, tool calls and their outputs included).
    pub output: Vec<CompactedItem>,
    /// The tokens of the summary's call.
    pub usage: ResponseUsage,
}

// ---------------------------------------------------------------- WebSocket mode

/// A failure on a WebSocket of `GET /v1/responses` (a message that is not a
/// `response.create`, or a response that cannot start): one text message;
/// the connection stays open.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ResponseSocketError {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The status the same failure has on `POST /v1/responses`.
    pub status: u16,
    /// As on every `/v1` error; `code` is always set: the same failure's code
    /// on `POST /v1/responses` (`previous_response_not_found` for a
    /// `previous_response_id` found nowhere), or one of the socket's own:
    /// `invalid_json`, `invalid_message`, `unknown_message_type`,
    /// `too_many_waiting`, `websocket_connection_limit_reached`.
    pub error: crate::error::OpenAiErrorDetail,
}
