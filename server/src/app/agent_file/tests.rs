//! The mapping of Agent Files, from the fixtures in `tests/fixtures/agent-files/`.

use serde_json::{Value, json};

use super::parse::{MAX_MESSAGES, Plan, plan};
use crate::api::error::LocPart;
use crate::api::types::{JsonObject, Role, ToolType, metadata_violation};

const MEMGPT: &str = include_str!("../../../../tests/fixtures/agent-files/memgpt_agent.af");
const SINGLE: &str = include_str!("../../../../tests/fixtures/agent-files/single_agent_v1.af");

fn object(text: &str) -> JsonObject {
    serde_json::from_str(text).expect("the fixture is a JSON object")
}

fn planned(file: &JsonObject) -> Plan {
    plan(file).unwrap_or_else(|issues| panic!("not imported: {issues:?}"))
}

/// The unmapped line at `path` whose `what` or `why` contains `word`.
fn line<'a>(p: &'a Plan, path: &str, word: &str) -> &'a crate::api::types::Unmapped {
    p.unmapped
        .iter()
        .find(|u| u.path == path && (u.what.contains(word) || u.why.contains(word)))
        .unwrap_or_else(|| panic!("no unmapped line at {path} with {word:?} in {:#?}", p.unmapped))
}

fn loc(path: &[&str]) -> Vec<LocPart> {
    path.iter()
        .map(|p| match p.parse::<usize>() {
            Ok(i) => LocPart::Index(i),
            Err(_) => LocPart::Key((*p).into()),
        })
        .collect()
}

#[test]
fn a_memgpt_agent_in_the_current_format_maps_agent_blocks_tools_and_messages() {
    let file = object(MEMGPT);
    let p = planned(&file);
    assert_eq!(p.agents.len(), 1);
    let a = &p.agents[0];
    assert_eq!(a.source_id.as_deref(), Some("agent-0"));
    assert_eq!(a.agent.name, "memgpt_agent");
    assert_eq!(a.agent.model, "gpt-4o-mini");
    let instructions = a.agent.instructions.clone().into_vec();
    assert_eq!(instructions, vec![file["agents"][0]["system"].as_str().unwrap().to_owned()]);
    assert!(a.agent.about.starts_with("A MemGPT agent"));
    let settings = a.agent.default_settings.clone().expect("settings");
    assert_eq!((settings.temperature, settings.max_tokens), (Some(0.7), Some(1024)));
    assert_eq!(
        a.agent.metadata.clone().unwrap().0,
        *json!({"tags": ["memgpt", "demo"]}).as_object().unwrap()
    );

    let blocks: Vec<(&str, i64, bool)> =
        a.blocks.iter().map(|b| (b.label.as_str(), b.limit, b.read_only)).collect();
    assert_eq!(blocks, vec![("human", 5000, false), ("persona", 5000, false)]);
    assert!(a.blocks[0].value.contains("First name: Chad"));
    assert!(a.blocks[1].description.starts_with("The persona block"));

    let tools: Vec<(&str, ToolType)> = a.tools.iter().map(|t| (t.name.as_str(), t.kind)).collect();
    assert_eq!(
        tools,
        vec![
            ("memory", ToolType::Memory),
            ("conversation_search", ToolType::ConversationSearch),
            ("archival_memory_search", ToolType::FileSearch),
            ("get_weather", ToolType::Function),
            ("docs", ToolType::Mcp),
        ]
    );
    let weather = &a.tools[3];
    let params = Value::Object(weather.function.clone().unwrap().parameters);
    assert_eq!(params["required"], json!(["city"]), "Letta's request_heartbeat is not a parameter");
    assert!(params["properties"].get("request_heartbeat").is_none());
    assert_eq!(params["properties"]["unit"]["enum"], json!(["celsius", "fahrenheit"]));
    let meta = weather.metadata.clone().unwrap().0;
    assert_eq!(meta["letta_source_code"], file["tools"][6]["source_code"]);
    assert_eq!(meta["letta_source_type"], "python");
    let mcp = a.tools[4].mcp.clone().unwrap();
    assert_eq!(mcp.server_url, "https://docs.example.com/mcp");
    assert_eq!(mcp.allowed_tools, Some(vec!["search_docs".to_owned()]));

    let messages: Vec<(Role, &str, usize)> = a
        .messages
        .iter()
        .map(|m| (m.role, m.content.as_str(), m.tool_calls.as_ref().map_or(0, Vec::len)))
        .collect();
    assert_eq!(
        messages,
        vec![
            (Role::Assistant, "More human than human is our motto.", 0),
            (Role::User, "Hi, I'm Chad. I love sailing.", 0),
            (Role::Assistant, "", 1),
            (Role::Tool, a.messages[3].content.as_str(), 0),
            (Role::Assistant, "Nice to meet you, Chad! Sailing sounds wonderful.", 0),
        ]
    );
    let call = &a.messages[2].tool_calls.as_ref().unwrap()[0];
    assert_eq!(call.function.name, "core_memory_append");
    assert_eq!(a.messages[3].tool_call_id.as_deref(), Some(call.id.as_str()));
    assert!(a.messages[3].content.contains("\"status\": \"OK\""));
    let thought = &a.messages[0].metadata.as_ref().unwrap().0["letta_reasoning"];
    assert_eq!(thought, "Bootup sequence complete. Persona activated. Testing messaging functionality.");

    // What was not imported, each with where and why.
    assert!(line(&p, "/tools/0", "send_message").why.contains("the model's text is the answer"));
    line(&p, "/tools/4", "archival_memory_insert");
    assert!(line(&p, "/tools/6/source_code", "get_weather").why.contains("not run here"));
    line(&p, "/mcp_servers/1", "stdio");
    line(&p, "/agents/0/tool_rules", "tool rules");
    line(&p, "/agents/0/embedding_config", "embedding model");
    line(&p, "/agents/0/agent_type", "memgpt_agent");
    line(&p, "/agents/0/timezone", "UTC");
    line(&p, "/agents/0/llm_config", "context_window");
    line(&p, "/agents/0/messages/0", "system prompt");
    line(&p, "/agents/0/system", "send_message");
    line(&p, "/agents/0/messages", "results of send_message");
    line(&p, "/agents/0/messages", "inner monologue");
    // The read-only flags and ids of the file are not listed.
    assert!(!p.unmapped.iter().any(|u| u.path == "/agents/0/id" || u.path == "/agents/0/block_ids"));
}

#[test]
fn an_agent_in_the_older_single_agent_format_maps_too() {
    let p = planned(&object(SINGLE));
    assert_eq!(p.agents.len(), 1);
    let a = &p.agents[0];
    assert_eq!(a.source_id, None);
    assert_eq!(a.agent.name, "Acme support");
    assert_eq!(a.agent.model, "gpt-4-0613");
    let settings = a.agent.default_settings.clone().unwrap();
    assert_eq!((settings.temperature, settings.max_tokens), (Some(0.5), Some(4096)));
    assert_eq!(
        a.agent.metadata.clone().unwrap().0,
        *json!({"team": "support", "tags": ["support", "acme"]}).as_object().unwrap()
    );
    let blocks: Vec<(&str, i64, bool)> =
        a.blocks.iter().map(|b| (b.label.as_str(), b.limit, b.read_only)).collect();
    assert_eq!(blocks, vec![("persona", 5000, false), ("human", 5000, false), ("policies", 2000, true)]);
    assert_eq!(a.blocks[1].description, "What I know about the customer.");
    let tools: Vec<(&str, ToolType)> = a.tools.iter().map(|t| (t.name.as_str(), t.kind)).collect();
    assert_eq!(
        tools,
        vec![
            ("memory", ToolType::Memory),
            ("archival_memory_search", ToolType::FileSearch),
            ("check_order_status", ToolType::Function),
        ]
    );
    let contents: Vec<(Role, &str)> = a.messages.iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(contents[0], (Role::Assistant, "Hello! I'm Ace from Acme support. How can I help?"));
    assert_eq!(contents[1], (Role::User, "Where is my order 1042?"));
    assert_eq!(contents[2].0, Role::Assistant);
    assert_eq!(a.messages[2].tool_calls.as_ref().unwrap()[0].function.name, "check_order_status");
    assert_eq!(contents[3].0, Role::Tool);
    assert_eq!(contents[4], (Role::Assistant, "Order 1042 has shipped."));
    assert_eq!(contents.len(), 5);
    line(&p, "/tools/0", "send_message");
    line(&p, "/tool_rules", "tool rules");
    line(&p, "/tools/3/source_code", "check_order_status");
}

#[test]
fn what_is_not_an_agent_file_is_refused_naming_where() {
    let refused = |v: Value| plan(v.as_object().unwrap()).expect_err("refused");
    let issues = refused(json!({"hello": "world"}));
    assert_eq!(issues[0].loc, loc(&["body"]));
    assert!(issues[0].msg.contains("not a Letta Agent File"));
    let issues = refused(json!({"agents": "many"}));
    assert_eq!(issues[0].loc, loc(&["body", "agents"]));
    let issues = refused(json!({"agents": []}));
    assert_eq!(issues[0].loc, loc(&["body", "agents"]));
    let issues = refused(json!({"agents": [{"name": "a", "system": 5}]}));
    assert_eq!(
        (issues[0].loc.clone(), issues[0].kind.as_str()),
        (loc(&["body", "agents", "0", "system"]), "string_type")
    );
    let issues = refused(json!({"agents": [{"name": "a", "block_ids": ["block-9"]}], "blocks": []}));
    assert_eq!(issues[0].loc, loc(&["body", "agents", "0", "block_ids", "0"]));
    let issues = refused(json!({"agents": [{"name": "a", "messages": [1]}]}));
    assert_eq!(issues[0].loc, loc(&["body", "agents", "0", "messages", "0"]));
    let issues = refused(json!({"name": "old", "system": "s", "core_memory": {"label": "x"}}));
    assert_eq!(issues[0].loc, loc(&["body", "core_memory"]));
}

#[test]
fn names_labels_and_long_sources_are_made_to_fit_and_said_so() {
    let mut file = object(MEMGPT);
    file["agents"][0]["name"] = json!("3PO unit #7!");
    file["blocks"][0]["label"] = json!("the human/notes");
    let long = format!("def get_weather(city):\n{}", "    x = 1  # \"padding\"\n".repeat(2000));
    file["tools"][6]["source_code"] = json!(long);
    let p = planned(&file);
    let a = &p.agents[0];
    assert_eq!(a.agent.name, "PO unit _7_");
    line(&p, "/agents/0/name", "3PO unit #7!");
    assert_eq!(a.blocks[0].label, "the_human_notes");
    line(&p, "/blocks/0/label", "the human/notes");
    let meta = a.tools[3].metadata.clone().unwrap().0;
    assert!(metadata_violation(&meta).is_none(), "the metadata keeps its bounds");
    let kept = meta["letta_source_code"].as_str().unwrap();
    assert!(long.starts_with(kept) && kept.len() < long.len() && kept.len() > 8000, "{}", kept.len());
    assert_eq!(meta["letta_source_code_truncated"], true);
    assert!(
        line(&p, "/tools/6/source_code", "get_weather").why.contains(&format!("of {} bytes", long.len()))
    );
}

#[test]
fn at_most_ten_thousand_messages_are_imported_and_the_rest_listed() {
    let messages: Vec<Value> =
        (0..MAX_MESSAGES + 2).map(|i| json!({"role": "user", "content": format!("m{i}")})).collect();
    let file = json!({"name": "chatty", "system": "s", "messages": messages});
    let p = planned(file.as_object().unwrap());
    assert_eq!(p.agents[0].messages.len(), MAX_MESSAGES);
    line(&p, &format!("/messages/{MAX_MESSAGES}"), "at most");
}

#[test]
fn blocks_longer_than_their_limit_raise_it_and_unused_parts_are_listed() {
    let mut file = object(MEMGPT);
    file["blocks"][1]["limit"] = json!(10);
    file["blocks"].as_array_mut().unwrap().push(json!({"id": "block-2", "label": "orphan", "value": "v"}));
    file["groups"] = json!([{"id": "group-0", "agent_ids": ["agent-0"]}]);
    let p = planned(&file);
    let persona = &p.agents[0].blocks[1];
    assert_eq!(persona.limit, persona.value.chars().count() as i64);
    line(&p, "/blocks/1/limit", "holds the value");
    line(&p, "/blocks/2", "no agent");
    line(&p, "/groups/0", "group");
}

/// An import that fails part-way (here: its second tool's name is taken by
/// its first, which the mapping never plans, so the store refuses it) leaves
/// nothing behind: not the agent, its blocks, its first tool nor its session.
#[tokio::test]
async fn an_import_that_fails_part_way_deletes_what_it_made() {
    use std::sync::Arc;

    use crate::app::{App, Tenant};
    use crate::store::sled_store::{Durability, SledStore};
    use crate::store::{Kind, ListQuery, Store};

    const T: Tenant = Tenant(uuid::Uuid::from_u128(7));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
    let app = App::new(store.clone()).await.unwrap();
    let mut p = planned(&object(MEMGPT));
    let first = p.agents[0].tools[0].clone();
    p.agents[0].tools.push(first);
    let err = app.import_plan(T, None, p).await.expect_err("the second tool clashes");
    assert!(matches!(err, crate::app::Error::Conflict(_)), "{err:?}");
    let all = ListQuery::oldest_first(0, 1000);
    assert!(app.agent_list(T, &all).await.unwrap().is_empty(), "the agent is deleted");
    assert!(app.session_list(T, &all).await.unwrap().is_empty());
    for kind in [Kind::Block, Kind::BlockEdit, Kind::Tool, Kind::Message] {
        let left = store.scan_kind(kind).await.unwrap();
        assert!(left.is_empty(), "{kind:?} left: {}", left.len());
    }
}
