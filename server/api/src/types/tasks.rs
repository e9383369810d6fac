//! Contract types of tasks: named workflows of steps, run by an agent.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::tools::{ToolDef, check_tool_def};
use crate::error::LocPart;
use crate::types::{JsonObject, Metadata, default_true};
use crate::validate::{Check, Issues, check_json_schema};

/// The kinds of step (Julep's): a step has exactly one of these keys.
pub const STEP_KINDS: [&str; 10] =
    ["prompt", "tool_call", "evaluate", "if", "foreach", "return", "log", "sleep", "wait_for_input", "error"];

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentTaskPath {
    /// The agent's id.
    pub id: Uuid,
    /// The task's id.
    pub task_id: Uuid,
}

impl Check for AgentTaskPath {}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct TaskPath {
    /// The task's id.
    pub task_id: Uuid,
}

impl Check for TaskPath {}

/// A task: a named workflow of steps that an agent runs.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Task {
    pub id: Uuid,
    /// The agent the task belongs to.
    pub agent_id: Uuid,
    pub name: String,
    pub description: String,
    /// The JSON Schema of the task's input, or null.
    pub input_schema: Option<JsonObject>,
    /// The steps, in order.
    pub main: Vec<JsonObject>,
    /// Tools available to the task besides the agent's.
    pub tools: Vec<ToolDef>,
    /// Whether the task may also use the agent's tools.
    pub inherit_tools: bool,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `PUT /api/agents/{id}/tasks`: a task, created or overwritten (omitted
/// fields take their defaults). With an `id` of a task of this agent, that task
/// is overwritten; with an `id` that does not exist, the task is created with it;
/// without one, the agent's task of the same `name` is overwritten, or a new one created.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct PutTaskRequest {
    /// The task to overwrite, or the id to create it with.
    #[serde(default)]
    pub id: Option<Uuid>,
    /// The task's name, unique within its agent (1 to 255 characters).
    #[schemars(length(min = 1, max = 255))]
    pub name: String,
    /// At most 16,000 characters.
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub description: String,
    /// The JSON Schema of the task's input (it must be a valid JSON Schema), or null.
    #[serde(default)]
    pub input_schema: Option<JsonObject>,
    /// The steps, at least one. A step is an object with exactly one of the keys
    /// `prompt`, `tool_call`, `evaluate`, `if`, `foreach`, `return`, `log`, `sleep`,
    /// `wait_for_input`, `error`, which says its kind (other keys, such as `label`,
    /// `then`, `else`, are kept). The steps in an `if`'s `then`/`else` and a
    /// `foreach`'s `do` are checked the same way.
    #[schemars(length(min = 1))]
    pub main: Vec<JsonObject>,
    /// Tools available to the task besides the agent's; names unique within the task.
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    #[serde(default = "default_true")]
    pub inherit_tools: bool,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// Reports a step that does not have exactly one kind key; then checks the
/// steps nested in it. `at` is the step's place in the body.
fn check_step(step: &JsonObject, at: &[LocPart], issues: &mut Issues) {
    let kinds: Vec<&str> = STEP_KINDS.iter().copied().filter(|k| step.contains_key(*k)).collect();
    let [kind] = kinds.as_slice() else {
        let found = if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") };
        issues.push(
            at,
            "value_error",
            format!("a step has exactly one of the keys {} (found: {found})", STEP_KINDS.join(", ")),
        );
        return;
    };
    let nested: Vec<(&[&str], Option<&Value>)> = match *kind {
        "if" => vec![(&["then"], step.get("then")), (&["else"], step.get("else"))],
        "foreach" => vec![(&["foreach", "do"], step.get("foreach").and_then(|f| f.get("do")))],
        _ => vec![],
    };
    for (path, value) in nested {
        let Some(value) = value else { continue };
        let mut inner = at.to_vec();
        inner.extend(path.iter().map(|k| LocPart::Key((*k).into())));
        check_nested_steps(value, &inner, issues);
    }
}

/// Checks a nested step, or a list of them.
fn check_nested_steps(value: &Value, at: &[LocPart], issues: &mut Issues) {
    match value {
        Value::Object(step) => check_step(step, at, issues),
        Value::Array(steps) => {
            for (i, s) in steps.iter().enumerate() {
                let mut inner = at.to_vec();
                inner.push(LocPart::Index(i));
                check_nested_steps(s, &inner, issues);
            }
        }
        _ => issues.push(at, "value_error", "expected a step (an object) or a list of steps"),
    }
}

impl Check for PutTaskRequest {
    fn check(&self, issues: &mut Issues) {
        for (i, step) in self.main.iter().enumerate() {
            check_step(step, &[LocPart::Key("main".into()), LocPart::Index(i)], issues);
        }
        if let Some(schema) = &self.input_schema {
            check_json_schema(&Value::Object(schema.clone()), &[LocPart::Key("input_schema".into())], issues);
        }
        let mut names = HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            let at = [LocPart::Key("tools".into()), LocPart::Index(i)];
            check_tool_def(tool.kind, tool.function.as_ref(), tool.api_call.as_ref(), &at, issues);
            if !names.insert(tool.name.as_str()) {
                let mut at = at.to_vec();
                at.push(LocPart::Key("name".into()));
                issues.push(&at, "value_error", format!("two tools of this task are named '{}'", tool.name));
            }
        }
    }
}
