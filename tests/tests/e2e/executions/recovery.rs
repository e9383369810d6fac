//! What an operator sees of executions that the server cannot finish: one
//! whose step is under way each time the server dies is failed after
//! `executions.max_step_attempts` deaths instead of running again; the
//! `agent-platform executions cancel|fail` command ends one while no server
//! runs; and what a tenant may have under way is bounded (429 past it).

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use agent_platform_tests::executions::Api;
use agent_platform_tests::{Process, TestServer};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{Ctx, ENDS_WITHIN, assert_failed, lines};

/// A TCP server that takes every connection and never answers: an `api_call`
/// to it is under way until its timeout. Each connection is reported.
fn silent_listener() -> (String, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            // Reported once the request has started to arrive: the step is in flight.
            let _ = conn.read(&mut [0u8; 64]);
            held.push(conn);
            if tx.send(()).is_err() {
                return;
            }
        }
    });
    (host, rx)
}

/// The environment of a server whose `api_call`s may reach `host` and wait
/// for it for a long time; on PostgreSQL, leases of 1 s (a dead server's are
/// taken over at once).
fn env(host: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AGENT_PLATFORM_TOOLS_API_CALL_ALLOWED_HOSTS", host.to_owned()),
        ("AGENT_PLATFORM_EXECUTIONS_API_CALL_TIMEOUT_S", "600".to_owned()),
        ("AGENT_PLATFORM_EXECUTIONS_LEASE_S", "1".to_owned()),
    ]
}

fn serve(data: &Path, env: &[(&'static str, String)]) -> Process {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Process::serve_with_env(data, &env)
}

/// A task of one `tool_call` step whose `api_call` goes to `host` and hangs.
async fn hanging_task(api: &Api, host: &str) -> Uuid {
    let agent = api.agent("Runner").await;
    let tool = json!({"name": "hang", "type": "api_call", "description": "never answers",
                      "api_call": {"method": "POST", "url": format!("http://{host}/hang")}});
    let body = json!({"name": "hangs", "main": [{"evaluate": {"x": 1}}, {"tool": "hang", "arguments": {}}],
                      "tools": [tool]});
    api.task(agent, &body).await
}

/// Waits until the listener took the step's request (at most 30 s).
fn in_flight(calls: &mpsc::Receiver<()>) {
    calls.recv_timeout(Duration::from_secs(30)).expect("the api_call step reached the listener");
}

/// A step under way at each of three SIGKILLs (the default
/// `max_step_attempts`) is not run a fourth time: the execution fails saying
/// so. A clean stop (SIGTERM) in between is not counted.
#[tokio::test]
async fn an_execution_whose_step_was_under_way_through_three_deaths_fails_instead_of_running_again() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (host, calls) = silent_listener();
    let env = env(&host);
    let p = serve(&data, &env);
    let key = p.key.clone().unwrap();
    let api = Api::new(&p.base, &key);
    let task = hanging_task(&api, &host).await;
    let id = Ctx::id(&api.start(task, json!({})).await);
    in_flight(&calls);
    p.kill();
    // A clean stop while the step runs: not a death.
    let p = serve(&data, &env);
    in_flight(&calls);
    p.stop();
    for _ in 0..2 {
        let p = serve(&data, &env);
        in_flight(&calls);
        p.kill();
    }
    let p = serve(&data, &env);
    let api = Api::new(&p.base, &key);
    let e = api.wait_ended(id, ENDS_WITHIN).await;
    let ts = api.transitions(id).await;
    assert_failed(
        &e,
        &ts,
        &["the server stopped 3 times while running this step", "executions.max_step_attempts"],
    );
    Api::checked(&ts, true);
    assert_eq!(lines(&ts), ["init main:0 -> main:0", "step main:0 -> main:1", "error"]);
    let at = &ts[2]["current"];
    assert_eq!((&at["workflow"], &at["step"]), (&json!("main"), &json!(1)), "the step under way: {at}");
    assert!(calls.try_recv().is_err(), "the step was not run a fifth time");
    p.stop();
}

/// Runs `agent-platform executions <args> --data-dir <data>`: whether it
/// succeeded, and what it printed.
fn cli(data: &Path, args: &[&str]) -> (bool, String) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["executions".as_ref()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    all.extend(["--data-dir".as_ref(), data.as_os_str()]);
    let out = agent_platform_tests::run_to_exit(&all, Duration::from_secs(60));
    (out.status.success(), format!("{}{}", out.stdout, out.stderr))
}

/// With the server stopped, `executions fail` and `executions cancel` end
/// executions (one running a step, one waiting for input) as a client's
/// cancel would; the next start runs neither.
#[tokio::test]
async fn the_cli_cancels_or_fails_an_execution_while_the_server_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (host, calls) = silent_listener();
    let env = env(&host);
    let p = serve(&data, &env);
    let key = p.key.clone().unwrap();
    let api = Api::new(&p.base, &key);
    let hangs = Ctx::id(&api.start(hanging_task(&api, &host).await, json!({})).await);
    let agent = api.agent("Waiter").await;
    let waits = api
        .task(agent, &json!({"name": "waits", "main": [{"wait_for_input": {"info": {}}}, {"log": "no"}]}))
        .await;
    let waits = Ctx::id(&api.start(waits, json!({})).await);
    api.wait_for(waits, &["awaiting_input"], ENDS_WITHIN).await;
    in_flight(&calls);
    p.kill();

    let (ok, out) = cli(&data, &["fail", &hangs.to_string(), "--reason", "poisoned"]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("execution {hangs} is failed: poisoned")), "{out}");
    let (ok, out) = cli(&data, &["fail", &waits.to_string()]);
    assert!(!ok && out.contains("awaiting_input") && out.contains("cancel it instead"), "{out}");
    let (ok, out) = cli(&data, &["cancel", &waits.to_string()]);
    assert!(ok && out.contains("is cancelled"), "{out}");
    let (ok, out) = cli(&data, &["cancel", &hangs.to_string()]);
    assert!(!ok && out.contains("no execution") && out.contains("under way"), "{out}");
    let (ok, out) = cli(&data, &["cancel", &Uuid::now_v7().to_string()]);
    assert!(!ok && out.contains("no execution"), "{out}");

    let p = serve(&data, &env);
    let api = Api::new(&p.base, &key);
    let e = api.execution(hangs).await;
    let ts = api.transitions(hangs).await;
    assert_failed(&e, &ts, &["poisoned"]);
    Api::checked(&ts, true);
    let e = api.execution(waits).await;
    assert_eq!(e["status"], "cancelled", "{e}");
    Api::checked(&api.transitions(waits).await, true);
    // Give a (wrong) run of the failed one the time to reach the listener.
    let (status, _) = api.call("GET", "/api/healthz", None).await;
    assert_eq!(status, 200);
    assert!(calls.recv_timeout(Duration::from_millis(500)).is_err(), "the failed execution ran again");
    p.stop();
}

/// Past `executions.max_active_per_tenant` executions under way (waiting for
/// input counts), starting one is a 429 naming the setting; other tenants are
/// not held back, and an execution that ends makes room.
#[tokio::test]
async fn starting_past_the_tenants_executions_under_way_is_429_naming_the_setting() {
    let s = TestServer::with_config(|c| c.executions.max_active_per_tenant = 2).await;
    let c = Ctx::on(&s.base, &s.key).await;
    let task = c.task(json!([{"wait_for_input": {"info": {}}}]), json!({})).await;
    let first = Ctx::id(&c.start_until(task, json!({}), &["awaiting_input"]).await);
    c.start_until(task, json!({}), &["awaiting_input"]).await;
    let path = format!("/api/tasks/{task}/executions");
    let (status, body) = c.api.call("POST", &path, Some(&json!({"input": {}}))).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["code"], "rate_limited", "{body}");
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("executions.max_active_per_tenant") && detail.contains('2'), "{body}");
    let (_, listed) = c.api.call("GET", &path, None).await;
    assert_eq!(listed["items"].as_array().map(Vec::len), Some(2), "nothing started: {listed}");

    let other = Ctx::on(&s.base, &s.key_for("another-tenant").await).await;
    let theirs = other.task(json!([{"log": "hi"}]), json!({})).await;
    let (status, body) =
        other.api.call("POST", &format!("/api/tasks/{theirs}/executions"), Some(&json!({"input": {}}))).await;
    assert_eq!(status, 201, "another tenant is not held back: {body}");

    let (status, body) = c.api.update(first, json!({"status": "cancelled"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body): (u16, Value) = c.api.call("POST", &path, Some(&json!({"input": {}}))).await;
    assert_eq!(status, 201, "an ended execution makes room: {body}");
    s.stop().await;
}
