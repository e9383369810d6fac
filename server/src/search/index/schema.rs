//! The index's schema and how things become its terms: owners (the prefix
//! of every term of their snippets), docs, metadata pairs, sequence numbers.

use serde_json::Value;
use sha2::{Digest, Sha256};
use tantivy::Term;
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use uuid::Uuid;

use super::super::OwnerKey;

/// Written beside an index on disk; an index without it (or with another)
/// is rebuilt.
pub(super) const VERSION: &str = "agent-platform search index 3 (tantivy 0.27)";
pub(super) const VERSION_FILE: &str = "VERSION";

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub(super) owner: Field,
    pub(super) doc: Field,
    pub(super) doc_hi: Field,
    pub(super) doc_lo: Field,
    pub(super) snip: Field,
    pub(super) len: Field,
    pub(super) dim: Field,
    pub(super) vec: Field,
    pub(super) meta: Field,
    pub(super) meta_json: Field,
    pub(super) text: Field,
    /// The snippet's sequence number (see [`crate::search::ann`]).
    pub(super) seq: Field,
    /// Owner and sequence number (16 hex digits): looks a snippet up by its
    /// number, and walks an owner's snippets staged after a number.
    pub(super) oseq: Field,
}

pub(super) fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        // The text arrives analysed, as its terms separated by spaces (see `stage_upsert`).
        TextFieldIndexing::default()
            .set_tokenizer("whitespace")
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        owner: b.add_text_field("owner", STRING | FAST),
        doc: b.add_text_field("doc", STRING),
        doc_hi: b.add_u64_field("doc_hi", FAST),
        doc_lo: b.add_u64_field("doc_lo", FAST),
        snip: b.add_u64_field("snip", FAST),
        len: b.add_u64_field("len", FAST),
        dim: b.add_u64_field("dim", FAST),
        vec: b.add_bytes_field("vec", FAST),
        meta: b.add_text_field("meta", STRING),
        meta_json: b.add_bytes_field("meta_json", STORED),
        text: b.add_text_field("text", text),
        seq: b.add_u64_field("seq", FAST),
        oseq: b.add_text_field("oseq", STRING),
    };
    (b.build(), fields)
}

/// The length of [`owner_text`]: tenant and owner, 32 hex digits each.
pub(super) const OWNER_TEXT_LEN: usize = 64;

/// The owner as indexed text, and the prefix of every term of its snippets.
pub(super) fn owner_text(owner: OwnerKey) -> String {
    format!("{:032x}{:032x}", owner.tenant.as_u128(), owner.owner.as_u128())
}

pub(super) fn parse_owner(text: &str) -> Option<OwnerKey> {
    let tenant = u128::from_str_radix(text.get(..32)?, 16).ok()?;
    let owner = u128::from_str_radix(text.get(32..OWNER_TEXT_LEN)?, 16).ok()?;
    Some(OwnerKey { tenant: Uuid::from_u128(tenant), owner: Uuid::from_u128(owner) })
}

/// A metadata pair as an indexed term: the key and a hash of the value's
/// canonical form (so values a filter finds equal share it).
pub(super) fn meta_term_text(key: &str, value: &Value) -> String {
    let mut canonical = Vec::new();
    crate::metadata::canonical(value, &mut canonical);
    let hash = Sha256::digest(&canonical);
    let hex: String = hash[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{key}\u{0}{hex}")
}

/// The `oseq` text of the owner's (`prefix`) snippet `seq`.
pub(super) fn oseq_text(prefix: &str, seq: u64) -> String {
    format!("{prefix}{seq:016x}")
}

pub(super) fn doc_term(f: Fields, prefix: &str, doc: Uuid) -> Term {
    Term::from_field_text(f.doc, &format!("{prefix}{:032x}", doc.as_u128()))
}
