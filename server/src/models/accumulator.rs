//! Assembling a streamed chat answer: `ChunkAccumulator` folds the
//! `CompletionChunk`s of a stream into the whole `CompletionResponse` they
//! spell out (content, reasoning, tool calls merged from their fragments,
//! finish reason and usage).

use super::wire::{
    ChatMessage, Choice, CompletionChunk, CompletionResponse, Content, Role, ToolCall, ToolCallDelta, Usage,
    function_type,
};

/// Merges a stream of [`CompletionChunk`]s (choice 0 only; the platform never asks
/// for `n > 1`) into the message they spell out, plus usage.
#[derive(Clone, Debug, Default)]
pub struct ChunkAccumulator {
    id: String,
    model: String,
    content: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    /// Wire index of each entry of `tool_calls`.
    tool_indexes: Vec<Option<u32>>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
}

impl ChunkAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds one chunk in.
    pub fn push(&mut self, chunk: &CompletionChunk) {
        if self.id.is_empty() && !chunk.id.is_empty() {
            self.id.clone_from(&chunk.id);
        }
        if self.model.is_empty() && !chunk.model.is_empty() {
            self.model.clone_from(&chunk.model);
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices.iter().filter(|c| c.index == 0) {
            let delta = &choice.delta;
            if let Some(text) = &delta.content {
                self.content.push_str(text);
            }
            if let Some(text) = &delta.reasoning_content {
                self.reasoning.push_str(text);
            }
            for fragment in delta.tool_calls.iter().flatten() {
                self.push_tool_fragment(fragment);
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.clone());
            }
        }
    }

    fn push_tool_fragment(&mut self, fragment: &ToolCallDelta) {
        // Find the call this fragment continues: by index when the server
        // sends one; otherwise the last call, unless the fragment opens a
        // new call (a new id, or a name while the last call already has one).
        let slot = match fragment.index {
            Some(index) => self.tool_indexes.iter().position(|i| *i == Some(index)),
            None => {
                let last = self.tool_calls.len().checked_sub(1);
                let opens_new = last.is_none_or(|last| {
                    let call = &self.tool_calls[last];
                    let new_id =
                        fragment.id.as_deref().is_some_and(|id| !call.id.is_empty() && id != call.id);
                    let new_name = fragment
                        .function
                        .as_ref()
                        .and_then(|f| f.name.as_deref())
                        .is_some_and(|n| !n.is_empty() && !call.function.name.is_empty());
                    new_id || new_name
                });
                if opens_new { None } else { last }
            }
        };
        let slot = slot.unwrap_or_else(|| {
            self.tool_calls.push(ToolCall { kind: function_type(), ..ToolCall::default() });
            self.tool_indexes.push(fragment.index);
            self.tool_calls.len() - 1
        });
        let call = &mut self.tool_calls[slot];
        if let Some(id) = fragment.id.as_deref().filter(|id| !id.is_empty()) {
            id.clone_into(&mut call.id);
        }
        if let Some(kind) = fragment.kind.as_deref().filter(|k| !k.is_empty()) {
            kind.clone_into(&mut call.kind);
        }
        if let Some(function) = &fragment.function {
            // Names normally arrive whole, once; some servers repeat them
            // in every fragment.
            if let Some(name) = &function.name
                && *name != call.function.name
            {
                call.function.name.push_str(name);
            }
            if let Some(arguments) = &function.arguments {
                call.function.arguments.push_str(arguments);
            }
        }
    }

    /// The text so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The tool calls so far (arguments may still be partial).
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The merged answer, shaped like a non-streamed one. Content is `None`
    /// only when the model produced tool calls and no text.
    pub fn finish(self) -> CompletionResponse {
        let has_calls = !self.tool_calls.is_empty();
        let message = ChatMessage {
            role: Role::Assistant,
            content: (!has_calls || !self.content.is_empty()).then_some(Content::Text(self.content)),
            tool_calls: has_calls.then_some(self.tool_calls),
            reasoning_content: (!self.reasoning.is_empty()).then_some(self.reasoning),
            ..ChatMessage::default()
        };
        CompletionResponse {
            id: self.id,
            model: self.model,
            choices: vec![Choice { index: 0, finish_reason: self.finish_reason, message, logprobs: None }],
            usage: self.usage,
            ..CompletionResponse::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn chunk(v: Value) -> CompletionChunk {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn accumulator_merges_indexed_tool_fragments() {
        let mut acc = ChunkAccumulator::new();
        for c in [
            json!({"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let me "}}]}),
            json!({"choices": [{"index": 0, "delta": {"content": "check."}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "get", "arguments": ""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "put", "arguments": "{\"k\""}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":1}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": ":2}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}),
        ] {
            acc.push(&chunk(c));
        }
        let r = acc.finish();
        assert_eq!(r.id, "x");
        assert_eq!(r.text(), "Let me check.");
        assert_eq!(r.finish_reason(), Some("tool_calls"));
        let calls = r.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!((calls[0].id.as_str(), calls[0].function.name.as_str()), ("a", "get"));
        assert_eq!(calls[0].function.arguments, r#"{"q":1}"#);
        assert_eq!(calls[1].function.arguments, r#"{"k":2}"#);
        assert_eq!(r.usage.unwrap().total_tokens, 12);
    }

    #[test]
    fn accumulator_without_indexes() {
        let mut acc = ChunkAccumulator::new();
        for c in [
            json!({"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "get", "arguments": "{\"q\""}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"function": {"arguments": ":1}"}}]}}]}),
            json!({"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "put", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]}),
        ] {
            acc.push(&chunk(c));
        }
        let r = acc.finish();
        assert_eq!(r.message().unwrap().content, None);
        let calls = r.tool_calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].function.arguments, r#"{"q":1}"#);
        assert_eq!(calls[1].id, "b");
    }
}
