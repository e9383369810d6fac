//! The embedding model hook: turns text into vectors for vector and hybrid search.
//!
//! No embedding model is wired in yet ([`crate::app::App::embedder`] is `None`);
//! a provider (an OpenAI-compatible `/embeddings` endpoint, say) implements
//! [`Embedder`] and is installed with [`crate::app::App::with_embedder`]. Then
//! documents created without `embeddings` get them computed, and vector or
//! hybrid searches without a `vector` embed their `text`.

use async_trait::async_trait;

use super::Result;

#[async_trait]
pub trait Embedder: Send + Sync + 'static {
    /// One vector per text, in order, all of one dimension.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>>;
}

/// An embedding model served by a model provider's `/embeddings`.
pub struct ProviderEmbedder {
    pub provider: crate::chat::Provider,
    pub model: String,
}

#[async_trait]
impl Embedder for ProviderEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>> {
        Ok(self.provider.embed(&self.model, texts).await?)
    }
}
