//! Background responses (`background: true` on `/v1/responses`): queued,
//! run by the server to the end with the tools of an MCP server (the
//! fake-mcp process), followed and re-attached by their events, cancelled
//! mid-call, and resumed after the server is killed mid-round — without
//! running a committed call again, and running an in-flight call again only
//! when its tool is idempotent.

use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::mcp::FakeMcp;
use agent_platform_tests::sse::{CHAT_STREAM_WITHIN, read_events};
use agent_platform_tests::{Process, TestServer, fake_models, types};
use serde_json::{Value, json};

/// Waits (at most 20 s) until `ready` says so; panics naming `what`.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready().await {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The events of `GET /v1/responses/{id}?stream=true` (after `after`), to the end.
async fn follow(base: &str, key: &str, id: &str, after: Option<i64>) -> Vec<Value> {
    let query = match after {
        Some(n) => format!("stream=true&starting_after={n}"),
        None => "stream=true".into(),
    };
    let resp = reqwest::Client::new()
        .get(format!("{base}/v1/responses/{id}?{query}"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    read_events(resp, CHAT_STREAM_WITHIN, |_| {}).await.iter().map(|e| e.json()).collect()
}

fn mcp_tool(url: &str) -> Value {
    json!({"type": "mcp", "server_label": "fake", "server_url": url, "require_approval": "never"})
}

fn item_types(output: &Value) -> Vec<String> {
    output.as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap().to_owned()).collect()
}

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    mcp: FakeMcp,
}

async fn setup() -> Setup {
    let fake = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
    })
    .await;
    Setup { s, fake, mcp }
}

impl Setup {
    /// Creates a background response through the generated client.
    async fn create(&self, body: Value) -> types::ModelResponse {
        let body: types::CreateResponseRequest = serde_json::from_value(body).unwrap();
        self.s.client.openai_response_create().body(body).send().await.unwrap().into_inner()
    }
}

#[tokio::test]
async fn a_background_response_is_queued_runs_its_tools_to_the_end_and_its_events_replay() {
    let t = setup().await;
    t.fake.push(Behaviour::ToolCalls(vec![
        ("echo".into(), r#"{"text": "one"}"#.into()),
        ("fail".into(), r#"{"text": "out of paper"}"#.into()),
    ]));
    t.fake.push(Behaviour::ToolCalls(vec![("add".into(), r#"{"a": 2, "b": 3}"#.into())]));
    t.fake.push(Behaviour::Text("all done".into()));
    let created =
        t.create(json!({"model": "fake-model", "input": "go", "background": true, "tools": [mcp_tool(&t.mcp.url)]}))
            .await;
    assert_eq!(created.status, "queued");
    assert!(created.background);
    assert!(created.output.is_empty());

    let events = follow(&t.s.base, &t.s.key, &created.id, None).await;
    let numbers: Vec<i64> = events.iter().map(|e| e["sequence_number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, (0..events.len() as i64).collect::<Vec<_>>(), "numbered from 0, in order");
    assert_eq!(events[0]["type"], "response.created");
    assert_eq!(events[0]["response"]["status"], "queued");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{last}");
    let response = &last["response"];
    assert_eq!(
        item_types(&response["output"]),
        ["mcp_list_tools", "mcp_call", "mcp_call", "mcp_call", "message"],
        "{response}"
    );
    assert_eq!(response["output"][1]["output"], "one");
    // The tool's own failure (its isError text), as OpenAI shows one.
    let failed = &response["output"][2]["error"];
    assert_eq!(failed["type"], "mcp_tool_execution_error", "{failed}");
    assert_eq!(failed["content"][0]["text"], "out of paper", "{failed}");
    assert_eq!(response["output"][3]["output"], "5");
    assert_eq!(agent_platform_tests::output_text(response), "all done");
    assert_eq!((t.mcp.calls_of("echo").await, t.mcp.calls_of("add").await), (1, 1));
    let done: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .map(|e| e["item"].clone())
        .collect();
    assert_eq!(Value::Array(done), response["output"], "the items as streamed are the output");

    // Polled: the same response; attached again after event 4: the same events from 5 on.
    let got =
        t.s.client.openai_response_get().response_id(created.id.as_str()).send().await.unwrap().into_inner();
    assert_eq!(got.status, "completed");
    let ids =
        |items: Vec<Value>| items.iter().map(|i| i["id"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let got_items = serde_json::to_value(&got.output).unwrap().as_array().unwrap().clone();
    assert_eq!(ids(got_items), ids(response["output"].as_array().unwrap().clone()));
    let again = follow(&t.s.base, &t.s.key, &created.id, Some(4)).await;
    assert_eq!(again, events[5..], "re-attached after sequence number 4");

    // Ended: cancelling answers it as it is; deleting it is allowed.
    let cancelled =
        t.s.client.openai_response_cancel().response_id(created.id.as_str()).send().await.unwrap();
    assert_eq!(cancelled.into_inner().status, "completed");
    let r = t.s.raw("DELETE", &format!("/v1/responses/{}", created.id), None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    t.s.stop().await;
}

#[tokio::test]
async fn a_background_response_needs_store_and_only_background_responses_cancel() {
    let t = setup().await;
    let body = json!({"model": "fake-model", "input": "go", "background": true, "store": false});
    let r = t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["param"], "store", "{}", r.body);
    t.fake.push(Behaviour::Text("hi".into()));
    let body = json!({"model": "fake-model", "input": "go"});
    let r = t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["background"], false);
    let id = r.body["id"].as_str().unwrap();
    let r = t.s.raw("POST", &format!("/v1/responses/{id}/cancel"), None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("background"), "{}", r.body);
    // A foreground response's events replay too, ended.
    let events = follow(&t.s.base, &t.s.key, id, None).await;
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    let r = t.s.raw("POST", "/v1/responses/resp_0123456789abcdef0123456789abcdef/cancel", None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    t.s.stop().await;
}

#[tokio::test]
async fn a_background_response_cancelled_mid_call_stops_and_its_conversation_goes_on() {
    let t = setup().await;
    t.fake.push(Behaviour::ToolCalls(vec![("slow".into(), r#"{"ms": 60000}"#.into())]));
    let created =
        t.create(json!({"model": "fake-model", "input": "go", "background": true, "tools": [mcp_tool(&t.mcp.url)]}))
            .await;
    until("the slow call begins", || async { t.mcp.calls_of("slow").await == 1 }).await;
    let r = t.s.raw("DELETE", &format!("/v1/responses/{}", created.id), None).await;
    assert_eq!(r.status, 409, "a running response is cancelled before it is deleted: {}", r.body);
    let cancelled =
        t.s.client
            .openai_response_cancel()
            .response_id(created.id.as_str())
            .send()
            .await
            .unwrap()
            .into_inner();
    assert_eq!(cancelled.status, "cancelled");
    let events = follow(&t.s.base, &t.s.key, &created.id, None).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.output_item.done", "no final event after a cancel: {last}");
    let got = t.s.raw("GET", &format!("/v1/responses/{}", created.id), None).await;
    assert_eq!(got.body["status"], "cancelled", "{}", got.body);
    let output = &got.body["output"];
    assert_eq!(item_types(output), ["mcp_list_tools", "mcp_call"], "{output}");
    assert_eq!(output[1]["error"]["message"], "not run: the response was cancelled", "{output}");
    assert_eq!(output[1]["error"]["type"], "mcp_protocol_error", "not the tool's own failure: {output}");
    // The conversation goes on after it: its call is answered.
    t.fake.push(Behaviour::Text("next".into()));
    let body = json!({"model": "fake-model", "input": "and now?", "previous_response_id": created.id});
    let r = t.s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "completed");
    assert_eq!(t.mcp.calls_of("slow").await, 1);
    t.s.stop().await;
}

#[tokio::test]
async fn a_background_response_goes_on_after_kill_9_without_running_a_call_twice() {
    let upstream = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    upstream.push(Behaviour::ToolCalls(vec![("echo".into(), r#"{"text": "one"}"#.into())]));
    upstream.push(Behaviour::ToolCalls(vec![
        ("wait".into(), r#"{"ms": 2000}"#.into()),
        ("slow".into(), r#"{"ms": 60000}"#.into()),
    ]));
    upstream.push(Behaviour::Text("done after all".into()));
    let upstream_url = upstream.base_url();
    let env = [
        ("OPENAI_BASE_URL", upstream_url.as_str()),
        ("OPENAI_API_KEY", "sk-background"),
        ("AGENT_PLATFORM_TOOLS_ALLOWED_HOSTS", "127.0.0.1"),
        // On PostgreSQL the next server takes the run over once its lease expires.
        ("AGENT_PLATFORM_EXECUTIONS_LEASE_S", "2"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let p = Process::serve_with_env(&data, &env);
    let key = p.key.clone().expect("a first key");
    let body =
        json!({"model": "fake-model", "input": "go", "background": true, "tools": [mcp_tool(&mcp.url)]});
    let http = reqwest::Client::new();
    let created: Value = http
        .post(format!("{}/v1/responses", p.base))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["status"], "queued", "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    until("both calls of the second round begin", || async {
        mcp.calls_of("wait").await == 1 && mcp.calls_of("slow").await == 1
    })
    .await;
    p.kill();

    let p = Process::serve_with_env(&data, &env);
    let events = follow(&p.base, &key, &id, None).await;
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed", "{last}");
    let output = &last["response"]["output"];
    assert_eq!(
        item_types(output),
        ["mcp_list_tools", "mcp_call", "mcp_call", "mcp_call", "message"],
        "{output}"
    );
    assert_eq!(output[1]["output"], "one", "committed before the kill: {output}");
    assert_eq!(output[2]["output"], "slept 2000 ms", "idempotent: run again: {output}");
    let slow = output[3]["error"]["message"].as_str().unwrap_or_default();
    assert!(slow.starts_with("interrupted:"), "not idempotent: answered, not run again: {output}");
    assert_eq!(agent_platform_tests::output_text(&last["response"]), "done after all");
    assert_eq!(mcp.calls_of("echo").await, 1, "a committed call never runs again");
    assert_eq!(mcp.calls_of("wait").await, 2);
    assert_eq!(mcp.calls_of("slow").await, 1);
    let told = upstream.requests().last().unwrap().body["messages"].clone();
    assert!(told.to_string().contains("interrupted: the server stopped"), "the model was told: {told}");
    p.stop();
}

#[tokio::test]
async fn a_session_run_runs_the_agents_tools_in_the_background_and_waits_for_approvals() {
    let t = setup().await;
    let agent = t.s.create_agent("Ada").await;
    let tool = json!({"name": "fake", "type": "mcp",
        "mcp": {"server_url": t.mcp.url, "allowed_tools": ["echo", "add"], "require_approval": {"never": {"tool_names": ["echo"]}}}});
    let r = t.s.raw("POST", &format!("/api/agents/{}/tools", agent.id), Some(&tool.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let user = t.s.create_user("Bob").await;
    let session = t.s.create_session(&[agent.id], &[user.id]).await.id;
    let run_body = |v: Value| -> types::SessionRunRequest { serde_json::from_value(v).unwrap() };

    t.fake.push(Behaviour::ToolCalls(vec![("echo".into(), r#"{"text": "hello"}"#.into())]));
    t.fake.push(Behaviour::ToolCalls(vec![("add".into(), r#"{"a": 1, "b": 2}"#.into())]));
    let body = run_body(json!({"messages": [{"role": "user", "content": "go"}]}));
    let run = t.s.client.session_run_create().id(session).body(body).send().await.unwrap().into_inner();
    assert_eq!(run.status, "queued");
    let events = follow(&t.s.base, &t.s.key, &run.id, None).await;
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    let got =
        t.s.client.session_run_get().id(session).run_id(run.id.as_str()).send().await.unwrap().into_inner();
    assert_eq!(got.status, "completed");
    let roles: Vec<String> = got.messages.iter().map(|m| format!("{:?}", m.role).to_lowercase()).collect();
    assert_eq!(roles, ["assistant", "tool", "assistant"], "{:?}", got.messages);
    assert_eq!(got.messages[1].content, "hello");
    assert_eq!(got.pending_approvals.len(), 1, "add waits for a person");
    let pending = got.pending_approvals[0].clone();
    assert_eq!((pending.tool.as_str(), pending.server.as_deref()), ("add", Some("fake")));
    assert_eq!(t.mcp.calls_of("add").await, 0);

    // The next run carries the decision: the call runs, and the model goes on.
    t.fake.push(Behaviour::Text("three".into()));
    let body = run_body(json!({"approvals": [{"id": pending.id, "approve": true}]}));
    let next = t.s.client.session_run_create().id(session).body(body).send().await.unwrap().into_inner();
    let events = follow(&t.s.base, &t.s.key, &next.id, None).await;
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    let got =
        t.s.client.session_run_get().id(session).run_id(next.id.as_str()).send().await.unwrap().into_inner();
    assert_eq!(got.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>(), ["3", "three"]);
    assert!(got.pending_approvals.is_empty());
    assert_eq!(t.mcp.calls_of("add").await, 1);
    // Cancelling a run that ended answers it as it is.
    let same = t.s.client.session_run_cancel().id(session).run_id(next.id.as_str()).send().await.unwrap();
    assert_eq!(same.into_inner().status, "completed");

    // Errors: another session's run is unknown here; an agent not of the session is a 400 naming it.
    let stranger = t.s.create_agent("Max").await;
    let other = t.s.create_session(&[stranger.id], &[user.id]).await.id;
    let r = t.s.raw("GET", &format!("/api/sessions/{other}/runs/{}", next.id), None).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let go = json!({"messages": [{"role": "user", "content": "go"}]}).to_string();
    let r =
        t.s.raw(
            "POST",
            &format!("/api/sessions/{session}/runs"),
            Some(&json!({"messages": [{"role": "user", "content": "go"}], "agent": stranger.id}).to_string()),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.to_string().contains("agent"), "{}", r.body);
    let r = t.s.raw("POST", &format!("/api/sessions/{}/runs", uuid::Uuid::now_v7()), Some(&go)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r =
        t.s.raw("POST", &format!("/api/sessions/{session}/runs"), Some(&json!({"messages": []}).to_string()))
            .await;
    assert_eq!(r.status, 422, "{}", r.body);
    t.s.stop().await;
}

#[tokio::test]
async fn a_tenant_at_its_limit_of_background_responses_gets_a_429_until_one_ends() {
    let fake = FakeUpstream::start().await;
    let mcp = FakeMcp::start();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec!["127.0.0.1".into()];
        c.tools.background_max_per_tenant = 1;
    })
    .await;
    fake.push(Behaviour::ToolCalls(vec![("slow".into(), r#"{"ms": 60000}"#.into())]));
    let body =
        json!({"model": "fake-model", "input": "go", "background": true, "tools": [mcp_tool(&mcp.url)]});
    let first = s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let second = s.raw("POST", "/v1/responses", Some(&body.to_string())).await;
    assert_eq!(second.status, 429, "{}", second.body);
    assert!(second.body.to_string().contains("tools.background_max_per_tenant"), "{}", second.body);
    let id = first.body["id"].as_str().unwrap();
    let r = s.raw("POST", &format!("/v1/responses/{id}/cancel"), None).await;
    assert_eq!(r.body["status"], "cancelled", "{}", r.body);
    fake.push(Behaviour::Text("now".into()));
    let third = s
        .raw(
            "POST",
            "/v1/responses",
            Some(&json!({"model": "fake-model", "input": "go", "background": true}).to_string()),
        )
        .await;
    assert_eq!(third.status, 200, "one ended: room again: {}", third.body);
    s.stop().await;
}
