//! The streamed chat, in the domain: prepare → upstream → accumulate →
//! usage → save → final chunk.
//!
//! [`App::chat_stream`] prepares the chat and opens the provider's stream (so a
//! provider that fails at once is an ordinary error), then yields the
//! contract's [`ChatChunk`]s as the provider's arrive. Once the provider is
//! done it saves the exchange through [`App::chat_save`], the path the whole
//! answer takes too, and yields the last chunk, with `usage` and `docs`. A
//! failure ends the stream with one `Err` and saves nothing. Dropping the
//! stream (a client that went away) drops the provider's stream, which aborts
//! its request, and the session's chat lock; nothing is saved either.

use futures::{Stream, StreamExt};
use uuid::Uuid;

use super::chat::{PreparedChat, contract_usage, usage_or_count};
use super::{App, Result, Tenant};
use crate::api::types_chat::{
    ChatChunk, ChatChunkChoice, ChatDelta, ChatFunctionCallDelta, ChatRequest, ChatToolCallDelta,
};
use crate::api::types_sessions::Role;
use crate::models::provider::CompletionStream as UpstreamStream;
use crate::models::{ChunkAccumulator, wire};

/// The chunks of a streamed chat; it ends after the last chunk, or with one `Err`.
pub type ChatChunks = std::pin::Pin<Box<dyn Stream<Item = Result<ChatChunk>> + Send>>;

impl App {
    /// A chat answered chunk by chunk (see the module's docs).
    pub async fn chat_stream(&self, t: Tenant, session: Uuid, req: ChatRequest) -> Result<ChatChunks> {
        let prepared = self.chat_prepare(t, session, req).await?;
        let upstream = prepared.provider.chat_stream(&prepared.request).await?;
        let streaming = Streaming {
            app: self.clone(),
            prepared,
            upstream,
            acc: ChunkAccumulator::new(),
            id: String::new(),
            model: String::new(),
        };
        Ok(Box::pin(futures::stream::unfold(Some(streaming), |streaming| async move {
            let mut streaming = streaming?;
            match streaming.next().await {
                Next::Chunk(chunk) => Some((Ok(chunk), Some(streaming))),
                Next::Last(last) => Some((last, None)),
            }
        })))
    }
}

/// A stream under way: the chat, the provider's stream and what it said so far.
struct Streaming {
    app: App,
    prepared: PreparedChat,
    upstream: UpstreamStream,
    acc: ChunkAccumulator,
    /// The provider's id and model for the answer, from its first chunk.
    id: String,
    model: String,
}

enum Next {
    Chunk(ChatChunk),
    /// The last item: the final chunk once saved, or the failure.
    Last(Result<ChatChunk>),
}

impl Streaming {
    async fn next(&mut self) -> Next {
        while let Some(item) = self.upstream.next().await {
            let chunk = match item {
                Ok(chunk) => chunk,
                Err(e) => return Next::Last(Err(e.into())),
            };
            self.acc.push(&chunk);
            if self.id.is_empty() {
                self.id.clone_from(&chunk.id);
                self.model.clone_from(&chunk.model);
            }
            // The usage-only chunk is replaced by the last one, which adds the docs.
            if !chunk.choices.is_empty() {
                return Next::Chunk(contract_chunk(chunk));
            }
        }
        Next::Last(self.finish().await)
    }

    /// Usage, save, and the last chunk.
    async fn finish(&mut self) -> Result<ChatChunk> {
        let acc = std::mem::take(&mut self.acc);
        let usage = usage_or_count(&self.prepared.request, acc.usage(), acc.content());
        let answer = acc.finish();
        self.app.chat_save(&self.prepared, &answer, None).await?;
        let model = std::mem::take(&mut self.model);
        Ok(ChatChunk {
            id: std::mem::take(&mut self.id),
            object: Some("chat.completion.chunk".to_owned()),
            model: if model.is_empty() { self.prepared.request.model.clone() } else { model },
            choices: Vec::new(),
            usage: Some(usage),
            docs: Some(self.prepared.docs.clone()),
        })
    }
}

/// The contract's chunk from the provider's.
pub(super) fn contract_chunk(chunk: wire::CompletionChunk) -> ChatChunk {
    let choices = chunk
        .choices
        .into_iter()
        .map(|c| ChatChunkChoice {
            index: c.index,
            finish_reason: c.finish_reason,
            delta: ChatDelta {
                role: c.delta.role.map(contract_role),
                content: c.delta.content,
                reasoning_content: c.delta.reasoning_content,
                tool_calls: c.delta.tool_calls.map(|calls| {
                    calls
                        .into_iter()
                        .map(|call| ChatToolCallDelta {
                            index: call.index,
                            id: call.id,
                            kind: call.kind,
                            function: call
                                .function
                                .map(|f| ChatFunctionCallDelta { name: f.name, arguments: f.arguments }),
                        })
                        .collect()
                }),
            },
        })
        .collect();
    // A provider may report usage on a chunk with choices too: passed on as sent.
    let usage = chunk.usage.map(contract_usage);
    ChatChunk { id: chunk.id, object: None, model: chunk.model, choices, usage, docs: None }
}

fn contract_role(role: wire::Role) -> Role {
    match role {
        wire::Role::System => Role::System,
        wire::Role::User => Role::User,
        wire::Role::Assistant => Role::Assistant,
        wire::Role::Tool => Role::Tool,
    }
}
