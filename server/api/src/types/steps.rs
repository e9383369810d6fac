//! The steps of a task, typed: what a step object of a task's `main` (or of a
//! named sub-workflow) means. Tasks are stored and sent as JSON; the server
//! parses their steps into [`Step`] when it checks a task and when it runs one.
//!
//! An expression ([`Expr`]) is kept as the JSON it was written as: a string is
//! an expression (an optional `$ ` prefix is dropped); any other value is a
//! literal in which strings starting with `$ ` are expressions.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::JsonObject;

/// An expression, or a literal holding `$ ` expressions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Expr(pub Value);

/// A template (minijinja), or, when it starts with `$ `, an expression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Template(pub String);

/// Which tools a `prompt` step offers the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PromptTools {
    /// Every tool of the task.
    All,
    /// These, by name.
    Named(Vec<String>),
}

/// What a `prompt` step sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PromptInput {
    /// One user message.
    Text(Template),
    /// Messages: objects of `role` and `content` (templates).
    Messages(Vec<PromptMessage>),
    /// An expression whose value is a string or a list of messages.
    Expr(Expr),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    pub role: String,
    pub content: Template,
}

/// One step of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// `{evaluate: {k: expr}}`: the object of values.
    Evaluate(Vec<(String, Expr)>),
    /// `{prompt, tools?, tool_choice?, settings?, unwrap?}`.
    Prompt {
        prompt: PromptInput,
        tools: Option<PromptTools>,
        tool_choice: Option<Value>,
        settings: Option<JsonObject>,
        unwrap: bool,
    },
    /// `{tool: name, arguments: {k: expr}}` (also `tool_call` for the name).
    ToolCall { tool: String, arguments: Vec<(String, Expr)> },
    /// `{if: expr, then: step(s), else?: step(s)}`.
    If { cond: Expr, then: Vec<Step>, otherwise: Option<Vec<Step>> },
    /// `{switch: [{case: expr or "_", then: step(s)}]}`: `None` is the `_` case.
    Switch(Vec<(Option<Expr>, Vec<Step>)>),
    /// `{foreach: {in: expr, do: step(s)}}`.
    Foreach { items: Expr, body: Vec<Step> },
    /// `{over: expr, map: step, reduce?: expr, initial?: value, parallelism?: 1..100}`.
    MapReduce { over: Expr, map: Box<Step>, reduce: Option<Expr>, initial: Option<Value>, parallelism: u32 },
    /// `{parallel: [steps]}`: each entry is one branch.
    Parallel(Vec<Step>),
    /// `{sleep: {seconds?, minutes?, hours?, days?}}`, in seconds.
    Sleep { seconds: f64 },
    /// `{wait_for_input: {info: {k: expr}}}`.
    WaitForInput { info: Vec<(String, Expr)> },
    /// `{return: {k: expr}}`.
    Return(Vec<(String, Expr)>),
    /// `{workflow: name, arguments: {k: expr}}`.
    Yield { workflow: String, arguments: Vec<(String, Expr)> },
    /// `{log: template}`.
    Log(Template),
    /// `{get: key}`.
    Get(String),
    /// `{set: {k: expr}}`.
    Set(Vec<(String, Expr)>),
    /// `{error: template}`.
    Error(Template),
}

impl Step {
    /// The step's kind, as its key names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Evaluate(_) => "evaluate",
            Step::Prompt { .. } => "prompt",
            Step::ToolCall { .. } => "tool_call",
            Step::If { .. } => "if",
            Step::Switch(_) => "switch",
            Step::Foreach { .. } => "foreach",
            Step::MapReduce { .. } => "map_reduce",
            Step::Parallel(_) => "parallel",
            Step::Sleep { .. } => "sleep",
            Step::WaitForInput { .. } => "wait_for_input",
            Step::Return(_) => "return",
            Step::Yield { .. } => "yield",
            Step::Log(_) => "log",
            Step::Get(_) => "get",
            Step::Set(_) => "set",
            Step::Error(_) => "error",
        }
    }
}

/// The parsed workflows of a task: `main` and the named sub-workflows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Workflows {
    pub workflows: std::collections::BTreeMap<String, Vec<Step>>,
}
