//! The agent loop in session chat: the model calls tools the server runs
//! (`api_call` tools of the agent, against a local HTTP target), the server
//! runs them and asks the model again; `function` tools stay the client's.
//! Driven through the generated client (and raw SSE for the stream), against
//! the fake model provider.

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::http_target::HttpTarget;
use agent_platform_tests::mcp::FakeMcp;
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{TestServer, fake_models, types};
use serde_json::{Value, json};
use uuid::Uuid;

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    target: HttpTarget,
    session: Uuid,
}

/// A server whose agent has an `api_call` tool `get_weather` (GET on the
/// target, its host allowed) and a `function` tool `lookup`, in a session.
async fn setup(max_rounds: u32) -> Setup {
    let fake = FakeUpstream::start().await;
    let target = HttpTarget::start().await;
    let host = target.host();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.api_call_allowed_hosts = vec![host];
        c.tools.max_rounds = max_rounds;
    })
    .await;
    let agent = s.create_agent("Ada").await;
    let api_call = json!({"name": "get_weather", "type": "api_call", "description": "The weather in a city",
        "api_call": {"method": "GET", "url": format!("{}/weather", target.url())}});
    let function = json!({"name": "lookup", "type": "function",
        "function": {"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}});
    for tool in [api_call, function] {
        let r = s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let user = s.create_user("Bob").await;
    let session = s.create_session(&[agent.id], &[user.id]).await.id;
    Setup { s, fake, target, session }
}

impl Setup {
    async fn chat(&self, messages: Value) -> types::ChatResponse {
        let body: types::ChatRequest = serde_json::from_value(json!({"messages": messages})).unwrap();
        self.s.client.session_chat().id(self.session).body(body).send().await.unwrap().into_inner()
    }

    async fn messages(&self) -> Vec<types::Message> {
        self.s.client.message_list().id(self.session).send().await.unwrap().into_inner().items
    }
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// The messages of the provider's `n`th request.
fn sent(fake: &FakeUpstream, n: usize) -> Vec<Value> {
    fake.requests()[n].body["messages"].as_array().unwrap().clone()
}

#[tokio::test]
async fn the_server_runs_an_api_call_tool_and_asks_the_model_again() {
    let t = setup(10).await;
    t.fake.push(Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city": "Paris"}"#.into() });
    let answer = t.chat(user("Weather in Paris?")).await;

    // One request reached the tool's host, with the model's arguments.
    let received = t.target.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!((received[0].method.as_str(), received[0].path.as_str()), ("GET", "/weather"));
    assert_eq!(received[0].query, "city=Paris");

    // The model was asked twice; the second time with the call and its result.
    assert_eq!(t.fake.requests().len(), 2);
    let offered: Vec<_> = t.fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(offered, ["lookup", "get_weather"], "function tools, then the server's");
    let second = sent(&t.fake, 1);
    let call = &second[second.len() - 2];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "get_weather");
    let result = second.last().unwrap();
    assert_eq!(result["role"], "tool");
    assert_eq!(result["tool_call_id"], call["tool_calls"][0]["id"]);
    let output: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    assert_eq!(output["status"], 200, "{output}");
    assert_eq!(output["json"]["path"], "/weather", "{output}");

    // The answer is the model's last, with the run recorded.
    let choice = &answer.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("stop"));
    assert!(choice.message.tool_calls.is_none());
    assert!(choice.message.content.as_deref().unwrap().starts_with("the tool answered:"), "{choice:?}");
    assert_eq!(answer.tool_runs.len(), 1);
    let run = &answer.tool_runs[0];
    assert_eq!((run.type_, run.name.as_str()), (types::ToolRunType::ApiCall, "get_weather"));
    assert_eq!(run.id, call["tool_calls"][0]["id"].as_str().unwrap());
    assert_eq!(run.arguments, r#"{"city": "Paris"}"#);
    assert!(run.error.is_none(), "{run:?}");
    assert_eq!(run.output.as_deref(), result["content"].as_str());
    assert!(answer.usage.total_tokens > 0);

    // Saved: the question, the call, its result (with the run), the answer.
    let saved = t.messages().await;
    let roles: Vec<_> = saved.iter().map(|m| m.role.to_string()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(saved[1].tool_calls.as_ref().unwrap()[0].function.name.as_str(), "get_weather");
    assert_eq!(saved[2].tool_call_id.as_deref(), Some(run.id.as_str()));
    let recorded = &saved[2].metadata.as_ref().expect("the run in the metadata")["tool_run"];
    assert_eq!(recorded["name"], "get_weather");
    assert_eq!(recorded["type"], "api_call");
    assert!(recorded.get("output").is_none(), "the output is the content: {recorded}");
    assert_eq!(saved[3].content, choice.message.content.clone().unwrap());

    // The next turn sends the whole exchange, as saved.
    t.chat(user("thanks")).await;
    let third = sent(&t.fake, 2);
    let roles: Vec<_> = third.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user"]);
    t.s.stop().await;
}

#[tokio::test]
async fn a_round_with_server_and_client_calls_runs_the_servers_and_returns_the_clients() {
    let t = setup(10).await;
    t.fake.push(Behaviour::ToolCalls(vec![
        ("get_weather".into(), r#"{"city": "Oslo"}"#.into()),
        ("lookup".into(), r#"{"q": "Oslo"}"#.into()),
        // Not a tool of the agent: told so, as a failed run.
        ("no_such_tool".into(), "{}".into()),
    ]));
    let answer = t.chat(user("Oslo?")).await;
    let choice = &answer.choices[0];
    assert_eq!(choice.finish_reason.as_deref(), Some("tool_calls"));
    let calls = choice.message.tool_calls.as_ref().expect("the client's call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].function.name.as_str(), "lookup");
    assert_eq!(answer.tool_runs.len(), 1, "{:?}", answer.tool_runs);
    assert_eq!(answer.tool_runs[0].name, "get_weather");
    assert_eq!(t.target.received().len(), 1);
    assert_eq!(t.fake.requests().len(), 1, "the turn ended: the client has calls to run");

    // The client answers its call; the model sees every call answered.
    let lookup_id = calls[0].id.clone();
    let unknown_id = calls[1].id.clone();
    assert_eq!(calls[1].function.name.as_str(), "no_such_tool");
    let answer = t
        .chat(json!([
            {"role": "tool", "tool_call_id": lookup_id, "content": "Oslo is in Norway"},
            {"role": "tool", "tool_call_id": unknown_id, "content": "no such tool"},
        ]))
        .await;
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    let second = sent(&t.fake, 1);
    let roles: Vec<_> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "tool"]);
    assert_eq!(second[2]["tool_calls"].as_array().unwrap().len(), 3, "the call message as the model sent it");
    t.s.stop().await;
}

#[tokio::test]
async fn past_the_rounds_limit_calls_are_answered_not_run_and_the_turn_says_why() {
    let t = setup(1).await;
    let call = || Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city": "Rome"}"#.into() };
    t.fake.push(call());
    t.fake.push(call());
    let answer = t.chat(user("Rome?")).await;
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("max_tool_rounds"));
    assert!(answer.choices[0].message.tool_calls.is_none());
    assert_eq!(answer.tool_runs.len(), 2);
    assert!(answer.tool_runs[0].error.is_none());
    let why = answer.tool_runs[1].error.as_deref().unwrap();
    assert!(why.contains("tools.max_rounds (1)"), "{why}");
    assert_eq!(t.target.received().len(), 1, "the second call did not run");
    // Saved so that the next turn is well formed: each call has its result.
    let roles: Vec<_> = t.messages().await.iter().map(|m| m.role.to_string()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant", "tool"]);
    let answer = t.chat(user("and now?")).await;
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    t.s.stop().await;
}

#[tokio::test]
async fn a_refused_or_failing_call_is_told_to_the_model() {
    let t = setup(10).await;
    let r =
        t.s.raw(
            "POST",
            &format!(
                "/api/agents/{}/tools",
                t.s.client.session_get().id(t.session).send().await.unwrap().agents[0]
            ),
            Some(
                &json!({"name": "elsewhere", "type": "api_call",
                        "api_call": {"method": "GET", "url": "http://10.255.255.1/x"}})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    t.fake.push(Behaviour::ToolCalls(vec![
        ("elsewhere".into(), "{}".into()),
        ("get_weather".into(), "not json".into()),
    ]));
    let answer = t.chat(user("go")).await;
    assert_eq!(answer.tool_runs.len(), 2);
    let refused = answer.tool_runs[0].error.as_deref().unwrap();
    assert!(refused.contains("not allowed"), "{refused}");
    let bad = answer.tool_runs[1].error.as_deref().unwrap();
    assert!(bad.contains("not valid JSON"), "{bad}");
    assert!(t.target.received().is_empty());
    let second = sent(&t.fake, 1);
    let told: Vec<_> =
        second.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(told.len(), 2);
    assert!(told.iter().all(|t| t.starts_with("error: ")), "{told:?}");
    t.s.stop().await;
}

#[tokio::test]
async fn a_streamed_turn_sends_the_runs_and_only_the_clients_deltas() {
    let t = setup(10).await;
    t.fake.push(Behaviour::ToolCall { name: "get_weather".into(), arguments: r#"{"city": "Lima"}"#.into() });
    let resp = reqwest::Client::new()
        .post(format!("{}/api/sessions/{}/chat", t.s.base, t.session))
        .bearer_auth(&t.s.key)
        .json(&json!({"messages": user("Lima?"), "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await;
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| e.json()).collect();
    assert!(
        chunks.iter().all(|c| c["choices"]
            .as_array()
            .unwrap()
            .iter()
            .all(|ch| ch["delta"].get("tool_calls").is_none())),
        "no deltas of the server's calls: {chunks:?}"
    );
    let finishes: Vec<_> = chunks
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().iter())
        .filter_map(|ch| ch["finish_reason"].as_str())
        .collect();
    assert_eq!(finishes, ["stop"], "one finish, the last answer's");
    let runs: Vec<_> = chunks.iter().filter_map(|c| c.get("tool_run")).collect();
    assert_eq!(runs.len(), 1, "{chunks:?}");
    assert_eq!(runs[0]["name"], "get_weather");
    assert!(runs[0]["output"].as_str().unwrap().contains("/weather"));
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(text.starts_with("the tool answered:"), "{text}");
    let last = chunks.last().unwrap();
    let first_usage = t.fake.requests().len();
    assert_eq!(first_usage, 2);
    assert!(last["usage"]["total_tokens"].as_i64().unwrap() > 0, "{last}");
    let roles: Vec<_> = t.messages().await.iter().map(|m| m.role.to_string()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    t.s.stop().await;
}

/// A `/v1/responses` turn on the agent (its `api_call` tool) with a
/// `file_search` over its documents: both run in one round.
struct Responses {
    t: Setup,
    agent: Uuid,
}

async fn responses_setup() -> Responses {
    let t = setup(10).await;
    let session = t.s.client.session_get().id(t.session).send().await.unwrap().into_inner();
    let agent = session.agents[0];
    let doc = json!({"title": "Tides", "content": "The harbour of Brest has the highest tides in France."});
    let r = t.s.raw("POST", &format!("/api/agents/{agent}/docs"), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    Responses { t, agent }
}

impl Responses {
    fn script(&self) {
        self.t.fake.push(Behaviour::ToolCalls(vec![
            ("file_search".into(), r#"{"query": "highest tides"}"#.into()),
            ("get_weather".into(), r#"{"city": "Brest"}"#.into()),
        ]));
    }

    fn body(&self, stream: bool) -> Value {
        json!({"model": self.agent, "input": "Where are the tides highest?", "stream": stream,
               "tools": [{"type": "file_search", "vector_store_ids": [self.agent.to_string()]}]})
    }
}

fn item_types(output: &[Value]) -> Vec<&str> {
    output.iter().map(|i| i["type"].as_str().unwrap()).collect()
}

#[tokio::test]
async fn a_response_runs_file_search_and_an_api_call_in_one_round() {
    let r = responses_setup().await;
    r.script();
    let body: types::CreateResponseRequest = serde_json::from_value(r.body(false)).unwrap();
    let response = r.t.s.client.openai_response_create().body(body).send().await.unwrap().into_inner();
    let response = serde_json::to_value(&response).unwrap();
    assert_eq!(response["status"], "completed", "{response}");
    let output = response["output"].as_array().unwrap();
    assert_eq!(
        item_types(output),
        ["function_call", "file_search_call", "function_call_output", "message"],
        "{response}"
    );
    assert_eq!(output[0]["name"], "get_weather");
    assert_eq!(output[1]["queries"], json!(["highest tides"]));
    assert_eq!(output[1]["status"], "completed");
    assert_eq!(output[2]["call_id"], output[0]["call_id"]);
    // The model read the snippet the search found, and the weather.
    let second = sent(&r.t.fake, 1);
    let results: Vec<&str> =
        second.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert!(results[0].contains("highest tides in France"), "{results:?}");
    assert!(results[1].contains("/weather"), "{results:?}");
    assert_eq!(r.t.target.received().len(), 1);
    // The offered tools: file_search described for the model, after the agent's.
    let offered: Vec<_> = r.t.fake.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(offered, ["lookup", "file_search", "get_weather"]);
    // The response reads back the same.
    let id = response["id"].as_str().unwrap();
    let got = r.t.s.raw("GET", &format!("/v1/responses/{id}"), None).await;
    let ids =
        |output: &[Value]| output.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(ids(got.body["output"].as_array().unwrap()), ids(output));
    assert_eq!(got.body["output"][1]["results"], Value::Null, "file_search results are not given");
    // The echoed tool is OpenAI's shape.
    assert_eq!(
        response["tools"],
        json!([{"type": "file_search", "vector_store_ids": [r.agent.to_string()]}])
    );
    r.t.s.stop().await;
}

#[tokio::test]
async fn a_streamed_response_sends_each_runs_item_and_no_deltas_of_the_servers_calls() {
    let r = responses_setup().await;
    r.script();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/responses", r.t.s.base))
        .bearer_auth(&r.t.s.key)
        .json(&r.body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events: Vec<Value> =
        read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await.iter().map(|e| e.json()).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let seqs: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
    assert!(!kinds.contains(&"response.function_call_arguments.delta"), "{kinds:?}");
    for k in [
        "response.file_search_call.in_progress",
        "response.file_search_call.searching",
        "response.file_search_call.completed",
        "response.output_text.delta",
        "response.completed",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    let done: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "response.output_item.done").map(|e| &e["item"]).collect();
    let completed = &events.last().unwrap()["response"];
    assert_eq!(
        Value::Array(done.into_iter().cloned().collect()),
        completed["output"],
        "the items as streamed are the output"
    );
    let indexes: Vec<u64> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .map(|e| e["output_index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3]);
    let id = completed["id"].as_str().unwrap();
    let got = r.t.s.raw("GET", &format!("/v1/responses/{id}"), None).await;
    assert_eq!(got.body["output"], completed["output"], "saved as streamed");
    r.t.s.stop().await;
}

#[tokio::test]
async fn a_file_search_over_an_unknown_owner_is_a_400_naming_it() {
    let r = responses_setup().await;
    let body = json!({"model": r.agent, "input": "x",
        "tools": [{"type": "file_search", "vector_store_ids": [Uuid::now_v7().to_string()]}]});
    let got = r.t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(got.status, 400, "{}", got.body);
    let message = got.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("tools[0].vector_store_ids[0]"), "{message}");
    let body = json!({"model": r.agent, "input": "x", "tools": [{"type": "file_search"}]});
    let got = r.t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(got.status, 400, "{}", got.body);
    assert_eq!(got.body["error"]["param"], "tools[0].vector_store_ids", "{}", got.body);
    r.t.s.stop().await;
}

// ---------------------------------------------------------------- MCP tools

/// A server whose agent has an `mcp` tool `fake` (the fake-mcp server, on
/// 127.0.0.1: allowed), with `mcp` as its settings, in a session.
struct McpSetup {
    s: TestServer,
    fake: FakeUpstream,
    mcp: FakeMcp,
    agent: Uuid,
    session: Uuid,
}

async fn mcp_setup(mcp_def: impl FnOnce(&str) -> Value) -> McpSetup {
    let fake = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let agent = s.create_agent("Ada").await;
    let tool = json!({"name": "fake", "type": "mcp", "mcp": mcp_def(&mcp.url)});
    let r = s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let user = s.create_user("Bob").await;
    let session = s.create_session(&[agent.id], &[user.id]).await.id;
    McpSetup { s, fake, mcp, agent: agent.id, session }
}

impl McpSetup {
    async fn chat(&self, body: Value) -> types::ChatResponse {
        let body: types::ChatRequest = serde_json::from_value(body).unwrap();
        self.s.client.session_chat().id(self.session).body(body).send().await.unwrap().into_inner()
    }

    fn offered(&self, n: usize) -> Vec<String> {
        self.fake.requests()[n].body["tools"]
            .as_array()
            .map(|tools| tools.iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    }
}

#[tokio::test]
async fn an_agents_mcp_server_is_listed_and_its_tools_run_in_the_server() {
    let t = mcp_setup(|url| json!({"server_url": url, "allowed_tools": ["echo", "add", "fail"]})).await;
    t.fake.push(Behaviour::ToolCalls(vec![
        ("add".into(), r#"{"a": 2, "b": 3}"#.into()),
        ("echo".into(), r#"{"text": "hi"}"#.into()),
        ("fail".into(), r#"{"text": "out of paper"}"#.into()),
    ]));
    let answer = t.chat(json!({"messages": user("add and echo")})).await;
    assert_eq!(t.offered(0), ["add", "echo", "fail"], "the allowed tools of the server, by name");
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    let runs: Vec<_> =
        answer.tool_runs.iter().map(|r| (r.name.as_str(), r.output.as_deref(), r.error.as_deref())).collect();
    assert_eq!(
        runs,
        [("add", Some("5"), None), ("echo", Some("hi"), None), ("fail", None, Some("out of paper"))]
    );
    assert!(
        answer
            .tool_runs
            .iter()
            .all(|r| r.type_ == types::ToolRunType::Mcp && r.server.as_deref() == Some("fake"))
    );
    assert_eq!(t.mcp.counts().await, (1, 3), "one list, three calls");
    let told: Vec<String> = sent(&t.fake, 1)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(told, ["5", "hi", "error: out of paper"]);
    // A second turn lists from the cache.
    t.chat(json!({"messages": user("again")})).await;
    assert_eq!(t.mcp.counts().await.0, 1, "the list is cached");
    t.s.stop().await;
}

#[tokio::test]
async fn a_server_that_is_down_is_told_to_the_model_and_the_turn_goes_on() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let t = mcp_setup(|_| json!({"server_url": format!("http://{closed}/mcp")})).await;
    let started = std::time::Instant::now();
    let answer = t.chat(json!({"messages": user("hello")})).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    assert!(t.offered(0).is_empty());
    let system: Vec<String> = sent(&t.fake, 0)
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(system.iter().any(|s| s.contains("unavailable") && s.contains("MCP server fake")), "{system:?}");
    t.s.stop().await;
}

#[tokio::test]
async fn a_call_that_needs_approval_waits_across_a_restart_then_runs_or_is_denied() {
    let mut t =
        mcp_setup(|url| json!({"server_url": url, "require_approval": {"never": {"tool_names": ["echo"]}}}))
            .await;
    t.fake.push(Behaviour::ToolCalls(vec![
        ("add".into(), r#"{"a": 1, "b": 1}"#.into()),
        ("echo".into(), r#"{"text": "free"}"#.into()),
    ]));
    let answer = t.chat(json!({"messages": user("go")})).await;
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("approval_required"));
    assert!(answer.choices[0].message.tool_calls.is_none());
    assert_eq!(answer.pending_approvals.len(), 1);
    let pending = answer.pending_approvals[0].clone();
    assert_eq!((pending.tool.as_str(), pending.server.as_deref()), ("add", Some("fake")));
    assert_eq!(answer.tool_runs.len(), 1, "echo needs no approval: it ran");
    assert_eq!(t.mcp.counts().await.1, 1);

    // A chat that does not decide is refused, naming the call.
    let r =
        t.s.raw(
            "POST",
            &format!("/api/sessions/{}/chat", t.session),
            Some(&json!({"messages": user("and?")}).to_string()),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.to_string().contains(&pending.id), "{}", r.body);

    // The wait survives a restart; the approval runs the call, and the model goes on.
    t.s.restart().await;
    let answer = t.chat(json!({"approvals": [{"id": pending.id, "approve": true}]})).await;
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    assert_eq!(answer.tool_runs.len(), 1);
    assert_eq!(answer.tool_runs[0].output.as_deref(), Some("2"));
    assert_eq!(t.mcp.counts().await.1, 2);
    let last = sent(&t.fake, 1);
    assert_eq!(last.last().unwrap()["content"], "2", "the model read the approved call's result");

    // Denied: not run, and the model is told why.
    t.fake.push(Behaviour::ToolCall { name: "add".into(), arguments: r#"{"a": 5, "b": 5}"#.into() });
    let answer = t.chat(json!({"messages": user("once more")})).await;
    let id = answer.pending_approvals[0].id.clone();
    let bad =
        t.s.raw(
            "POST",
            &format!("/api/sessions/{}/chat", t.session),
            Some(&json!({"approvals": [{"id": "nope", "approve": true}]}).to_string()),
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let answer = t.chat(json!({"approvals": [{"id": id, "approve": false, "reason": "too costly"}]})).await;
    assert_eq!(answer.tool_runs[0].error.as_deref(), Some("the call was denied by a person: too costly"));
    assert_eq!(t.mcp.counts().await.1, 2, "a denied call does not run");
    let last = t.fake.requests().last().unwrap().body["messages"].as_array().unwrap().clone();
    assert_eq!(last.last().unwrap()["content"], "error: the call was denied by a person: too costly");
    t.s.stop().await;
}

#[tokio::test]
async fn a_response_with_an_mcp_tool_lists_asks_approval_and_continues_with_the_decision() {
    let t = mcp_setup(|url| json!({"server_url": url, "allowed_tools": []})).await;
    t.fake.push(Behaviour::ToolCall { name: "echo".into(), arguments: r#"{"text": "ping"}"#.into() });
    let mcp = json!({"type": "mcp", "server_label": "fakes", "server_url": t.mcp.url, "allowed_tools": ["echo", "add"]});
    let body = json!({"model": t.agent, "input": "ping it", "tools": [mcp]});
    let first = t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let output = first.body["output"].as_array().unwrap();
    assert_eq!(
        item_types(output),
        ["mcp_list_tools", "mcp_list_tools", "mcp_approval_request"],
        "{}",
        first.body
    );
    assert_eq!(output[0]["tools"], json!([]), "the agent's server, none allowed");
    let names: Vec<&str> =
        output[1]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "add"]);
    assert_eq!(output[1]["tools"][0]["annotations"]["idempotentHint"], true);
    let request = &output[2];
    assert_eq!((request["server_label"].as_str(), request["name"].as_str()), (Some("fakes"), Some("echo")));
    assert_eq!(first.body["tools"][0]["require_approval"], "always", "OpenAI's default, echoed");
    assert!(first.body["tools"][0].get("headers").is_none());
    assert_eq!(t.mcp.counts().await.1, 0);

    // Approved in the next response's input: the call runs there.
    let next = json!({"model": t.agent, "previous_response_id": first.body["id"], "tools": [mcp], "stream": true,
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": true}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/responses", t.s.base))
        .bearer_auth(&t.s.key)
        .json(&next)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events: Vec<Value> =
        read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await.iter().map(|e| e.json()).collect();
    let completed = &events.last().unwrap()["response"];
    assert_eq!(completed["status"], "completed", "{completed}");
    let output = completed["output"].as_array().unwrap();
    assert_eq!(
        item_types(output),
        ["mcp_list_tools", "mcp_list_tools", "mcp_call", "message"],
        "{completed}"
    );
    assert_eq!(output[2]["output"], "ping");
    assert_eq!(output[2]["status"], "completed");
    assert_eq!(t.mcp.counts().await.1, 1);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"response.mcp_list_tools.completed"), "{kinds:?}");
    assert!(kinds.contains(&"response.mcp_call.completed"), "the approved call's events: {kinds:?}");
    let done: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .map(|e| e["item"].clone())
        .collect();
    assert_eq!(Value::Array(done), completed["output"], "the items as streamed are the output");
    // The model read the result, after the history's call.
    let sent_last = t.fake.requests().last().unwrap().body["messages"].as_array().unwrap().clone();
    assert_eq!(sent_last.last().unwrap()["content"], "ping");
    t.s.stop().await;
}

#[tokio::test]
async fn a_task_prompt_step_runs_its_mcp_servers_tools() {
    let t = mcp_setup(|url| json!({"server_url": url})).await;
    t.fake.push(Behaviour::ToolCall { name: "add".into(), arguments: r#"{"a": 20, "b": 22}"#.into() });
    let api = agent_platform_tests::executions::Api::new(&t.s.base, &t.s.key);
    let task = api
        .task(
            t.agent,
            &json!({"name": "sum", "main": [{"prompt": "add 20 and 22", "tools": "all", "unwrap": true}],
                    "inherit_tools": true}),
        )
        .await;
    let e = api.start(task, json!({})).await;
    let id: Uuid = e["id"].as_str().unwrap().parse().unwrap();
    let e = api.wait_ended(id, std::time::Duration::from_secs(30)).await;
    assert_eq!(e["status"], "succeeded", "{e}");
    assert_eq!(e["output"], "the tool answered: 42");
    assert_eq!(t.mcp.counts().await.1, 1);
    t.s.stop().await;
}

#[tokio::test]
async fn a_responses_max_tool_calls_bounds_the_servers_calls() {
    let t = mcp_setup(|url| json!({"server_url": url})).await;
    t.fake.push(Behaviour::ToolCalls(vec![
        ("echo".into(), r#"{"text": "a"}"#.into()),
        ("echo".into(), r#"{"text": "b"}"#.into()),
    ]));
    let body = json!({"model": t.agent, "input": "twice", "max_tool_calls": 1});
    let r = t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "incomplete", "{}", r.body);
    assert_eq!(r.body["incomplete_details"]["reason"], "max_tool_calls");
    let calls: Vec<&Value> =
        r.body["output"].as_array().unwrap().iter().filter(|i| i["type"] == "mcp_call").collect();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c["status"] == "failed"), "{calls:?}");
    assert_eq!(t.mcp.counts().await.1, 0, "neither ran");
    t.s.stop().await;
}

#[tokio::test]
async fn an_api_call_tools_header_names_a_secret() {
    const KEY_ENV: &str = "E2E_LOOP_SECRETS_KEY";
    let fake = FakeUpstream::start().await;
    let target = HttpTarget::start().await;
    let host = target.host();
    let s = TestServer::with_config_env(
        |c| {
            c.models = fake_models(&fake, 10.0);
            c.tools.allowed_hosts = vec![host];
            c.secrets.key_env = Some(KEY_ENV.into());
        },
        &[(KEY_ENV, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")],
    )
    .await;
    let r = s.raw("POST", "/api/secrets", Some(r#"{"name": "WEATHER_TOKEN", "value": "s3cret"}"#)).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let agent = s.create_agent("Ada").await;
    let tool = json!({"name": "get_weather", "type": "api_call",
        "api_call": {"method": "GET", "url": format!("{}/weather", target.url()),
                     "headers": {"authorization": "Bearer {{ secrets.WEATHER_TOKEN }}"}}});
    let r = s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.body["api_call"]["headers"]["authorization"], "Bearer {{ secrets.WEATHER_TOKEN }}",
        "shown as written"
    );
    let user = s.create_user("Bob").await;
    let session = s.create_session(&[agent.id], &[user.id]).await.id;
    fake.push(Behaviour::ToolCall { name: "get_weather".into(), arguments: "{}".into() });
    let r = s
        .raw(
            "POST",
            &format!("/api/sessions/{session}/chat"),
            Some(&json!({"messages": user_msg("go")}).to_string()),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(target.received()[0].header("authorization"), Some("Bearer s3cret"));
    assert!(!r.body.to_string().contains("s3cret"), "the answer does not show the secret: {}", r.body);
    s.stop().await;
}

fn user_msg(text: &str) -> Value {
    user(text)
}

#[tokio::test]
async fn a_session_chat_runs_an_mcp_tool_an_http_tool_and_an_agents_file_search_in_one_round() {
    let fake = FakeUpstream::start().await;
    let target = HttpTarget::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let agent = s.create_agent("Ada").await;
    let tools = [
        json!({"name": "get_weather", "type": "api_call", "description": "The weather in a city",
               "api_call": {"method": "GET", "url": format!("{}/weather", target.url())}}),
        json!({"name": "fake", "type": "mcp", "mcp": {"server_url": mcp.url, "allowed_tools": ["echo"]}}),
        json!({"name": "search_notes", "type": "file_search", "description": "Searches the notes"}),
    ];
    for tool in tools {
        let r = s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let user = s.create_user("Bob").await;
    let doc = json!({"title": "Octopus", "content": "An octopus has three hearts."});
    let r = s.raw("POST", &format!("/api/agents/{}/docs", agent.id), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let doc = json!({"title": "Bob's octopus", "content": "Bob's octopus is called Paul."});
    let r = s.raw("POST", &format!("/api/users/{}/docs", user.id), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let stranger = s.create_user("Eve").await;
    let doc = json!({"title": "Eve's octopus", "content": "Eve's octopus is a secret octopus."});
    let r = s.raw("POST", &format!("/api/users/{}/docs", stranger.id), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let session = s.create_session(&[agent.id], &[user.id]).await.id;

    fake.push(Behaviour::ToolCalls(vec![
        ("get_weather".into(), r#"{"city": "Brest"}"#.into()),
        ("echo".into(), r#"{"text": "hi"}"#.into()),
        ("search_notes".into(), r#"{"query": "octopus"}"#.into()),
    ]));
    let body: types::ChatRequest =
        serde_json::from_value(json!({"messages": [{"role": "user", "content": "go"}]})).unwrap();
    let answer = s.client.session_chat().id(session).body(body).send().await.unwrap().into_inner();
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    let runs: Vec<(types::ToolRunType, &str)> =
        answer.tool_runs.iter().map(|r| (r.type_, r.name.as_str())).collect();
    assert_eq!(
        runs,
        [
            (types::ToolRunType::ApiCall, "get_weather"),
            (types::ToolRunType::Mcp, "echo"),
            (types::ToolRunType::FileSearch, "search_notes")
        ]
    );
    assert!(answer.tool_runs.iter().all(|r| r.error.is_none()), "{:?}", answer.tool_runs);
    assert_eq!(answer.tool_runs[1].output.as_deref(), Some("hi"));
    let found = answer.tool_runs[2].output.clone().unwrap();
    assert!(
        found.contains("three hearts") && found.contains("called Paul"),
        "the agent's and the user's: {found}"
    );
    assert!(!found.contains("secret"), "not another user's documents: {found}");
    assert_eq!(target.received().len(), 1);
    // Offered under its own name, with its description.
    let offered = &fake.requests()[0].body["tools"];
    let search =
        offered.as_array().unwrap().iter().find(|t| t["function"]["name"] == "search_notes").unwrap();
    assert_eq!(search["function"]["description"], "Searches the notes", "{offered}");
    s.stop().await;
}

#[tokio::test]
async fn a_sessions_own_mcp_server_is_offered_in_its_chats_until_it_is_removed() {
    let fake = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    let agent = s.create_agent("Ada").await;
    let server = json!({"name": "notes", "mcp": {"server_url": mcp.url, "allowed_tools": ["echo"]}});
    // Two servers of one name, and a header that is no header: 422s naming them.
    let bad = json!({"agent": agent.id, "mcp_servers": [server, server]});
    let r = s.raw("POST", "/api/sessions", Some(&bad.to_string())).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["detail"][0]["loc"], json!(["body", "mcp_servers", 1, "name"]), "{}", r.body);
    let mut headed = server.clone();
    headed["mcp"]["headers"] = json!({"bad header": "x"});
    let r = s
        .raw("POST", "/api/sessions", Some(&json!({"agent": agent.id, "mcp_servers": [headed]}).to_string()))
        .await;
    assert_eq!(r.status, 422, "{}", r.body);

    let r = s
        .raw("POST", "/api/sessions", Some(&json!({"agent": agent.id, "mcp_servers": [server]}).to_string()))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.body["mcp_servers"][0]["name"], "notes");
    let session: uuid::Uuid = serde_json::from_value(r.body["id"].clone()).unwrap();
    fake.push(Behaviour::ToolCall {
        name: "echo".into(),
        arguments: r#"{"text": "from the session"}"#.into(),
    });
    let chat = |text: &str| {
        let body: types::ChatRequest =
            serde_json::from_value(json!({"messages": [{"role": "user", "content": text}]})).unwrap();
        s.client.session_chat().id(session).body(body).send()
    };
    let answer = chat("go").await.unwrap().into_inner();
    assert_eq!(answer.tool_runs.len(), 1, "{answer:?}");
    assert_eq!(answer.tool_runs[0].server.as_deref(), Some("notes"));
    assert_eq!(answer.tool_runs[0].output.as_deref(), Some("from the session"));

    // Removed: no longer offered.
    let r = s
        .raw("PATCH", &format!("/api/sessions/{session}"), Some(&json!({"mcp_servers": []}).to_string()))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.get("mcp_servers").is_none(), "none: absent: {}", r.body);
    chat("again").await.unwrap();
    let offered = fake.requests().last().unwrap().body["tools"].clone();
    assert!(offered.is_null() || !offered.to_string().contains("echo"), "{offered}");
    s.stop().await;
}
