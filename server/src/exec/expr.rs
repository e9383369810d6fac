//! The expression language of steps: minijinja expressions and templates,
//! sandboxed the way system templates are (same syntax, no file system, no
//! `include`), bounded by fuel, with the context and helper functions tasks use.
//!
//! - An [`Expr`] that is a string is an expression (an optional `$ ` prefix is
//!   dropped); any other JSON is a literal whose strings starting with `$ ` are
//!   expressions, at any depth.
//! - A [`Template`] is rendered as text, unless it starts with `$ `: then it is
//!   an expression and its value is the result.
//! - Undefined is *chainable*, as in system templates: `_.missing` and
//!   `_.missing.deeper` are undefined rather than errors, and an undefined
//!   result is `null` (Julep tasks often probe optional fields).
//! - Python's common methods work (`_.name.upper()`, `_.get('k', 0)`,
//!   `', '.join(xs)`, `text.split(',')`): see `methods`.
//! - Values come back as JSON: undefined and none are `null`, integers stay
//!   integers.
//! - Each evaluation is bounded three ways: fuel (instructions,
//!   `executions.expression_fuel`), the bytes it may build in all, counted
//!   before they are allocated (`executions.expression_max_bytes`: every
//!   string, list and text it makes, its result's JSON included), and time
//!   (`executions.expression_timeout_ms`). See `minijinja::limits` (our patch).
//! - [`offload`] keeps an evaluation off the async workers when it is slow:
//!   it runs on the calling thread for at most [`QUICK_SLICE`], and one that
//!   takes longer runs again, with its whole time, on a blocking thread
//!   (evaluations have no side effects, so running one again is safe).
//!
//! The context ([`Context`]) is never converted as a whole: the engine hands
//! it over as `Arc`s of JSON, and expressions see it through lazy objects that
//! convert only what they read. A 1,000-entry `outputs` or a 1,000-step `task`
//! costs nothing unless an expression walks it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use minijinja::limits::{Exceeded, Limits};

use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};
use serde_json::Value as Json;

use crate::api::types::{Expr, Template};

mod helpers;
mod methods;
mod value;

use value::root;
pub use value::to_json;

/// Most bytes one rendered template may produce (the same cap as system templates).
pub const MAX_OUTPUT_BYTES: usize = crate::models::template::MAX_OUTPUT_BYTES;

/// The prefix that marks a string as an expression (Julep's convention).
const EXPR_PREFIX: &str = "$ ";

/// What expressions and templates see. `Arc`s, so the engine builds one per step cheaply.
#[derive(Clone)]
pub struct Context {
    /// `_`: the previous step's output (the input at the first step of `main`,
    /// the arguments in a yielded workflow, the item in a foreach/map body).
    pub last: Arc<Json>,
    /// `input`; `inputs` is `[input]`.
    pub input: Arc<Json>,
    /// `outputs`: a JSON array, this workflow's outputs so far.
    pub outputs: Arc<Json>,
    /// `state`: a JSON object of `set` values.
    pub state: Arc<Json>,
    /// `execution`: `{id, task_id}`.
    pub execution: Arc<Json>,
    pub agent: Arc<Json>,
    pub task: Arc<Json>,
    /// `results`: only in `reduce`.
    pub results: Option<Arc<Json>>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The whole context may be large: never print it.
        f.write_str("Context")
    }
}

/// How long an evaluation may run on an async worker before [`offload`] moves it.
pub const QUICK_SLICE: Duration = Duration::from_millis(20);

std::thread_local! {
    /// Set while [`offload`] runs an evaluation on the calling thread: its time limit.
    static SLICE: std::cell::Cell<Option<Duration>> = const { std::cell::Cell::new(None) };
    /// Set when an evaluation under [`SLICE`] ran out of its slice.
    static SLOW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f(eval, input, ctx)` (calls of the [`Evaluator`]) on this thread
/// within [`QUICK_SLICE`]; if it runs longer, runs it again on a blocking
/// thread with the evaluator's whole time, on copies of `input` and `ctx`
/// (made only then).
pub async fn offload<I, T>(
    eval: &Arc<Evaluator>,
    input: &I,
    ctx: &Context,
    f: fn(&Evaluator, &I, &Context) -> Result<T, String>,
) -> Result<T, String>
where
    I: ?Sized + ToOwned + 'static,
    I::Owned: Send + 'static,
    T: Send + 'static,
{
    SLICE.with(|s| s.set(Some(QUICK_SLICE)));
    SLOW.with(|s| s.set(false));
    let answer = f(eval, input, ctx);
    SLICE.with(|s| s.set(None));
    if !SLOW.with(|s| s.replace(false)) {
        return answer;
    }
    let (eval, input, ctx) = (eval.clone(), input.to_owned(), ctx.clone());
    tokio::task::spawn_blocking(move || f(&eval, std::borrow::Borrow::borrow(&input), &ctx))
        .await
        .map_err(|e| format!("the evaluation stopped: {e}"))?
}

/// What one expression or template may use: see the module's docs.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Instructions (`executions.expression_fuel`).
    pub fuel: u64,
    /// Bytes built in all (`executions.expression_max_bytes`).
    pub max_bytes: usize,
    /// Time (`executions.expression_timeout_ms`).
    pub timeout: Duration,
}

impl Bounds {
    /// `fuel` instructions, with the default bounds of bytes and time.
    pub fn with_fuel(fuel: u64) -> Self {
        let defaults = crate::config::ExecutionsConfig::default();
        Bounds { fuel, ..defaults.expression_bounds() }
    }
}

/// Evaluates expressions and renders templates. Build one, share it (`&self` everywhere).
pub struct Evaluator {
    env: Environment<'static>,
    bounds: Bounds,
}

impl fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evaluator").field("bounds", &self.bounds).finish()
    }
}

impl Evaluator {
    /// An evaluator whose every expression or template is held to `bounds`.
    pub fn new(bounds: Bounds) -> Self {
        let mut env = Environment::new();
        env.set_syntax(crate::api::types::template_syntax());
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_fuel(Some(bounds.fuel.max(1)));
        helpers::register(&mut env);
        env.set_unknown_method_callback(methods::call);
        Evaluator { env, bounds }
    }

    /// The value of an [`Expr`].
    pub fn eval(&self, expr: &Expr, ctx: &Context) -> Result<Json, String> {
        let root = root(ctx);
        match &expr.0 {
            Json::String(s) => self.eval_str(s.strip_prefix(EXPR_PREFIX).unwrap_or(s), &root),
            literal => self.eval_literal(literal, &root),
        }
    }

    /// `(key, expr)` pairs into a JSON object of their values.
    pub fn eval_object(&self, pairs: &[(String, Expr)], ctx: &Context) -> Result<Json, String> {
        let mut out = serde_json::Map::new();
        for (key, expr) in pairs {
            out.insert(key.clone(), self.eval(expr, ctx)?);
        }
        Ok(Json::Object(out))
    }

    /// A [`Template`]: the rendered text (a JSON string), or, when it starts
    /// with `$ `, the expression's value.
    pub fn render(&self, template: &Template, ctx: &Context) -> Result<Json, String> {
        match template.0.strip_prefix(EXPR_PREFIX) {
            Some(source) => self.eval_str(source, &root(ctx)),
            None => self.render_str(&template.0, &root(ctx)).map(Json::String),
        }
    }

    /// Runs one evaluation within [`Bounds`]; a bound it passed is the error,
    /// naming its setting, whatever else it answered.
    fn bounded<T>(
        &self,
        what: &str,
        source: &str,
        f: impl FnOnce() -> Result<T, String>,
    ) -> Result<T, String> {
        let slice = SLICE.with(|s| s.get()).filter(|s| *s < self.bounds.timeout);
        let max_time = slice.unwrap_or(self.bounds.timeout);
        let limits = Limits { max_bytes: self.bounds.max_bytes, max_time: Some(max_time) };
        match minijinja::limits::with_limits(limits, f) {
            (_, Some(Exceeded::Time(_))) if slice.is_some() => {
                SLOW.with(|s| s.set(true));
                Err("the evaluation needs more than its slice of an async worker".into())
            }
            (_, Some(Exceeded::Bytes(max))) => Err(format!(
                "{what} `{}` would build more than the limit of {max} bytes \
                 (executions.expression_max_bytes)",
                excerpt(source)
            )),
            (_, Some(Exceeded::Time(max))) => Err(format!(
                "{what} `{}` ran longer than the limit of {} ms (executions.expression_timeout_ms)",
                excerpt(source),
                max.as_millis()
            )),
            (answer, None) => answer,
        }
    }

    /// A [`Template`] as text: an expression's value is the string itself, or
    /// the JSON text of any other value.
    pub fn render_text(&self, template: &Template, ctx: &Context) -> Result<String, String> {
        match self.render(template, ctx)? {
            Json::String(s) => Ok(s),
            other => Ok(other.to_string()),
        }
    }

    /// Literal JSON, with its `$ ` strings evaluated.
    fn eval_literal(&self, literal: &Json, root: &Value) -> Result<Json, String> {
        Ok(match literal {
            Json::String(s) => match s.strip_prefix(EXPR_PREFIX) {
                Some(source) => self.eval_str(source, root)?,
                None => literal.clone(),
            },
            Json::Array(items) => {
                Json::Array(items.iter().map(|v| self.eval_literal(v, root)).collect::<Result<_, _>>()?)
            }
            Json::Object(map) => Json::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.eval_literal(v, root)?)))
                    .collect::<Result<_, String>>()?,
            ),
            scalar => scalar.clone(),
        })
    }

    fn eval_str(&self, source: &str, root: &Value) -> Result<Json, String> {
        let compiled =
            self.env.compile_expression(source).map_err(|e| compile_error("expression", source, &e))?;
        self.bounded("expression", source, || {
            let value = compiled.eval(root.clone()).map_err(|e| self.run_error("expression", source, &e))?;
            to_json(&value).map_err(|e| format!("expression `{}`: {e}", excerpt(source)))
        })
    }

    fn render_str(&self, source: &str, root: &Value) -> Result<String, String> {
        let template =
            self.env.template_from_str(source).map_err(|e| compile_error("template", source, &e))?;
        self.bounded("template", source, || self.render_compiled(&template, source, root))
    }

    fn render_compiled(
        &self,
        template: &minijinja::Template<'_, '_>,
        source: &str,
        root: &Value,
    ) -> Result<String, String> {
        let mut out = crate::models::template::CappedWriter::default();
        match template.render_captured_to(root.clone(), &mut out) {
            Ok(_) => {}
            Err(_) if out.overflowed => {
                return Err(format!(
                    "template `{}`: the rendered text is longer than {MAX_OUTPUT_BYTES} bytes",
                    excerpt(source)
                ));
            }
            Err(e) => return Err(self.run_error("template", source, &e)),
        }
        String::from_utf8(out.buf)
            .map_err(|e| format!("template `{}`: the text is not UTF-8: {e}", excerpt(source)))
    }

    fn run_error(&self, what: &str, source: &str, e: &Error) -> String {
        if e.kind() == ErrorKind::OutOfFuel {
            return format!(
                "{what} `{}` ran out of fuel: it took more than the limit of {} steps \
                 (executions.expression_fuel); is there a runaway loop?",
                excerpt(source),
                self.bounds.fuel
            );
        }
        format!("{what} `{}` failed: {}", excerpt(source), describe(e))
    }
}

fn compile_error(what: &str, source: &str, e: &Error) -> String {
    format!("{what} `{}` does not compile: {}", excerpt(source), describe(e))
}

fn describe(e: &Error) -> String {
    let mut text = match e.detail() {
        Some(detail) => format!("{}: {detail}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line().filter(|l| *l > 1) {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// The start of a (possibly long) source, for error messages.
fn excerpt(source: &str) -> String {
    const MAX_CHARS: usize = 80;
    let source = source.trim();
    match source.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &source[..cut]),
        None => source.to_string(),
    }
}

/// Collects output, refusing writes past [`MAX_OUTPUT_BYTES`].
#[cfg(test)]
mod tests;
