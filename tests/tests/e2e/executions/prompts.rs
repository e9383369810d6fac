//! `prompt` and `tool_call` steps against the fake model provider (each test
//! scripts its answers, so each has its own server) and a local HTTP server
//! for `api_call` tools (its host allowed in `[tools] allowed_hosts`).

use std::time::{Duration, Instant};

use agent_platform::models::fake_upstream::{Behaviour, FakeUpstream};
use agent_platform_tests::executions::Api;
use agent_platform_tests::http_target::HttpTarget;
use agent_platform_tests::{TestServer, fake_models};
use serde_json::{Value, json};

use super::{Ctx, ENDS_WITHIN, assert_failed, assert_succeeded, lines};

struct Setup {
    s: TestServer,
    fake: FakeUpstream,
    target: HttpTarget,
    c: Ctx,
}

async fn setup() -> Setup {
    let fake = FakeUpstream::start().await;
    let target = HttpTarget::start().await;
    let host = target.host();
    let s = TestServer::with_config(|c| {
        c.models = fake_models(&fake, 10.0);
        c.tools.allowed_hosts = vec![host];
    })
    .await;
    let c = Ctx::on(&s.base, &s.key).await;
    Setup { s, fake, target, c }
}

fn function_tool() -> Value {
    json!({"name": "lookup", "type": "function", "description": "looks a city up",
           "function": {"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}})
}

fn api_tool(name: &str, method: &str, url: String) -> Value {
    json!({"name": name, "type": "api_call", "description": "calls a service",
           "api_call": {"method": method, "url": url, "headers": {"x-test": "yes"}}})
}

/// The arguments of a tool call as JSON, whether sent as an object or as JSON text.
fn arguments(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn a_prompt_sends_the_rendered_message_and_gives_the_answer() {
    let t = setup().await;
    t.fake.push(Behaviour::Text("Hello Ada".into()));
    t.fake.push(Behaviour::Text("unwrapped".into()));
    let main = json!([
        {"prompt": "Say hi to {{ input.name }}"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Again, {{ _.content }}"}],
         "unwrap": true, "settings": {"temperature": 0.25}},
    ]);
    let (e, ts) = t.c.run_steps(main, json!({}), json!({"name": "Ada"})).await;
    assert_eq!(
        lines(&ts),
        ["init main:0 -> main:0", "step main:0 -> main:1", "step main:1 -> null", "finish"]
    );
    assert_eq!(ts[1]["output"]["role"], "assistant", "{}", ts[1]["output"]);
    assert_eq!(ts[1]["output"]["content"], "Hello Ada");
    assert_succeeded(&e, json!("unwrapped"));
    let sent = t.fake.requests();
    assert_eq!(sent.len(), 2);
    let first = sent[0].body["messages"].as_array().unwrap();
    assert_eq!(first.last().unwrap()["content"], "Say hi to Ada");
    let second = &sent[1].body;
    let msgs = second["messages"].as_array().unwrap();
    assert!(
        msgs.iter().any(|m| m["role"] == "system" && m["content"].as_str().unwrap().contains("Be brief.")),
        "{second}"
    );
    assert_eq!(msgs.last().unwrap()["content"], "Again, Hello Ada");
    assert_eq!(second["temperature"].as_f64(), Some(0.25));
    assert_eq!(second["model"], "fake-model");
    t.s.stop().await;
}

#[tokio::test]
async fn a_model_failure_fails_the_step() {
    let t = setup().await;
    t.fake.push(Behaviour::Fail { status: 400, body: r#"{"error": {"message": "bad prompt"}}"#.into() });
    let (e, ts) = t.c.run_steps(json!([{"prompt": "x"}]), json!({}), json!({})).await;
    assert_failed(&e, &ts, &[]);
    t.s.stop().await;
}

/// The model calls a `function` tool: the execution waits with the call, and
/// the result given on resume goes back to the model.
#[tokio::test]
async fn a_function_tool_call_pauses_the_prompt_until_its_result_is_given() {
    let t = setup().await;
    t.fake.push(Behaviour::ToolCall { name: "lookup".into(), arguments: r#"{"q": "Paris"}"#.into() });
    t.fake.push(Behaviour::Text("It is 21 degrees".into()));
    let main = json!([{"prompt": "Weather in {{ input.city }}?", "tools": "all", "unwrap": true}]);
    let task = t.c.task(main, json!({"tools": [function_tool()]})).await;
    let e = t.c.start_until(task, json!({"city": "Paris"}), &["awaiting_input"]).await;
    let id = Ctx::id(&e);
    let ts = t.c.api.transitions(id).await;
    Api::checked(&ts, false);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "wait main:0"]);
    let call = &ts[1]["output"]["tool_call"];
    assert_eq!(call["name"], "lookup", "{}", ts[1]["output"]);
    assert_eq!(arguments(&call["arguments"]), json!({"q": "Paris"}));
    let call_id = call["id"].as_str().expect("the call has an id").to_owned();
    let offered = &t.fake.requests()[0].body["tools"];
    assert_eq!(offered[0]["function"]["name"], "lookup", "the tool is offered: {offered}");

    let (status, body) =
        t.c.api.update(id, json!({"status": "running", "input": {"result": {"temp": 21}}})).await;
    assert_eq!(status, 200, "{body}");
    let e = t.c.api.wait_ended(id, ENDS_WITHIN).await;
    let ts = t.c.api.transitions(id).await;
    Api::checked(&ts, true);
    assert_eq!(
        lines(&ts),
        ["init main:0 -> main:0", "wait main:0", "resume main:0 -> main:0", "step main:0 -> null", "finish"]
    );
    assert_succeeded(&e, json!("It is 21 degrees"));
    let sent = t.fake.requests();
    assert_eq!(sent.len(), 2);
    let msgs = sent[1].body["messages"].as_array().unwrap();
    let tool_msg =
        msgs.iter().find(|m| m["role"] == "tool").unwrap_or_else(|| panic!("no tool message: {msgs:?}"));
    assert_eq!(tool_msg["tool_call_id"], call_id.as_str());
    assert!(tool_msg["content"].as_str().unwrap().contains("21"), "{tool_msg}");
    t.s.stop().await;
}

#[tokio::test]
async fn a_tool_call_step_of_a_function_tool_waits_and_gives_the_result() {
    let t = setup().await;
    let main = json!([{"tool": "lookup", "arguments": {"q": "_.city"}}, {"evaluate": {"got": "_"}}]);
    let task = t.c.task(main, json!({"tools": [function_tool()]})).await;
    let e = t.c.start_until(task, json!({"city": "Oslo"}), &["awaiting_input"]).await;
    let id = Ctx::id(&e);
    let ts = t.c.api.transitions(id).await;
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "wait main:0"]);
    assert_eq!(ts[1]["output"]["tool_call"]["name"], "lookup");
    assert_eq!(arguments(&ts[1]["output"]["tool_call"]["arguments"]), json!({"q": "Oslo"}));
    let (status, body) = t.c.api.update(id, json!({"status": "running", "input": {"result": [7, 8]}})).await;
    assert_eq!(status, 200, "{body}");
    let e = t.c.api.wait_ended(id, ENDS_WITHIN).await;
    let ts = t.c.api.transitions(id).await;
    Api::checked(&ts, true);
    assert_succeeded(&e, json!({"got": [7, 8]}));
    assert!(t.fake.requests().is_empty(), "no model is asked");
    t.s.stop().await;
}

/// The model calls an `api_call` tool: the server makes the request itself and
/// sends the answer back to the model, without pausing.
#[tokio::test]
async fn an_api_call_tool_runs_on_the_server_and_its_answer_goes_to_the_model() {
    let t = setup().await;
    t.fake.push(Behaviour::ToolCall { name: "weather".into(), arguments: r#"{"city": "Paris"}"#.into() });
    t.fake.push(Behaviour::Text("sunny".into()));
    let tool = api_tool("weather", "POST", format!("{}/weather", t.target.url()));
    let main = json!([{"prompt": "Weather?", "tools": ["weather"], "unwrap": true}]);
    let (e, ts) = t.c.run_steps(main, json!({"tools": [tool]}), json!({})).await;
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> null", "finish"]);
    assert_succeeded(&e, json!("sunny"));
    let got = t.target.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].method.as_str(), got[0].path.as_str()), ("POST", "/weather"));
    assert_eq!(got[0].body, json!({"city": "Paris"}));
    assert_eq!(got[0].header("x-test"), Some("yes"), "the tool's headers are sent");
    assert_eq!(got[0].header("authorization"), None, "never the service's credentials");
    let msgs = t.fake.requests()[1].body["messages"].as_array().unwrap().clone();
    let tool_msg =
        msgs.iter().find(|m| m["role"] == "tool").unwrap_or_else(|| panic!("no tool message: {msgs:?}"));
    assert!(tool_msg["content"].as_str().unwrap().contains("/weather"), "the answer goes back: {tool_msg}");
    t.s.stop().await;
}

#[tokio::test]
async fn a_tool_call_step_of_an_api_call_tool_gives_status_headers_and_json() {
    let t = setup().await;
    let tool = api_tool("forecast", "GET", format!("{}/forecast", t.target.url()));
    let main = json!([{"tool": "forecast", "arguments": {"city": "_.city", "days": 2}}]);
    let (e, _) = t.c.run_steps(main, json!({"tools": [tool]}), json!({"city": "Oslo"})).await;
    assert_eq!(e["status"], "succeeded", "{e}");
    let out = &e["output"];
    assert_eq!(out["status"], 200, "{out}");
    assert!(out["headers"].is_object(), "{out}");
    assert_eq!(out["json"]["method"], "GET", "{out}");
    let query = out["json"]["query"].as_str().unwrap();
    assert!(
        query.contains("city=Oslo") && query.contains("days=2"),
        "arguments go in the query of a GET: {query}"
    );
    t.s.stop().await;
}

#[tokio::test]
async fn an_api_call_to_a_host_not_allowed_fails_naming_the_setting_and_a_model_is_told() {
    let t = setup().await;
    // `127.0.0.2` is a loopback address too, but not the allowed host `127.0.0.1`.
    let port = t.target.url().rsplit(':').next().unwrap().to_owned();
    let tool = api_tool("sneaky", "POST", format!("http://127.0.0.2:{port}/x"));
    let (e, ts) = t
        .c
        .run_steps(json!([{"tool": "sneaky", "arguments": {}}]), json!({"tools": [tool.clone()]}), json!({}))
        .await;
    assert_failed(&e, &ts, &["tools.allowed_hosts"]);
    // Called by the model: the model is told why, and answers on.
    t.fake.push(Behaviour::ToolCall { name: "sneaky".into(), arguments: "{}".into() });
    t.fake.push(Behaviour::Text("I may not call it".into()));
    let (e, _) =
        t.c.run_steps(
            json!([{"prompt": "go", "tools": "all", "unwrap": true}]),
            json!({"tools": [tool]}),
            json!({}),
        )
        .await;
    assert_succeeded(&e, json!("I may not call it"));
    let told = t.fake.requests().last().unwrap().body["messages"].to_string();
    assert!(told.contains("is not allowed") && told.contains("tools.allowed_hosts"), "{told}");
    assert!(t.target.received().is_empty(), "nothing reached the host");
    t.s.stop().await;
}

/// A server with no allowed host (the default) calls no loopback, link-local
/// or private host (public hosts need no entry, but the tests do not reach out).
#[tokio::test]
async fn by_default_no_local_host_is_allowed() {
    let target = HttpTarget::start().await;
    let s = TestServer::start().await;
    let c = Ctx::on(&s.base, &s.key).await;
    let tool = api_tool("t", "POST", format!("{}/x", target.url()));
    let (e, ts) =
        c.run_steps(json!([{"tool": "t", "arguments": {}}]), json!({"tools": [tool]}), json!({})).await;
    assert_failed(&e, &ts, &["tools.allowed_hosts"]);
    assert!(target.received().is_empty());
    s.stop().await;
}

/// A cancel drops a model call under way.
#[tokio::test]
async fn cancel_while_the_model_answers() {
    let t = setup().await;
    t.fake.push(Behaviour::Hang(Duration::from_secs(8)));
    let task = t.c.task(json!([{"prompt": "slow"}, {"log": "never"}]), json!({})).await;
    let e = t.c.api.start(task, json!({})).await;
    let id = Ctx::id(&e);
    let deadline = Instant::now() + ENDS_WITHIN;
    while t.fake.requests().is_empty() {
        assert!(Instant::now() < deadline, "the prompt never reached the model");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = t.c.api.update(id, json!({"status": "cancelled", "reason": "stop"})).await;
    assert_eq!(status, 200, "{body}");
    let ts = t.c.api.transitions(id).await;
    Api::checked(&ts, true);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "cancelled"]);
    t.s.stop().await;
}

/// An api_call that outlasts its tool's `timeout_s` fails the step (the
/// target answers after 30 s; the tool waits 1 s).
#[tokio::test]
async fn an_api_call_past_its_timeout_fails_the_step() {
    let t = setup().await;
    let mut tool = api_tool("slow", "POST", format!("{}/slow", t.target.url()));
    tool["api_call"]["timeout_s"] = json!(1);
    let started = Instant::now();
    let (e, ts) =
        t.c.run_steps(json!([{"tool": "slow", "arguments": {}}]), json!({"tools": [tool]}), json!({})).await;
    assert_failed(&e, &ts, &["timeout_s"]);
    assert!(started.elapsed() < Duration::from_secs(15), "the call was not cut at its timeout");
    assert_eq!(t.target.received().len(), 1, "called once");
    t.s.stop().await;
}

/// A `file_search` tool searches the agent's documents: called by a
/// `tool_call` step (its output the passages found), and offered to a
/// `prompt` step's model, which reads what it found.
#[tokio::test]
async fn a_file_search_tool_searches_the_agents_documents_in_tool_call_and_prompt_steps() {
    let t = setup().await;
    let doc = json!({"title": "Tides", "content": "The harbour of Brest has the highest tides in France."});
    let r = t.s.raw("POST", &format!("/api/agents/{}/docs", t.c.agent), Some(&doc.to_string())).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let notes = json!({"name": "notes", "type": "file_search"});
    let (e, _) =
        t.c.run_steps(
            json!([{"tool": "notes", "arguments": {"query": "'highest tides'"}}]),
            json!({"tools": [notes]}),
            json!({}),
        )
        .await;
    assert_eq!(e["status"], "succeeded", "{e}");
    assert!(e["output"].to_string().contains("highest tides in France"), "{e}");

    t.fake.push(Behaviour::ToolCall { name: "notes".into(), arguments: r#"{"query": "tides"}"#.into() });
    t.fake.push(Behaviour::Text("Brest".into()));
    let (e, _) = t
        .c
        .run_steps(json!([{"prompt": "Where?", "tools": ["notes"]}]), json!({"tools": [notes]}), json!({}))
        .await;
    assert_succeeded(&e, json!({"role": "assistant", "content": "Brest"}));
    let told = t.fake.requests().last().unwrap().body["messages"].clone();
    assert!(told.to_string().contains("highest tides in France"), "the model read the passage: {told}");
    t.s.stop().await;
}
