//! Memory blocks: `/api/agents/{id}/blocks` and `/api/users/{user_id}/blocks`.
//!
//! A block is a labelled piece of text an agent keeps in view: every turn of
//! its owner agent, and every turn of a session with its owner user, has the
//! block in its system message. The model edits blocks through the built-in
//! `memory` tool; people edit them here. Every change of a block's value is
//! an edit, listed with where it came from, and can be reverted.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::common::{Metadata, double_option};
use super::docs::DocOwner;
use crate::error::LocPart;
use crate::validate::{Check, Issues};

/// A block's label: a letter, then letters, digits, `_`, `-` or `.` (1 to 64 characters).
pub const BLOCK_LABEL_PATTERN: &str = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$";
/// The character limit of a block when none is given.
pub const DEFAULT_BLOCK_LIMIT: i64 = 5000;
/// The largest character limit a block may have.
pub const MAX_BLOCK_LIMIT: i64 = 100_000;
/// The most blocks one agent or user may own.
pub const MAX_BLOCKS_PER_OWNER: usize = 100;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentBlockPath {
    /// The agent's id.
    pub id: Uuid,
    /// The block's id.
    pub block_id: Uuid,
}
impl Check for AgentBlockPath {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserBlockPath {
    /// The user's id.
    pub user_id: Uuid,
    /// The block's id.
    pub block_id: Uuid,
}
impl Check for UserBlockPath {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentBlockEditPath {
    /// The agent's id.
    pub id: Uuid,
    /// The block's id.
    pub block_id: Uuid,
    /// The edit's id.
    pub edit_id: Uuid,
}
impl Check for AgentBlockEditPath {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserBlockEditPath {
    /// The user's id.
    pub user_id: Uuid,
    /// The block's id.
    pub block_id: Uuid,
    /// The edit's id.
    pub edit_id: Uuid,
}
impl Check for UserBlockEditPath {}

/// A memory block of an agent or a user.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Block {
    pub id: Uuid,
    /// The agent or user that owns it: an agent's blocks are in each of its
    /// turns, a user's in each turn of a session the user is in.
    pub owner: DocOwner,
    /// Unique among its owner's blocks; how the model names it.
    pub label: String,
    /// The text (at most `limit` characters).
    pub value: String,
    /// What the block is for, shown to the model beside it.
    pub description: String,
    /// The most characters `value` may have.
    pub limit: i64,
    /// The model may read it but not edit it (people still can, here).
    pub read_only: bool,
    pub metadata: Option<Metadata>,
    /// Bumped by every change; an update names the version it read.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/agents/{id}/blocks` and `POST /api/users/{user_id}/blocks`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateBlockRequest {
    /// Unique among the owner's blocks (409 on a clash): a letter, then
    /// letters, digits, `_`, `-` or `.` (1 to 64 characters).
    #[schemars(length(min = 1, max = 64), regex(path = "BLOCK_LABEL_PATTERN"))]
    pub label: String,
    /// The text; at most `limit` characters. Default: empty.
    #[serde(default)]
    #[schemars(length(max = 100000))]
    pub value: String,
    /// What the block is for (at most 2,000 characters).
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub description: String,
    /// The most characters `value` may have (1 to 100,000). Default: 5,000.
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100000))]
    pub limit: i64,
    /// The model may not edit it. Default: false.
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

fn default_limit() -> i64 {
    DEFAULT_BLOCK_LIMIT
}

impl Check for CreateBlockRequest {
    fn check(&self, issues: &mut Issues) {
        check_value_fits(&self.value, self.limit, issues);
    }
}

/// Reports a value longer than its block's limit.
fn check_value_fits(value: &str, limit: i64, issues: &mut Issues) {
    let chars = value.chars().count() as i64;
    if chars > limit {
        issues.push(
            &[LocPart::Key("value".into())],
            "string_too_long",
            format!("the value has {chars} characters, over the block's limit of {limit}"),
        );
    }
}

/// Body of `PATCH /api/agents/{id}/blocks/{block_id}` (and a user's): only
/// the fields sent change; `metadata` is merged key by key. `version` is the
/// version read: a block changed since is a 409, and nothing is written.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct PatchBlockRequest {
    /// The block's version this change is based on.
    #[schemars(range(min = 0))]
    pub version: i64,
    #[serde(default)]
    #[schemars(length(min = 1, max = 64), regex(path = "BLOCK_LABEL_PATTERN"))]
    pub label: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 100000))]
    pub value: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub description: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = 100000))]
    pub limit: Option<i64>,
    #[serde(default)]
    pub read_only: Option<bool>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
}

impl Check for PatchBlockRequest {
    fn check(&self, issues: &mut Issues) {
        if let (Some(value), Some(limit)) = (&self.value, self.limit) {
            check_value_fits(value, limit, issues);
        }
    }
}

/// What made a change of a block.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BlockEditOp {
    /// The block was made with this value.
    Create,
    /// A person changed it through the API.
    Update,
    /// The model inserted text (`memory_insert`).
    Insert,
    /// The model replaced a passage (`memory_replace`).
    Replace,
    /// The model rewrote it whole (`memory_rethink`).
    Rethink,
    /// An earlier edit was reverted.
    Revert,
    /// It came from an imported Agent File.
    Import,
}

/// Where a change of a block came from: a request, or a tool call in a turn.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct EditSource {
    /// The agent whose turn called the memory tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<Uuid>,
    /// The session of that turn (none for a task's `prompt` step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<Uuid>,
    /// The assistant message that called the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Uuid>,
    /// The call's id in that message (its `tool` message answers this id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The request that made it, for a change through the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The execution of a task's `prompt` step that called the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<Uuid>,
    /// The learning job that made (or proposed) it, after the turn whose
    /// answer is `message_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_job_id: Option<Uuid>,
}

/// One change of a block's value (or its creation), with its provenance.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct BlockEdit {
    pub id: Uuid,
    pub block_id: Uuid,
    pub op: BlockEditOp,
    /// The value before (empty for `create`).
    pub before: String,
    /// The value after.
    pub after: String,
    /// The block's version this edit made.
    pub version: i64,
    pub source: EditSource,
    /// The edit that reverted this one, if any.
    #[serde(default)]
    pub reverted_by: Option<Uuid>,
    /// `applied`, or for learning's proposals `proposed` until a person
    /// approves (then `applied`) or rejects (`rejected`) it.
    #[serde(default)]
    pub status: EditStatus,
    pub created_at: DateTime<Utc>,
}

/// Query of `GET /api/agents/{id}/blocks/{block_id}/edits` (and a user's).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct BlockEditListParams {
    /// At most this many edits, newest first (1 to 1000). Default: 100.
    #[serde(default = "default_edit_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: i64,
}
impl Check for BlockEditListParams {}

fn default_edit_limit() -> i64 {
    100
}

/// `POST /api/agents/{id}`, whose one id is `import`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct AgentImportPath {
    /// `import` (the route is `POST /api/agents/import`); any other id is a 404.
    #[schemars(length(min = 1, max = 100))]
    pub id: String,
}
impl Check for AgentImportPath {}

/// Query of `POST /api/agents/import`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct AgentImportParams {
    /// The user to put in the session that receives the file's messages
    /// (it must exist). Default: a session of the agent alone.
    #[serde(default)]
    pub user_id: Option<Uuid>,
}
impl Check for AgentImportParams {}

/// Query of `GET /api/agents/{id}/export`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct AgentExportParams {
    /// A session of the agent whose messages the file carries (at most the
    /// last 10,000). Default: none.
    #[serde(default)]
    pub session_id: Option<Uuid>,
}
impl Check for AgentExportParams {}

/// An agent made from an Agent File.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ImportedAgent {
    /// The agent's id in the file.
    pub source_id: Option<String>,
    pub agent: super::agents::Agent,
    pub blocks: Vec<Block>,
    pub tools: Vec<super::tools::Tool>,
    /// The session that holds the file's messages, when it has any.
    pub session_id: Option<Uuid>,
    /// How many messages that session received.
    pub messages: i64,
}

/// A part of an Agent File that has no counterpart here, and was not imported.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Unmapped {
    /// Where it is in the file (a JSON pointer, e.g. `/tools/2`).
    pub path: String,
    /// What it is (e.g. `tool "web_search"`).
    pub what: String,
    /// Why it was not imported, or what was kept of it.
    pub why: String,
}

/// The answer of `POST /api/agents/import`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct AgentFileImport {
    /// One per agent in the file, in its order.
    pub agents: Vec<ImportedAgent>,
    /// Everything in the file that was not imported, and why: nothing is
    /// dropped without a line here.
    pub unmapped: Vec<Unmapped>,
}

/// A Letta Agent File (`.af`, github.com/letta-ai/agent-file): a JSON object
/// with `agents`, `blocks`, `tools`, `mcp_servers` and more; what this
/// server reads of it and writes is said at `agent_import` and `agent_export`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(transparent)]
pub struct AgentFile(pub super::common::JsonObject);
impl Check for AgentFile {}

/// Whether an edit is in the block, or waits for a person.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EditStatus {
    /// In the block's value.
    #[default]
    Applied,
    /// Proposed by learning in `approve` mode: not in the block until a
    /// person approves it.
    Proposed,
    /// A proposal a person rejected (or that no longer fit the block).
    Rejected,
}

/// What learning does with the edits it makes.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LearningMode {
    /// Edits go into the user's blocks at once.
    #[default]
    Apply,
    /// Edits are proposed (`status: proposed`): a person approves or rejects
    /// each (`POST …/edits/{edit_id}/approve` or `…/reject`).
    Approve,
}

/// How an agent learns about its users after each turn: a background job
/// reads the turn and asks a model to keep durable facts about the users in
/// their memory blocks. Body of `PUT /api/agents/{id}/learning`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct LearningPolicy {
    /// Learn after each saved turn of a session with users. Default: false.
    #[serde(default)]
    pub enabled: bool,
    /// The model that reads the turn. Default: the agent's.
    #[serde(default)]
    #[schemars(length(min = 1, max = 200))]
    pub model: Option<String>,
    /// The labels of the users' blocks it may write (1 to 100 labels).
    /// Default: every block of the users that is not read-only.
    #[serde(default)]
    #[schemars(
        length(min = 1, max = 100),
        inner(length(min = 1, max = 64), regex(path = "BLOCK_LABEL_PATTERN"))
    )]
    pub blocks: Option<Vec<String>>,
    #[serde(default)]
    pub mode: LearningMode,
    /// The most edits one turn's learning makes (1 to 20). Default: 5.
    #[serde(default = "default_max_edits")]
    #[schemars(range(min = 1, max = 20))]
    pub max_edits: i64,
}
impl Check for LearningPolicy {}

fn default_max_edits() -> i64 {
    5
}

impl Default for LearningPolicy {
    fn default() -> Self {
        LearningPolicy { enabled: false, model: None, blocks: None, mode: LearningMode::Apply, max_edits: 5 }
    }
}
