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
//! the tail is [`writer::COMMIT_AFTER`] old (a background thread), when it holds
//! [`writer::TAIL_MAX`] snippets (the writer that filled it commits), or when a
//! change is not a plain add (a removal or a replacement is committed, and
//! the reader reloaded, before it returns). Either way a change is
//! searchable once it answered. Concurrent writers share commits: each
//! stages its change, then the first to take the commit lock commits for
//! everyone staged so far. A tail lost with its process is not lost to
//! search: the store is the truth, and at start the index is brought in
//! step with it (see [`super`]).
//!
//! Its parts: [`schema`] (the fields, and how owners, docs and metadata
//! become terms), [`writer`] (staging, commits and the two background
//! threads), [`reader`] (statistics and snippets read back from the
//! segments) and [`query`] (text, vector and hybrid searches of one owner).

mod query;
mod reader;
mod schema;
mod writer;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use tantivy::{Index, IndexReader, ReloadPolicy};

use self::query::PARALLEL_MIN_SNIPPETS;
use self::schema::{VERSION, VERSION_FILE, schema};
pub use self::writer::Ticket;
use self::writer::{WRITER_MEMORY, Writing};
use super::ann;
use super::directory::{self, Unsynced};
use super::{OwnerKey, SearchError};

/// What a write of an index closed by [`Shared::close`] fails with.
fn closed() -> SearchError {
    SearchError::Index("the index is closed".into())
}

/// An error of tantivy or of the index's files.
fn index_error(e: impl std::fmt::Display) -> SearchError {
    SearchError::Index(e.to_string())
}

/// The index of every owner. See the module's docs.
pub(in crate::search) struct TantivyIndex {
    shared: Arc<Shared>,
    /// Commits a tail that has waited [`writer::COMMIT_AFTER`].
    committer: Option<std::thread::JoinHandle<()>>,
    /// Builds the vector graphs asked for.
    builder: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for TantivyIndex {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for TantivyIndex {
    fn drop(&mut self) {
        self.shared.writing.lock().stopping = true;
        self.shared.wake.notify_all();
        self.shared.graphs.stop();
        for thread in [self.committer.take(), self.builder.take()].into_iter().flatten() {
            let _ = thread.join();
        }
    }
}

/// The index's state, shared with its committer and graph builder threads.
pub(in crate::search) struct Shared {
    fields: schema::Fields,
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
    /// Wakes the committer thread (a tail begun, or the index dropped).
    wake: Condvar,
    /// The vector graphs of owners with many vectors.
    graphs: ann::Graphs,
}

impl TantivyIndex {
    /// An index in memory.
    pub(in crate::search) fn in_memory() -> Result<Self, SearchError> {
        let (schema, _) = schema();
        Self::on(Index::create_in_ram(schema), None)
    }

    /// The index in `dir`, created when there is none. One that cannot be
    /// opened, is of another version or does not read back is replaced by
    /// an empty one; the second value then says why (its owner fills it).
    pub(in crate::search) fn open(dir: &Path) -> Result<(Self, Option<String>), SearchError> {
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
                Ok(index) => {
                    directory::mark_open(dir).map_err(index_error)?;
                    return Ok((index, None));
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
        let index =
            Self::on(Index::create(files, schema, Default::default()).map_err(index_error)?, Some(dir))?;
        std::fs::write(dir.join(VERSION_FILE), VERSION)
            .map_err(|e| index_error(format!("cannot write in {}: {e}", dir.display())))?;
        directory::mark_open(dir).map_err(index_error)?;
        Ok((index, Some(why)))
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
        Ok(TantivyIndex { shared, committer: Some(committer), builder: Some(builder) })
    }
}

impl Shared {
    /// The owner's vector graph: how many vectors it holds and how many
    /// searches it answered, if it has one.
    pub(in crate::search) fn graph_of(&self, owner: OwnerKey) -> Option<(u64, u64)> {
        self.graphs.current(owner).map(|g| (g.size, g.searches.load(Ordering::Relaxed)))
    }

    pub(in crate::search) fn on_graph_event(&self, report: Arc<dyn Fn(&ann::GraphEvent) + Send + Sync>) {
        self.graphs.on_event(report);
    }

    /// Owners with at least `n` vectors get a graph (see [`ann`]).
    pub(in crate::search) fn set_graph_min_vectors(&self, n: u64) {
        self.graphs.set_min_vectors(n);
    }

    /// Makes an owner of `n` snippets or more a big one, whose text queries
    /// search the segments side by side.
    #[cfg(test)]
    pub(in crate::search) fn set_parallel_min_snippets(&self, n: u64) {
        self.parallel_min_snippets.store(n, Ordering::Relaxed);
    }

    /// How many segments the committed index is in.
    #[cfg(test)]
    pub(in crate::search) fn segments(&self) -> usize {
        self.reader.searcher().segment_readers().len()
    }
}
