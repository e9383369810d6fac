//! The stored shapes of the values that records share with the contract: chat
//! settings, tool definitions, tool calls, roles.
//!
//! A record's `data` is the JSON of its resource's `Data` type (`AgentData`,
//! `TaskData`, ...), and those are made of plain values and the shapes here,
//! never of the contract's types, so what is on disk follows the domain
//! alone. Each shape converts to and from its contract type field by field
//! and variant by variant, with exhaustive destructuring: a field or variant
//! added to the contract fails to compile here until someone decides how (or
//! whether) it is stored. The tests below pin the JSON that release 0.1.0
//! wrote for every stored type: it must keep decoding, and encode back to the
//! same JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::api::types::{ApiCallDef, FunctionDef, HttpMethod, McpDef, ToolDef, ToolType};
use crate::api::types::{ChatSettings, OwnerRole};
use crate::api::types::{ContextOverflow, FunctionCall, Role, ToolCall, ToolCallType};
use crate::api::types::{ImageDetail, ImageUrl, MessageFile, MessagePart};

/// An agent's default chat settings, as stored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredChatSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

impl From<ChatSettings> for StoredChatSettings {
    fn from(s: ChatSettings) -> Self {
        let ChatSettings { temperature, top_p, max_tokens, frequency_penalty, presence_penalty, stop, seed } =
            s;
        StoredChatSettings { temperature, top_p, max_tokens, frequency_penalty, presence_penalty, stop, seed }
    }
}

impl From<StoredChatSettings> for ChatSettings {
    fn from(s: StoredChatSettings) -> Self {
        let StoredChatSettings {
            temperature,
            top_p,
            max_tokens,
            frequency_penalty,
            presence_penalty,
            stop,
            seed,
        } = s;
        ChatSettings { temperature, top_p, max_tokens, frequency_penalty, presence_penalty, stop, seed }
    }
}

/// What a session's chats do over its token budget, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredContextOverflow {
    Truncate,
    Adaptive,
}

impl From<ContextOverflow> for StoredContextOverflow {
    fn from(c: ContextOverflow) -> Self {
        match c {
            ContextOverflow::Truncate => StoredContextOverflow::Truncate,
            ContextOverflow::Adaptive => StoredContextOverflow::Adaptive,
        }
    }
}

impl From<StoredContextOverflow> for ContextOverflow {
    fn from(c: StoredContextOverflow) -> Self {
        match c {
            StoredContextOverflow::Truncate => ContextOverflow::Truncate,
            StoredContextOverflow::Adaptive => ContextOverflow::Adaptive,
        }
    }
}

/// Who wrote a message, as stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredRole {
    System,
    User,
    Assistant,
    Tool,
}

impl From<Role> for StoredRole {
    fn from(r: Role) -> Self {
        match r {
            Role::System => StoredRole::System,
            Role::User => StoredRole::User,
            Role::Assistant => StoredRole::Assistant,
            Role::Tool => StoredRole::Tool,
        }
    }
}

impl From<StoredRole> for Role {
    fn from(r: StoredRole) -> Self {
        match r {
            StoredRole::System => Role::System,
            StoredRole::User => Role::User,
            StoredRole::Assistant => Role::Assistant,
            StoredRole::Tool => Role::Tool,
        }
    }
}

/// The kind of a stored tool call: always `function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredToolCallType {
    #[default]
    Function,
}

/// The function a stored tool call calls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredFunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A tool call of an assistant message, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredToolCall {
    pub id: String,
    #[serde(rename = "type", default)]
    pub kind: StoredToolCallType,
    pub function: StoredFunctionCall,
}

impl From<ToolCall> for StoredToolCall {
    fn from(c: ToolCall) -> Self {
        let ToolCall { id, kind, function: FunctionCall { name, arguments } } = c;
        let kind = match kind {
            ToolCallType::Function => StoredToolCallType::Function,
        };
        StoredToolCall { id, kind, function: StoredFunctionCall { name, arguments } }
    }
}

impl From<StoredToolCall> for ToolCall {
    fn from(c: StoredToolCall) -> Self {
        let StoredToolCall { id, kind, function: StoredFunctionCall { name, arguments } } = c;
        let kind = match kind {
            StoredToolCallType::Function => ToolCallType::Function,
        };
        ToolCall { id, kind, function: FunctionCall { name, arguments } }
    }
}

/// A part of a message's content, as stored (see [`MessagePart`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StoredPart {
    Text {
        text: String,
    },
    Image {
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<StoredImageDetail>,
    },
    File {
        data: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

/// How closely a model looks at a stored image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredImageDetail {
    Auto,
    Low,
    High,
}

impl From<MessagePart> for StoredPart {
    fn from(p: MessagePart) -> Self {
        match p {
            MessagePart::Text { text } => StoredPart::Text { text },
            MessagePart::ImageUrl { image_url: ImageUrl { url, detail } } => StoredPart::Image {
                url,
                detail: detail.map(|d| match d {
                    ImageDetail::Auto => StoredImageDetail::Auto,
                    ImageDetail::Low => StoredImageDetail::Low,
                    ImageDetail::High => StoredImageDetail::High,
                }),
            },
            MessagePart::File { file: MessageFile { file_data, filename } } => {
                StoredPart::File { data: file_data, filename }
            }
        }
    }
}

impl From<StoredPart> for MessagePart {
    fn from(p: StoredPart) -> Self {
        match p {
            StoredPart::Text { text } => MessagePart::Text { text },
            StoredPart::Image { url, detail } => MessagePart::ImageUrl {
                image_url: ImageUrl {
                    url,
                    detail: detail.map(|d| match d {
                        StoredImageDetail::Auto => ImageDetail::Auto,
                        StoredImageDetail::Low => ImageDetail::Low,
                        StoredImageDetail::High => ImageDetail::High,
                    }),
                },
            },
            StoredPart::File { data, filename } => {
                MessagePart::File { file: MessageFile { file_data: data, filename } }
            }
        }
    }
}

/// What a stored tool does when called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredToolType {
    Function,
    ApiCall,
    Mcp,
    FileSearch,
    Memory,
    ConversationSearch,
}

impl From<ToolType> for StoredToolType {
    fn from(t: ToolType) -> Self {
        match t {
            ToolType::Function => StoredToolType::Function,
            ToolType::ApiCall => StoredToolType::ApiCall,
            ToolType::Mcp => StoredToolType::Mcp,
            ToolType::FileSearch => StoredToolType::FileSearch,
            ToolType::Memory => StoredToolType::Memory,
            ToolType::ConversationSearch => StoredToolType::ConversationSearch,
        }
    }
}

impl From<StoredToolType> for ToolType {
    fn from(t: StoredToolType) -> Self {
        match t {
            StoredToolType::Function => ToolType::Function,
            StoredToolType::ApiCall => ToolType::ApiCall,
            StoredToolType::Mcp => ToolType::Mcp,
            StoredToolType::FileSearch => ToolType::FileSearch,
            StoredToolType::Memory => ToolType::Memory,
            StoredToolType::ConversationSearch => ToolType::ConversationSearch,
        }
    }
}

fn empty_object_schema() -> Map<String, Value> {
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(Map::new()));
    schema
}

/// The signature of a stored `function` tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredFunctionDef {
    /// The JSON Schema of the arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Map<String, Value>,
}

/// The method of a stored `api_call` tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoredHttpMethod {
    #[serde(rename = "GET")]
    Get,
    #[serde(rename = "POST")]
    Post,
    #[serde(rename = "PUT")]
    Put,
    #[serde(rename = "PATCH")]
    Patch,
    #[serde(rename = "DELETE")]
    Delete,
    #[serde(rename = "HEAD")]
    Head,
    #[serde(rename = "OPTIONS")]
    Options,
}

impl From<HttpMethod> for StoredHttpMethod {
    fn from(m: HttpMethod) -> Self {
        match m {
            HttpMethod::Get => StoredHttpMethod::Get,
            HttpMethod::Post => StoredHttpMethod::Post,
            HttpMethod::Put => StoredHttpMethod::Put,
            HttpMethod::Patch => StoredHttpMethod::Patch,
            HttpMethod::Delete => StoredHttpMethod::Delete,
            HttpMethod::Head => StoredHttpMethod::Head,
            HttpMethod::Options => StoredHttpMethod::Options,
        }
    }
}

impl From<StoredHttpMethod> for HttpMethod {
    fn from(m: StoredHttpMethod) -> Self {
        match m {
            StoredHttpMethod::Get => HttpMethod::Get,
            StoredHttpMethod::Post => HttpMethod::Post,
            StoredHttpMethod::Put => HttpMethod::Put,
            StoredHttpMethod::Patch => HttpMethod::Patch,
            StoredHttpMethod::Delete => HttpMethod::Delete,
            StoredHttpMethod::Head => HttpMethod::Head,
            StoredHttpMethod::Options => HttpMethod::Options,
        }
    }
}

/// The HTTP request of a stored `api_call` tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredApiCallDef {
    pub method: StoredHttpMethod,
    pub url: String,
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub timeout_s: Option<i64>,
}

/// A tool's definition as stored: an agent's tool (its `data`), or one of a task's `tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredToolDef {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: StoredToolType,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub function: Option<StoredFunctionDef>,
    #[serde(default)]
    pub api_call: Option<StoredApiCallDef>,
    /// An `mcp` tool's server, stored in the contract's shape (its fields
    /// are all optional but the URL, so that shape can grow); absent in
    /// records written before `mcp` tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpDef>,
}

impl From<ToolDef> for StoredToolDef {
    fn from(d: ToolDef) -> Self {
        let ToolDef { name, kind, description, function, api_call, mcp } = d;
        StoredToolDef {
            name,
            kind: kind.into(),
            description,
            function: function.map(|FunctionDef { parameters }| StoredFunctionDef { parameters }),
            api_call: api_call.map(|ApiCallDef { method, url, headers, timeout_s }| StoredApiCallDef {
                method: method.into(),
                url,
                headers,
                timeout_s,
            }),
            mcp,
        }
    }
}

impl From<StoredToolDef> for ToolDef {
    fn from(d: StoredToolDef) -> Self {
        let StoredToolDef { name, kind, description, function, api_call, mcp } = d;
        ToolDef {
            name,
            kind: kind.into(),
            description,
            function: function.map(|StoredFunctionDef { parameters }| FunctionDef { parameters }),
            api_call: api_call.map(|StoredApiCallDef { method, url, headers, timeout_s }| ApiCallDef {
                method: method.into(),
                url,
                headers,
                timeout_s,
            }),
            mcp,
        }
    }
}

/// Whether a stored document belongs to an agent or to a user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredOwnerRole {
    Agent,
    User,
}

impl From<OwnerRole> for StoredOwnerRole {
    fn from(r: OwnerRole) -> Self {
        match r {
            OwnerRole::Agent => StoredOwnerRole::Agent,
            OwnerRole::User => StoredOwnerRole::User,
        }
    }
}

impl From<StoredOwnerRole> for OwnerRole {
    fn from(r: StoredOwnerRole) -> Self {
        match r {
            StoredOwnerRole::Agent => OwnerRole::Agent,
            StoredOwnerRole::User => OwnerRole::User,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! The JSON of each resource's `data` as release 0.1.0 wrote it (the
    //! serialisation of the types of that release, every variant and optional
    //! field): it decodes, and encodes back byte for byte.

    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::{Value, json};

    use crate::api::types::Task;
    use crate::api::types::Tool;
    use crate::api::types::{Agent, Doc, User};
    use crate::api::types::{Message, Session};
    use crate::app::records::Resource;

    /// `written` decodes as `T` and encodes back to the same JSON.
    #[track_caller]
    pub(crate) fn keeps<T: Serialize + DeserializeOwned>(written: Value) {
        let decoded: T = serde_json::from_value(written.clone())
            .unwrap_or_else(|e| panic!("{written} does not decode: {e}"));
        let encoded = serde_json::to_value(&decoded).unwrap();
        assert_eq!(encoded.to_string(), written.to_string());
    }

    fn function_tool() -> Value {
        json!({"name": "get_weather", "type": "function", "description": "The weather in a city",
               "function": {"parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                           "required": ["city"]}},
               "api_call": null})
    }

    fn api_call_tool(method: &str) -> Value {
        json!({"name": "fetch_page", "type": "api_call", "description": "", "function": null,
               "api_call": {"method": method, "url": "https://example.com/page",
                            "headers": {"accept": "text/html"}, "timeout_s": 10}})
    }

    #[test]
    fn agents_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<Agent as Resource>::Data>(json!({
            "name": "helper", "about": "", "model": "gpt-4o-mini", "instructions": ["be brief", "be kind"],
            "default_settings": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256, "frequency_penalty": 0.5,
                                 "presence_penalty": -0.5, "stop": ["\n\n"], "seed": 7}}));
        keeps::<<Agent as Resource>::Data>(json!({
            "name": "a", "about": "b", "model": "", "instructions": [], "default_settings": {"temperature": 1.0}}));
        keeps::<<Agent as Resource>::Data>(json!({
            "name": "a", "about": "", "model": "", "instructions": [], "default_settings": null}));
    }

    #[test]
    fn users_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<User as Resource>::Data>(json!({"name": "Ada", "about": "maths", "project": null}));
        keeps::<<User as Resource>::Data>(json!({"name": "", "about": "", "project": "apollo"}));
    }

    #[test]
    fn sessions_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<Session as Resource>::Data>(json!({
            "agents": ["01900000-0000-7000-8000-000000000001"], "users": [], "situation": "a fixture",
            "system_template": null, "render_templates": false, "token_budget": 1000,
            "context_overflow": "adaptive"}));
        keeps::<<Session as Resource>::Data>(json!({
            "agents": ["01900000-0000-7000-8000-000000000001", "01900000-0000-7000-8000-000000000002"],
            "users": ["01900000-0000-7000-8000-000000000003"], "situation": null,
            "system_template": "You are {{ agent.name }}.", "render_templates": true, "token_budget": null,
            "context_overflow": "truncate"}));
        keeps::<<Session as Resource>::Data>(json!({
            "agents": [], "users": [], "situation": null, "system_template": null, "render_templates": false,
            "token_budget": null, "context_overflow": null}));
    }

    #[test]
    fn messages_as_stored_by_0_1_0_still_read_and_write_the_same() {
        for role in ["system", "user"] {
            keeps::<<Message as Resource>::Data>(json!({
                "role": role, "content": "Hello there", "name": null, "tool_calls": null, "tool_call_id": null,
                "token_count": 2}));
        }
        keeps::<<Message as Resource>::Data>(json!({
            "role": "assistant", "content": "", "name": "bot",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}],
            "tool_call_id": null, "token_count": 12}));
        keeps::<<Message as Resource>::Data>(json!({
            "role": "tool", "content": "18 C", "name": null, "tool_calls": null, "tool_call_id": "call_1",
            "token_count": 3}));
    }

    #[test]
    fn a_message_with_parts_keeps_them_in_order() {
        keeps::<<Message as Resource>::Data>(json!({
            "role": "user", "content": "What is this?\nAnd this?", "name": null, "tool_calls": null,
            "tool_call_id": null, "token_count": 1800,
            "parts": [{"type": "text", "text": "What is this?"},
                      {"type": "image", "url": "data:image/png;base64,AAAA", "detail": "low"},
                      {"type": "image", "url": "https://example.com/a.png"},
                      {"type": "text", "text": "And this?"},
                      {"type": "file", "data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}]}));
    }

    #[test]
    fn tools_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<Tool as Resource>::Data>(function_tool());
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"] {
            keeps::<<Tool as Resource>::Data>(api_call_tool(method));
        }
        keeps::<<Tool as Resource>::Data>(json!({
            "name": "post_it", "type": "api_call", "description": "", "function": null,
            "api_call": {"method": "POST", "url": "http://localhost/x", "headers": null, "timeout_s": null}}));
    }

    #[test]
    fn tasks_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<Task as Resource>::Data>(json!({
            "name": "summarise", "description": "Summarise a text",
            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "main": [{"prompt": "Summarise: {{ inputs.text }}"}, {"return": {"summary": "_.summary"}}],
            "tools": [function_tool(), api_call_tool("GET")], "inherit_tools": true}));
        keeps::<<Task as Resource>::Data>(json!({
            "name": "t", "description": "", "input_schema": null, "main": [], "tools": [],
            "inherit_tools": false}));
    }

    #[test]
    fn docs_as_stored_by_0_1_0_still_read_and_write_the_same() {
        keeps::<<Doc as Resource>::Data>(json!({
            "role": "agent", "title": "Otters", "content": ["Otters eat fish.", "Sea otters use stones."]}));
        keeps::<<Doc as Resource>::Data>(json!({
            "role": "user", "title": "Notes", "content": ["Ada likes otters."], "embeddings": [[0.5, -0.25]]}));
    }
}
