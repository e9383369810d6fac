//! The helper functions expressions may call beyond minijinja's own filters:
//! `len str int float bool range min max sum sorted list dict keys values
//! json_dumps json_loads`, named and behaving as in Python where it matters.

use minijinja::value::{Kwargs, Rest, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Value as Json;

use super::value::{from_json, to_json};

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
    // minijinja's own `tojson` needs a feature this build leaves out.
    env.add_filter("tojson", json_dumps);
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, message)
}

fn len(v: &Value) -> Result<Value, Error> {
    v.len().map(Value::from).ok_or_else(|| invalid(format!("len() of a {} has no length", v.kind())))
}

/// Strings as they are; lists and objects as JSON; other values as a template prints them.
fn str(v: &Value) -> Result<Value, Error> {
    Ok(match v.kind() {
        ValueKind::String => v.clone(),
        ValueKind::Undefined | ValueKind::None => Value::from("null"),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => Value::from(json_text(v)?),
        _ => Value::from(minijinja::limits::display(v)?),
    })
}

fn int(v: &Value) -> Result<Value, Error> {
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
    match v.kind() {
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Map | ValueKind::String => {
            let mut out = Vec::new();
            for item in v.try_iter()? {
                minijinja::limits::charge_items(1)?;
                out.push(item);
            }
            Ok(out)
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
    // In order; a later key replaces an earlier one.
    let mut out: Vec<(Value, Value)> = Vec::new();
    if let Some(v) = v {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => {}
            ValueKind::Map => {
                for key in v.try_iter()? {
                    minijinja::limits::charge_items(2)?;
                    let item = v.get_item(&key)?;
                    out.push((key, item));
                }
            }
            ValueKind::Seq | ValueKind::Iterable => {
                for pair in v.try_iter()? {
                    minijinja::limits::charge_items(2)?;
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
        ValueKind::Map => Ok(()),
        kind => Err(invalid(format!("{function}() of a {kind}: expected an object"))),
    }
}

fn keys(v: &Value) -> Result<Value, Error> {
    map_of(v, "keys")?;
    minijinja::limits::charge_items(v.len().unwrap_or(0))?;
    Ok(Value::from(v.try_iter()?.collect::<Vec<_>>()))
}

fn values(v: &Value) -> Result<Value, Error> {
    map_of(v, "values")?;
    minijinja::limits::charge_items(v.len().unwrap_or(0))?;
    Ok(Value::from(v.try_iter()?.map(|k| v.get_item(&k)).collect::<Result<Vec<_>, _>>()?))
}

fn json_dumps(v: &Value) -> Result<Value, Error> {
    Ok(Value::from(json_text(v)?))
}

/// `v` as JSON text; the value and its text are both charged to the evaluation's budget.
fn json_text(v: &Value) -> Result<String, Error> {
    minijinja::limits::display(&to_json(v).map_err(invalid)?)
}

fn json_loads(s: &str) -> Result<Value, Error> {
    serde_json::from_str::<Json>(s)
        .map(from_json)
        .map_err(|e| invalid(format!("json_loads() of text that is not JSON: {e}")))
}
