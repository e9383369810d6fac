//! Contract types of sessions and their messages.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::LocPart;
use crate::types::{
    Direction, Limit, ListParams, Metadata, Offset, SortBy, default_true, double_option,
    parse_metadata_filter,
};
use crate::validate::{Check, Issues};

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SessionPath {
    /// The session's id.
    pub id: Uuid,
}

impl Check for SessionPath {}

// ---------------------------------------------------------------- sessions

/// What to do when a chat's prompt is over the session's `token_budget`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ContextOverflow {
    /// Drop the oldest history until the prompt fits.
    Truncate,
    /// Replace the oldest history by a summary written by the model.
    Adaptive,
}

/// A conversation between one or more agents and zero or more users.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Session {
    pub id: Uuid,
    /// The agents taking part (at least one, but none for a conversation made through
    /// `POST /v1/conversations`); the first answers chats by default.
    pub agents: Vec<Uuid>,
    /// The users taking part.
    pub users: Vec<Uuid>,
    /// Text added after the system prompt of every chat.
    pub situation: Option<String>,
    /// A minijinja (Jinja2) template for the system prompt; null means the built-in default.
    pub system_template: Option<String>,
    /// Whether the contents of new chat messages are rendered as templates too.
    pub render_templates: bool,
    /// The most tokens a chat prompt may have; null means no limit.
    pub token_budget: Option<i64>,
    /// What a chat does when its prompt is over `token_budget`; null answers 400.
    pub context_overflow: Option<ContextOverflow>,
    /// MCP servers whose tools the session's chats and runs offer, run by the
    /// server, besides its agents' tools (absent: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<SessionMcpServer>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/sessions`: the participants (`agent` or `agents`, one of
/// them; optionally `user` or `users`) and the session's settings.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateSessionRequest {
    /// The one agent of the session (send this or `agents`).
    #[serde(default)]
    pub agent: Option<Uuid>,
    /// The agents of the session, at least one (send this or `agent`).
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub agents: Option<Vec<Uuid>>,
    /// The one user of the session (send this, `users`, or neither).
    #[serde(default)]
    pub user: Option<Uuid>,
    /// The users of the session (send this, `user`, or neither).
    #[serde(default)]
    pub users: Option<Vec<Uuid>>,
    #[serde(default)]
    pub situation: Option<String>,
    /// A minijinja (Jinja2) template for the system prompt; it must compile.
    /// It sees `agent`, `user`, `users`, `session`, `tools`, `docs` (recalled)
    /// and `blocks` (the memory blocks of the agent, then of the users: each
    /// `label`, `value`, `description`, `limit`, `chars`, `read_only`,
    /// `owner`). A template that does not mention `blocks` has the default
    /// section of memory blocks after it.
    #[serde(default)]
    pub system_template: Option<String>,
    #[serde(default = "default_true")]
    pub render_templates: bool,
    /// The most tokens a chat prompt may have (at least 1), or null.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub token_budget: Option<i64>,
    #[serde(default)]
    pub context_overflow: Option<ContextOverflow>,
    /// MCP servers whose tools the session's chats offer (at most 16, names
    /// unique), as an agent's `mcp` tools are (`require_approval` `never`
    /// unless said; headers may name the tenant's secrets).
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub mcp_servers: Option<Vec<SessionMcpServer>>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// An MCP server of a session: its tools are offered in the session's chats
/// and runs, as an agent's `mcp` tool's are (a server an agent has too is
/// offered once, the agent's first).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct SessionMcpServer {
    /// Its label (as an `mcp` tool's name: 1 to 40 characters, a letter or
    /// `_`, then letters, digits or `_`).
    #[schemars(length(min = 1, max = 40), regex(path = "super::tools::TOOL_NAME_PATTERN"))]
    pub name: String,
    pub mcp: super::tools::McpDef,
}

/// Reports a session's MCP servers that are not valid (their headers) or share a name.
fn check_mcp_servers(servers: Option<&Vec<SessionMcpServer>>, issues: &mut Issues) {
    for (i, server) in servers.into_iter().flatten().enumerate() {
        let at = [LocPart::Key("mcp_servers".into()), LocPart::Index(i)];
        super::tools::check_tool_def(super::tools::ToolType::Mcp, None, None, Some(&server.mcp), &at, issues);
        if servers.into_iter().flatten().take(i).any(|s| s.name == server.name) {
            let mut loc = at.to_vec();
            loc.push(LocPart::Key("name".into()));
            issues.push(
                &loc,
                "value_error",
                format!("the name {:?} is taken by an earlier server", server.name),
            );
        }
    }
}

/// Body of `PUT` and `PATCH /api/sessions/{id}`: only the fields sent change;
/// `metadata` is merged key by key. The participants are fixed at creation:
/// `agent(s)` and `user(s)` are ignored here, as any unknown field is.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct UpdateSessionRequest {
    #[serde(default, deserialize_with = "double_option")]
    pub situation: Option<Option<String>>,
    /// A minijinja (Jinja2) template for the system prompt (it must compile);
    /// `null` restores the built-in default.
    #[serde(default, deserialize_with = "double_option")]
    pub system_template: Option<Option<String>>,
    #[serde(default)]
    pub render_templates: Option<bool>,
    /// The most tokens a chat prompt may have (at least 1); `null` removes the limit.
    #[serde(default, deserialize_with = "double_option")]
    #[schemars(range(min = 1))]
    pub token_budget: Option<Option<i64>>,
    #[serde(default, deserialize_with = "double_option")]
    pub context_overflow: Option<Option<ContextOverflow>>,
    /// Replaces the session's MCP servers (`[]`: none).
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub mcp_servers: Option<Vec<SessionMcpServer>>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
}

/// Reports a system template that does not compile, with the line of the error.
///
/// Compiling is part of the contract ("it must compile"): the syntax is
/// minijinja's with `trim_blocks` and `lstrip_blocks`, as the server renders
/// it. Unknown filters and other runtime errors only show when rendering.
fn check_template(template: Option<&str>, issues: &mut Issues) {
    let Some(source) = template else { return };
    if let Err(e) = compile_template(source) {
        let line = e.line().filter(|l| *l > 0).map(|l| format!(" at line {l}")).unwrap_or_default();
        let message = match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        };
        issues.push(
            &[LocPart::Key("system_template".into())],
            "value_error",
            format!("system_template does not compile as a minijinja template: {message}{line}"),
        );
    }
}

/// The syntax system templates are written in (and rendered with, by the server):
/// minijinja's delimiters, a block tag's own line and indentation dropped.
pub fn template_syntax() -> minijinja::syntax::SyntaxConfig {
    minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .expect("the default delimiters are valid")
}

/// Compiles a system template in [`template_syntax`], without rendering it
/// (syntax errors, unknown tags; unknown filters only show when rendering).
pub fn compile_template(source: &str) -> Result<(), minijinja::Error> {
    let mut env = minijinja::Environment::new();
    env.set_syntax(template_syntax());
    env.template_from_str(source).map(|_| ())
}

impl Check for CreateSessionRequest {
    fn check(&self, issues: &mut Issues) {
        let key = |k: &str| [LocPart::Key(k.into())];
        match (&self.agent, &self.agents) {
            (None, None) => {
                for k in ["agent", "agents"] {
                    issues.push(
                        &key(k),
                        "missing",
                        "Field required: send `agent` (one agent id) or `agents` (a list of agent ids)",
                    );
                }
            }
            (Some(_), Some(_)) => {
                for k in ["agent", "agents"] {
                    issues.push(&key(k), "value_error", "send `agent` or `agents`, not both");
                }
            }
            _ => {}
        }
        if self.user.is_some() && self.users.is_some() {
            for k in ["user", "users"] {
                issues.push(&key(k), "value_error", "send `user` or `users`, not both");
            }
        }
        check_template(self.system_template.as_deref(), issues);
        check_mcp_servers(self.mcp_servers.as_ref(), issues);
    }
}

impl Check for UpdateSessionRequest {
    fn check(&self, issues: &mut Issues) {
        check_template(self.system_template.as_ref().and_then(|t| t.as_deref()), issues);
        check_mcp_servers(self.mcp_servers.as_ref(), issues);
    }
}

// ---------------------------------------------------------------- messages

/// Who wrote a message.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// The kind of a tool call: always `function` (OpenAI's shape).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallType {
    #[default]
    Function,
}

/// The function a tool call calls.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FunctionCall {
    /// The tool's name.
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// The arguments, as the model wrote them: a JSON object in a string.
    pub arguments: String,
}

/// A call of a tool by an assistant message (OpenAI's shape).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ToolCall {
    /// The call's id; the `tool` message with its result names it in `tool_call_id`.
    #[schemars(length(min = 1, max = 255))]
    pub id: String,
    #[serde(rename = "type", default)]
    pub kind: ToolCallType,
    pub function: FunctionCall,
}

/// One message of a session.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub id: Uuid,
    pub session_id: Uuid,
    pub role: Role,
    pub content: String,
    /// The name of the participant who wrote it, if given.
    pub name: Option<String>,
    /// The tools an assistant message calls.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The tool call a `tool` message answers.
    pub tool_call_id: Option<String>,
    /// The message's content in parts, in order, when it has more than text:
    /// a user message given through `/v1` with images or files (an
    /// `input_image` or `input_file` part of a response's or a conversation's
    /// input). `content` is then its text parts, joined by newlines. Absent
    /// for a message of text alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<Vec<MessagePart>>,
    /// The tokens of `content`, `parts` and `tool_calls` (`o200k_base` encoding;
    /// an image counts 765 tokens, 85 at `detail: low`, a file 1,024).
    pub token_count: i64,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /api/sessions/{id}/messages`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateMessageRequest {
    pub role: Role,
    pub content: String,
    /// The name of the participant who wrote it (1 to 255 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Only for `assistant` messages: the tools it calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Required for `tool` messages, and only for them: the call it answers.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// Not part of the request: the parts of a message given through `/v1`
    /// (see [`Message::parts`]), set by the server only.
    #[serde(default, skip_deserializing)]
    #[schemars(skip)]
    pub parts: Option<Vec<MessagePart>>,
}

/// A part of a message's content, in the shape of OpenAI's chat completions
/// content parts (the provider is sent it so).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessagePart {
    /// Text.
    Text { text: String },
    /// An image, by an http(s) URL or a data URL.
    ImageUrl { image_url: ImageUrl },
    /// A file, its data inline.
    File { file: MessageFile },
}

/// An image: where it is, and how closely the model looks at it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ImageUrl {
    /// An http(s) URL, or a data URL (`data:image/png;base64,...`).
    pub url: String,
    /// `auto` (the default), `low` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<ImageDetail>,
}

/// How closely a model looks at an image.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ImageDetail {
    #[default]
    Auto,
    Low,
    High,
}

/// A file given inline.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct MessageFile {
    /// The file's data: a data URL (`data:application/pdf;base64,...`) or its base64.
    pub file_data: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

impl Check for CreateMessageRequest {
    fn check(&self, issues: &mut Issues) {
        let key = |k: &str| [LocPart::Key(k.into())];
        if self.tool_calls.is_some() && self.role != Role::Assistant {
            issues.push(&key("tool_calls"), "value_error", "only assistant messages have tool_calls");
        }
        match (self.role, &self.tool_call_id) {
            (Role::Tool, None) => issues.push(
                &key("tool_call_id"),
                "missing",
                "Field required: a tool message names the tool call it answers",
            ),
            (Role::Tool, Some(_)) | (_, None) => {}
            (_, Some(_)) => {
                issues.push(&key("tool_call_id"), "value_error", "only tool messages have a tool_call_id")
            }
        }
    }
}

fn asc() -> Direction {
    Direction::Asc
}

/// Paging and filter of a session's messages: oldest first unless asked otherwise.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct MessageListParams {
    /// How many messages to answer at most (1 to 1000). A page also stops
    /// adding messages once its body would pass 8 MiB (it always has at least
    /// one): page on with `offset += len(items)` until a page comes back empty.
    #[serde(default)]
    pub limit: Limit,
    /// How many matching messages to skip first.
    #[serde(default)]
    pub offset: Offset,
    /// Oldest first (`asc`, the default) or newest first (`desc`).
    #[serde(default = "asc")]
    pub direction: Direction,
    /// A JSON object, e.g. `{"lang":"en"}`: only messages whose metadata has every
    /// given top-level key with an equal value. Bounded as metadata is (at most
    /// 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<String>,
}

impl Check for MessageListParams {
    fn check(&self, issues: &mut Issues) {
        parse_metadata_filter(self.metadata_filter.as_deref(), issues);
    }
}

impl From<MessageListParams> for ListParams {
    fn from(p: MessageListParams) -> Self {
        ListParams {
            limit: p.limit,
            offset: p.offset,
            sort_by: SortBy::CreatedAt,
            direction: p.direction,
            metadata_filter: p.metadata_filter,
        }
    }
}
