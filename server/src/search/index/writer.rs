//! Writing the index: changes staged in line under one lock, commits shared
//! by the writers waiting for them, the tail of added docs searched from
//! memory until a commit, and the two background threads (the committer of
//! aged tails, the builder of vector graphs).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, IndexWriter, Searcher, TERMINATED, TantivyDocument, Term};
use uuid::Uuid;

use super::reader::{Columns, DocShare, OwnerStats, read_vector, share_of};
use super::schema::{Fields, doc_term, meta_term_text, oseq_text, owner_text};
use super::{Shared, closed, index_error};
use crate::search::analysis::{AnalysedDoc, AnalysedSnippet};
use crate::search::directory;
use crate::search::{IndexChange, OwnerKey, PreparedDoc, SearchError, ann};

/// The indexing arena of the one writer thread.
pub(super) const WRITER_MEMORY: usize = 24 << 20;
/// How long an added doc may wait in the tail before a commit takes it.
pub(super) const COMMIT_AFTER: Duration = Duration::from_millis(500);
/// A tail of this many snippets is committed by the writer that filled it
/// (what a search reads from memory stays small).
pub(super) const TAIL_MAX: usize = 10_000;

/// A doc added since the last commit, which the searcher cannot see yet:
/// searched from memory.
pub(super) struct TailDoc {
    pub(super) id: Uuid,
    pub(super) metadata: Option<Map<String, Value>>,
    pub(super) snippets: Vec<TailSnippet>,
}

pub(super) struct TailSnippet {
    /// The snippet's length as tantivy keeps it (BM25's document length).
    pub(super) fieldnorm_id: u8,
    /// Its analysis (terms without the owner prefix); its vector only when
    /// it is indexed.
    pub(super) analysed: AnalysedSnippet,
}

/// What staging a change asks of the commit.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Effect {
    /// Nothing changed.
    None,
    /// A doc was added and is searched from the tail until a commit.
    Tail,
    /// Searches see the change only once committed: commit before answering.
    Commit,
}

pub(super) struct Writing {
    /// `None` once closed.
    pub(super) writer: Option<IndexWriter>,
    pub(super) stats: HashMap<OwnerKey, OwnerStats>,
    /// Changes staged so far (committed ones included).
    pub(super) staged: u64,
    /// What the changes staged since the last commit made of their docs
    /// (an empty share: removed), which the searcher cannot see yet.
    pub(super) pending: HashMap<(OwnerKey, Uuid), DocShare>,
    /// Owners removed since the last commit.
    pub(super) pending_removed: HashSet<OwnerKey>,
    /// Docs added since the last commit, by owner.
    pub(super) tail: HashMap<OwnerKey, Vec<Arc<TailDoc>>>,
    pub(super) tail_snippets: usize,
    /// When the oldest doc of the tail was added.
    pub(super) tail_since: Option<Instant>,
    /// Why a background commit failed: later changes fail with it.
    pub(super) broken: Option<String>,
    /// Set when the index is dropped: the committer thread ends.
    pub(super) stopping: bool,
    /// The sequence number of the next snippet staged.
    pub(super) next_seq: u64,
    /// Whether `stats` were read from the index (by the committer thread,
    /// first thing: a big index takes a while, and the server answers
    /// everything but search meanwhile). Whoever needs them waits.
    pub(super) loaded: bool,
}

impl Writing {
    /// What the doc adds to its owner's statistics now, staged changes included.
    fn share(
        &self,
        searcher: &Searcher,
        f: Fields,
        owner: OwnerKey,
        doc: Uuid,
        term: &Term,
    ) -> Result<DocShare, SearchError> {
        if let Some(share) = self.pending.get(&(owner, doc)) {
            return Ok(share.clone());
        }
        if self.pending_removed.contains(&owner) {
            return Ok(DocShare::default());
        }
        share_of(searcher, f, term)
    }

    /// Takes the owner's doc (or every doc, `None`) out of the tail.
    fn drop_from_tail(&mut self, owner: OwnerKey, doc: Option<Uuid>) {
        let Some(docs) = self.tail.get_mut(&owner) else { return };
        let before: usize = docs.iter().map(|d| d.snippets.len()).sum();
        docs.retain(|d| doc.is_some_and(|id| id != d.id));
        let after: usize = docs.iter().map(|d| d.snippets.len()).sum();
        self.tail_snippets -= before - after;
        if docs.is_empty() {
            self.tail.remove(&owner);
        }
    }
}

/// A staged change's place in line: committed once [`TantivyIndex::commit_through`] it returns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ticket(u64);

impl Shared {
    /// [`COMMIT_AFTER`], until the index is dropped.
    pub(super) fn commit_aged_tails(&self) {
        let stats = self.load_stats();
        let mut w = self.writing.lock();
        match stats {
            Ok((stats, max_seq)) => {
                w.stats = stats;
                w.next_seq = w.next_seq.max(max_seq + 1);
            }
            Err(e) => w.broken = Some(format!("its statistics could not be read: {e}")),
        }
        w.loaded = true;
        self.wake.notify_all();
        loop {
            if w.stopping {
                return;
            }
            let Some(since) = w.tail_since else {
                self.wake.wait(&mut w);
                continue;
            };
            let due = since + COMMIT_AFTER;
            let now = Instant::now();
            if now < due {
                self.wake.wait_for(&mut w, due - now);
                continue;
            }
            let through = Ticket(w.staged);
            drop(w);
            let outcome = self.commit_through(through);
            w = self.writing.lock();
            if let Err(e) = outcome {
                // The next change fails with it (and its caller marks search failed and logs it).
                if w.writer.is_some() {
                    w.broken = Some(match e {
                        SearchError::Index(why) => why,
                        other => other.to_string(),
                    });
                }
                w.tail_since = None;
            }
        }
    }

    /// The graph builder thread: builds the graphs asked for, one at a
    /// time, until the index is dropped.
    pub(super) fn build_graphs(&self) {
        while let Some(owner) = self.graphs.next_job() {
            // A failure is kept by `graphs` (searches stay exact); nothing else to do.
            let _ = self.build_graph(owner);
        }
    }

    /// Builds the owner's graph from the committed index.
    pub(in crate::search) fn build_graph(&self, owner: OwnerKey) -> Result<(), SearchError> {
        // What is staged goes in too (else a graph asked for right after a load holds little).
        self.flush()?;
        let (st, searcher) = {
            let w = self.loaded();
            (w.stats.get(&owner).copied().unwrap_or_default(), self.reader.searcher())
        };
        let dim = st.dim.unwrap_or(0);
        let owner_term = Term::from_field_text(self.fields.owner, &owner_text(owner));
        self.graphs.build(owner, dim, st.vectors, |add| {
            let mut bytes = Vec::new();
            let mut vector = Vec::new();
            for seg in searcher.segment_readers() {
                let inverted = seg.inverted_index(self.fields.owner).map_err(index_error)?;
                let Some(mut postings) =
                    inverted.read_postings(&owner_term, IndexRecordOption::Basic).map_err(index_error)?
                else {
                    continue;
                };
                let Some(vectors) = seg.fast_fields().bytes("vec").map_err(index_error)? else { continue };
                let cols = Columns::open(seg)?;
                let alive = seg.alive_bitset();
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if alive.is_none_or(|a| a.is_alive(doc))
                        && cols.dim.first(doc).unwrap_or(0) as usize == dim
                        && let Some(vord) = vectors.term_ords(doc).next()
                    {
                        read_vector(&vectors, vord, &mut bytes, &mut vector)?;
                        if !add(cols.seq.first(doc).unwrap_or(0), &vector)? {
                            return Ok(());
                        }
                    }
                    doc = postings.advance();
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Stages a change under the writer's lock, then commits it (sharing
    /// the commit with whoever staged meanwhile). `f` answers whether it
    /// changed anything; when it did not, nothing is committed.
    fn stage<R>(
        &self,
        f: impl FnOnce(&mut Writing, &Searcher, Fields) -> Result<(R, Effect), SearchError>,
    ) -> Result<(R, Ticket), SearchError> {
        let mut w = self.loaded();
        if let Some(e) = &w.broken {
            return Err(SearchError::Index(e.clone()));
        }
        let searcher = self.reader.searcher();
        let (result, effect) = f(&mut w, &searcher, self.fields)?;
        if effect == Effect::None {
            return Ok((result, Ticket(0)));
        }
        w.staged += 1;
        if !w.tail.is_empty() && w.tail_since.is_none() {
            w.tail_since = Some(Instant::now());
            self.wake.notify_all();
        }
        let wait = effect == Effect::Commit || w.tail_snippets >= TAIL_MAX;
        Ok((result, Ticket(if wait { w.staged } else { 0 })))
    }

    /// Returns once the change of `ticket` is committed and searchable: the
    /// first caller to get here commits for everyone staged so far.
    pub(in crate::search) fn commit_through(&self, ticket: Ticket) -> Result<(), SearchError> {
        if self.committed.load(Ordering::Acquire) >= ticket.0 {
            return Ok(());
        }
        let _committing = self.committing.lock();
        if self.committed.load(Ordering::Acquire) < ticket.0 {
            let mut w = self.writing.lock();
            w.writer.as_mut().ok_or_else(closed)?.commit().map_err(index_error)?;
            self.reader.reload().map_err(index_error)?;
            w.pending.clear();
            w.pending_removed.clear();
            w.tail.clear();
            w.tail_snippets = 0;
            w.tail_since = None;
            self.committed.store(w.staged, Ordering::Release);
        }
        Ok(())
    }

    /// Commits everything staged so far.
    pub(in crate::search) fn flush(&self) -> Result<(), SearchError> {
        let staged = self.writing.lock().staged;
        self.commit_through(Ticket(staged))
    }

    /// Commits what is staged, stops writing (merges under way finish) and,
    /// on disk, makes every file durable and notes the index closed cleanly.
    /// Later changes fail.
    pub(in crate::search) fn close(&self) -> Result<(), SearchError> {
        if self.writing.lock().writer.is_some() {
            self.flush()?;
        }
        let writer = self.writing.lock().writer.take();
        if let Some(writer) = writer {
            writer.wait_merging_threads().map_err(index_error)?;
        }
        match &self.dir {
            Some(dir) => directory::close_state(dir).map_err(index_error),
            None => Ok(()),
        }
    }

    /// Stages `changes` in order, to be committed by [`Self::commit_through`]
    /// their ticket (searches see them from then on).
    pub(in crate::search) fn stage_changes(
        &self,
        changes: Vec<IndexChange>,
    ) -> Result<(Vec<Result<(), SearchError>>, Ticket), SearchError> {
        self.stage(|w, searcher, f| {
            let mut effect = Effect::None;
            let mut outcomes = Vec::with_capacity(changes.len());
            for change in changes {
                let outcome = match change {
                    IndexChange::Upsert(owner, PreparedDoc { doc, strict }) => {
                        stage_upsert(w, searcher, f, owner, doc, strict)
                    }
                    IndexChange::Remove(owner, doc) => stage_remove(w, searcher, f, owner, doc),
                    IndexChange::RemoveOwner(owner) => stage_remove_owner(w, f, &self.graphs, owner),
                };
                outcomes.push(outcome.map(|e| effect = effect.max(e)));
            }
            let failed = outcomes.iter().find_map(|o| match o {
                Err(SearchError::Index(e)) => Some(e.clone()),
                _ => None,
            });
            if let Some(e) = failed {
                return Err(SearchError::Index(e));
            }
            Ok((outcomes, effect))
        })
    }
}

/// Stages an upsert (it always changes something): a doc the index cannot
/// hold yet goes to the tail; one it may hold is replaced at the next commit.
fn stage_upsert(
    w: &mut Writing,
    searcher: &Searcher,
    f: Fields,
    owner: OwnerKey,
    doc: AnalysedDoc,
    strict: bool,
) -> Result<Effect, SearchError> {
    let prefix = owner_text(owner);
    let id = doc.id.as_u128();
    let doc_text = format!("{prefix}{id:032x}");
    let term = Term::from_field_text(f.doc, &doc_text);
    let old = w.share(searcher, f, owner, doc.id, &term)?;
    let mut st = w.stats.get(&owner).copied().unwrap_or_default();
    let owner_dim = if st.vectors > old.vectors { st.dim } else { None };
    let doc_dim = doc.snippets.iter().find_map(|s| s.vector.as_ref().map(|v| v.len()));
    if strict
        && let (Some(expected), Some(got)) = (owner_dim, doc_dim)
        && expected != got
    {
        return Err(SearchError::DimensionMismatch { expected, got });
    }
    let dim = owner_dim.or(doc_dim);
    let meta_terms: Vec<String> = doc.metadata.iter().flatten().map(|(k, v)| meta_term_text(k, v)).collect();
    let meta_json = doc.metadata.as_ref().map(serde_json::to_vec).transpose().map_err(index_error)?;
    let fresh = old.snippets == 0 && !w.pending.contains_key(&(owner, doc.id));
    if !fresh {
        // Only a doc the index may hold is deleted first: a delete costs
        // every commit a pass over every segment.
        w.writer.as_ref().ok_or_else(closed)?.delete_term(term);
        w.drop_from_tail(owner, Some(doc.id));
    }
    let doc_id = doc.id;
    let mut new = DocShare::default();
    let mut tail = TailDoc { id: doc_id, metadata: doc.metadata, snippets: Vec::new() };
    for (i, snippet) in doc.snippets.into_iter().enumerate() {
        let mut d = TantivyDocument::new();
        d.add_text(f.owner, &prefix);
        d.add_text(f.doc, &doc_text);
        d.add_u64(f.doc_hi, (id >> 64) as u64);
        d.add_u64(f.doc_lo, id as u64);
        d.add_u64(f.snip, i as u64);
        let seq = w.next_seq;
        w.next_seq += 1;
        d.add_u64(f.seq, seq);
        d.add_text(f.oseq, oseq_text(&prefix, seq));
        d.add_u64(f.len, u64::from(snippet.len));
        let vector = snippet.vector.filter(|v| Some(v.len()) == dim);
        d.add_u64(f.dim, vector.as_ref().map_or(0, |v| v.len() as u64));
        if let Some(v) = &vector {
            let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            d.add_bytes(f.vec, &bytes);
            new.vectors += 1;
        }
        for t in &meta_terms {
            d.add_text(f.meta, t);
        }
        if let Some(json) = &meta_json {
            d.add_bytes(f.meta_json, json);
        }
        // Every occurrence of every term, owner-prefixed, separated by a
        // space (no analysed term holds whitespace): tantivy's whitespace
        // tokenizer gives back exactly these tokens. (A pre-tokenised field
        // would be stored in the document as JSON, which costs most of an add.)
        let mut text = String::with_capacity(
            snippet
                .terms
                .iter()
                .zip(&snippet.tfs)
                .map(|(t, tf)| (prefix.len() + t.len() + 1) * *tf as usize)
                .sum(),
        );
        for (term, tf) in snippet.terms.iter().zip(&snippet.tfs) {
            for _ in 0..*tf {
                text.push_str(&prefix);
                text.push_str(term);
                text.push(' ');
            }
        }
        d.add_text(f.text, &text);
        w.writer.as_ref().ok_or_else(closed)?.add_document(d).map_err(index_error)?;
        new.snippets += 1;
        new.tokens += u64::from(snippet.len);
        tail.snippets.push(TailSnippet {
            fieldnorm_id: FieldNormReader::fieldnorm_to_id(snippet.len),
            analysed: AnalysedSnippet { vector, ..snippet },
        });
    }
    st.docs = st.docs - u64::from(old.snippets > 0) + u64::from(new.snippets > 0);
    st.snippets = st.snippets - old.snippets + new.snippets;
    st.tokens = st.tokens - old.tokens + new.tokens;
    st.vectors = st.vectors - old.vectors + new.vectors;
    st.dim = if st.vectors > 0 { dim } else { None };
    set_stats(&mut w.stats, owner, st);
    w.pending.insert((owner, doc_id), new);
    if !fresh {
        return Ok(Effect::Commit);
    }
    if !tail.snippets.is_empty() {
        w.tail_snippets += tail.snippets.len();
        w.tail.entry(owner).or_default().push(Arc::new(tail));
    }
    Ok(Effect::Tail)
}

/// Stages the removal of a doc; answers whether it was there.
fn stage_remove(
    w: &mut Writing,
    searcher: &Searcher,
    f: Fields,
    owner: OwnerKey,
    doc: Uuid,
) -> Result<Effect, SearchError> {
    let term = doc_term(f, &owner_text(owner), doc);
    let old = w.share(searcher, f, owner, doc, &term)?;
    if old.snippets == 0 {
        return Ok(Effect::None);
    }
    w.pending.insert((owner, doc), DocShare::default());
    w.writer.as_ref().ok_or_else(closed)?.delete_term(term);
    w.drop_from_tail(owner, Some(doc));
    let mut st = w.stats.get(&owner).copied().unwrap_or_default();
    st.docs = st.docs.saturating_sub(1);
    st.snippets = st.snippets.saturating_sub(old.snippets);
    st.tokens = st.tokens.saturating_sub(old.tokens);
    st.vectors = st.vectors.saturating_sub(old.vectors);
    if st.vectors == 0 {
        st.dim = None;
    }
    set_stats(&mut w.stats, owner, st);
    Ok(Effect::Commit)
}

/// Stages the removal of every doc of the owner.
fn stage_remove_owner(
    w: &mut Writing,
    f: Fields,
    graphs: &ann::Graphs,
    owner: OwnerKey,
) -> Result<Effect, SearchError> {
    let writer = w.writer.as_ref().ok_or_else(closed)?;
    if w.stats.remove(&owner).is_none() {
        return Ok(Effect::None);
    }
    writer.delete_term(Term::from_field_text(f.owner, &owner_text(owner)));
    w.pending.retain(|(o, _), _| *o != owner);
    w.pending_removed.insert(owner);
    w.drop_from_tail(owner, None);
    graphs.remove_owner(owner);
    Ok(Effect::Commit)
}

fn set_stats(all: &mut HashMap<OwnerKey, OwnerStats>, owner: OwnerKey, st: OwnerStats) {
    if st.snippets == 0 && st.docs == 0 {
        all.remove(&owner);
    } else {
        all.insert(owner, st);
    }
}
