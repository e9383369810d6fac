//! Request and response types of the API: the contract.
//!
//! Every bound, pattern and default is declared here, once, with serde and
//! schemars attributes: they appear in the OpenAPI document and are enforced
//! at runtime from the same schema (see [`super::validate`]).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use schemars::r#gen::SchemaGenerator;
use schemars::schema::{InstanceType, Schema, SchemaObject};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::error::LocPart;
use super::validate::{Check, Issues};

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

    // Inline, as a plain object was: the client keeps a plain map.
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

// ---------------------------------------------------------------- common

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

pub(super) fn default_limit() -> i64 {
    100
}

pub(super) fn default_true() -> bool {
    true
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
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: i64,
    /// How many matching records to skip first.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub offset: i64,
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
fn metadata_filter_object(raw: Option<&str>) -> Option<JsonObject> {
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

/// `GET /api/healthz`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `"ok"` (a store that cannot write answers 503 instead).
    pub status: String,
}

// ---------------------------------------------------------------- API keys

/// An API key of the caller's tenant, as listed: never the key itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKey {
    pub id: Uuid,
    /// The first characters of the key (`ap_` and 8 more), to recognise it.
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

/// A new API key: `key` is shown this once (the service keeps only its hash).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyCreated {
    pub id: Uuid,
    /// The key, for `Authorization: Bearer <key>`. It cannot be shown again.
    pub key: String,
    pub prefix: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct KeyPath {
    /// The key's id (from `GET /api/keys`).
    pub key_id: Uuid,
}

impl Check for KeyPath {}

// ---------------------------------------------------------------- headers

/// The printable ASCII characters (space to `~`): what an `Idempotency-Key` is made of.
pub const IDEMPOTENCY_KEY_PATTERN: &str = r"^[ -~]+$";

/// The headers of a POST (see API.md, Conventions: retries are safe).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct IdempotencyHeader {
    /// Makes retrying this POST safe. A repeat with the same key by the same
    /// tenant within 24 hours is not done again: it answers the first answer
    /// (status and body, with the header `Idempotent-Replayed: true`); the same
    /// key on another request (another route or body, compared byte for byte)
    /// is a 409; a repeat while the first is still being served waits for its
    /// answer (up to 10 s, then a 409). Only successes are remembered: after a
    /// 4xx or 5xx nothing was written, and a repeat runs again. A client that
    /// got a timeout or a 5xx retries with the same key. 1 to 255 printable
    /// ASCII characters, e.g. a UUID.
    #[serde(rename = "idempotency-key", default)]
    #[schemars(length(min = 1, max = 255), regex(path = "IDEMPOTENCY_KEY_PATTERN"))]
    pub idempotency_key: Option<String>,
}

impl Check for IdempotencyHeader {}

// ---------------------------------------------------------------- path parameters

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserPath {
    /// The user's id.
    pub user_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentPath {
    /// The agent's id.
    pub id: Uuid,
}

impl Check for UserPath {}
impl Check for AgentPath {}

// ---------------------------------------------------------------- users

/// A user of the application built on the platform.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct User {
    pub id: Uuid,
    pub name: String,
    pub about: String,
    pub metadata: Option<Metadata>,
    pub project: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/users`: every field optional.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct CreateUserRequest {
    /// The user's name (at most 120 characters, Unicode letters first). Omitted or
    /// null means `""`; a name that is sent must match the pattern.
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    /// About the user (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// A project name: a letter, then letters, digits or `_` (1 to 255 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<String>,
}

/// Body of `PUT /api/users/{user_id}`: overwrites the user; omitted fields take their defaults.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct UpdateUserRequest {
    /// The user's name (at most 120 characters, Unicode letters first). Omitted or
    /// null means `""`; a name that is sent must match the pattern.
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    /// About the user (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// A project name: a letter, then letters, digits or `_` (1 to 255 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<String>,
}

/// Body of `PATCH /api/users/{user_id}`: only the fields sent change; `metadata` is merged key by key.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct PatchUserRequest {
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: Option<String>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
    #[serde(default, deserialize_with = "double_option")]
    #[schemars(length(min = 1, max = 255), regex(path = "PROJECT_PATTERN"))]
    pub project: Option<Option<String>>,
}

impl Check for CreateUserRequest {}
impl Check for UpdateUserRequest {}
impl Check for PatchUserRequest {}

// ---------------------------------------------------------------- agents

/// Chat settings: an agent's defaults, overridden per chat request.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct ChatSettings {
    /// Sampling temperature, 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// The most tokens the answer may have (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    /// Up to 4 stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    pub stop: Option<Vec<String>>,
    /// A seed for reproducible sampling, where the model supports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// One instruction, or a list of them (at most 100).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Instructions {
    One(String),
    Many(#[schemars(length(max = 100))] Vec<String>),
}

impl Default for Instructions {
    fn default() -> Self {
        Instructions::Many(Vec::new())
    }
}

impl Instructions {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Instructions::One(s) => vec![s],
            Instructions::Many(v) => v,
        }
    }
}

/// An agent: a persona with a model, instructions and default chat settings.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Agent {
    pub id: Uuid,
    pub name: String,
    pub about: String,
    /// The model; `""` means the server's default model.
    pub model: String,
    pub instructions: Vec<String>,
    pub default_settings: Option<ChatSettings>,
    pub metadata: Option<Metadata>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /api/agents` and `PUT /api/agents/{id}` (PUT overwrites: omitted fields take their defaults).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateAgentRequest {
    /// The agent's name (1 to 120 characters, Unicode letters first).
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: String,
    /// About the agent (at most 16,000 characters).
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: String,
    /// The model name (at most 255 characters); `""` means the server's default model.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub model: String,
    /// A string, or a list of at most 100 strings; stored as a list.
    #[serde(default)]
    pub instructions: Instructions,
    #[serde(default)]
    pub default_settings: Option<ChatSettings>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
}

/// Body of `PATCH /api/agents/{id}`: only the fields sent change; `metadata` is merged key by key.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct PatchAgentRequest {
    #[serde(default)]
    #[schemars(length(max = 120), regex(path = "NAME_PATTERN"))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub about: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub model: Option<String>,
    #[serde(default)]
    pub instructions: Option<Instructions>,
    /// Replaces the default settings; `null` clears them.
    #[serde(default, deserialize_with = "double_option")]
    pub default_settings: Option<Option<ChatSettings>>,
    /// Merged into the stored metadata, top-level key by key; `null` clears it.
    /// The merged metadata keeps the bounds (at most 64 keys and 16384 bytes as
    /// JSON): a PATCH that would pass them is a 422 naming `metadata`, and changes nothing.
    #[serde(default, deserialize_with = "double_option")]
    pub metadata: Option<Option<Metadata>>,
}

impl Check for CreateAgentRequest {}
impl Check for PatchAgentRequest {}

// ---------------------------------------------------------------- documents

/// The most snippets one document may have.
pub const MAX_SNIPPETS: usize = 1000;

/// Whether a document belongs to an agent or to a user.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum OwnerRole {
    Agent,
    User,
}

/// The agent or user a document belongs to.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub struct DocOwner {
    pub id: Uuid,
    pub role: OwnerRole,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct AgentDocPath {
    /// The agent's id.
    pub id: Uuid,
    /// The document's id.
    pub doc_id: Uuid,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct UserDocPath {
    /// The user's id.
    pub user_id: Uuid,
    /// The document's id.
    pub doc_id: Uuid,
}

impl Check for AgentDocPath {}
impl Check for UserDocPath {}

/// A document of an agent or a user: a title and text snippets, searchable
/// by text, by vector and both.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Doc {
    pub id: Uuid,
    pub owner: DocOwner,
    pub title: String,
    /// The snippets, each searched (and found) on its own.
    pub content: Vec<String>,
    pub metadata: Option<Metadata>,
    /// One vector per snippet, or null when the document has none.
    pub embeddings: Option<Vec<Vec<f32>>>,
    pub created_at: DateTime<Utc>,
}

/// A document's text: one string, or a list of 1 to 1000 snippets; each at
/// most 100,000 characters.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum DocContent {
    One(#[schemars(length(max = 100000))] String),
    Many(#[schemars(length(min = 1, max = 1000), inner(length(max = 100000)))] Vec<String>),
}

impl DocContent {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            DocContent::One(s) => vec![s],
            DocContent::Many(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            DocContent::One(_) => 1,
            DocContent::Many(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Body of `POST /api/agents/{id}/docs` and `POST /api/users/{user_id}/docs`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateDocRequest {
    /// The title (1 to 800 characters).
    #[schemars(length(min = 1, max = 800))]
    pub title: String,
    /// A string, or a list of 1 to 1000 snippets (each at most 100,000
    /// characters); stored as a list.
    pub content: DocContent,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// One vector per snippet, all of one dimension: the dimension of the
    /// owner's other vectors, if it has any. When omitted and an embedding
    /// model is configured, the server computes them.
    #[serde(default)]
    #[schemars(inner(length(min = 1)))]
    pub embeddings: Option<Vec<Vec<f32>>>,
}

/// Reports vectors that cannot be compared (non-finite numbers) at `at`.
fn check_finite(vector: &[f32], at: &[LocPart], issues: &mut Issues) {
    if vector.iter().any(|x| !x.is_finite()) {
        issues.push(at, "finite_number", "Input should be a finite number (too large for a 32-bit float)");
    }
}

impl Check for CreateDocRequest {
    fn check(&self, issues: &mut Issues) {
        let Some(embeddings) = &self.embeddings else { return };
        let key = || LocPart::Key("embeddings".into());
        if embeddings.len() != self.content.len() {
            issues.push(
                &[key()],
                "value_error",
                format!(
                    "expected one vector per snippet: {} snippets but {} vectors",
                    self.content.len(),
                    embeddings.len()
                ),
            );
            return;
        }
        let dim = embeddings.first().map_or(0, Vec::len);
        for (i, v) in embeddings.iter().enumerate() {
            let at = [key(), LocPart::Index(i)];
            if v.len() != dim {
                issues.push(
                    &at,
                    "value_error",
                    format!(
                        "all vectors must have one dimension: vector {i} has {} but vector 0 has {dim}",
                        v.len()
                    ),
                );
            }
            check_finite(v, &at, issues);
        }
    }
}

// ---------------------------------------------------------------- search

fn default_search_limit() -> i64 {
    10
}

fn default_alpha() -> f64 {
    0.5
}

/// How a search scores snippets.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// BM25 over the snippets' words.
    Text,
    /// Cosine similarity of the snippets' embeddings to the query vector.
    Vector,
    /// Both, fused: `alpha` × vector + (1 − `alpha`) × text, each normalised.
    Hybrid,
}

/// Query of `GET /api/agents/{id}/search` and `GET /api/users/{user_id}/search`: a text search.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct TextSearchParams {
    /// The words to look for (1 to 10,000 characters). The whole request line
    /// must stay under 64 KiB, URL-encoded (414 otherwise): search long texts with POST.
    #[schemars(length(min = 1, max = 10000))]
    pub text: String,
    /// How many snippets to answer at most (1 to 100).
    #[serde(default = "default_search_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i64,
    /// A JSON object, e.g. `{"lang":"en"}`: only documents whose metadata has
    /// every given top-level key with an equal value. Bounded as metadata is
    /// (at most 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<String>,
}

impl Check for TextSearchParams {
    fn check(&self, issues: &mut Issues) {
        parse_metadata_filter(self.metadata_filter.as_deref(), issues);
    }
}

/// Body of `POST /api/agents/{id}/search` and `POST /api/users/{user_id}/search`.
///
/// Give `text`, `vector` or both. The mode defaults from what is given: text
/// alone is a text search, a vector alone a vector search, both a hybrid one.
/// A vector or hybrid search without a vector embeds `text` with the embedding
/// model, and is a 400 when none is configured.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct SearchRequest {
    /// The words to look for (1 to 10,000 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 10000))]
    pub text: Option<String>,
    /// A query vector, of the dimension of the owner's embeddings.
    #[serde(default)]
    #[schemars(length(min = 1))]
    pub vector: Option<Vec<f32>>,
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// How many snippets to answer at most (1 to 100).
    #[serde(default = "default_search_limit")]
    #[schemars(range(min = 1, max = 100))]
    pub limit: i64,
    /// Hybrid only: the weight of the vector side, 0 to 1 (0 ranks as text search, 1 as vector search).
    #[serde(default = "default_alpha")]
    #[schemars(range(min = 0, max = 1))]
    pub alpha: f64,
    /// Only documents whose metadata has every given top-level key with an
    /// equal value. Bounded as metadata is (at most 64 keys and 16384 bytes as JSON).
    #[serde(default)]
    pub metadata_filter: Option<Metadata>,
}

impl Check for SearchRequest {
    fn check(&self, issues: &mut Issues) {
        let key = |k: &str| [LocPart::Key(k.into())];
        if self.text.is_none() && self.vector.is_none() {
            issues.push(&[], "value_error", "give `text`, `vector` or both");
            return;
        }
        if self.text.is_none() && matches!(self.mode, Some(SearchMode::Text | SearchMode::Hybrid)) {
            issues.push(&key("text"), "missing", "Field required: a text or hybrid search needs `text`");
        }
        if let Some(v) = &self.vector {
            check_finite(v, &key("vector"), issues);
        }
    }
}

impl From<TextSearchParams> for SearchRequest {
    fn from(p: TextSearchParams) -> Self {
        let metadata_filter = metadata_filter_object(p.metadata_filter.as_deref()).map(Metadata);
        SearchRequest {
            text: Some(p.text),
            vector: None,
            mode: Some(SearchMode::Text),
            limit: p.limit,
            alpha: default_alpha(),
            metadata_filter,
        }
    }
}

/// The snippet a search found.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Snippet {
    /// Its position in the document's `content`.
    pub index: usize,
    pub content: String,
}

/// One search result: a snippet of a document.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DocReference {
    /// The document's id.
    pub id: Uuid,
    pub title: String,
    pub owner: DocOwner,
    pub snippet: Snippet,
    /// Higher is better: BM25 (text), cosine similarity (vector) or the fused score in 0..=1 (hybrid).
    pub score: f64,
    pub metadata: Option<Metadata>,
}

/// The answer of a search.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DocSearchResponse {
    /// The matching snippets, best first (one entry per snippet).
    pub docs: Vec<DocReference>,
    /// How long the search took, in seconds.
    pub time: f64,
}
