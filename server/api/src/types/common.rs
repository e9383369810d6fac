//! What every resource's types share: JSON objects and record metadata with
//! their bounds, the name patterns, and the PATCH helper for `null` fields.

use schemars::JsonSchema;
use schemars::r#gen::SchemaGenerator;
use schemars::schema::{InstanceType, Schema, SchemaObject};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// A JSON object: a JSON Schema, a step of a task, a tool's parameters.
pub type JsonObject = serde_json::Map<String, Value>;

/// The most top-level keys a record's `metadata` may have.
pub const METADATA_MAX_KEYS: usize = 64;
/// The most bytes a record's `metadata` may take as (compact) JSON.
pub const METADATA_MAX_BYTES: usize = 16 * 1024;
/// A schema keyword of ours (an OpenAPI `x-` extension): the most bytes the
/// value may take as compact JSON. [`super::validate`] enforces it.
pub const MAX_JSON_BYTES_KEYWORD: &str = "x-max-json-bytes";

/// Free-form key/value data attached to a record: a JSON object of at most
/// [`METADATA_MAX_KEYS`] top-level keys and [`METADATA_MAX_BYTES`] as JSON.
///
/// Both bounds are in its schema (`maxProperties` and [`MAX_JSON_BYTES_KEYWORD`]),
/// so requests are checked against them with everything else; a PATCH checks
/// the merged result with [`metadata_violation`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Metadata(pub JsonObject);

impl Metadata {
    pub fn into_inner(self) -> JsonObject {
        self.0
    }
}

impl From<JsonObject> for Metadata {
    fn from(m: JsonObject) -> Self {
        Metadata(m)
    }
}

impl JsonSchema for Metadata {
    fn schema_name() -> String {
        "Metadata".into()
    }

    // Inline, like a plain object's schema: the generated client keeps a plain map.
    fn is_referenceable() -> bool {
        false
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let mut s = SchemaObject { instance_type: Some(InstanceType::Object.into()), ..Default::default() };
        s.object().max_properties = Some(METADATA_MAX_KEYS as u32);
        s.object().additional_properties = Some(Box::new(Schema::Bool(true)));
        s.extensions.insert(MAX_JSON_BYTES_KEYWORD.into(), Value::from(METADATA_MAX_BYTES));
        s.metadata().description = Some(format!(
            "Free-form key/value data: a JSON object of at most {METADATA_MAX_KEYS} top-level keys \
             and {METADATA_MAX_BYTES} bytes as JSON (422 beyond)."
        ));
        s.into()
    }
}

/// The size of `value` as compact JSON, counted without building the text,
/// and giving up (answering `limit + 1`) as soon as it passes `limit`.
pub fn json_size_within(value: &impl Serialize, limit: usize) -> usize {
    struct Counter {
        n: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.n += buf.len();
            if self.n > self.limit { Err(std::io::Error::other("over the limit")) } else { Ok(buf.len()) }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { n: 0, limit };
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.n,
        Err(_) => limit + 1,
    }
}

/// Why a metadata object (or a filter on metadata) breaks the bounds, as a
/// 422's `(type, msg)`: too many keys, or too many bytes as JSON.
pub fn metadata_violation(m: &JsonObject) -> Option<(&'static str, String)> {
    if m.len() > METADATA_MAX_KEYS {
        return Some((
            "too_long",
            format!("metadata should have at most {METADATA_MAX_KEYS} top-level keys, not {}", m.len()),
        ));
    }
    if json_size_within(m, METADATA_MAX_BYTES) > METADATA_MAX_BYTES {
        return Some((
            "too_long",
            format!("metadata should take at most {METADATA_MAX_BYTES} bytes as JSON"),
        ));
    }
    None
}

/// The name pattern of the interface (Unicode letters, then identifier characters).
pub const NAME_PATTERN: &str = r"^[\p{L}\p{Nl}\p{Pattern_Syntax}\p{Pattern_White_Space}]+[\p{ID_Start}\p{Mn}\p{Mc}\p{Nd}\p{Pc}\p{Pattern_Syntax}\p{Pattern_White_Space}]*$";
/// The project pattern of the interface.
pub const PROJECT_PATTERN: &str = r"^[a-zA-Z][a-zA-Z0-9_]*$";

/// Distinguishes an absent field (`None`) from an explicit `null` (`Some(None)`) in PATCH bodies.
pub fn double_option<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

pub(crate) fn default_true() -> bool {
    true
}
