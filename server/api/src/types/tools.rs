//! Contract types of tools: functions the model may call, and HTTP calls.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::LocPart;
use crate::types::{JsonObject, Metadata, double_option};
use crate::validate::{Check, Issues, check_json_schema};

/// A tool name: a letter or `_`, then letters, digits or `_` (what model APIs accept).
pub const TOOL_NAME_PATTERN: &str = r"^[A-Za-z_][A-Za-z0-9_]*$";
/// An HTTP(S) URL.
pub const URL_PATTERN: &str = r"^https?://[^\s]+$";

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentToolPath {
    /// The agent's id.
    pub id: Uuid,
    /// The tool's id.
    pub tool_id: Uuid,
}

impl Check for AgentToolPath {}

/// What a tool does when called.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ToolType {
    /// A function the client runs: the model's call is returned to the client.
    Function,
    /// An HTTP request, run by the server.
    ApiCall,
    /// The tools of a Model Context Protocol server (Streamable HTTP), run by
    /// the server: each tool the server lists (those in `allowed_tools`) is
    /// offered to the model under its own name.
    Mcp,
    /// A search the server runs (BM25 and, with embeddings, vectors) over the
    /// documents of the tool's agent and of the session's users (in a task,
    /// the agent's): the model calls it, under the tool's name, with a
    /// `query`, and reads the best passages. No definition besides the name.
    FileSearch,
    /// The built-in memory tools, run by the server: `memory_insert`,
    /// `memory_replace` and `memory_rethink` edit, by label, the memory
    /// blocks of the tool's agent and of the session's users (see
    /// `/api/agents/{id}/blocks`); each edit is listed with the turn and call
    /// that made it. The model calls them by those names (the tool's own name
    /// only labels it). No definition besides the name.
    Memory,
    /// A search the server runs over past messages, called by the model under
    /// the tool's name with a `query` (and optionally `roles`, `start_date`,
    /// `end_date`, `limit`): the messages of the session and of the other
    /// sessions of its users, ranked by BM25. No definition besides the name.
    ConversationSearch,
}

fn empty_object_schema() -> JsonObject {
    match json!({"type": "object", "properties": {}}) {
        Value::Object(m) => m,
        _ => unreachable!("a JSON object"),
    }
}

/// The signature of a `function` tool.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct FunctionDef {
    /// The JSON Schema of the arguments (an object schema; it must be a valid
    /// JSON Schema). Default: no arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: JsonObject,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum HttpMethod {
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

/// The HTTP request of an `api_call` tool.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ApiCallDef {
    pub method: HttpMethod,
    /// An `http://` or `https://` URL (at most 2,048 characters).
    #[schemars(length(min = 1, max = 2048), regex(path = "URL_PATTERN"))]
    pub url: String,
    /// Headers sent with the request: valid HTTP header names and values,
    /// other than those the HTTP client sets itself (`Host`, `Connection`,
    /// `Transfer-Encoding`, `Content-Length`, `Keep-Alive`, `Upgrade`, `TE`,
    /// `Trailer`, `Proxy-Connection`: a 422).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// How long to wait for the answer, in seconds (1 to 600).
    #[serde(default)]
    #[schemars(range(min = 1, max = 600))]
    pub timeout_s: Option<i64>,
}

/// Which of an MCP server's tools need a person's approval before they run.
/// `"always"` or `"never"` for all of them, or lists by name (a tool in
/// neither list needs approval).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum RequireApproval {
    Mode(ApprovalMode),
    Filter(ApprovalFilter),
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    Always,
    Never,
}

/// Tools that always need approval, and tools that never do.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApprovalFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always: Option<ToolNames>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub never: Option<ToolNames>,
}

/// Names of tools.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ToolNames {
    #[schemars(length(max = 256))]
    pub tool_names: Vec<String>,
}

impl RequireApproval {
    /// Whether calling `tool` needs approval (`None`, the default: never).
    pub fn needs(this: Option<&RequireApproval>, tool: &str) -> bool {
        match this {
            None | Some(RequireApproval::Mode(ApprovalMode::Never)) => false,
            Some(RequireApproval::Mode(ApprovalMode::Always)) => true,
            Some(RequireApproval::Filter(f)) => {
                let listed = |names: &Option<ToolNames>| {
                    names.as_ref().is_some_and(|n| n.tool_names.iter().any(|t| t == tool))
                };
                // Listed in `always`, or in neither list: approval.
                !listed(&f.never) || listed(&f.always)
            }
        }
    }
}

/// The server of an `mcp` tool.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct McpDef {
    /// The server's Streamable HTTP endpoint: an `http://` or `https://` URL
    /// (at most 2,048 characters), reachable under the server's outbound
    /// policy (`tools.allowed_hosts`).
    #[schemars(length(min = 1, max = 2048), regex(path = "URL_PATTERN"))]
    pub server_url: String,
    /// Only these of the server's tools are offered (at most 256 names); default all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub allowed_tools: Option<Vec<String>>,
    /// Which calls wait for a person's approval; default `"never"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<RequireApproval>,
    /// Headers sent to the server (an `Authorization`, say). A value may name
    /// secrets of the tenant, `{{ secrets.NAME }}`, replaced when the server is
    /// called; the answers of the API show the values as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
}

/// A tool of an agent.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Tool {
    pub id: Uuid,
    /// The agent the tool belongs to.
    pub agent_id: Uuid,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ToolType,
    pub description: String,
    /// For `function` tools.
    pub function: Option<FunctionDef>,
    /// For `api_call` tools.
    pub api_call: Option<ApiCallDef>,
    /// For `mcp` tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpDef>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/agents/{id}/tools` and `PUT /api/agents/{id}/tools/{tool_id}`
/// (PUT overwrites: omitted fields take their defaults).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateToolRequest {
    /// The tool's name, unique within its agent (1 to 40 characters: a letter
    /// or `_`, then letters, digits or `_`).
    #[schemars(length(min = 1, max = 40), regex(path = "TOOL_NAME_PATTERN"))]
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ToolType,
    /// What the tool does, for the model (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: String,
    /// Required for `function` tools, and only for them.
    #[serde(default)]
    pub function: Option<FunctionDef>,
    /// Required for `api_call` tools, and only for them.
    #[serde(default)]
    pub api_call: Option<ApiCallDef>,
    /// Required for `mcp` tools, and only for them.
    #[serde(default)]
    pub mcp: Option<McpDef>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// Body of `PATCH /api/agents/{id}/tools/{tool_id}`: only the fields sent change;
/// `metadata` is merged key by key. Changing `type` drops the definition of the
/// old type unless it is sent again.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct PatchToolRequest {
    #[serde(default)]
    #[schemars(length(min = 1, max = 40), regex(path = "TOOL_NAME_PATTERN"))]
    pub name: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<ToolType>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "double_option")]
    pub function: Option<Option<FunctionDef>>,
    #[serde(default, deserialize_with = "double_option")]
    pub api_call: Option<Option<ApiCallDef>>,
    #[serde(default, deserialize_with = "double_option")]
    pub mcp: Option<Option<McpDef>>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
}

/// A tool given inline, in a task's `tools`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ToolDef {
    /// The tool's name, unique within the task (1 to 40 characters: a letter
    /// or `_`, then letters, digits or `_`).
    #[schemars(length(min = 1, max = 40), regex(path = "TOOL_NAME_PATTERN"))]
    pub name: String,
    #[serde(rename = "type")]
    pub kind: ToolType,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: String,
    /// Required for `function` tools, and only for them.
    #[serde(default)]
    pub function: Option<FunctionDef>,
    /// Required for `api_call` tools, and only for them.
    #[serde(default)]
    pub api_call: Option<ApiCallDef>,
    /// Required for `mcp` tools, and only for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpDef>,
}

/// Headers an `api_call` tool may not set: the HTTP client sets them itself,
/// as they route the request (`Host`) or frame it on the connection.
pub const RESERVED_API_CALL_HEADERS: &[&str] = &[
    "host",
    "connection",
    "transfer-encoding",
    "content-length",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

/// Why an `api_call` tool may not send this header, if it may not.
pub fn api_call_header_refusal(name: &str, value: &str) -> Option<String> {
    if RESERVED_API_CALL_HEADERS.iter().any(|r| r.eq_ignore_ascii_case(name)) {
        return Some(format!(
            "a tool may not set the header {name:?}: the HTTP client sets it itself \
             (reserved: Host, Connection, Transfer-Encoding, Content-Length, Keep-Alive, Upgrade, \
             TE, Trailer, Proxy-Connection)"
        ));
    }
    if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Some(format!("{name:?} is not a valid HTTP header name"));
    }
    if http::HeaderValue::from_str(value).is_err() {
        return Some(format!("the header {name:?} has a value that is not valid in HTTP"));
    }
    None
}

/// Reports a tool whose definition does not fit its type, or whose function
/// parameters are not a valid JSON Schema. `at` is where the tool is in the body.
pub fn check_tool_def(
    kind: ToolType,
    function: Option<&FunctionDef>,
    api_call: Option<&ApiCallDef>,
    mcp: Option<&McpDef>,
    at: &[LocPart],
    issues: &mut Issues,
) {
    let loc = |k: &str| {
        let mut l = at.to_vec();
        l.push(LocPart::Key(k.into()));
        l
    };
    let defs = [
        (ToolType::Function, "function", function.is_some()),
        (ToolType::ApiCall, "api_call", api_call.is_some()),
        (ToolType::Mcp, "mcp", mcp.is_some()),
    ];
    for (t, name, given) in defs {
        if t == kind && !given {
            issues.push(
                &loc(name),
                "missing",
                format!("Field required: a tool of type {name} needs `{name}`"),
            );
        }
        if t != kind && given {
            issues.push(&loc(name), "value_error", format!("only tools of type {name} have `{name}`"));
        }
    }
    if let Some(f) = function {
        let mut at = loc("function");
        at.push(LocPart::Key("parameters".into()));
        check_json_schema(&Value::Object(f.parameters.clone()), &at, issues);
    }
    let headers = [
        ("api_call", api_call.and_then(|a| a.headers.as_ref())),
        ("mcp", mcp.and_then(|m| m.headers.as_ref())),
    ];
    for (def, headers) in headers {
        for (name, value) in headers.into_iter().flatten() {
            if let Some(why) = api_call_header_refusal(name, value) {
                let mut at = loc(def);
                at.extend([LocPart::Key("headers".into()), LocPart::Key(name.clone())]);
                issues.push(&at, "value_error", why);
            }
        }
    }
}

impl Check for CreateToolRequest {
    fn check(&self, issues: &mut Issues) {
        check_tool_def(
            self.kind,
            self.function.as_ref(),
            self.api_call.as_ref(),
            self.mcp.as_ref(),
            &[],
            issues,
        );
    }
}

impl Check for PatchToolRequest {
    /// The parameters sent must be a valid schema; whether the merged tool fits
    /// its type is checked against the stored tool.
    fn check(&self, issues: &mut Issues) {
        if let Some(Some(f)) = &self.function {
            let at = [LocPart::Key("function".into()), LocPart::Key("parameters".into())];
            check_json_schema(&Value::Object(f.parameters.clone()), &at, issues);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::RequireApproval;

    fn needs(policy: serde_json::Value, tool: &str) -> bool {
        let policy: Option<RequireApproval> = serde_json::from_value(policy).unwrap();
        RequireApproval::needs(policy.as_ref(), tool)
    }

    #[test]
    fn approval_follows_openais_lists_and_a_tool_in_neither_list_needs_it() {
        assert!(!needs(json!(null), "x"), "not given: never");
        assert!(!needs(json!("never"), "x"));
        assert!(needs(json!("always"), "x"));
        let never_echo = json!({"never": {"tool_names": ["echo"]}});
        assert!(!needs(never_echo.clone(), "echo"));
        assert!(needs(never_echo, "add"));
        let always_add = json!({"always": {"tool_names": ["add"]}});
        assert!(needs(always_add.clone(), "add"));
        assert!(needs(always_add, "echo"), "in neither list");
        let both = json!({"always": {"tool_names": ["add"]}, "never": {"tool_names": ["echo"]}});
        assert!(needs(both.clone(), "add") && !needs(both.clone(), "echo") && needs(both, "other"));
        assert!(serde_json::from_value::<RequireApproval>(json!({"sometimes": {}})).is_err());
    }
}
