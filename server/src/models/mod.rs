//! Talking to language models: OpenAI-compatible providers (`provider`,
//! with the wire types in `wire`), system-prompt templates (`template`) and
//! token counting (`tokens`). `fake_upstream` is a scripted
//! OpenAI-compatible server for tests (feature `fake-upstream`).

#[cfg(any(test, feature = "fake-upstream"))]
pub mod fake_upstream;
pub mod provider;
pub mod template;
pub mod tokens;
pub mod wire;

#[cfg(test)]
mod tests;

pub use provider::{
    CompletionStream, ConfigError, ModelsConfig, NoProvider, Provider, ProviderConfig, Providers,
    UpstreamError,
};
pub use template::{DEFAULT_SYSTEM_TEMPLATE, TemplateError, render};
pub use tokens::{count_chat_tokens, count_message_tokens, count_tokens};
pub use wire::{
    ChatMessage, ChunkAccumulator, CompletionChunk, CompletionRequest, CompletionResponse, Role, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
