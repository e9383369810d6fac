//! TEMPORARY (helper B's real one replaces this file).
use serde_json::Value;

use super::api_call::ApiCallPolicy;
use super::expr::{Context, Evaluator};
use crate::api::types::{Agent, Step, Task, ToolDef};
use crate::app::{App, Tenant};

pub struct StepEnv<'a> {
    pub app: &'a App,
    pub tenant: Tenant,
    pub agent: &'a Agent,
    pub task: &'a Task,
    pub tools: &'a [ToolDef],
    pub eval: &'a Evaluator,
    pub ctx: &'a Context,
    pub policy: &'a ApiCallPolicy,
    pub http: &'a reqwest::Client,
}

pub enum Outcome {
    Done(Value),
    Pause { call: Value, state: Value },
}

pub async fn prompt_step(
    _env: &StepEnv<'_>,
    _step: &Step,
    _resume: Option<(Value, Value)>,
) -> Result<Outcome, String> {
    Err("prompt steps are being built".into())
}

pub async fn tool_call_step(_env: &StepEnv<'_>, tool: &str, arguments: Value) -> Result<Outcome, String> {
    Ok(Outcome::Pause {
        call: serde_json::json!({"id": "call_1", "name": tool, "arguments": arguments}),
        state: Value::Null,
    })
}

pub async fn task_tools(_app: &App, _tenant: Tenant, task: &Task) -> crate::app::Result<Vec<ToolDef>> {
    Ok(task.tools.clone())
}
