//! What a client does to executions: creating and reading tasks, starting
//! (with the input checked against the task's schema), waiting for input and
//! resuming, sleeping, cancelling in every state that allows it, the changes
//! the status table forbids (409), lists and the transitions' stream.

use std::time::{Duration, Instant};

use agent_platform_tests::sse::read_events;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Ctx, ENDS_WITHIN, assert_failed, assert_succeeded, lines, shared};

#[tokio::test]
async fn tasks_are_created_with_post_and_read_by_their_id() {
    let c = Ctx::new().await;
    let body =
        json!({"name": "summarise", "description": "d", "main": [{"log": "hi"}], "metadata": {"k": 1}});
    let (status, created) = c.api.call("POST", &format!("/api/agents/{}/tasks", c.agent), Some(&body)).await;
    assert_eq!(status, 201, "{created}");
    for key in ["name", "description", "main", "metadata"] {
        assert_eq!(created[key], body[key], "{key}");
    }
    assert_eq!(created["agent_id"], json!(c.agent));
    let id = created["id"].as_str().unwrap();
    let (status, got) = c.api.call("GET", &format!("/api/tasks/{id}"), None).await;
    assert_eq!((status, &got), (200, &created));
    let (status, again) = c.api.call("POST", &format!("/api/agents/{}/tasks", c.agent), Some(&body)).await;
    assert_eq!(status, 409, "a name already used in the agent: {again}");
    let (status, _) = c.api.call("GET", &format!("/api/tasks/{}", Uuid::now_v7()), None).await;
    assert_eq!(status, 404);
    let (status, _) = c.api.call("POST", &format!("/api/agents/{}/tasks", Uuid::now_v7()), Some(&body)).await;
    assert_eq!(status, 404, "a task of an agent that does not exist");
    let (status, _) = c
        .api
        .call("POST", &format!("/api/tasks/{}/executions", Uuid::now_v7()), Some(&json!({"input": {}})))
        .await;
    assert_eq!(status, 404, "an execution of a task that does not exist");
}

/// Steps are checked when the task is written: 422 at the step, saying what is wrong.
#[tokio::test]
async fn invalid_steps_are_422_at_the_step() {
    let c = Ctx::new().await;
    let cases = [
        (json!([{"log": "ok"}, {"frobnicate": 1}]), json!(["body", "main", 1])),
        (json!([{"evaluate": {"a": "1 +"}}]), json!(["body", "main", 0])),
        (json!([{"if": "x ==", "then": {"log": "x"}}]), json!(["body", "main", 0])),
        (
            json!([{"foreach": {"in": "_", "do": [{"log": "x"}, {"evaluate": {"b": "(("}}]}}]),
            json!(["body", "main", 0]),
        ),
        (json!([{"workflow": "nowhere", "arguments": {}}]), json!(["body", "main", 0])),
        (json!([{"log": "{{ unclosed"}]), json!(["body", "main", 0])),
    ];
    for (main, at) in cases {
        let body = json!({"name": format!("bad{}", Uuid::now_v7().simple()), "main": main});
        let (status, r) = c.api.call("POST", &format!("/api/agents/{}/tasks", c.agent), Some(&body)).await;
        assert_eq!(status, 422, "{main}: {r}");
        let detail = r["detail"].as_array().unwrap_or_else(|| panic!("{r}"));
        let prefix = at.as_array().unwrap();
        assert!(
            detail.iter().any(|d| d["loc"].as_array().is_some_and(|l| l.starts_with(prefix))
                && d["msg"].as_str().is_some_and(|m| !m.is_empty())),
            "{main}: expected a violation under {at}, got {r}"
        );
        // PUT checks the same.
        let (status, r) = c.api.call("PUT", &format!("/api/agents/{}/tasks", c.agent), Some(&body)).await;
        assert_eq!(status, 422, "PUT {main}: {r}");
    }
    // The deep one is at the foreach's second step, under `do`.
    let body =
        json!({"name": "deep", "main": [{"foreach": {"in": "_", "do": [{"log": "x"}, {"frobnicate": 1}]}}]});
    let (_, r) = c.api.call("POST", &format!("/api/agents/{}/tasks", c.agent), Some(&body)).await;
    let locs: Vec<Value> = r["detail"].as_array().unwrap().iter().map(|d| d["loc"].clone()).collect();
    assert!(locs.contains(&json!(["body", "main", 0, "foreach", "do", 1])), "{r}");
}

#[tokio::test]
async fn input_not_matching_the_input_schema_is_422_at_body_input() {
    let c = Ctx::new().await;
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let task = c.task(json!([{"log": "{{ _.text }}"}]), json!({"input_schema": schema})).await;
    let path = format!("/api/tasks/{task}/executions");
    let (status, r) = c.api.call("POST", &path, Some(&json!({"input": {"text": 5}}))).await;
    assert_eq!(status, 422, "{r}");
    let locs: Vec<Value> = r["detail"].as_array().unwrap().iter().map(|d| d["loc"].clone()).collect();
    assert_eq!(locs, [json!(["body", "input", "text"])], "{r}");
    let (status, r) = c.api.call("POST", &path, Some(&json!({"input": {}}))).await;
    assert_eq!(status, 422, "{r}");
    let loc = r["detail"][0]["loc"].as_array().cloned().unwrap_or_default();
    assert!(loc.starts_with(&[json!("body"), json!("input")]), "{r}");
    let (status, r) = c.api.call("GET", &path, None).await;
    assert_eq!((status, r["items"].as_array().map(Vec::len)), (200, Some(0)), "nothing started: {r}");
    let (e, _) = c.run(task, json!({"text": "fine"})).await;
    assert_succeeded(&e, json!("fine"));
}

#[tokio::test]
async fn wait_for_input_pauses_until_resumed_and_the_input_is_its_output() {
    let c = Ctx::new().await;
    let main = json!([
        {"evaluate": {"q": "'ok?'"}},
        {"wait_for_input": {"info": {"question": "_.q"}}},
        {"evaluate": {"got": "_.answer"}},
    ]);
    let task = c.task(main, json!({})).await;
    let e = c.start_until(task, json!({}), &["awaiting_input"]).await;
    let id = Ctx::id(&e);
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, false);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> main:1", "wait main:1"]);
    assert_eq!(ts[2]["output"], json!({"info": {"question": "ok?"}}));

    // Only `running` resumes it; it resumes once.
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {"answer": 42}})).await;
    assert_eq!(status, 200, "{body}");
    assert!(matches!(body["status"].as_str(), Some("running" | "succeeded")), "{body}");
    let e = c.api.wait_ended(id, ENDS_WITHIN).await;
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main:0 -> main:1",
            "wait main:1",
            "resume main:1 -> main:2",
            "step main:2 -> null",
            "finish",
        ]
    );
    assert_eq!(ts[3]["output"], json!({"answer": 42}));
    assert_succeeded(&e, json!({"got": 42}));
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {}})).await;
    assert_conflict(status, &body, "succeeded", "running");
}

#[tokio::test]
async fn sleep_shows_its_end_then_steps_with_null() {
    let c = Ctx::new().await;
    // A step first: then the execution is `running` (not `starting`) while it sleeps.
    let task = c
        .task(json!([{"log": "zzz"}, {"sleep": {"seconds": 1}}, {"evaluate": {"done": true}}]), json!({}))
        .await;
    let e = c.api.start(task, json!({})).await;
    let id = Ctx::id(&e);
    // While it sleeps: running, with the time it wakes, and no step committed.
    let deadline = Instant::now() + ENDS_WITHIN;
    let sleeping = loop {
        let e = c.api.execution(id).await;
        if !e["sleeping_until"].is_null() || e["status"] == "succeeded" {
            break e;
        }
        assert!(Instant::now() < deadline, "never seen sleeping: {e}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(sleeping["status"], "running", "{sleeping}");
    let until: chrono::DateTime<chrono::Utc> = sleeping["sleeping_until"].as_str().unwrap().parse().unwrap();
    let created: chrono::DateTime<chrono::Utc> = sleeping["created_at"].as_str().unwrap().parse().unwrap();
    let span = (until - created).num_milliseconds();
    assert!((900..5000).contains(&span), "sleeps 1 s from its start: {span} ms");
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {}})).await;
    assert_conflict(status, &body, "running", "running");

    let e = c.api.wait_ended(id, ENDS_WITHIN).await;
    assert!(chrono::Utc::now() >= until, "ended before its sleep did");
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(
        lines(&ts),
        [
            "init main:0 -> main:0",
            "step main:0 -> main:1",
            "step main:1 -> main:2",
            "step main:2 -> null",
            "finish"
        ]
    );
    assert_eq!(ts[2]["output"], Value::Null);
    assert_succeeded(&e, json!({"done": true}));
    assert!(e["sleeping_until"].is_null(), "{e}");
}

/// A 409 that names the execution's status and the one asked for.
#[track_caller]
fn assert_conflict(status: u16, body: &Value, from: &str, to: &str) {
    assert_eq!(status, 409, "{from} to {to}: {body}");
    let text = body.to_string();
    assert!(text.contains(from) && text.contains(to), "the 409 names {from} and {to}: {body}");
}

#[tokio::test]
async fn cancel_while_sleeping_stops_it_with_the_reason() {
    let c = Ctx::new().await;
    let task = c.task(json!([{"sleep": {"hours": 1}}, {"log": "never"}]), json!({})).await;
    let e = c.api.start(task, json!({})).await;
    let id = Ctx::id(&e);
    let deadline = Instant::now() + ENDS_WITHIN;
    while c.api.execution(id).await["sleeping_until"].is_null() {
        assert!(Instant::now() < deadline, "never seen sleeping");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, body) = c.api.update(id, json!({"status": "cancelled", "reason": "enough"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["status"].as_str(), body["error"].as_str()),
        (Some("cancelled"), Some("enough")),
        "{body}"
    );
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "cancelled"]);
    assert_eq!(ts[1]["output"], json!({"reason": "enough"}));
    let e = c.api.execution(id).await;
    assert!(e["sleeping_until"].is_null() && e["status"] == "cancelled", "{e}");
    // Ended: neither a cancel nor a resume changes it.
    let (status, body) = c.api.update(id, json!({"status": "cancelled"})).await;
    assert_conflict(status, &body, "cancelled", "cancelled");
    let (status, body) = c.api.update(id, json!({"status": "running"})).await;
    assert_conflict(status, &body, "cancelled", "running");
}

#[tokio::test]
async fn cancel_while_awaiting_input_without_a_reason() {
    let c = Ctx::new().await;
    let task = c.task(json!([{"wait_for_input": {"info": {}}}, {"log": "never"}]), json!({})).await;
    let e = c.start_until(task, json!({}), &["awaiting_input"]).await;
    let id = Ctx::id(&e);
    let (status, body) = c.api.update(id, json!({"status": "cancelled"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["status"].as_str(), body["error"].as_str()), (Some("cancelled"), Some("cancelled")));
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "wait main:0", "cancelled"]);
    assert_eq!(ts[2]["output"], Value::Null);
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {}})).await;
    assert_conflict(status, &body, "cancelled", "running");
}

/// A step in flight (an HTTP call that takes 30 s) is dropped by a cancel.
#[tokio::test]
async fn cancel_while_a_step_runs_drops_it_promptly() {
    let c = Ctx::new().await;
    let s = shared();
    let marker = Uuid::now_v7().simple().to_string();
    let tool = json!({"name": "slow", "type": "api_call",
                      "api_call": {"method": "POST", "url": format!("{}/slow/{marker}", s.target_url)}});
    let task =
        c.task(json!([{"tool": "slow", "arguments": {}}, {"log": "never"}]), json!({"tools": [tool]})).await;
    let e = c.api.start(task, json!({})).await;
    let id = Ctx::id(&e);
    let deadline = Instant::now() + ENDS_WITHIN;
    while !(s.received)().iter().any(|r| r.path.contains(&marker)) {
        assert!(
            Instant::now() < deadline,
            "the call never reached the target: {}",
            c.api.execution(id).await
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let asked = Instant::now();
    let (status, body) = c.api.update(id, json!({"status": "cancelled", "reason": "too slow"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the cancel waited for the step: {:?}",
        asked.elapsed()
    );
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "cancelled"]);
    // Nothing is committed after it, though the call would have answered by now.
    let e = c.api.execution(id).await;
    assert_eq!((e["status"].as_str(), e["error"].as_str()), (Some("cancelled"), Some("too slow")));
}

#[tokio::test]
async fn changes_the_status_table_forbids_are_409() {
    let c = Ctx::new().await;
    let (e, _) = c.run_steps(json!([{"log": "x"}]), json!({}), json!({})).await;
    let done = Ctx::id(&e);
    let (status, body) = c.api.update(done, json!({"status": "cancelled"})).await;
    assert_conflict(status, &body, "succeeded", "cancelled");
    let (e, ts) = c.run_steps(json!([{"error": "no"}]), json!({}), json!({})).await;
    assert_failed(&e, &ts, &["no"]);
    let failed = Ctx::id(&e);
    let (status, body) = c.api.update(failed, json!({"status": "cancelled"})).await;
    assert_conflict(status, &body, "failed", "cancelled");
    let (status, body) = c.api.update(failed, json!({"status": "running"})).await;
    assert_conflict(status, &body, "failed", "running");
    // Nothing but `cancelled` and `running` may be asked for.
    let (status, body) = c.api.update(done, json!({"status": "succeeded"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["detail"][0]["loc"], json!(["body", "status"]), "{body}");
    let (status, _) = c.api.update(Uuid::now_v7(), json!({"status": "cancelled"})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn executions_and_transitions_are_listed_paged_and_read_one_by_one() {
    let c = Ctx::new().await;
    let task = c.task(json!([{"log": "a"}, {"log": "b"}, {"log": "c"}]), json!({})).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let (e, _) = c.run(task, json!({"i": i})).await;
        ids.push(e["id"].clone());
    }
    let path = format!("/api/tasks/{task}/executions");
    let page = |q: &'static str| {
        let path = format!("{path}?{q}");
        let api = c.api.clone();
        async move {
            let (status, body) = api.call("GET", &path, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            body["items"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect::<Vec<_>>()
        }
    };
    assert_eq!(page("direction=asc&limit=2").await, ids[..2]);
    assert_eq!(page("direction=asc&limit=2&offset=2").await, ids[2..]);
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(page("direction=desc").await, newest_first);
    let (status, _) = c.api.call("GET", &format!("/api/tasks/{}/executions", Uuid::now_v7()), None).await;
    assert_eq!(status, 404);

    // Transitions: oldest first by default, paged, each readable by its id.
    let id: Uuid = ids[0].as_str().unwrap().parse().unwrap();
    let all = c.api.transitions(id).await;
    assert_eq!(all.len(), 5);
    let (_, body) = c.api.call("GET", &format!("/api/executions/{id}/transitions"), None).await;
    assert_eq!(body["items"].as_array().unwrap(), &all, "oldest first by default");
    let (_, body) =
        c.api.call("GET", &format!("/api/executions/{id}/transitions?limit=2&offset=1"), None).await;
    assert_eq!(body["items"].as_array().unwrap(), &all[1..3]);
    let (_, body) =
        c.api.call("GET", &format!("/api/executions/{id}/transitions?direction=desc&limit=1"), None).await;
    assert_eq!(body["items"][0], all[4]);
    for t in &all {
        let tid = t["id"].as_str().unwrap();
        let (status, got) = c.api.call("GET", &format!("/api/executions/{id}/transitions/{tid}"), None).await;
        assert_eq!((status, &got), (200, t));
    }
    // Another execution's transition is not one of this one's.
    let other = ids[1].as_str().unwrap();
    let tid = all[0]["id"].as_str().unwrap();
    let (status, _) = c.api.call("GET", &format!("/api/executions/{other}/transitions/{tid}"), None).await;
    assert_eq!(status, 404);
    let (status, _) =
        c.api.call("GET", &format!("/api/executions/{id}/transitions/{}", Uuid::now_v7()), None).await;
    assert_eq!(status, 404);
    let (status, _) =
        c.api.call("GET", &format!("/api/executions/{}/transitions", Uuid::now_v7()), None).await;
    assert_eq!(status, 404);
}

/// One server-sent event: its `id:` and its `data:` as JSON.
#[derive(Debug)]
struct Event {
    id: String,
    data: Value,
}

/// Reads the stream at `path` until it ends (or panics after `within`).
async fn read_stream(
    c: &Ctx,
    id: Uuid,
    last_event_id: Option<&str>,
    mut on_event: impl FnMut(&Event),
) -> Vec<Event> {
    let mut req = c
        .api
        .http
        .get(format!("{}/api/executions/{id}/transitions.stream", c.api.base))
        .bearer_auth(&c.api.key);
    if let Some(last) = last_event_id {
        req = req.header("last-event-id", last);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let mut events = Vec::new();
    read_events(resp, ENDS_WITHIN, |e| {
        let event = Event { id: e.id.clone().expect("every event has an id"), data: e.json() };
        on_event(&event);
        events.push(event);
    })
    .await;
    events
}

#[tokio::test]
async fn a_stream_dropped_by_its_client_while_the_execution_waits_stops_following_it() {
    let s = agent_platform_tests::TestServer::start().await;
    let c = Ctx::on(&s.base, &s.key).await;
    let task = c.task(json!([{"log": "a"}, {"wait_for_input": {"info": {}}}]), json!({})).await;
    let id = Ctx::id(&c.api.start(task, json!({})).await);
    c.api.wait_for(id, &["awaiting_input"], ENDS_WITHIN).await;
    let before = s.app().transition_followers();
    let url = format!("{}/api/executions/{id}/transitions.stream", c.api.base);
    let mut resp = reqwest::Client::new().get(url).bearer_auth(&c.api.key).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().expect("the transitions so far");
    assert!(String::from_utf8_lossy(&first).contains("data: "), "{first:?}");
    assert_eq!(s.app().transition_followers(), before + 1, "the stream follows the execution");
    drop(resp);
    // The execution still waits; the stream's task must not.
    let since = Instant::now();
    while s.app().transition_followers() != before {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "a stream dropped by its client still follows its waiting execution"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.api.execution(id).await["status"], "awaiting_input");
    s.stop().await;
}

#[tokio::test]
async fn the_stream_sends_every_transition_then_ends_and_resumes_after_last_event_id() {
    let c = Ctx::new().await;
    let task = c.task(json!([{"log": "a"}, {"wait_for_input": {"info": {}}}, {"log": "b"}]), json!({})).await;
    let e = c.api.start(task, json!({})).await;
    let id = Ctx::id(&e);
    // Resumes as soon as the stream shows the wait: the stream follows the run live.
    let api = c.api.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let events = read_stream(&c, id, None, move |ev| {
        if ev.data["type"] == "wait" {
            let _ = tx.send(());
        }
    });
    let resumer = async move {
        rx.recv().await.expect("a wait is streamed");
        let (status, body) = api.update(id, json!({"status": "running", "input": {"x": 1}})).await;
        assert_eq!(status, 200, "{body}");
    };
    let (events, ()) = tokio::join!(events, resumer);
    let listed = c.api.transitions(id).await;
    let data: Vec<Value> = events.iter().map(|e| e.data.clone()).collect();
    assert_eq!(data, listed, "every transition once, in order, as listed");
    assert!(
        events.iter().all(|e| e.data["id"].as_str() == Some(e.id.as_str())),
        "id: is the transition's id"
    );
    assert_eq!(events.last().unwrap().data["type"], "finish", "it ends after the terminal transition");

    // Resuming after the second event: the rest, then the end (the run is over).
    let rest = read_stream(&c, id, Some(&events[1].id), |_| {}).await;
    let rest: Vec<Value> = rest.into_iter().map(|e| e.data).collect();
    assert_eq!(rest, listed[2..]);
    let (status, _) =
        c.api.call("GET", &format!("/api/executions/{}/transitions.stream", Uuid::now_v7()), None).await;
    assert_eq!(status, 404);
    // A Last-Event-ID that is not a transition's id (a UUID), empty included, is a 422 naming it.
    for sent in ["", "7", "not-an-id"] {
        let resp = c
            .api
            .http
            .get(format!("{}/api/executions/{id}/transitions.stream", c.api.base))
            .bearer_auth(&c.api.key)
            .header("last-event-id", sent)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422, "Last-Event-ID {sent:?}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["detail"][0]["loc"], json!(["header", "last-event-id"]), "{body}");
    }
}

/// A sleeping execution ends at its original time after a restart, and a
/// waiting one still waits, then resumes.
#[tokio::test]
async fn sleeps_and_waits_survive_a_restart() {
    let mut s = agent_platform_tests::TestServer::start().await;
    let c = Ctx::on(&s.base, &s.key).await;
    let sleeper = c.task(json!([{"sleep": {"seconds": 2}}, {"evaluate": {"ok": true}}]), json!({})).await;
    let waiter =
        c.task(json!([{"wait_for_input": {"info": {}}}, {"evaluate": {"got": "_"}}]), json!({})).await;
    let asleep = Ctx::id(&c.api.start(sleeper, json!({})).await);
    let waiting = Ctx::id(&c.start_until(waiter, json!({}), &["awaiting_input"]).await);
    let deadline = Instant::now() + ENDS_WITHIN;
    let until = loop {
        let e = c.api.execution(asleep).await;
        if let Some(until) = e["sleeping_until"].as_str() {
            break until.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        }
        assert!(Instant::now() < deadline, "never seen sleeping: {e}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    s.restart().await;
    let c = Ctx { api: agent_platform_tests::executions::Api::new(&s.base, &s.key), agent: c.agent };
    let e = c.api.execution(waiting).await;
    assert_eq!(e["status"], "awaiting_input", "{e}");
    let (status, body) = c.api.update(waiting, json!({"status": "running", "input": {"x": 1}})).await;
    assert_eq!(status, 200, "{body}");
    let e = c.api.wait_ended(waiting, ENDS_WITHIN).await;
    assert_succeeded(&e, json!({"got": {"x": 1}}));
    let e = c.api.wait_ended(asleep, ENDS_WITHIN).await;
    assert!(chrono::Utc::now() >= until, "the sleep ended before its time");
    assert_succeeded(&e, json!({"ok": true}));
    for id in [asleep, waiting] {
        let ts = c.api.transitions(id).await;
        agent_platform_tests::executions::Api::checked(&ts, true);
    }
    assert_eq!(
        lines(&c.api.transitions(asleep).await),
        ["init main:0 -> main:0", "step main:0 -> main:1", "step main:1 -> null", "finish"]
    );
    s.stop().await;
}

/// An execution outlives its task and its agent: deleting them leaves it
/// readable by id, and one that waits still resumes and ends.
#[tokio::test]
async fn an_execution_outlives_its_task_and_agent() {
    let c = Ctx::new().await;
    let task =
        c.task(json!([{"wait_for_input": {"info": {}}}, {"evaluate": {"got": "_.x"}}]), json!({})).await;
    let path = format!("/api/tasks/{task}/executions");
    let body = json!({"input": {}, "metadata": {"team": "ops"}});
    let (status, e) = c.api.call("POST", &path, Some(&body)).await;
    assert_eq!(status, 201, "{e}");
    assert_eq!(e["metadata"], json!({"team": "ops"}));
    let id = Ctx::id(&e);
    c.api.wait_for(id, &["awaiting_input"], ENDS_WITHIN).await;
    let (status, _) = c.api.call("DELETE", &format!("/api/agents/{}/tasks/{task}", c.agent), None).await;
    assert_eq!(status, 204);
    assert_eq!(c.api.execution(id).await["status"], "awaiting_input");
    let (status, body) = c.api.update(id, json!({"status": "running", "input": {"x": 7}})).await;
    assert_eq!(status, 200, "{body}");
    let e = c.api.wait_ended(id, ENDS_WITHIN).await;
    assert_succeeded(&e, json!({"got": 7}));
    let (status, _) = c.api.call("DELETE", &format!("/api/agents/{}", c.agent), None).await;
    assert_eq!(status, 204);
    let e = c.api.execution(id).await;
    assert_eq!((e["status"].as_str(), &e["metadata"]), (Some("succeeded"), &json!({"team": "ops"})));
    let ts = c.api.transitions(id).await;
    agent_platform_tests::executions::Api::checked(&ts, true);
    assert_eq!(ts.len(), 5, "{:#?}", lines(&ts));
}
