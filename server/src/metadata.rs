//! What "metadata matches a filter" means, for every list and every search:
//! the one definition of equal JSON values, and the canonical form that the
//! store's metadata index hashes so that equal values share one index key.
//!
//! A filter matches when the metadata has every key of the filter with an
//! equal value. Values are equal when they are the same JSON value, with
//! numbers compared by their exact value: `1`, `1.0` and `1e0` are equal (so
//! are `0` and `-0.0`), `1.5` equals only `1.5`, and an integer equals a float
//! only when the float is exactly that integer (`9007199254740993` is not
//! `9007199254740992.0`). Object keys are compared whatever their order;
//! arrays element by element. JSON has no NaN, so equality is an equivalence.

use serde_json::{Map, Number, Value};

/// A record's or a doc's metadata, and a filter of it.
pub type Metadata = Map<String, Value>;

/// True when `metadata` has every key of `filter` with an equal value.
///
/// An empty filter matches everything (including records without metadata).
pub fn metadata_matches(filter: &Metadata, metadata: Option<&Metadata>) -> bool {
    if filter.is_empty() {
        return true;
    }
    let Some(metadata) = metadata else {
        return false;
    };
    filter.iter().all(|(key, wanted)| metadata.get(key).is_some_and(|have| values_equal(have, wanted)))
}

/// Whether two JSON values are equal, numbers by value (see the module docs).
pub fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => NumberValue::of(x) == NumberValue::of(y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| values_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(key, v)| y.get(key).is_some_and(|w| values_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Appends the canonical form of `value` to `out`: two values have the same
/// canonical form exactly when [`values_equal`] says they are equal.
///
/// It is the value's compact JSON text with object keys sorted and every
/// number that is an integer written as that integer (`1.0` as `1`, `-0.0` as
/// `0`); other numbers keep their JSON text (`2.5`, `1e+300`), which always
/// holds a `.` or an `e`. So the form differs from format 1's (release
/// 0.1.0, which hashed numbers as written) only for floats that are integers.
pub fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for k in keys {
                out.extend_from_slice(serde_json::to_string(k).unwrap_or_default().as_bytes());
                out.push(b':');
                canonical(&m[k], out);
                out.push(b',');
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for x in a {
                canonical(x, out);
                out.push(b',');
            }
            out.push(b']');
        }
        Value::Number(n) => match NumberValue::of(n) {
            NumberValue::Integer(i) => out.extend_from_slice(i.to_string().as_bytes()),
            NumberValue::Float(_) => out.extend_from_slice(n.to_string().as_bytes()),
        },
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// A JSON number by its exact value.
#[derive(Debug, PartialEq)]
enum NumberValue {
    /// Every number that is an integer in the range JSON integers parse into
    /// (i64 and u64), whether written as an integer or as a float.
    Integer(i128),
    /// Any other number (never NaN, never an integral value in that range):
    /// its bits, as distinct floats are distinct values.
    Float(u64),
}

impl NumberValue {
    fn of(n: &Number) -> NumberValue {
        if let Some(i) = n.as_i64() {
            return NumberValue::Integer(i128::from(i));
        }
        if let Some(u) = n.as_u64() {
            return NumberValue::Integer(i128::from(u));
        }
        let f = n.as_f64().expect("a JSON number is an i64, a u64 or an f64");
        // [-2^63, 2^64): every integral float here converts to i128 exactly.
        if f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..18_446_744_073_709_551_616.0).contains(&f) {
            NumberValue::Integer(f as i128)
        } else {
            NumberValue::Float(f.to_bits())
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    fn canonical_of(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        canonical(v, &mut out);
        out
    }

    /// Values as a client may spell them; equal spellings are in one group.
    const GROUPS: &[&[&str]] = &[
        &["1", "1.0", "1e0", "10e-1", "1.00"],
        &["0", "-0", "0.0", "-0.0", "0e5"],
        &["-1", "-1.0", "-1e0"],
        &["2.5", "25e-1"],
        &["-2.5"],
        &["9007199254740992", "9007199254740992.0", "9007199254740993.0"],
        &["9007199254740993"],
        &["18446744073709551615"],
        &["18446744073709551616", "18446744073709551616.0", "1.8446744073709552e19"],
        &["-9223372036854775808", "-9223372036854775808.0"],
        &["1e300", "1.0e300"],
        &["\"1\""],
        &["true"],
        &["null"],
        &["[1, 2.0]", "[1.0, 2]"],
        &["[2, 1]"],
        &["{\"a\": 1, \"b\": [1.0]}", "{\"b\": [1], \"a\": 1.0}"],
        &["{\"a\": 1}"],
        &["{}"],
        &["[]"],
        &["\"\""],
    ];

    #[test]
    fn equality_and_the_canonical_form_agree_on_every_pair() {
        let all: Vec<(usize, Value)> = GROUPS
            .iter()
            .enumerate()
            .flat_map(|(g, texts)| texts.iter().map(move |t| (g, parse(t))))
            .collect();
        for (g, a) in &all {
            for (h, b) in &all {
                assert_eq!(values_equal(a, b), g == h, "{a} = {b}");
                assert_eq!(canonical_of(a) == canonical_of(b), g == h, "canonical {a} vs {b}");
            }
        }
    }

    #[test]
    fn the_canonical_form_is_the_previous_text_except_for_integral_floats() {
        for (text, form) in [
            ("1", "1"),
            ("1.0", "1"),
            ("-0.0", "0"),
            ("2.5", "2.5"),
            ("1e300", "1e+300"),
            ("\"x\\\"y\"", "\"x\\\"y\""),
            ("{\"b\": null, \"a\": [true, 1.0]}", "{\"a\":[true,1,],\"b\":null,}"),
        ] {
            assert_eq!(String::from_utf8(canonical_of(&parse(text))).unwrap(), form, "{text}");
        }
    }

    #[test]
    fn a_filter_needs_every_key_with_an_equal_value() {
        let meta = |v: Value| v.as_object().unwrap().clone();
        let have = meta(json!({"n": 1.0, "lang": "en", "tags": ["a", 2]}));
        assert!(metadata_matches(&meta(json!({})), None), "an empty filter matches everything");
        assert!(metadata_matches(&meta(json!({"n": 1})), Some(&have)));
        assert!(metadata_matches(&meta(json!({"n": 1, "tags": ["a", 2.0]})), Some(&have)));
        assert!(!metadata_matches(&meta(json!({"n": 1, "lang": "fr"})), Some(&have)));
        assert!(!metadata_matches(&meta(json!({"missing": null})), Some(&have)));
        assert!(!metadata_matches(&meta(json!({"n": 1})), None));
    }
}
