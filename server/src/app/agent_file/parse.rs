//! Reading an Agent File: what of it becomes an agent here (a [`Plan`], made
//! before anything is written), and what is listed as not imported.
//!
//! The mapping, rule by rule:
//!
//! - **The file.** The current format is an object with `agents` (each with
//!   its `block_ids` and `tool_ids` naming entries of the file's `blocks` and
//!   `tools` by ids like `block-0`), `mcp_servers`, `groups`, `files`,
//!   `sources`, `skills`. The older single-agent format has the agent at the
//!   top level (`name`, `system`, `llm_config`, `core_memory` or
//!   `memory.blocks`, inline `tools`, `messages`). Anything else, or a field
//!   of the wrong type, is a 422 naming where it is. Entries of `groups`,
//!   `files`, `sources` and `skills`, and blocks, tools and MCP servers no
//!   agent uses, are listed as unmapped.
//! - **The agent** → an agent: `name` (made to fit the name pattern when it
//!   does not, and listed), `system` → its one instruction, `description` →
//!   `about`, `llm_config.model` (else the handle of `model` or
//!   `llm_config.handle` without its provider, `openai/gpt-4o-mini` →
//!   `gpt-4o-mini`) → `model`, `llm_config`'s `temperature`, `max_tokens`,
//!   `top_p`, `frequency_penalty` and `presence_penalty` → `default_settings`,
//!   `metadata` (`metadata_` in the old format) → `metadata`, with `tags` in
//!   it as `tags` (`letta_tags` when it has a `tags` of its own). Every other
//!   field of the agent with a value (`tool_rules`, `embedding_config`,
//!   `agent_type`, `timezone`, ...) and of `llm_config` is listed, with why;
//!   bookkeeping (ids, timestamps, Letta's version, project and template
//!   ids) is not.
//! - **Blocks** → memory blocks of the agent (edit op `import`): label (made
//!   to fit the label pattern, and unique), value, description, limit
//!   (raised to the value's length when the value is longer, within
//!   100,000), read-only flag, metadata.
//! - **Tools.** Letta's memory tools (`core_memory_append`,
//!   `core_memory_replace`, `memory_insert`, `memory_replace`,
//!   `memory_rethink`, `memory_finish_edits`, `memory`, `rethink_memory`,
//!   `finish_rethinking_memory`) → one built-in `memory` tool named `memory`;
//!   `conversation_search` (and `conversation_search_date`) → a
//!   `conversation_search` tool; `archival_memory_search` → a `file_search`
//!   tool of that name (over the agent's documents). `send_message` (the
//!   model's text is the answer here), `archival_memory_insert` and Letta's
//!   other built-ins are listed. Tools with a `json_schema` → `function`
//!   tools (name, description, `json_schema.parameters` without Letta's
//!   `request_heartbeat`), their `source_code` kept in the tool's metadata
//!   (`letta_source_code`, a prefix when it does not fit the metadata's
//!   bounds) and listed as not run here: the client runs function tools.
//!   Tools of an MCP server (`external_mcp`, naming their server in
//!   `metadata_.mcp` or a `mcp:<server>` tag) → one `mcp` tool per server
//!   with a `server_url` (its `allowed_tools` those the agent uses); stdio
//!   servers are listed.
//! - **Messages** → a new session of the agent (and of the given user),
//!   all of the agent's `messages` in the file's order (not only those in
//!   `in_context_message_ids`: nothing is dropped for being out of Letta's
//!   context window; the session's token budget decides what a turn sends),
//!   at most [`MAX_MESSAGES`]. Content part lists are flattened to their
//!   text; a user message in Letta's JSON wrapper (`{"type":
//!   "user_message", "message": ...}`) becomes its `message`; `send_message`
//!   calls become the assistant's text, and their results are dropped; when
//!   the agent answers through `send_message`, an assistant message's own
//!   text is its inner monologue, kept in its metadata (`letta_reasoning`),
//!   as are `reasoning` parts. The system message that holds the agent's
//!   system prompt is not imported (turns here build theirs from the
//!   instructions and blocks). Calls with no result in the file, results of
//!   no call, and other roles are listed.
//!
//! A file written by this server's export carries, under the key
//! `agent_platform` of an agent's `metadata` and of a tool's or an MCP
//! server's `metadata_`, what Letta's fields cannot hold exactly (the list of
//! instructions, every chat setting, the metadata, a tool's whole
//! definition); import prefers it, so that export then import gives the same
//! agent back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::api::error::{Issue, LocPart};
use crate::api::types::{
    BLOCK_LABEL_PATTERN, CreateAgentRequest, CreateBlockRequest, CreateMessageRequest, CreateToolRequest,
    JsonObject, MAX_BLOCK_LIMIT, MAX_BLOCKS_PER_OWNER, NAME_PATTERN, TOOL_NAME_PATTERN, ToolType, Unmapped,
    metadata_violation,
};
use crate::api::validate::{Check, Issues, Source, validate_value};

/// The most messages imported per agent; those after are listed.
pub const MAX_MESSAGES: usize = 10_000;
/// The key of this server's own fields in an exported file's metadata.
pub const EXTENSION: &str = "agent_platform";
/// Letta's tools that edit memory blocks: the built-in `memory` tool here.
pub const LETTA_MEMORY_TOOLS: &[&str] = &[
    "core_memory_append",
    "core_memory_replace",
    "memory_insert",
    "memory_replace",
    "memory_rethink",
    "memory_finish_edits",
    "memory",
    "rethink_memory",
    "finish_rethinking_memory",
];
/// The most bytes of a message's inner monologue kept in its metadata.
const MAX_REASONING_BYTES: usize = 12_000;

/// What an Agent File makes: its agents, and what was not imported.
#[derive(Debug)]
pub struct Plan {
    pub agents: Vec<AgentPlan>,
    pub unmapped: Vec<Unmapped>,
}

/// One agent to make, with its blocks, tools and messages.
#[derive(Debug)]
pub struct AgentPlan {
    pub source_id: Option<String>,
    pub agent: CreateAgentRequest,
    pub blocks: Vec<CreateBlockRequest>,
    pub tools: Vec<CreateToolRequest>,
    pub messages: Vec<CreateMessageRequest>,
}

/// Where something is in the file.
#[derive(Clone, Debug, Default)]
struct At(Vec<LocPart>);

impl At {
    fn key(&self, k: &str) -> At {
        let mut v = self.0.clone();
        v.push(LocPart::Key(k.into()));
        At(v)
    }
    fn index(&self, i: usize) -> At {
        let mut v = self.0.clone();
        v.push(LocPart::Index(i));
        At(v)
    }
    /// As a JSON pointer (`/agents/0/tools`).
    fn pointer(&self) -> String {
        if self.0.is_empty() {
            return String::new();
        }
        self.0
            .iter()
            .map(|p| match p {
                LocPart::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
                LocPart::Index(i) => format!("/{i}"),
            })
            .collect()
    }
}

/// The problems (422) and the unmapped lines found so far.
struct Cx {
    issues: Issues,
    unmapped: Vec<Unmapped>,
}

impl Cx {
    fn unmapped(&mut self, at: &At, what: impl Into<String>, why: impl Into<String>) {
        self.unmapped.push(Unmapped { path: at.pointer(), what: what.into(), why: why.into() });
    }

    fn issue(&mut self, at: &At, kind: &str, msg: impl Into<String>) {
        self.issues.push(&at.0, kind, msg);
    }

    /// `obj[key]` as a string: `None` when absent or null, an issue when not a string.
    fn str<'a>(&mut self, obj: &'a JsonObject, key: &str, at: &At) -> Option<&'a str> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                self.issue(&at.key(key), "string_type", format!("`{key}` should be a string"));
                None
            }
        }
    }

    /// `obj[key]` as an array: empty when absent or null, an issue when not an array.
    fn array<'a>(&mut self, obj: &'a JsonObject, key: &str, at: &At) -> &'a [Value] {
        match obj.get(key) {
            None | Some(Value::Null) => &[],
            Some(Value::Array(a)) => a,
            Some(_) => {
                self.issue(&at.key(key), "list_type", format!("`{key}` should be a list"));
                &[]
            }
        }
    }

    /// `obj[key]` as an object: `None` when absent or null, an issue when not an object.
    fn object<'a>(&mut self, obj: &'a JsonObject, key: &str, at: &At) -> Option<&'a JsonObject> {
        match obj.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Object(o)) => Some(o),
            Some(_) => {
                self.issue(&at.key(key), "dict_type", format!("`{key}` should be an object"));
                None
            }
        }
    }

    /// The elements of `obj[key]` that are objects, with where they are (an
    /// issue for each that is not).
    fn objects<'a>(&mut self, obj: &'a JsonObject, key: &str, at: &At) -> Vec<(At, &'a JsonObject)> {
        let list = self.array(obj, key, at);
        let at = at.key(key);
        let mut out = Vec::new();
        for (i, v) in list.iter().enumerate() {
            match v {
                Value::Object(o) => out.push((at.index(i), o)),
                _ => self.issue(&at.index(i), "dict_type", format!("each of `{key}` should be an object")),
            }
        }
        out
    }
}

/// Whether a value says something: not null, false, `""`, `[]` nor `{}`.
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        _ => true,
    }
}

fn compact(v: &Value, max: usize) -> String {
    let s = v.to_string();
    if s.len() <= max { s } else { format!("{}…", cut(&s, max)) }
}

/// The longest prefix of `s` of at most `max` bytes (on a character boundary).
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The first `max` characters of `s`.
fn first_chars(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

fn regex(pattern: &'static str, cell: &'static OnceLock<regex::Regex>) -> &'static regex::Regex {
    cell.get_or_init(|| regex::Regex::new(pattern).expect("the contract's patterns compile"))
}

fn name_ok(s: &str) -> bool {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    s.chars().count() <= 120 && regex(NAME_PATTERN, &RE).is_match(s)
}

fn label_ok(s: &str) -> bool {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    regex(BLOCK_LABEL_PATTERN, &RE).is_match(s)
}

fn tool_name_ok(s: &str) -> bool {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    (1..=40).contains(&s.len()) && regex(TOOL_NAME_PATTERN, &RE).is_match(s)
}

/// `raw` made to fit `ok`: characters other than letters, digits, `_` and
/// `-` become `_`, leading characters that are not letters go, and it is cut
/// to `max` characters; `fallback` when nothing is left.
fn fit_name(raw: &str, max: usize, ascii: bool, ok: fn(&str) -> bool, fallback: &str) -> String {
    let keep = |c: char| {
        if ascii {
            c.is_ascii_alphanumeric() || c == '_'
        } else {
            c.is_alphanumeric() || c == '_' || c == ' '
        }
    };
    let mapped: String =
        raw.trim().chars().map(|c| if keep(c) || (c == '-' && !ascii) { c } else { '_' }).collect();
    let trimmed = mapped.trim_start_matches(|c: char| !c.is_alphabetic());
    let candidate = first_chars(trimmed, max).trim_end().to_owned();
    if ok(&candidate) { candidate } else { fallback.to_owned() }
}

/// Validates `value` as a `T` of the contract, the problems as one line.
fn as_request<T>(value: Value) -> Result<T, String>
where
    T: schemars::JsonSchema + DeserializeOwned + Check + 'static,
{
    validate_value::<T>(Source::Body, &value).map_err(|issues| {
        issues
            .iter()
            .map(|i| {
                let at: Vec<String> = i
                    .loc
                    .iter()
                    .skip(1)
                    .map(|p| match p {
                        LocPart::Key(k) => k.clone(),
                        LocPart::Index(n) => n.to_string(),
                    })
                    .collect();
                format!("{}: {}", at.join("."), i.msg)
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// Reads an Agent File (see the module docs); a 422's issues when it is not one.
pub fn plan(file: &JsonObject) -> Result<Plan, Vec<Issue>> {
    let mut cx = Cx { issues: Issues::new(Source::Body), unmapped: Vec::new() };
    let root = At::default();
    let mut agents = Vec::new();
    if file.contains_key("agents") {
        current_format(file, &root, &mut cx, &mut agents);
    } else if file.contains_key("name")
        && ["system", "llm_config", "core_memory", "memory"].iter().any(|k| file.contains_key(*k))
    {
        single_agent_format(file, &root, &mut cx, &mut agents);
    } else {
        cx.issue(
            &root,
            "value_error",
            "not a Letta Agent File: it has neither `agents` (the current format) nor the \
             single-agent format's `name` with `system`, `llm_config` or `core_memory`",
        );
    }
    if !cx.issues.is_empty() {
        return Err(cx.issues.into_vec());
    }
    Ok(Plan { agents, unmapped: cx.unmapped })
}

/// An MCP server of the file.
struct Server<'a> {
    at: At,
    id: Option<&'a str>,
    name: Option<&'a str>,
    obj: &'a JsonObject,
}

fn current_format(file: &JsonObject, root: &At, cx: &mut Cx, out: &mut Vec<AgentPlan>) {
    let agents = cx.objects(file, "agents", root);
    if agents.is_empty() && cx.issues.is_empty() {
        cx.issue(&root.key("agents"), "too_short", "an Agent File holds at least one agent");
    }
    let blocks = cx.objects(file, "blocks", root);
    let tools = cx.objects(file, "tools", root);
    let servers: Vec<Server> = cx
        .objects(file, "mcp_servers", root)
        .into_iter()
        .map(|(at, obj)| Server {
            id: obj.get("id").and_then(Value::as_str),
            name: obj.get("server_name").and_then(Value::as_str),
            at,
            obj,
        })
        .collect();
    let by_id = |list: &[(At, &JsonObject)]| -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for (i, (_, o)) in list.iter().enumerate() {
            if let Some(id) = o.get("id").and_then(Value::as_str) {
                m.entry(id.to_owned()).or_insert(i);
            }
        }
        m
    };
    let block_ids = by_id(&blocks);
    let tool_ids = by_id(&tools);
    let mut used_blocks = HashSet::new();
    let mut used_tools = HashSet::new();
    let mut used_servers = HashSet::new();
    for (at, a) in &agents {
        let mut own_blocks = Vec::new();
        for (j, id) in cx.array(a, "block_ids", at).iter().enumerate() {
            match id.as_str().and_then(|id| block_ids.get(id)) {
                Some(&k) => {
                    used_blocks.insert(k);
                    own_blocks.push(blocks[k].clone());
                }
                None => cx.issue(
                    &at.key("block_ids").index(j),
                    "value_error",
                    format!("{} names no block of the file's `blocks`", compact(id, 80)),
                ),
            }
        }
        own_blocks.extend(cx.objects(a, "memory_blocks", at));
        let mut own_tools = Vec::new();
        for (j, id) in cx.array(a, "tool_ids", at).iter().enumerate() {
            match id.as_str().and_then(|id| tool_ids.get(id)) {
                Some(&k) => {
                    used_tools.insert(k);
                    own_tools.push(tools[k].clone());
                }
                None => cx.issue(
                    &at.key("tool_ids").index(j),
                    "value_error",
                    format!("{} names no tool of the file's `tools`", compact(id, 80)),
                ),
            }
        }
        // `tools` of Letta's CreateAgent: tool names.
        for (j, name) in cx.array(a, "tools", at).iter().enumerate() {
            let found = tools.iter().position(|(_, t)| {
                name.as_str().is_some_and(|n| t.get("name").and_then(Value::as_str) == Some(n))
            });
            match found {
                Some(k) => {
                    if !own_tools.iter().any(|(p, _)| p.pointer() == tools[k].0.pointer()) {
                        used_tools.insert(k);
                        own_tools.push(tools[k].clone());
                    }
                }
                None => cx.unmapped(
                    &at.key("tools").index(j),
                    format!("tool {}", compact(name, 80)),
                    "names no tool of the file's `tools`",
                ),
            }
        }
        let agent_id = a.get("id").and_then(Value::as_str);
        if let Some(plan) = agent(a, at, agent_id, own_blocks, own_tools, &servers, &mut used_servers, cx) {
            out.push(plan);
        }
    }
    for (k, (at, b)) in blocks.iter().enumerate() {
        if !used_blocks.contains(&k) {
            let label = b.get("label").map(|l| compact(l, 80)).unwrap_or_default();
            cx.unmapped(at, format!("block {label}"), "no agent of the file uses it");
        }
    }
    for (k, (at, t)) in tools.iter().enumerate() {
        if !used_tools.contains(&k) {
            let name = t.get("name").map(|l| compact(l, 80)).unwrap_or_default();
            cx.unmapped(at, format!("tool {name}"), "no agent of the file uses it");
        }
    }
    for (k, s) in servers.iter().enumerate() {
        if !used_servers.contains(&k) {
            let name = s.name.unwrap_or("");
            cx.unmapped(&s.at, format!("MCP server {name:?}"), "no agent of the file uses its tools");
        }
    }
    let others = [
        ("groups", "group", "multi-agent groups have no counterpart here"),
        ("files", "file", "files are not imported: add documents to the agent through /api/agents/{id}/docs"),
        (
            "sources",
            "source",
            "sources are not imported: add documents to the agent through /api/agents/{id}/docs",
        ),
        ("skills", "skill", "skills have no counterpart here"),
    ];
    for (key, what, why) in others {
        for (i, v) in cx.array(file, key, root).iter().enumerate() {
            let name = v.get("name").or_else(|| v.get("file_name")).or_else(|| v.get("id"));
            let what = match name {
                Some(n) => format!("{what} {}", compact(n, 80)),
                None => what.to_owned(),
            };
            cx.unmapped(&root.key(key).index(i), what, why);
        }
    }
}

fn single_agent_format(file: &JsonObject, root: &At, cx: &mut Cx, out: &mut Vec<AgentPlan>) {
    let mut blocks = cx.objects(file, "core_memory", root);
    if let Some(memory) = cx.object(file, "memory", root) {
        blocks.extend(cx.objects(memory, "blocks", &root.key("memory")));
    }
    let tools = cx.objects(file, "tools", root);
    let mut used = HashSet::new();
    if let Some(plan) = agent(file, root, None, blocks, tools, &[], &mut used, cx) {
        out.push(plan);
    }
}

/// Agent fields read by [`agent`] or that are bookkeeping (not listed).
const AGENT_READ: &[&str] = &[
    "name",
    "system",
    "description",
    "llm_config",
    "model",
    "max_tokens",
    "metadata",
    "metadata_",
    "tags",
    "block_ids",
    "memory_blocks",
    "core_memory",
    "memory",
    "tool_ids",
    "tools",
    "messages",
    "in_context_message_ids",
    "in_context_message_indices",
    "message_ids",
    "id",
    "created_at",
    "updated_at",
    "version",
    "is_deleted",
    "created_by_id",
    "last_updated_by_id",
    "organization_id",
    "project_id",
    "project",
    "template_id",
    "base_template_id",
    "from_template",
    "template",
    "deployment_id",
    "entity_id",
    "hidden",
    "groups",
    "files",
    "sources",
    "mcp_servers",
    "skills",
];

/// Why an agent field with no counterpart here was not imported.
fn agent_field_why(key: &str) -> &'static str {
    match key {
        "agent_type" => "every agent here runs the same loop: the model calls tools until it answers",
        "tool_rules" => "tool rules have no counterpart here: the model chooses its tools and when to answer",
        "embedding_config" | "embedding" | "embedding_chunk_size" => {
            "the embedding model is the server's (models.embedding_model)"
        }
        "tool_exec_environment_variables" | "secrets" => {
            "not imported: keep secrets with /api/secrets and name them in tools' headers"
        }
        "source_ids" | "folder_ids" | "files_agents" => {
            "sources are not imported: add documents to the agent through /api/agents/{id}/docs"
        }
        "group_ids" | "multi_agent_group" | "identity_ids" | "identities" => "no counterpart here",
        "context_window_limit" => "a session's token budget (token_budget) bounds its context here",
        "message_buffer_autoclear" => "no counterpart here: a session keeps its messages",
        "enable_sleeptime" => "Letta's sleep-time agent has no counterpart here",
        _ => "no counterpart here",
    }
}

/// The model of a handle (`openai/gpt-4o-mini` → `gpt-4o-mini`).
fn model_of_handle(handle: &str) -> &str {
    handle.split_once('/').map_or(handle, |(_, m)| m)
}

#[allow(clippy::too_many_arguments)]
fn agent(
    a: &JsonObject,
    at: &At,
    agent_id: Option<&str>,
    blocks: Vec<(At, &JsonObject)>,
    tools: Vec<(At, &JsonObject)>,
    servers: &[Server],
    used_servers: &mut HashSet<usize>,
    cx: &mut Cx,
) -> Option<AgentPlan> {
    let before = cx.issues.len();
    let raw_name = cx.str(a, "name", at);
    let system = cx.str(a, "system", at).unwrap_or("");
    let description = cx.str(a, "description", at).unwrap_or("");
    let llm = cx.object(a, "llm_config", at);
    let top_model = cx.str(a, "model", at);
    let meta_key = if a.contains_key("metadata") { "metadata" } else { "metadata_" };
    let letta_meta = cx.object(a, meta_key, at);
    let tags = tags(a, at, cx);
    let messages_in = cx.objects(a, "messages", at);
    if cx.issues.len() > before {
        return None;
    }
    let ext = letta_meta.and_then(|m| m.get(EXTENSION)).and_then(Value::as_object);

    // Name.
    let name = match raw_name {
        Some(n) if name_ok(n) => n.to_owned(),
        Some(n) => {
            let fitted = fit_name(n, 120, false, name_ok, "Imported agent");
            cx.unmapped(
                &at.key("name"),
                format!("name {n:?}"),
                format!("imported as {fitted:?}: a name here starts with a letter and has letters, digits, spaces, `_` or `-`"),
            );
            fitted
        }
        None => {
            cx.unmapped(&at.key("name"), "name", "the agent has none: imported as \"Imported agent\"");
            "Imported agent".to_owned()
        }
    };

    // Model and settings.
    let llm_model = llm.and_then(|l| l.get("model")).and_then(Value::as_str).filter(|m| !m.is_empty());
    let llm_handle = llm.and_then(|l| l.get("handle")).and_then(Value::as_str);
    let model = llm_model
        .map(str::to_owned)
        .or_else(|| top_model.map(|h| model_of_handle(h).to_owned()))
        .or_else(|| llm_handle.map(|h| model_of_handle(h).to_owned()))
        .unwrap_or_default();
    if model.is_empty() {
        cx.unmapped(
            &at.key("llm_config"),
            "model",
            "the file names none: the agent uses the server's default model",
        );
    }
    let mut settings = Map::new();
    let ranges: [(&str, f64, f64); 5] = [
        ("temperature", 0.0, 2.0),
        ("top_p", 0.0, 1.0),
        ("frequency_penalty", -2.0, 2.0),
        ("presence_penalty", -2.0, 2.0),
        ("max_tokens", 1.0, f64::MAX),
    ];
    for (key, lo, hi) in ranges {
        let from_top = key == "max_tokens" && llm.and_then(|l| l.get(key)).is_none_or(Value::is_null);
        let (v, vat) = if from_top {
            (a.get(key), at.key(key))
        } else {
            (llm.and_then(|l| l.get(key)), at.key("llm_config").key(key))
        };
        let Some(v) = v.filter(|v| !v.is_null()) else { continue };
        match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) && (key != "max_tokens" || v.is_i64()) => {
                settings.insert(key.into(), v.clone());
            }
            _ => cx.unmapped(
                &vat,
                format!("{key} {}", compact(v, 40)),
                format!("out of range here ({lo} to {hi})"),
            ),
        }
    }
    if let Some(l) = llm {
        let handled = [
            "model",
            "handle",
            "temperature",
            "top_p",
            "frequency_penalty",
            "presence_penalty",
            "max_tokens",
        ];
        let rest: Vec<String> = l
            .iter()
            .filter(|(k, v)| !handled.contains(&k.as_str()) && is_set(v))
            .map(|(k, v)| format!("{k}={}", compact(v, 60)))
            .collect();
        if !rest.is_empty() {
            cx.unmapped(
                &at.key("llm_config"),
                format!("llm_config: {}", rest.join(", ")),
                "the server's model provider configuration decides these",
            );
        }
    }
    let mut default_settings = (!settings.is_empty()).then_some(Value::Object(settings));

    // Instructions and metadata.
    let mut instructions = if system.is_empty() { json!([]) } else { json!([system]) };
    let mut metadata = Map::new();
    if let Some(m) = letta_meta {
        metadata.extend(m.iter().filter(|(k, _)| *k != EXTENSION).map(|(k, v)| (k.clone(), v.clone())));
    }
    if !tags.is_empty() {
        let key = if metadata.contains_key("tags") { "letta_tags" } else { "tags" };
        metadata.insert(key.into(), json!(tags));
    }
    let mut metadata = (!metadata.is_empty()).then_some(Value::Object(metadata));
    if let Some(ext) = ext {
        // This server's export: the exact instructions (when `system` is still
        // what they join to), settings and metadata.
        if let Some(list) = ext.get("instructions").and_then(Value::as_array)
            && list.iter().all(Value::is_string)
            && list.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n\n") == system
        {
            instructions = Value::Array(list.clone());
        }
        if let Some(s) = ext.get("default_settings") {
            default_settings = Some(s.clone()).filter(|s| !s.is_null());
        }
        if let Some(m) = ext.get("metadata") {
            metadata = Some(m.clone()).filter(|m| !m.is_null());
        }
    }
    if let Some(Value::Object(m)) = &metadata
        && let Some((_, why)) = metadata_violation(m)
    {
        cx.unmapped(&at.key(meta_key), "metadata", format!("not imported: {why}"));
        metadata = None;
    }
    let about = if description.chars().count() > 16_000 {
        cx.unmapped(&at.key("description"), "description", "cut to its first 16,000 characters");
        first_chars(description, 16_000)
    } else {
        description.to_owned()
    };
    let req = json!({
        "name": name,
        "about": about,
        "model": first_chars(&model, 255),
        "instructions": instructions,
        "default_settings": default_settings,
        "metadata": metadata,
    });
    let agent_req = match validate_value::<CreateAgentRequest>(Source::Body, &req) {
        Ok(r) => r,
        Err(issues) => {
            for i in issues {
                let field = match i.loc.get(1) {
                    Some(LocPart::Key(k)) => match k.as_str() {
                        "about" => "description",
                        "model" | "default_settings" => "llm_config",
                        "instructions" => "system",
                        "metadata" => meta_key,
                        other => other,
                    }
                    .to_owned(),
                    _ => String::new(),
                };
                let loc = if field.is_empty() { at.clone() } else { at.key(&field) };
                cx.issue(&loc, &i.kind, i.msg);
            }
            return None;
        }
    };

    // Fields with no counterpart.
    for (k, v) in a {
        if !AGENT_READ.contains(&k.as_str()) && is_set(v) {
            cx.unmapped(&at.key(k), format!("{k}: {}", compact(v, 80)), agent_field_why(k));
        }
    }

    let blocks = agent_blocks(blocks, cx);
    let (tools, sends) = agent_tools(tools, agent_id, servers, used_servers, cx);
    let answers_by_send_message = sends || messages_in.iter().any(|(_, m)| calls_send_message(m));
    if answers_by_send_message && system.contains("send_message") {
        cx.unmapped(
            &at.key("system"),
            "the system prompt's mentions of send_message",
            "kept as written, but send_message is not offered here (the model's text is the answer): \
             edit the agent's instructions to match",
        );
    }
    let messages = messages(&messages_in, at, system, answers_by_send_message, cx);
    Some(AgentPlan { source_id: agent_id.map(str::to_owned), agent: agent_req, blocks, tools, messages })
}

/// The agent's tags: strings, or (old format) `{"tag": ...}` objects.
fn tags(a: &JsonObject, at: &At, cx: &mut Cx) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in cx.array(a, "tags", at).iter().enumerate() {
        match t {
            Value::String(s) => out.push(s.clone()),
            Value::Object(o) if o.get("tag").is_some_and(Value::is_string) => {
                out.push(o["tag"].as_str().unwrap_or_default().to_owned())
            }
            _ => cx.issue(&at.key("tags").index(i), "string_type", "a tag should be a string"),
        }
    }
    out
}

fn agent_blocks(blocks: Vec<(At, &JsonObject)>, cx: &mut Cx) -> Vec<CreateBlockRequest> {
    let mut out: Vec<CreateBlockRequest> = Vec::new();
    for (at, b) in blocks {
        if out.len() >= MAX_BLOCKS_PER_OWNER {
            cx.unmapped(&at, "block", format!("an agent here has at most {MAX_BLOCKS_PER_OWNER} blocks"));
            continue;
        }
        let raw_label = b.get("label").and_then(Value::as_str).unwrap_or("");
        let mut label = if label_ok(raw_label) {
            raw_label.to_owned()
        } else {
            fit_name(raw_label, 64, true, label_ok, "block")
        };
        let base = label.clone();
        let mut n = 2;
        while out.iter().any(|o| o.label == label) {
            label = format!("{}_{n}", first_chars(&base, 60));
            n += 1;
        }
        if label != raw_label {
            cx.unmapped(
                &at.key("label"),
                format!("block label {raw_label:?}"),
                format!(
                    "imported as {label:?}: a label here is unique and starts with a letter, then letters, digits, `_`, `-` or `.` (at most 64)"
                ),
            );
        }
        let mut value = b.get("value").and_then(Value::as_str).unwrap_or("").to_owned();
        let chars = value.chars().count() as i64;
        if chars > MAX_BLOCK_LIMIT {
            cx.unmapped(
                &at.key("value"),
                format!("block {label:?}'s value"),
                format!("cut to its first {MAX_BLOCK_LIMIT} characters, the most a block holds here"),
            );
            value = first_chars(&value, MAX_BLOCK_LIMIT as usize);
        }
        let chars = value.chars().count() as i64;
        let given = b.get("limit").and_then(Value::as_i64);
        let limit =
            given.unwrap_or(crate::api::types::DEFAULT_BLOCK_LIMIT).max(chars).clamp(1, MAX_BLOCK_LIMIT);
        if given.is_some_and(|g| g != limit) {
            cx.unmapped(
                &at.key("limit"),
                format!("block {label:?}'s limit {}", given.unwrap_or_default()),
                format!("imported as {limit}: a limit here is 1 to {MAX_BLOCK_LIMIT} and holds the value"),
            );
        }
        let mut description = b.get("description").and_then(Value::as_str).unwrap_or("").to_owned();
        if description.chars().count() > 2000 {
            cx.unmapped(
                &at.key("description"),
                format!("block {label:?}'s description"),
                "cut to 2,000 characters",
            );
            description = first_chars(&description, 2000);
        }
        let meta_key = if b.contains_key("metadata") { "metadata" } else { "metadata_" };
        let mut metadata = b.get(meta_key).filter(|m| m.is_object()).cloned();
        if let Some(Value::Object(m)) = &metadata
            && let Some((_, why)) = metadata_violation(m)
        {
            cx.unmapped(
                &at.key(meta_key),
                format!("block {label:?}'s metadata"),
                format!("not imported: {why}"),
            );
            metadata = None;
        }
        let req = json!({
            "label": label,
            "value": value,
            "description": description,
            "limit": limit,
            "read_only": b.get("read_only").and_then(Value::as_bool).unwrap_or(false),
            "metadata": metadata,
        });
        match as_request::<CreateBlockRequest>(req) {
            Ok(r) => out.push(r),
            Err(why) => cx.unmapped(&at, format!("block {label:?}"), format!("not imported: {why}")),
        }
    }
    out
}

/// What a Letta tool is here.
enum LettaTool {
    /// Exactly this tool (from this server's export).
    Exact(Value),
    Memory,
    ConversationSearch,
    FileSearch,
    Mcp(Option<usize>),
    Function,
    Skip(String),
}

fn tool_kind(t: &JsonObject, name: &str, servers: &[Server]) -> LettaTool {
    let meta = t.get("metadata_").and_then(Value::as_object);
    if let Some(exact) = meta.and_then(|m| m.get(EXTENSION)).and_then(|e| e.get("tool")) {
        return LettaTool::Exact(exact.clone());
    }
    let tool_type = t.get("tool_type").and_then(Value::as_str).unwrap_or("");
    if LETTA_MEMORY_TOOLS.contains(&name) {
        return LettaTool::Memory;
    }
    match name {
        "conversation_search" | "conversation_search_date" => return LettaTool::ConversationSearch,
        "archival_memory_search" => return LettaTool::FileSearch,
        "send_message" => return LettaTool::Skip("not needed: the model's text is the answer".into()),
        "archival_memory_insert" => {
            return LettaTool::Skip(
                "no counterpart: the model does not add documents here; add them through /api/agents/{id}/docs".into(),
            );
        }
        _ => {}
    }
    let mcp = meta.and_then(|m| m.get("mcp")).and_then(Value::as_object);
    let tag_server = t
        .get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|tag| tag.strip_prefix("mcp:"));
    if tool_type == "external_mcp" || mcp.is_some() || tag_server.is_some() {
        let server_id = mcp.and_then(|m| m.get("server_id")).and_then(Value::as_str);
        let server_name = mcp.and_then(|m| m.get("server_name")).and_then(Value::as_str).or(tag_server);
        let found = servers
            .iter()
            .position(|s| server_id.is_some() && s.id == server_id)
            .or_else(|| servers.iter().position(|s| server_name.is_some() && s.name == server_name));
        return LettaTool::Mcp(found);
    }
    if tool_type.starts_with("letta_") {
        return LettaTool::Skip(format!("a Letta built-in ({tool_type}) with no counterpart here"));
    }
    if t.get("json_schema").is_some_and(Value::is_object) {
        return LettaTool::Function;
    }
    LettaTool::Skip("it has no json_schema: its parameters are unknown".into())
}

/// The agent's tools, and whether it has `send_message`.
fn agent_tools(
    tools: Vec<(At, &JsonObject)>,
    agent_id: Option<&str>,
    servers: &[Server],
    used_servers: &mut HashSet<usize>,
    cx: &mut Cx,
) -> (Vec<CreateToolRequest>, bool) {
    let mut out: Vec<CreateToolRequest> = Vec::new();
    let mut sends = false;
    // Per MCP server: where its first tool is, and the names the agent uses.
    let mut mcp: BTreeMap<usize, (At, Vec<String>)> = BTreeMap::new();
    let push = |out: &mut Vec<CreateToolRequest>, cx: &mut Cx, at: &At, what: String, req: Value| {
        match as_request::<CreateToolRequest>(req) {
            Ok(r) => match out.iter().find(|o| o.name == r.name) {
                None => out.push(r),
                // The same built-in again: Letta's several memory tools are one here.
                Some(o) if o.kind == r.kind && o.kind != ToolType::Function && o.kind != ToolType::Mcp => {}
                Some(_) => cx.unmapped(at, what, format!("a tool named {:?} is imported already", r.name)),
            },
            Err(why) => cx.unmapped(at, what, format!("not imported: {why}")),
        }
    };
    for (at, t) in tools {
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .or_else(|| t.get("json_schema").and_then(|s| s.get("name")).and_then(Value::as_str))
            .unwrap_or("");
        let what = format!("tool {name:?}");
        if name == "send_message" {
            sends = true;
        }
        match tool_kind(t, name, servers) {
            LettaTool::Exact(req) => push(&mut out, cx, &at, what, req),
            LettaTool::Memory => push(&mut out, cx, &at, what, json!({"name": "memory", "type": "memory"})),
            LettaTool::ConversationSearch => push(
                &mut out,
                cx,
                &at,
                what,
                json!({"name": "conversation_search", "type": "conversation_search"}),
            ),
            LettaTool::FileSearch => push(
                &mut out,
                cx,
                &at,
                what,
                json!({"name": "archival_memory_search", "type": "file_search"}),
            ),
            LettaTool::Skip(why) => cx.unmapped(&at, what, why),
            LettaTool::Mcp(None) => {
                cx.unmapped(&at, what, "an MCP tool of a server the file's `mcp_servers` does not hold")
            }
            LettaTool::Mcp(Some(k)) => {
                used_servers.insert(k);
                mcp.entry(k).or_insert_with(|| (at.clone(), Vec::new())).1.push(name.to_owned());
            }
            LettaTool::Function => {
                let (req, notes) = function_tool(t, name);
                for (why_at, why) in notes {
                    cx.unmapped(&at.key(why_at), what.clone(), why);
                }
                push(&mut out, cx, &at, what, req);
            }
        }
    }
    // Servers written by this server's export name their agent.
    for (k, s) in servers.iter().enumerate() {
        let ext = s.obj.get("metadata_").and_then(|m| m.get(EXTENSION));
        if let Some(ext) = ext
            && agent_id.is_some()
            && ext.get("agent").and_then(Value::as_str) == agent_id
            && let Some(tool) = ext.get("tool")
        {
            used_servers.insert(k);
            mcp.remove(&k);
            push(&mut out, cx, &s.at, format!("MCP server {:?}", s.name.unwrap_or("")), tool.clone());
        }
    }
    for (k, (tool_at, names)) in mcp {
        let s = &servers[k];
        let server_name = s.name.unwrap_or("mcp");
        let what = format!("MCP server {server_name:?}");
        let url = s.obj.get("server_url").and_then(Value::as_str).filter(|u| !u.is_empty());
        let server_type = s.obj.get("server_type").and_then(Value::as_str).unwrap_or("");
        let Some(url) = url.filter(|_| server_type != "stdio") else {
            cx.unmapped(
                &s.at,
                format!("{what} (tools {})", names.join(", ")),
                "a stdio server (a command Letta ran on its own host): only servers reached over HTTP are used here",
            );
            continue;
        };
        if server_type == "sse" {
            cx.unmapped(
                &s.at.key("server_type"),
                what.clone(),
                "Letta reached it over SSE; here it is called over Streamable HTTP, which it must also speak",
            );
        }
        let name = if tool_name_ok(server_name) {
            server_name.to_owned()
        } else {
            fit_name(server_name, 40, true, tool_name_ok, "mcp")
        };
        let req = json!({
            "name": name,
            "type": "mcp",
            "mcp": {"server_url": url, "allowed_tools": names},
        });
        let before = out.len();
        push(&mut out, cx, &tool_at, what.clone(), req);
        if out.len() > before && name != server_name {
            cx.unmapped(
                &s.at.key("server_name"),
                what,
                format!("its tool is named {name:?} (a tool name's pattern)"),
            );
        }
    }
    (out, sends)
}

/// A `function` tool of a Letta tool with a `json_schema`, and notes on what
/// of it is not kept as it was (the field, and why).
fn function_tool(t: &JsonObject, name: &str) -> (Value, Vec<(&'static str, String)>) {
    let mut notes = Vec::new();
    let tool_name =
        if tool_name_ok(name) { name.to_owned() } else { fit_name(name, 40, true, tool_name_ok, "tool") };
    if tool_name != name {
        notes.push((
            "name",
            format!("imported as {tool_name:?}: a tool name here has at most 40 letters, digits or `_`"),
        ));
    }
    let schema = t.get("json_schema").and_then(Value::as_object);
    let description = t
        .get("description")
        .and_then(Value::as_str)
        .or_else(|| schema.and_then(|s| s.get("description")).and_then(Value::as_str))
        .unwrap_or("");
    let mut parameters =
        schema.and_then(|s| s.get("parameters")).and_then(Value::as_object).cloned().unwrap_or_else(|| {
            json!({"type": "object", "properties": {}}).as_object().cloned().unwrap_or_default()
        });
    // Letta adds `request_heartbeat` to every tool's parameters: its own
    // loop's flag, not an argument of the tool.
    if let Some(Value::Object(props)) = parameters.get_mut("properties") {
        props.remove("request_heartbeat");
    }
    if let Some(Value::Array(req)) = parameters.get_mut("required") {
        req.retain(|r| r != "request_heartbeat");
    }
    let mut metadata = Map::new();
    for (from, to) in [("tool_type", "letta_tool_type"), ("source_type", "letta_source_type")] {
        if let Some(v) = t.get(from).filter(|v| is_set(v)) {
            metadata.insert(to.into(), v.clone());
        }
    }
    if let Some(reqs) = t.get("pip_requirements").filter(|v| is_set(v)) {
        metadata.insert("letta_pip_requirements".into(), reqs.clone());
    }
    if let Some(m) = t.get("metadata_").and_then(Value::as_object).filter(|m| !m.is_empty()) {
        metadata.insert("letta_metadata".into(), Value::Object(m.clone()));
        if metadata_violation(&metadata).is_some() {
            metadata.remove("letta_metadata");
            notes.push(("metadata_", "not kept: over the metadata's bounds".into()));
        }
    }
    let source = t.get("source_code").and_then(Value::as_str).filter(|s| !s.trim().is_empty());
    if let Some(src) = source {
        let lang = t.get("source_type").and_then(Value::as_str).unwrap_or("python");
        let mut kept = src.len();
        loop {
            metadata.insert("letta_source_code".into(), Value::String(cut(src, kept).to_owned()));
            if metadata_violation(&metadata).is_none() || kept == 0 {
                break;
            }
            kept = kept.saturating_sub(kept / 8 + 64);
        }
        let kept = cut(src, kept).len();
        let how = if kept == src.len() {
            "kept in the tool's metadata (letta_source_code)".to_owned()
        } else {
            metadata.insert("letta_source_code_truncated".into(), Value::Bool(true));
            format!("its first {kept} of {} bytes kept in the tool's metadata (letta_source_code)", src.len())
        };
        notes.push((
            "source_code",
            format!("its {lang} source is {how} and is not run here: a function tool's calls go to the client, which runs them"),
        ));
    } else {
        notes.push(("json_schema", "a function tool: its calls go to the client, which runs them".into()));
    }
    let req = json!({
        "name": tool_name,
        "type": "function",
        "description": first_chars(description, 16_000),
        "function": {"parameters": parameters},
        "metadata": (!metadata.is_empty()).then_some(Value::Object(metadata)),
    });
    (req, notes)
}

fn calls_send_message(m: &JsonObject) -> bool {
    m.get("tool_calls").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("function").and_then(|f| f.get("name")).and_then(Value::as_str) == Some("send_message")
    })
}

/// A message's text and reasoning: `content` as a string or a list of parts
/// (Letta's `text` when there is no `content`), and how many parts of other
/// kinds it had.
fn content_of(m: &JsonObject) -> (String, String, usize) {
    let mut text = Vec::new();
    let mut reasoning = Vec::new();
    let mut other = 0;
    match m.get("content").or_else(|| m.get("text")) {
        Some(Value::String(s)) => text.push(s.clone()),
        Some(Value::Array(parts)) => {
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                match (
                    kind,
                    p.get("text").and_then(Value::as_str),
                    p.get("reasoning").and_then(Value::as_str),
                ) {
                    ("text", Some(t), _) => text.push(t.to_owned()),
                    ("reasoning", _, Some(r)) => reasoning.push(r.to_owned()),
                    _ => other += 1,
                }
            }
        }
        _ => {}
    }
    (text.join("\n"), reasoning.join("\n"), other)
}

/// Letta's wrapper of what a user typed: `{"type": "user_message", "message": ...}`.
fn unwrap_user_message(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    (v.get("type")?.as_str()? == "user_message").then(|| v.get("message")?.as_str().map(str::to_owned))?
}

/// What of the messages was not imported, counted for one line each.
#[derive(Default)]
struct Dropped {
    send_message_results: usize,
    thoughts_kept: usize,
    thoughts_only: usize,
    unanswered_calls: usize,
    orphan_results: usize,
    other_parts: usize,
    other_roles: BTreeMap<String, usize>,
}

fn messages(
    list: &[(At, &JsonObject)],
    agent_at: &At,
    system: &str,
    answers_by_send_message: bool,
    cx: &mut Cx,
) -> Vec<CreateMessageRequest> {
    let answered: HashSet<&str> = list
        .iter()
        .filter(|(_, m)| matches!(m.get("role").and_then(Value::as_str), Some("tool" | "function")))
        .filter_map(|(_, m)| m.get("tool_call_id").and_then(Value::as_str))
        .collect();
    let mut kept_calls: HashSet<String> = HashSet::new();
    let mut dropped_calls: HashSet<String> = HashSet::new();
    let mut out = Vec::new();
    let mut d = Dropped::default();
    let at = agent_at.key("messages");
    for (i, (m_at, m)) in list.iter().enumerate() {
        if out.len() >= MAX_MESSAGES {
            cx.unmapped(
                &at.index(i),
                format!("messages {i} to {}", list.len() - 1),
                format!("at most {MAX_MESSAGES} messages of an agent are imported"),
            );
            break;
        }
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let (text, mut reasoning, other) = content_of(m);
        d.other_parts += other;
        let name =
            m.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).map(|n| first_chars(n, 255));
        let mut req = Map::new();
        match role {
            "system" => {
                if !system.trim().is_empty() && text.contains(system.trim()) {
                    cx.unmapped(
                        m_at,
                        "the system message with the agent's system prompt",
                        "not needed: each turn here builds its system message from the instructions and blocks",
                    );
                    continue;
                }
                req.insert("role".into(), json!("system"));
                req.insert("content".into(), json!(text));
            }
            "user" => {
                let text = unwrap_user_message(&text).unwrap_or(text);
                req.insert("role".into(), json!("user"));
                req.insert("content".into(), json!(text));
                if let Some(n) = &name {
                    req.insert("name".into(), json!(n));
                }
            }
            "assistant" => {
                let mut said = Vec::new();
                let mut calls = Vec::new();
                for c in m.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
                    let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                    let f = c.get("function");
                    let fname = f.and_then(|f| f.get("name")).and_then(Value::as_str).unwrap_or("");
                    let args = match f.and_then(|f| f.get("arguments")) {
                        Some(Value::String(s)) => s.clone(),
                        Some(v) if !v.is_null() => v.to_string(),
                        _ => "{}".into(),
                    };
                    if fname == "send_message" {
                        let msg = serde_json::from_str::<Value>(&args)
                            .ok()
                            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned));
                        said.push(msg.unwrap_or(args));
                        dropped_calls.insert(id.to_owned());
                    } else if !id.is_empty() && answered.contains(id) {
                        kept_calls.insert(id.to_owned());
                        calls.push(json!({"id": id, "type": "function", "function": {"name": fname, "arguments": args}}));
                    } else {
                        d.unanswered_calls += 1;
                        dropped_calls.insert(id.to_owned());
                    }
                }
                let content = if answers_by_send_message {
                    if !text.is_empty() {
                        reasoning = if reasoning.is_empty() { text } else { format!("{text}\n{reasoning}") };
                    }
                    said.join("\n\n")
                } else {
                    let mut parts = vec![text];
                    parts.extend(said);
                    parts.retain(|p| !p.is_empty());
                    parts.join("\n\n")
                };
                if content.is_empty() && calls.is_empty() {
                    if !reasoning.is_empty() {
                        d.thoughts_only += 1;
                    }
                    continue;
                }
                req.insert("role".into(), json!("assistant"));
                req.insert("content".into(), json!(content));
                if !calls.is_empty() {
                    req.insert("tool_calls".into(), Value::Array(calls));
                }
            }
            "tool" | "function" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                if dropped_calls.contains(id) {
                    if name.as_deref() == Some("send_message") || id.is_empty() {
                        d.send_message_results += 1;
                    }
                    continue;
                }
                if !kept_calls.contains(id) {
                    d.orphan_results += 1;
                    continue;
                }
                let text = if text.is_empty() {
                    m.get("tool_returns")
                        .and_then(Value::as_array)
                        .and_then(|r| r.first())
                        .and_then(|r| r.get("func_response"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                } else {
                    text
                };
                req.insert("role".into(), json!("tool"));
                req.insert("content".into(), json!(text));
                req.insert("tool_call_id".into(), json!(id));
                if let Some(n) = &name {
                    req.insert("name".into(), json!(n));
                }
            }
            other => {
                *d.other_roles.entry(other.to_owned()).or_default() += 1;
                continue;
            }
        }
        if !reasoning.is_empty() {
            d.thoughts_kept += 1;
            let mut kept = cut(&reasoning, MAX_REASONING_BYTES).to_owned();
            let mut meta = Map::new();
            loop {
                meta.insert("letta_reasoning".into(), json!(kept));
                if metadata_violation(&meta).is_none() || kept.is_empty() {
                    break;
                }
                kept = cut(&kept, kept.len() / 2).to_owned();
            }
            req.insert("metadata".into(), Value::Object(meta));
        }
        match as_request::<CreateMessageRequest>(Value::Object(req)) {
            Ok(r) => out.push(r),
            Err(why) => cx.unmapped(m_at, format!("a {role} message"), format!("not imported: {why}")),
        }
    }
    let lines = [
        (
            d.send_message_results,
            "results of send_message",
            "not needed: the assistant's text is the answer here",
        ),
        (
            d.thoughts_kept,
            "assistant messages' inner monologue (reasoning)",
            "kept in each message's metadata (letta_reasoning); the model is not sent it",
        ),
        (
            d.thoughts_only,
            "assistant messages of inner monologue alone",
            "not imported: they say nothing to the user and call nothing",
        ),
        (
            d.unanswered_calls,
            "tool calls with no result in the file",
            "not imported: a call is kept with its result",
        ),
        (
            d.orphan_results,
            "tool results of no call in the file",
            "not imported: a result is kept with its call",
        ),
        (d.other_parts, "content parts other than text (images, ...)", "not imported: only text parts are"),
    ];
    for (n, what, why) in lines {
        if n > 0 {
            cx.unmapped(&at, format!("{n} {what}"), why);
        }
    }
    for (role, n) in d.other_roles {
        cx.unmapped(&at, format!("{n} messages of role {role:?}"), "no counterpart here");
    }
    out
}
