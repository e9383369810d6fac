//! Executions of tasks against a live server: each step kind's semantics and
//! error paths, the exact transitions each run commits (checked against the
//! contract's table, written out in `agent_platform_tests::executions`),
//! waits, resumes and cancels, the transitions' list and stream, limits, and
//! prompt steps against the fake model provider with `function` and
//! `api_call` tools (the latter against a local HTTP server).
//!
//! Most tests share one server (started once, on its own thread and runtime,
//! with the fake provider answering `Echo` and the local HTTP server's host
//! allowed); each test makes its own agent, so they never see each other's
//! records. Tests that script the model's answers, or need other limits, start
//! their own server.

mod control;
mod limits;
mod prompts;
mod recovery;
mod steps;
mod typed;

use std::sync::OnceLock;
use std::time::Duration;

use agent_platform::models::fake_upstream::FakeUpstream;
use agent_platform_tests::executions::{Api, render};
use agent_platform_tests::http_target::{HttpTarget, Received};
use agent_platform_tests::{TestServer, fake_models};
use serde_json::{Value, json};
use uuid::Uuid;

/// How long any run of these tests' tasks may take to end (they take
/// milliseconds; a second for those that sleep).
const ENDS_WITHIN: Duration = Duration::from_secs(20);

/// The server the tests share, and the HTTP server its `api_call` tools may call.
struct Shared {
    base: String,
    key: String,
    target_url: String,
    received: Box<dyn Fn() -> Vec<Received> + Send + Sync>,
}

/// The shared server, started on first use. It runs on a thread of its own
/// (a test's runtime ends with the test) until the test process exits.
fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let fake = FakeUpstream::start().await;
                let target = std::sync::Arc::new(HttpTarget::start().await);
                let host = target.host();
                let s = TestServer::with_config(|c| {
                    c.models = fake_models(&fake, 10.0);
                    c.tools.allowed_hosts = vec![host];
                })
                .await;
                let seen = target.clone();
                let _ = tx.send(Shared {
                    base: s.base.clone(),
                    key: s.key.clone(),
                    target_url: target.url(),
                    received: Box::new(move || seen.received()),
                });
                // Keeps the server, the fake and the target alive.
                let _alive = (s, fake, target);
                std::future::pending::<()>().await
            });
        });
        rx.recv().expect("the shared server starts")
    })
}

/// One test's view of a server: its own agent, and the tasks it made.
struct Ctx {
    api: Api,
    agent: Uuid,
}

impl Ctx {
    /// On the shared server.
    async fn new() -> Ctx {
        let s = shared();
        Ctx::on(&s.base, &s.key).await
    }

    async fn on(base: &str, key: &str) -> Ctx {
        let api = Api::new(base, key);
        let agent = api.agent("Runner").await;
        Ctx { api, agent }
    }

    /// Creates a task of these steps (`main`), with `extra` fields (sub-workflows, tools…).
    async fn task(&self, main: Value, extra: Value) -> Uuid {
        let mut body = json!({"name": format!("t{}", Uuid::now_v7().simple()), "main": main});
        body.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
        self.api.task(self.agent, &body).await
    }

    /// Starts the task and waits until it ends; answers the execution and its
    /// transitions (checked against the contract's table).
    async fn run(&self, task: Uuid, input: Value) -> (Value, Vec<Value>) {
        let e = self.api.start(task, input).await;
        let id = Self::id(&e);
        let e = self.api.wait_ended(id, ENDS_WITHIN).await;
        let ts = self.api.transitions(id).await;
        if e["status"] != "succeeded" {
            // Shown with the test's output when an assertion fails.
            eprintln!("execution {id} ended {}: {}", e["status"], e["error"]);
        }
        Api::checked(&ts, true);
        (e, ts)
    }

    /// [`Ctx::task`] then [`Ctx::run`].
    async fn run_steps(&self, main: Value, extra: Value, input: Value) -> (Value, Vec<Value>) {
        let task = self.task(main, extra).await;
        self.run(task, input).await
    }

    /// Starts and waits for one of `statuses`.
    async fn start_until(&self, task: Uuid, input: Value, statuses: &[&str]) -> Value {
        let e = self.api.start(task, input).await;
        self.api.wait_for(Self::id(&e), statuses, ENDS_WITHIN).await
    }

    fn id(e: &Value) -> Uuid {
        agent_platform_tests::executions::id_of(e)
    }
}

/// The transitions in one line each (see [`render`]).
fn lines(ts: &[Value]) -> Vec<String> {
    ts.iter().map(render).collect()
}

/// The transitions' outputs.
fn outputs(ts: &[Value]) -> Vec<Value> {
    ts.iter().map(|t| t["output"].clone()).collect()
}

#[track_caller]
fn assert_succeeded(e: &Value, output: Value) {
    assert_eq!(e["status"], "succeeded", "{e}");
    assert_eq!(e["output"], output, "{e}");
    assert!(e["error"].is_null(), "{e}");
}

/// Asserts the execution failed with an error containing every one of `parts`;
/// its last transition is the `error`, whose output carries the same message.
#[track_caller]
fn assert_failed(e: &Value, ts: &[Value], parts: &[&str]) {
    assert_eq!(e["status"], "failed", "{e}");
    let error = e["error"].as_str().unwrap_or_else(|| panic!("a failed execution has an error: {e}"));
    for part in parts {
        assert!(error.contains(part), "the error {error:?} should say {part:?}");
    }
    let last = ts.last().expect("transitions");
    assert_eq!(last["type"], "error", "{:#?}", lines(ts));
    assert_eq!(last["output"], json!({"error": error}));
}
