//! OpenAI chat-completions and embeddings wire types: requests, whole
//! answers and stream chunks (assembling a streamed answer is
//! `accumulator`'s).
//!
//! These are deliberately lean and lenient rather than `async-openai`'s types:
//! answers from llama.cpp, Ollama, vLLM and friends often lack fields OpenAI
//! always sends (`created`, `object`, tool-call `id`s or stream `index`es),
//! use finish reasons outside OpenAI's closed enum, or send tool-call
//! `arguments` as a JSON object instead of a string. So on input every field
//! is optional or defaulted and unknown fields are ignored; on output `None`
//! fields are skipped.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions (OpenAI's newer `developer` role is read as this).
    #[serde(alias = "developer")]
    System,
    User,
    /// The model (the default for answers that omit the role).
    #[default]
    Assistant,
    /// A tool result, answering the assistant's `tool_calls`.
    Tool,
}

impl Role {
    /// The wire name (`"system"`, `"user"`, `"assistant"`, `"tool"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One chat message, in requests (history) and answers alike.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ChatMessage {
    #[serde(default)]
    pub role: Role,
    /// Text or parts; `None` is sent as `null` (an assistant message that only calls tools).
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// On `tool` messages: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Reasoning text some servers (llama.cpp, vLLM, DeepSeek) return beside `content`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// In answers: the model's refusal (OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// In answers: annotations of the text (OpenAI's `url_citation`s), as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<Value>>,
}

/// A message's content: text, or parts (OpenAI's content parts).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text: itself, or the text parts joined by newlines.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Content::Text(text) => Cow::Borrowed(text),
            Content::Parts(parts) => {
                let mut texts = parts.iter().filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                });
                match (texts.next(), texts.next()) {
                    (None, _) => Cow::Borrowed(""),
                    (Some(one), None) => Cow::Borrowed(one),
                    (Some(first), Some(second)) => {
                        let mut all = format!("{first}\n{second}");
                        for text in texts {
                            all.push('\n');
                            all.push_str(text);
                        }
                        Cow::Owned(all)
                    }
                }
            }
        }
    }

    /// Bytes it holds (text, URLs, data).
    pub fn byte_len(&self) -> usize {
        match self {
            Content::Text(text) => text.len(),
            Content::Parts(parts) => parts.iter().map(ContentPart::byte_len).sum(),
        }
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::Text(text)
    }
}

/// A part of a message's content, as OpenAI's chat completions take it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text {
        text: String,
    },
    ImageUrl {
        image_url: ImageUrl,
    },
    File {
        file: FileData,
    },
    /// A part of a kind these types do not model (audio, a refusal, ...): read, never sent.
    #[serde(other)]
    Other,
}

impl ContentPart {
    fn byte_len(&self) -> usize {
        match self {
            ContentPart::Text { text } => text.len(),
            ContentPart::ImageUrl { image_url } => image_url.url.len(),
            ContentPart::File { file } => file.file_data.as_ref().map_or(0, String::len),
            ContentPart::Other => 0,
        }
    }
}

/// An image part's image: an http(s) URL or a data URL.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ImageUrl {
    pub url: String,
    /// `auto`, `low` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A file part's file.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct FileData {
    /// A data URL (`data:application/pdf;base64,...`) or the file's base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

impl ChatMessage {
    fn text(role: Role, content: impl Into<String>) -> Self {
        ChatMessage { role, content: Some(Content::Text(content.into())), ..ChatMessage::default() }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::text(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::text(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text(Role::Assistant, content)
    }
    /// An assistant message that calls tools (content `null`).
    pub fn assistant_tool_calls(calls: Vec<ToolCall>) -> Self {
        ChatMessage { role: Role::Assistant, tool_calls: Some(calls), ..ChatMessage::default() }
    }
    /// A tool result answering call `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Tool,
            content: Some(Content::Text(content.into())),
            tool_call_id: Some(tool_call_id.into()),
            ..ChatMessage::default()
        }
    }
    /// The content's text (text parts joined by newlines), if it has content.
    pub fn content_text(&self) -> Option<Cow<'_, str>> {
        self.content.as_ref().map(Content::text)
    }
}

/// A finished tool call requested by the model.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ToolCall {
    /// Empty when the server sent none; [`super::provider::Provider`] fills one in.
    #[serde(default)]
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionCall,
}

/// The function part of a [`ToolCall`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct FunctionCall {
    #[serde(default)]
    pub name: String,
    /// JSON text (an object sent instead of a string is re-encoded to text).
    #[serde(default, deserialize_with = "string_or_json")]
    pub arguments: String,
}

pub(super) fn function_type() -> String {
    "function".to_owned()
}

/// Accepts a string as is, `null` as empty, and any other JSON as its text.
fn string_or_json<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => s,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

fn opt_string_or_json<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) => Some(s),
        Value::Null => None,
        other => Some(other.to_string()),
    })
}

/// A tool offered to the model (`{"type":"function","function":{...}}`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ToolSpec {
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    pub function: FunctionSpec,
}

impl ToolSpec {
    /// A function tool; `parameters` is a JSON Schema object.
    pub fn function(name: impl Into<String>, description: Option<String>, parameters: Value) -> Self {
        ToolSpec {
            kind: function_type(),
            function: FunctionSpec { name: name.into(), description, parameters, strict: None },
        }
    }
}

/// The function part of a [`ToolSpec`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct FunctionSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// Strict schema adherence, when the request asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// `tool_choice`: `"auto"`, `"none"`, `"required"`, or one named function.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(String),
    Named(NamedToolChoice),
}

impl ToolChoice {
    pub fn auto() -> Self {
        ToolChoice::Mode("auto".to_owned())
    }
    pub fn none() -> Self {
        ToolChoice::Mode("none".to_owned())
    }
    pub fn required() -> Self {
        ToolChoice::Mode("required".to_owned())
    }
    /// Force a call to the function `name`.
    pub fn function(name: impl Into<String>) -> Self {
        ToolChoice::Named(NamedToolChoice {
            kind: function_type(),
            function: NamedFunction { name: name.into() },
        })
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NamedToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: NamedFunction,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NamedFunction {
    pub name: String,
}

/// `stream_options`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// A `POST /chat/completions` body.
///
/// `stream` and `stream_options` are set by [`super::provider::Provider`]
/// (`chat` sends `stream: false`, `chat_stream` sends `stream: true` with
/// `include_usage`), so callers can leave them at their defaults.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CompletionRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolSpec>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    /// E.g. `{"type":"json_object"}` or a `json_schema` object; passed through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Server-specific parameters (e.g. llama.cpp's `cache_prompt`), sent as
    /// top-level fields.
    #[serde(flatten, default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

impl CompletionRequest {
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        CompletionRequest { model: model.into(), messages, ..CompletionRequest::default() }
    }
}

/// Token usage as reported by the server (missing numbers read as 0).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u32,
    #[serde(default)]
    pub completion_tokens: u32,
    #[serde(default)]
    pub total_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// OpenAI's details of the prompt's tokens (missing numbers read as 0).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PromptTokensDetails {
    #[serde(default, deserialize_with = "count")]
    pub cached_tokens: u32,
    #[serde(default, deserialize_with = "count")]
    pub audio_tokens: u32,
}

/// OpenAI's details of the answer's tokens (missing numbers read as 0).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CompletionTokensDetails {
    #[serde(default, deserialize_with = "count")]
    pub reasoning_tokens: u32,
    #[serde(default, deserialize_with = "count")]
    pub audio_tokens: u32,
    #[serde(default, deserialize_with = "count")]
    pub accepted_prediction_tokens: u32,
    #[serde(default, deserialize_with = "count")]
    pub rejected_prediction_tokens: u32,
}

/// A count that may be `null` (read as 0).
fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(0))
}

/// A non-streamed chat answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CompletionResponse {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
}

impl CompletionResponse {
    /// The first choice's message, if any.
    pub fn message(&self) -> Option<&ChatMessage> {
        self.choices.first().map(|c| &c.message)
    }
    /// The first choice's text (empty if none).
    pub fn text(&self) -> Cow<'_, str> {
        self.message().and_then(ChatMessage::content_text).unwrap_or(Cow::Borrowed(""))
    }
    /// The first choice's tool calls (empty if none).
    pub fn tool_calls(&self) -> &[ToolCall] {
        self.message().and_then(|m| m.tool_calls.as_deref()).unwrap_or(&[])
    }
    /// The first choice's finish reason (`"stop"`, `"length"`, `"tool_calls"`, ...).
    pub fn finish_reason(&self) -> Option<&str> {
        self.choices.first().and_then(|c| c.finish_reason.as_deref())
    }
}

/// One choice of a [`CompletionResponse`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    /// Kept as text: servers use reasons beyond OpenAI's set.
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default)]
    pub message: ChatMessage,
    /// The tokens' log probabilities, when asked for; as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
}

/// One streamed `chat.completion.chunk`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CompletionChunk {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    /// Sent in the last chunk (with empty `choices`) when `include_usage` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
}

impl CompletionChunk {
    /// The text fragment of choice 0 in this chunk, if any.
    pub fn text(&self) -> Option<&str> {
        self.choices.iter().find(|c| c.index == 0).and_then(|c| c.delta.content.as_deref())
    }
}

/// One choice of a [`CompletionChunk`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// The delta's log probabilities, when asked for; as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
}

/// The new part of a streamed message.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A fragment of a tool call: the first fragment of a call usually carries
/// `id` and `function.name`, later ones pieces of `function.arguments`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ToolCallDelta {
    /// Which call this fragment belongs to (some servers omit it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCallDelta>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct FunctionCallDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "opt_string_or_json", skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// A `POST /embeddings` body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A `/embeddings` answer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct EmbeddingResponse {
    #[serde(default)]
    pub data: Vec<Embedding>,
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Embedding {
    #[serde(default)]
    pub index: usize,
    pub embedding: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_skips_none_and_keeps_null_content() {
        let mut req = CompletionRequest::new(
            "m",
            vec![
                ChatMessage::system("be brief"),
                ChatMessage::assistant_tool_calls(vec![ToolCall {
                    id: "c1".into(),
                    kind: "function".into(),
                    function: FunctionCall { name: "f".into(), arguments: "{}".into() },
                }]),
                ChatMessage::tool_result("c1", "42"),
            ],
        );
        req.extra.insert("cache_prompt".into(), json!(true));
        let v = serde_json::to_value(&req).unwrap();
        assert_eq!(
            v,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "content": "42", "tool_call_id": "c1"}
                ],
                "stream": false,
                "cache_prompt": true
            })
        );
    }

    #[test]
    fn content_parts_are_sent_as_openai_takes_them_and_any_are_read() {
        let m = ChatMessage {
            role: Role::User,
            content: Some(Content::Parts(vec![
                ContentPart::Text { text: "a".into() },
                ContentPart::ImageUrl {
                    image_url: ImageUrl { url: "https://x/y.png".into(), detail: Some("low".into()) },
                },
                ContentPart::File {
                    file: FileData { file_data: Some("data:text/plain;base64,eA==".into()), filename: None },
                },
            ])),
            ..ChatMessage::default()
        };
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({"role": "user", "content": [
                {"type": "text", "text": "a"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "file", "file": {"file_data": "data:text/plain;base64,eA=="}},
            ]})
        );
        let read: ChatMessage = serde_json::from_value(json!({"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "input_audio", "input_audio": {"data": ""}},
            {"type": "text", "text": "b"}]}))
        .unwrap();
        assert_eq!(read.content_text().as_deref(), Some("a\nb"));
        assert_eq!(ChatMessage::user("plain").content_text().as_deref(), Some("plain"));
    }

    #[test]
    fn lenient_response_parsing() {
        // No id/object/created, odd finish reason, object arguments, no call id.
        let r: CompletionResponse = serde_json::from_value(json!({
            "choices": [{"finish_reason": "eos", "message": {
                "content": null,
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]
            }}],
            "usage": {"prompt_tokens": 3},
            "system_fingerprint": "x"
        }))
        .unwrap();
        assert_eq!(r.finish_reason(), Some("eos"));
        assert_eq!(r.tool_calls()[0].function.arguments, r#"{"a":1}"#);
        assert_eq!(r.tool_calls()[0].kind, "function");
        assert_eq!(r.usage.unwrap().prompt_tokens, 3);
    }
}
