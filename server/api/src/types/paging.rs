//! Lists: paging, order, the metadata filter and the page's shape.

use schemars::JsonSchema;
use schemars::r#gen::SchemaGenerator;
use schemars::schema::{InstanceType, Schema, SchemaObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::common::{JsonObject, metadata_violation};
use crate::error::LocPart;
use crate::validate::{Check, Issues};

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    #[default]
    CreatedAt,
    UpdatedAt,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Asc,
    #[default]
    Desc,
}

/// How many records a page has at most: 1 to 1000, 100 unless asked.
///
/// The bounds are the type's: its schema publishes them (and the extractor
/// enforces the schema), and it cannot hold another value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Limit(u16);

impl Limit {
    pub const MIN: u16 = 1;
    pub const MAX: u16 = 1000;
    pub const DEFAULT: Limit = Limit(100);

    pub fn get(self) -> usize {
        self.0.into()
    }
}

impl Default for Limit {
    fn default() -> Self {
        Limit::DEFAULT
    }
}

impl TryFrom<i64> for Limit {
    type Error = String;
    fn try_from(n: i64) -> Result<Self, String> {
        match u16::try_from(n) {
            Ok(n) if (Limit::MIN..=Limit::MAX).contains(&n) => Ok(Limit(n)),
            _ => Err(format!("limit must be between {} and {}", Limit::MIN, Limit::MAX)),
        }
    }
}

impl From<Limit> for i64 {
    fn from(l: Limit) -> i64 {
        l.0.into()
    }
}

impl JsonSchema for Limit {
    fn schema_name() -> String {
        "Limit".into()
    }

    fn is_referenceable() -> bool {
        false
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        int64_schema(Some(Limit::MIN.into()), Some(Limit::MAX.into()))
    }
}

/// How many matching records a page skips first: 0 or more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Offset(u64);

impl Offset {
    pub fn get(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl TryFrom<i64> for Offset {
    type Error = String;
    fn try_from(n: i64) -> Result<Self, String> {
        u64::try_from(n).map(Offset).map_err(|_| "offset must be 0 or more".to_owned())
    }
}

impl From<Offset> for i64 {
    fn from(o: Offset) -> i64 {
        i64::try_from(o.0).unwrap_or(i64::MAX)
    }
}

impl JsonSchema for Offset {
    fn schema_name() -> String {
        "Offset".into()
    }

    fn is_referenceable() -> bool {
        false
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        int64_schema(Some(0.0), None)
    }
}

/// An `int64` integer schema with these bounds, inlined where it is used.
fn int64_schema(minimum: Option<f64>, maximum: Option<f64>) -> Schema {
    let mut schema = SchemaObject {
        instance_type: Some(InstanceType::Integer.into()),
        format: Some("int64".into()),
        ..Default::default()
    };
    schema.number().minimum = minimum;
    schema.number().maximum = maximum;
    schema.into()
}

/// A list page stops adding records once its body would pass this many bytes
/// (it always has at least one): clients page on with `offset += len(items)`.
pub const LIST_PAGE_MAX_BYTES: usize = 8 * 1024 * 1024;

/// Paging, order and filter of a list.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ListParams {
    /// How many records to answer at most (1 to 1000). A page also stops
    /// adding records once its body would pass 8 MiB (it always has at least
    /// one): page on with `offset += len(items)` until a page comes back empty.
    #[serde(default)]
    pub limit: Limit,
    /// How many matching records to skip first.
    #[serde(default)]
    pub offset: Offset,
    /// The timestamp to order by.
    #[serde(default)]
    pub sort_by: SortBy,
    /// Newest first (`desc`, the default) or oldest first (`asc`).
    #[serde(default)]
    pub direction: Direction,
    /// A JSON object, e.g. `{"lang":"en"}`: only records whose metadata has every
    /// given top-level key with an equal value. Bounded as metadata is (at most
    /// 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<String>,
}

/// Parses a `metadata_filter` query value, reporting a non-object as a 422,
/// and one beyond the bounds of metadata (it could match nothing) too.
pub fn parse_metadata_filter(raw: Option<&str>, issues: &mut Issues) -> Option<JsonObject> {
    let raw = raw?;
    let at = [LocPart::Key("metadata_filter".into())];
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => match metadata_violation(&m) {
            Some((kind, msg)) => {
                issues.push(&at, kind, msg.replacen("metadata", "metadata_filter", 1));
                None
            }
            None => Some(m),
        },
        Ok(_) => {
            issues.push(&at, "dict_type", "metadata_filter should be a JSON object, e.g. {\"lang\":\"en\"}");
            None
        }
        Err(e) => {
            issues.push(&at, "json_invalid", format!("metadata_filter is not valid JSON: {e}"));
            None
        }
    }
}

impl Check for ListParams {
    fn check(&self, issues: &mut Issues) {
        parse_metadata_filter(self.metadata_filter.as_deref(), issues);
    }
}

/// The object of a `metadata_filter` query value that [`parse_metadata_filter`] accepted.
pub(crate) fn metadata_filter_object(raw: Option<&str>) -> Option<JsonObject> {
    match raw.map(serde_json::from_str::<Value>) {
        Some(Ok(Value::Object(m))) => Some(m),
        _ => None,
    }
}

impl ListParams {
    pub fn filter(&self) -> Option<JsonObject> {
        metadata_filter_object(self.metadata_filter.as_deref())
    }
}

/// A page of a list: at most `limit` records, fewer when the page would pass
/// 8 MiB (always at least one); an empty page means the list is over.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ListResponse<T> {
    pub items: Vec<T>,
}

#[cfg(test)]
mod tests {
    use super::{Limit, Offset};

    #[test]
    fn limit_and_offset_hold_only_values_within_their_bounds() {
        assert_eq!(Limit::default().get(), 100);
        assert_eq!(Limit::try_from(1).map(Limit::get), Ok(1));
        assert_eq!(Limit::try_from(1000).map(Limit::get), Ok(1000));
        for n in [0, 1001, -1, i64::MAX] {
            assert_eq!(Limit::try_from(n), Err("limit must be between 1 and 1000".to_owned()));
        }
        assert_eq!(Offset::try_from(0).map(Offset::get), Ok(0));
        assert!(Offset::try_from(-1).is_err());
    }

    #[test]
    fn their_schemas_publish_the_bounds_inline() {
        let schema = |s: schemars::schema::Schema| serde_json::to_value(s).unwrap();
        let mut generator = schemars::r#gen::SchemaGenerator::default();
        assert_eq!(
            schema(generator.subschema_for::<Limit>()),
            serde_json::json!({"type": "integer", "format": "int64", "minimum": 1.0, "maximum": 1000.0})
        );
        assert_eq!(
            schema(generator.subschema_for::<Offset>()),
            serde_json::json!({"type": "integer", "format": "int64", "minimum": 0.0})
        );
    }
}
