//! Contract types of OpenAI's embeddings (`POST /v1/embeddings`), in OpenAI's shapes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::LocPart;
use crate::validate::{Check, Issues};

/// The most inputs one embeddings request may have (OpenAI's own bound).
pub const EMBEDDING_MAX_INPUTS: usize = 2048;
/// The most bytes of text one embeddings request may have, all inputs together.
pub const EMBEDDING_MAX_INPUT_BYTES: usize = 1 << 20;

/// Body of `POST /v1/embeddings` (OpenAI's request; unknown fields are ignored).
#[derive(Clone, Debug, Deserialize, JsonSchema)]
pub struct EmbeddingRequest {
    /// The text to embed: a string, or a list of 1 to 2,048 strings; each at
    /// least 1 character, all of them at most 1 MiB (1,048,576 bytes) of text.
    /// Token ids (integers, or lists of them) are not supported: a 400 naming `input`.
    pub input: EmbeddingInput,
    /// The embedding model: a model name, sent to the provider that serves it.
    #[schemars(length(min = 1, max = 255))]
    pub model: String,
    /// `float` (the default: lists of numbers) or `base64` (each vector's
    /// little-endian 32-bit floats, in base64).
    #[serde(default)]
    pub encoding_format: Option<EncodingFormat>,
    /// The vectors' dimensions, for models that can shorten theirs: sent to the
    /// provider; a provider that answers other dimensions makes it a 400 naming `dimensions`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 65536))]
    pub dimensions: Option<i64>,
    /// An end-user id, for the provider's abuse monitoring: passed on as sent.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub user: Option<String>,
}

/// What to embed: one text, or a list of texts (token ids are not supported).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    List(#[schemars(length(min = 1, max = 2048))] Vec<EmbeddingInputItem>),
}

/// One input of a list: a text; a token id, or a list of them, is not
/// supported (400 naming `input`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EmbeddingInputItem {
    Text(String),
    Token(i64),
    Tokens(Vec<i64>),
}

impl EmbeddingInput {
    /// The texts to embed (token ids left out).
    pub fn texts(&self) -> Vec<&str> {
        match self {
            EmbeddingInput::Text(text) => vec![text.as_str()],
            EmbeddingInput::List(items) => items
                .iter()
                .filter_map(|i| match i {
                    EmbeddingInputItem::Text(text) => Some(text.as_str()),
                    _ => None,
                })
                .collect(),
        }
    }
}

/// How the vectors are encoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EncodingFormat {
    #[default]
    Float,
    Base64,
}

impl EmbeddingRequest {
    /// The first feature of the request this service does not support, as `(param, message)`.
    pub fn unsupported(&self) -> Option<(String, String)> {
        match &self.input {
            EmbeddingInput::List(items)
                if items.iter().any(|i| !matches!(i, EmbeddingInputItem::Text(_))) =>
            {
                Some((
                    "input".into(),
                    "token ids are not supported: send the text (a string, or a list of strings)".into(),
                ))
            }
            _ => None,
        }
    }
}

impl Check for EmbeddingRequest {
    fn check(&self, issues: &mut Issues) {
        let texts = self.input.texts();
        let empty: Vec<Vec<LocPart>> = match &self.input {
            EmbeddingInput::Text(text) if text.is_empty() => vec![vec![LocPart::Key("input".into())]],
            EmbeddingInput::Text(_) => Vec::new(),
            EmbeddingInput::List(items) => items
                .iter()
                .enumerate()
                .filter(|(_, item)| matches!(item, EmbeddingInputItem::Text(t) if t.is_empty()))
                .map(|(i, _)| vec![LocPart::Key("input".into()), LocPart::Index(i)])
                .collect(),
        };
        for loc in empty {
            issues.push(&loc, "string_too_short", "String should have at least 1 character");
        }
        let bytes: usize = texts.iter().map(|t| t.len()).sum();
        if bytes > EMBEDDING_MAX_INPUT_BYTES {
            issues.push(
                &[LocPart::Key("input".into())],
                "too_long",
                format!(
                    "the input has {bytes} bytes of text, over the {EMBEDDING_MAX_INPUT_BYTES} one request may embed"
                ),
            );
        }
    }
}

/// The answer of `POST /v1/embeddings`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingList {
    /// Always `list`.
    pub object: String,
    /// One embedding per input, in input order.
    pub data: Vec<Embedding>,
    /// The model that embedded.
    pub model: String,
    pub usage: EmbeddingUsage,
}

/// One input's vector.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Embedding {
    /// Always `embedding`.
    pub object: String,
    /// The input's index.
    pub index: i64,
    /// Numbers (`encoding_format: float`) or base64 (`base64`).
    pub embedding: EmbeddingVector,
}

/// A vector, as numbers or in base64.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f32>),
    Base64(String),
}

/// Tokens of the inputs, as the provider counted them (or we did, when it did not).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: i64,
    pub total_tokens: i64,
}
