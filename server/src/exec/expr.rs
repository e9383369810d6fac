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
//! - Values come back as JSON: undefined and none are `null`, integers stay
//!   integers.
//!
//! The context ([`Context`]) is never converted as a whole: the engine hands
//! it over as `Arc`s of JSON, and expressions see it through lazy objects that
//! convert only what they read. A 1,000-entry `outputs` or a 1,000-step `task`
//! costs nothing unless an expression walks it.

use std::fmt;
use std::io;
use std::sync::Arc;

use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Rest};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior, Value};
use serde_json::Value as Json;

use crate::api::types::{Expr, Template};

/// Most bytes one rendered template may produce (the same cap as system templates).
pub const MAX_OUTPUT_BYTES: usize = crate::models::template::MAX_OUTPUT_BYTES;

/// The prefix that marks a string as an expression (Julep's convention).
const EXPR_PREFIX: &str = "$ ";

/// Containers nest at most this deep when a result is converted back to JSON.
const MAX_DEPTH: usize = 128;

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

/// Evaluates expressions and renders templates. Build one, share it (`&self` everywhere).
pub struct Evaluator {
    env: Environment<'static>,
    fuel: u64,
}

impl fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Evaluator").field("fuel", &self.fuel).finish()
    }
}

impl Evaluator {
    /// An evaluator whose every expression or template may run `fuel` instructions.
    pub fn new(fuel: u64) -> Self {
        let mut env = Environment::new();
        env.set_syntax(crate::api::types::template_syntax());
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        env.set_fuel(Some(fuel.max(1)));
        helpers::register(&mut env);
        Evaluator { env, fuel }
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

    /// A [`Template`] as text: an expression's value is the string itself, or
    /// the JSON text of any other value.
    pub fn render_text(&self, template: &Template, ctx: &Context) -> Result<String, String> {
        match self.render(template, ctx)? {
            Json::String(s) => Ok(s),
            other => Ok(other.to_string()),
        }
    }

    /// Checks that `source` compiles as an expression (without running it).
    pub fn check_expression(&self, source: &str) -> Result<(), String> {
        let source = source.strip_prefix(EXPR_PREFIX).unwrap_or(source);
        self.env.compile_expression(source).map(|_| ()).map_err(|e| compile_error("expression", source, &e))
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
        let value = compiled.eval(root.clone()).map_err(|e| self.run_error("expression", source, &e))?;
        to_json(&value).map_err(|e| format!("expression `{}`: {e}", excerpt(source)))
    }

    fn render_str(&self, source: &str, root: &Value) -> Result<String, String> {
        let template =
            self.env.template_from_str(source).map_err(|e| compile_error("template", source, &e))?;
        let mut out = CappedWriter::default();
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
                self.fuel
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
#[derive(Default)]
struct CappedWriter {
    buf: Vec<u8>,
    overflowed: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > MAX_OUTPUT_BYTES {
            self.overflowed = true;
            return Err(io::Error::other("template output limit reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// The context, seen lazily.

/// The names the context has.
const NAMES: &[&str] = &["_", "input", "inputs", "outputs", "state", "execution", "agent", "task", "results"];

fn root(ctx: &Context) -> Value {
    Value::from_object(Root(ctx.clone()))
}

/// The top-level variables of an expression.
#[derive(Debug)]
struct Root(Context);

impl Object for Root {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.get_value_by_str(key.as_str()?)
    }

    fn get_value_by_str(self: &Arc<Self>, name: &str) -> Option<Value> {
        let ctx = &self.0;
        Some(match name {
            "_" => lazy_root(&ctx.last),
            "input" => lazy_root(&ctx.input),
            "inputs" => Value::from(vec![lazy_root(&ctx.input)]),
            "outputs" => lazy_root(&ctx.outputs),
            "state" => lazy_root(&ctx.state),
            "execution" => lazy_root(&ctx.execution),
            "agent" => lazy_root(&ctx.agent),
            "task" => lazy_root(&ctx.task),
            "results" => lazy_root(ctx.results.as_ref()?),
            _ => return None,
        })
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let names = if self.0.results.is_some() { NAMES } else { &NAMES[..NAMES.len() - 1] };
        Enumerator::Str(names)
    }
}

/// One step of the way from a context value's root to a node inside it.
#[derive(Clone, Debug)]
enum Seg {
    Key(Arc<str>),
    Index(usize),
}

/// A JSON array or object inside one of the context's values, converted only
/// as it is read. Holds the root `Arc` and the path to the node (no borrow
/// can outlive an evaluation otherwise).
struct LazyJson {
    root: Arc<Json>,
    path: Vec<Seg>,
}

impl fmt::Debug for LazyJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.node())
    }
}

impl LazyJson {
    fn node(&self) -> &Json {
        let mut node = &*self.root;
        for seg in &self.path {
            node = match seg {
                Seg::Key(key) => &node[key.as_ref()],
                Seg::Index(index) => &node[*index],
            };
        }
        node
    }

    fn child(&self, seg: Seg, value: &Json) -> Value {
        lazy(
            &self.root,
            || {
                let mut path = Vec::with_capacity(self.path.len() + 1);
                path.extend(self.path.iter().cloned());
                path.push(seg);
                path
            },
            value,
        )
    }
}

fn lazy_root(root: &Arc<Json>) -> Value {
    lazy(root, Vec::new, root)
}

/// `value` (found at `path` in `root`) as a minijinja value: scalars converted,
/// containers wrapped.
fn lazy(root: &Arc<Json>, path: impl FnOnce() -> Vec<Seg>, value: &Json) -> Value {
    match value {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(_) | Json::Object(_) => Value::from_object(LazyJson { root: root.clone(), path: path() }),
    }
}

impl Object for LazyJson {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        match self.node() {
            Json::Array(_) => ObjectRepr::Seq,
            _ => ObjectRepr::Map,
        }
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match self.node() {
            Json::Array(items) => {
                let index = key.as_i64()?;
                let index = if index < 0 {
                    items.len().checked_sub(index.unsigned_abs() as usize)?
                } else {
                    index as usize
                };
                items.get(index).map(|item| self.child(Seg::Index(index), item))
            }
            Json::Object(_) => self.get_value_by_str(key.as_str()?),
            _ => None,
        }
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        let Json::Object(map) = self.node() else { return None };
        map.get(key).map(|value| self.child(Seg::Key(Arc::from(key)), value))
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        match self.node() {
            Json::Array(items) => Enumerator::Seq(items.len()),
            Json::Object(map) => Enumerator::Values(map.keys().map(|k| Value::from(k.as_str())).collect()),
            _ => Enumerator::Empty,
        }
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        match self.node() {
            Json::Array(items) => Some(items.len()),
            Json::Object(map) => Some(map.len()),
            _ => Some(0),
        }
    }
}

// ---------------------------------------------------------------------------
// Back to JSON.

/// A minijinja value as JSON: undefined and none are `null`, integers stay
/// integers, maps' keys become strings.
pub fn to_json(value: &Value) -> Result<Json, String> {
    to_json_at(value, 0)
}

fn to_json_at(value: &Value, depth: usize) -> Result<Json, String> {
    use minijinja::value::ValueKind;
    if depth > MAX_DEPTH {
        return Err(format!("the value nests deeper than {MAX_DEPTH} levels"));
    }
    if let Some(node) = value.downcast_object_ref::<LazyJson>() {
        return Ok(node.node().clone());
    }
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Json::Null,
        ValueKind::Bool => Json::Bool(value.is_true()),
        ValueKind::Number => number_to_json(value),
        ValueKind::String => Json::String(value.as_str().unwrap_or_default().to_string()),
        ValueKind::Bytes => {
            Json::String(String::from_utf8_lossy(value.as_bytes().unwrap_or_default()).into_owned())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let iter = value.try_iter().map_err(|e| e.to_string())?;
            Json::Array(iter.map(|item| to_json_at(&item, depth + 1)).collect::<Result<_, _>>()?)
        }
        ValueKind::Map => {
            let mut out = serde_json::Map::new();
            for key in value.try_iter().map_err(|e| e.to_string())? {
                let item = value.get_item(&key).map_err(|e| e.to_string())?;
                let key = match key.as_str() {
                    Some(s) => s.to_string(),
                    None => key.to_string(),
                };
                out.insert(key, to_json_at(&item, depth + 1)?);
            }
            Json::Object(out)
        }
        ValueKind::Invalid => return Err(format!("invalid value: {value}")),
        // Functions, macros and other plain objects: their printed form.
        _ => Json::String(value.to_string()),
    })
}

fn number_to_json(value: &Value) -> Json {
    if value.is_integer() {
        if let Ok(i) = i64::try_from(value.clone()) {
            return Json::from(i);
        }
        if let Ok(u) = u64::try_from(value.clone()) {
            return Json::from(u);
        }
    }
    f64::try_from(value.clone())
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Json::Number)
        .unwrap_or(Json::Null)
}

/// JSON as a minijinja value, converted lazily.
fn from_json(json: Json) -> Value {
    let root = Arc::new(json);
    lazy_root(&root)
}

// ---------------------------------------------------------------------------
// The helper functions.

mod helpers {
    use super::*;

    pub(super) fn register(env: &mut Environment<'static>) {
        env.add_function("len", len);
        env.add_function("str", str);
        env.add_function("int", int);
        env.add_function("float", float);
        env.add_function("bool", |v: &Value| Value::from(v.is_true()));
        // `range` is minijinja's own: lazy, and refuses more than 100,000 items.
        env.add_function("min", |args: Rest<Value>| extreme(args, "min", std::cmp::Ordering::Less));
        env.add_function("max", |args: Rest<Value>| extreme(args, "max", std::cmp::Ordering::Greater));
        env.add_function("sum", sum);
        env.add_function("sorted", sorted);
        env.add_function("list", list);
        env.add_function("dict", dict);
        env.add_function("keys", keys);
        env.add_function("values", values);
        env.add_function("json_dumps", json_dumps);
        env.add_function("json_loads", json_loads);
    }

    fn invalid(message: String) -> Error {
        Error::new(ErrorKind::InvalidOperation, message)
    }

    fn len(v: &Value) -> Result<Value, Error> {
        v.len().map(Value::from).ok_or_else(|| invalid(format!("len() of a {} has no length", v.kind())))
    }

    /// Strings as they are; lists and objects as JSON; other values as a template prints them.
    fn str(v: &Value) -> Result<Value, Error> {
        use minijinja::value::ValueKind;
        Ok(match v.kind() {
            ValueKind::String => v.clone(),
            ValueKind::Undefined | ValueKind::None => Value::from("null"),
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
                Value::from(to_json(v).map_err(invalid)?.to_string())
            }
            _ => Value::from(v.to_string()),
        })
    }

    fn int(v: &Value) -> Result<Value, Error> {
        use minijinja::value::ValueKind;
        match v.kind() {
            ValueKind::Bool => Ok(Value::from(i64::from(v.is_true()))),
            ValueKind::Number if v.is_integer() => Ok(v.clone()),
            ValueKind::Number => {
                let f = f64::try_from(v.clone())?;
                if f.is_finite() && f.abs() < 9.2e18 {
                    Ok(Value::from(f.trunc() as i64))
                } else {
                    Err(invalid(format!("int() of {f}: not a finite integer")))
                }
            }
            ValueKind::String => {
                let s = v.as_str().unwrap_or_default().trim();
                s.parse::<i64>()
                    .map(Value::from)
                    .map_err(|_| invalid(format!("int() cannot read {s:?} as an integer")))
            }
            kind => Err(invalid(format!("int() of a {kind}: expected a number, a string or a bool"))),
        }
    }

    fn float(v: &Value) -> Result<Value, Error> {
        use minijinja::value::ValueKind;
        match v.kind() {
            ValueKind::Bool => Ok(Value::from(if v.is_true() { 1.0 } else { 0.0 })),
            ValueKind::Number => Ok(Value::from(f64::try_from(v.clone())?)),
            ValueKind::String => {
                let s = v.as_str().unwrap_or_default().trim();
                s.parse::<f64>()
                    .map(Value::from)
                    .map_err(|_| invalid(format!("float() cannot read {s:?} as a number")))
            }
            kind => Err(invalid(format!("float() of a {kind}: expected a number, a string or a bool"))),
        }
    }

    /// The items of `v`, refusing what cannot be iterated.
    fn items(v: &Value, function: &str) -> Result<Vec<Value>, Error> {
        use minijinja::value::ValueKind;
        match v.kind() {
            ValueKind::Seq | ValueKind::Iterable | ValueKind::Map | ValueKind::String => {
                Ok(v.try_iter()?.collect())
            }
            kind => Err(invalid(format!("{function}() of a {kind}: expected a list"))),
        }
    }

    /// `min(list)` or `min(a, b, ...)`; the same for `max`.
    fn extreme(args: Rest<Value>, function: &str, wanted: std::cmp::Ordering) -> Result<Value, Error> {
        let candidates = match &args[..] {
            [] => return Err(invalid(format!("{function}() needs a list or at least two values"))),
            [one] => items(one, function)?,
            many => many.to_vec(),
        };
        let mut best: Option<Value> = None;
        for candidate in candidates {
            best = match best {
                Some(b) if candidate.cmp(&b) != wanted => Some(b),
                _ => Some(candidate),
            };
        }
        best.ok_or_else(|| invalid(format!("{function}() of an empty list")))
    }

    /// `sum(list, start=0)`: integers stay integers until a float joins.
    fn sum(list: &Value, start: Option<Value>) -> Result<Value, Error> {
        let mut int_total: Option<i64> = Some(0);
        let mut float_total = 0.0f64;
        let start = start.unwrap_or(Value::from(0));
        for item in std::iter::once(start).chain(items(list, "sum")?) {
            if !item.is_number() {
                return Err(invalid(format!("sum() of a list holding a {}: expected numbers", item.kind())));
            }
            match (int_total, item.is_integer()) {
                (Some(total), true) => {
                    match i64::try_from(item.clone()).ok().and_then(|i| total.checked_add(i)) {
                        Some(next) => int_total = Some(next),
                        None => {
                            float_total = total as f64 + f64::try_from(item)?;
                            int_total = None;
                        }
                    }
                }
                (Some(total), false) => {
                    float_total = total as f64 + f64::try_from(item)?;
                    int_total = None;
                }
                (None, _) => float_total += f64::try_from(item)?,
            }
        }
        Ok(match int_total {
            Some(total) => Value::from(total),
            None => Value::from(float_total),
        })
    }

    /// `sorted(list, reverse=false)`.
    fn sorted(list: &Value, kwargs: Kwargs) -> Result<Value, Error> {
        let reverse: Option<bool> = kwargs.get("reverse")?;
        kwargs.assert_all_used()?;
        let mut out = items(list, "sorted")?;
        out.sort();
        if reverse.unwrap_or(false) {
            out.reverse();
        }
        Ok(Value::from(out))
    }

    /// `list(x)`: a list's items, a string's characters, an object's keys.
    fn list(v: Option<Value>) -> Result<Value, Error> {
        match v {
            None => Ok(Value::from(Vec::<Value>::new())),
            Some(v) => Ok(Value::from(items(&v, "list")?)),
        }
    }

    /// `dict(object or [[k, v], ...], **more)`.
    fn dict(v: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
        use minijinja::value::ValueKind;
        // In order; a later key replaces an earlier one.
        let mut out: Vec<(Value, Value)> = Vec::new();
        if let Some(v) = v {
            match v.kind() {
                ValueKind::Undefined | ValueKind::None => {}
                ValueKind::Map => {
                    for key in v.try_iter()? {
                        let item = v.get_item(&key)?;
                        out.push((key, item));
                    }
                }
                ValueKind::Seq | ValueKind::Iterable => {
                    for pair in v.try_iter()? {
                        match pair.len() {
                            Some(2) if !matches!(pair.kind(), ValueKind::String | ValueKind::Map) => {
                                out.push((pair.get_item_by_index(0)?, pair.get_item_by_index(1)?));
                            }
                            _ => return Err(invalid("dict() of a list: expected [key, value] pairs".into())),
                        }
                    }
                }
                kind => {
                    return Err(invalid(format!("dict() of a {kind}: expected an object or a list of pairs")));
                }
            }
        }
        for key in kwargs.args() {
            out.push((Value::from(key), kwargs.peek::<Value>(key)?));
        }
        Ok(Value::from_pairs(out))
    }

    fn map_of(v: &Value, function: &str) -> Result<(), Error> {
        match v.kind() {
            minijinja::value::ValueKind::Map => Ok(()),
            kind => Err(invalid(format!("{function}() of a {kind}: expected an object"))),
        }
    }

    fn keys(v: &Value) -> Result<Value, Error> {
        map_of(v, "keys")?;
        Ok(Value::from(v.try_iter()?.collect::<Vec<_>>()))
    }

    fn values(v: &Value) -> Result<Value, Error> {
        map_of(v, "values")?;
        Ok(Value::from(v.try_iter()?.map(|k| v.get_item(&k)).collect::<Result<Vec<_>, _>>()?))
    }

    fn json_dumps(v: &Value) -> Result<Value, Error> {
        Ok(Value::from(to_json(v).map_err(invalid)?.to_string()))
    }

    fn json_loads(s: &str) -> Result<Value, Error> {
        serde_json::from_str::<Json>(s)
            .map(from_json)
            .map_err(|e| invalid(format!("json_loads() of text that is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests;
