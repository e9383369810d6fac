//! Contract types of chat: `POST /api/sessions/{id}/chat`.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::sessions::{CreateMessageRequest, Role, ToolCall, ToolCallType};
use crate::error::LocPart;
use crate::types::{ChatSettings, DocReference, JsonObject, default_true};
use crate::validate::{Check, Issues};

/// A function the model may call in this chat only (OpenAI's shape).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatTool {
    #[serde(rename = "type", default)]
    pub kind: ToolCallType,
    pub function: ChatFunction,
}

/// The function of a [`ChatTool`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatFunction {
    /// The function's name (1 to 64 letters, digits and underscores).
    #[schemars(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub name: String,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: Option<String>,
    /// The arguments, as a JSON Schema object.
    #[serde(default)]
    pub parameters: Option<JsonObject>,
}

/// `auto` (the model decides), `none` (no tool) or `required` (some tool).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceMode {
    Auto,
    None,
    Required,
}

/// The function the model must call.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct NamedFunction {
    pub name: String,
}

/// A named function the model must call.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct NamedToolChoice {
    #[serde(rename = "type", default)]
    pub kind: ToolCallType,
    pub function: NamedFunction,
}

/// Whether and which tool the model calls.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatToolChoice {
    Mode(ToolChoiceMode),
    Function(NamedToolChoice),
}

/// The kind of answer: free text or one JSON object.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormatType {
    Text,
    JsonObject,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: ResponseFormatType,
}

/// Body of `POST /api/sessions/{id}/chat`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// The new messages (at most 256; at least one unless `approvals` are
    /// sent), usually one `user` message, or the `tool` messages answering
    /// the tool calls of the last answer. (They are saved in one atomic
    /// write: the bound keeps that write short. Append a longer history with
    /// `POST /api/sessions/{id}/messages`.)
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub messages: Vec<CreateMessageRequest>,
    /// Decisions on the calls the last answer left waiting for approval
    /// (its `pending_approvals`): every one of them, each once. Approved
    /// calls run, denied ones are told to the model as denied (with the
    /// reason), then the turn goes on. While calls wait, a chat without
    /// decisions on all of them is a 400 naming them.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub approvals: Option<Vec<ApprovalDecision>>,
    /// The model; overrides the agent's (and the server's default).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub model: Option<String>,
    /// Which of the session's agents answers; default the first.
    #[serde(default)]
    pub agent: Option<Uuid>,
    /// Answer `text/event-stream`: one `data: <chunk>` event per delta, the last
    /// chunk carrying `usage` and `docs`, then `data: [DONE]`.
    #[serde(default)]
    pub stream: bool,
    /// Append the new messages and the answer to the session (one atomic write,
    /// after the model answered; nothing is saved when the call fails).
    #[serde(default = "default_true")]
    pub save: bool,
    /// Search the participants' documents with the last user message.
    #[serde(default = "default_true")]
    pub recall: bool,
    /// Extra function tools for this call, besides the session's agents' tools.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tools: Option<Vec<ChatTool>>,
    #[serde(default)]
    pub tool_choice: Option<ChatToolChoice>,
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// Sampling settings; each overrides the agent's `default_settings`.
    #[serde(flatten)]
    pub settings: ChatSettings,
}

/// A person's decision on a call waiting for approval.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalDecision {
    /// The call's id (a `pending_approvals` entry's `id`).
    #[schemars(length(min = 1, max = 255))]
    pub id: String,
    pub approve: bool,
    /// Why (told to the model with a denial; at most 1,000 characters).
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub reason: Option<String>,
}

/// A call of a server-run tool that waits for a person's approval.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct PendingApproval {
    /// The call's id: decide on it with `approvals: [{"id", "approve"}]`.
    pub id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the model wrote (JSON text).
    pub arguments: String,
    /// The MCP server's label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
}

impl Check for ChatRequest {
    fn check(&self, issues: &mut Issues) {
        check_turn_input(&self.messages, self.approvals.as_deref(), issues);
    }
}

/// A turn's new messages (each as a message is checked) and decisions: at
/// least one of either (a chat's, a session run's).
fn check_turn_input(
    messages: &[CreateMessageRequest],
    approvals: Option<&[ApprovalDecision]>,
    issues: &mut Issues,
) {
    if messages.is_empty() && approvals.is_none_or(|a| a.is_empty()) {
        issues.push(
            &[LocPart::Key("messages".into())],
            "too_short",
            "List should have at least 1 item after validation, not 0 (or send `approvals`)",
        );
    }
    for (i, m) in messages.iter().enumerate() {
        let mut inner = Issues::new(crate::validate::Source::Body);
        m.check(&mut inner);
        for issue in inner.into_vec() {
            let mut path = vec![LocPart::Key("messages".into()), LocPart::Index(i)];
            path.extend(issue.loc.into_iter().skip(1));
            issues.push(&path, &issue.kind, issue.msg);
        }
    }
}

/// Body of `POST /api/sessions/{id}/runs`: a chat turn run in the background.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct SessionRunRequest {
    /// The new messages, as a chat's (at most 256; at least one unless
    /// `approvals` are sent): `user` (or `system`) messages, and `tool`
    /// messages answering the calls of the client's tools.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub messages: Vec<CreateMessageRequest>,
    /// Decisions on the calls the last turn left waiting for approval, as a chat's.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub approvals: Option<Vec<ApprovalDecision>>,
    /// Which of the session's agents answers (with its model, tools and MCP
    /// servers); default the first. A session with no agent is a 400.
    #[serde(default)]
    pub agent: Option<Uuid>,
}

impl Check for SessionRunRequest {
    fn check(&self, issues: &mut Issues) {
        check_turn_input(&self.messages, self.approvals.as_deref(), issues);
    }
}

/// `/api/sessions/{id}/runs/{run_id}`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionRunPath {
    /// The session's id.
    pub id: Uuid,
    /// The run's id (`resp_` and 32 hex digits).
    #[schemars(regex(pattern = "^resp_[A-Za-z0-9_-]{1,100}$"))]
    pub run_id: String,
}

impl Check for SessionRunPath {}

/// A chat turn of a session run in the background (`POST
/// /api/sessions/{id}/runs`): it is a background response of OpenAI's
/// Responses API on the session (`GET /v1/responses/{id}` reads it too).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SessionRun {
    /// `resp_` and 32 hex digits. Its events: `GET /v1/responses/{id}?stream=true`.
    pub id: String,
    pub session_id: Uuid,
    /// `queued`, `in_progress`, `completed`, `incomplete` (a tool limit),
    /// `failed` (see `error`) or `cancelled`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    /// The messages the run made so far, oldest first: each assistant
    /// message that called the server's tools, each result (a `tool` message
    /// whose `metadata.tool_run` is the call's run), then the answer.
    pub messages: Vec<crate::types::Message>,
    /// The calls that wait for a person's decision once the run ended with
    /// them: decide with the next run's (or chat's) `approvals`.
    pub pending_approvals: Vec<PendingApproval>,
    /// Why it failed.
    pub error: Option<super::openai_responses::ResponseError>,
}

/// The assistant's answer.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatAnswerMessage {
    pub role: Role,
    /// The text; null when the answer only calls tools.
    pub content: Option<String>,
    /// The tools the model calls; send their results back as `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatChoice {
    pub index: i64,
    /// `stop`, `length`, `tool_calls`, ... as the model said; or as the
    /// agent loop ended the turn: `max_tool_rounds`, `max_tool_calls`,
    /// `approval_required`.
    pub finish_reason: Option<String>,
    pub message: ChatAnswerMessage,
}

/// Tokens of the call, as the provider counted them.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatUsage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
}

/// What kind of tool the server ran.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ToolRunType {
    ApiCall,
    Mcp,
    FileSearch,
    /// An edit of a memory block (`memory_insert`, `memory_replace`, `memory_rethink`).
    Memory,
    ConversationSearch,
}

/// A call of a server-run tool (`api_call`, `mcp`, `file_search`, the memory tools) that the
/// server made during a turn: the model's call, and what came of it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ToolRun {
    /// The model's id for the call (the `tool_call_id` of the `tool` message
    /// that carries its result).
    pub id: String,
    #[serde(rename = "type")]
    pub kind: ToolRunType,
    /// The tool's name, as the model called it.
    pub name: String,
    /// For `mcp` tools: the tool's server (the agent tool's name, or the
    /// request's `server_label`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The arguments, as the model wrote them (JSON text).
    pub arguments: String,
    /// What the tool answered, as the model was given it (absent when it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Why the call failed or did not run (the model was told `error: ` and this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_at: DateTime<Utc>,
    /// How long the call took, in milliseconds.
    pub ms: i64,
}

/// The answer of a chat (OpenAI's chat completion, plus the recalled `docs`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatResponse {
    pub id: String,
    pub created_at: DateTime<Utc>,
    /// The model that answered.
    pub model: String,
    pub choices: Vec<ChatChoice>,
    pub usage: ChatUsage,
    /// The document snippets recalled and put in the system message.
    pub docs: Vec<DocReference>,
    /// The calls of server-run tools the turn made, in the order they
    /// started (each round's calls run at once). Each one's result is also
    /// saved as a `tool` message, with this record (without `output`, which
    /// is the message's content) in the message's metadata under `tool_run`.
    #[serde(default)]
    pub tool_runs: Vec<ToolRun>,
    /// The calls that wait for a person's approval, when `finish_reason` is
    /// `approval_required`: send `approvals` to decide.
    #[serde(default)]
    pub pending_approvals: Vec<PendingApproval>,
}

// ---------------------------------------------------------------- the stream

/// One event of a streamed chat (`data: <chunk>`), in OpenAI's chunk shape.
///
/// Each chunk carries a delta of choice 0; the last chunk has no choices and
/// carries `usage` and `docs` (and `object`); then comes `data: [DONE]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatChunk {
    pub id: String,
    /// `"chat.completion.chunk"`, on the last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Tokens of the call, on the last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChatUsage>,
    /// The document snippets recalled and put in the system message, on the last chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<Vec<DocReference>>,
    /// A call of a server-run tool, once it ended, on a chunk of its own
    /// (no choices) between the model's rounds. The model's deltas of such
    /// calls are not sent: only the calls the client runs are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_run: Option<ToolRun>,
    /// On the last chunk, when the answer ends `approval_required`: the
    /// calls that wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_approvals: Option<Vec<PendingApproval>>,
}

/// One choice of a [`ChatChunk`]: what it adds to the answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    /// Why the answer ended (`stop`, `length`, `tool_calls`, `max_tool_rounds`,
    /// `max_tool_calls`, `approval_required`), on its last delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// The new part of the streamed answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A piece of the model's refusal, from providers that send one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// The model's reasoning, from providers that send it apart from the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ChatToolCallDelta>>,
}

/// A fragment of a tool call: the first fragment of a call usually carries
/// `id` and `function.name`, later ones pieces of `function.arguments` to
/// concatenate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatToolCallDelta {
    /// Which call of the answer this fragment belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<ChatFunctionCallDelta>,
}

/// A fragment of a function call's name and arguments.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ChatFunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// The event that ends a stream that failed after it started: nothing was saved.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatErrorEvent {
    pub error: ChatErrorDetail,
}

/// What failed in a stream, with the `code` the same failure has as an
/// ordinary error answer (`upstream_error`, `upstream_timeout`, ...).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatErrorDetail {
    pub message: String,
    pub code: String,
}
