//! The embedding model hook: turns text into vectors for vector and hybrid search.
//!
//! With `models.embedding_model` configured, [`ProviderEmbedder`] (the
//! provider's OpenAI-compatible `/embeddings`) is installed by
//! [`crate::app::App::with_models`]: documents created without `embeddings`
//! get them computed, and vector or hybrid searches without a `vector` (and
//! chat recall) embed their `text`.

use async_trait::async_trait;

use super::Result;

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
