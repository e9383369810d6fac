//! Values between JSON and minijinja: the context seen lazily (only what an
//! expression reads is converted), and results converted back to JSON.

use std::fmt;
use std::sync::Arc;

use minijinja::Value;
use minijinja::value::{Enumerator, Object, ObjectRepr};
use serde_json::Value as Json;

use super::Context;

/// Containers nest at most this deep when a result is converted back to JSON.
const MAX_DEPTH: usize = 128;

/// The names the context has.
const NAMES: &[&str] = &["_", "input", "inputs", "outputs", "state", "execution", "agent", "task", "results"];

pub(super) fn root(ctx: &Context) -> Value {
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
        charge(weight(node.node()))?;
        return Ok(node.node().clone());
    }
    charge(NODE_BYTES)?;
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Json::Null,
        ValueKind::Bool => Json::Bool(value.is_true()),
        ValueKind::Number => number_to_json(value),
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            charge(s.len())?;
            Json::String(s.to_string())
        }
        ValueKind::Bytes => {
            let b = value.as_bytes().unwrap_or_default();
            charge(b.len())?;
            Json::String(String::from_utf8_lossy(b).into_owned())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let iter = value.try_iter().map_err(|e| e.to_string())?;
            Json::Array(iter.map(|item| to_json_at(&item, depth + 1)).collect::<Result<_, _>>()?)
        }
        ValueKind::Map => {
            let mut out = serde_json::Map::new();
            for key in value.try_iter().map_err(|e| e.to_string())? {
                charge(key.as_str().map_or(NODE_BYTES, str::len))?;
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

/// What one JSON node costs beyond its text, as [`charge`]d.
const NODE_BYTES: usize = std::mem::size_of::<Json>();

/// Charges `bytes` about to be built against the evaluation's budget
/// (`minijinja::limits`): a result is converted within it too.
fn charge(bytes: usize) -> Result<(), String> {
    minijinja::limits::charge(bytes).map_err(|e| e.to_string())
}

/// About what a copy of `json` costs: its text and a node each.
fn weight(json: &Json) -> usize {
    NODE_BYTES
        + match json {
            Json::String(s) => s.len(),
            Json::Array(items) => items.iter().map(weight).sum(),
            Json::Object(map) => map.iter().map(|(k, v)| k.len() + weight(v)).sum(),
            _ => 0,
        }
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
pub(super) fn from_json(json: Json) -> Value {
    let root = Arc::new(json);
    lazy_root(&root)
}
