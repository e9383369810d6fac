//! Metadata filtering: top-level key equality on JSON values.

use serde_json::{Map, Number, Value};

/// True when `metadata` has every key of `filter` with an equal value.
///
/// An empty filter matches everything (including docs without metadata).
/// Numbers compare by value, so `1` equals `1.0`.
pub(super) fn metadata_matches(filter: &Map<String, Value>, metadata: Option<&Map<String, Value>>) -> bool {
    if filter.is_empty() {
        return true;
    }
    let Some(metadata) = metadata else {
        return false;
    };
    filter.iter().all(|(key, wanted)| metadata.get(key).is_some_and(|have| json_eq(have, wanted)))
}

fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_eq(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, v)| y.get(key).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn number_eq(x: &Number, y: &Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    matches!((x.as_f64(), y.as_f64()), (Some(a), Some(b)) if a == b)
}
