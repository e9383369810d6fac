//! A [`Record`] as a row of `records` and back: the columns a read selects,
//! the values a write binds, and the size a page counts for a row.

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};
use tokio_postgres::Row;
use tokio_postgres::types::Json;
use uuid::Uuid;

use crate::store::{Kind, Metadata, Record, StoreError, StoreResult};

/// The columns of a record, as every read selects them (after any it puts first).
pub(super) const COLUMNS: &str =
    "id, scope, created_at, updated_at, version, unique_name, refs, metadata, data";

/// What a row counts for against a page's `max_bytes`: about the size of the
/// record's JSON (its text columns, its ids and times, its field names), a
/// little more rather than less, as the embedded store counts a record's
/// stored JSON.
pub(super) const SIZE: &str = "(octet_length(data) + coalesce(octet_length(metadata), 4) \
     + 2 * coalesce(octet_length(unique_name), 0) + 40 * cardinality(refs) + 300)";

pub(super) fn kind_code(kind: Kind) -> i16 {
    i16::from(kind as u8)
}

/// The key the unique index holds for a unique name: its SHA-256, so that a
/// name of any length fits an index entry.
pub(super) fn unique_key(name: &str) -> Vec<u8> {
    Sha256::digest(name.as_bytes()).to_vec()
}

/// The version as the `bigint` column holds it.
pub(super) fn version_code(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}

/// A count (limit, offset, bytes) as a `bigint` parameter: larger ones mean "all".
pub(super) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The values a write binds for a record, besides its keys.
pub(super) struct Columns {
    pub(super) unique_name: Option<Vec<u8>>,
    pub(super) unique_key: Option<Vec<u8>>,
    pub(super) metadata: Option<String>,
    pub(super) data: String,
    pub(super) metadata_index: Option<Json<Value>>,
}

impl Columns {
    pub(super) fn of(r: &Record) -> StoreResult<Columns> {
        Ok(Columns {
            unique_name: r.unique.as_ref().map(|n| n.as_bytes().to_vec()),
            unique_key: r.unique.as_deref().map(unique_key),
            metadata: r.metadata.as_ref().map(to_json).transpose()?,
            data: to_json(&r.data)?,
            // No metadata matches no filter: `{}` contains none of them.
            metadata_index: match &r.metadata {
                Some(m) => index_form(m).map(Json),
                None => Some(Json(Value::Object(Metadata::new()))),
            },
        })
    }
}

/// JSON text of a record's part (infallible for `Value`s and maps of them).
fn to_json(v: &impl serde::Serialize) -> StoreResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Io(format!("a record does not serialise: {e}")))
}

/// The metadata as `metadata_index` holds it, or `None` when jsonb cannot
/// hold it (a string or key with a NUL). Numbers that are integers are
/// written as integers (`1.0` as `1`), so that jsonb, which compares numbers
/// by their decimal value, finds equal exactly what the filter
/// ([`crate::metadata`]) does: an integral float's shortest text (say
/// `1.152921504606847e18`) is not always the integer it equals.
pub(super) fn index_form(metadata: &Metadata) -> Option<Value> {
    fn value(v: &Value) -> Option<Value> {
        Some(match v {
            Value::String(s) => {
                if s.contains('\0') {
                    return None;
                }
                v.clone()
            }
            Value::Number(n) => Value::Number(integral(n).unwrap_or_else(|| n.clone())),
            Value::Array(a) => Value::Array(a.iter().map(value).collect::<Option<_>>()?),
            Value::Object(m) => Value::Object(object(m)?),
            Value::Null | Value::Bool(_) => v.clone(),
        })
    }
    fn object(m: &Metadata) -> Option<Metadata> {
        m.iter().map(|(k, v)| if k.contains('\0') { None } else { Some((k.clone(), value(v)?)) }).collect()
    }
    object(metadata).map(Value::Object)
}

/// The integer a float equals, when it is one JSON integers parse into.
fn integral(n: &Number) -> Option<Number> {
    if n.is_i64() || n.is_u64() {
        return None;
    }
    let f = n.as_f64()?;
    if f.fract() != 0.0 {
        return None;
    }
    if (-9_223_372_036_854_775_808.0..0.0).contains(&f) {
        Some(Number::from(f as i64))
    } else if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
        Some(Number::from(f as u64))
    } else {
        None
    }
}

/// The record of a row that selected [`COLUMNS`] from column `at` on.
pub(super) fn record(kind: Kind, row: &Row, at: usize) -> StoreResult<Record> {
    let corrupt =
        |what: &str, e: &dyn std::fmt::Display| StoreError::Io(format!("corrupt record ({what}): {e}"));
    let get = |i: usize| at + i;
    let unique: Option<Vec<u8>> = row.try_get(get(5)).map_err(|e| corrupt("unique name", &e))?;
    let unique = unique.map(|b| String::from_utf8(b).map_err(|e| corrupt("unique name", &e))).transpose()?;
    let metadata: Option<&str> = row.try_get(get(7)).map_err(|e| corrupt("metadata", &e))?;
    let metadata = metadata
        .map(|m| serde_json::from_str::<Option<Metadata>>(m).map_err(|e| corrupt("metadata", &e)))
        .transpose()?
        .flatten();
    let data: &str = row.try_get(get(8)).map_err(|e| corrupt("data", &e))?;
    let version: i64 = row.try_get(get(4)).map_err(|e| corrupt("version", &e))?;
    Ok(Record {
        kind,
        id: row.try_get(get(0)).map_err(|e| corrupt("id", &e))?,
        scope: row.try_get(get(1)).map_err(|e| corrupt("scope", &e))?,
        created_at: row.try_get(get(2)).map_err(|e| corrupt("created_at", &e))?,
        updated_at: row.try_get(get(3)).map_err(|e| corrupt("updated_at", &e))?,
        version: u64::try_from(version).map_err(|e| corrupt("version", &e))?,
        unique,
        refs: row.try_get::<_, Vec<Uuid>>(get(6)).map_err(|e| corrupt("refs", &e))?,
        metadata,
        data: serde_json::from_str(data).map_err(|e| corrupt("data", &e))?,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_index_form_writes_integral_floats_as_integers_and_refuses_nul() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let form = index_form(&m(json!({"a": 1.0, "b": [2.5, -0.0], "c": {"d": 1152921504606846976.0_f64}})));
        assert_eq!(form.unwrap().to_string(), r#"{"a":1,"b":[2.5,0],"c":{"d":1152921504606846976}}"#);
        assert!(index_form(&m(json!({"a": "x\u{0}y"}))).is_none());
        assert!(index_form(&m(json!({"a\u{0}": 1}))).is_none());
        assert!(index_form(&m(json!({"a": [{"b": "\u{0}"}]}))).is_none());
    }
}
