//! Request validation against the JSON Schema of the request type.
//!
//! Bounds, patterns and defaults are declared once, on the Rust types, with
//! schemars attributes. The same schema goes into the OpenAPI document and is
//! compiled here to check incoming JSON before it is deserialised, so the spec
//! and the runtime can never disagree, and every violation of a request is
//! reported (not just the first), each with its `loc` and a pydantic-style `type`.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{PatternOptions, Validator};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Issue, LocPart};
use crate::types::{MAX_JSON_BYTES_KEYWORD, json_size_within};

/// Where a value came from: the first element of every `loc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Path,
    Query,
    Header,
    Body,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Path => "path",
            Source::Query => "query",
            Source::Header => "header",
            Source::Body => "body",
        }
    }
}

/// Extra rules a type cannot say in JSON Schema (one-of-two fields, a template
/// that must compile, ...). They run after the schema check and deserialisation.
pub trait Check {
    fn check(&self, _issues: &mut Issues) {}
}

/// Collects violations for one request.
pub struct Issues {
    source: Source,
    items: Vec<Issue>,
}

impl Issues {
    pub fn new(source: Source) -> Self {
        Issues { source, items: Vec::new() }
    }

    /// Records a violation at `path` (relative to the source).
    pub fn push(&mut self, path: &[LocPart], kind: &str, msg: impl Into<String>) {
        let mut loc = vec![LocPart::Key(self.source.as_str().to_string())];
        loc.extend(path.iter().cloned());
        self.items.push(Issue { loc, msg: msg.into(), kind: kind.to_string() });
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// How many violations so far (a parser compares it before and after a part).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn into_vec(self) -> Vec<Issue> {
        self.items
    }
}

/// The compiled validator and raw schema of a type, built once per type.
pub struct TypeSchema {
    validator: Validator,
    /// The root schema (draft 2020-12 compatible, `$defs` inlined by reference).
    pub schema: Value,
}

fn cache() -> &'static RwLock<HashMap<TypeId, Arc<TypeSchema>>> {
    static CACHE: OnceLock<RwLock<HashMap<TypeId, Arc<TypeSchema>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The JSON Schema of `T` as used for runtime validation.
pub fn schema_value<T: JsonSchema>() -> Value {
    let settings = schemars::r#gen::SchemaSettings::draft2019_09();
    let root = settings.into_generator().into_root_schema_for::<T>();
    serde_json::to_value(root).expect("a schemars schema serialises")
}

pub fn type_schema<T: JsonSchema + 'static>() -> Arc<TypeSchema> {
    let id = TypeId::of::<T>();
    if let Some(found) = cache().read().expect("schema cache").get(&id) {
        return found.clone();
    }
    let schema = schema_value::<T>();
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft201909)
        .should_validate_formats(true)
        .with_pattern_options(PatternOptions::regex())
        .with_keyword(MAX_JSON_BYTES_KEYWORD, max_json_bytes)
        .build(&schema)
        .unwrap_or_else(|e| panic!("schema of {} does not compile: {e}", T::schema_name()));
    let built = Arc::new(TypeSchema { validator, schema });
    cache().write().expect("schema cache").insert(id, built.clone());
    built
}

/// The keyword [`MAX_JSON_BYTES_KEYWORD`]: the value's size as compact JSON is at most `limit`.
struct MaxJsonBytes {
    limit: usize,
}

impl MaxJsonBytes {
    fn message(&self) -> String {
        format!("should take at most {} bytes as JSON", self.limit)
    }
}

impl<'i> jsonschema::Keyword<'i> for MaxJsonBytes {
    fn validate(&self, instance: &'i Value) -> Result<(), jsonschema::ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(jsonschema::ValidationError::custom(self.message()))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        json_size_within(instance, self.limit) <= self.limit
    }
}

fn max_json_bytes<'a>(
    _parent: &'a serde_json::Map<String, Value>,
    value: &'a Value,
    _path: jsonschema::paths::Location,
) -> Result<Box<dyn for<'i> jsonschema::Keyword<'i>>, jsonschema::ValidationError<'a>> {
    let limit = value.as_u64().ok_or_else(|| {
        jsonschema::ValidationError::schema(format!("{MAX_JSON_BYTES_KEYWORD} must be a byte count"))
    })?;
    Ok(Box::new(MaxJsonBytes { limit: usize::try_from(limit).unwrap_or(usize::MAX) }))
}

/// Validates `value` against `T`'s schema, deserialises it and runs its [`Check`].
pub fn validate_value<T>(source: Source, value: &Value) -> Result<T, Vec<Issue>>
where
    T: JsonSchema + DeserializeOwned + Check + 'static,
{
    let ts = type_schema::<T>();
    let mut issues = Issues::new(source);
    // A valid request (the common case) is checked without collecting errors,
    // and deserialised without tracking paths: each is redone, slower, only to
    // say where a request is wrong.
    if !ts.validator.is_valid(value) {
        for err in ts.validator.iter_errors(value) {
            report(&mut issues, value, &err);
        }
        if !issues.is_empty() {
            return Err(one_per_field(issues.into_vec()));
        }
    }
    let parsed: T = match <T as serde::Deserialize>::deserialize(value)
        .or_else(|_| serde_path_to_error::deserialize(value))
    {
        Ok(t) => t,
        Err(e) => {
            // The schema accepted it but serde did not: a rule the schema cannot say
            // (e.g. a UUID's exact syntax). Report it at the exact path.
            let path = serde_path_parts(e.path());
            let inner = e.into_inner().to_string();
            let kind =
                if inner.contains("UUID") || inner.contains("uuid") { "uuid_parsing" } else { "value_error" };
            issues.push(&path, kind, inner);
            return Err(issues.into_vec());
        }
    };
    parsed.check(&mut issues);
    if issues.is_empty() { Ok(parsed) } else { Err(issues.into_vec()) }
}

/// [`validate_value`] for a request that is valid, taking the value: its
/// strings move into the `T` rather than being copied and then freed with
/// the value (a long chat history's thousands of them). `None` when
/// anything is wrong; [`validate_value`] then says what.
pub fn validate_owned<T>(source: Source, value: Value) -> Option<T>
where
    T: JsonSchema + DeserializeOwned + Check + 'static,
{
    if !type_schema::<T>().validator.is_valid(&value) {
        return None;
    }
    let parsed: T = serde_json::from_value(value).ok()?;
    let mut issues = Issues::new(source);
    parsed.check(&mut issues);
    issues.is_empty().then_some(parsed)
}

/// Keeps one violation per field, as pydantic does: the most basic one
/// (wrong type or missing before a bound, a bound before a pattern).
fn one_per_field(issues: Vec<Issue>) -> Vec<Issue> {
    fn rank(kind: &str) -> u8 {
        match kind {
            k if k.ends_with("_type") || k == "missing" || k == "none_required" => 0,
            "string_pattern_mismatch" => 2,
            _ => 1,
        }
    }
    let mut out: Vec<Issue> = Vec::with_capacity(issues.len());
    for issue in issues {
        match out.iter_mut().find(|o| o.loc == issue.loc) {
            Some(o) if rank(&issue.kind) < rank(&o.kind) => *o = issue,
            Some(_) => {}
            None => out.push(issue),
        }
    }
    out
}

fn serde_path_parts(path: &serde_path_to_error::Path) -> Vec<LocPart> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(LocPart::Index(*index)),
            Segment::Map { key } => Some(LocPart::Key(key.clone())),
            Segment::Enum { variant } => Some(LocPart::Key(variant.clone())),
            Segment::Unknown => None,
        })
        .collect()
}

/// Turns a JSON-pointer-like instance location into `loc` parts, using the
/// instance to tell array indexes from object keys.
fn loc_parts(root: &Value, location: &jsonschema::paths::Location) -> Vec<LocPart> {
    let mut parts = Vec::new();
    let mut cur = Some(root);
    for seg in location.iter() {
        let part = match seg {
            LocationSegment::Index(i) => LocPart::Index(i),
            LocationSegment::Property(p) => match cur {
                Some(Value::Array(_)) if p.parse::<usize>().is_ok() => {
                    LocPart::Index(p.parse().expect("checked"))
                }
                _ => LocPart::Key(p.to_string()),
            },
        };
        cur = match (&part, cur) {
            (LocPart::Index(i), Some(Value::Array(a))) => a.get(*i),
            (LocPart::Key(k), Some(Value::Object(o))) => o.get(k),
            _ => None,
        };
        parts.push(part);
    }
    parts
}

fn type_name(kind: &TypeKind) -> &'static str {
    let first = match kind {
        TypeKind::Single(t) => t.to_string(),
        TypeKind::Multiple(set) => {
            set.iter().map(|t| t.to_string()).find(|t| t != "null").unwrap_or_else(|| "null".to_string())
        }
    };
    match first.as_str() {
        "string" => "string_type",
        "object" => "dict_type",
        "array" => "list_type",
        "integer" => "int_type",
        "number" => "float_type",
        "boolean" => "bool_type",
        _ => "none_required",
    }
}

fn type_msg(kind: &str) -> &'static str {
    match kind {
        "string_type" => "Input should be a valid string",
        "dict_type" => "Input should be a valid dictionary (a JSON object)",
        "list_type" => "Input should be a valid list",
        "int_type" => "Input should be a valid integer",
        "float_type" => "Input should be a valid number",
        "bool_type" => "Input should be a valid boolean",
        _ => "Input should be null",
    }
}

fn report(issues: &mut Issues, root: &Value, err: &jsonschema::ValidationError<'_>) {
    let mut path = loc_parts(root, err.instance_path());
    let (kind, msg): (&str, String) = match err.kind() {
        ValidationErrorKind::Required { property } => {
            path.push(LocPart::Key(property.as_str().unwrap_or_default().to_string()));
            ("missing", "Field required".into())
        }
        ValidationErrorKind::Type { kind } => {
            let k = type_name(kind);
            (k, type_msg(k).into())
        }
        ValidationErrorKind::MaxLength { limit } => {
            ("string_too_long", format!("String should have at most {limit} characters"))
        }
        ValidationErrorKind::MinLength { limit } => {
            ("string_too_short", format!("String should have at least {limit} characters"))
        }
        ValidationErrorKind::Pattern { pattern } => {
            ("string_pattern_mismatch", format!("String should match pattern '{pattern}'"))
        }
        ValidationErrorKind::Minimum { limit } => {
            ("greater_than_equal", format!("Input should be greater than or equal to {}", number(limit)))
        }
        ValidationErrorKind::Maximum { limit } => {
            ("less_than_equal", format!("Input should be less than or equal to {}", number(limit)))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            ("greater_than", format!("Input should be greater than {}", number(limit)))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            ("less_than", format!("Input should be less than {}", number(limit)))
        }
        ValidationErrorKind::MaxItems { limit } => {
            ("too_long", format!("List should have at most {limit} items"))
        }
        ValidationErrorKind::MinItems { limit } => {
            ("too_short", format!("List should have at least {limit} items"))
        }
        ValidationErrorKind::MaxProperties { limit } => {
            ("too_long", format!("Object should have at most {limit} keys"))
        }
        ValidationErrorKind::Custom { keyword, message } if keyword == MAX_JSON_BYTES_KEYWORD => {
            ("too_long", format!("Object {message}"))
        }
        ValidationErrorKind::Enum { options } => ("enum", format!("Input should be one of {options}")),
        ValidationErrorKind::Constant { expected_value } => {
            ("enum", format!("Input should be {expected_value}"))
        }
        ValidationErrorKind::Format { format } if format == "uuid" => {
            ("uuid_parsing", "Input should be a valid UUID".into())
        }
        ValidationErrorKind::Format { format } if format == "date-time" => {
            ("datetime_parsing", "Input should be a valid RFC 3339 date-time".into())
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // Report the branch that got furthest: one whose failures are not
            // all a type mismatch at this very location.
            let here = err.instance_path().as_str();
            let best = context.iter().find(|branch| {
                branch.iter().any(|e| {
                    !(e.instance_path().as_str() == here
                        && matches!(e.kind(), ValidationErrorKind::Type { .. }))
                })
            });
            if let Some(branch) = best {
                for e in branch {
                    report(issues, root, e);
                }
                return;
            }
            let expected: Vec<String> = context
                .iter()
                .flat_map(|b| b.iter())
                .filter_map(|e| match e.kind() {
                    ValidationErrorKind::Type { kind } => Some(match kind {
                        TypeKind::Single(t) => t.to_string(),
                        TypeKind::Multiple(s) => {
                            s.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(" or ")
                        }
                    }),
                    _ => None,
                })
                .collect();
            let kind = context
                .first()
                .and_then(|b| b.first())
                .map(|e| match e.kind() {
                    ValidationErrorKind::Type { kind } => type_name(kind),
                    _ => "value_error",
                })
                .unwrap_or("value_error");
            (kind, format!("Input should be one of: {}", expected.join(", ")))
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            ("value_error", "Input matches more than one allowed form".into())
        }
        _ => ("value_error", err.to_string()),
    };
    issues.push(&path, kind, msg);
}

fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

/// Converts string parameters (path or query) into JSON typed by `T`'s schema:
/// integers, numbers and booleans are parsed; a property whose schema is an
/// object (e.g. `metadata_filter`) is parsed as JSON. Parse failures are reported.
pub fn coerce_params<T: JsonSchema + 'static>(
    source: Source,
    raw: Vec<(String, String)>,
) -> Result<Value, Vec<Issue>> {
    let ts = type_schema::<T>();
    let props = ts.schema.get("properties").and_then(Value::as_object);
    let mut out = serde_json::Map::new();
    let mut issues = Issues::new(source);
    for (key, text) in raw {
        let prop = props.and_then(|p| p.get(&key));
        let Some(prop) = prop else {
            // Unknown parameters are ignored, as unknown body fields are.
            continue;
        };
        let types = schema_types(prop, &ts.schema);
        let value = if types.iter().any(|t| t == "string") {
            Ok(Value::String(text))
        } else if types.iter().any(|t| t == "integer") {
            text.trim().parse::<i64>().map(Value::from).map_err(|_| {
                ("int_parsing", "Input should be a valid integer, unable to parse string as an integer")
            })
        } else if types.iter().any(|t| t == "number") {
            text.trim().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number).ok_or((
                "float_parsing",
                "Input should be a valid number, unable to parse string as a number",
            ))
        } else if types.iter().any(|t| t == "boolean") {
            match text.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(Value::Bool(true)),
                "false" | "0" | "no" | "off" => Ok(Value::Bool(false)),
                _ => Err(("bool_parsing", "Input should be a valid boolean, unable to interpret input")),
            }
        } else if types.iter().any(|t| t == "object" || t == "array") {
            serde_json::from_str::<Value>(&text).map_err(|_| ("json_invalid", "Invalid JSON"))
        } else {
            Ok(Value::String(text))
        };
        match value {
            Ok(v) => {
                out.insert(key, v);
            }
            Err((kind, msg)) => issues.push(&[LocPart::Key(key)], kind, msg),
        }
    }
    if issues.is_empty() { Ok(Value::Object(out)) } else { Err(issues.into_vec()) }
}

/// The JSON types a property schema allows, following `$ref`s and `anyOf`s.
fn schema_types(prop: &Value, root: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_types(prop, root, &mut out, 0);
    out
}

fn collect_types(s: &Value, root: &Value, out: &mut Vec<String>, depth: usize) {
    if depth > 8 {
        return;
    }
    if let Some(r) = s.get("$ref").and_then(Value::as_str)
        && let Some(target) = r.strip_prefix('#').and_then(|p| root.pointer(p))
    {
        collect_types(target, root, out, depth + 1);
    }
    match s.get("type") {
        Some(Value::String(t)) => out.push(t.clone()),
        Some(Value::Array(ts)) => out.extend(ts.iter().filter_map(Value::as_str).map(String::from)),
        _ => {}
    }
    if s.get("enum").is_some() && s.get("type").is_none() {
        out.push("string".into());
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = s.get(key) {
            for b in branches {
                collect_types(b, root, out, depth + 1);
            }
        }
    }
}

/// Reports `schema` at `at` unless it is a valid JSON Schema: it is checked
/// against the meta-schema of the draft it names in `$schema` (2020-12 when
/// none). Meta-schemas are never fetched: an unknown `$schema` is reported too.
pub fn check_json_schema(schema: &Value, at: &[LocPart], issues: &mut Issues) {
    if let Err(e) = jsonschema::meta::validate(schema) {
        let path = e.instance_path().as_str();
        let place = if path.is_empty() { String::new() } else { format!(" (at {path})") };
        issues.push(at, "value_error", format!("not a valid JSON Schema: {e}{place}"));
    }
}

/// Reports every way `instance` breaks `schema` (a user's JSON Schema, such as
/// a task's `input_schema`), each at `at` followed by the place in the instance.
/// A schema that does not compile is reported at `at` (it was checked when it
/// was stored, so that means a draft this build cannot read).
pub fn check_against_schema(schema: &Value, instance: &Value, at: &[LocPart], issues: &mut Issues) {
    let validator = match jsonschema::options().with_pattern_options(PatternOptions::regex()).build(schema) {
        Ok(v) => v,
        Err(e) => {
            issues.push(at, "value_error", format!("the schema to check against does not compile: {e}"));
            return;
        }
    };
    let mut found = Issues::new(issues.source);
    for err in validator.iter_errors(instance) {
        report(&mut found, instance, &err);
    }
    for issue in one_per_field(found.into_vec()) {
        // Drop the source `report` added; put the place under `at`.
        let mut path = at.to_vec();
        path.extend(issue.loc.into_iter().skip(1));
        issues.push(&path, &issue.kind, issue.msg);
    }
}
