//! The embedding model hook: turns text into vectors for vector and hybrid search;
//! and OpenAI's `POST /v1/embeddings`, through the provider that serves its model.
//!
//! With `models.embedding_model` configured, [`ProviderEmbedder`] (the
//! provider's OpenAI-compatible `/embeddings`) is installed by
//! [`crate::app::App::with_models`]: documents created without `embeddings`
//! get them computed, and vector or hybrid searches without a `vector` (and
//! chat recall) embed their `text`.

use async_trait::async_trait;
use base64::Engine;

use super::{App, Error, Result, Tenant};
use crate::api::types::{
    Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage, EmbeddingVector, EncodingFormat,
};
use crate::models::{tokens, wire};

#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// One vector per text, in order, all of one dimension.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// An embedding model served by a model provider's `/embeddings`.
pub struct ProviderEmbedder {
    pub provider: crate::models::Provider,
    pub model: String,
}

#[async_trait]
impl Embedder for ProviderEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(self.provider.embed(&self.model, texts).await?)
    }
}

// ---------------------------------------------------------------- POST /v1/embeddings

impl App {
    /// OpenAI's embeddings: the input's vectors from the provider that serves
    /// `model` (validation bounded the input; token arrays were refused).
    pub async fn embedding_create(&self, _t: Tenant, req: EmbeddingRequest) -> Result<EmbeddingList> {
        let provider = self.models.resolve(&req.model)?;
        let inputs: Vec<String> = req.input.texts().into_iter().map(str::to_owned).collect();
        let dimensions = req.dimensions.map(|d| d.clamp(1, u32::MAX.into()) as u32);
        let ask = wire::EmbeddingRequest {
            model: req.model.clone(),
            input: inputs,
            encoding_format: Some("float".into()),
            dimensions,
            user: req.user,
        };
        let answer = provider.embeddings(&ask).await?;
        if let Some(d) = dimensions
            && let Some(other) = answer.data.iter().map(|e| e.embedding.len()).find(|n| *n != d as usize)
        {
            return Err(Error::Invalid {
                param: "dimensions".into(),
                message: format!(
                    "model '{}' does not shorten its vectors to {d} dimensions (its provider answered \
                     {other}): omit `dimensions`",
                    req.model
                ),
            });
        }
        let usage = match answer.usage {
            Some(u) if u.prompt_tokens > 0 || u.total_tokens > 0 => EmbeddingUsage {
                prompt_tokens: u.prompt_tokens.into(),
                total_tokens: u.total_tokens.max(u.prompt_tokens).into(),
            },
            _ => {
                let n = ask.input.iter().map(|t| tokens::count_tokens(t)).sum::<usize>() as i64;
                EmbeddingUsage { prompt_tokens: n, total_tokens: n }
            }
        };
        let base64 = req.encoding_format == Some(EncodingFormat::Base64);
        let data = answer
            .data
            .into_iter()
            .map(|e| Embedding {
                object: "embedding".into(),
                index: e.index as i64,
                embedding: if base64 {
                    let bytes: Vec<u8> = e.embedding.iter().flat_map(|x| x.to_le_bytes()).collect();
                    EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
                } else {
                    EmbeddingVector::Float(e.embedding)
                },
            })
            .collect();
        let model = if answer.model.is_empty() { req.model } else { answer.model };
        Ok(EmbeddingList { object: "list".into(), data, model, usage })
    }
}
