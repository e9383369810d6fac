//! prompt and tool_call steps against the fake model provider (over HTTP) and
//! a local HTTP server for api_call tools, on a real store.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use super::{MAX_TOOL_ROUNDS, Outcome, StepEnv, prompt_step, task_tools, tool_call_step};
use crate::api::types::{
    Agent, CreateAgentRequest, Expr, PromptInput, PromptMessage, PromptTools, Step, Task, Template,
};
use crate::api::types::{ApiCallDef, CreateToolRequest, HttpMethod, ToolDef, ToolType};
use crate::app::{App, Tenant};
use crate::exec::expr::{Context, Evaluator};
use crate::models::fake_upstream::{Behaviour, FakeUpstream};
use crate::models::provider_config::Providers;
use crate::store::sled_store::{Durability, SledStore};
use crate::tools::api_call::ApiCallPolicy;
use crate::tools::outbound::Outbound;

struct Fixture {
    _dir: tempfile::TempDir,
    fake: FakeUpstream,
    target: SocketAddr,
    _server: tokio::task::JoinHandle<()>,
    app: App,
    agent: Agent,
    task: Task,
    tools: Vec<ToolDef>,
    eval: std::sync::Arc<Evaluator>,
    ctx: Context,
    policy: ApiCallPolicy,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let fake = FakeUpstream::start().await;
        let (target, server) = crate::tools::api_call::tests::target().await;
        let models = fake.models_config("fake-default");
        let store = Arc::new(SledStore::open(dir.path(), Durability::Flush).unwrap());
        let app =
            App::new(store).await.unwrap().with_models(Providers::from_config(&models, |_| None).unwrap());
        let agent: Agent = serde_json::from_value(json!({
            "id": Uuid::now_v7(), "name": "Ada", "about": "", "model": "agent-model", "instructions": [],
            "default_settings": {"temperature": 0.5, "max_tokens": 100}, "metadata": null,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let tools = vec![
            ToolDef {
                name: "lookup".into(),
                kind: ToolType::Function,
                description: "Look a thing up".into(),
                function: Some(serde_json::from_value(json!({"parameters": {"type": "object"}})).unwrap()),
                api_call: None,
                mcp: None,
            },
            ToolDef {
                name: "fetch".into(),
                kind: ToolType::ApiCall,
                description: String::new(),
                function: None,
                api_call: Some(ApiCallDef {
                    method: HttpMethod::Post,
                    url: format!("http://{target}/echo"),
                    headers: None,
                    timeout_s: None,
                }),
                mcp: None,
            },
        ];
        let task = task(agent.id, tools.clone(), false);
        let ctx = Context {
            last: Arc::new(json!({"topic": "cats"})),
            input: Arc::new(json!({"topic": "cats"})),
            outputs: Arc::new(json!([])),
            state: Arc::new(json!({})),
            execution: Arc::new(json!({"id": "e", "task_id": "t"})),
            agent: Arc::new(serde_json::to_value(&agent).unwrap()),
            task: Arc::new(json!({})),
            results: None,
        };
        Fixture {
            _dir: dir,
            fake,
            target,
            _server: server,
            app,
            agent,
            task,
            tools,
            eval: std::sync::Arc::new(Evaluator::new(crate::exec::expr::Bounds::with_fuel(100_000))),
            ctx,
            policy: ApiCallPolicy {
                outbound: Outbound::new([target.to_string()]).unwrap(),
                max_timeout: Duration::from_secs(5),
            },
        }
    }

    fn env(&self) -> StepEnv<'_> {
        StepEnv {
            app: &self.app,
            tenant: Tenant(Uuid::from_u128(1)),
            agent: &self.agent,
            task: &self.task,
            execution: Uuid::nil(),
            tools: &self.tools,
            eval: &self.eval,
            ctx: &self.ctx,
            policy: &self.policy,
        }
    }
}

fn task(agent_id: Uuid, tools: Vec<ToolDef>, inherit_tools: bool) -> Task {
    Task {
        id: Uuid::now_v7(),
        agent_id,
        name: "t".into(),
        description: String::new(),
        input_schema: None,
        main: vec![],
        workflows: Default::default(),
        tools,
        inherit_tools,
        metadata: None,
        created_at: chrono::Utc::now(),
        updated_at: chrono::Utc::now(),
    }
}

fn prompt(input: PromptInput, tools: Option<PromptTools>, settings: Value, unwrap: bool) -> Step {
    Step::Prompt {
        prompt: input,
        tools,
        tool_choice: None,
        settings: match settings {
            Value::Object(m) => Some(m),
            _ => None,
        },
        unwrap,
    }
}

fn text(t: &str) -> PromptInput {
    PromptInput::Text(Template(t.into()))
}

#[tokio::test]
async fn a_prompt_renders_its_template_and_answers_the_assistant_message() {
    let f = Fixture::new().await;
    f.fake.push(Behaviour::Text("Cats purr.".into()));
    let step = prompt(text("Tell me about {{ _.topic }}."), None, json!({"temperature": 0.1}), false);
    let out = prompt_step(&f.env(), &step, None).await.unwrap();
    assert_eq!(out, Outcome::Done(json!({"role": "assistant", "content": "Cats purr."})));
    let req = f.fake.last_request().unwrap().body;
    assert_eq!(req["model"], "agent-model");
    assert_eq!(req["messages"], json!([{"role": "user", "content": "Tell me about cats."}]));
    // The step's settings over the agent's defaults.
    assert!((req["temperature"].as_f64().unwrap() - 0.1).abs() < 1e-6, "{req}");
    assert_eq!(req["max_tokens"], 100);
    assert!(req.get("tools").is_none(), "no tools offered unless the step asks: {req}");
}

#[tokio::test]
async fn messages_unwrap_and_the_steps_model() {
    let f = Fixture::new().await;
    f.fake.push(Behaviour::Echo);
    let step = prompt(
        PromptInput::Messages(vec![
            PromptMessage { role: "system".into(), content: Template("Be brief.".into()) },
            PromptMessage { role: "user".into(), content: Template("$ 'about ' ~ input.topic".into()) },
        ]),
        None,
        json!({"model": "step-model"}),
        true,
    );
    let out = prompt_step(&f.env(), &step, None).await.unwrap();
    assert_eq!(out, Outcome::Done(json!("about cats")));
    let req = f.fake.last_request().unwrap().body;
    assert_eq!(req["model"], "step-model");
    assert_eq!(req["messages"][0], json!({"role": "system", "content": "Be brief."}));

    // An expression giving the messages.
    f.fake.push(Behaviour::Echo);
    let step = prompt(
        PromptInput::Expr(Expr(json!("[{'role': 'user', 'content': 'hi ' ~ _.topic}]"))),
        None,
        Value::Null,
        true,
    );
    assert_eq!(prompt_step(&f.env(), &step, None).await.unwrap(), Outcome::Done(json!("hi cats")));
    let bad = prompt(PromptInput::Expr(Expr(json!("42"))), None, Value::Null, true);
    let err = prompt_step(&f.env(), &bad, None).await.unwrap_err();
    assert!(err.contains("text or a list of messages"), "{err}");
}

#[tokio::test]
async fn a_function_tool_pauses_and_the_result_goes_back_to_the_model() {
    let f = Fixture::new().await;
    f.fake.push(Behaviour::ToolCall { name: "lookup".into(), arguments: r#"{"q": "cats"}"#.into() });
    let step = prompt(text("Look up cats"), Some(PromptTools::All), Value::Null, false);
    let Outcome::Pause { call, state } = prompt_step(&f.env(), &step, None).await.unwrap() else {
        panic!("a function tool pauses");
    };
    assert_eq!(call["name"], "lookup");
    assert_eq!(call["arguments"], json!({"q": "cats"}));
    let offered = &f.fake.last_request().unwrap().body["tools"];
    assert_eq!(offered.as_array().unwrap().len(), 2, "{offered}");

    // The state survives a trip through JSON text (the engine stores it).
    let state: Value = serde_json::from_str(&state.to_string()).unwrap();
    f.fake.push(Behaviour::Text("Cats are mammals.".into()));
    let out = prompt_step(&f.env(), &step, Some((state, json!({"found": "mammal"})))).await.unwrap();
    assert_eq!(out, Outcome::Done(json!({"role": "assistant", "content": "Cats are mammals."})));
    let messages = f.fake.last_request().unwrap().body["messages"].clone();
    assert_eq!(messages[0]["content"], "Look up cats");
    assert_eq!(messages[1]["tool_calls"][0]["id"], call["id"]);
    assert_eq!(
        messages[2],
        json!({"role": "tool", "content": r#"{"found":"mammal"}"#, "tool_call_id": call["id"]})
    );
}

#[tokio::test]
async fn an_api_call_tool_runs_here_and_its_answer_goes_back_to_the_model() {
    let f = Fixture::new().await;
    f.fake.push(Behaviour::ToolCall { name: "fetch".into(), arguments: r#"{"q": "cats"}"#.into() });
    f.fake.push(Behaviour::Text("fetched".into()));
    let step = prompt(text("Fetch cats"), Some(PromptTools::Named(vec!["fetch".into()])), Value::Null, true);
    assert_eq!(prompt_step(&f.env(), &step, None).await.unwrap(), Outcome::Done(json!("fetched")));
    let requests = f.fake.requests();
    assert_eq!(requests[0].body["tools"].as_array().unwrap().len(), 1);
    let tool_message = &requests[1].body["messages"][2];
    assert_eq!(tool_message["role"], "tool");
    let answer: Value = serde_json::from_str(tool_message["content"].as_str().unwrap()).unwrap();
    assert_eq!(answer["status"], 200);
    assert_eq!(answer["json"]["body"], json!({"q": "cats"}));
}

#[tokio::test]
async fn a_call_to_a_disallowed_host_is_told_to_the_model_and_the_step_goes_on() {
    let mut f = Fixture::new().await;
    f.policy.outbound = Outbound::new::<&str>([]).unwrap();
    f.fake.push(Behaviour::ToolCall { name: "fetch".into(), arguments: "{}".into() });
    f.fake.push(Behaviour::Text("I could not fetch it".into()));
    let step = prompt(text("Fetch"), Some(PromptTools::All), Value::Null, true);
    let done = prompt_step(&f.env(), &step, None).await.unwrap();
    assert_eq!(done, Outcome::Done(json!("I could not fetch it")));
    let requests = f.fake.requests();
    assert_eq!(requests.len(), 2, "the model is asked again, with the refusal");
    let tool_message = &requests[1].body["messages"][2];
    assert_eq!(tool_message["role"], "tool");
    let said = tool_message["content"].as_str().unwrap();
    assert!(said.starts_with("error: api_call to 127.0.0.1:"), "{said}");
    assert!(said.contains("is not allowed") && said.contains("tools.allowed_hosts"), "{said}");
    // A tool_call step has no model to tell: it fails.
    let err = tool_call_step(&f.env(), "fetch", json!({})).await.unwrap_err();
    assert!(err.contains(&format!("api_call to 127.0.0.1:{} is not allowed", f.target.port())), "{err}");
}

#[tokio::test]
async fn tool_rounds_are_limited() {
    let f = Fixture::new().await;
    f.fake.set_default(Behaviour::ToolCall { name: "fetch".into(), arguments: "{}".into() });
    let step = prompt(text("Loop"), Some(PromptTools::All), Value::Null, false);
    let err = prompt_step(&f.env(), &step, None).await.unwrap_err();
    assert!(err.contains(&format!("after {MAX_TOOL_ROUNDS} rounds")), "{err}");
    assert_eq!(f.fake.requests().len(), MAX_TOOL_ROUNDS as usize + 1);
}

#[tokio::test]
async fn provider_errors_and_unknown_tools_say_so() {
    let f = Fixture::new().await;
    f.fake.push(Behaviour::Fail { status: 500, body: r#"{"error": {"message": "boom"}}"#.into() });
    let step = prompt(text("Hi"), None, Value::Null, false);
    let err = prompt_step(&f.env(), &step, None).await.unwrap_err();
    assert!(err.starts_with("prompt step: model provider answered HTTP 500: boom"), "{err}");
    let step = prompt(text("Hi"), Some(PromptTools::Named(vec!["nope".into()])), Value::Null, false);
    let err = prompt_step(&f.env(), &step, None).await.unwrap_err();
    assert!(err.contains("no tool named \"nope\"") && err.contains("lookup, fetch"), "{err}");
    let step = prompt(text("Hi"), None, json!({"temperature": "hot"}), false);
    let err = prompt_step(&f.env(), &step, None).await.unwrap_err();
    assert!(err.contains("settings"), "{err}");
}

#[tokio::test]
async fn tool_call_steps() {
    let f = Fixture::new().await;
    let Outcome::Pause { call, state } = tool_call_step(&f.env(), "lookup", json!({"q": 1})).await.unwrap()
    else {
        panic!("a function tool pauses");
    };
    assert_eq!(
        (call["name"].clone(), call["arguments"].clone(), state),
        (json!("lookup"), json!({"q": 1}), Value::Null)
    );
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    let Outcome::Done(answer) = tool_call_step(&f.env(), "fetch", json!({"n": 2})).await.unwrap() else {
        panic!("an api_call tool runs");
    };
    assert_eq!(answer["json"]["body"], json!({"n": 2}));
    assert!(tool_call_step(&f.env(), "nope", json!({})).await.unwrap_err().contains("no tool named"));
}

#[tokio::test]
async fn task_tools_add_the_agents_when_inherited() {
    let f = Fixture::new().await;
    let t = Tenant(Uuid::from_u128(1));
    let req: CreateAgentRequest = serde_json::from_value(json!({"name": "Bo"})).unwrap();
    let agent = f.app.agent_create(t, req).await.unwrap();
    for (name, description) in [("lookup", "the agent's"), ("weather", "the agent's")] {
        let req: CreateToolRequest = serde_json::from_value(json!({
            "name": name, "type": "function", "description": description, "function": {"parameters": {"type": "object"}}
        }))
        .unwrap();
        f.app.tool_create(t, agent.id, req).await.unwrap();
    }
    let own = task(agent.id, f.tools.clone(), false);
    let names = |tools: Vec<ToolDef>| tools.into_iter().map(|t| (t.name, t.description)).collect::<Vec<_>>();
    assert_eq!(names(task_tools(&f.app, t, &own).await.unwrap()).len(), 2);
    let inheriting = task(agent.id, f.tools.clone(), true);
    assert_eq!(
        names(task_tools(&f.app, t, &inheriting).await.unwrap()),
        [
            ("lookup".to_string(), "Look a thing up".to_string()),
            ("fetch".to_string(), String::new()),
            ("weather".to_string(), "the agent's".to_string()),
        ]
    );
}

/// The engine runs steps on spawned tasks: their futures must be `Send`.
#[tokio::test]
async fn step_futures_are_send() {
    fn is_send<T: Send>(_: &T) {}
    fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<Evaluator>();
    is_send_sync::<Context>();
    is_send_sync::<ApiCallPolicy>();
    let f = Fixture::new().await;
    let env = f.env();
    let step = prompt(text("Hi"), None, Value::Null, false);
    is_send(&prompt_step(&env, &step, None));
    is_send(&tool_call_step(&env, "fetch", json!({})));
    is_send(&task_tools(&f.app, env.tenant, &f.task));
}
