//! Contract types of tasks: named workflows of steps, run by an agent.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::step_parser::{MAIN, check_workflows};
use super::tools::{ToolDef, check_tool_def};
use crate::error::LocPart;
use crate::types::{JsonObject, Metadata, default_true};
use crate::validate::{Check, Issues, check_json_schema};

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
    /// The named sub-workflows (name → steps), which a `workflow` step runs.
    /// Left out when there are none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workflows: BTreeMap<String, Vec<JsonObject>>,
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
    /// The steps, at least one: the workflow an execution runs. A step is an
    /// object whose kind is its one key among `prompt`, `tool_call` (or
    /// `tool`), `evaluate`, `if`, `switch`, `foreach`, `over` (a map_reduce),
    /// `parallel`, `sleep`, `wait_for_input`, `return`, `workflow` (a yield),
    /// `log`, `get`, `set`, `error`; other keys (`label`, `then`, `else`, …)
    /// are the kind's own or kept as sent. Every step is checked, nested ones
    /// (in `then`, `else`, a switch's cases, `foreach.do`, `map`, `parallel`)
    /// too, each at its place: its shape, every expression compiles (a string
    /// in an expression's place is an expression, an optional `$ ` prefix
    /// dropped; in a literal, only strings starting with `$ ` are), every
    /// template compiles (`prompt`, message contents, `log`, `error`; one
    /// that starts with `$ ` is an expression), a sleep lasts more than 0 s
    /// and at most 30 days, a `parallel` has 1 to 100 branches, a
    /// `parallelism` is 1 to 100, a `workflow` step names a workflow of the
    /// task, `unwrap` is a boolean, `tools` is `"all"` or a list of names.
    #[schemars(length(min = 1))]
    pub main: Vec<JsonObject>,
    /// Named sub-workflows: name → steps (at least one), checked as `main`
    /// is. As in Julep, a sub-workflow may also be given as a top-level key
    /// of the body whose value is a list of step objects (e.g. `"summarise":
    /// [...]`); both land here. A name is 1 to 255 characters without `.`,
    /// `[` or `]`, not `main`, and not the name of another field of the body.
    #[serde(default)]
    pub workflows: BTreeMap<String, Vec<JsonObject>>,
    /// The body's other top-level keys: those whose value is a list of
    /// objects are sub-workflows (Julep's way); the others are ignored. Not
    /// in the schema: typed clients send `workflows`.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
    /// Tools available to the task besides the agent's; names unique within the task.
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    #[serde(default = "default_true")]
    pub inherit_tools: bool,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// The fields of a task's body: no sub-workflow may take their names.
const TASK_FIELDS: [&str; 9] =
    ["id", "name", "description", "input_schema", "main", "workflows", "tools", "inherit_tools", "metadata"];

impl PutTaskRequest {
    /// The top-level keys that are sub-workflows (Julep's way): lists of objects.
    fn extra_workflows(&self) -> impl Iterator<Item = (&String, &Vec<Value>)> {
        self.extra.iter().filter_map(|(name, v)| match v {
            Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_object) => {
                Some((name, items))
            }
            _ => None,
        })
    }

    /// Every sub-workflow, from `workflows` and the top-level keys alike.
    pub fn all_workflows(&self) -> BTreeMap<String, Vec<JsonObject>> {
        let mut all = self.workflows.clone();
        for (name, items) in self.extra_workflows() {
            let steps = items.iter().filter_map(|v| v.as_object().cloned()).collect();
            all.entry(name.clone()).or_insert(steps);
        }
        all
    }

    fn check_workflows(&self, issues: &mut Issues) {
        let mut named: Vec<(&str, &[JsonObject], Vec<LocPart>)> = Vec::new();
        let extra: Vec<(&String, Vec<JsonObject>)> = self
            .extra_workflows()
            .map(|(name, items)| (name, items.iter().filter_map(|v| v.as_object().cloned()).collect()))
            .collect();
        let given =
            self.workflows.iter().map(|(n, steps)| (n, steps.as_slice(), vec!["workflows", n.as_str()]));
        let top = extra.iter().map(|(n, steps)| (*n, steps.as_slice(), vec![n.as_str()]));
        for (name, steps, at) in given.chain(top) {
            let at: Vec<LocPart> = at.into_iter().map(|k| LocPart::Key(k.into())).collect();
            let bad_name = if name == MAIN || TASK_FIELDS.contains(&name.as_str()) {
                Some(format!("a sub-workflow cannot be named '{name}': it is a field of the task"))
            } else if name.is_empty() || name.chars().count() > 255 || name.contains(['.', '[', ']']) {
                Some(format!(
                    "a sub-workflow's name is 1 to 255 characters without '.', '[' or ']', got '{name}'"
                ))
            } else if at.len() == 1 && self.workflows.contains_key(name) {
                Some(format!(
                    "the sub-workflow '{name}' is given twice: in `workflows` and as a top-level key"
                ))
            } else {
                None
            };
            if let Some(msg) = bad_name {
                issues.push(&at, "value_error", msg);
            } else if steps.is_empty() {
                issues.push(&at, "too_short", "a sub-workflow has at least one step");
            }
            named.push((name.as_str(), steps, at));
        }
        check_workflows(&self.main, &[LocPart::Key(MAIN.into())], &named, issues);
    }
}

impl Check for PutTaskRequest {
    fn check(&self, issues: &mut Issues) {
        self.check_workflows(issues);
        if let Some(schema) = &self.input_schema {
            check_json_schema(&Value::Object(schema.clone()), &[LocPart::Key("input_schema".into())], issues);
        }
        let mut names = HashSet::new();
        for (i, tool) in self.tools.iter().enumerate() {
            let at = [LocPart::Key("tools".into()), LocPart::Index(i)];
            check_tool_def(
                tool.kind,
                tool.function.as_ref(),
                tool.api_call.as_ref(),
                tool.mcp.as_ref(),
                &at,
                issues,
            );
            if !names.insert(tool.name.as_str()) {
                let mut at = at.to_vec();
                at.push(LocPart::Key("name".into()));
                issues.push(&at, "value_error", format!("two tools of this task are named '{}'", tool.name));
            }
        }
    }
}
