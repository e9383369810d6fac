//! Token counting with a real BPE tokenizer: tiktoken's `o200k_base`
//! encoding (GPT-4o, GPT-4.1, o-series), whose ranks are embedded in the
//! `tiktoken-rs` crate, so nothing is downloaded. The tokenizer is built once,
//! on first use, by a process-wide lazy static in `tiktoken-rs`; that parses
//! 200k ranks and takes ~2.5 s in a debug build (far less in release), so
//! call [`warm_up`] at startup (e.g. in `spawn_blocking`) rather than paying
//! it inside a request. Counting is CPU work (~4 ms per 1k tokens in debug).
//! For other model families (Llama, Qwen, ...) the counts are an estimate.

use tiktoken_rs::CoreBPE;

use super::wire::ChatMessage;

/// Tokens OpenAI's chat format adds around every message
/// (`<|start|>{role}\n{content}<|end|>\n`), not counting the role itself.
pub const TOKENS_PER_MESSAGE: usize = 3;
/// Extra tokens for a message's `name` field.
pub const TOKENS_PER_NAME: usize = 1;
/// Tokens that prime the assistant's reply (`<|start|>assistant<|message|>`),
/// added once per request.
pub const REPLY_PRIMING_TOKENS: usize = 3;

fn bpe() -> &'static CoreBPE {
    // A process-wide LazyLock inside tiktoken-rs: built once, shared by all threads.
    tiktoken_rs::o200k_base_singleton()
}

/// Builds the tokenizer now rather than on the first count.
pub fn warm_up() {
    let _ = bpe();
}

/// Tokens in `text`. Special-token text such as `<|endoftext|>` is counted
/// as ordinary text (as user content would be).
pub fn count_tokens(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    bpe().count_ordinary(text)
}

/// Tokens one chat message costs in a prompt: its role, content and name
/// plus the per-message overhead (about 4 tokens in all for short roles).
pub fn count_message_tokens(role: &str, content: &str, name: Option<&str>) -> usize {
    let name_tokens = name.map_or(0, |n| count_tokens(n) + TOKENS_PER_NAME);
    TOKENS_PER_MESSAGE + count_tokens(role) + count_tokens(content) + name_tokens
}

/// Tokens one message costs in a prompt, tool calls (name and arguments) included.
pub fn message_tokens(m: &ChatMessage) -> usize {
    let calls: usize = m
        .tool_calls
        .iter()
        .flatten()
        .map(|c| count_tokens(&c.function.name) + count_tokens(&c.function.arguments))
        .sum();
    count_message_tokens(m.role.as_str(), m.content.as_deref().unwrap_or(""), m.name.as_deref()) + calls
}

/// Tokens a whole request's messages cost ([`message_tokens`] each) plus the
/// reply priming. Tool *definitions* are not counted.
pub fn count_chat_tokens(messages: &[ChatMessage]) -> usize {
    messages.iter().map(message_tokens).sum::<usize>() + REPLY_PRIMING_TOKENS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_world() {
        // o200k_base: "hello" + " world".
        assert_eq!(count_tokens("hello world"), 2);
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("<|endoftext|>"), 7);
    }

    #[test]
    fn message_overhead() {
        let bare = count_message_tokens("user", "hello world", None);
        assert_eq!(bare, 2 + 4);
        assert_eq!(count_message_tokens("user", "hello world", Some("bob")), bare + 2);
        let msgs = [ChatMessage::system("be brief"), ChatMessage::user("hello world")];
        assert_eq!(
            count_chat_tokens(&msgs),
            count_message_tokens("system", "be brief", None) + bare + REPLY_PRIMING_TOKENS
        );
    }

    #[test]
    fn long_text_is_plausible() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(100);
        let n = count_tokens(&text);
        assert!((900..=1100).contains(&n), "{n}");
    }
}
