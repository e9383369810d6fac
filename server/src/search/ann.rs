//! Approximate nearest neighbours for owners with many vectors: one HNSW
//! graph per owner (usearch), built in the background from the index's
//! committed snippets, saved to one file and memory-mapped from then on
//! (opened, never rebuilt, at start).
//!
//! The graph is a way to find candidates, never the truth. Each snippet of
//! the index carries a sequence number (`seq`, growing with every snippet
//! staged, never reused), which is its key in the graph; a graph covers its
//! owner's vectors up to its *watermark*, the highest `seq` it holds. A
//! vector search of an owner with a graph so:
//!
//! 1. asks the graph for more candidates than it needs and looks each key up
//!    in the index: a snippet removed or replaced since is simply not found
//!    (its `seq` is gone), the others are scored by exact cosine over the
//!    vector the index holds;
//! 2. scores exactly every vector of the owner staged after the watermark
//!    (committed ones by a range of `seq` over the owner's terms, the
//!    uncommitted tail in memory);
//! 3. keeps the best. Owners below [`DEFAULT_MIN_VECTORS`] (and filtered
//!    or hybrid searches) are exact throughout.
//!
//! A graph whose tail or whose removed share has grown past a quarter of it
//! is rebuilt in the background, searches using the old one meanwhile. A
//! graph file is written whole, synced, then renamed into place (its name
//! holds its owner and watermark), so a crash leaves the old one or the new
//! one. The files live in the index's directory (`ann/`), so an index that
//! is rebuilt from the store loses its graphs with it.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::{OwnerKey, SearchError};

/// An owner with fewer vectors than this is searched exactly (a scan of
/// its vectors is then quick, and a graph would not pay for itself).
pub(super) const DEFAULT_MIN_VECTORS: u64 = 20_000;

/// Where the graphs are, inside the index's directory.
const ANN_DIR: &str = "ann";
const SUFFIX: &str = ".usearch";
/// How long after a failed build a rebuild may be tried again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// The candidates asked of a graph for `limit` hits.
pub(super) fn candidates(limit: usize) -> usize {
    limit.saturating_mul(2).max(limit.saturating_add(40))
}

/// One owner's graph, memory-mapped.
pub(super) struct Graph {
    index: Index,
    /// The highest `seq` the graph holds.
    pub(super) watermark: u64,
    /// How many vectors it holds.
    pub(super) size: u64,
    pub(super) dim: usize,
    /// A viewed usearch index searches from one thread at a time here (its
    /// per-thread search contexts are sized when it is built).
    searching: Mutex<()>,
    /// Searches answered (what tests and operators can see of its use).
    pub(super) searches: AtomicU64,
}

impl Graph {
    /// The keys of the graph's `count` nearest vectors to the unit `query`.
    pub(super) fn nearest(&self, query: &[f32], count: usize) -> Result<Vec<u64>, SearchError> {
        let _one = self.searching.lock();
        self.searches.fetch_add(1, Ordering::Relaxed);
        let found = self.index.search(query, count).map_err(|e| SearchError::Index(e.to_string()))?;
        Ok(found.keys)
    }
}

#[derive(Default)]
struct Slot {
    graph: Option<Arc<Graph>>,
    /// Queued or being built.
    building: bool,
    /// The last build failed (the log says why): with how many vectors, and when. A
    /// first build is tried again once the owner has grown by a quarter, a
    /// rebuild after [`RETRY_AFTER`].
    failed: Option<(u64, std::time::Instant)>,
}

/// What the builder reports (for the server's log).
#[derive(Clone, Debug)]
pub enum GraphEvent {
    Built {
        owner: OwnerKey,
        vectors: u64,
        seconds: f64,
    },
    /// The owner's searches stay exact; tried again once it has grown by a quarter.
    Failed {
        owner: OwnerKey,
        error: String,
    },
}

type Report = Arc<dyn Fn(&GraphEvent) + Send + Sync>;

#[derive(Default)]
struct Jobs {
    queue: VecDeque<OwnerKey>,
    stopping: bool,
}

/// Every owner's graph. See the module's docs.
pub(super) struct Graphs {
    /// `None`: the index is in memory, and so is every search (exact).
    dir: Option<PathBuf>,
    min_vectors: AtomicU64,
    slots: Mutex<HashMap<OwnerKey, Slot>>,
    jobs: Mutex<Jobs>,
    wake: Condvar,
    /// The highest watermark of the graphs found at open: sequence numbers
    /// continue above it.
    pub(super) max_watermark: u64,
    report: Mutex<Option<Report>>,
}

/// `owner-watermark.usearch`, hex.
fn file_name(owner: OwnerKey, watermark: u64) -> String {
    format!("{:032x}{:032x}-{watermark:016x}{SUFFIX}", owner.tenant.as_u128(), owner.owner.as_u128())
}

fn parse_name(name: &str) -> Option<(OwnerKey, u64)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (owner, watermark) = stem.split_once('-')?;
    if owner.len() != 64 || watermark.len() != 16 {
        return None;
    }
    let tenant = u128::from_str_radix(&owner[..32], 16).ok()?;
    let id = u128::from_str_radix(&owner[32..], 16).ok()?;
    let watermark = u64::from_str_radix(watermark, 16).ok()?;
    Some((OwnerKey { tenant: uuid::Uuid::from_u128(tenant), owner: uuid::Uuid::from_u128(id) }, watermark))
}

fn graph_error(e: impl std::fmt::Display) -> SearchError {
    SearchError::Index(format!("vector graph: {e}"))
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> SearchError {
    SearchError::Index(format!("{what} {}: {e}", path.display()))
}

impl Graphs {
    /// The graphs kept in `index_dir` (none in memory). Files of the same
    /// owner but an older watermark, and unfinished ones, are removed; a
    /// graph that cannot be opened is removed (and built again when needed).
    pub(super) fn open(index_dir: Option<&Path>) -> Result<Self, SearchError> {
        let mut slots: HashMap<OwnerKey, Slot> = HashMap::new();
        let mut max_watermark = 0;
        let dir = index_dir.map(|d| d.join(ANN_DIR));
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir).map_err(|e| io_error("cannot create", dir, e))?;
            let mut newest: HashMap<OwnerKey, (u64, PathBuf)> = HashMap::new();
            let entries = std::fs::read_dir(dir).map_err(|e| io_error("cannot read", dir, e))?;
            for entry in entries {
                let path = entry.map_err(|e| io_error("cannot read", dir, e))?.path();
                let parsed = path.file_name().and_then(|n| n.to_str()).and_then(parse_name);
                let Some((owner, watermark)) = parsed else {
                    let _ = std::fs::remove_file(&path);
                    continue;
                };
                max_watermark = max_watermark.max(watermark);
                match newest.get(&owner) {
                    Some((w, _)) if *w >= watermark => {
                        let _ = std::fs::remove_file(&path);
                    }
                    _ => {
                        if let Some((_, older)) = newest.insert(owner, (watermark, path)) {
                            let _ = std::fs::remove_file(older);
                        }
                    }
                }
            }
            for (owner, (watermark, path)) in newest {
                match view(&path, watermark) {
                    Ok(graph) => {
                        slots.insert(owner, Slot { graph: Some(Arc::new(graph)), ..Slot::default() });
                    }
                    Err(_) => {
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
        }
        Ok(Graphs {
            dir,
            min_vectors: AtomicU64::new(DEFAULT_MIN_VECTORS),
            slots: Mutex::new(slots),
            jobs: Mutex::new(Jobs::default()),
            wake: Condvar::new(),
            max_watermark,
            report: Mutex::new(None),
        })
    }

    /// The owner's graph as it is (no build asked for).
    pub(super) fn current(&self, owner: OwnerKey) -> Option<Arc<Graph>> {
        self.slots.lock().get(&owner).and_then(|s| s.graph.clone())
    }

    pub(super) fn on_event(&self, report: Report) {
        *self.report.lock() = Some(report);
    }

    pub(super) fn set_min_vectors(&self, n: u64) {
        self.min_vectors.store(n.max(1), Ordering::Relaxed);
    }

    /// The owner's graph, when it has one worth asking for a search of
    /// `vectors` vectors of `dim`; asks for a (re)build when there should
    /// be one.
    pub(super) fn graph(&self, owner: OwnerKey, vectors: u64, dim: usize) -> Option<Arc<Graph>> {
        self.dir.as_ref()?;
        let min = self.min_vectors.load(Ordering::Relaxed);
        let mut slots = self.slots.lock();
        let graph = slots.get(&owner).and_then(|s| s.graph.clone()).filter(|g| g.dim == dim);
        if graph.is_some() || vectors < min {
            return graph;
        }
        let slot = slots.entry(owner).or_default();
        // A failed build is tried again once the owner has grown by a quarter.
        let failed = slot.failed.as_ref().is_some_and(|(at, _)| vectors <= at.saturating_add(at / 4));
        if !slot.building && !failed {
            slot.building = true;
            drop(slots);
            self.queue(owner);
        }
        None
    }

    /// Asks for the owner's graph to be built again (its tail or its removed
    /// share has grown); a no-op while one is under way.
    pub(super) fn rebuild(&self, owner: OwnerKey) {
        let mut slots = self.slots.lock();
        let slot = slots.entry(owner).or_default();
        if slot.building || slot.failed.as_ref().is_some_and(|(_, when)| when.elapsed() < RETRY_AFTER) {
            return;
        }
        slot.building = true;
        drop(slots);
        self.queue(owner);
    }

    fn queue(&self, owner: OwnerKey) {
        let mut jobs = self.jobs.lock();
        jobs.queue.push_back(owner);
        self.wake.notify_all();
    }

    /// The next owner whose graph to build (`None`: stopping).
    pub(super) fn next_job(&self) -> Option<OwnerKey> {
        let mut jobs = self.jobs.lock();
        loop {
            if jobs.stopping {
                return None;
            }
            if let Some(owner) = jobs.queue.pop_front() {
                return Some(owner);
            }
            self.wake.wait(&mut jobs);
        }
    }

    pub(super) fn stopping(&self) -> bool {
        self.jobs.lock().stopping
    }

    pub(super) fn stop(&self) {
        self.jobs.lock().stopping = true;
        self.wake.notify_all();
    }

    /// Forgets the owner's graph (every doc of the owner was removed).
    pub(super) fn remove_owner(&self, owner: OwnerKey) {
        let old = self.slots.lock().get_mut(&owner).and_then(|s| s.graph.take());
        if let (Some(dir), Some(old)) = (&self.dir, old) {
            let _ = std::fs::remove_file(dir.join(file_name(owner, old.watermark)));
        }
    }

    /// Builds a graph of `vectors` (their `seq` and unit vector, as `fill`
    /// gives them) for the owner, saves it, and puts it in place. `Ok(None)`:
    /// stopped before the end.
    pub(super) fn build(
        &self,
        owner: OwnerKey,
        dim: usize,
        expected: u64,
        fill: impl FnOnce(&mut dyn FnMut(u64, &[f32]) -> Result<bool, SearchError>) -> Result<(), SearchError>,
    ) -> Result<Option<Arc<Graph>>, SearchError> {
        let started = std::time::Instant::now();
        let outcome = (|| -> Result<Option<Arc<Graph>>, SearchError> {
            let Some(dir) = &self.dir else { return Ok(None) };
            if dim == 0 {
                return Ok(None);
            }
            let index = Index::new(&options(dim)).map_err(graph_error)?;
            index.reserve_capacity_and_threads(expected.max(16) as usize, 1).map_err(graph_error)?;
            let mut watermark = 0;
            let mut size = 0u64;
            let mut stopped = false;
            fill(&mut |seq, vector| {
                if size.is_multiple_of(1024) && self.stopping() {
                    stopped = true;
                    return Ok(false);
                }
                if index.size() == index.capacity() {
                    index.reserve(index.capacity() * 2).map_err(graph_error)?;
                }
                index.add(seq, vector).map_err(graph_error)?;
                watermark = watermark.max(seq);
                size += 1;
                Ok(true)
            })?;
            if stopped || size == 0 {
                return Ok(None);
            }
            let path = dir.join(file_name(owner, watermark));
            // Unique: a build asked for directly may run beside the builder thread's.
            let nonce =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let tmp = dir.join(format!("{}.{}.tmp", file_name(owner, watermark), nonce.as_nanos()));
            let tmp_text = tmp.to_str().ok_or_else(|| io_error("not UTF-8:", &tmp, ""))?;
            index.save(tmp_text).map_err(graph_error)?;
            drop(index);
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error("cannot sync", &tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| io_error("cannot rename", &tmp, e))?;
            std::fs::File::open(dir)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_error("cannot sync", dir, e))?;
            Ok(Some(Arc::new(view(&path, watermark)?)))
        })();
        let event = match &outcome {
            Ok(Some(graph)) => Some(GraphEvent::Built {
                owner,
                vectors: graph.size,
                seconds: started.elapsed().as_secs_f64(),
            }),
            Ok(None) => None,
            Err(e) => Some(GraphEvent::Failed { owner, error: e.to_string() }),
        };
        if let (Some(event), Some(report)) = (event, self.report.lock().clone()) {
            report(&event);
        }
        let mut slots = self.slots.lock();
        let slot = slots.entry(owner).or_default();
        slot.building = false;
        match &outcome {
            Ok(Some(graph)) => {
                slot.failed = None;
                let old = slot.graph.replace(Arc::clone(graph));
                if let (Some(dir), Some(old)) = (&self.dir, old)
                    && old.watermark != graph.watermark
                {
                    let _ = std::fs::remove_file(dir.join(file_name(owner, old.watermark)));
                }
            }
            Ok(None) => {}
            Err(_) => slot.failed = Some((expected, std::time::Instant::now())),
        }
        outcome
    }
}

fn options(dim: usize) -> IndexOptions {
    IndexOptions {
        dimensions: dim,
        // The vectors are unit length: cosine is their inner product.
        metric: MetricKind::IP,
        // Half the memory of f32; candidates are scored again exactly.
        quantization: ScalarKind::BF16,
        connectivity: 0,
        expansion_add: 128,
        expansion_search: 64,
        multi: false,
    }
}

/// Opens a saved graph memory-mapped.
fn view(path: &Path, watermark: u64) -> Result<Graph, SearchError> {
    let text = path.to_str().ok_or_else(|| io_error("not UTF-8:", path, ""))?;
    let index = Index::restore_view(text).map_err(|e| io_error("cannot open", path, e))?;
    index.change_expansion_search(64);
    Ok(Graph {
        size: index.size() as u64,
        dim: index.dimensions(),
        index,
        watermark,
        searching: Mutex::new(()),
        searches: AtomicU64::new(0),
    })
}
