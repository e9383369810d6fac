//! Writing an agent as an Agent File, in Letta's current format.
//!
//! The file holds one agent (`agent-0`), its blocks (`block-0`, ...), its
//! tools (`tool-0`, ...) and MCP servers (`mcp_server-0`, ...), and the
//! messages given (`message-0`, ...), as Letta writes them:
//!
//! - the agent's instructions joined by blank lines as `system`, `about` as
//!   `description`, the model and chat settings in `llm_config`, the
//!   metadata's `tags` (a list of strings) as `tags`;
//! - a `function` tool as a `custom` tool with its `json_schema` (and the
//!   Python `source_code` an import kept in its metadata); the built-in
//!   `memory` tool as Letta's `memory_insert`, `memory_replace` and
//!   `memory_rethink`; `conversation_search` as Letta's
//!   `conversation_search`; `file_search` as Letta's
//!   `archival_memory_search`; an `mcp` tool as an entry of `mcp_servers`
//!   (with an `external_mcp` tool for each of its `allowed_tools`); an
//!   `api_call` tool, which Letta has no counterpart of, as a `custom` tool
//!   without source;
//! - messages with their content as one text part (and an imported
//!   message's `letta_reasoning` as a `reasoning` part before it), tool calls
//!   and `tool_call_id` as they are. Messages' metadata is not written.
//!
//! Besides, the agent's `metadata` and each tool's and MCP server's
//! `metadata_` carry under `agent_platform` what Letta's fields cannot hold
//! exactly (the list of instructions, every chat setting, the agent's
//! metadata, each tool's whole definition), which import prefers: export then
//! import gives the same agent back. Tools' HTTP headers (of `api_call` and
//! `mcp` tools) are not written, as they may hold credentials.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::parse::EXTENSION;
use crate::api::types::{Agent, Block, JsonObject, Message, Role, Tool, ToolType};

fn text_param(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

/// Letta's tools that stand for a built-in tool here: (name, tool_type,
/// description, parameters, required).
fn letta_builtins(
    kind: ToolType,
) -> Vec<(&'static str, &'static str, &'static str, Value, Vec<&'static str>)> {
    match kind {
        ToolType::Memory => vec![
            (
                "memory_insert",
                "letta_sleeptime_core",
                "Insert text at a line of a memory block (at its end by default).",
                json!({
                    "label": text_param("The label of the block."),
                    "new_str": text_param("The text to insert."),
                    "insert_line": {"type": "integer", "description": "The line to insert after (0 for the beginning, -1 for the end)."},
                }),
                vec!["label", "new_str"],
            ),
            (
                "memory_replace",
                "letta_sleeptime_core",
                "Replace a passage of a memory block with new text.",
                json!({
                    "label": text_param("The label of the block."),
                    "old_str": text_param("The passage to replace, exactly as it is."),
                    "new_str": text_param("The text to put in its place."),
                }),
                vec!["label", "old_str", "new_str"],
            ),
            (
                "memory_rethink",
                "letta_sleeptime_core",
                "Rewrite a memory block whole.",
                json!({
                    "label": text_param("The label of the block."),
                    "new_memory": text_param("The block's new value."),
                }),
                vec!["label", "new_memory"],
            ),
        ],
        ToolType::ConversationSearch => vec![(
            "conversation_search",
            "letta_core",
            "Search prior conversation history.",
            json!({
                "query": text_param("What to search for."),
                "roles": {"type": "array", "items": {"type": "string", "enum": ["assistant", "user", "tool"]}},
                "limit": {"type": "integer"},
                "start_date": text_param("ISO 8601 date or date-time, inclusive."),
                "end_date": text_param("ISO 8601 date or date-time, inclusive."),
            }),
            vec!["query"],
        )],
        ToolType::FileSearch => vec![(
            "archival_memory_search",
            "letta_core",
            "Search archival memory (the agent's documents).",
            json!({"query": text_param("What to search for."), "top_k": {"type": "integer"}}),
            vec!["query"],
        )],
        _ => Vec::new(),
    }
}

/// A tool's whole definition, as `POST /api/agents/{id}/tools` takes it
/// (headers left out).
fn definition(tool: &Tool) -> Value {
    let mut def = json!({
        "name": tool.name,
        "type": tool.kind,
        "description": tool.description,
        "metadata": tool.metadata,
    });
    let obj = def.as_object_mut().expect("an object");
    if let Some(f) = &tool.function {
        obj.insert("function".into(), json!(f));
    }
    if let Some(a) = &tool.api_call {
        let mut a = a.clone();
        a.headers = None;
        obj.insert("api_call".into(), json!(a));
    }
    if let Some(m) = &tool.mcp {
        let mut m = m.clone();
        m.headers = None;
        obj.insert("mcp".into(), json!(m));
    }
    def
}

fn ext_tool(def: Value) -> Value {
    json!({ EXTENSION: {"tool": def} })
}

fn letta_tool(
    id: String,
    name: &str,
    tool_type: &str,
    description: &str,
    parameters: Value,
    metadata: Value,
) -> Value {
    json!({
        "id": id,
        "name": name,
        "tool_type": tool_type,
        "description": description,
        "source_type": "json",
        "source_code": null,
        "json_schema": {"name": name, "description": description, "parameters": parameters},
        "tags": [tool_type],
        "return_char_limit": 50000,
        "metadata_": metadata,
    })
}

fn meta_str<'a>(tool: &'a Tool, key: &str) -> Option<&'a str> {
    tool.metadata.as_ref().and_then(|m| m.0.get(key)).and_then(Value::as_str)
}

fn role(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The Agent File of `agent` with these blocks, tools and messages.
pub fn file(
    agent: &Agent,
    blocks: &[Block],
    tools: &[Tool],
    messages: &[Message],
    now: DateTime<Utc>,
) -> JsonObject {
    let agent_id = "agent-0";
    let letta_blocks: Vec<Value> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            json!({
                "id": format!("block-{i}"),
                "label": b.label,
                "value": b.value,
                "limit": b.limit,
                "description": b.description,
                "read_only": b.read_only,
                "metadata": b.metadata,
                "is_template": false,
                "template_name": null,
                "preserve_on_migration": false,
            })
        })
        .collect();
    let mut letta_tools: Vec<Value> = Vec::new();
    let mut servers: Vec<Value> = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    for tool in tools {
        let def = definition(tool);
        match tool.kind {
            ToolType::Memory | ToolType::ConversationSearch | ToolType::FileSearch => {
                for (name, tool_type, description, props, required) in letta_builtins(tool.kind) {
                    // A second tool of one kind keeps its own name (Letta's is taken).
                    let name = if taken.iter().any(|t| t == name) { tool.name.as_str() } else { name };
                    taken.push(name.to_owned());
                    let params = json!({"type": "object", "properties": props, "required": required});
                    let t = letta_tool(
                        format!("tool-{}", letta_tools.len()),
                        name,
                        tool_type,
                        description,
                        params,
                        ext_tool(def.clone()),
                    );
                    letta_tools.push(t);
                }
            }
            ToolType::Function | ToolType::ApiCall => {
                let params = tool
                    .function
                    .as_ref()
                    .map(|f| Value::Object(f.parameters.clone()))
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                let tool_type = meta_str(tool, "letta_tool_type").unwrap_or("custom");
                let mut t = letta_tool(
                    format!("tool-{}", letta_tools.len()),
                    &tool.name,
                    tool_type,
                    &tool.description,
                    params,
                    ext_tool(def),
                );
                if let Some(src) = meta_str(tool, "letta_source_code") {
                    t["source_code"] = json!(src);
                    t["source_type"] = json!(meta_str(tool, "letta_source_type").unwrap_or("python"));
                }
                t["tags"] = json!([]);
                taken.push(tool.name.clone());
                letta_tools.push(t);
            }
            ToolType::Mcp => {
                let server_id = format!("mcp_server-{}", servers.len());
                let url = tool.mcp.as_ref().map(|m| m.server_url.clone());
                let mut ext = ext_tool(def);
                ext[EXTENSION]["agent"] = json!(agent_id);
                servers.push(json!({
                    "id": server_id,
                    "server_type": "streamable_http",
                    "server_name": tool.name,
                    "server_url": url,
                    "stdio_config": null,
                    "metadata_": ext,
                }));
                let allowed = tool.mcp.as_ref().and_then(|m| m.allowed_tools.clone()).unwrap_or_default();
                for name in allowed {
                    let meta = json!({"mcp": {"server_name": tool.name, "server_id": server_id}});
                    let mut t = letta_tool(
                        format!("tool-{}", letta_tools.len()),
                        &name,
                        "external_mcp",
                        "",
                        json!({"type": "object", "properties": {}}),
                        meta,
                    );
                    t["tags"] = json!([format!("mcp:{}", tool.name)]);
                    t["source_type"] = Value::Null;
                    letta_tools.push(t);
                }
            }
        }
    }
    let letta_messages: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut content = Vec::new();
            if let Some(r) =
                m.metadata.as_ref().and_then(|md| md.0.get("letta_reasoning")).and_then(Value::as_str)
            {
                content.push(json!({"type": "reasoning", "reasoning": r}));
            }
            content.push(json!({"type": "text", "text": m.content}));
            json!({
                "type": "message",
                "id": format!("message-{i}"),
                "role": role(m.role),
                "content": content,
                "name": m.name,
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "tool_returns": [],
                "agent_id": agent_id,
                "model": null,
                "created_at": m.created_at,
            })
        })
        .collect();
    let settings = agent.default_settings.clone().unwrap_or_default();
    let mut llm_config = json!({
        "model": agent.model,
        "model_endpoint_type": "openai",
        // Letta requires one; here a session's token budget bounds the context.
        "context_window": 128000,
    });
    for (key, value) in [
        ("temperature", settings.temperature.map(Value::from)),
        ("top_p", settings.top_p.map(Value::from)),
        ("max_tokens", settings.max_tokens.map(Value::from)),
        ("frequency_penalty", settings.frequency_penalty.map(Value::from)),
        ("presence_penalty", settings.presence_penalty.map(Value::from)),
    ] {
        if let Some(v) = value {
            llm_config[key] = v;
        }
    }
    let tags: Vec<String> = agent
        .metadata
        .as_ref()
        .and_then(|m| m.0.get("tags"))
        .and_then(Value::as_array)
        .filter(|a| a.iter().all(Value::is_string))
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let ext = json!({
        "instructions": agent.instructions,
        "default_settings": agent.default_settings,
        "metadata": agent.metadata,
    });
    let letta_agent = json!({
        "id": agent_id,
        "name": agent.name,
        "description": agent.about,
        "system": agent.instructions.join("\n\n"),
        "llm_config": llm_config,
        "embedding_config": null,
        "tags": tags,
        "metadata": { EXTENSION: ext },
        "memory_blocks": [],
        "tools": [],
        "block_ids": (0..blocks.len()).map(|i| format!("block-{i}")).collect::<Vec<_>>(),
        "tool_ids": (0..letta_tools.len()).map(|i| format!("tool-{i}")).collect::<Vec<_>>(),
        "tool_rules": [],
        "source_ids": [],
        "include_base_tools": false,
        "messages": letta_messages,
        "in_context_message_ids": (0..messages.len()).map(|i| format!("message-{i}")).collect::<Vec<_>>(),
        "files_agents": [],
        "group_ids": [],
    });
    let mut file = Map::new();
    file.insert("agents".into(), json!([letta_agent]));
    file.insert("groups".into(), json!([]));
    file.insert("blocks".into(), Value::Array(letta_blocks));
    file.insert("files".into(), json!([]));
    file.insert("sources".into(), json!([]));
    file.insert("tools".into(), Value::Array(letta_tools));
    file.insert("mcp_servers".into(), Value::Array(servers));
    file.insert(
        "metadata".into(),
        json!({"exported_by": format!("agent-platform {}", env!("CARGO_PKG_VERSION"))}),
    );
    file.insert("created_at".into(), json!(now));
    file
}
