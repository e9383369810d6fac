//! Reading a task's steps: JSON step objects into typed [`Step`]s, checking
//! each on the way. The same code checks a task when it is written (every
//! violation a 422 at its `loc`) and reads it when an execution runs it
//! ([`parse_workflows`]), so a task that was accepted is a task that runs.
//!
//! A step's kind is its one key among [`STEP_KINDS`] (`tool` is another name
//! of `tool_call`, `over` the key of a `map_reduce`, `workflow` the key of a
//! `yield`). Every expression must compile and every template too; a
//! string in an expression's place is an expression (an optional `$ ` prefix
//! is dropped), a string in a literal is one only when it starts with `$ `, a
//! template that starts with `$ ` is an expression.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::Value;

use super::sessions::template_syntax;
use super::steps::{Expr, PromptInput, PromptMessage, PromptTools, Step, Template, Workflows};
use crate::error::LocPart;
use crate::types::JsonObject;
use crate::validate::{Issues, Source};

/// The keys that say a step's kind: a step has exactly one of them (`tool`
/// and `tool_call` are the same kind: a step has one of the two).
pub const STEP_KINDS: [&str; 17] = [
    "prompt",
    "tool_call",
    "tool",
    "evaluate",
    "if",
    "switch",
    "foreach",
    "over",
    "parallel",
    "sleep",
    "wait_for_input",
    "return",
    "workflow",
    "log",
    "get",
    "set",
    "error",
];

/// The prefix that makes a string an expression where it would otherwise be
/// a literal or a template (Julep's convention).
pub const EXPR_PREFIX: &str = "$ ";

/// The longest sleep a step may ask for: 30 days, in seconds.
pub const MAX_SLEEP_S: f64 = 30.0 * 24.0 * 3600.0;
/// The most branches a `parallel` step may have.
pub const MAX_PARALLEL_BRANCHES: usize = 100;
/// The highest `parallelism` of a `map_reduce` step.
pub const MAX_PARALLELISM: u64 = 100;

/// The name of a task's main workflow.
pub const MAIN: &str = "main";

/// The source of an expression: a string without its `$ ` prefix.
pub fn expression_source(s: &str) -> &str {
    s.strip_prefix(EXPR_PREFIX).unwrap_or(s)
}

/// The environment that compiles (never runs) expressions and templates, in
/// the syntax the server renders templates with.
fn env() -> &'static minijinja::Environment<'static> {
    static ENV: OnceLock<minijinja::Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = minijinja::Environment::new();
        env.set_syntax(template_syntax());
        env
    })
}

/// Whether an expression (without its `$ ` prefix) compiles; the error says why not.
pub fn expression_compiles(source: &str) -> Result<(), String> {
    if source.trim().is_empty() {
        return Err("the expression is empty".into());
    }
    env().compile_expression(source).map(|_| ()).map_err(|e| describe(&e))
}

/// Whether a template compiles (a `$ ` one as an expression); the error says why not.
pub fn template_compiles(source: &str) -> Result<(), String> {
    if let Some(expr) = source.strip_prefix(EXPR_PREFIX) {
        return expression_compiles(expr);
    }
    env().template_from_str(source).map(|_| ()).map_err(|e| describe(&e))
}

fn describe(e: &minijinja::Error) -> String {
    let detail = e.detail().map(str::to_owned).unwrap_or_else(|| e.kind().to_string());
    match e.line() {
        Some(line) if line > 1 => format!("{detail} (line {line})"),
        _ => detail,
    }
}

/// `at` with `more` keys after it.
fn loc(at: &[LocPart], more: &[&str]) -> Vec<LocPart> {
    let mut v = at.to_vec();
    v.extend(more.iter().map(|k| LocPart::Key((*k).into())));
    v
}

fn loc_index(at: &[LocPart], i: usize) -> Vec<LocPart> {
    let mut v = at.to_vec();
    v.push(LocPart::Index(i));
    v
}

/// Parses one step at `at` (its place in the request), reporting what is
/// wrong with it and with the steps nested in it; `None` when anything is.
/// A `yield` is not checked against the task's workflows here (see
/// [`check_workflows`]).
pub fn parse_step(step: &JsonObject, at: &[LocPart], issues: &mut Issues) -> Option<Step> {
    Parser { issues, workflows: None }.step(step, at)
}

/// Checks a task's workflows: `main` (at `main_at`) and the named ones (each
/// with its place in the request), parsing every step; `None` when anything
/// is wrong (every violation is in `issues`). A `yield` must name one of them.
pub fn check_workflows(
    main: &[JsonObject],
    main_at: &[LocPart],
    named: &[(&str, &[JsonObject], Vec<LocPart>)],
    issues: &mut Issues,
) -> Option<Workflows> {
    let names: BTreeSet<String> =
        std::iter::once(MAIN.to_string()).chain(named.iter().map(|(n, ..)| n.to_string())).collect();
    let mut parser = Parser { issues, workflows: Some(&names) };
    let before = parser.issues.len();
    let mut workflows = BTreeMap::new();
    let main = parser.steps_list(main, main_at);
    if let Some(main) = main {
        workflows.insert(MAIN.to_string(), main);
    }
    for (name, steps, at) in named {
        if let Some(steps) = parser.steps_list(steps, at) {
            workflows.insert(name.to_string(), steps);
        }
    }
    (parser.issues.len() == before).then_some(Workflows { workflows })
}

/// Parses a stored task's workflows (`main` and the named ones) for a run.
/// A task is checked when it is written, so this fails only for one stored
/// before a rule existed: the error names the first problem and its place
/// (e.g. `workflows.sub[2].evaluate.x: the expression does not compile: …`).
pub fn parse_workflows(
    main: &[JsonObject],
    workflows: &BTreeMap<String, Vec<JsonObject>>,
) -> Result<Workflows, String> {
    let named: Vec<(&str, &[JsonObject], Vec<LocPart>)> = workflows
        .iter()
        .map(|(name, steps)| (name.as_str(), steps.as_slice(), loc(&[], &["workflows", name])))
        .collect();
    let mut issues = Issues::new(Source::Body);
    match check_workflows(main, &[LocPart::Key(MAIN.into())], &named, &mut issues) {
        Some(w) => Ok(w),
        None => {
            let first = issues.into_vec().into_iter().next();
            Err(first.map_or_else(
                || "the task's steps are not valid".to_owned(),
                |i| format!("{}: {}", place(&i.loc[1..]), i.msg),
            ))
        }
    }
}

/// A `loc` (without its source) as a path: `main[2].evaluate.x`.
pub fn place(loc: &[LocPart]) -> String {
    let mut s = String::new();
    for part in loc {
        match part {
            LocPart::Key(k) if s.is_empty() => s.push_str(k),
            LocPart::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            LocPart::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

struct Parser<'a> {
    issues: &'a mut Issues,
    /// The task's workflows, when a `yield` is to be checked against them.
    workflows: Option<&'a BTreeSet<String>>,
}

/// The JSON type of a value, for messages ("a list", "null").
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Parser<'_> {
    fn push(&mut self, at: &[LocPart], kind: &str, msg: impl Into<String>) {
        self.issues.push(at, kind, msg);
    }

    /// Runs `f`, answering its value only if it reported nothing.
    fn clean<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        let before = self.issues.len();
        let value = f(self);
        if self.issues.len() == before { value } else { None }
    }

    fn step(&mut self, step: &JsonObject, at: &[LocPart]) -> Option<Step> {
        let kinds: Vec<&str> = STEP_KINDS.iter().copied().filter(|k| step.contains_key(*k)).collect();
        let [kind] = kinds.as_slice() else {
            let found = if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") };
            self.push(
                at,
                "value_error",
                format!("a step has exactly one of the keys {} (found: {found})", STEP_KINDS.join(", ")),
            );
            return None;
        };
        let kind = *kind;
        let value = &step[kind];
        let key_at = loc(at, &[kind]);
        self.clean(|p| match kind {
            "evaluate" => p.expr_map(value, &key_at).map(Step::Evaluate),
            "prompt" => p.prompt(step, value, at),
            "tool_call" | "tool" => {
                let tool = p.name(value, &key_at, "the tool's name");
                let arguments = p.optional_expr_map(step.get("arguments"), &loc(at, &["arguments"]));
                Some(Step::ToolCall { tool: tool?, arguments: arguments? })
            }
            "if" => {
                let cond = p.expr(value, &key_at);
                let then = p.required_steps(step.get("then"), &loc(at, &["then"]));
                let otherwise = step.get("else").map(|e| p.nested_steps(e, &loc(at, &["else"])));
                let otherwise = match otherwise {
                    Some(steps) => Some(steps?),
                    None => None,
                };
                Some(Step::If { cond: cond?, then: then?, otherwise })
            }
            "switch" => p.switch(value, &key_at).map(Step::Switch),
            "foreach" => {
                let body = p.object(value, &key_at)?;
                let items = p.required_expr(body.get("in"), &loc(&key_at, &["in"]));
                let steps = p.required_steps(body.get("do"), &loc(&key_at, &["do"]));
                Some(Step::Foreach { items: items?, body: steps? })
            }
            "over" => p.map_reduce(step, at),
            "parallel" => p.parallel(value, &key_at).map(Step::Parallel),
            "sleep" => p.sleep(value, &key_at).map(|seconds| Step::Sleep { seconds }),
            "wait_for_input" => {
                let body = p.object(value, &key_at)?;
                let info = p.optional_expr_map(body.get("info"), &loc(&key_at, &["info"]));
                Some(Step::WaitForInput { info: info? })
            }
            "return" => p.expr_map(value, &key_at).map(Step::Return),
            "workflow" => {
                let workflow = p.name(value, &key_at, "the workflow's name")?;
                if let Some(names) = p.workflows
                    && !names.contains(&workflow)
                {
                    let known: Vec<&str> = names.iter().map(String::as_str).collect();
                    p.push(
                        &key_at,
                        "value_error",
                        format!(
                            "the task has no workflow named '{workflow}' (its workflows: {})",
                            known.join(", ")
                        ),
                    );
                }
                let arguments = p.optional_expr_map(step.get("arguments"), &loc(at, &["arguments"]));
                Some(Step::Yield { workflow, arguments: arguments? })
            }
            "log" => p.template(value, &key_at).map(Step::Log),
            "get" => p.name(value, &key_at, "the key to get").map(Step::Get),
            "set" => p.expr_map(value, &key_at).map(Step::Set),
            "error" => p.template(value, &key_at).map(Step::Error),
            _ => unreachable!("every kind of STEP_KINDS is parsed"),
        })
    }

    /// A list of steps (a workflow), each checked at its index.
    fn steps_list(&mut self, steps: &[JsonObject], at: &[LocPart]) -> Option<Vec<Step>> {
        self.clean(|p| {
            let parsed: Vec<Option<Step>> =
                steps.iter().enumerate().map(|(i, s)| p.step(s, &loc_index(at, i))).collect();
            parsed.into_iter().collect()
        })
    }

    /// A nested step, or a non-empty list of them.
    fn nested_steps(&mut self, value: &Value, at: &[LocPart]) -> Option<Vec<Step>> {
        match value {
            Value::Object(step) => self.step(step, at).map(|s| vec![s]),
            Value::Array(items) if items.is_empty() => {
                self.push(at, "too_short", "expected a step or a list of at least one step");
                None
            }
            Value::Array(items) => self.clean(|p| {
                let parsed: Vec<Option<Step>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| {
                        let at = loc_index(at, i);
                        match item {
                            Value::Object(step) => p.step(step, &at),
                            other => {
                                p.push(
                                    &at,
                                    "value_error",
                                    format!("expected a step (an object), got {}", type_name(other)),
                                );
                                None
                            }
                        }
                    })
                    .collect();
                parsed.into_iter().collect()
            }),
            _ => {
                self.push(at, "value_error", "expected a step (an object) or a list of steps");
                None
            }
        }
    }

    fn required_steps(&mut self, value: Option<&Value>, at: &[LocPart]) -> Option<Vec<Step>> {
        match value {
            Some(v) => self.nested_steps(v, at),
            None => {
                self.push(at, "missing", "Field required: the steps to run (a step or a list of steps)");
                None
            }
        }
    }

    fn object<'v>(&mut self, value: &'v Value, at: &[LocPart]) -> Option<&'v JsonObject> {
        match value {
            Value::Object(m) => Some(m),
            other => {
                self.push(at, "dict_type", format!("expected an object, got {}", type_name(other)));
                None
            }
        }
    }

    /// A non-empty string: a tool's, a workflow's or a key's name.
    fn name(&mut self, value: &Value, at: &[LocPart], what: &str) -> Option<String> {
        match value {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::String(_) => {
                self.push(at, "string_too_short", format!("expected {what}, got an empty string"));
                None
            }
            other => {
                self.push(at, "string_type", format!("expected {what} (a string), got {}", type_name(other)));
                None
            }
        }
    }

    fn check_expression(&mut self, source: &str, at: &[LocPart]) -> bool {
        match expression_compiles(expression_source(source)) {
            Ok(()) => true,
            // A plain string here is an expression: a text must be quoted in it.
            Err(e) if !source.starts_with(EXPR_PREFIX) => {
                self.push(
                    at,
                    "value_error",
                    format!("the expression does not compile: {e} (a text here is written quoted, e.g. \"'hello'\")"),
                );
                false
            }
            Err(e) => {
                self.push(at, "value_error", format!("the expression does not compile: {e}"));
                false
            }
        }
    }

    /// An expression's place: a string is an expression, anything else a literal.
    fn expr(&mut self, value: &Value, at: &[LocPart]) -> Option<Expr> {
        let ok = match value {
            Value::String(s) => self.check_expression(s, at),
            other => self.literal(other, at),
        };
        ok.then(|| Expr(value.clone()))
    }

    fn required_expr(&mut self, value: Option<&Value>, at: &[LocPart]) -> Option<Expr> {
        match value {
            Some(v) => self.expr(v, at),
            None => {
                self.push(at, "missing", "Field required: an expression");
                None
            }
        }
    }

    /// A literal: only its strings that start with `$ ` are expressions.
    fn literal(&mut self, value: &Value, at: &[LocPart]) -> bool {
        match value {
            Value::String(s) if s.starts_with(EXPR_PREFIX) => self.check_expression(s, at),
            Value::Array(items) => {
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    ok &= self.literal(item, &loc_index(at, i));
                }
                ok
            }
            Value::Object(m) => {
                let mut ok = true;
                for (k, item) in m {
                    ok &= self.literal(item, &loc(at, &[k]));
                }
                ok
            }
            _ => true,
        }
    }

    /// `{k: expr}`.
    fn expr_map(&mut self, value: &Value, at: &[LocPart]) -> Option<Vec<(String, Expr)>> {
        let m = self.object(value, at)?;
        self.clean(|p| {
            let parsed: Vec<Option<(String, Expr)>> =
                m.iter().map(|(k, v)| p.expr(v, &loc(at, &[k])).map(|e| (k.clone(), e))).collect();
            parsed.into_iter().collect()
        })
    }

    fn optional_expr_map(&mut self, value: Option<&Value>, at: &[LocPart]) -> Option<Vec<(String, Expr)>> {
        match value {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(v) => self.expr_map(v, at),
        }
    }

    fn template(&mut self, value: &Value, at: &[LocPart]) -> Option<Template> {
        let Value::String(s) = value else {
            self.push(at, "string_type", format!("expected a template (a string), got {}", type_name(value)));
            return None;
        };
        match template_compiles(s) {
            Ok(()) => Some(Template(s.clone())),
            Err(e) if s.starts_with(EXPR_PREFIX) => {
                self.push(at, "value_error", format!("the expression does not compile: {e}"));
                None
            }
            Err(e) => {
                self.push(at, "value_error", format!("the template does not compile: {e}"));
                None
            }
        }
    }

    fn prompt(&mut self, step: &JsonObject, value: &Value, at: &[LocPart]) -> Option<Step> {
        let key_at = loc(at, &["prompt"]);
        let prompt = match value {
            Value::String(s) if s.starts_with(EXPR_PREFIX) => {
                self.expr(value, &key_at).map(PromptInput::Expr)
            }
            Value::String(_) => self.template(value, &key_at).map(PromptInput::Text),
            Value::Array(messages) => self.clean(|p| {
                let parsed: Vec<Option<PromptMessage>> =
                    messages.iter().enumerate().map(|(i, m)| p.message(m, &loc_index(&key_at, i))).collect();
                parsed.into_iter().collect::<Option<Vec<_>>>().map(PromptInput::Messages)
            }),
            other => {
                self.push(
                    &key_at,
                    "value_error",
                    format!("expected a template (a string) or a list of messages, got {}", type_name(other)),
                );
                None
            }
        };
        let tools = match step.get("tools") {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) if s == "all" => Some(Some(PromptTools::All)),
            Some(Value::Array(names)) if names.iter().all(|n| n.as_str().is_some_and(|s| !s.is_empty())) => {
                Some(Some(PromptTools::Named(
                    names.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect(),
                )))
            }
            Some(_) => {
                self.push(&loc(at, &["tools"]), "value_error", "tools is \"all\" or a list of tool names");
                None
            }
        };
        let settings = match step.get("settings") {
            None | Some(Value::Null) => Some(None),
            Some(v) => self.object(v, &loc(at, &["settings"])).map(|m| Some(m.clone())),
        };
        let unwrap = match step.get("unwrap") {
            None | Some(Value::Null) => Some(false),
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                self.push(
                    &loc(at, &["unwrap"]),
                    "bool_type",
                    format!("unwrap is true or false, got {}", type_name(other)),
                );
                None
            }
        };
        Some(Step::Prompt {
            prompt: prompt?,
            tools: tools?,
            tool_choice: step.get("tool_choice").filter(|v| !v.is_null()).cloned(),
            settings: settings?,
            unwrap: unwrap?,
        })
    }

    fn message(&mut self, value: &Value, at: &[LocPart]) -> Option<PromptMessage> {
        let m = self.object(value, at)?;
        let role = match m.get("role") {
            Some(v) => self.name(v, &loc(at, &["role"]), "the message's role"),
            None => {
                self.push(
                    &loc(at, &["role"]),
                    "missing",
                    "Field required: the message's role (user, system, assistant)",
                );
                None
            }
        };
        let content = match m.get("content") {
            Some(v) => self.template(v, &loc(at, &["content"])),
            None => {
                self.push(
                    &loc(at, &["content"]),
                    "missing",
                    "Field required: the message's content (a template)",
                );
                None
            }
        };
        Some(PromptMessage { role: role?, content: content? })
    }

    fn switch(&mut self, value: &Value, at: &[LocPart]) -> Option<Vec<(Option<Expr>, Vec<Step>)>> {
        let Value::Array(cases) = value else {
            self.push(at, "list_type", format!("expected a list of cases, got {}", type_name(value)));
            return None;
        };
        if cases.is_empty() {
            self.push(at, "too_short", "a switch has at least one case");
            return None;
        }
        self.clean(|p| {
            let parsed: Vec<Option<(Option<Expr>, Vec<Step>)>> = cases
                .iter()
                .enumerate()
                .map(|(i, case)| {
                    let at = loc_index(at, i);
                    let case = p.object(case, &at)?;
                    let cond = match case.get("case") {
                        Some(Value::String(s)) if s == "_" => Some(None),
                        Some(v) => p.expr(v, &loc(&at, &["case"])).map(Some),
                        None => {
                            p.push(
                                &loc(&at, &["case"]),
                                "missing",
                                "Field required: the case's expression, or \"_\"",
                            );
                            None
                        }
                    };
                    let then = p.required_steps(case.get("then"), &loc(&at, &["then"]));
                    Some((cond?, then?))
                })
                .collect();
            parsed.into_iter().collect()
        })
    }

    fn map_reduce(&mut self, step: &JsonObject, at: &[LocPart]) -> Option<Step> {
        let over = self.expr(&step["over"], &loc(at, &["over"]));
        let map_at = loc(at, &["map"]);
        let map = match step.get("map") {
            Some(Value::Object(m)) => self.step(m, &map_at),
            Some(other) => {
                self.push(
                    &map_at,
                    "dict_type",
                    format!("expected a step (an object), got {}", type_name(other)),
                );
                None
            }
            None => {
                self.push(&map_at, "missing", "Field required: the step to run on each item");
                None
            }
        };
        let reduce = match step.get("reduce") {
            None | Some(Value::Null) => Some(None),
            Some(v) => self.expr(v, &loc(at, &["reduce"])).map(Some),
        };
        let parallelism = match step.get("parallelism") {
            None | Some(Value::Null) => Some(1),
            Some(v) => match v.as_u64() {
                Some(n) if (1..=MAX_PARALLELISM).contains(&n) => Some(n as u32),
                _ => {
                    self.push(
                        &loc(at, &["parallelism"]),
                        "value_error",
                        format!("parallelism is a whole number from 1 to {MAX_PARALLELISM}, got {v}"),
                    );
                    None
                }
            },
        };
        Some(Step::MapReduce {
            over: over?,
            map: Box::new(map?),
            reduce: reduce?,
            initial: step.get("initial").cloned(),
            parallelism: parallelism?,
        })
    }

    fn parallel(&mut self, value: &Value, at: &[LocPart]) -> Option<Vec<Step>> {
        let Value::Array(branches) = value else {
            self.push(
                at,
                "list_type",
                format!("expected a list of steps (one per branch), got {}", type_name(value)),
            );
            return None;
        };
        if branches.is_empty() || branches.len() > MAX_PARALLEL_BRANCHES {
            self.push(
                at,
                "value_error",
                format!("a parallel step has 1 to {MAX_PARALLEL_BRANCHES} branches, got {}", branches.len()),
            );
            return None;
        }
        self.clean(|p| {
            let parsed: Vec<Option<Step>> = branches
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let at = loc_index(at, i);
                    let step = p.object(b, &at)?;
                    p.step(step, &at)
                })
                .collect();
            parsed.into_iter().collect()
        })
    }

    /// `{seconds?, minutes?, hours?, days?}`, in seconds: more than 0, at most 30 days.
    fn sleep(&mut self, value: &Value, at: &[LocPart]) -> Option<f64> {
        let m = self.object(value, at)?;
        self.clean(|p| {
            let before = p.issues.len();
            let mut total = 0.0;
            for (k, v) in m {
                let unit = match k.as_str() {
                    "seconds" => 1.0,
                    "minutes" => 60.0,
                    "hours" => 3600.0,
                    "days" => 86400.0,
                    _ => {
                        p.push(
                            &loc(at, &[k]),
                            "value_error",
                            "a sleep takes seconds, minutes, hours and days",
                        );
                        continue;
                    }
                };
                match v.as_f64() {
                    Some(n) if n >= 0.0 => total += n * unit,
                    _ => p.push(
                        &loc(at, &[k]),
                        "value_error",
                        format!("{k} is a number of 0 or more, got {v}"),
                    ),
                }
            }
            if p.issues.len() == before && !(total > 0.0 && total <= MAX_SLEEP_S) {
                p.push(
                    at,
                    "value_error",
                    format!(
                        "a sleep lasts more than 0 s and at most 30 days, got {}",
                        readable_seconds(total)
                    ),
                );
            }
            Some(total)
        })
    }
}

/// Seconds as a person reads them: `90 s`, `0.5 s`, `45 days`; beyond 10,000
/// days, or under a millisecond, in scientific notation (`1e308 s`), never the
/// hundreds of digits a large `f64` prints as.
pub fn readable_seconds(seconds: f64) -> String {
    const DAY: f64 = 86400.0;
    if !seconds.is_finite() {
        return "more seconds than a number can hold".to_owned();
    }
    let magnitude = seconds.abs();
    if magnitude != 0.0 && !(1e-3..1e4 * DAY).contains(&magnitude) {
        format!("{seconds:e} s")
    } else if magnitude > 30.0 * DAY {
        let days = seconds / DAY;
        format!("{} days ({} s)", trimmed(days), trimmed(seconds))
    } else {
        format!("{} s", trimmed(seconds))
    }
}

/// At most three decimals, none when they are zeros.
fn trimmed(n: f64) -> String {
    let text = format!("{n:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
#[path = "step_parser_tests.rs"]
mod tests;
