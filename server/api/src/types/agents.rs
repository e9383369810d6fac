//! Agents: `/api/agents`, with the chat settings an agent gives its chats.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::common::{Metadata, NAME_PATTERN, double_option};
use crate::validate::Check;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentPath {
    /// The agent's id.
    pub id: Uuid,
}
impl Check for AgentPath {}

/// Chat settings: an agent's defaults, overridden per chat request.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ChatSettings {
    /// Sampling temperature, 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// The most tokens the answer may have (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    /// Up to 4 stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    pub stop: Option<Vec<String>>,
    /// A seed for reproducible sampling, where the model supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// One instruction, or a list of them (at most 100).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Instructions {
    One(String),
    Many(#[schemars(length(max = 100))] Vec<String>),
}

impl Default for Instructions {
    fn default() -> Self {
        Instructions::Many(Vec::new())
    }
}

impl Instructions {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Instructions::One(s) => vec![s],
            Instructions::Many(v) => v,
        }
    }
}

/// An agent: a persona with a model, instructions and default chat settings.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Agent {
    pub id: Uuid,
    pub name: String,
    pub about: String,
    /// The model; `""` means the server's default model.
    pub model: String,
    pub instructions: Vec<String>,
    pub default_settings: Option<ChatSettings>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/agents` and `PUT /api/agents/{id}` (PUT overwrites: omitted fields take their defaults).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateAgentRequest {
    /// The agent's name (1 to 120 characters, Unicode letters first).
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: String,
    /// About the agent (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    /// The model name (at most 255 characters); `""` means the server's default model.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub model: String,
    /// A string, or a list of at most 100 strings; stored as a list.
    #[serde(default)]
    pub instructions: Instructions,
    #[serde(default)]
    pub default_settings: Option<ChatSettings>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// Body of `PATCH /api/agents/{id}`: only the fields sent change; `metadata` is merged key by key.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct PatchAgentRequest {
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub model: Option<String>,
    #[serde(default)]
    pub instructions: Option<Instructions>,
    /// Replaces the default settings; `null` clears them.
    #[serde(default, deserialize_with = "double_option")]
    pub default_settings: Option<Option<ChatSettings>>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
}

impl Check for CreateAgentRequest {}
impl Check for PatchAgentRequest {}
