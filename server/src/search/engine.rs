//! The index itself, on tantivy: one tantivy document per snippet, on disk
//! (memory-mapped segments) for a server, in memory for tests.
//!
//! Fields of a snippet: its owner (`owner`, tenant and owner id in hex: the
//! term that removes an owner and that vector search walks), its doc
//! (`doc`: owner and doc id, the term that replaces or removes a doc), the
//! doc id and snippet index as fast fields (what a hit is named by), its
//! length and vector dimension (fast, for the per-owner statistics), the unit
//! vector (fast bytes), the doc's metadata as terms of key and hashed
//! canonical value (`meta`, so a filter is part of the query) and as stored
//! JSON (what the one definition of "metadata matches" checks), and its text.
//!
//! The text is analysed by [`super::tokenize`] and given to tantivy as its
//! terms separated by spaces (which tantivy's whitespace tokenizer splits
//! again), every term prefixed with its owner. Term statistics are so per
//! owner, as BM25's are meant to be here: no owner's documents change another
//! owner's scores. The document count and total length BM25 also needs are
//! kept per owner beside the index ([`OwnerStats`], read from the fast
//! fields by a background thread when it opens: whoever needs them waits)
//! and given to tantivy's BM25 through [`Bm25StatisticsProvider`];
//! document frequencies count live snippets only.
//!
//! Writes: a tantivy commit makes a segment and, in time, merges — far too
//! dear per document. A doc added is so searched from memory (the *tail*:
//! its analysed snippets, scored with tantivy's own BM25 weights over the
//! same per-owner statistics) until a commit takes it into the index: when
//! the tail is [`COMMIT_AFTER`] old (a background thread), when it holds
//! [`TAIL_MAX`] snippets (the writer that filled it commits), or when a
//! change is not a plain add (a removal or a replacement is committed, and
//! the reader reloaded, before it returns). Either way a change is
//! searchable once it answered. Concurrent writers share commits: each
//! stages its change, then the first to take the commit lock commits for
//! everyone staged so far. A tail lost with its process is not lost to
//! search: the store is the truth, and at start the index is brought in
//! step with it (see [`super`]).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tantivy::collector::{Collector, DocSetCollector, SegmentCollector, TopDocs};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::query::{
    Bm25StatisticsProvider, Bm25Weight, BooleanQuery, ConstScoreQuery, EnableScoring, Occur, Query as TQuery,
    TermQuery,
};
use tantivy::schema::{
    FAST, Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions, Value as _,
};
use tantivy::{
    DocAddress, DocId, DocSet, Executor, Index, IndexReader, IndexWriter, ReloadPolicy, Score, Searcher,
    SegmentReader, TERMINATED, TantivyDocument, Term,
};
use uuid::Uuid;

use super::ann::{self, Graph};
use super::directory::{self, Unsynced};
use super::index::PreparedDoc;
use super::rank::{Ranked, TopK};
use super::score::{canonical, dot, fuse, unit};
use super::{Hit, Mode, OwnerKey, Query, SearchError, query_terms};
use crate::store::filter::metadata_matches;

/// Written beside an index on disk; an index without it (or with another)
/// is rebuilt.
const VERSION: &str = "agent-platform search index 3 (tantivy 0.27)";
const VERSION_FILE: &str = "VERSION";
/// The indexing arena of the one writer thread.
const WRITER_MEMORY: usize = 24 << 20;
/// How long an added doc may wait in the tail before a commit takes it.
const COMMIT_AFTER: Duration = Duration::from_millis(500);
/// A tail of this many snippets is committed by the writer that filled it
/// (what a search reads from memory stays small).
const TAIL_MAX: usize = 10_000;
/// The most threads one query's segments are searched on.
const SEARCH_THREADS: usize = 4;
/// An owner with at least this many snippets has a text query's segments
/// searched side by side. A smaller owner's query takes well under a
/// millisecond on one thread, of which waking the pool would be a good part.
const PARALLEL_MIN_SNIPPETS: u64 = 250_000;

#[derive(Clone, Copy)]
struct Fields {
    owner: Field,
    doc: Field,
    doc_hi: Field,
    doc_lo: Field,
    snip: Field,
    len: Field,
    dim: Field,
    vec: Field,
    meta: Field,
    meta_json: Field,
    text: Field,
    /// The snippet's sequence number (see [`super::ann`]).
    seq: Field,
    /// Owner and sequence number (16 hex digits): looks a snippet up by its
    /// number, and walks an owner's snippets staged after a number.
    oseq: Field,
}

fn schema() -> (Schema, Fields) {
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

/// What BM25 and the API need of one owner, beside the index.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct OwnerStats {
    pub(super) docs: u64,
    pub(super) snippets: u64,
    pub(super) tokens: u64,
    pub(super) vectors: u64,
    /// The dimension of the owner's vectors, while it has any.
    pub(super) dim: Option<usize>,
}

/// One doc's share of its owner's statistics.
#[derive(Clone, Default)]
struct DocShare {
    snippets: u64,
    tokens: u64,
    vectors: u64,
}

/// The length of [`owner_text`]: tenant and owner, 32 hex digits each.
const OWNER_TEXT_LEN: usize = 64;

/// The owner as indexed text, and the prefix of every term of its snippets.
fn owner_text(owner: OwnerKey) -> String {
    format!("{:032x}{:032x}", owner.tenant.as_u128(), owner.owner.as_u128())
}

fn parse_owner(text: &str) -> Option<OwnerKey> {
    let tenant = u128::from_str_radix(text.get(..32)?, 16).ok()?;
    let owner = u128::from_str_radix(text.get(32..OWNER_TEXT_LEN)?, 16).ok()?;
    Some(OwnerKey { tenant: Uuid::from_u128(tenant), owner: Uuid::from_u128(owner) })
}

/// A metadata pair as an indexed term: the key and a hash of the value's
/// canonical form (so values a filter finds equal share it).
fn meta_term_text(key: &str, value: &Value) -> String {
    let mut canonical = Vec::new();
    crate::store::filter::canonical(value, &mut canonical);
    let hash = Sha256::digest(&canonical);
    let hex: String = hash[..12].iter().map(|b| format!("{b:02x}")).collect();
    format!("{key}\u{0}{hex}")
}

/// A doc added since the last commit, which the searcher cannot see yet:
/// searched from memory.
struct TailDoc {
    id: Uuid,
    metadata: Option<Map<String, Value>>,
    snippets: Vec<TailSnippet>,
}

struct TailSnippet {
    /// The snippet's length as tantivy keeps it (BM25's document length).
    fieldnorm_id: u8,
    /// Analysed terms (without the owner prefix) and their frequencies, sorted.
    terms: Vec<(String, u32)>,
    /// The unit vector, when it is indexed.
    vector: Option<Box<[f32]>>,
}

impl TailSnippet {
    fn tf(&self, term: &str) -> Option<u32> {
        self.terms.binary_search_by(|(t, _)| t.as_str().cmp(term)).ok().map(|i| self.terms[i].1)
    }
}

/// What staging a change asks of the commit.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Effect {
    /// Nothing changed.
    None,
    /// A doc was added and is searched from the tail until a commit.
    Tail,
    /// Searches see the change only once committed: commit before answering.
    Commit,
}

fn closed() -> SearchError {
    SearchError::Index("the index is closed".into())
}

fn index_error(e: impl std::fmt::Display) -> SearchError {
    SearchError::Index(e.to_string())
}

struct Writing {
    /// `None` once closed.
    writer: Option<IndexWriter>,
    stats: HashMap<OwnerKey, OwnerStats>,
    /// Changes staged so far (committed ones included).
    staged: u64,
    /// What the changes staged since the last commit made of their docs
    /// (an empty share: removed), which the searcher cannot see yet.
    pending: HashMap<(OwnerKey, Uuid), DocShare>,
    /// Owners removed since the last commit.
    pending_removed: HashSet<OwnerKey>,
    /// Docs added since the last commit, by owner.
    tail: HashMap<OwnerKey, Vec<Arc<TailDoc>>>,
    tail_snippets: usize,
    /// When the oldest doc of the tail was added.
    tail_since: Option<Instant>,
    /// Why a background commit failed: later changes fail with it.
    broken: Option<String>,
    /// Set when the engine is dropped: the committer thread ends.
    stopping: bool,
    /// The sequence number of the next snippet staged.
    next_seq: u64,
    /// Whether `stats` were read from the index (by the committer thread,
    /// first thing: a big index takes a while, and the server answers
    /// everything but search meanwhile). Whoever needs them waits.
    loaded: bool,
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

/// A staged change's place in line: committed once [`Engine::commit_through`] it returns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ticket(u64);

/// The index of every owner. See the module's docs.
pub(super) struct Engine {
    shared: Arc<Shared>,
    /// Commits a tail that has waited [`COMMIT_AFTER`].
    committer: Option<std::thread::JoinHandle<()>>,
    /// Builds the vector graphs asked for.
    builder: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for Engine {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.writing.lock().stopping = true;
        self.shared.wake.notify_all();
        self.shared.graphs.stop();
        for thread in [self.committer.take(), self.builder.take()].into_iter().flatten() {
            let _ = thread.join();
        }
    }
}

/// The engine's state, shared with its committer thread.
pub(super) struct Shared {
    fields: Fields,
    /// [`PARALLEL_MIN_SNIPPETS`], but for tests.
    parallel_min_snippets: AtomicU64,
    /// Where its files are (`None`: in memory).
    dir: Option<std::path::PathBuf>,
    reader: IndexReader,
    writing: Mutex<Writing>,
    /// Held by whoever commits.
    committing: Mutex<()>,
    /// Changes committed and visible to searches.
    committed: AtomicU64,
    /// Wakes the committer thread (a tail begun, or the engine dropped).
    wake: Condvar,
    /// The vector graphs of owners with many vectors.
    graphs: ann::Graphs,
}

impl Engine {
    /// An index in memory.
    pub(super) fn in_memory() -> Result<Self, SearchError> {
        let (schema, _) = schema();
        Self::on(Index::create_in_ram(schema), None)
    }

    /// The index in `dir`, created when there is none. One that cannot be
    /// opened, is of another version or does not read back is replaced by
    /// an empty one; the second value then says why (its owner fills it).
    pub(super) fn open(dir: &Path) -> Result<(Self, Option<String>), SearchError> {
        let (schema, _) = schema();
        let version = std::fs::read_to_string(dir.join(VERSION_FILE));
        let mut why = match &version {
            Ok(v) if v.trim() == VERSION => String::new(),
            Ok(v) => format!("it was written by another version ({})", v.trim()),
            Err(_) => "there was none".to_string(),
        };
        if why.is_empty()
            && let Err(unsafe_state) = directory::check_state(dir)
        {
            why = unsafe_state;
        }
        if why.is_empty() {
            let opened = Unsynced::open(dir)
                .map_err(index_error)
                .and_then(|d| Index::open(d).map_err(index_error))
                .and_then(|index| {
                    if index.schema() != schema {
                        return Err(SearchError::Index("another schema".into()));
                    }
                    Self::on(index, Some(dir))
                });
            match opened {
                Ok(engine) => {
                    directory::mark_open(dir).map_err(index_error)?;
                    return Ok((engine, None));
                }
                Err(e) => why = format!("it could not be read ({e})"),
            }
        }
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(index_error(format!("cannot remove {}: {e}", dir.display()))),
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| index_error(format!("cannot create {}: {e}", dir.display())))?;
        let files = Unsynced::open(dir).map_err(index_error)?;
        let engine =
            Self::on(Index::create(files, schema, Default::default()).map_err(index_error)?, Some(dir))?;
        std::fs::write(dir.join(VERSION_FILE), VERSION)
            .map_err(|e| index_error(format!("cannot write in {}: {e}", dir.display())))?;
        directory::mark_open(dir).map_err(index_error)?;
        Ok((engine, Some(why)))
    }

    fn on(index: Index, dir: Option<&Path>) -> Result<Self, SearchError> {
        let (_, fields) = schema();
        let graphs = ann::Graphs::open(dir)?;
        let writer = index.writer_with_num_threads(1, WRITER_MEMORY).map_err(index_error)?;
        let reader =
            index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().map_err(index_error)?;
        let shared = Arc::new(Shared {
            fields,
            parallel_min_snippets: AtomicU64::new(PARALLEL_MIN_SNIPPETS),
            dir: dir.map(Path::to_path_buf),
            reader,
            writing: Mutex::new(Writing {
                writer: Some(writer),
                stats: HashMap::new(),
                staged: 0,
                pending: HashMap::new(),
                pending_removed: HashSet::new(),
                tail: HashMap::new(),
                tail_snippets: 0,
                tail_since: None,
                broken: None,
                stopping: false,
                loaded: false,
                next_seq: graphs.max_watermark + 1,
            }),
            committing: Mutex::new(()),
            committed: AtomicU64::new(0),
            wake: Condvar::new(),
            graphs,
        });
        let committer = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("search-commit".into())
                .spawn(move || shared.commit_aged_tails())
                .map_err(index_error)?
        };
        let builder = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("search-graphs".into())
                .spawn(move || shared.build_graphs())
                .map_err(index_error)?
        };
        Ok(Engine { shared, committer: Some(committer), builder: Some(builder) })
    }
}

impl Shared {
    /// The committer thread: commits the tail once it has waited
    /// [`COMMIT_AFTER`], until the engine is dropped.
    fn commit_aged_tails(&self) {
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
    /// time, until the engine is dropped.
    fn build_graphs(&self) {
        while let Some(owner) = self.graphs.next_job() {
            // A failure is kept by `graphs` (searches stay exact); nothing else to do.
            let _ = self.build_graph(owner);
        }
    }

    /// Builds the owner's graph from the committed index.
    pub(super) fn build_graph(&self, owner: OwnerKey) -> Result<(), SearchError> {
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

    /// Every owner's statistics, from the fast fields of the live snippets,
    /// and the highest sequence number of any snippet (removed ones too).
    fn load_stats(&self) -> Result<(HashMap<OwnerKey, OwnerStats>, u64), SearchError> {
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
    fn loaded(&self) -> parking_lot::MutexGuard<'_, Writing> {
        let mut w = self.writing.lock();
        while !w.loaded {
            self.wake.wait(&mut w);
        }
        w
    }

    /// The owner's vector graph: how many vectors it holds and how many
    /// searches it answered, if it has one.
    pub(super) fn graph_of(&self, owner: OwnerKey) -> Option<(u64, u64)> {
        self.graphs.current(owner).map(|g| (g.size, g.searches.load(Ordering::Relaxed)))
    }

    pub(super) fn on_graph_event(&self, report: Arc<dyn Fn(&ann::GraphEvent) + Send + Sync>) {
        self.graphs.on_event(report);
    }

    /// Owners with at least `n` vectors get a graph (see [`ann`]).
    pub(super) fn set_graph_min_vectors(&self, n: u64) {
        self.graphs.set_min_vectors(n);
    }

    /// Makes an owner of `n` snippets or more a big one, whose text queries
    /// search the segments side by side.
    #[cfg(test)]
    pub(super) fn set_parallel_min_snippets(&self, n: u64) {
        self.parallel_min_snippets.store(n, Ordering::Relaxed);
    }

    /// How many segments the committed index is in.
    #[cfg(test)]
    pub(super) fn segments(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }

    pub(super) fn stats(&self, owner: OwnerKey) -> OwnerStats {
        self.loaded().stats.get(&owner).copied().unwrap_or_default()
    }

    /// Every indexed doc, by owner.
    pub(super) fn doc_keys(&self) -> Result<HashSet<(OwnerKey, Uuid)>, SearchError> {
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
    pub(super) fn commit_through(&self, ticket: Ticket) -> Result<(), SearchError> {
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
    pub(super) fn flush(&self) -> Result<(), SearchError> {
        let staged = self.writing.lock().staged;
        self.commit_through(Ticket(staged))
    }

    /// Commits what is staged, stops writing (merges under way finish) and,
    /// on disk, makes every file durable and notes the index closed cleanly.
    /// Later changes fail.
    pub(super) fn close(&self) -> Result<(), SearchError> {
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
    pub(super) fn stage_changes(
        &self,
        changes: Vec<Change>,
    ) -> Result<(Vec<Result<(), SearchError>>, Ticket), SearchError> {
        self.stage(|w, searcher, f| {
            let mut effect = Effect::None;
            let mut outcomes = Vec::with_capacity(changes.len());
            for change in changes {
                let outcome = match change {
                    Change::Upsert { owner, doc, strict } => stage_upsert(w, searcher, f, owner, doc, strict),
                    Change::Remove { owner, doc } => stage_remove(w, searcher, f, owner, doc),
                    Change::RemoveOwner(owner) => stage_remove_owner(w, f, &self.graphs, owner),
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

    /// Best hits first; the query is valid and its limit above zero.
    pub(super) fn search(&self, owner: OwnerKey, q: &Query) -> Result<Vec<Hit>, SearchError> {
        // What the searcher sees and the tail beside it, as of one moment.
        let (st, searcher, tail) = {
            let w = self.loaded();
            if let Some(e) = &w.broken {
                return Err(SearchError::Index(e.clone()));
            }
            (
                w.stats.get(&owner).copied().unwrap_or_default(),
                self.reader.searcher(),
                w.tail.get(&owner).cloned().unwrap_or_default(),
            )
        };
        if st.snippets == 0 {
            return Ok(Vec::new());
        }
        let unit_query = match (&q.vector, q.mode) {
            (Some(v), Mode::Vector | Mode::Hybrid) => {
                if let Some(expected) = st.dim
                    && expected != v.len()
                {
                    return Err(SearchError::DimensionMismatch { expected, got: v.len() });
                }
                st.dim.map(|_| unit(v))
            }
            _ => None,
        };
        let s = Search {
            f: self.fields,
            searcher: &searcher,
            tail: &tail,
            owner,
            stats: st,
            filter: q.metadata_filter.as_ref(),
            parallel: st.snippets >= self.parallel_min_snippets.load(Ordering::Relaxed),
        };
        let text = q.text.as_deref().unwrap_or("");
        match q.mode {
            Mode::Text => s.text(text, q.limit),
            Mode::Vector => match unit_query {
                Some(u) => match self.graphs.graph(owner, st.vectors, u.len()).filter(|_| s.filter.is_none())
                {
                    Some(graph) => {
                        let (hits, stale) = s.vector_graph(&graph, &u, q.limit)?;
                        if stale {
                            self.graphs.rebuild(owner);
                        }
                        Ok(hits)
                    }
                    None => s.vector(&u, q.limit),
                },
                None => Ok(Vec::new()),
            },
            Mode::Hybrid => s.hybrid(text, unit_query.as_deref(), q.alpha, q.limit),
        }
    }
}

/// One change of the index.
pub(super) enum Change {
    /// Add the doc, replacing the owner's doc of the same id.
    Upsert { owner: OwnerKey, doc: PreparedDoc, strict: bool },
    /// Remove the doc, if it is there.
    Remove { owner: OwnerKey, doc: Uuid },
    /// Remove every doc of the owner.
    RemoveOwner(OwnerKey),
}

/// The `oseq` text of the owner's (`prefix`) snippet `seq`.
fn oseq_text(prefix: &str, seq: u64) -> String {
    format!("{prefix}{seq:016x}")
}

fn doc_term(f: Fields, prefix: &str, doc: Uuid) -> Term {
    Term::from_field_text(f.doc, &format!("{prefix}{:032x}", doc.as_u128()))
}

/// Stages an upsert (it always changes something): a doc the index cannot
/// hold yet goes to the tail; one it may hold is replaced at the next commit.
fn stage_upsert(
    w: &mut Writing,
    searcher: &Searcher,
    f: Fields,
    owner: OwnerKey,
    doc: PreparedDoc,
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
        // tokenizer gives back exactly these tokens. (A pre-tokenised text
        // is kept in the document as JSON, and was most of an add's cost.)
        let mut text = String::with_capacity(
            snippet.terms.iter().map(|(t, tf)| (prefix.len() + t.len() + 1) * *tf as usize).sum(),
        );
        for (term, tf) in &snippet.terms {
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
            terms: snippet.terms,
            vector,
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

/// Calls `each` with every live snippet of the searcher, its owner and its
/// segment's columns.
fn each_live_snippet(
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
fn share_of(searcher: &Searcher, f: Fields, doc_term: &Term) -> Result<DocShare, SearchError> {
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
fn read_vector(
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
struct Columns {
    doc_hi: tantivy::columnar::Column<u64>,
    doc_lo: tantivy::columnar::Column<u64>,
    snip: tantivy::columnar::Column<u64>,
    len: tantivy::columnar::Column<u64>,
    dim: tantivy::columnar::Column<u64>,
    seq: tantivy::columnar::Column<u64>,
}

impl Columns {
    fn open(seg: &SegmentReader) -> Result<Self, SearchError> {
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

    fn doc_id(&self, doc: DocId) -> Uuid {
        let hi = u128::from(self.doc_hi.first(doc).unwrap_or(0));
        let lo = u128::from(self.doc_lo.first(doc).unwrap_or(0));
        Uuid::from_u128(hi << 64 | lo)
    }

    fn key(&self, doc: DocId) -> (Uuid, usize) {
        (self.doc_id(doc), self.snip.first(doc).unwrap_or(0) as usize)
    }
}

/// BM25's statistics of one owner: its live snippets, their total length,
/// and how many of them hold a term (the terms are the owner's own).
struct OwnerBm25<'a> {
    searcher: &'a Searcher,
    tail: &'a [Arc<TailDoc>],
    stats: OwnerStats,
}

impl Bm25StatisticsProvider for OwnerBm25<'_> {
    fn total_num_tokens(&self, _field: Field) -> tantivy::Result<u64> {
        Ok(self.stats.tokens)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(self.stats.snippets)
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let mut df = 0u64;
        for seg in self.searcher.segment_readers() {
            let inverted = seg.inverted_index(term.field())?;
            let Some(info) = inverted.get_term_info(term)? else { continue };
            match seg.alive_bitset() {
                None => df += u64::from(info.doc_freq),
                Some(alive) => {
                    let mut postings =
                        inverted.read_postings_from_terminfo(&info, IndexRecordOption::Basic)?;
                    let mut doc = postings.doc();
                    while doc != TERMINATED {
                        df += u64::from(alive.is_alive(doc));
                        doc = postings.advance();
                    }
                }
            }
        }
        if !self.tail.is_empty()
            && let Some(t) = term.value().as_str().and_then(|text| text.get(OWNER_TEXT_LEN..))
        {
            for doc in self.tail {
                df += doc.snippets.iter().filter(|s| s.tf(t).is_some()).count() as u64;
            }
        }
        Ok(df.min(self.stats.snippets))
    }
}

/// Every match with its score: (segment, doc, score).
struct Every;

struct EverySegment {
    segment: u32,
    hits: Vec<(u32, DocId, Score)>,
}

impl Collector for Every {
    type Fruit = Vec<(u32, DocId, Score)>;
    type Child = EverySegment;

    fn for_segment(&self, segment: u32, _: &SegmentReader) -> tantivy::Result<EverySegment> {
        Ok(EverySegment { segment, hits: Vec::new() })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(u32, DocId, Score)>>) -> tantivy::Result<Self::Fruit> {
        Ok(fruits.concat())
    }
}

impl SegmentCollector for EverySegment {
    type Fruit = Vec<(u32, DocId, Score)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        self.hits.push((self.segment, doc, score));
    }

    fn harvest(self) -> Self::Fruit {
        self.hits
    }
}

/// The threads a big owner's text query searches its segments on, side by
/// side: one per core, at most [`SEARCH_THREADS`]; `None` on one core (or if
/// the threads cannot be started: searches then run on the caller's thread).
fn parallel_search() -> Option<&'static Executor> {
    static POOL: std::sync::OnceLock<Option<Executor>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(SEARCH_THREADS);
        (threads > 1).then(|| Executor::multi_thread(threads, "search-query-").ok()).flatten()
    })
    .as_ref()
}

/// One search of one owner.
struct Search<'a> {
    f: Fields,
    searcher: &'a Searcher,
    /// The owner's docs added since the last commit.
    tail: &'a [Arc<TailDoc>],
    owner: OwnerKey,
    stats: OwnerStats,
    filter: Option<&'a Map<String, Value>>,
    /// Whether a text query searches the segments side by side (a big owner).
    parallel: bool,
}

impl Search<'_> {
    fn owner_term(&self) -> Term {
        Term::from_field_text(self.f.owner, &owner_text(self.owner))
    }

    /// The query's terms, as this owner's, as a query scoring any of them.
    fn text_query(&self, text: &str) -> Option<Box<dyn TQuery>> {
        let prefix = owner_text(self.owner);
        let mut clauses: Vec<(Occur, Box<dyn TQuery>)> = query_terms(text)
            .into_iter()
            .map(|t| {
                let term = Term::from_field_text(self.f.text, &format!("{prefix}{t}"));
                (
                    Occur::Should,
                    Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs)) as Box<dyn TQuery>,
                )
            })
            .collect();
        match clauses.len() {
            0 => None,
            1 => clauses.pop().map(|(_, q)| q),
            _ => Some(Box::new(BooleanQuery::new(clauses))),
        }
    }

    /// The filter as a query matching (with score 0) the owner's snippets
    /// whose metadata has every pair; `None` without a filter.
    fn filter_query(&self) -> Option<Box<dyn TQuery>> {
        let filter = self.filter.filter(|m| !m.is_empty())?;
        let mut clauses: Vec<(Occur, Box<dyn TQuery>)> =
            vec![(Occur::Must, Box::new(TermQuery::new(self.owner_term(), IndexRecordOption::Basic)))];
        for (k, v) in filter {
            let term = Term::from_field_text(self.f.meta, &meta_term_text(k, v));
            clauses.push((Occur::Must, Box::new(TermQuery::new(term, IndexRecordOption::Basic))));
        }
        Some(Box::new(ConstScoreQuery::new(Box::new(BooleanQuery::new(clauses)), 0.0)))
    }

    fn bm25(&self) -> OwnerBm25<'_> {
        OwnerBm25 { searcher: self.searcher, tail: self.tail, stats: self.stats }
    }

    /// Whether a doc of the tail passes the filter.
    fn tail_passes(&self, doc: &TailDoc) -> bool {
        self.filter.filter(|m| !m.is_empty()).is_none_or(|f| metadata_matches(f, doc.metadata.as_ref()))
    }

    /// Every snippet of the tail (passing the filter) holding a term of the
    /// query, scored as tantivy scores the committed ones: the same BM25
    /// weights over the same statistics, summed over the terms.
    fn tail_text(&self, text: &str, mut each: impl FnMut((Uuid, usize), Score)) -> Result<(), SearchError> {
        if self.tail.is_empty() {
            return Ok(());
        }
        let prefix = owner_text(self.owner);
        let bm25 = self.bm25();
        let weights = query_terms(text)
            .into_iter()
            .map(|t| {
                let term = Term::from_field_text(self.f.text, &format!("{prefix}{t}"));
                Bm25Weight::for_terms(&bm25, &[term]).map(|w| (t, w))
            })
            .collect::<tantivy::Result<Vec<_>>>()
            .map_err(index_error)?;
        for doc in self.tail.iter().filter(|d| self.tail_passes(d)) {
            for (i, s) in doc.snippets.iter().enumerate() {
                let mut score: Option<Score> = None;
                for (t, w) in &weights {
                    if let Some(tf) = s.tf(t) {
                        *score.get_or_insert(0.0) += w.score(s.fieldnorm_id, tf);
                    }
                }
                if let Some(score) = score {
                    each((doc.id, i), score);
                }
            }
        }
        Ok(())
    }

    /// Whether the snippet's doc passes the filter, by the one definition of
    /// a match (the indexed terms only narrow the candidates). Cached per doc.
    fn passes(
        &self,
        addr: DocAddress,
        id: Uuid,
        cache: &mut HashMap<Uuid, bool>,
    ) -> Result<bool, SearchError> {
        let Some(filter) = self.filter.filter(|m| !m.is_empty()) else { return Ok(true) };
        if let Some(v) = cache.get(&id) {
            return Ok(*v);
        }
        let doc: TantivyDocument = self.searcher.doc(addr).map_err(index_error)?;
        let metadata: Option<Map<String, Value>> =
            match doc.get_first(self.f.meta_json).and_then(|v| v.as_bytes()) {
                Some(json) => Some(serde_json::from_slice(json).map_err(index_error)?),
                None => None,
            };
        let verdict = metadata_matches(filter, metadata.as_ref());
        cache.insert(id, verdict);
        Ok(verdict)
    }

    /// The columns of `segment`, opened once per search.
    fn columns<'c>(
        &self,
        cache: &'c mut HashMap<u32, Columns>,
        segment: u32,
    ) -> Result<&'c Columns, SearchError> {
        Ok(match cache.entry(segment) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Columns::open(self.searcher.segment_reader(segment))?)
            }
        })
    }

    fn text(&self, text: &str, limit: usize) -> Result<Vec<Hit>, SearchError> {
        let Some(query) = self.text_query(text) else { return Ok(Vec::new()) };
        let query: Box<dyn TQuery> = match self.filter_query() {
            Some(filter) => Box::new(BooleanQuery::new(vec![(Occur::Must, query), (Occur::Must, filter)])),
            None => query,
        };
        // Some more than asked, so that equal scores at the cut are ordered as everywhere.
        let fetch = limit.saturating_add(limit.max(16));
        let bm25 = self.bm25();
        let scoring = EnableScoring::enabled_from_statistics_provider(&bm25, self.searcher);
        // The pool is asked for (and so started) only by a big owner's query.
        let pool =
            (self.parallel && self.searcher.segment_readers().len() > 1).then(parallel_search).flatten();
        let executor = pool.unwrap_or(&Executor::SingleThread);
        let top = self
            .searcher
            .search_with_executor(&*query, &TopDocs::with_limit(fetch).order_by_score(), executor, scoring)
            .map_err(index_error)?;
        let mut ranked = TopK::new(limit);
        let mut cache = HashMap::new();
        let mut columns: HashMap<u32, Columns> = HashMap::new();
        for (score, addr) in top {
            let (doc_id, snippet_index) = self.columns(&mut columns, addr.segment_ord)?.key(addr.doc_id);
            if !self.passes(addr, doc_id, &mut cache)? {
                continue;
            }
            ranked.push(Ranked {
                primary: canonical(f64::from(score)),
                secondary: 0.0,
                doc_id,
                snippet_index,
            });
        }
        self.tail_text(text, |(doc_id, snippet_index), score| {
            ranked.push(Ranked {
                primary: canonical(f64::from(score)),
                secondary: 0.0,
                doc_id,
                snippet_index,
            });
        })?;
        Ok(ranked.into_hits())
    }

    /// The owner's snippets passing the filter, when there is one.
    fn allowed(&self) -> Result<Option<HashSet<DocAddress>>, SearchError> {
        let Some(filter) = self.filter_query() else { return Ok(None) };
        let candidates = self.searcher.search(&*filter, &DocSetCollector).map_err(index_error)?;
        let mut cache = HashMap::new();
        let mut columns = HashMap::new();
        let mut allowed = HashSet::with_capacity(candidates.len());
        for addr in candidates {
            let (id, _) = self.columns(&mut columns, addr.segment_ord)?.key(addr.doc_id);
            if self.passes(addr, id, &mut cache)? {
                allowed.insert(addr);
            }
        }
        Ok(Some(allowed))
    }

    /// Cosine similarity of every vector of the owner (that passes the filter).
    fn for_each_vector(
        &self,
        unit_query: &[f32],
        allowed: Option<&HashSet<DocAddress>>,
        mut each: impl FnMut((Uuid, usize), f64),
    ) -> Result<(), SearchError> {
        let owner_term = self.owner_term();
        let mut vector: Vec<f32> = Vec::new();
        let mut found: Vec<(u64, DocId)> = Vec::new();
        let mut ords: Vec<u64> = Vec::new();
        for (ord, seg) in self.searcher.segment_readers().iter().enumerate() {
            let inverted = seg.inverted_index(self.f.owner).map_err(index_error)?;
            let Some(mut postings) =
                inverted.read_postings(&owner_term, IndexRecordOption::Basic).map_err(index_error)?
            else {
                continue;
            };
            let cols = Columns::open(seg)?;
            let Some(vectors) = seg.fast_fields().bytes("vec").map_err(index_error)? else { continue };
            let alive = seg.alive_bitset();
            // The vectors' ords first, then their bytes in ord order: one pass
            // over the column's dictionary instead of a lookup per vector.
            found.clear();
            let mut doc = postings.doc();
            while doc != TERMINATED {
                let addr = DocAddress::new(ord as u32, doc);
                if alive.is_none_or(|a| a.is_alive(doc))
                    && cols.dim.first(doc).unwrap_or(0) as usize == unit_query.len()
                    && allowed.is_none_or(|a| a.contains(&addr))
                    && let Some(vord) = vectors.term_ords(doc).next()
                {
                    found.push((vord, doc));
                }
                doc = postings.advance();
            }
            found.sort_unstable();
            ords.clear();
            ords.extend(found.iter().map(|(vord, _)| *vord));
            let mut docs = found.iter().map(|(_, doc)| *doc);
            vectors
                .dictionary()
                .sorted_ords_to_term_cb(&ords, |bytes| {
                    vector.clear();
                    vector
                        .extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
                    if let Some(doc) = docs.next() {
                        each(cols.key(doc), canonical(dot(unit_query, &vector)));
                    }
                })
                .map_err(index_error)?;
        }
        for doc in self.tail.iter().filter(|d| self.tail_passes(d)) {
            for (i, s) in doc.snippets.iter().enumerate() {
                if let Some(v) = s.vector.as_deref().filter(|v| v.len() == unit_query.len()) {
                    each((doc.id, i), canonical(dot(unit_query, v)));
                }
            }
        }
        Ok(())
    }

    /// Vector search with the owner's graph (see [`ann`]): its candidates
    /// still in the index and every vector staged after it, scored exactly.
    /// The second value says the graph is due to be built again (a quarter
    /// of its candidates were gone, or its tail outgrew a quarter of it).
    fn vector_graph(
        &self,
        graph: &Graph,
        unit_query: &[f32],
        limit: usize,
    ) -> Result<(Vec<Hit>, bool), SearchError> {
        let asked = ann::candidates(limit).min(graph.size as usize);
        let keys = graph.nearest(unit_query, asked)?;
        let prefix = owner_text(self.owner);
        let mut top = TopK::new(limit);
        let mut bytes = Vec::new();
        let mut vector: Vec<f32> = Vec::new();
        let mut found = 0usize;
        let mut tail = 0u64;
        let mut score = |cols: &Columns, vectors: &tantivy::columnar::BytesColumn, doc: DocId| {
            let Some(vord) = vectors.term_ords(doc).next() else { return Ok::<_, SearchError>(()) };
            if cols.dim.first(doc).unwrap_or(0) as usize != unit_query.len() {
                return Ok(());
            }
            read_vector(vectors, vord, &mut bytes, &mut vector)?;
            let cosine = canonical(dot(unit_query, &vector));
            if top.admits(cosine) {
                let (doc_id, snippet_index) = cols.key(doc);
                top.push(Ranked { primary: cosine, secondary: 0.0, doc_id, snippet_index });
            }
            Ok(())
        };
        let first_after = oseq_text(&prefix, graph.watermark.saturating_add(1));
        let past_owner = oseq_text(&prefix, u64::MAX);
        for seg in self.searcher.segment_readers() {
            let Some(vectors) = seg.fast_fields().bytes("vec").map_err(index_error)? else { continue };
            let cols = Columns::open(seg)?;
            let alive = seg.alive_bitset();
            let inverted = seg.inverted_index(self.f.oseq).map_err(index_error)?;
            let live = |postings: &mut tantivy::postings::SegmentPostings,
                        each: &mut dyn FnMut(DocId) -> Result<(), SearchError>| {
                let mut doc = postings.doc();
                while doc != TERMINATED {
                    if alive.is_none_or(|a| a.is_alive(doc)) {
                        each(doc)?;
                    }
                    doc = postings.advance();
                }
                Ok::<_, SearchError>(())
            };
            // The graph's candidates still here.
            for &key in &keys {
                let term = Term::from_field_text(self.f.oseq, &oseq_text(&prefix, key));
                if let Some(mut postings) =
                    inverted.read_postings(&term, IndexRecordOption::Basic).map_err(index_error)?
                {
                    live(&mut postings, &mut |doc| {
                        found += 1;
                        score(&cols, &vectors, doc)
                    })?;
                }
            }
            // Everything staged after the graph.
            let mut range = inverted
                .terms()
                .range()
                .ge(first_after.as_bytes())
                .le(past_owner.as_bytes())
                .into_stream()
                .map_err(index_error)?;
            while range.advance() {
                let mut postings = inverted
                    .read_postings_from_terminfo(range.value(), IndexRecordOption::Basic)
                    .map_err(index_error)?;
                live(&mut postings, &mut |doc| {
                    tail += 1;
                    score(&cols, &vectors, doc)
                })?;
            }
        }
        for doc in self.tail.iter() {
            for (i, s) in doc.snippets.iter().enumerate() {
                if let Some(v) = s.vector.as_deref().filter(|v| v.len() == unit_query.len()) {
                    top.push(Ranked {
                        primary: canonical(dot(unit_query, v)),
                        secondary: 0.0,
                        doc_id: doc.id,
                        snippet_index: i,
                    });
                }
            }
        }
        let stale = found * 4 < keys.len() * 3 || tail * 4 > graph.size;
        Ok((top.into_hits(), stale))
    }

    fn vector(&self, unit_query: &[f32], limit: usize) -> Result<Vec<Hit>, SearchError> {
        let allowed = self.allowed()?;
        let mut top = TopK::new(limit);
        self.for_each_vector(unit_query, allowed.as_ref(), |(doc_id, snippet_index), cosine| {
            if top.admits(cosine) {
                top.push(Ranked { primary: cosine, secondary: 0.0, doc_id, snippet_index });
            }
        })?;
        Ok(top.into_hits())
    }

    /// Text and vector sides over every candidate, fused (see [`fuse`]).
    fn hybrid(
        &self,
        text: &str,
        unit_query: Option<&[f32]>,
        alpha: f64,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let allowed = self.allowed()?;
        let mut text_hits = Vec::new();
        if let Some(query) = self.text_query(text) {
            let every = self
                .searcher
                .search_with_statistics_provider(&*query, &Every, &self.bm25())
                .map_err(index_error)?;
            let mut columns: HashMap<u32, Columns> = HashMap::new();
            for (segment, doc, score) in every {
                if allowed.as_ref().is_some_and(|a| !a.contains(&DocAddress::new(segment, doc))) {
                    continue;
                }
                text_hits.push((self.columns(&mut columns, segment)?.key(doc), canonical(f64::from(score))));
            }
            self.tail_text(text, |key, score| text_hits.push((key, canonical(f64::from(score)))))?;
        }
        let mut vector_hits = Vec::new();
        if let Some(u) = unit_query {
            self.for_each_vector(u, allowed.as_ref(), |key, cosine| vector_hits.push((key, cosine)))?;
        }
        text_hits.sort_unstable_by_key(|a| a.0);
        vector_hits.sort_unstable_by_key(|a| a.0);
        Ok(fuse(&text_hits, &vector_hits, alpha, limit, |key| key))
    }
}
