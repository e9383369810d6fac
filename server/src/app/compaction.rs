//! A compaction: a conversation summarised by the model into one item
//! (OpenAI's `compaction` item, which `POST /v1/responses/compact` answers),
//! that a later request passes back in its input to stand for the
//! conversation.
//!
//! The item's `encrypted_content` is sealed, not encrypted: `apc1.`, the
//! base64url (no padding) of a JSON object `{"summary", "model",
//! "created_at"}`, a `.`, and the hex of the first 16 bytes of that JSON's
//! SHA-256. The client had every word of the conversation already, and an
//! item it writes itself says no more than a system message it could send;
//! the checksum turns an altered or cut item into a clear 400 rather than a
//! garbled prompt. Passed back, the item becomes a system message carrying
//! the summary ([`summary_message`]).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const PREFIX: &str = "apc1.";

/// What a compaction item holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sealed {
    /// The model's summary of the conversation.
    pub summary: String,
    /// The model that wrote it.
    pub model: String,
    /// Unix seconds.
    pub created_at: i64,
}

fn checksum(json: &[u8]) -> String {
    hex::encode(&Sha256::digest(json)[..16])
}

/// The item's `encrypted_content` for `sealed`.
pub fn seal(sealed: &Sealed) -> String {
    let json = serde_json::to_vec(sealed).expect("a compaction serialises");
    format!("{PREFIX}{}.{}", URL_SAFE_NO_PAD.encode(&json), checksum(&json))
}

/// What an item's `encrypted_content` holds; `None` when it is no seal of
/// [`seal`]'s, or was altered.
pub fn unseal(content: &str) -> Option<Sealed> {
    let (payload, sum) = content.strip_prefix(PREFIX)?.split_once('.')?;
    let json = URL_SAFE_NO_PAD.decode(payload).ok()?;
    if checksum(&json) != sum {
        return None;
    }
    serde_json::from_slice(&json).ok()
}

/// The system message a compaction item becomes in a prompt.
pub fn summary_message(summary: &str) -> String {
    format!("Summary of the earlier conversation (compacted): {summary}")
}

/// How the model is asked to write a compaction's summary.
pub const COMPACTION_PROMPT: &str = "You are performing a context checkpoint compaction. Summarise the \
     conversation below so that another assistant can continue it without seeing it: keep every fact, \
     name, number, code word, decision, tool call and tool result that matters, what the user asked \
     for, what was answered, and what is still open. Write the summary only.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_and_an_altered_one_does_not() {
        let sealed = Sealed { summary: "The code word is slate.".into(), model: "m".into(), created_at: 7 };
        let content = seal(&sealed);
        assert!(content.starts_with("apc1."), "{content}");
        assert_eq!(unseal(&content), Some(sealed));
        let (head, sum) = content.rsplit_once('.').unwrap();
        let mut payload = head.to_owned();
        let other = if payload.pop() == Some('A') { 'B' } else { 'A' };
        assert_eq!(unseal(&format!("{payload}{other}.{sum}")), None, "a changed payload");
        assert_eq!(unseal(&content[..content.len() - 1]), None, "a cut checksum");
        assert_eq!(unseal("encrypted-summary"), None);
        assert_eq!(unseal("apc1.!!.00"), None);
    }
}
