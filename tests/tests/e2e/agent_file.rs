//! Letta Agent Files: `POST /api/agents/import` and `GET /api/agents/{id}/export`,
//! through the generated client, with the fixtures of `tests/fixtures/agent-files/`.

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::mcp::FakeMcp;
use agent_platform_tests::{TestServer, fake_models, status_of, types};
use serde_json::{Map, Value, json};
use uuid::Uuid;

const MEMGPT: &str = include_str!("../../fixtures/agent-files/memgpt_agent.af");
const SINGLE: &str = include_str!("../../fixtures/agent-files/single_agent_v1.af");

fn object(text: &str) -> Map<String, Value> {
    serde_json::from_str(text).expect("a JSON object")
}

async fn import(s: &TestServer, file: Map<String, Value>, user: Option<Uuid>) -> types::AgentFileImport {
    let mut req = s.client.agent_import().id("import").body(file);
    if let Some(user) = user {
        req = req.user_id(user);
    }
    req.send().await.unwrap_or_else(|e| panic!("the import failed: {e:?}")).into_inner()
}

async fn messages(s: &TestServer, session: Uuid) -> Vec<types::Message> {
    s.client.message_list().id(session).limit(1000).send().await.unwrap().into_inner().items
}

async fn tools(s: &TestServer, agent: Uuid) -> Vec<types::Tool> {
    s.client.tool_list().id(agent).limit(1000).send().await.unwrap().into_inner().items
}

async fn agent_count(s: &TestServer) -> usize {
    s.client.agent_list().limit(1000).send().await.unwrap().into_inner().items.len()
}

fn has_line(import: &types::AgentFileImport, path: &str, word: &str) -> bool {
    import.unmapped.iter().any(|u| u.path == path && (u.what.contains(word) || u.why.contains(word)))
}

#[tokio::test]
async fn an_imported_memgpt_agent_has_its_blocks_tools_and_messages_and_chats() {
    let fake = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let user = s.create_user("Chad").await;
    let mut file = object(MEMGPT);
    // Its HTTP MCP server is the fake one, whose tool `echo` the agent uses.
    file["mcp_servers"][0]["server_url"] = json!(mcp.url);
    file["tools"][7]["name"] = json!("echo");
    let made = import(&s, file, Some(user.id)).await;

    assert_eq!(made.agents.len(), 1);
    let a = &made.agents[0];
    assert_eq!(a.source_id.as_deref(), Some("agent-0"));
    assert_eq!(a.agent.name, "memgpt_agent");
    assert_eq!(a.agent.model, "gpt-4o-mini");
    assert!(a.agent.instructions[0].starts_with("You are MemGPT"));
    assert_eq!(a.agent.default_settings.as_ref().unwrap().temperature, Some(0.7));
    assert_eq!(a.agent.metadata.as_ref().unwrap()["tags"], json!(["memgpt", "demo"]));

    let blocks = s.client.agent_block_list().id(a.agent.id).send().await.unwrap().into_inner().items;
    let labels: Vec<&str> = blocks.iter().map(|b| b.label.as_str()).collect();
    assert_eq!(labels, ["human", "persona"]);
    assert!(blocks[0].value.contains("First name: Chad"));
    let edits = s
        .client
        .agent_block_edits()
        .id(a.agent.id)
        .block_id(blocks[0].id)
        .send()
        .await
        .unwrap()
        .into_inner()
        .items;
    assert_eq!(edits.len(), 1);
    assert_eq!(edits[0].op, types::BlockEditOp::Import);

    let mut stored: Vec<(String, types::ToolType)> =
        tools(&s, a.agent.id).await.into_iter().map(|t| (t.name, t.type_)).collect();
    stored.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        stored,
        vec![
            ("archival_memory_search".to_owned(), types::ToolType::FileSearch),
            ("conversation_search".to_owned(), types::ToolType::ConversationSearch),
            ("docs".to_owned(), types::ToolType::Mcp),
            ("get_weather".to_owned(), types::ToolType::Function),
            ("memory".to_owned(), types::ToolType::Memory),
        ]
    );
    let weather = a.tools.iter().find(|t| t.name == "get_weather").unwrap();
    assert!(
        weather.metadata.as_ref().unwrap()["letta_source_code"].as_str().unwrap().contains("def get_weather")
    );

    // What was not imported is listed.
    assert!(has_line(&made, "/tools/0", "the model's text is the answer"), "{:#?}", made.unmapped);
    assert!(has_line(&made, "/tools/6/source_code", "not run here"));
    assert!(has_line(&made, "/mcp_servers/1", "stdio"));
    assert!(has_line(&made, "/agents/0/tool_rules", "tool rules"));

    // The messages, in a session of the agent and the user.
    let session = a.session_id.expect("a session");
    let got = s.client.session_get().id(session).send().await.unwrap().into_inner();
    assert_eq!((got.agents, got.users), (vec![a.agent.id], vec![user.id]));
    let history = messages(&s, session).await;
    assert_eq!(a.messages, history.len() as i64);
    let roles: Vec<types::Role> = history.iter().map(|m| m.role).collect();
    use types::Role::{Assistant, Tool, User};
    assert_eq!(roles, [Assistant, User, Assistant, Tool, Assistant]);
    assert_eq!(history[1].content, "Hi, I'm Chad. I love sailing.");
    assert_eq!(history[4].content, "Nice to meet you, Chad! Sailing sounds wonderful.");
    assert_eq!(
        history[3].tool_call_id.as_deref(),
        Some(history[2].tool_calls.as_ref().unwrap()[0].id.as_str())
    );

    // It chats: the model gets its history and its tools, and its answer is saved.
    fake.push(Behaviour::Text("You told me you love sailing.".into()));
    let msg = types::CreateMessageRequest::builder().role(types::Role::User).content("What do I love?");
    let answer = s
        .client
        .session_chat()
        .id(session)
        .body(types::ChatRequest::builder().messages(vec![msg.try_into().unwrap()]))
        .send()
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.choices[0].message.content.as_deref(), Some("You told me you love sailing."));
    let sent = fake.last_request().expect("a request upstream").body;
    let texts: Vec<&str> =
        sent["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(texts[0].contains("You are MemGPT"), "the instructions are the system message: {texts:?}");
    assert!(texts.contains(&"Hi, I'm Chad. I love sailing."), "{texts:?}");
    assert_eq!(texts.last(), Some(&"What do I love?"));
    let offered: Vec<&str> =
        sent["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    for name in ["get_weather", "archival_memory_search", "echo"] {
        assert!(offered.contains(&name), "{name} is offered: {offered:?}");
    }
    assert_eq!(messages(&s, session).await.len(), history.len() + 2);
}

#[tokio::test]
async fn an_agent_in_the_single_agent_format_imports() {
    let s = TestServer::start().await;
    let made = import(&s, object(SINGLE), None).await;
    let a = &made.agents[0];
    assert_eq!((a.agent.name.as_str(), a.agent.model.as_str()), ("Acme support", "gpt-4-0613"));
    assert_eq!(a.agent.metadata.as_ref().unwrap()["tags"], json!(["support", "acme"]));
    let blocks: Vec<(&str, bool)> = a.blocks.iter().map(|b| (b.label.as_str(), b.read_only)).collect();
    assert_eq!(blocks, [("persona", false), ("human", false), ("policies", true)]);
    let tools: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["memory", "archival_memory_search", "check_order_status"]);
    let session = a.session_id.unwrap();
    let got = s.client.session_get().id(session).send().await.unwrap().into_inner();
    assert!(got.users.is_empty(), "no user_id: a session of the agent alone");
    let history = messages(&s, session).await;
    assert_eq!(history.len(), 5);
    assert_eq!(history[4].content, "Order 1042 has shipped.");
    assert!(has_line(&made, "/tools/0", "send_message"));
}

#[tokio::test]
async fn a_body_that_is_not_an_agent_file_is_422_naming_where_and_nothing_is_made() {
    let s = TestServer::start().await;
    let r = s.raw("POST", "/api/agents/import", Some(r#"{"hello": "world"}"#)).await;
    r.assert_422(json!(["body"]), "value_error");
    assert!(r.body["detail"][0]["msg"].as_str().unwrap().contains("not a Letta Agent File"), "{}", r.body);
    let mut file = object(MEMGPT);
    file["agents"][0]["system"] = json!(42);
    let r = s.raw("POST", "/api/agents/import", Some(&Value::Object(file).to_string())).await;
    r.assert_422(json!(["body", "agents", 0, "system"]), "string_type");
    let mut file = object(MEMGPT);
    file["agents"][0]["block_ids"] = json!(["block-0", "block-7"]);
    let r = s.raw("POST", "/api/agents/import", Some(&Value::Object(file).to_string())).await;
    r.assert_422(json!(["body", "agents", 0, "block_ids", 1]), "value_error");
    let r = s.raw("POST", "/api/agents/import", Some(r#""{\"agents\": []}""#)).await;
    assert_eq!(r.status, 422, "a JSON string is not an Agent File: {}", r.body);
    assert_eq!(agent_count(&s).await, 0);
    let r = s.raw("POST", "/api/agents/other", Some(SINGLE)).await;
    assert_eq!(r.status, 404, "{}", r.body);
}

#[tokio::test]
async fn an_unknown_user_is_404_and_nothing_is_made() {
    let s = TestServer::start().await;
    let r = s.client.agent_import().id("import").user_id(Uuid::new_v4()).body(object(MEMGPT)).send().await;
    assert_eq!(status_of(r), 404);
    assert_eq!(agent_count(&s).await, 0);
    assert!(s.orphans().await.is_empty());
}

/// Blocks, tools and messages as compared: what import must give back.
fn blocks_of(blocks: &[types::Block]) -> Vec<Value> {
    let mut v: Vec<Value> = blocks
        .iter()
        .map(|b| json!([b.label, b.value, b.description, b.limit, b.read_only, b.metadata]))
        .collect();
    v.sort_by_key(|b| b.to_string());
    v
}

fn tools_of(tools: &[types::Tool]) -> Vec<Value> {
    let mut v: Vec<Value> = tools
        .iter()
        .map(|t| json!([t.name, t.type_, t.description, t.function, t.api_call, t.mcp, t.metadata]))
        .collect();
    v.sort_by_key(|t| t.to_string());
    v
}

fn messages_of(messages: &[types::Message]) -> Vec<Value> {
    messages.iter().map(|m| json!([m.role, m.content, m.name, m.tool_calls, m.tool_call_id])).collect()
}

#[tokio::test]
async fn export_then_import_gives_the_same_agent_back() {
    let s = TestServer::start().await;
    let body = json!({
        "name": "Ada Lovelace",
        "about": "a research assistant",
        "model": "gpt-4o-mini",
        "instructions": ["Always cite sources.", "Be brief."],
        "default_settings": {"temperature": 0.3, "top_p": 0.5, "max_tokens": 800, "stop": ["END"], "seed": 7,
                             "frequency_penalty": 0.1, "presence_penalty": -0.2},
        "metadata": {"tags": ["research"], "team": {"name": "R&D"}},
    });
    let r = s.raw("POST", "/api/agents", Some(&body.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let id: Uuid = r.body["id"].as_str().unwrap().parse().unwrap();
    let post = async |path: String, body: Value| {
        let r = s.raw("POST", &path, Some(&body.to_string())).await;
        assert_eq!(r.status, 201, "{path}: {}", r.body);
        r.body
    };
    post(format!("/api/agents/{id}/blocks"), json!({"label": "persona", "value": "I am Ada.", "description": "who I am", "limit": 300, "metadata": {"v": 1}})).await;
    post(
        format!("/api/agents/{id}/blocks"),
        json!({"label": "rules", "value": "No guessing.", "read_only": true}),
    )
    .await;
    let tools = [
        json!({"name": "lookup", "type": "function", "description": "Look a word up.",
               "function": {"parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}},
               "metadata": {"owner": "ada"}}),
        json!({"name": "mem", "type": "memory", "description": "my memory"}),
        json!({"name": "recall", "type": "conversation_search"}),
        json!({"name": "papers", "type": "file_search", "description": "search my papers"}),
        json!({"name": "docs", "type": "mcp", "mcp": {"server_url": "https://docs.example.com/mcp", "allowed_tools": ["search", "fetch"]}}),
        json!({"name": "weather", "type": "api_call", "api_call": {"method": "GET", "url": "https://weather.example.com/now"}}),
    ];
    for tool in tools {
        post(format!("/api/agents/{id}/tools"), tool).await;
    }
    let session = s.create_session(&[id], &[]).await.id;
    let said = json!({"messages": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"word\":\"4\"}"}}]},
        {"role": "tool", "content": "four", "tool_call_id": "call_1", "name": "lookup"},
        {"role": "assistant", "content": "It is 4."},
    ]});
    for m in said["messages"].as_array().unwrap() {
        post(format!("/api/sessions/{session}/messages"), m.clone()).await;
    }

    let file = s.client.agent_export().id(id).session_id(session).send().await.unwrap().into_inner();
    // It is in Letta's format.
    let letta = &file["agents"][0];
    assert_eq!(letta["id"], "agent-0");
    assert_eq!(letta["system"], "Always cite sources.\n\nBe brief.");
    assert_eq!(letta["llm_config"]["model"], "gpt-4o-mini");
    assert_eq!(letta["tags"], json!(["research"]));
    assert_eq!(letta["block_ids"], json!(["block-0", "block-1"]));
    let letta_tools: Vec<&str> =
        file["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in [
        "lookup",
        "memory_insert",
        "memory_replace",
        "memory_rethink",
        "conversation_search",
        "archival_memory_search",
    ] {
        assert!(letta_tools.contains(&name), "{name} in {letta_tools:?}");
    }
    assert_eq!(file["mcp_servers"][0]["server_url"], "https://docs.example.com/mcp");
    assert_eq!(letta["messages"].as_array().unwrap().len(), 4);

    let made = import(&s, file, None).await;
    let back = &made.agents[0];
    let original = s.client.agent_get().id(id).send().await.unwrap().into_inner();
    assert_eq!(back.agent.name, original.name);
    assert_eq!(back.agent.about, original.about);
    assert_eq!(back.agent.model, original.model);
    assert_eq!(back.agent.instructions, original.instructions);
    assert_eq!(back.agent.default_settings, original.default_settings);
    assert_eq!(back.agent.metadata, original.metadata);
    let blocks = s.client.agent_block_list().id(id).send().await.unwrap().into_inner().items;
    assert_eq!(blocks_of(&back.blocks), blocks_of(&blocks));
    assert_eq!(tools_of(&back.tools), tools_of(&self::tools(&s, id).await));
    let copied = messages(&s, back.session_id.unwrap()).await;
    assert_eq!(messages_of(&copied), messages_of(&messages(&s, session).await));
}

#[tokio::test]
async fn an_export_is_404_for_another_tenants_agent_and_for_a_session_of_another_agent() {
    let s = TestServer::start().await;
    let made = import(&s, object(MEMGPT), None).await;
    let id = made.agents[0].agent.id;
    let other = s.other_tenant().await;
    assert_eq!(status_of(other.agent_export().id(id).send().await), 404);
    let session = made.agents[0].session_id.unwrap();
    assert_eq!(status_of(other.agent_export().id(id).session_id(session).send().await), 404);
    let stranger = s.create_agent("Stranger").await;
    assert_eq!(status_of(s.client.agent_export().id(stranger.id).session_id(session).send().await), 404);
    assert_eq!(status_of(s.client.agent_export().id(Uuid::new_v4()).send().await), 404);
    let own = s.client.agent_export().id(id).session_id(session).send().await.unwrap().into_inner();
    assert_eq!(own["agents"][0]["name"], "memgpt_agent");
}

#[tokio::test]
async fn an_import_repeated_with_its_idempotency_key_answers_the_same_import_and_makes_nothing_more() {
    let s = TestServer::start().await;
    let send = async || {
        s.client
            .agent_import()
            .id("import")
            .idempotency_key("import-once")
            .body(object(MEMGPT))
            .send()
            .await
            .unwrap()
            .into_inner()
    };
    let first = send().await;
    let again = send().await;
    assert_eq!(again.agents.len(), 1, "the import's answer, not that of its first write");
    assert_eq!(again.agents[0].agent.id, first.agents[0].agent.id);
    assert_eq!(again.agents[0].session_id, first.agents[0].session_id);
    assert_eq!(again.unmapped, first.unmapped);
    assert_eq!(agent_count(&s).await, 1);
}
