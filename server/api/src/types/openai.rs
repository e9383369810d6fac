//! Contract types of the OpenAI-compatible routes (`/v1`), in OpenAI's shapes.
//!
//! Field names and meanings follow OpenAI's API reference; unknown fields are
//! ignored (clients send many). What we bound, OpenAI bounds too, or the
//! bound keeps one request's memory and time in check.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::chat::{ChatDelta, ChatTool, ChatToolChoice};
use super::sessions::ToolCall;
use super::sessions::{ImageDetail, ImageUrl};
use crate::error::LocPart;
use crate::types::JsonObject;
use crate::validate::{Check, Issues};

// ---------------------------------------------------------------- models

/// `GET /v1/models`: the models a client can name.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<Model>,
}

/// A model: one of the tenant's agents (its id), or a model name a
/// configured provider serves.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Model {
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// When it was created (an agent), or 0 (a provider's model), in Unix seconds.
    pub created: i64,
    /// `agent-platform` for an agent; the provider's name for a provider's model.
    pub owned_by: String,
}

/// `/v1/models/{model}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ModelPath {
    /// An agent's id, or a model name a provider serves.
    #[schemars(length(min = 1, max = 255))]
    pub model: String,
}

impl Check for ModelPath {}

// ---------------------------------------------------------------- chat completions

/// Who wrote a message of a chat completion request.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CompletionRole {
    System,
    /// OpenAI's newer name for `system` messages; sent to the provider as `system`.
    Developer,
    User,
    Assistant,
    Tool,
}

/// A part of a message's content. Chat completions take `text`, `image_url`
/// (`{"url", "detail"}`) and `file` (`{"file_data", "filename"}`) parts; a
/// response's or a conversation's items take `input_text` (`text` and
/// `output_text` too), `input_image` (`image_url` the URL itself, `detail`) and
/// `input_file` (`file_data`, `filename`). Images and files only in user
/// messages. An image is an http(s) URL or a data URL
/// (`data:image/png;base64,...`); a file's data is a data URL
/// (`data:application/pdf;base64,...`) or its base64. Each image URL or file's
/// data is at most `models.max_input_part_bytes` bytes (8 MiB unless
/// configured; a larger one is a 400 naming it), and within the request
/// body's limit (`server.request_body_max_bytes`). Files by `file_id` or
/// `file_url`, and other kinds of parts (audio, refusals), answer 400 naming
/// the part.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 64))]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// An `image_url` part's `{"url", "detail"}`, or an `input_image` part's URL.
    #[serde(default)]
    pub image_url: Option<ImageUrlInput>,
    /// An `input_image` part's detail: `auto` (the default), `low` or `high`.
    #[serde(default)]
    pub detail: Option<ImageDetail>,
    /// A `file` part's file.
    #[serde(default)]
    pub file: Option<FileInput>,
    /// An `input_file` part's data.
    #[serde(default)]
    pub file_data: Option<String>,
    /// An `input_file` part's file name.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub filename: Option<String>,
    /// Not supported (this service stores no files): send `file_data`.
    #[serde(default)]
    pub file_id: Option<String>,
    /// Not supported: send `file_data`.
    #[serde(default)]
    pub file_url: Option<String>,
}

/// An image of a content part: `{"url", "detail"}` (chat completions), or the URL itself (`input_image`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ImageUrlInput {
    Url(String),
    Object(ImageUrl),
}

impl ImageUrlInput {
    pub fn url(&self) -> &str {
        match self {
            ImageUrlInput::Url(url) => url,
            ImageUrlInput::Object(o) => &o.url,
        }
    }
}

/// The file of a chat completion's `file` part.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct FileInput {
    /// A data URL (`data:application/pdf;base64,...`), or the file's base64.
    #[serde(default)]
    pub file_data: Option<String>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub filename: Option<String>,
    /// Not supported (this service stores no files): send `file_data`.
    #[serde(default)]
    pub file_id: Option<String>,
}

/// Where content parts are given: a chat completion's message, or an item's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartsOf {
    /// `/v1/chat/completions`: `text`, `image_url`, `file`.
    Chat,
    /// A response's or a conversation's item: `input_text`, `input_image`, `input_file`.
    Item,
}

/// Whether a data URL or an http(s) URL.
fn is_image_url(url: &str) -> bool {
    let lower = |n: usize| url.get(..n).map(str::to_ascii_lowercase);
    lower(5).as_deref() == Some("data:")
        || lower(7).as_deref() == Some("http://")
        || lower(8).as_deref() == Some("https://")
}

impl ContentPart {
    /// Whether the part is text (`text`, `input_text`, `output_text`).
    pub fn is_text(&self) -> bool {
        ["text", "input_text", "output_text"].contains(&self.kind.as_str())
    }

    /// The first thing of the part this service does not take, as `(param
    /// under the part, message)`: a kind it does not take, an image or file
    /// outside a user message, a file by id or URL, an image that is no URL.
    pub fn unsupported(&self, of: PartsOf, user: bool) -> Option<(String, String)> {
        let kinds: &[&str] = match of {
            PartsOf::Chat => &["text", "image_url", "file"],
            PartsOf::Item => &["input_text", "output_text", "text", "input_image", "input_file"],
        };
        if !kinds.contains(&self.kind.as_str()) {
            return Some((
                "type".into(),
                format!(
                    "content parts of type {:?} are not supported here: only {}",
                    self.kind,
                    kinds.join(", ")
                ),
            ));
        }
        if self.is_text() {
            return None;
        }
        if !user {
            return Some(("type".into(), format!("{} parts are only for user messages", self.kind)));
        }
        let no_files = "this service stores no files: send the file's data in `file_data`";
        if self.file_id.is_some() {
            return Some(("file_id".into(), format!("files by id are not supported: {no_files}")));
        }
        if self.file_url.is_some() {
            return Some(("file_url".into(), format!("files by URL are not supported: {no_files}")));
        }
        if let Some(file) = &self.file
            && file.file_id.is_some()
        {
            return Some(("file.file_id".into(), format!("files by id are not supported: {no_files}")));
        }
        if let Some(image) = &self.image_url
            && !is_image_url(image.url())
        {
            let param = match image {
                ImageUrlInput::Url(_) => "image_url",
                ImageUrlInput::Object(_) => "image_url.url",
            };
            return Some((
                param.into(),
                "an image is an http(s) URL or a data URL (data:image/png;base64,...)".into(),
            ));
        }
        None
    }

    /// Pushes what the part misses for its kind, its fields under `at`.
    fn check_at(&self, at: &[LocPart], issues: &mut Issues) {
        let missing = |issues: &mut Issues, field: &str, what: &str| {
            let mut loc = at.to_vec();
            loc.extend(field.split('.').map(|k| LocPart::Key(k.into())));
            issues.push(&loc, "missing", format!("Field required: {what}"));
        };
        match self.kind.as_str() {
            k if self.is_text() && self.text.is_none() => {
                missing(issues, "text", &format!("a {k} part has `text`"))
            }
            "image_url" | "input_image" if self.image_url.is_none() && self.file_id.is_none() => {
                missing(issues, "image_url", "an image part has `image_url`")
            }
            "file" => match &self.file {
                None => missing(issues, "file", "a file part has `file`"),
                Some(f) if f.file_data.is_none() && f.file_id.is_none() => {
                    missing(issues, "file.file_data", "a file part's file has `file_data`")
                }
                Some(_) => {}
            },
            "input_file" if self.file_data.is_none() && self.file_id.is_none() && self.file_url.is_none() => {
                missing(issues, "file_data", "an input_file part has `file_data`")
            }
            _ => {}
        }
    }
}

/// The first unsupported part of `content` (under `field`), as `(param, message)`.
fn unsupported_parts(
    field: &str,
    content: Option<&CompletionContent>,
    of: PartsOf,
    user: bool,
) -> Option<(String, String)> {
    let Some(CompletionContent::Parts(parts)) = content else { return None };
    parts.iter().enumerate().find_map(|(j, p)| {
        p.unsupported(of, user).map(|(param, message)| (format!("{field}[{j}].{param}"), message))
    })
}

/// Pushes what the parts of `content` (under `at`) miss.
fn check_parts(at: &[LocPart], content: Option<&CompletionContent>, issues: &mut Issues) {
    if let Some(CompletionContent::Parts(parts)) = content {
        for (j, p) in parts.iter().enumerate() {
            let mut loc = at.to_vec();
            loc.push(LocPart::Index(j));
            p.check_at(&loc, issues);
        }
    }
}

/// A message's content: text, or a list of parts (at most 1,000).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CompletionContent {
    Text(String),
    Parts(#[schemars(length(max = 1000))] Vec<ContentPart>),
}

/// One message of a chat completion request.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionMessage {
    pub role: CompletionRole,
    /// Null or absent for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<CompletionContent>,
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Only for `assistant` messages: the tools it called.
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Required for `tool` messages: the call it answers.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub tool_call_id: Option<String>,
}

/// Stop sequences: one, or a list of up to 4.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum StopSequences {
    One(String),
    Many(#[schemars(length(max = 4))] Vec<String>),
}

/// What a streamed answer includes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionStreamOptions {
    /// Send a last chunk, before `data: [DONE]`, with no choices and the `usage`.
    #[serde(default)]
    pub include_usage: bool,
}

/// Body of `POST /v1/chat/completions` (OpenAI's request; unknown fields are ignored).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ChatCompletionRequest {
    /// An agent's id (that agent answers), or a model name its provider serves.
    #[schemars(length(min = 1, max = 255))]
    pub model: String,
    /// The conversation so far (1 to 10,000 messages): the whole history, as
    /// nothing is kept between requests.
    #[schemars(length(min = 1, max = 10000))]
    pub messages: Vec<CompletionMessage>,
    /// Answer `text/event-stream`: `chat.completion.chunk` events, then `data: [DONE]`.
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<CompletionStreamOptions>,
    /// Function tools the model may call (besides the agent's, when `model` is an agent).
    #[serde(default)]
    #[schemars(length(max = 128))]
    pub tools: Option<Vec<ChatTool>>,
    #[serde(default)]
    pub tool_choice: Option<ChatToolChoice>,
    /// Passed to the provider as sent (`{"type": "json_object"}`, `json_schema`, ...).
    #[serde(default)]
    pub response_format: Option<JsonObject>,
    /// Passed to the provider as sent.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature, 0 to 2.
    #[serde(default)]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// The most tokens the answer may have (OpenAI's older name of `max_completion_tokens`).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_tokens: Option<i64>,
    /// The most tokens the answer may have; wins over `max_tokens`.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_completion_tokens: Option<i64>,
    /// -2 to 2.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub frequency_penalty: Option<f64>,
    /// -2 to 2.
    #[serde(default)]
    #[schemars(range(min = -2, max = 2))]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub stop: Option<StopSequences>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// How many answers: only 1 is supported (another value answers 400).
    #[serde(default)]
    pub n: Option<i64>,
    /// An end-user id, for the provider's abuse monitoring: passed on as sent.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub user: Option<String>,
    /// Return the log probabilities of the answer's tokens: passed on as sent;
    /// each choice's (and chunk's) `logprobs` is then the provider's.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// 0 to 20, with `logprobs`: passed on as sent.
    #[serde(default)]
    #[schemars(range(min = 0, max = 20))]
    pub top_logprobs: Option<i64>,
    /// Token id → bias, -100 to 100: passed on as sent.
    #[serde(default)]
    pub logit_bias: Option<JsonObject>,
    /// Passed on as sent; the answer's `service_tier` is the provider's.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub service_tier: Option<String>,
    /// `none`, `minimal`, `low`, `medium`, `high` or `xhigh`: passed on as sent.
    #[serde(default)]
    pub reasoning_effort: Option<super::ReasoningEffort>,
    /// `low`, `medium` or `high`: passed on as sent.
    #[serde(default)]
    pub verbosity: Option<super::Verbosity>,
    /// Passed on as sent.
    #[serde(default)]
    #[schemars(length(min = 1, max = 1024))]
    pub prompt_cache_key: Option<String>,
    /// Passed on as sent.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub safety_identifier: Option<String>,
    /// Kept by OpenAI only with `store`: accepted, and kept nowhere.
    #[serde(default)]
    pub metadata: Option<super::Metadata>,
    /// Completions are not stored: only `false` is accepted (`true` answers 400).
    #[serde(default)]
    pub store: Option<bool>,
    /// Only `["text"]` is accepted (audio answers 400).
    #[serde(default)]
    pub modalities: Option<Vec<String>>,
    /// Not supported (audio output): 400.
    #[serde(default)]
    pub audio: Option<Value>,
    /// Not supported (predicted outputs): 400.
    #[serde(default)]
    pub prediction: Option<Value>,
    /// Not supported (web search): 400.
    #[serde(default)]
    pub web_search_options: Option<Value>,
    /// OpenAI's deprecated form of `tools`: not supported, 400 (send `tools`).
    #[serde(default)]
    pub functions: Option<Value>,
    /// OpenAI's deprecated form of `tool_choice`: not supported, 400 (send `tool_choice`).
    #[serde(default)]
    pub function_call: Option<Value>,
}

impl ChatCompletionRequest {
    /// The first feature of the request this service does not support, as
    /// `(param, message)`: a 400 naming it. Everything else is answered.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if let Some(n) = self.n.filter(|n| *n != 1) {
            return Some(("n".into(), format!("n = {n}: only one choice (n = 1) is supported")));
        }
        if self.store == Some(true) {
            return Some(("store".into(), "chat completions are not stored here: omit `store`".into()));
        }
        if let Some(m) = self.modalities.as_ref().filter(|m| m.iter().any(|m| m != "text")) {
            return Some((
                "modalities".into(),
                format!("modalities {m:?}: only text answers are supported (\"text\")"),
            ));
        }
        let not_supported = [
            ("audio", self.audio.is_some(), "audio output is not supported"),
            ("prediction", self.prediction.is_some(), "predicted outputs are not supported"),
            ("web_search_options", self.web_search_options.is_some(), "web search is not supported"),
            ("functions", self.functions.is_some(), "`functions` is not supported: send `tools`"),
            (
                "function_call",
                self.function_call.is_some(),
                "`function_call` is not supported: send `tool_choice`",
            ),
        ];
        if let Some((param, _, message)) = not_supported.into_iter().find(|(_, given, _)| *given) {
            return Some((param.into(), message.into()));
        }
        self.messages.iter().enumerate().find_map(|(i, m)| {
            let user = m.role == CompletionRole::User;
            unsupported_parts(&format!("messages[{i}].content"), m.content.as_ref(), PartsOf::Chat, user)
        })
    }
}

impl Check for ChatCompletionRequest {
    fn check(&self, issues: &mut Issues) {
        for (i, m) in self.messages.iter().enumerate() {
            let at = |k: &str| [LocPart::Key("messages".into()), LocPart::Index(i), LocPart::Key(k.into())];
            if m.tool_calls.is_some() && m.role != CompletionRole::Assistant {
                issues.push(&at("tool_calls"), "value_error", "only assistant messages have tool_calls");
            }
            if m.role == CompletionRole::Tool && m.tool_call_id.is_none() {
                issues.push(
                    &at("tool_call_id"),
                    "missing",
                    "Field required: a tool message names the tool call it answers",
                );
            }
            check_parts(&at("content"), m.content.as_ref(), issues);
        }
    }
}

/// The assistant's message in a [`ChatCompletion`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionAnswerMessage {
    /// Always `assistant`.
    pub role: String,
    /// The text; null when the answer only calls tools.
    pub content: Option<String>,
    /// The model's refusal, when it refused (the provider's); else null.
    pub refusal: Option<String>,
    /// The tools the model calls; send their results back as `tool` messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Annotations of the text (`url_citation`s), as the provider gave them; `[]` when none.
    pub annotations: Vec<Value>,
}

/// One answer of a [`ChatCompletion`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompletionChoice {
    pub index: i64,
    pub message: CompletionAnswerMessage,
    /// `stop`, `length`, `tool_calls`, `content_filter`, ... as the provider
    /// said; `stop` (`tool_calls` for an answer that calls tools) when it said none.
    pub finish_reason: Option<String>,
    /// The provider's log probabilities of the answer's tokens (`{"content",
    /// "refusal"}`), when the request asked for them (`logprobs`); else null.
    pub logprobs: Option<Value>,
}

/// Tokens of a chat completion, as the provider counted them (or we did, when it did not).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionUsage {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub total_tokens: i64,
    /// The provider's details of `prompt_tokens`; 0 where it gave none.
    pub prompt_tokens_details: PromptTokensDetails,
    /// The provider's details of `completion_tokens`; 0 where it gave none.
    pub completion_tokens_details: CompletionTokensDetails,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct PromptTokensDetails {
    pub cached_tokens: i64,
    pub audio_tokens: i64,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionTokensDetails {
    pub reasoning_tokens: i64,
    pub audio_tokens: i64,
    pub accepted_prediction_tokens: i64,
    pub rejected_prediction_tokens: i64,
}

/// The answer of `POST /v1/chat/completions` (OpenAI's `chat.completion`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: i64,
    /// The model that answered.
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    pub usage: CompletionUsage,
    /// The provider's, else null.
    pub system_fingerprint: Option<String>,
    /// The provider's (`default`, `flex`, ...), else null.
    pub service_tier: Option<String>,
}

/// One event of a streamed chat completion (`data: <chunk>`, OpenAI's
/// `chat.completion.chunk`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    /// Unix seconds.
    pub created: i64,
    pub model: String,
    pub choices: Vec<CompletionChunkChoice>,
    /// On the last chunk (no choices) when `stream_options.include_usage`; else absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
    /// The provider's, else null.
    pub system_fingerprint: Option<String>,
    /// The provider's, else null.
    pub service_tier: Option<String>,
}

/// One choice of a [`ChatCompletionChunk`]: what it adds to the answer.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CompletionChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    /// Why the answer ended, on its last delta (as the provider said); else null.
    pub finish_reason: Option<String>,
    /// The provider's log probabilities of this delta's tokens, when asked for; else null.
    pub logprobs: Option<Value>,
}

// ---------------------------------------------------------------- ids

const UUID_PATTERN: &str = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";

/// A conversation's id in OpenAI's form: `conv_` and its session's id as 32
/// hex digits. A request may also name it by the session's UUID (as `/api`
/// shows it); answers always use the `conv_` form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvId(pub uuid::Uuid);

impl ConvId {
    pub const PREFIX: &str = "conv_";

    /// The session a conversation id names, or `None` when it is in neither form.
    pub fn parse(text: &str) -> Option<ConvId> {
        let id = match text.strip_prefix(Self::PREFIX) {
            Some(hex) if hex.len() == 32 => uuid::Uuid::try_parse(hex).ok()?,
            Some(_) => return None,
            None if text.len() == 36 => uuid::Uuid::try_parse(text).ok()?,
            None => return None,
        };
        Some(ConvId(id))
    }
}

impl std::fmt::Display for ConvId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Self::PREFIX, self.0.simple())
    }
}

impl Serialize for ConvId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ConvId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ConvId::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("{text:?} is not a conversation id (conv_ and 32 hex digits)"))
        })
    }
}

impl JsonSchema for ConvId {
    fn schema_name() -> String {
        "ConvId".to_string()
    }

    fn json_schema(_: &mut schemars::r#gen::SchemaGenerator) -> schemars::schema::Schema {
        use schemars::schema::{InstanceType, Metadata, SchemaObject, StringValidation};
        SchemaObject {
            metadata: Some(Box::new(Metadata {
                description: Some(
                    "A conversation's id: `conv_` and 32 hex digits (its session's id); a request may \
                     also give the session's UUID."
                        .into(),
                ),
                ..Default::default()
            })),
            instance_type: Some(InstanceType::String.into()),
            string: Some(Box::new(StringValidation {
                pattern: Some(format!("^(conv_[0-9a-f]{{32}}|{UUID_PATTERN})$")),
                ..Default::default()
            })),
            ..Default::default()
        }
        .into()
    }
}

// ---------------------------------------------------------------- conversations

/// `/v1/conversations/{conversation_id}`: a conversation is a session.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ConversationPath {
    pub conversation_id: ConvId,
}

impl Check for ConversationPath {}

/// `/v1/conversations/{conversation_id}/items/{item_id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ConversationItemPath {
    pub conversation_id: ConvId,
    /// The item's id, as the item lists show it: `msg_…` or `fc_…` (a
    /// message's UUID is taken too).
    #[schemars(regex(
        pattern = "^(msg_[0-9a-f]{32}|fc_[0-9a-f]{32}_[0-9]{1,3}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    ))]
    pub item_id: String,
}

impl Check for ConversationItemPath {}

/// A conversation (OpenAI's `conversation`), which is a session of the
/// service: `GET /api/sessions/{id}` shows it too, its items are the
/// session's messages.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Conversation {
    pub id: ConvId,
    /// Always `conversation`.
    pub object: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The session's metadata (`{}` when it has none).
    pub metadata: JsonObject,
}

/// The answer of `DELETE /v1/conversations/{conversation_id}`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ConversationDeleted {
    pub id: ConvId,
    /// Always `conversation.deleted`.
    pub object: String,
    pub deleted: bool,
}

/// Who wrote an input message item.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    User,
    Assistant,
    System,
    /// Kept as `system`.
    Developer,
}

/// An item sent to a conversation (or as a response's input): a `message`
/// (the default `type`: `role` and `content`), a `function_call` the model made
/// (`call_id`, `name`, `arguments`), a `function_call_output` (`call_id`,
/// `output`), a `compaction` (`encrypted_content`, as
/// `POST /v1/responses/compact` answered it: the summary it holds becomes a
/// system message), or — in a response's input only — an
/// `mcp_approval_response` (`approval_request_id`, `approve`, `reason`?)
/// deciding on a call the previous response left waiting (its
/// `mcp_approval_request` item). Other item types answer 400 naming the item's `type`. A
/// message's content parts: see [`ContentPart`] (`input_image` and
/// `input_file` only in user messages); a function call's output is text.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct InputItem {
    /// `message` (default), `function_call`, `function_call_output` or `compaction`.
    #[serde(rename = "type", default)]
    #[schemars(length(min = 1, max = 64))]
    pub kind: Option<String>,
    /// A message's author.
    #[serde(default)]
    pub role: Option<InputRole>,
    /// A message's text, or its parts.
    #[serde(default)]
    pub content: Option<CompletionContent>,
    /// A function call's id, named again by its output.
    #[serde(default)]
    #[schemars(length(min = 1, max = 255))]
    pub call_id: Option<String>,
    /// A function call's function.
    #[serde(default)]
    #[schemars(length(min = 1, max = 64))]
    pub name: Option<String>,
    /// A function call's arguments, as JSON text.
    #[serde(default)]
    pub arguments: Option<String>,
    /// A function call's result: text, or text parts.
    #[serde(default)]
    pub output: Option<CompletionContent>,
    /// A compaction's content, as `POST /v1/responses/compact` gave it (a 400
    /// naming it when it is not one of its).
    #[serde(default)]
    #[schemars(length(min = 1, max = 10485760))]
    pub encrypted_content: Option<String>,
    /// An `mcp_approval_response`'s request: the `mcp_approval_request` item's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub approval_request_id: Option<String>,
    /// An `mcp_approval_response`'s decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
    /// An `mcp_approval_response`'s reason (told to the model with a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1000))]
    pub reason: Option<String>,
}

/// The item types [`InputItem`] takes.
pub const INPUT_ITEM_TYPES: [&str; 5] =
    ["message", "function_call", "function_call_output", "compaction", "mcp_approval_response"];

impl InputItem {
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or("message")
    }

    /// The first unsupported feature of the item, as `(param under the item, message)`.
    pub fn unsupported(&self) -> Option<(String, String)> {
        if !INPUT_ITEM_TYPES.contains(&self.kind()) {
            return Some((
                "type".into(),
                format!(
                    "items of type {:?} are not supported: only {}",
                    self.kind(),
                    INPUT_ITEM_TYPES.join(", ")
                ),
            ));
        }
        let user = self.role == Some(InputRole::User);
        if let Some(found) = unsupported_parts("content", self.content.as_ref(), PartsOf::Item, user) {
            return Some(found);
        }
        if let Some(CompletionContent::Parts(parts)) = &self.output {
            for (j, p) in parts.iter().enumerate() {
                if !p.is_text() {
                    return Some((
                        format!("output[{j}].type"),
                        format!(
                            "a function call's output is text: parts of type {:?} are not supported",
                            p.kind
                        ),
                    ));
                }
            }
        }
        None
    }

    /// Pushes what the item misses for its type, its fields under `at`.
    pub fn check_at(&self, at: &[LocPart], issues: &mut Issues) {
        for (field, content) in [("content", &self.content), ("output", &self.output)] {
            let mut loc = at.to_vec();
            loc.push(LocPart::Key(field.into()));
            check_parts(&loc, content.as_ref(), issues);
        }
        let missing = |issues: &mut Issues, field: &str, what: &str| {
            let mut loc = at.to_vec();
            loc.push(LocPart::Key(field.into()));
            issues.push(&loc, "missing", format!("Field required: {what}"));
        };
        match self.kind() {
            "message" => {
                if self.role.is_none() {
                    missing(issues, "role", "a message item has a role");
                }
                if self.content.is_none() {
                    missing(issues, "content", "a message item has content");
                }
            }
            "function_call" => {
                for (field, value) in
                    [("call_id", &self.call_id), ("name", &self.name), ("arguments", &self.arguments)]
                {
                    if value.is_none() {
                        missing(issues, field, "a function_call item has call_id, name and arguments");
                    }
                }
            }
            "function_call_output" => {
                if self.call_id.is_none() {
                    missing(issues, "call_id", "a function_call_output item names its call");
                }
                if self.output.is_none() {
                    missing(issues, "output", "a function_call_output item has an output");
                }
            }
            "compaction" if self.encrypted_content.is_none() => {
                missing(issues, "encrypted_content", "a compaction item has encrypted_content");
            }
            "mcp_approval_response" => {
                if self.approval_request_id.is_none() {
                    missing(issues, "approval_request_id", "an mcp_approval_response names its request");
                }
                if self.approve.is_none() {
                    missing(issues, "approve", "an mcp_approval_response has approve: true or false");
                }
            }
            _ => {}
        }
    }
}

/// The first unsupported feature of `items`, as `(param, message)`.
pub fn unsupported_item(field: &str, items: &[InputItem]) -> Option<(String, String)> {
    items
        .iter()
        .enumerate()
        .find_map(|(i, item)| item.unsupported().map(|(param, msg)| (format!("{field}[{i}].{param}"), msg)))
}

fn check_items(field: &str, items: &[InputItem], issues: &mut Issues) {
    for (i, item) in items.iter().enumerate() {
        item.check_at(&[LocPart::Key(field.into()), LocPart::Index(i)], issues);
    }
}

/// Body of `POST /v1/conversations`.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
pub struct CreateConversationRequest {
    /// Items to start with (at most 256), saved in one write.
    #[serde(default)]
    #[schemars(length(max = 256))]
    pub items: Option<Vec<InputItem>>,
    #[serde(default)]
    pub metadata: Option<super::Metadata>,
}

impl Check for CreateConversationRequest {
    fn check(&self, issues: &mut Issues) {
        check_items("items", self.items.as_deref().unwrap_or_default(), issues);
    }
}

/// Body of `POST /v1/conversations/{conversation_id}`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct UpdateConversationRequest {
    /// The conversation's new metadata: it replaces the old.
    pub metadata: super::Metadata,
}

impl Check for UpdateConversationRequest {}

/// Body of `POST /v1/conversations/{conversation_id}/items`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct CreateItemsRequest {
    /// The items to append (1 to 256), in one write.
    #[schemars(length(min = 1, max = 256))]
    pub items: Vec<InputItem>,
}

impl Check for CreateItemsRequest {
    fn check(&self, issues: &mut Issues) {
        check_items("items", &self.items, issues);
    }
}

/// Oldest first (`asc`) or newest first (`desc`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ItemOrder {
    Asc,
    #[default]
    Desc,
}

/// Query of `GET /v1/conversations/{conversation_id}/items` (OpenAI's cursor paging).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct ItemListParams {
    /// Answer the items after this one (an item id of an earlier page's `last_id`).
    #[serde(default)]
    #[schemars(regex(
        pattern = "^(msg_[0-9a-f]{32}|fc_[0-9a-f]{32}_[0-9]{1,3}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
    ))]
    pub after: Option<String>,
    /// How many items at most, 1 to 100 (default 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 100))]
    pub limit: Option<i64>,
    /// `desc` (newest first, the default) or `asc`.
    #[serde(default)]
    pub order: ItemOrder,
}

impl Check for ItemListParams {}

/// A part of a message item's content.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ItemContent {
    /// Text of a user or system message.
    InputText { text: String },
    /// Text of an assistant message.
    OutputText { text: String, annotations: Vec<Value> },
    /// An image of a user message: its URL (an http(s) URL or a data URL).
    InputImage { image_url: Option<String>, detail: ImageDetail },
    /// A file of a user message, its data inline.
    InputFile {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
        file_data: String,
    },
}

/// An item of a conversation: a view of one of its session's messages (an
/// assistant message that calls tools is one `function_call` item per call,
/// after its `message` item if it has text).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConversationItem {
    Message {
        /// The message's id.
        id: String,
        /// Always `completed`.
        status: String,
        /// `user`, `assistant` or `system`.
        role: String,
        content: Vec<ItemContent>,
    },
    FunctionCall {
        /// `fc_<message id without dashes>_<index of the call>`.
        id: String,
        call_id: String,
        name: String,
        arguments: String,
        /// Always `completed`.
        status: String,
    },
    FunctionCallOutput {
        /// The `tool` message's id.
        id: String,
        call_id: String,
        output: String,
        /// Always `completed`.
        status: String,
    },
    /// A call of an MCP server's tool that waits for a person's approval:
    /// answer it with an `mcp_approval_response` input item naming `id`.
    McpApprovalRequest {
        /// The model's id for the call.
        id: String,
        server_label: String,
        name: String,
        arguments: String,
    },
    /// The tools an MCP server listed for a response (in its output only).
    McpListTools {
        /// `mcpl_` and hex digits.
        id: String,
        server_label: String,
        tools: Vec<McpListedTool>,
        /// Why the server's tools could not be listed (none are offered then).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A call of an MCP server's tool, run by the server.
    McpCall {
        /// `mcp_` and the hex digits of the `tool` message with its result.
        id: String,
        server_label: String,
        name: String,
        arguments: String,
        /// What the tool answered (null when it failed).
        output: Option<String>,
        /// Why it failed.
        error: Option<McpCallError>,
        /// `completed` or `failed`.
        status: String,
    },
    /// A `file_search` the server ran.
    FileSearchCall {
        /// `fs_` and the hex digits of the `tool` message with its result.
        id: String,
        /// The query the model searched for.
        queries: Vec<String>,
        /// `completed` or `failed`.
        status: String,
        /// Not given (null): the model read the snippets found.
        results: Option<Vec<Value>>,
    },
}

/// A tool an MCP server lists.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct McpListedTool {
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of the tool's arguments.
    pub input_schema: Value,
    /// The server's hints (`readOnlyHint`, `idempotentHint`, ...), if any.
    pub annotations: Option<Value>,
}

/// Why an MCP call failed: the server could not be reached or broke the
/// protocol (`mcp_protocol_error`, `code` and `message`), or the tool said
/// it failed (`mcp_tool_execution_error`, its `content`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpCallError {
    McpProtocolError { code: i64, message: String },
    McpToolExecutionError { content: Value },
}

impl ConversationItem {
    pub fn id(&self) -> &str {
        match self {
            ConversationItem::Message { id, .. }
            | ConversationItem::FunctionCall { id, .. }
            | ConversationItem::FunctionCallOutput { id, .. }
            | ConversationItem::McpApprovalRequest { id, .. }
            | ConversationItem::McpListTools { id, .. }
            | ConversationItem::McpCall { id, .. }
            | ConversationItem::FileSearchCall { id, .. } => id,
        }
    }
}

/// A page of items (OpenAI's cursor list).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ItemList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ConversationItem>,
    /// The first item's id, null when `data` is empty.
    pub first_id: Option<String>,
    /// The last item's id (send it as `after` for the next page), null when `data` is empty.
    pub last_id: Option<String>,
    /// Whether more items follow this page.
    pub has_more: bool,
}
