//! Reading the committed index back: every owner's statistics (at open),
//! the docs it holds, one doc's share of its owner's statistics, and the
//! fast fields (columns) a snippet is named and measured by.

use std::collections::{HashMap, HashSet};

use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, DocSet, Searcher, SegmentReader, TERMINATED, Term};
use uuid::Uuid;

use super::schema::{Fields, parse_owner};
use super::writer::Writing;
use super::{Shared, index_error};
use crate::search::{OwnerKey, SearchError};

/// What BM25 and the API need of one owner, beside the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::search) struct OwnerStats {
    pub(in crate::search) docs: u64,
    pub(in crate::search) snippets: u64,
    pub(in crate::search) tokens: u64,
    pub(in crate::search) vectors: u64,
    /// The dimension of the owner's vectors, while it has any.
    pub(in crate::search) dim: Option<usize>,
}

/// One doc's share of its owner's statistics.
#[derive(Clone, Default)]
pub(super) struct DocShare {
    pub(super) snippets: u64,
    pub(super) tokens: u64,
    pub(super) vectors: u64,
}

impl Shared {
    /// Every owner's statistics, from the fast fields of the live snippets,
    /// and the highest sequence number of any snippet (removed ones too).
    pub(super) fn load_stats(&self) -> Result<(HashMap<OwnerKey, OwnerStats>, u64), SearchError> {
        let mut all: HashMap<OwnerKey, OwnerStats> = HashMap::new();
        let searcher = self.reader.searcher();
        let mut max_seq = 0;
        for seg in searcher.segment_readers() {
            if seg.max_doc() > 0 {
                max_seq = max_seq.max(Columns::open(seg)?.seq.max_value());
            }
        }
        each_live_snippet(&searcher, |owner, cols, doc| {
            let st = all.entry(owner).or_default();
            st.snippets += 1;
            st.tokens += cols.len.first(doc).unwrap_or(0);
            st.docs += u64::from(cols.snip.first(doc) == Some(0));
            let dim = cols.dim.first(doc).unwrap_or(0);
            if dim > 0 {
                st.vectors += 1;
                st.dim = Some(dim as usize);
            }
        })?;
        Ok((all, max_seq))
    }

    /// The writing state, once its statistics are loaded.
    pub(super) fn loaded(&self) -> parking_lot::MutexGuard<'_, Writing> {
        let mut w = self.writing.lock();
        while !w.loaded {
            self.wake.wait(&mut w);
        }
        w
    }

    pub(in crate::search) fn stats(&self, owner: OwnerKey) -> OwnerStats {
        self.loaded().stats.get(&owner).copied().unwrap_or_default()
    }

    /// Every indexed doc, by owner.
    pub(in crate::search) fn doc_keys(&self) -> Result<HashSet<(OwnerKey, Uuid)>, SearchError> {
        let (searcher, mut keys) = {
            let w = self.writing.lock();
            let tail: HashSet<(OwnerKey, Uuid)> =
                w.tail.iter().flat_map(|(owner, docs)| docs.iter().map(|d| (*owner, d.id))).collect();
            (self.reader.searcher(), tail)
        };
        each_live_snippet(&searcher, |owner, cols, doc| {
            if cols.snip.first(doc) == Some(0) {
                keys.insert((owner, cols.doc_id(doc)));
            }
        })?;
        Ok(keys)
    }
}

/// Calls `each` with every live snippet of the searcher, its owner and its
/// segment's columns.
pub(super) fn each_live_snippet(
    searcher: &Searcher,
    mut each: impl FnMut(OwnerKey, &Columns, DocId),
) -> Result<(), SearchError> {
    for seg in searcher.segment_readers() {
        let cols = Columns::open(seg)?;
        let Some(owners) = seg.fast_fields().str("owner").map_err(index_error)? else { continue };
        let mut names: HashMap<u64, OwnerKey> = HashMap::new();
        let mut text = String::new();
        for doc in seg.doc_ids_alive() {
            let Some(ord) = owners.term_ords(doc).next() else { continue };
            let owner = match names.get(&ord) {
                Some(o) => *o,
                None => {
                    text.clear();
                    owners.ord_to_str(ord, &mut text).map_err(index_error)?;
                    let o = parse_owner(&text)
                        .ok_or_else(|| index_error(format!("unreadable owner {text:?}")))?;
                    names.insert(ord, o);
                    o
                }
            };
            each(owner, &cols, doc);
        }
    }
    Ok(())
}

/// What the doc named by `doc_term` adds to its owner's statistics now.
pub(super) fn share_of(searcher: &Searcher, f: Fields, doc_term: &Term) -> Result<DocShare, SearchError> {
    let mut share = DocShare::default();
    for seg in searcher.segment_readers() {
        let inverted = seg.inverted_index(f.doc).map_err(index_error)?;
        let Some(mut postings) =
            inverted.read_postings(doc_term, IndexRecordOption::Basic).map_err(index_error)?
        else {
            continue;
        };
        let cols = Columns::open(seg)?;
        let alive = seg.alive_bitset();
        let mut doc = postings.doc();
        while doc != TERMINATED {
            if alive.is_none_or(|a| a.is_alive(doc)) {
                share.snippets += 1;
                share.tokens += cols.len.first(doc).unwrap_or(0);
                share.vectors += u64::from(cols.dim.first(doc).unwrap_or(0) > 0);
            }
            doc = postings.advance();
        }
    }
    Ok(share)
}

/// Reads the vector of ord `vord` into `vector` (`bytes`: scratch).
pub(super) fn read_vector(
    vectors: &tantivy::columnar::BytesColumn,
    vord: u64,
    bytes: &mut Vec<u8>,
    vector: &mut Vec<f32>,
) -> Result<(), SearchError> {
    bytes.clear();
    vectors.ord_to_bytes(vord, bytes).map_err(index_error)?;
    vector.clear();
    vector.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    Ok(())
}

/// The fast fields read per snippet.
pub(super) struct Columns {
    pub(super) doc_hi: tantivy::columnar::Column<u64>,
    pub(super) doc_lo: tantivy::columnar::Column<u64>,
    pub(super) snip: tantivy::columnar::Column<u64>,
    pub(super) len: tantivy::columnar::Column<u64>,
    pub(super) dim: tantivy::columnar::Column<u64>,
    pub(super) seq: tantivy::columnar::Column<u64>,
}

impl Columns {
    pub(super) fn open(seg: &SegmentReader) -> Result<Self, SearchError> {
        let ff = seg.fast_fields();
        let col = |name: &str| ff.u64(name).map_err(index_error);
        Ok(Columns {
            doc_hi: col("doc_hi")?,
            doc_lo: col("doc_lo")?,
            snip: col("snip")?,
            len: col("len")?,
            dim: col("dim")?,
            seq: col("seq")?,
        })
    }

    pub(super) fn doc_id(&self, doc: DocId) -> Uuid {
        let hi = u128::from(self.doc_hi.first(doc).unwrap_or(0));
        let lo = u128::from(self.doc_lo.first(doc).unwrap_or(0));
        Uuid::from_u128(hi << 64 | lo)
    }

    pub(super) fn key(&self, doc: DocId) -> (Uuid, usize) {
        (self.doc_id(doc), self.snip.first(doc).unwrap_or(0) as usize)
    }
}
