//! Token counting with the `o200k_base` encoding (GPT-4o and later).
//!
//! Counts are an estimate for models with other tokenizers, but a stable one:
//! they are what `token_count` of a message and `token_budget` of a session mean.
//! The encoding's data is embedded in the binary; it is loaded once, on first use.

use std::sync::OnceLock;

use tiktoken_rs::CoreBPE;

fn encoding() -> &'static CoreBPE {
    static BPE: OnceLock<CoreBPE> = OnceLock::new();
    BPE.get_or_init(|| tiktoken_rs::o200k_base().expect("the embedded o200k_base data loads"))
}

/// The number of tokens of `text`. Special-token markup (`<|endoftext|>`) in
/// user text is counted as ordinary text, as the model will see it.
pub fn count(text: &str) -> usize {
    if text.is_empty() {
        return 0;
    }
    encoding().encode_ordinary(text).len()
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_tokens_of_o200k_base() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello"), 1);
        assert_eq!(count("Hello, world!"), 4);
        assert!(count("<|endoftext|>") > 1, "special markup in text is ordinary text");
    }
}
