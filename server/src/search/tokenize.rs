//! Text analysis: the single definition of what a search term is.
//!
//! Both indexing and querying go through [`tokenize`], so whatever folding it
//! applies is applied symmetrically.

use std::collections::HashMap;
use std::sync::{LazyLock, OnceLock};

use parking_lot::Mutex;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;
use unicode_segmentation::UnicodeSegmentation;

fn english_stemmer() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Entries per cache generation; the cache holds at most twice this many.
const STEM_CACHE_GENERATION: usize = 32 * 1024;
/// Longer words are stemmed without caching (they are rare).
const STEM_CACHE_MAX_WORD: usize = 32;

/// Memoised stems. Snowball stemming costs about a microsecond per word,
/// which dominated indexing, while word frequencies are heavily skewed, so a
/// small cache answers most lookups. Two generations approximate LRU with
/// bounded memory (≤ 64 Ki short entries, a few MB, process-wide): when the
/// current generation is full it becomes the previous one, and entries found
/// in the previous generation are promoted. The lock is never held while
/// stemming.
#[derive(Default)]
struct StemCache {
    current: HashMap<Box<str>, Box<str>>,
    previous: HashMap<Box<str>, Box<str>>,
}

static STEM_CACHE: LazyLock<Mutex<StemCache>> = LazyLock::new(Mutex::default);

fn stem(word: &str) -> String {
    if word.len() > STEM_CACHE_MAX_WORD {
        return english_stemmer().stem(word).into_owned();
    }
    let promoted = {
        let mut cache = STEM_CACHE.lock();
        if let Some(stem) = cache.current.get(word) {
            return stem.to_string();
        }
        cache.previous.remove(word)
    };
    let stem = promoted.unwrap_or_else(|| english_stemmer().stem(word).into());
    let result = stem.to_string();
    let mut cache = STEM_CACHE.lock();
    if cache.current.len() >= STEM_CACHE_GENERATION {
        cache.previous = std::mem::take(&mut cache.current);
    }
    cache.current.insert(word.into(), stem);
    result
}

/// Splits `text` into search terms.
///
/// Pipeline, per word:
/// 1. Unicode word segmentation (UAX #29, `unicode_words`: punctuation and
///    whitespace are dropped, `don't` and `3.14` stay one word);
/// 2. lowercasing;
/// 3. NFKD decomposition with combining marks removed (accent folding, so
///    `Café` and `cafe` are the same term; compatibility forms such as `ﬁ`
///    become `fi`);
/// 4. English Snowball stemming (`running`, `runs` and `run` are one term).
///
/// Returns the terms in text order, duplicates included. Stems are memoised
/// in a bounded process-wide cache, which does not change any result.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut folded = String::new();
    for word in text.unicode_words() {
        folded.clear();
        if word.is_ascii() {
            // ASCII is already in NFKD form and has no combining marks.
            folded.extend(word.chars().map(|c| c.to_ascii_lowercase()));
        } else {
            folded.extend(
                word.chars()
                    .flat_map(char::to_lowercase)
                    .nfkd()
                    .filter(|&c| !is_combining_mark(c))
                    // Typographic apostrophe, so "don’t" == "don't".
                    .map(|c| if c == '\u{2019}' { '\'' } else { c }),
            );
        }
        if !folded.is_empty() {
            terms.push(stem(&folded));
        }
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stem_cache_is_transparent_and_bounded() {
        let words: Vec<String> =
            (0..2 * STEM_CACHE_GENERATION + 500).map(|i| format!("walking{i}s")).collect();
        for _ in 0..2 {
            for word in words.iter().step_by(97).chain(&words) {
                assert_eq!(stem(word), english_stemmer().stem(word));
            }
        }
        let cache = STEM_CACHE.lock();
        assert!(cache.current.len() <= STEM_CACHE_GENERATION);
        assert!(cache.previous.len() <= STEM_CACHE_GENERATION);
        drop(cache);
        let long = "x".repeat(STEM_CACHE_MAX_WORD + 1) + "ing";
        assert_eq!(stem(&long), english_stemmer().stem(&long));
    }
}
