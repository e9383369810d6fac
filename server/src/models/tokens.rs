//! Token counting with a real BPE tokenizer: tiktoken's `o200k_base`
//! encoding (GPT-4o, GPT-4.1, o-series). For other model families (Llama,
//! Qwen, ...) the counts are an estimate.
//!
//! The vocabulary is `tiktoken-rs`'s, flattened at build time (`build.rs`)
//! into one embedded array of token bytes with their offsets, indexed here
//! by one hash table of ranks (~1.3 MB; the compiled pattern takes a few MB
//! more): `tiktoken-rs`'s own `CoreBPE` keeps three copies of the 200k tokens
//! in hash maps, ~34 MB resident for the life of the process, and leaves
//! ~13 MB more behind from building them.
//! The counting is tiktoken's (`encode_ordinary`: split by the pattern, a
//! piece that is a token counts one, any other is merged pair by pair,
//! lowest rank first); the tests check it against `tiktoken-rs` itself.
//! Built once, on first use; [`warm_up`] builds it at startup (~10 ms in a
//! release build). Counting is CPU work (~3 ms for 70 KB of prose, release).

use std::collections::BinaryHeap;
use std::hash::BuildHasher;
use std::sync::LazyLock;

use fancy_regex::Regex;
use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use super::wire::{ChatMessage, Content, ContentPart};

/// Tokens OpenAI's chat format adds around every message
/// (`<|start|>{role}\n{content}<|end|>\n`), not counting the role itself.
pub const TOKENS_PER_MESSAGE: usize = 3;
/// Extra tokens for a message's `name` field.
pub const TOKENS_PER_NAME: usize = 1;
/// Tokens that prime the assistant's reply (`<|start|>assistant<|message|>`),
/// added once per request.
pub const REPLY_PRIMING_TOKENS: usize = 3;

/// `build.rs`'s file: the count `n`, `n + 1` offsets (u32 LE), the bytes.
static O200K_BASE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.bin"));
static O200K_BASE_PATTERN: &str = include_str!(concat!(env!("OUT_DIR"), "/o200k_base.pattern"));

type Rank = u32;

/// The ordinary tokens of one encoding, looked up by their bytes.
struct Vocabulary {
    /// `count + 1` little-endian offsets into `bytes`.
    starts: &'static [u8],
    bytes: &'static [u8],
    /// Ranks, found by the hash of their token's bytes.
    ranks: HashTable<Rank>,
    hasher: FxBuildHasher,
    pattern: Regex,
}

impl Vocabulary {
    fn new(file: &'static [u8], pattern: &str) -> Vocabulary {
        let count = u32::from_le_bytes(file[..4].try_into().expect("4 bytes")) as usize;
        let (starts, bytes) = file[4..].split_at((count + 1) * 4);
        let hasher = FxBuildHasher;
        let hash = |rank: Rank| hasher.hash_one(token_in(starts, bytes, rank));
        let mut ranks = HashTable::with_capacity(count);
        for rank in 0..count as Rank {
            ranks.insert_unique(hash(rank), rank, |&r| hash(r));
        }
        let pattern = Regex::new(pattern).expect("tiktoken's pattern compiles");
        Vocabulary { starts, bytes, ranks, hasher, pattern }
    }

    fn token(&self, rank: Rank) -> &'static [u8] {
        token_in(self.starts, self.bytes, rank)
    }

    fn rank(&self, piece: &[u8]) -> Option<Rank> {
        let hash = self.hasher.hash_one(piece);
        self.ranks.find(hash, |&r| self.token(r) == piece).copied()
    }

    fn rank_or_max(&self, piece: &[u8]) -> Rank {
        self.rank(piece).unwrap_or(Rank::MAX)
    }

    /// tiktoken's `encode_ordinary(text).len()`. Should the pattern give up
    /// (fancy-regex's backtracking limit), the rest counts a token a byte: an
    /// over-estimate, never a panic.
    fn count_ordinary(&self, text: &str) -> usize {
        let mut count = 0;
        let mut at = 0;
        for found in self.pattern.find_iter(text) {
            let Ok(found) = found else {
                return count + (text.len() - at);
            };
            at = found.end();
            let piece = found.as_str().as_bytes();
            count += if self.rank(piece).is_some() { 1 } else { self.pair_merge_count(piece) };
        }
        count
    }

    /// How many tokens byte-pair merging makes of `piece` (tiktoken's
    /// `byte_pair_encode(piece).len()`): quadratic in a short piece (cheap
    /// there), a heap of merges in a long one.
    fn pair_merge_count(&self, piece: &[u8]) -> usize {
        match piece.len() {
            0 => 0,
            1 => 1,
            2..100 => self.short_pair_merge_count(piece),
            _ => self.long_pair_merge_count(piece),
        }
    }

    /// tiktoken's `_byte_pair_merge`: `parts` are (start, rank of the pair
    /// starting there); the lowest-ranked pair merges until none is a token.
    fn short_pair_merge_count(&self, piece: &[u8]) -> usize {
        let mut parts: Vec<(usize, Rank)> = Vec::with_capacity(piece.len() + 1);
        let mut min_rank: (Rank, usize) = (Rank::MAX, usize::MAX);
        for i in 0..piece.len() - 1 {
            let rank = self.rank_or_max(&piece[i..i + 2]);
            if rank < min_rank.0 {
                min_rank = (rank, i);
            }
            parts.push((i, rank));
        }
        parts.push((piece.len() - 1, Rank::MAX));
        parts.push((piece.len(), Rank::MAX));
        let get_rank = |parts: &Vec<(usize, Rank)>, i: usize| {
            if i + 3 < parts.len() { self.rank_or_max(&piece[parts[i].0..parts[i + 3].0]) } else { Rank::MAX }
        };
        while min_rank.0 != Rank::MAX {
            let i = min_rank.1;
            if i > 0 {
                parts[i - 1].1 = get_rank(&parts, i - 1);
            }
            parts[i].1 = get_rank(&parts, i);
            parts.remove(i + 1);
            min_rank = (Rank::MAX, usize::MAX);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < min_rank.0 {
                    min_rank = (rank, i);
                }
            }
        }
        parts.len() - 1
    }

    /// tiktoken's `_byte_pair_merge_large`: the same merges in the same
    /// order (lowest rank, then leftmost), from a heap, O(n log n).
    fn long_pair_merge_count(&self, piece: &[u8]) -> usize {
        #[derive(PartialEq, Eq)]
        struct Merge {
            start: usize,
            rank: Rank,
        }
        impl Ord for Merge {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                other.rank.cmp(&self.rank).then_with(|| other.start.cmp(&self.start))
            }
        }
        impl PartialOrd for Merge {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        struct State {
            prev: usize,
            end: usize,
            next_end: usize,
            next_rank: Rank,
        }
        let mut state = Vec::with_capacity(piece.len());
        state.push(State { prev: usize::MAX, end: 1, next_end: 2, next_rank: Rank::MAX });
        let mut heap = BinaryHeap::with_capacity(piece.len());
        for i in 0..piece.len() - 1 {
            if let Some(rank) = self.rank(&piece[i..i + 2]) {
                heap.push(Merge { start: i, rank });
                state[i].next_rank = rank;
            }
            state.push(State { prev: i, end: i + 2, next_end: i + 3, next_rank: Rank::MAX });
        }
        let potential_merge =
            |state: &mut Vec<State>, heap: &mut BinaryHeap<Merge>, start: usize, next_end: usize| {
                state[start].next_end = next_end;
                state[start].next_rank = Rank::MAX;
                if next_end <= piece.len()
                    && let Some(rank) = self.rank(&piece[start..next_end])
                {
                    heap.push(Merge { start, rank });
                    state[start].next_rank = rank;
                }
            };
        while let Some(left) = heap.pop() {
            if left.rank != state[left.start].next_rank {
                continue; // invalidated by an earlier merge
            }
            let left_start = left.start;
            let right_start = state[left_start].end;
            let right_end = state[left_start].next_end;
            let right_next_end = state[right_start].next_end;
            state[left_start].end = right_end;
            potential_merge(&mut state, &mut heap, left_start, right_next_end);
            if right_end < state.len() {
                state[right_end].prev = left_start;
            }
            if left_start > 0 {
                let prev_start = state[left_start].prev;
                potential_merge(&mut state, &mut heap, prev_start, right_end);
            }
            state[right_start].next_rank = Rank::MAX;
        }
        let mut count = 0;
        let mut i = 0;
        while i < state.len() {
            count += 1;
            i = state[i].end;
        }
        count
    }
}

fn token_in(starts: &'static [u8], bytes: &'static [u8], rank: Rank) -> &'static [u8] {
    let at = |i: usize| u32::from_le_bytes(starts[i * 4..i * 4 + 4].try_into().expect("4 bytes")) as usize;
    let i = rank as usize;
    &bytes[at(i)..at(i + 1)]
}

fn bpe() -> &'static Vocabulary {
    static VOCABULARY: LazyLock<Vocabulary> =
        LazyLock::new(|| Vocabulary::new(O200K_BASE, O200K_BASE_PATTERN));
    &VOCABULARY
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

/// What an image costs: OpenAI's count for a 1024×1024 image at high detail
/// (the image's size is not known here).
pub const IMAGE_TOKENS: usize = 765;
/// What an image costs at `detail: low` (OpenAI's count, whatever its size).
pub const IMAGE_LOW_TOKENS: usize = 85;
/// What a file costs: an estimate (its pages' text and images are the provider's to read).
pub const FILE_TOKENS: usize = 1024;

/// Tokens of a content part that is not text ([`IMAGE_TOKENS`], [`FILE_TOKENS`]).
pub fn part_tokens(part: &ContentPart) -> usize {
    match part {
        ContentPart::Text { text } => count_tokens(text),
        ContentPart::ImageUrl { image_url } if image_url.detail.as_deref() == Some("low") => IMAGE_LOW_TOKENS,
        ContentPart::ImageUrl { .. } => IMAGE_TOKENS,
        ContentPart::File { .. } => FILE_TOKENS,
        ContentPart::Other => 0,
    }
}

/// Tokens of a message's content: its text, or its parts.
pub fn content_tokens(content: &Content) -> usize {
    match content {
        Content::Text(text) => count_tokens(text),
        Content::Parts(parts) => parts.iter().map(part_tokens).sum(),
    }
}

/// Tokens one message costs in a prompt, tool calls (name and arguments) included.
pub fn message_tokens(m: &ChatMessage) -> usize {
    let calls: usize = m
        .tool_calls
        .iter()
        .flatten()
        .map(|c| count_tokens(&c.function.name) + count_tokens(&c.function.arguments))
        .sum();
    count_message_tokens(m.role.as_str(), "", m.name.as_deref())
        + m.content.as_ref().map_or(0, content_tokens)
        + calls
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

    /// Every count equals `tiktoken-rs`'s own (`CoreBPE::count_ordinary`):
    /// prose, code, numbers, whitespace runs, scripts and emoji, text that
    /// is no token (bytes merged pair by pair) and pieces long enough for the
    /// heap merge (100 bytes and more).
    #[test]
    fn counts_equal_tiktoken_rs() {
        let reference = tiktoken_rs::o200k_base_singleton();
        let mut texts: Vec<String> = [
            "hello world",
            "<|endoftext|>",
            "The quick brown fox jumps over the lazy dog.",
            "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
            "1234567890 3.14159 -42 1e10 0xDEADBEEF",
            "   leading and trailing spaces   \n\n\t\ttabs\r\n",
            "Ünïcödé façade naïve café résumé Straße",
            "日本語のテキストと中文文本和한국어 텍스트",
            "emoji 🎉🚀👩‍👩‍👧‍👦 and ZWJ sequences",
            "I'm, you're, they've, we'll, she'd, it's, DON'T",
            "zqxjkvbwpfmglrtyzqxjkvbwpfmglrty",
            "https://example.com/path?query=1&b=2#frag",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        texts.push("a".repeat(1000));
        texts.push("zqxjkvbwpfmg".repeat(40));
        texts.push("🎉".repeat(200));
        texts.push(" ".repeat(300) + "x");
        texts.push((0..2000).map(|i| char::from_u32(0x4e00 + (i * 7919) % 20000).unwrap()).collect());
        texts.push(
            (0..3000u32)
                .map(|i| char::from_u32(32 + (i.wrapping_mul(2654435761) >> 7) % 0x2500).unwrap_or('?'))
                .collect(),
        );
        // 300 more, drawn (seeded) from a mixed alphabet, up to 400 characters.
        let alphabet: Vec<char> = "aeiou bcdfg hjklm npqrs tvwxyz AEIOU BCDFG 0123456789 .,;:!?'\"()[]{}<>/\\-_=+*&^%$#@~`|\n\r\t éèàüöñçß ΑΒΓαβγ АБВабв 日本語中文한국어 🎉🚀👍🏽"
            .chars()
            .collect();
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..300 {
            let len = next(400);
            texts.push((0..len).map(|_| alphabet[next(alphabet.len())]).collect());
        }
        for text in &texts {
            assert_eq!(count_tokens(text), reference.count_ordinary(text), "{text:?}");
        }
    }

    #[test]
    fn long_text_is_plausible() {
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(100);
        let n = count_tokens(&text);
        assert!((900..=1100).contains(&n), "{n}");
    }
}
