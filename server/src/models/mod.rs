//! Talking to language models: OpenAI-compatible providers (their
//! configuration in `provider_config`, the calls in `provider`, a streamed
//! answer read in `upstream_stream`), the wire types (`wire`) and the
//! accumulator that assembles a streamed answer (`accumulator`),
//! system-prompt templates (`template`) and token counting (`tokens`).
//! `fake_upstream` is a scripted OpenAI-compatible server for tests (feature
//! `fake-upstream`).

pub mod accumulator;
#[cfg(any(test, feature = "fake-upstream"))]
pub mod fake_upstream;
pub mod provider;
pub mod provider_config;
pub mod template;
pub mod tokens;
mod upstream_stream;
pub mod wire;

#[cfg(test)]
mod tests;

pub use accumulator::ChunkAccumulator;
pub use provider::{CompletionStream, Provider, UpstreamError};
pub use provider_config::{ConfigError, ModelsConfig, NoProvider, ProviderConfig, Providers};
pub use template::{DEFAULT_SYSTEM_TEMPLATE, TemplateError, render};
pub use tokens::{count_chat_tokens, count_message_tokens, count_tokens};
pub use wire::{
    ChatMessage, CompletionChunk, CompletionRequest, CompletionResponse, Role, ToolCall, ToolChoice,
    ToolSpec, Usage,
};
